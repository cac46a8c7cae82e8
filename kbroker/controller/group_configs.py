"""Group-level dynamic configs (ConfigResource type GROUP = 32, KIP-848 / KIP-932 / KIP-1071), as Kafka's ``GroupConfig``.

A group's configs are ConfigRecords with resource type 32 and the group id as resource name, set through
IncrementalAlterConfigs / AlterConfigs and read back with DescribeConfigs. A key the group does not set takes the
value of its broker-level synonym (``consumer.session.timeout.ms`` -> ``group.consumer.session.timeout.ms``, ...),
or Kafka's default when the broker sets none.

Validation (:func:`validate_group_configs`, Kafka's ``GroupConfig.validate`` as of 4.x, every error INVALID_CONFIG):

1. the group name must not be empty: INVALID_REQUEST "Default group resources are not allowed.";
2. null values: "Null value not supported for group configs: <keys>";
3. unknown keys: "Unknown group config name: <key>";
4. each value parsed as Kafka's ConfigDef: "Invalid value <v> for configuration <key>: <why>" (type, ``atLeast``
   lower bounds, the valid strings);
5. only the keys the group sets, against the broker's bounds: "<key> must be greater than or equal to <min key>"
   or "<key> must be less than or equal to <max key>", naming the broker key of the bound
   (``group.consumer.min/max.session.timeout.ms``, ``group.consumer.min/max.heartbeat.interval.ms`` and their
   share / streams / assignment interval counterparts, ``group.streams.max.standby.replicas``);
6. a session timeout must exceed its heartbeat interval (the broker's value standing in for the one not set):
   "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms".

:func:`effective_group_config` gives the values a coordinator uses for one group.
"""

from __future__ import annotations

import re
from typing import Mapping

from kbroker.controller.topic_configs import TopicConfigKey, parse_config_value
from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["GROUP_CONFIG_KEYS", "GROUP_DOCS", "GROUP_RESOURCE", "USED_GROUP_KEYS", "GROUP_BROKER_SYNONYMS", "broker_group_bounds",
           "effective_group_config", "validate_group_configs"]

#: ConfigResource type of a group (DescribeConfigs / IncrementalAlterConfigs ``ResourceType``).
GROUP_RESOURCE = 32

_ISO_DURATION = re.compile(r"[-+]?P(?:[-+]?\d+D)?(?:T(?:[-+]?\d+H)?(?:[-+]?\d+M)?(?:[-+]?\d+(?:[.,]\d{0,9})?S)?)?",
                           re.IGNORECASE)


def _auto_offset_reset(value: object) -> str | None:
    text = str(value).strip().lower()
    if text in ("earliest", "latest"):
        return None
    if text.startswith("by_duration:"):
        duration = text[len("by_duration:"):]
        if _ISO_DURATION.fullmatch(duration) and duration not in ("p", "pt") and not duration.startswith("-"):
            return None
    return ("The value must be either 'earliest', 'latest' or of the format "
            "'by_duration:<PnDTnHnMn.nS.>'.")


#: Kafka's group config keys: type, default (Kafka's default of the broker synonym) and ConfigDef bounds.
GROUP_CONFIG_KEYS: dict[str, TopicConfigKey] = {k.name: k for k in [
    TopicConfigKey("consumer.session.timeout.ms", "int", "45000", lo=1),
    TopicConfigKey("consumer.heartbeat.interval.ms", "int", "5000", lo=1),
    TopicConfigKey("consumer.assignment.interval.ms", "int", "1000", lo=0),
    TopicConfigKey("share.assignment.interval.ms", "int", "1000", lo=0),
    TopicConfigKey("streams.assignment.interval.ms", "int", "1000", lo=0),
    TopicConfigKey("share.session.timeout.ms", "int", "45000", lo=1),
    TopicConfigKey("share.heartbeat.interval.ms", "int", "5000", lo=1),
    TopicConfigKey("share.record.lock.duration.ms", "int", "30000", lo=1000),
    TopicConfigKey("share.delivery.count.limit", "int", "5", lo=2),
    TopicConfigKey("share.partition.max.record.locks", "int", "2000", lo=100),
    TopicConfigKey("share.auto.offset.reset", "string", "latest", check=_auto_offset_reset),
    TopicConfigKey("share.isolation.level", "string", "read_uncommitted",
                   choices=("read_committed", "read_uncommitted")),
    TopicConfigKey("share.renew.acknowledge.enable", "boolean", "true"),
    TopicConfigKey("streams.session.timeout.ms", "int", "45000", lo=1),
    TopicConfigKey("streams.heartbeat.interval.ms", "int", "5000", lo=1),
    TopicConfigKey("streams.num.standby.replicas", "int", "0", lo=0),
    TopicConfigKey("streams.initial.rebalance.delay.ms", "int", "3000", lo=0),
]}

