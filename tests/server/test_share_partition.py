"""The share partition state machine (KIP-932): acquisition, acknowledgement, lock expiry, delivery count limit,
in-flight limit, SPSO movement, skipped batches; and the share session epochs of the manager."""

from __future__ import annotations

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.share.manager import SharePartitionManager
from kbroker.server.share.share_partition import (
    ACK_ACCEPT,
    ACK_GAP,
    ACK_RELEASE,
    ACK_REJECT,
    ACK_RENEW,
    AcquiredRange,
    BatchInfo,
    RecordState,
    SharePartition,
    ShareSettings,
)


def sp(**kw) -> SharePartition:  # noqa: ANN003
    p = SharePartition(ShareSettings(**{"record_lock_duration_ms": 1000, **kw}))
    p.initialize(0, 0)
    return p


def batches(*ranges: tuple[int, int], skip: tuple[int, ...] = ()) -> list[BatchInfo]:
    return [BatchInfo(a, b, a in skip) for a, b in ranges]


def test_initialize_latest_or_earliest():
    latest = SharePartition(ShareSettings())
    latest.initialize(3, 10)
    assert latest.start_offset == latest.next_offset == 10
    latest.initialize(0, 20)  # once only
    assert latest.start_offset == 10
    earliest = SharePartition(ShareSettings(auto_offset_reset="earliest"))
    earliest.initialize(3, 10)
    assert earliest.start_offset == 3


def test_acquire_accept_moves_the_start_offset():
    p = sp()
    got = p.acquire("m1", 0, 3, batches((0, 4)), upper_offset=5)
    assert got == [AcquiredRange(0, 2, 1)]
    assert p.acquire("m2", 0, 10, batches((0, 4)), upper_offset=5) == [AcquiredRange(3, 4, 1)]
    assert p.acquire("m3", 0, 10, [], upper_offset=5) == []
    assert p.acknowledge("m1", 0, 2, [ACK_ACCEPT], 0) == ErrorCode.NONE
    assert p.start_offset == 3 and p.state_of(3) is RecordState.ACQUIRED
    assert p.acknowledge("m1", 3, 3, [ACK_ACCEPT], 0) == ErrorCode.INVALID_RECORD_STATE  # m2 holds it
    assert p.acknowledge("m1", 0, 0, [ACK_ACCEPT], 0) == ErrorCode.INVALID_RECORD_STATE  # done already
    assert p.acknowledge("m2", 3, 4, [ACK_REJECT, ACK_ACCEPT], 0) == ErrorCode.NONE
    assert p.start_offset == p.next_offset == 5


def test_release_redelivers_first_with_a_higher_delivery_count_then_archives_at_the_limit():
    p = sp(delivery_count_limit=2)
    p.acquire("m1", 0, 10, batches((0, 1)), upper_offset=2)
    assert p.acknowledge("m1", 0, 1, [ACK_RELEASE], 0) == ErrorCode.NONE
    assert p.state_of(0) is RecordState.AVAILABLE
    assert p.acquire("m2", 0, 10, batches((2, 2)), upper_offset=3) == [AcquiredRange(0, 1, 2), AcquiredRange(2, 2, 1)]
    assert p.acknowledge("m2", 0, 1, [ACK_RELEASE], 0) == ErrorCode.NONE
    assert p.state_of(0) is None and p.start_offset == 2  # archived at the limit and left behind
    assert p.acquire("m3", 0, 10, [], upper_offset=3) == []


def test_lock_expiry_releases_and_renew_extends():
    p = sp(delivery_count_limit=3)
    p.acquire("m1", 0, 10, batches((0, 1)), upper_offset=2)
    assert p.acknowledge("m1", 1, 1, [ACK_RENEW], 900) == ErrorCode.NONE
    assert p.acquire("m2", 999, 10, [], upper_offset=2) == []
    assert p.acquire("m2", 1000, 10, [], upper_offset=2) == [AcquiredRange(0, 0, 2)]  # 0's lock expired
    assert p.acknowledge("m1", 0, 0, [ACK_ACCEPT], 1000) == ErrorCode.INVALID_RECORD_STATE
    assert p.acquire("m2", 1900, 10, [], upper_offset=2) == [AcquiredRange(1, 1, 2)]  # renewed at 900


