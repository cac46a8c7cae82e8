"""AlterReplicaLogDirs' copy and swap on real logs (kbroker.server.log_dir_mover, PartitionLog.adopt) and what a
start finds after a stop or crash at each point of a move (LogManager.startup)."""

from __future__ import annotations

import os
from pathlib import Path

from kbroker.storage.config import LogConfig
from kbroker.storage.log_manager import LogManager
from kbroker.server.log_dir_mover import LogDirMover
from tests.storage.conftest import TOPIC_ID, batch


def _filled(tmp_path: Path) -> tuple[LogManager, object]:
    lm = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(segment_bytes=1200))
    lm.startup()
    plog = lm.get_or_create_log("t", 0, TOPIC_ID)
    assert lm.log_dir_of("t", 0) == tmp_path / "a"
    for i in range(40):
        plog.leader_epoch_cache.assign(i // 10, plog.log_end_offset)
        plog.append_as_leader(batch(3, value_size=60, tag=i), i // 10, i)
    plog.high_watermark = plog.log_end_offset
    return lm, plog


def _records(plog) -> bytes:  # noqa: ANN001
    return plog.read(plog.log_start_offset, 1 << 30).read_bytes()


def test_copy_follows_appends_and_retention_then_swaps(tmp_path: Path) -> None:
    lm, plog = _filled(tmp_path)
    plog.advance_log_start_offset(7)  # DeleteRecords inside a batch
    future = lm.new_future_log(tmp_path / "b", plog)
    assert future.dir.name.startswith("t-0.") and future.dir.name.endswith("-future")
    steps = 0
    while not LogDirMover._step(plog, future):
        steps += 1
        if steps == 2:  # appends while the copy runs
            for i in range(5):
                plog.append_as_leader(batch(2, value_size=60, tag=100 + i), 3, 100 + i)
        assert steps < 100
    before = (_records(plog), plog.log_start_offset, plog.log_end_offset, plog.leader_epoch_cache.entries())
    retired = lm.complete_move(plog, future, tmp_path / "b")
    assert lm.log_dir_of("t", 0) == tmp_path / "b"
    assert plog.dir == tmp_path / "b" / "t-0" and not (tmp_path / "a" / "t-0").exists()
    assert retired.name.endswith("-delete") and retired.parent == tmp_path / "a"
    assert (_records(plog), plog.log_start_offset, plog.log_end_offset,
            plog.leader_epoch_cache.entries()) == before
    plog.append_as_leader(batch(1, tag=7), 3, 200)  # the moved log keeps working in its new place
    assert len(list(plog.dir.glob("*.log"))) > 3
    lm.shutdown()
    lm2 = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(segment_bytes=1200))
    lm2.startup()
    again = lm2.get_log("t", 0)
    assert lm2.log_dir_of("t", 0) == tmp_path / "b" and not retired.exists()
    assert again.log_end_offset == before[2] + 1 and again.log_start_offset == 7
    assert again.leader_epoch_cache.entries() == before[3]
    lm2.shutdown()


def test_a_stop_before_the_swap_keeps_the_source(tmp_path: Path) -> None:
    lm, plog = _filled(tmp_path)
    future = lm.new_future_log(tmp_path / "b", plog)
    LogDirMover._step(plog, future)  # part of the copy
    future_dir = future.dir
    leo = plog.log_end_offset
    future.close()
    lm.shutdown()
    lm2 = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(segment_bytes=1200))
    lm2.startup()
    assert lm2.log_dir_of("t", 0) == tmp_path / "a" and lm2.get_log("t", 0).log_end_offset == leo
    assert not future_dir.exists()
    lm2.shutdown()


def test_a_crash_inside_the_swap_promotes_the_complete_copy(tmp_path: Path) -> None:
    lm, plog = _filled(tmp_path)
    future = lm.new_future_log(tmp_path / "b", plog)
    while not LogDirMover._step(plog, future):
        pass
    expected = _records(plog)
    future.flush()
    # the swap's first rename happened (the source retired), the second did not
    future.close()
    plog.close()
    os.replace(plog.dir, plog.dir.with_name("t-0.0123456789abcdef0123456789abcdef-delete"))
    lm2 = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(segment_bytes=1200))
    lm2.startup()
    moved = lm2.get_log("t", 0)
    assert lm2.log_dir_of("t", 0) == tmp_path / "b" and moved.dir == tmp_path / "b" / "t-0"
    assert _records(moved) == expected
    assert not list((tmp_path / "a").glob("t-0*")) and not list((tmp_path / "b").glob("*-future"))
    lm2.shutdown()
