"""Topic keys used by compaction, timestamps and compression levels; ``internal.segment.bytes``."""

from __future__ import annotations

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.storage.config import LONG_MAX, LogConfig, topic_defaults_from_broker


def test_cleaner_and_timestamp_keys():
    cfg = LogConfig.from_props({"min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100",
                                "min.compaction.lag.ms": "5", "max.compaction.lag.ms": "50",
                                "message.timestamp.before.max.ms": "1000", "cleanup.policy": "compact,delete"})
    assert cfg.min_cleanable_dirty_ratio == 0.01 and cfg.delete_retention_ms == 100
    assert (cfg.min_compaction_lag_ms, cfg.max_compaction_lag_ms) == (5, 50)
    assert cfg.message_timestamp_before_max_ms == 1000 and cfg.message_timestamp_after_max_ms == 3_600_000
    assert cfg.compact and cfg.delete
    assert LogConfig().max_compaction_lag_ms == LONG_MAX and not LogConfig().compact
    for bad in ({"min.cleanable.dirty.ratio": "1.5"}, {"min.cleanable.dirty.ratio": "x"},
                {"compression.lz4.level": "18"}):
        with pytest.raises(KafkaError) as ei:
            LogConfig.from_props(bad)
        assert ei.value.code == ErrorCode.INVALID_CONFIG


def test_internal_segment_bytes_wins_over_segment_bytes():
    assert LogConfig.from_props({"internal.segment.bytes": "500", "segment.bytes": "1048576"}).segment_bytes == 500
    assert LogConfig.from_props({"segment.bytes": "1048576"}).segment_bytes == 1048576
    assert "internal.segment.bytes" not in LogConfig().to_props()


def test_cleaner_broker_synonyms():
    got = topic_defaults_from_broker({"log.cleaner.delete.retention.ms": "7", "log.cleaner.min.cleanable.ratio": "0.1",
                                      "log.message.timestamp.after.max.ms": "9"})
    assert got == {"delete.retention.ms": "7", "min.cleanable.dirty.ratio": "0.1",
                   "message.timestamp.after.max.ms": "9"}