#: one line per group key for docs/configuration.md
GROUP_DOCS: dict[str, str] = {
    "consumer.session.timeout.ms": "Session timeout of this consumer group's KIP-848 members.",
    "consumer.heartbeat.interval.ms": "Heartbeat interval of this consumer group's KIP-848 members.",
    "consumer.assignment.interval.ms": "Least time between two assignment updates of this consumer group.",
    "share.assignment.interval.ms": "Least time between two assignment updates of this share group.",
    "streams.assignment.interval.ms": "Least time between two assignment updates of this streams group.",
    "share.session.timeout.ms": "Session timeout of this share group's members (KIP-932).",
    "share.heartbeat.interval.ms": "Heartbeat interval of this share group's members.",
    "share.record.lock.duration.ms": "How long a share group member holds a delivered record.",
    "share.delivery.count.limit": "Delivery attempts of a record before a share group archives it.",
    "share.partition.max.record.locks": "Records of one share-partition that may be in flight at once.",
    "share.auto.offset.reset": "Where a share group starts on a partition: earliest, latest or by_duration:<ISO 8601>.",
    "share.isolation.level": "Whether a share group delivers aborted transactional records (read_uncommitted).",
    "share.renew.acknowledge.enable": "Whether share consumers may renew their record locks.",
    "streams.session.timeout.ms": "Session timeout of this streams group's members (KIP-1071).",
    "streams.heartbeat.interval.ms": "Heartbeat interval of this streams group's members.",
    "streams.num.standby.replicas": "Standby replicas of each task of this streams group.",
    "streams.initial.rebalance.delay.ms": "How long a new streams group waits before its first assignment.",
}

#: group keys kbroker's coordinator acts on (the others are validated, stored and described)
USED_GROUP_KEYS = frozenset({"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
                             "consumer.assignment.interval.ms", "share.assignment.interval.ms"})

#: group key -> the broker key whose value is the group's default (None: the key's own default).
GROUP_BROKER_SYNONYMS: dict[str, str | None] = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "consumer.assignment.interval.ms": "group.consumer.assignment.interval.ms",
    "share.assignment.interval.ms": "group.share.assignment.interval.ms",
    "streams.assignment.interval.ms": "group.streams.assignment.interval.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
    "share.auto.offset.reset": None,
    "share.isolation.level": None,
    "share.renew.acknowledge.enable": None,
    "streams.session.timeout.ms": "group.streams.session.timeout.ms",
    "streams.heartbeat.interval.ms": "group.streams.heartbeat.interval.ms",
    "streams.num.standby.replicas": "group.streams.num.standby.replicas",
    "streams.initial.rebalance.delay.ms": "group.streams.initial.rebalance.delay.ms",
}

#: group key -> (broker key of the lowest allowed value or None, its default, broker key of the highest, default)
_BOUNDS: dict[str, tuple[str | None, int, str | None, int]] = {
    "consumer.heartbeat.interval.ms": ("group.consumer.min.heartbeat.interval.ms", 5000,
                                       "group.consumer.max.heartbeat.interval.ms", 15000),
    "consumer.session.timeout.ms": ("group.consumer.min.session.timeout.ms", 45000,
                                    "group.consumer.max.session.timeout.ms", 60000),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", 5000,
                                    "group.share.max.heartbeat.interval.ms", 15000),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", 45000,
                                 "group.share.max.session.timeout.ms", 60000),
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms", 15000,
                                      "group.share.max.record.lock.duration.ms", 60000),
    "share.delivery.count.limit": ("group.share.min.delivery.count.limit", 2,
                                   "group.share.max.delivery.count.limit", 10),
    "share.partition.max.record.locks": ("group.share.min.partition.max.record.locks", 100,
                                         "group.share.max.partition.max.record.locks", 4000),
    "streams.heartbeat.interval.ms": ("group.streams.min.heartbeat.interval.ms", 5000,
                                      "group.streams.max.heartbeat.interval.ms", 15000),
    "streams.session.timeout.ms": ("group.streams.min.session.timeout.ms", 45000,
                                   "group.streams.max.session.timeout.ms", 60000),
    "streams.num.standby.replicas": (None, 0, "group.streams.max.standby.replicas", 2),
    "consumer.assignment.interval.ms": ("group.consumer.min.assignment.interval.ms", 0,
                                        "group.consumer.max.assignment.interval.ms", 2147483647),
    "share.assignment.interval.ms": ("group.share.min.assignment.interval.ms", 0,
                                     "group.share.max.assignment.interval.ms", 15000),
    "streams.assignment.interval.ms": ("group.streams.min.assignment.interval.ms", 0,
                                       "group.streams.max.assignment.interval.ms", 2147483647),
}

