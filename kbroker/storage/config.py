"""Per-topic log configuration (Kafka topic-level config keys) and the broker-level keys they inherit from.

Key names, defaults and the broker-level synonyms are facts from Apache Kafka's topic/broker config
documentation (``TopicConfig`` / ``ServerLogConfigs``). Values are kept as Kafka spells them; "Long.MAX_VALUE"
is ``2**63 - 1``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Mapping

from kbroker.protocol.errors import ErrorCode, KafkaError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "flush.messages": str(LONG_MAX),
    "flush.ms": str(LONG_MAX),
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "file.delete.delay.ms": "60000",
    "message.timestamp.type": "CreateTime",
    "max.message.bytes": "1048588",
    "cleanup.policy": "delete",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(LONG_MAX),
    "message.timestamp.before.max.ms": str(LONG_MAX),
    "message.timestamp.after.max.ms": "3600000",
}
"""Topic-level key -> default value as a string (what DescribeConfigs reports as DEFAULT_CONFIG)."""

INTERNAL_SEGMENT_BYTES = "internal.segment.bytes"
"""Kafka's internal (test-only) topic key: overrides ``segment.bytes`` without its 1 MiB minimum."""

BROKER_TO_TOPIC_KEYS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
}
"""Topic-level key -> broker-level synonyms in priority order, each with the multiplier that converts the
broker value to the topic key's unit (e.g. ``log.retention.hours`` x 3 600 000 = ms). The first synonym present
in the broker config wins (DescribeConfigs reports it as STATIC_BROKER_CONFIG / DYNAMIC_*)."""

_INT_KEYS = {
    "segment.bytes": (14, INT_MAX),
    "segment.ms": (1, LONG_MAX),
    "segment.index.bytes": (4, INT_MAX),
    "index.interval.bytes": (0, INT_MAX),
    "flush.messages": (1, LONG_MAX),
    "flush.ms": (0, LONG_MAX),
    "retention.ms": (-1, LONG_MAX),
    "retention.bytes": (-1, LONG_MAX),
    "file.delete.delay.ms": (0, LONG_MAX),
    "max.message.bytes": (0, INT_MAX),
    "min.insync.replicas": (1, INT_MAX),
    "compression.gzip.level": (-1, 9),
    "compression.lz4.level": (1, 17),
    "compression.zstd.level": (-131072, 22),
    "delete.retention.ms": (0, LONG_MAX),
    "min.compaction.lag.ms": (0, LONG_MAX),
    "max.compaction.lag.ms": (1, LONG_MAX),
    "message.timestamp.before.max.ms": (0, LONG_MAX),
    "message.timestamp.after.max.ms": (0, LONG_MAX),
    INTERNAL_SEGMENT_BYTES: (1, INT_MAX),
}
_FLOAT_KEYS = {"min.cleanable.dirty.ratio": (0.0, 1.0)}
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP_POLICIES = ("delete", "compact")


def _key_to_attr(key: str) -> str:
    return key.replace(".", "_")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level log settings; attribute names are Kafka's keys with dots replaced by underscores.

    Units: ``*_ms`` milliseconds, ``*_bytes`` bytes, ``flush_messages`` messages. ``retention_ms`` and
    ``retention_bytes`` of -1 mean unlimited. ``cleanup_policy`` is a comma-separated list.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86400000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000

    @property
    def log_append_time(self) -> bool:
        """True when ``message.timestamp.type`` is LogAppendTime."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` includes ``compact`` (the log cleaner keeps the latest value per key)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` includes ``delete`` (time and size retention apply)."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_props(
        cls, props: Mapping[str, str], base: LogConfig | None = None, *, strict: bool = False
    ) -> LogConfig:
        """Build a config from Kafka dotted topic keys (string values), overlaying ``base`` (default: the
        Kafka defaults). Unknown keys are ignored unless ``strict``. Raises ``KafkaError(INVALID_CONFIG)``
        for an unparsable or out-of-range value or (strict) an unknown key.

        ``internal.segment.bytes`` (Kafka's test-only key, no 1 MiB minimum) wins over ``segment.bytes``."""
        base = base or cls()
        changes: dict[str, object] = {}
        for key, raw in props.items():
            if key == INTERNAL_SEGMENT_BYTES:
                continue
            if key not in TOPIC_CONFIG_DEFAULTS:
                if strict:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {key!r}")
                continue
            changes[_key_to_attr(key)] = parse_value(key, raw)
        if props.get(INTERNAL_SEGMENT_BYTES) not in (None, ""):
            changes["segment_bytes"] = parse_value(INTERNAL_SEGMENT_BYTES, props[INTERNAL_SEGMENT_BYTES])
        return replace(base, **changes) if changes else base

    @classmethod
    def from_broker_props(cls, props: Mapping[str, str]) -> LogConfig:
        """The broker-wide default topic config from broker keys (``log.segment.bytes``, ``log.retention.hours``
        ...) using ``BROKER_TO_TOPIC_KEYS``."""
        return cls.from_props(topic_defaults_from_broker(props))

    def to_props(self) -> dict[str, str]:
        """All keys as Kafka dotted names with string values."""
        return {f.name.replace("_", "."): str(getattr(self, f.name)) for f in fields(self)}

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def parse_value(key: str, raw: str | int | float) -> int | float | str:
    """Parse and range-check one topic config value. Raises ``KafkaError(INVALID_CONFIG)``."""
    if key in _FLOAT_KEYS:
        try:
            fvalue = float(str(raw).strip())
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}") from None
        flo, fhi = _FLOAT_KEYS[key]
        if not flo <= fvalue <= fhi:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"value {fvalue} for {key} is outside [{flo}, {fhi}]")
        return fvalue
    if key in _INT_KEYS:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}") from None
        lo, hi = _INT_KEYS[key]
        if not lo <= value <= hi:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"value {value} for {key} is outside [{lo}, {hi}]")
        return value
    text = str(raw).strip()
    if key == "message.timestamp.type" and text not in _TIMESTAMP_TYPES:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}")
    if key == "compression.type" and text not in _COMPRESSION_TYPES:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}")
    if key == "cleanup.policy":
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if any(p not in _CLEANUP_POLICIES for p in parts):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {key}")
        text = ",".join(parts)
    return text


def topic_defaults_from_broker(props: Mapping[str, str]) -> dict[str, str]:
    """Topic keys -> string values derived from broker-level keys present in ``props`` (first synonym in
    ``BROKER_TO_TOPIC_KEYS`` order wins, scaled to the topic unit). Keys with no broker value are omitted."""
    out: dict[str, str] = {}
    for topic_key, synonyms in BROKER_TO_TOPIC_KEYS.items():
        for broker_key, mult in synonyms:
            raw = props.get(broker_key)
            if raw is None or str(raw).strip() == "":
                continue
            if mult != 1:
                try:
                    scaled = int(str(raw).strip()) * mult
                    out[topic_key] = str(scaled if scaled >= 0 else -1)  # any negative means unlimited
                except ValueError:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {broker_key}") from None
            else:
                out[topic_key] = str(raw).strip()
            break
    return out
