"""The coordinator runtime: partitioning, record framing, write-then-replay, loading, timers."""

from __future__ import annotations

import struct

import pytest

from kbroker.coordinator.group.records import (
    group_metadata_record,
    offset_commit_record,
    offset_commit_tombstone,
)
from kbroker.coordinator.runtime import (
    CoordinatorRecord,
    CoordinatorResult,
    CoordinatorRuntime,
    CoordinatorWriteError,
    InMemoryPartitionWriter,
    ManualScheduler,
    ShardState,
    UnknownRecordTypeError,
    java_string_hash,
    partition_for,
)
from kbroker.protocol.coordinator_records import GroupMetadataValue, OffsetCommitKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import build_batch
from tests.coordinator.support import SERDE

# (string, String.hashCode(), abs % 50, abs % 5) computed with Java 17
JAVA_HASHES = [
    ("", 0, 0, 0),
    ("a", 97, 47, 2),
    ("abc", 96354, 4, 4),
    ("group-1", 293427299, 49, 4),
    ("my-consumer-group", 1513705513, 13, 3),
    ("g\u00e9", 3426, 26, 1),
    ("\U0001F600x", 54959989, 39, 4),  # a surrogate pair counts as two UTF-16 units
    ("polygenelubricants", -2147483648, 0, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("console-consumer-12345", 158455506, 6, 1),
]


@pytest.mark.parametrize("text,hash_,p50,p5", JAVA_HASHES)
def test_partition_for_matches_java(text, hash_, p50, p5):
    assert java_string_hash(text) == hash_
    assert partition_for(text, 50) == p50
    assert partition_for(text, 5) == p5


def test_record_framing_round_trip():
    rec = offset_commit_record("g", "t", 3, 42, 7, "meta", 1000)
    key = SERDE.encode_key(rec)
    value = SERDE.encode_value(rec)
    assert key[:2] == struct.pack(">h", 1)  # record type 1 = OffsetCommit
    assert value[:2] == struct.pack(">h", 4)  # value version 4
    back = SERDE.decode(key, value)
    assert back.key == OffsetCommitKey(group="g", topic="t", partition=3)
    assert (back.value.offset, back.value.leader_epoch, back.value.metadata) == (42, 7, "meta")
    with_expiry = offset_commit_record("g", "t", 3, 42, 7, "m", 1000, expire_timestamp_ms=5000)
    assert SERDE.encode_value(with_expiry)[:2] == struct.pack(">h", 1)
    assert SERDE.decode(SERDE.encode_key(with_expiry), SERDE.encode_value(with_expiry)).value.expire_timestamp == 5000
    tomb = offset_commit_tombstone("g", "t", 3)
    assert SERDE.encode_value(tomb) is None
    assert SERDE.decode(SERDE.encode_key(tomb), None).value is None
    gm = group_metadata_record("g", GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range",
                                                       leader="m1", current_state_timestamp=9,
                                                       members=[GroupMetadataValue.MemberMetadata(member_id="m1")]))
    assert SERDE.encode_key(gm)[:2] == struct.pack(">h", 2)
    assert SERDE.decode(SERDE.encode_key(gm), SERDE.encode_value(gm)).value == gm.value


def test_older_value_versions_decode():
    key = struct.pack(">h", 1) + struct.pack(">h", 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)
    v0 = struct.pack(">hq", 0, 17) + struct.pack(">h", 2) + b"md" + struct.pack(">q", 123)
    rec = SERDE.decode(key, v0)
    assert (rec.value.offset, rec.value.metadata, rec.value.commit_timestamp, rec.value.leader_epoch) == (17, "md", 123, -1)


def test_unknown_record_type():
    with pytest.raises(UnknownRecordTypeError):
        SERDE.decode(struct.pack(">h", 99) + b"xx", None)


class RecordingShard:
    def __init__(self) -> None:
        self.state: dict = {}
        self.replayed: list = []
        self.loaded = False

    def replay(self, offset, producer_id, producer_epoch, record: CoordinatorRecord) -> None:
        self.replayed.append(offset)
        k = (record.key.group, record.key.topic, record.key.partition)
        if record.value is None:
            self.state.pop(k, None)
        else:
            self.state[k] = record.value.offset

    def on_loaded(self) -> None:
        self.loaded = True

    def on_unloaded(self) -> None:
        self.loaded = False