_SESSION_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                      ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
                      ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))


def _broker_int(props: Mapping[str, str], key: str | None, default: int) -> int:
    raw = props.get(key) if key else None
    try:
        return int(str(raw).strip()) if raw is not None and str(raw).strip() else default
    except ValueError:
        return default


def broker_group_bounds(props: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    """group key -> (lowest, highest) value the broker allows (``props``: the broker's configs, Kafka's defaults
    for the keys it does not set)."""
    return {k: (_broker_int(props, lo_key, lo) if lo_key else lo, _broker_int(props, hi_key, hi))
            for k, (lo_key, lo, hi_key, hi) in _BOUNDS.items()}


def _broker_default(props: Mapping[str, str], key: str) -> str:
    synonym = GROUP_BROKER_SYNONYMS.get(key)
    value = props.get(synonym) if synonym else None
    if value is not None and str(value).strip():
        return str(value).strip()
    return GROUP_CONFIG_KEYS[key].default or ""


def validate_group_configs(name: str, configs: Mapping[str, str | None], broker_props: Mapping[str, str]) -> None:
    """Check the overrides group ``name`` would end up with (the module docstring's rules, in that order);
    ``broker_props`` are the broker's configs (bounds and defaults). Raises ``KafkaError``."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    nulls = [k for k, v in configs.items() if v is None]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Null value not supported for group configs: " + ",".join(nulls))
    for key in configs:
        if key not in GROUP_CONFIG_KEYS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {key}")
    parsed = {k: parse_config_value(GROUP_CONFIG_KEYS[k], v) for k, v in configs.items()}  # type: ignore[arg-type]
    bounds = broker_group_bounds(broker_props)
    for key, (lo, hi) in bounds.items():
        if key not in parsed:
            continue
        value = parsed[key]
        lo_key, _, hi_key, _ = _BOUNDS[key]
        # Kafka names the broker key of the bound that was crossed
        if lo_key is not None and value < lo:  # type: ignore[operator]
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key} must be greater than or equal to {lo_key}")
        if value > hi:  # type: ignore[operator]
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key} must be less than or equal to {hi_key}")
    for session, heartbeat in _SESSION_HEARTBEAT:
        if session in parsed or heartbeat in parsed:
            s = parsed.get(session, int(_broker_default(broker_props, session)))
            h = parsed.get(heartbeat, int(_broker_default(broker_props, heartbeat)))
            if s <= h:  # type: ignore[operator]
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{session} must be greater than {heartbeat}")


def effective_group_config(overrides: Mapping[str, str], broker_props: Mapping[str, str]) -> dict[str, object]:
    """Every group key with the value a coordinator uses for one group: the group's override (``overrides``, from
    ``MetadataImage.group_configs(group_id)``), else the broker synonym from ``broker_props``, else Kafka's
    default. Values are parsed (int / bool / str); an override the broker's bounds have since narrowed is kept
    within them (Kafka's ``GroupConfig.evaluate``)."""
    bounds = broker_group_bounds(broker_props)
    out: dict[str, object] = {}
    for key, spec in GROUP_CONFIG_KEYS.items():
        raw = overrides.get(key)
        try:
            value = parse_config_value(spec, raw) if raw is not None else None
        except KafkaError:
            value = None
        if value is None:
            try:
                value = parse_config_value(spec, _broker_default(broker_props, key))
            except KafkaError:
                value = parse_config_value(spec, spec.default or "")
        elif key in bounds:
            lo, hi = bounds[key]
            value = min(max(value, lo), hi)  # type: ignore[type-var]
        if isinstance(value, str):
            value = value.lower()
        out[key] = value
    return out