def test_gap_and_skipped_batches_are_archived():
    p = sp()
    got = p.acquire("m1", 0, 10, batches((0, 2), (3, 3), (4, 5), skip=(3,)), upper_offset=6)
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(4, 5, 1)]
    assert p.state_of(3) is RecordState.ARCHIVED
    assert p.acknowledge("m1", 0, 2, [ACK_ACCEPT, ACK_GAP, ACK_ACCEPT], 0) == ErrorCode.NONE
    assert p.start_offset == 4


def test_batch_aligned_acquisition_takes_whole_batches():
    """ShareAcquireMode 0 (batch-optimized): a batch started below MaxRecords (or the record-lock cap) is taken
    whole; none is started at or above them. Record-limit mode splits the batch (the test above)."""
    p = sp()
    assert p.acquire("m1", 0, 3, batches((0, 4), (5, 9)), upper_offset=10, batch_aligned=True) == [
        AcquiredRange(0, 4, 1)]
    assert p.acquire("m2", 0, 7, batches((5, 9), (10, 10), (11, 12)), upper_offset=13, batch_aligned=True) == [
        AcquiredRange(5, 12, 1)]  # 5 + 1 < 7: the third batch is started too
    assert p.acquire("m3", 0, 6, batches((13, 13), (14, 14)), upper_offset=15, batch_aligned=True) == [
        AcquiredRange(13, 14, 1)]
    capped = sp(max_record_locks=4)
    assert capped.acquire("m1", 0, 100, batches((0, 2), (3, 5), (6, 8)), upper_offset=9, batch_aligned=True) == [
        AcquiredRange(0, 5, 1)]
    assert capped.acquire("m1", 0, 100, batches((6, 8)), upper_offset=9, batch_aligned=True) == []


def test_in_flight_limit_and_malformed_acks():
    p = sp(max_record_locks=3)
    assert p.acquire("m1", 0, 10, batches((0, 9)), upper_offset=10) == [AcquiredRange(0, 2, 1)]
    assert p.acquire("m1", 0, 10, batches((0, 9)), upper_offset=10) == []
    assert p.acknowledge("m1", 2, 1, [ACK_ACCEPT], 0) == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m1", 0, 2, [ACK_ACCEPT, ACK_ACCEPT], 0) == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m1", 0, 0, [9], 0) == ErrorCode.INVALID_REQUEST
    assert p.acknowledge("m1", 0, 0, [ACK_ACCEPT], 0) == ErrorCode.NONE
    assert p.acquire("m1", 0, 10, batches((0, 9)), upper_offset=10) == [AcquiredRange(3, 3, 1)]


def test_release_member_and_log_start():
    p = sp()
    p.acquire("m1", 0, 2, batches((0, 5)), upper_offset=6)
    p.acquire("m2", 0, 2, batches((0, 5)), upper_offset=6)
    assert p.release_member("m1") == 2
    assert p.state_of(0) is RecordState.AVAILABLE and p.state_of(2) is RecordState.ACQUIRED
    p.on_log_start(3)
    assert p.start_offset == 3 and p.state_of(2) is None


class _Part:
    is_leader = True
    log_start_offset = high_watermark = last_stable_offset = 0


def test_share_session_epochs():
    mgr = SharePartitionManager(lambda t, p: _Part(), lambda g: ShareSettings(), max_sessions=1)
    with pytest.raises(KafkaError) as exc:
        mgr.session_for("g", "m", 1)
    assert exc.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    s = mgr.session_for("g", "m", 0)
    mgr.advance(s)
    with pytest.raises(KafkaError) as exc:
        mgr.session_for("g", "m", 2)
    assert exc.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert mgr.session_for("g", "m", 1) is s
    mgr.advance(s)
    assert mgr.session_for("g", "m", -1) is s
    with pytest.raises(KafkaError) as exc:
        mgr.session_for("g", "other", 0)
    assert exc.value.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    mgr.close_session(s)
    assert mgr.sessions == {}


