"""Validation of topic-level config overrides (CreateTopics, and later AlterConfigs).

The key set, value types and ranges are facts from Apache Kafka 4.x's topic config definitions
(``TopicConfig`` / ``LogConfig``): unknown keys, unparsable values and out-of-range values are rejected
with ``INVALID_CONFIG``. Kafka 4.x removed ``message.format.version``, ``message.downconversion.enable``
and ``message.timestamp.difference.max.ms``; ``message.downconversion.enable`` is still accepted here
(and ignored) so that older tooling that sets it keeps working.

Effective values (defaults and broker-level synonyms) are the log layer's business
(:mod:`kbroker.storage.config`); this module only decides whether an override may be stored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["TOPIC_CONFIG_KEYS", "TopicConfigKey", "validate_topic_configs"]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_INT_RE = re.compile(r"[+-]?\d+")
_DOUBLE_RE = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|Infinity|NaN)[dDfF]?")


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    name: str
    type: str  # "int" | "long" | "double" | "boolean" | "string" | "list"
    default: str | None
    lo: float | None = None  # inclusive range for numbers
    hi: float | None = None
    choices: tuple[str, ...] | None = None  # valid strings / list items
    check: Callable[[object], str | None] | None = None  # extra validation -> error text
    internal: bool = False


def _gzip_level(v: object) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be -1 or in the range [1, 9]"  # type: ignore[operator]


def _throttled_replicas(v: object) -> str | None:
    items = v  # list[str]
    assert isinstance(items, list)
    if items == ["*"] or all(re.fullmatch(r"\d+:\d+", x) for x in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


_KEYS = [
    TopicConfigKey("cleanup.policy", "list", "delete", choices=("compact", "delete")),
    TopicConfigKey("compression.type", "string", "producer",
                   choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    TopicConfigKey("compression.gzip.level", "int", "-1", check=_gzip_level),
    TopicConfigKey("compression.lz4.level", "int", "9", lo=1, hi=17),
    TopicConfigKey("compression.zstd.level", "int", "3", lo=-131072, hi=22),
    TopicConfigKey("delete.retention.ms", "long", "86400000", lo=0),
    TopicConfigKey("file.delete.delay.ms", "long", "60000", lo=0),
    TopicConfigKey("flush.messages", "long", str(LONG_MAX), lo=1),
    TopicConfigKey("flush.ms", "long", str(LONG_MAX), lo=0),
    TopicConfigKey("follower.replication.throttled.replicas", "list", "", check=_throttled_replicas),
    TopicConfigKey("index.interval.bytes", "int", "4096", lo=0),
    TopicConfigKey("leader.replication.throttled.replicas", "list", "", check=_throttled_replicas),
    TopicConfigKey("local.retention.bytes", "long", "-2", lo=-2),
    TopicConfigKey("local.retention.ms", "long", "-2", lo=-2),
    TopicConfigKey("max.compaction.lag.ms", "long", str(LONG_MAX), lo=1),
    TopicConfigKey("max.message.bytes", "int", "1048588", lo=0),
    TopicConfigKey("message.downconversion.enable", "boolean", "true"),  # removed in 4.0; accepted, ignored
    TopicConfigKey("message.timestamp.after.max.ms", "long", "3600000", lo=0),
    TopicConfigKey("message.timestamp.before.max.ms", "long", str(LONG_MAX), lo=0),
    TopicConfigKey("message.timestamp.type", "string", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    TopicConfigKey("min.cleanable.dirty.ratio", "double", "0.5", lo=0, hi=1),
    TopicConfigKey("min.compaction.lag.ms", "long", "0", lo=0),
    TopicConfigKey("min.insync.replicas", "int", "1", lo=1),
    TopicConfigKey("preallocate", "boolean", "false"),
    TopicConfigKey("remote.log.copy.disable", "boolean", "false"),
    TopicConfigKey("remote.log.delete.on.disable", "boolean", "false"),
    TopicConfigKey("remote.storage.enable", "boolean", "false"),
    TopicConfigKey("retention.bytes", "long", "-1"),
    TopicConfigKey("retention.ms", "long", "604800000", lo=-1),
    TopicConfigKey("segment.bytes", "int", "1073741824", lo=1024 * 1024),
    TopicConfigKey("segment.index.bytes", "int", "10485760", lo=4),
    TopicConfigKey("segment.jitter.ms", "long", "0", lo=0),
    TopicConfigKey("segment.ms", "long", "604800000", lo=1),
    TopicConfigKey("unclean.leader.election.enable", "boolean", "false"),
    # Kafka's test-only override of segment.bytes (no minimum); lets tests use tiny segments per topic.
    TopicConfigKey("internal.segment.bytes", "int", None, lo=1, internal=True),
]

#: topic config key -> definition
TOPIC_CONFIG_KEYS: Mapping[str, TopicConfigKey] = {k.name: k for k in _KEYS}


def _invalid(name: str, value: str, why: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {why}")


def parse_config_value(key: TopicConfigKey, raw: str) -> object:
    """Parse ``raw`` as Kafka's ConfigDef would for ``key`` and check its range / choices.

    Raises ``KafkaError(INVALID_CONFIG)``.
    """
    text = raw.strip()
    value: object
    if key.type in ("int", "long"):
        lo_t, hi_t = (INT_MIN, INT_MAX) if key.type == "int" else (LONG_MIN, LONG_MAX)
        if not _INT_RE.fullmatch(text) or not lo_t <= int(text) <= hi_t:
            raise _invalid(key.name, raw, f"Not a number of type {key.type.upper()}")
        value = int(text)
    elif key.type == "double":
        if not _DOUBLE_RE.fullmatch(text):
            raise _invalid(key.name, raw, "Not a number of type DOUBLE")
        value = float(text.rstrip("dDfF").replace("Infinity", "inf"))
        if math.isnan(value):  # type: ignore[arg-type]
            raise _invalid(key.name, raw, "Not a number of type DOUBLE")
    elif key.type == "boolean":
        if text.lower() not in ("true", "false"):
            raise _invalid(key.name, raw, "Expected value to be either true or false")
        value = text.lower() == "true"
    elif key.type == "list":
        value = [x.strip() for x in text.split(",")] if text else []
    else:
        value = text
    if key.lo is not None and value < key.lo:  # type: ignore[operator]
        raise _invalid(key.name, raw, f"Value must be at least {_num(key.lo)}")
    if key.hi is not None and value > key.hi:  # type: ignore[operator]
        raise _invalid(key.name, raw, f"Value must be no more than {_num(key.hi)}")
    if key.choices is not None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item not in key.choices:
                raise _invalid(key.name, raw, f"String must be one of: {', '.join(key.choices)}")
    if key.check is not None:
        why = key.check(value)
        if why:
            raise _invalid(key.name, raw, why)
    return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def validate_topic_configs(configs: Mapping[str, str | None], *, remote_storage_enabled: bool = False) -> None:
    """Check a set of topic config overrides; raises ``KafkaError(INVALID_CONFIG)`` on the first problem.

    Checks, in order: null values, unknown keys, each value's type and range, then the cross-key rules
    Kafka applies to a topic (min.compaction.lag.ms <= max.compaction.lag.ms; remote storage only when the
    broker has it enabled).
    """
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {','.join(nulls)}")
    parsed: dict[str, object] = {}
    for name, raw in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        parsed[name] = parse_config_value(key, raw)  # type: ignore[arg-type]

    def effective(name: str) -> object:
        if name in parsed:
            return parsed[name]
        key = TOPIC_CONFIG_KEYS[name]
        return parse_config_value(key, key.default or "")

    min_lag, max_lag = effective("min.compaction.lag.ms"), effective("max.compaction.lag.ms")
    if min_lag > max_lag:  # type: ignore[operator]
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                         f"max.compaction.lag.ms ({max_lag})")
    if effective("remote.storage.enable") and not remote_storage_enabled:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                                                   "Topic cannot be configured with remote log storage.")
