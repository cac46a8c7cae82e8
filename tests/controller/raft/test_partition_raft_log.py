"""The Raft log on disk (PartitionRaftLog over a real PartitionLog in a temporary directory) behaves as the
in-memory reference for every sequence of Raft operations (appends, truncations, flushes, snapshots, the log
cleaned up to a snapshot, a fetched snapshot installed), also after reopening, and the simulation runs on it,
reopening the logs from disk after every crash (recovery, leader-epoch-checkpoint, snapshots)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.controller.raft.log import LogEntry, MemoryRaftLog, Voter, VoterSet, encode_memory_snapshot
from kbroker.controller.raft.partition_log import PartitionRaftLog, open_metadata_log_start
from kbroker.controller.snapshot import SnapshotStore, decode_snapshot, encode_snapshot
from kbroker.controller.uuids import METADATA_TOPIC_ID
from kbroker.protocol.records import RecordBatch
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.testing.raft_simulation import SimConfig, Simulation


def open_log(d: Path, node_id: int = 1, segment_bytes: int = 4096) -> PartitionRaftLog:
    """As the controller opens it: snapshots first, the log started at the earliest one (or reset to the latest)."""
    snapshots = SnapshotStore(d / "__cluster_metadata-0")
    log = PartitionLog(d / "__cluster_metadata-0", LogConfig(segment_bytes=segment_bytes), topic_id=METADATA_TOPIC_ID,
                       clean_shutdown=False, recovery_point=0, high_watermark=0)
    open_metadata_log_start(snapshots, log)
    return PartitionRaftLog(log, node_id, (1, 2, 3), clock=lambda: 1_700_000_000.0, snapshots=snapshots)


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.lists(st.binary(max_size=20), min_size=0, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 60)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("snapshot"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("install"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("voters"), st.integers(0, 2), st.sets(st.integers(1, 5), min_size=1, max_size=4)),
), max_size=40)


def same(disk: PartitionRaftLog, mem: MemoryRaftLog, max_epoch: int) -> None:
    assert disk.log_start_offset == mem.log_start_offset
    assert disk.end_offset == mem.end_offset
    assert disk.last_epoch == mem.last_epoch
    for ep in range(0, max_epoch + 2):
        assert disk.end_offset_for_epoch(ep) == mem.end_offset_for_epoch(ep), ep
    start = mem.log_start_offset
    assert [(x.offset, x.epoch, x.count) for x in disk.read(start, 1000)] == \
        [(x.offset, x.epoch, x.count) for x in mem.read(start, 1000)]
    assert disk.latest_snapshot_id() == mem.latest_snapshot_id()
    assert disk.voters() == mem.voters() and disk.last_voters_offset() == mem.last_voters_offset()
    for off in range(start, mem.end_offset + 1):
        assert disk.voters_at(off) == mem.voters_at(off), off


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_disk_log_matches_memory_log(tmp_path_factory, sequence):
    d = tmp_path_factory.mktemp("raftlog")
    disk, mem = open_log(d), MemoryRaftLog()
    epoch = 1
    for op in sequence:
        if op[0] == "append":
            epoch += op[1]
            e = LogEntry(mem.end_offset, epoch, tuple(op[2]) if op[2] else None, max(1, len(op[2])))
            mem.append([e])
            disk.append([e])
        elif op[0] == "truncate":
            # Raft truncates at batch boundaries only, and never below a snapshot (committed)
            bounds = [x.offset for x in mem.entries()]
            target = max([b for b in bounds if b <= op[1]], default=mem.log_start_offset)
            target = max(target, (mem.latest_snapshot_id() or (0, 0))[0])
            mem.truncate_to(target)
            disk.truncate_to(target)
        elif op[0] == "snapshot":  # a snapshot at a flushed batch boundary, maybe the log cleaned up to it
            mem.flush()
            disk.flush()
            bounds = [x.next_offset for x in mem.entries()]
            if bounds:
                end = bounds[op[1] % len(bounds)]
                snap = (end, mem.epoch_at(end - 1))
                mem.create_snapshot(end, snap[1], b"state")  # the memory log adds the voter set itself
                disk.create_snapshot(end, snap[1], encode_snapshot([b"state"], snap[1], 0, 0,
                                                                   voters=disk.voters_at(end)))
                if op[2]:
                    assert disk.delete_before_snapshot(snap) == mem.delete_before_snapshot(snap)
        elif op[0] == "voters":  # a voter change (a KRaftVoters control batch on disk)
            epoch += op[1]
            e = LogEntry(mem.end_offset, epoch, VoterSet.of([Voter(i, bytes([i]) * 16, (("CONTROLLER", "h", i),))
                                                            for i in op[2]]))
            mem.append([e])
            disk.append([e])
        elif op[0] == "install":  # a snapshot fetched from a leader ahead of this log
            epoch = max(epoch, mem.last_epoch) + op[2]
            snap = (mem.end_offset + 1 + op[1], epoch)  # always past the fetch offset (the log end)
            leader_voters = VoterSet.of([Voter(1), Voter(2)])  # the set in force at the leader's snapshot
            mem.install_snapshot(snap, encode_memory_snapshot(leader_voters, b"fetched"))
            disk.install_snapshot(snap, encode_snapshot([b"fetched"], epoch, 0, 0, voters=leader_voters))
            assert mem.snapshot_payload(snap) == b"fetched"
            assert decode_snapshot(disk.read_snapshot(snap, 0, 1 << 20)) == [b"fetched"]
        else:
            mem.flush()
            disk.flush()
        assert disk.flushed_offset >= mem.flushed_offset or disk.flushed_offset == disk.end_offset
        same(disk, mem, epoch)
    start = mem.log_start_offset
    for x, m in zip(disk.read(start, 1000), mem.read(start, 1000)):
        batch = RecordBatch(x.data)
        assert batch.verify_crc() and batch.partition_leader_epoch == m.epoch
        if m.data is None or isinstance(m.data, VoterSet):
            assert batch.is_control
        else:
            assert [r.value for r in batch.records()] == list(m.data)
    # and the same after reopening from disk
    disk.flush()
    mem.flush()
    disk.partition_log.close()
    again = open_log(d)
    # reopened, the log starts at its earliest snapshot (what lies below is in the snapshot)
    if mem.snapshot_ids() and mem.snapshot_ids()[0][0] > mem.log_start_offset:
        mem.delete_before_snapshot(mem.snapshot_ids()[0])
    same(again, mem, epoch)
    again.partition_log.close()


@pytest.mark.parametrize("seed", range(6))
def test_simulation_on_disk_logs(seed):
    root = Path(tempfile.mkdtemp(prefix="raftsim"))
    try:
        def factory(node_id):
            return open_log(root / str(node_id), node_id)

        def crash(node_id, log):
            # a crash keeps what was fsynced: cut the log back to its recovery point, then reopen from disk
            log.partition_log.truncate_to(log.flushed_offset)
            log.partition_log.close()
            return factory(node_id)

        r = Simulation(seed, SimConfig(voters=3, observers=1, duration_ms=6_000, settle_ms=6_000),
                       log_factory=factory, crash_log=crash).run()
        assert r.committed > 50
    finally:
        shutil.rmtree(root, ignore_errors=True)