def test_snapshot_and_load_round_trip():
    p = sp(delivery_count_limit=5)
    p.acquire("m1", 0, 10, batches((0, 5)), upper_offset=6)
    p.acknowledge("m1", 0, 0, [ACK_ACCEPT], 0)
    p.acknowledge("m1", 2, 3, [ACK_REJECT, ACK_RELEASE], 0)
    start, state = p.snapshot()
    assert start == 0  # the start offset before the acknowledgements (Kafka writes it, then moves it)
    assert state == [(0, 0, RecordState.ACKNOWLEDGED, 1), (1, 1, RecordState.AVAILABLE, 1),
                     (2, 2, RecordState.ARCHIVED, 1),
                     (3, 5, RecordState.AVAILABLE, 1)]  # acquired records are written as Available
    assert p.snapshot() == (1, state[1:])  # the next write carries the start offset that moved
    q = SharePartition(ShareSettings())
    q.load(start, state)
    assert (q.start_offset, q.next_offset) == (1, 6)
    assert q.acquire("m2", 0, 10, [], upper_offset=6) == [AcquiredRange(1, 1, 2), AcquiredRange(3, 5, 2)]


def test_share_coordinator_shard_replays_snapshots_updates_and_tombstones():
    from kbroker.coordinator.runtime import CoordinatorRecord
    from kbroker.coordinator.share.service import coordinator_key
    from kbroker.coordinator.share.shard import ShareCoordinatorShard
    from kbroker.protocol import coordinator_records as cr

    shard = ShareCoordinatorShard(0)
    key = ("g", b"\x01" * 16, 3)
    snap = cr.ShareSnapshotValue(start_offset=10, write_timestamp=5, state_batches=[
        cr.ShareSnapshotValue.StateBatch(10, 19, 0, 1)])
    for r in shard.write_state(key, snap).records:
        shard.replay(0, -1, -1, r)
    update = cr.ShareUpdateValue(start_offset=12, leader_epoch=2, state_batches=[
        cr.ShareUpdateValue.StateBatch(first_offset=14, last_offset=15, delivery_state=2, delivery_count=1)])
    shard.replay(1, -1, -1, CoordinatorRecord(cr.ShareUpdateKey(group_id="g", topic_id=key[1], partition=3), update))
    got = shard.read_state(key)
    assert got.start_offset == 12 and got.leader_epoch == 2
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in got.state_batches] == [
        (12, 13, 0), (14, 15, 2), (16, 19, 0)]  # below the new start offset: gone
    for r in shard.delete_state(key).records:
        shard.replay(2, -1, -1, r)
    assert shard.read_state(key) is None
    assert coordinator_key("g", b"\x00" * 16, 1) == "g:AAAAAAAAAAAAAAAAAAAAAA:1"


def test_share_settings_from_group_configs_then_broker_keys():
    from types import SimpleNamespace

    from kbroker.server.share.manager import share_settings

    broker = SimpleNamespace(config=SimpleNamespace(props={"group.share.record.lock.duration.ms": "15000",
                                                           "group.share.delivery.count.limit": "3"}))
    assert share_settings(broker, "g") == ShareSettings(record_lock_duration_ms=15000, delivery_count_limit=3)
    broker.group_configs = lambda gid: {"share.auto.offset.reset": "EARLIEST", "share.isolation.level":
                                        "read_committed", "share.record.lock.duration.ms": "20000"} if gid == "g" else {}
    got = share_settings(broker, "g")
    assert (got.auto_offset_reset, got.read_committed, got.record_lock_duration_ms, got.delivery_count_limit) == (
        "earliest", True, 20000, 3)
    assert share_settings(broker, "other") == ShareSettings(record_lock_duration_ms=15000, delivery_count_limit=3)


def test_share_settings_max_record_locks_and_group_values_kept_within_broker_bounds():
    """``share.partition.max.record.locks`` of the group wins over the broker's key; a group value the broker's
    ``group.share.min/max.*`` have since narrowed is kept within them (Kafka's GroupConfig evaluation)."""
    from types import SimpleNamespace

    from kbroker.server.share.manager import share_settings

    broker = SimpleNamespace(config=SimpleNamespace(props={"group.share.partition.max.record.locks": "500",
                                                           "group.share.min.record.lock.duration.ms": "20000"}))
    assert share_settings(broker, "g").max_record_locks == 500
    broker.group_configs = lambda gid: {"share.partition.max.record.locks": "100",
                                        "share.record.lock.duration.ms": "16000",
                                        "share.delivery.count.limit": "20"}
    got = share_settings(broker, "g")
    assert (got.max_record_locks, got.record_lock_duration_ms, got.delivery_count_limit) == (100, 20000, 10)


