"""DescribeConfigs (API key 32), versions 1-4.

Behavior:
* TOPIC resources (type 2): every topic-level key Kafka 4.x defines (plus any override that is set, such as
  the internal ``internal.segment.bytes``), with the effective value and its source. Synonyms
  (``IncludeSynonyms``) list, in Kafka's precedence order: the topic override (DYNAMIC_TOPIC_CONFIG), then
  for the broker-level synonyms of the key (``log.retention.ms``, ``log.retention.minutes``,
  ``log.retention.hours`` ...) the per-broker dynamic values (DYNAMIC_BROKER_CONFIG), the cluster-default
  dynamic values (DYNAMIC_DEFAULT_BROKER_CONFIG), ``server.properties`` (STATIC_BROKER_CONFIG) and Kafka's
  defaults (DEFAULT_CONFIG), of which Kafka drops every entry before the first one named exactly the key's
  broker name (``retention.ms`` at its default: no synonyms). The first synonym is the source; a key without
  synonyms is DEFAULT_CONFIG, even when its value comes from a lower-precedence broker synonym;
* BROKER resources (type 4) named after this node id: every broker key kbroker defines
  (:data:`~kbroker.controller.config_def.BROKER_CONFIG_DEF`, but the keys Kafka lists only when set) and every
  key set in ``server.properties`` or dynamically, each with the same four-level synonym chain over its own
  synonyms (``log.roll.ms``/``log.roll.hours`` ...), Kafka's type (PASSWORD keys are sensitive) and Kafka's
  default (null, or ``""`` for the keys whose default is empty); dynamic keys are not read-only. ``broker.id``
  follows ``node.id`` as in Kafka. Named ``""``: only the cluster-default dynamic configs;
* BROKER_LOGGER resources (type 8, KIP-412) named after this node id: every logger (``root`` and kbroker's
  own) with its effective level in log4j's names (:mod:`kbroker.server.broker_loggers`);
* GROUP resources (type 32, KIP-848): every group-level key Kafka defines
  (:mod:`kbroker.controller.group_configs`), with the group's override (source GROUP_CONFIG, 8) or else the broker's
  value of its synonym (``group.consumer.session.timeout.ms`` ...) or Kafka's default (DEFAULT_CONFIG). Synonyms, as
  Kafka 4.3: the override (GROUP_CONFIG) when set, then the broker key it defaults to with the broker's value
  (STATIC_BROKER_CONFIG when ``server.properties`` sets it, else DEFAULT_CONFIG; the group key's own name for
  ``share.auto.offset.reset`` and the other keys without a broker synonym). The group need not exist; an empty
  name is INVALID_REQUEST "Group name must not be empty";
* CLIENT_METRICS resources (type 16, KIP-714): the subscription's keys, or the defaults for a name without one;
* ``ConfigurationKeys`` restricts the keys; unknown topics get UNKNOWN_TOPIC_OR_PARTITION, other brokers'
  ids or other resource types INVALID_REQUEST. Keys whose name contains ``password``, and ``ssl.keystore.key`` /
  ``sasl.jaas.config`` (Kafka's PASSWORD keys), are sensitive (null).
Version notes: v3 ConfigType and documentation (documentation is not carried: null); v4 flexible.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from kbroker.config import BROKER_DEFAULTS
from kbroker.controller.broker_configs import DYNAMIC_BROKER_CONFIGS, broker_synonyms
from kbroker.controller.config_def import BROKER_CONFIG_DEF, EMPTY_STRING_DEFAULTS, LISTED_ONLY_WHEN_SET
from kbroker.controller.group_configs import (GROUP_BROKER_SYNONYMS, GROUP_CONFIG_KEYS, GROUP_RESOURCE,
                                              effective_group_config)
from kbroker.controller.topic_configs import TOPIC_CONFIG_KEYS
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse as R
from kbroker.server.authorizer import AclOperation
from kbroker.server.broker_loggers import describe_loggers
from kbroker.server.handlers import common
from kbroker.storage.config import BROKER_TO_TOPIC_KEYS

API_KEY = ApiKey.DESCRIBE_CONFIGS
VERSIONS = range(1, 5)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
DYNAMIC_BROKER_LOGGER_CONFIG = 6  # ConfigSource
TYPE_UNKNOWN = 0
CLIENT_METRICS_CONFIG = 7  # ConfigSource
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = (
    1, 2, 3, 4, 5)
GROUP_CONFIG = 8
TYPE_STRING = 2
_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
             "password": 9}

#: Topic keys whose broker synonyms the storage layer does not use (it does not honour these keys).
_EXTRA_TOPIC_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "preallocate": (("log.preallocate", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}
#: Topic keys Kafka 4.x no longer has (accepted on create for old tools, never listed).
_UNLISTED_TOPIC_KEYS = frozenset({"message.downconversion.enable"})


def topic_synonyms(key: str) -> tuple[tuple[str, int], ...]:
    """Broker-level synonyms of topic key ``key`` with their unit multipliers, highest precedence first."""
    return BROKER_TO_TOPIC_KEYS.get(key) or _EXTRA_TOPIC_SYNONYMS.get(key, ())


def broker_default(name: str) -> str | None:
    """Kafka's default for a broker key: None when it has none (e.g. ``log.retention.ms``), ``""`` for the keys
    whose default is the empty string or list (:data:`EMPTY_STRING_DEFAULTS`)."""
    value = BROKER_DEFAULTS.get(name)
    if value:
        return value
    spec = BROKER_CONFIG_DEF.get(name)
    if spec is not None and spec.key.default:
        return spec.key.default
    return "" if name in EMPTY_STRING_DEFAULTS else None


def broker_layers(broker) -> list[tuple[Mapping[str, str], int]]:  # noqa: ANN001
    """The broker config sources, highest precedence first (Kafka's ``configSynonyms`` order)."""
    image = broker.controller.image
    defaults = {k: v for k in set(BROKER_DEFAULTS) | set(BROKER_CONFIG_DEF)
                if k not in LISTED_ONLY_WHEN_SET and (v := broker_default(k)) is not None}
    static = broker.config.props
    if "broker.id" not in static:  # Kafka copies node.id into broker.id when only node.id is set (KRaft)
        static = {**static, "broker.id": str(broker.node_id)}
    return [(image.broker_configs(broker.node_id), DYNAMIC_BROKER_CONFIG),
            (image.broker_configs(), DYNAMIC_DEFAULT_BROKER_CONFIG),
            (static, STATIC_BROKER_CONFIG),
            (defaults, DEFAULT_CONFIG)]


def _chain(layers: list[tuple[Mapping[str, str], int]], names: Iterable[str]) -> list[tuple[str, str, int]]:
    names = list(names)
    return [(n, layer[n], source) for layer, source in layers for n in names if n in layer]


def _sensitive(name: str) -> bool:
    """Kafka's PASSWORD-typed keys (per listener too): their values are never answered."""
    return "password" in name or name.endswith((".ssl.keystore.key", ".sasl.jaas.config")) or name in (
        "ssl.keystore.key", "sasl.jaas.config")


def _topic_entries(ctx, topic: str, keys, synonyms: bool,
                   would_be: Mapping[str, str] | None = None) -> list[R.DescribeConfigsResourceResult]:
    """The topic's config entries; ``would_be``: the overrides of a topic not created yet (CreateTopics with
    validate_only answers the configs it would have), instead of the committed ones."""
    broker = ctx.broker
    if would_be is None:
        overrides = broker.controller.image.configs.get((TOPIC, topic), {})
        effective = broker.topic_configs(topic)
    else:
        overrides, effective = dict(would_be), {**broker.topic_defaults(), **would_be}
    layers = broker_layers(broker)
    names = {k for k, spec in TOPIC_CONFIG_KEYS.items() if not spec.internal and k not in _UNLISTED_TOPIC_KEYS}
    out = []
    for key in sorted(names | set(overrides)):
        if keys is not None and key not in keys:
            continue
        chain = [(key, overrides[key], DYNAMIC_TOPIC_CONFIG)] if key in overrides else []
        syns = topic_synonyms(key)
        broker_chain = _chain(layers, (n for n, _ in syns))
        # Kafka's rule (ConfigHelper): the broker synonyms of the key's broker name, then everything before the
        # first entry named exactly that broker name is dropped. So retention.ms at its default lists nothing
        # (log.retention.hours=168 comes before any log.retention.ms), and neither does a static
        # log.retention.hours alone: the value follows it, the source says DEFAULT_CONFIG.
        while broker_chain and broker_chain[0][0] != syns[0][0]:
            broker_chain.pop(0)
        chain += broker_chain
        if key in overrides:
            value = overrides[key]
        elif key in effective:
            value = effective[key]
        elif chain:
            name, raw, _ = chain[0]
            mult = dict(syns)[name]
            value = raw if mult == 1 else str(int(raw) * mult)
        else:
            spec = TOPIC_CONFIG_KEYS.get(key)
            value = spec.default if spec is not None else None
        spec = TOPIC_CONFIG_KEYS.get(key)
        sensitive = _sensitive(key)
        entry = R.DescribeConfigsResourceResult(
            name=key, value=None if sensitive else value, read_only=False,
            config_source=chain[0][2] if chain else DEFAULT_CONFIG, is_sensitive=sensitive,
            config_type=_TYPE_IDS.get(spec.type, TYPE_STRING) if spec else TYPE_STRING, documentation=None)
        if synonyms:
            entry.synonyms = [R.DescribeConfigsSynonym(name=n, value=None if sensitive else v, source=s)
                              for n, v, s in chain]
        out.append(entry)
    return out


def _broker_entries(ctx, per_broker: bool, keys, synonyms: bool) -> list[R.DescribeConfigsResourceResult]:
    broker = ctx.broker
    layers = broker_layers(broker)
    if per_broker:
        names = {k for k in BROKER_CONFIG_DEF if k not in LISTED_ONLY_WHEN_SET} | set(broker.config.props)
        for layer, _ in layers[:2]:
            names |= set(layer)
    else:
        names = set(layers[1][0])
        layers = [layers[1]]
    out = []
    for name in sorted(names):
        if keys is not None and name not in keys:
            continue
        chain = _chain(layers, broker_synonyms(name))
        while chain and chain[0][0] != name:  # Kafka drops synonyms ranked above the key's own name
            chain.pop(0)
        value = chain[0][1] if chain else None
        spec = BROKER_CONFIG_DEF.get(name)
        kind = spec.config_type if spec is not None else "string"
        sensitive = _sensitive(name) or kind == "password"
        if value == "" and name not in EMPTY_STRING_DEFAULTS:
            value = None  # an unset optional key (Kafka's default null)
        entry = R.DescribeConfigsResourceResult(
            name=name, value=None if sensitive else value, read_only=name not in DYNAMIC_BROKER_CONFIGS,
            config_source=chain[0][2] if chain else DEFAULT_CONFIG, is_sensitive=sensitive,
            config_type=_TYPE_IDS.get(kind, TYPE_STRING), documentation=None)
        if synonyms:
            entry.synonyms = [R.DescribeConfigsSynonym(name=n, value=None if sensitive else v, source=s)
                              for n, v, s in chain]
        out.append(entry)
    return out


def _group_entries(ctx, group: str, keys, synonyms: bool) -> list[R.DescribeConfigsResourceResult]:
    overrides = ctx.broker.controller.image.configs.get((GROUP_RESOURCE, group), {})
    props = ctx.broker.config.props
    effective = effective_group_config(overrides, props)
    broker_values = effective_group_config({}, props)
    out = []
    for key in sorted(GROUP_CONFIG_KEYS):
        if keys is not None and key not in keys:
            continue
        spec = GROUP_CONFIG_KEYS[key]
        value = effective[key]
        text = str(value).lower() if isinstance(value, bool) else str(value)
        broker_key = GROUP_BROKER_SYNONYMS.get(key)
        # Kafka: a key the group does not override takes its broker key's source (server.properties: static)
        source = GROUP_CONFIG if key in overrides else (
            STATIC_BROKER_CONFIG if broker_key and str(props.get(broker_key, "")).strip() else DEFAULT_CONFIG)
        entry = R.DescribeConfigsResourceResult(
            name=key, value=text, read_only=False, config_source=source, is_sensitive=False,
            config_type=_TYPE_IDS.get(spec.type, TYPE_STRING), documentation=None)
        if synonyms:
            # the group's override, then the broker-level key it defaults to (its own name when the broker has
            # none), as Kafka 4.3 lists them
            entry.synonyms = [R.DescribeConfigsSynonym(name=key, value=text, source=GROUP_CONFIG)] \
                if key in overrides else []
            broker_key = GROUP_BROKER_SYNONYMS.get(key) or key
            base = broker_values[key]
            entry.synonyms.append(R.DescribeConfigsSynonym(
                name=broker_key, value=str(base).lower() if isinstance(base, bool) else str(base),
                source=STATIC_BROKER_CONFIG if broker_key in props else DEFAULT_CONFIG))
        out.append(entry)
    return out


def _client_metrics_entries(image, name: str, keys,  # noqa: ANN001
                            synonyms: bool = True) -> list[R.DescribeConfigsResourceResult]:
    """A client metrics subscription (KIP-714): every key (``metrics``, ``interval.ms``, ``match``), those it sets
    with source CLIENT_METRICS_CONFIG and themselves as their one synonym, the others at their default
    (DEFAULT_CONFIG, no synonyms), as Kafka 4.3; a name without a subscription lists the defaults."""
    from kbroker.controller.client_metrics import CLIENT_METRICS_KEYS, CLIENT_METRICS_RESOURCE

    cfg = image.configs.get((CLIENT_METRICS_RESOURCE, name), {})
    out = []
    for k in sorted(set(cfg) | set(CLIENT_METRICS_KEYS)):
        if keys is not None and k not in keys:
            continue
        kind, default = CLIENT_METRICS_KEYS.get(k, ("string", ""))
        if k in cfg:
            value, source = cfg[k], CLIENT_METRICS_CONFIG
            syns = [R.DescribeConfigsSynonym(name=k, value=value, source=CLIENT_METRICS_CONFIG)] if synonyms else []
        else:
            value, source, syns = default, DEFAULT_CONFIG, []
        out.append(R.DescribeConfigsResourceResult(
            name=k, value=value, read_only=False, config_source=source, is_sensitive=False, synonyms=syns,
            config_type=_TYPE_IDS.get(kind, TYPE_STRING), documentation=None))
    return out


async def handle(ctx, request: DescribeConfigsRequest) -> R:
    image = ctx.broker.controller.image
    resp = R()
    check = ctx.broker.authorizer is not None
    for res in request.resources:
        result = R.DescribeConfigsResult(resource_type=res.resource_type, resource_name=res.resource_name)
        resp.results.append(result)
        if check and (denied := common.config_resource_denied(ctx, AclOperation.DESCRIBE_CONFIGS,
                                                              res.resource_type, res.resource_name)):
            result.error_code, result.error_message = denied, common.AUTHORIZATION_MESSAGES[denied]
            continue
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if res.resource_type == TOPIC:
            if res.resource_name not in image.topics_by_name:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"Topic {res.resource_name} does not exist"
                continue
            result.configs = _topic_entries(ctx, res.resource_name, keys, request.include_synonyms)
        elif res.resource_type == BROKER:
            name = res.resource_name
            if name and not name.lstrip("-").isdigit():
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Broker id must be an integer, but it is: {name}"
                continue
            if name and int(name) != ctx.broker.node_id:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = (f"Unexpected broker id, expected {ctx.broker.node_id} or empty string, "
                                        f"but received {name}")
                continue
            result.configs = _broker_entries(ctx, bool(name), keys, request.include_synonyms)
        elif res.resource_type == GROUP_RESOURCE:
            if not res.resource_name:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = "Group name must not be empty"
                continue
            result.configs = _group_entries(ctx, res.resource_name, keys, request.include_synonyms)
        elif res.resource_type == BROKER_LOGGER:
            name = res.resource_name
            if not name.lstrip("-").isdigit() or int(name) != ctx.broker.node_id:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = (f"Unexpected broker id, expected {ctx.broker.node_id}, but received {name}"
                                        if name.lstrip("-").isdigit() else
                                        f"Broker id must be an integer, but it is: {name}")
                continue
            result.configs = [R.DescribeConfigsResourceResult(
                name=logger, value=level, read_only=False, config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
                is_sensitive=False, synonyms=[], config_type=TYPE_UNKNOWN, documentation=None)
                for logger, level in describe_loggers(keys)]
        elif res.resource_type == CLIENT_METRICS:
            if not res.resource_name:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = "Client metrics subscription name must not be empty"
                continue
            result.configs = _client_metrics_entries(image, res.resource_name, keys, request.include_synonyms)
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unsupported resource type {res.resource_type}"
    return resp
