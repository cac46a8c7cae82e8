"""LogConfig, checkpoint files, leader epoch cache, partition.metadata and meta.properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.storage.checkpoints import CheckpointError, OffsetCheckpointFile
from kbroker.storage.config import (
    BROKER_TO_TOPIC_KEYS,
    LONG_MAX,
    TOPIC_CONFIG_DEFAULTS,
    LogConfig,
    topic_defaults_from_broker,
)
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log import read_partition_metadata, write_partition_metadata
from kbroker.storage.log_manager import read_meta_properties, write_meta_properties
from kbroker.storage.util import parse_topic_partition, random_uuid, uuid_from_str, uuid_to_str


def test_defaults_match_table() -> None:
    cfg = LogConfig()
    assert cfg.to_props() == TOPIC_CONFIG_DEFAULTS
    assert LogConfig.from_props(TOPIC_CONFIG_DEFAULTS) == cfg
    assert cfg.flush_messages == cfg.flush_ms == LONG_MAX
    assert cfg.retention_ms == 7 * 24 * 3600 * 1000
    assert set(BROKER_TO_TOPIC_KEYS) <= set(TOPIC_CONFIG_DEFAULTS)


def test_from_props_parses_and_validates() -> None:
    cfg = LogConfig.from_props({"segment.bytes": "2048", "retention.ms": "-1", "message.timestamp.type": "LogAppendTime",
                                "unknown.key": "x", "cleanup.policy": "compact, delete"})
    assert cfg.segment_bytes == 2048 and cfg.retention_ms == -1 and cfg.log_append_time
    assert cfg.cleanup_policy == "compact,delete"
    for bad in ({"segment.bytes": "abc"}, {"retention.ms": "-5"}, {"compression.type": "brotli"},
                {"message.timestamp.type": "Now"}):
        with pytest.raises(KafkaError) as ei:
            LogConfig.from_props(bad)
        assert ei.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError):
        LogConfig.from_props({"unknown.key": "x"}, strict=True)
    base = LogConfig(segment_bytes=4096)
    assert LogConfig.from_props({"retention.bytes": "10"}, base).segment_bytes == 4096


def test_broker_key_mapping() -> None:
    assert topic_defaults_from_broker({"log.retention.hours": "1"}) == {"retention.ms": "3600000"}
    both = {"log.retention.hours": "1", "log.retention.ms": "5", "log.roll.hours": "2", "message.max.bytes": "77"}
    got = topic_defaults_from_broker(both)
    assert got == {"retention.ms": "5", "segment.ms": "7200000", "max.message.bytes": "77"}
    assert topic_defaults_from_broker({"log.retention.hours": "-1"}) == {"retention.ms": "-1"}
    assert LogConfig.from_broker_props({"log.segment.bytes": "1000"}).segment_bytes == 1000


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    assert f.read() == {}
    data = {("b-topic", 3): 42, ("a.topic", 0): 0, ("a.topic", 10): 2**40}
    f.write(data)
    assert f.read() == data
    assert (tmp_path / "replication-offset-checkpoint").read_text() == (
        "0\n3\na.topic 0 0\na.topic 10 1099511627776\nb-topic 3 42\n"
    )
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    for bad in ("1\n0\n", "0\n2\nx 0 1\n", "0\n1\nx y 1\n", ""):
        (tmp_path / "bad").write_text(bad)
        with pytest.raises(CheckpointError):
            OffsetCheckpointFile(tmp_path / "bad").read()


def test_leader_epoch_cache(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(path)
    assert c.latest_epoch == -1 and c.end_offset_for(0, 0) == (-1, -1)
    assert c.assign(0, 0)
    assert not c.assign(0, 5)  # same epoch: ignored
    c.assign(2, 10)
    c.assign(5, 30)
    assert path.read_text() == "0\n3\n0 0\n2 10\n5 30\n"
    assert c.epoch_for_offset(9) == 0 and c.epoch_for_offset(10) == 2 and c.epoch_for_offset(99) == 5
    assert c.end_offset_for(1, 50) == (0, 10)
    assert c.end_offset_for(2, 50) == (2, 30)
    assert c.end_offset_for(7, 50) == (5, 50)
    assert c.end_offset_for(-1, 50) == (-1, -1)
    c2 = LeaderEpochCache(None)
    c2.assign(3, 20)
    c2.assign(4, 25)
    assert c2.end_offset_for(1, 40) == (1, 20)  # older than every known epoch: it ends where the first starts
    assert LeaderEpochCache(path).entries() == [(0, 0), (2, 10), (5, 30)]
    c.truncate_from_end(30)
    assert c.entries() == [(0, 0), (2, 10)]
    c.truncate_from_start(12)
    assert c.entries() == [(2, 12)]
    assert LeaderEpochCache(path).entries() == [(2, 12)]
    c.assign(3, 12)  # same start offset: replaces the stale entry
    assert c.entries() == [(3, 12)]
    (tmp_path / "garbage").write_text("zzz\n")
    assert LeaderEpochCache(tmp_path / "garbage").entries() == []


def test_partition_metadata_format(tmp_path: Path) -> None:
    tid = random_uuid()
    write_partition_metadata(tmp_path, tid)
    text = (tmp_path / "partition.metadata").read_text()
    lines = text.splitlines()
    assert lines[0] == "version: 0"
    assert lines[1].startswith("topic_id: ") and len(lines[1]) == len("topic_id: ") + 22
    assert "=" not in lines[1]
    assert read_partition_metadata(tmp_path) == tid
    assert uuid_from_str(uuid_to_str(tid)) == tid
    assert uuid_to_str(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_meta_properties(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None
    props = write_meta_properties(tmp_path, cluster_id="MkU3OEVBNTcwNTJENDM2Qg", node_id=1)
    got = read_meta_properties(tmp_path)
    assert got == props
    assert got["version"] == "1" and got["node.id"] == "1" and len(got["directory.id"]) == 22


def test_parse_topic_partition() -> None:
    assert parse_topic_partition("my-topic-12") == ("my-topic", 12)
    assert parse_topic_partition("__consumer_offsets-0") == ("__consumer_offsets", 0)
    for bad in ("topic", "-1", "t-x", "t-"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)