def make_runtime(writer=None, scheduler=None):
    writer = writer or InMemoryPartitionWriter()
    scheduler = scheduler or ManualScheduler()
    rt = CoordinatorRuntime(writer, scheduler, lambda p, timer: RecordingShard(), SERDE)
    return rt, writer, scheduler


def test_write_appends_one_batch_then_replays():
    rt, writer, _ = make_runtime()
    rt.load(0)
    done = []
    result = rt.write(0, lambda shard: CoordinatorResult(
        [offset_commit_record("g", "t", 0, 5, -1, "", 1), offset_commit_record("g", "t", 1, 6, -1, "", 1)],
        "resp", done.append))
    assert result == "resp" and done == [ErrorCode.NONE]
    assert rt.shard(0).state == {("g", "t", 0): 5, ("g", "t", 1): 6}
    assert rt.shard(0).replayed == [0, 1]
    assert writer.next_offsets[0] == 2
    assert bytes(writer.logs[0]).count(b"\x00\x00\x00\x00\x00\x00\x00\x00") >= 1  # one batch at offset 0


def test_failed_append_replays_nothing_and_reports_the_coordinator_error():
    rt, writer, _ = make_runtime()
    rt.load(0)
    writer.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    done = []
    with pytest.raises(CoordinatorWriteError) as info:
        rt.write(0, lambda shard: CoordinatorResult([offset_commit_record("g", "t", 0, 5, -1, "", 1)], None,
                                                    done.append))
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert info.value.append_error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert done == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    assert rt.shard(0).state == {}


def test_load_replays_latest_value_per_key_and_tombstones():
    writer = InMemoryPartitionWriter()
    recs = [offset_commit_record("g", "t", 0, 1, -1, "", 1), offset_commit_record("g", "t", 1, 10, -1, "", 1),
            offset_commit_record("g", "t", 0, 2, -1, "", 1), offset_commit_tombstone("g", "t", 1)]
    for r in recs:
        writer.append(0, build_batch([(SERDE.encode_key(r), SERDE.encode_value(r))]))
    # a record of an unknown type (another implementation) is skipped
    writer.append(0, build_batch([(struct.pack(">h", 99) + b"??", b"\x00\x00")]))
    rt, _, _ = make_runtime(writer)
    rt.load(0)
    assert rt.state_of(0) is ShardState.ACTIVE
    assert rt.shard(0).state == {("g", "t", 0): 2}
    assert rt.shard(0).loaded


def test_operations_wait_for_loading_and_need_a_loaded_partition():
    writer = InMemoryPartitionWriter()
    r = offset_commit_record("g", "t", 0, 1, -1, "", 1)
    writer.append(0, build_batch([(SERDE.encode_key(r), SERDE.encode_value(r))]))
    rt, _, _ = make_runtime(writer)
    with pytest.raises(KafkaError) as info:
        rt.shard(0)
    assert info.value.code == ErrorCode.NOT_COORDINATOR
    steps = rt.load_steps(0)
    with pytest.raises(KafkaError) as info:
        rt.read(0, lambda s: s.state)
    assert info.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for _ in steps:
        pass
    assert rt.read(0, lambda s: s.state) == {("g", "t", 0): 1}
    rt.unload(0)
    with pytest.raises(KafkaError) as info:
        rt.shard(0)
    assert info.value.code == ErrorCode.NOT_COORDINATOR


def test_timers_run_through_the_write_path_and_can_be_replaced():
    rt, _, scheduler = make_runtime()
    rt.load(0)
    ctx = rt.contexts[0]
    ctx.timer.schedule("k", 100, lambda: CoordinatorResult([offset_commit_record("g", "t", 0, 1, -1, "", 1)]))
    ctx.timer.schedule("k", 200, lambda: CoordinatorResult([offset_commit_record("g", "t", 0, 2, -1, "", 1)]))
    scheduler.advance(150)
    assert rt.shard(0).state == {}
    scheduler.advance(100)
    assert rt.shard(0).state == {("g", "t", 0): 2}
    assert not ctx.timer.is_scheduled("k")
    ctx.timer.schedule("x", 10, lambda: CoordinatorResult([offset_commit_record("g", "t", 0, 3, -1, "", 1)]))
    rt.unload(0)
    scheduler.advance(100)  # timers die with the shard
    assert scheduler.pending() == 0