def test_share_coordinator_state_topic_configs():
    """``share.coordinator.state.topic.*``: partitions, replication factor (capped at the live brokers), segment
    size and min.insync.replicas (``.min.isr``, capped at that replication factor) of ``__share_group_state``."""
    from types import SimpleNamespace

    from kbroker.coordinator.share.service import ShareCoordinator, ShareCoordinatorConfig

    def spec(props: dict[str, str], live: int) -> tuple:
        image = SimpleNamespace(live_brokers=lambda: list(range(live)))
        sc = ShareCoordinator.__new__(ShareCoordinator)
        sc.config = ShareCoordinatorConfig.from_broker_config(SimpleNamespace(props=props))
        sc.controller = SimpleNamespace(image=image)
        sc.topic = "__share_group_state"
        return sc.internal_topic_spec()

    name, partitions, rf, configs = spec({"share.coordinator.state.topic.num.partitions": "7",
                                          "share.coordinator.state.topic.replication.factor": "3",
                                          "share.coordinator.state.topic.min.isr": "2",
                                          "share.coordinator.state.topic.segment.bytes": "1048576"}, 3)
    assert (name, partitions, rf) == ("__share_group_state", 7, 3)
    assert configs["min.insync.replicas"] == "2" and configs["segment.bytes"] == "1048576"
    assert spec({}, 1)[3]["min.insync.replicas"] == "1"  # Kafka's default 2, on one broker
    assert spec({}, 5)[3]["min.insync.replicas"] == "2"


@pytest.mark.parametrize("read_committed", [False, True])
def test_manager_skips_markers_and_under_read_committed_aborted_batches(tmp_path, read_committed):
    """A real partition log: an aborted transaction (0) and its marker (1), a committed one (2) and its marker
    (3), a plain batch (4). Markers are never delivered; the aborted record only under read_uncommitted."""
    from types import SimpleNamespace

    from kbroker.protocol.records import ControlType, build_batch, build_control_batch, iter_batches
    from kbroker.storage.config import LogConfig
    from kbroker.storage.log_manager import LogManager

    now = 1_700_000_000_000
    lm = LogManager([tmp_path / "d"], LogConfig())
    plog = lm.get_or_create_log("t", 0, bytes(range(16)), LogConfig())
    pid = 7
    for data in (build_batch([(b"k", b"aborted", None, now)], base_offset=0, producer_id=pid, producer_epoch=0,
                             base_sequence=0, is_transactional=True, partition_leader_epoch=0),
                 build_control_batch(ControlType.ABORT, pid, 0, 0, now, base_offset=1, partition_leader_epoch=0),
                 build_batch([(b"k", b"committed", None, now)], base_offset=2, producer_id=pid, producer_epoch=0,
                             base_sequence=1, is_transactional=True, partition_leader_epoch=0),
                 build_control_batch(ControlType.COMMIT, pid, 0, 0, now, base_offset=3, partition_leader_epoch=0),
                 build_batch([(b"k", b"plain", None, now)], base_offset=4, partition_leader_epoch=0)):
        plog.append_as_follower(data, now)
    plog.high_watermark = plog.log_end_offset
    part = SimpleNamespace(is_leader=True, log=plog, log_start_offset=0, high_watermark=5, last_stable_offset=5,
                           leader_epoch=0)
    settings = ShareSettings(auto_offset_reset="earliest", read_committed=read_committed)
    mgr = SharePartitionManager(lambda t, p: part, lambda g: settings)
    fetched = mgr.fetch("g", "m", b"\x01" * 16, "t", 0, now, 100, 1 << 20)
    acquired = [o for r in fetched.ranges for o in range(r.first_offset, r.last_offset + 1)]
    assert acquired == ([2, 4] if read_committed else [0, 2, 4])
    returned = [b.base_offset for b in iter_batches(fetched.records)]
    assert set(acquired) <= set(returned)  # the batches holding the acquired records are in the answer
    sp = mgr.partitions[("g", b"\x01" * 16, 0)]
    if read_committed:  # 0 and 1 archived: the start offset moved past them
        assert sp.start_offset == 2 and sp.state_of(3) is RecordState.ARCHIVED
    else:
        assert sp.start_offset == 0 and sp.state_of(1) is sp.state_of(3) is RecordState.ARCHIVED
    lm.shutdown()
