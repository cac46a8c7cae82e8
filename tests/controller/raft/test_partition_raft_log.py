"""The Raft log on disk (PartitionRaftLog over a real PartitionLog in a temporary directory) behaves as the
in-memory reference for every sequence of Raft operations, and the simulation runs on it, reopening the logs
from disk after every crash (recovery, leader-epoch-checkpoint)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.controller.raft.log import LogEntry, MemoryRaftLog
from kbroker.controller.raft.partition_log import PartitionRaftLog
from kbroker.controller.uuids import METADATA_TOPIC_ID
from kbroker.protocol.records import RecordBatch
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.testing.raft_simulation import SimConfig, Simulation


def open_log(d: Path, node_id: int = 1) -> PartitionRaftLog:
    log = PartitionLog(d / "__cluster_metadata-0", LogConfig(segment_bytes=64 * 1024), topic_id=METADATA_TOPIC_ID,
                       clean_shutdown=False, recovery_point=0, high_watermark=0)
    return PartitionRaftLog(log, node_id, (1, 2, 3), clock=lambda: 1_700_000_000.0)


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.lists(st.binary(max_size=20), min_size=0, max_size=4)),
    st.tuples(st.just("truncate"), st.integers(0, 60)),
    st.tuples(st.just("flush")),
), max_size=40)


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
            # Raft truncates at batch boundaries only
            bounds = [x.offset for x in mem.entries()]
            target = max([b for b in bounds if b <= op[1]], default=0)
            mem.truncate_to(target)
            disk.truncate_to(target)
        else:
            mem.flush()
            disk.flush()
        assert disk.end_offset == mem.end_offset
        assert disk.last_epoch == mem.last_epoch
        assert disk.flushed_offset >= mem.flushed_offset or disk.flushed_offset == disk.end_offset
        for ep in range(0, epoch + 2):
            assert disk.end_offset_for_epoch(ep) == mem.end_offset_for_epoch(ep), ep
        got = [(x.offset, x.epoch, x.count) for x in disk.read(0, 1000)]
        assert got == [(x.offset, x.epoch, x.count) for x in mem.entries()]
    for x, m in zip(disk.read(0, 1000), mem.entries()):
        batch = RecordBatch(x.data)
        assert batch.verify_crc() and batch.partition_leader_epoch == m.epoch
        if m.data is None:
            assert batch.is_control
        else:
            assert [r.value for r in batch.records()] == list(m.data)
    # and the same after reopening from disk
    disk.partition_log.close()
    again = open_log(d)
    assert [(x.offset, x.epoch, x.count) for x in again.read(0, 1000)] == \
        [(x.offset, x.epoch, x.count) for x in mem.entries()]
    assert again.last_epoch == mem.last_epoch
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
