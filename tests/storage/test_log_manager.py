"""LogManager: startup/shutdown, checkpoints, clean-shutdown marker, create/delete."""

from __future__ import annotations

from pathlib import Path

from kbroker.protocol.records import iter_batches
from kbroker.storage.checkpoints import OffsetCheckpointFile
from kbroker.storage.config import LogConfig
from kbroker.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

from .conftest import TOPIC_ID, batch


def _manager(tmp_path: Path, n_dirs: int = 2) -> LogManager:
    return LogManager([tmp_path / f"d{i}" for i in range(n_dirs)], LogConfig(segment_bytes=1000))


def test_lifecycle_and_checkpoints(tmp_path: Path) -> None:
    lm = _manager(tmp_path)
    lm.startup()
    a0 = lm.get_or_create_log("a", 0, TOPIC_ID)
    a1 = lm.get_or_create_log("a", 1, TOPIC_ID)
    b0 = lm.get_or_create_log("b-x", 0, None, LogConfig(segment_bytes=500, retention_bytes=600, file_delete_delay_ms=0))
    assert lm.get_or_create_log("a", 0, TOPIC_ID) is a0
    assert {lm.log_dir_of("a", 0), lm.log_dir_of("a", 1)} == {tmp_path / "d0", tmp_path / "d1"}
    for i in range(10):
        a0.append_as_leader(batch(3, value_size=50), 1, i)
        b0.append_as_leader(batch(1, value_size=100), 0, i)
    a0.high_watermark = 27
    b0.high_watermark = b0.log_end_offset
    assert lm.cleanup(0) > 0  # retention.bytes on b-x
    assert b0.log_start_offset > 0
    lm.shutdown()
    for d in (tmp_path / "d0", tmp_path / "d1"):
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    hw_file = lm.log_dir_of("a", 0) / "replication-offset-checkpoint"
    assert OffsetCheckpointFile(hw_file).read()[("a", 0)] == 27
    rp = OffsetCheckpointFile(lm.log_dir_of("a", 0) / "recovery-point-offset-checkpoint").read()
    assert rp[("a", 0)] == 30

    lm2 = _manager(tmp_path)
    lm2.startup()
    assert all(lm2.had_clean_shutdown.values())
    assert not (tmp_path / "d0" / CLEAN_SHUTDOWN_FILE).exists()
    r0 = lm2.get_log("a", 0)
    assert r0 is not None and r0.log_end_offset == 30 and r0.high_watermark == 27
    assert r0.topic_id == TOPIC_ID and r0.leader_epoch_cache.entries() == [(1, 0)]
    rb = lm2.get_log("b-x", 0)
    assert rb.log_start_offset == b0.log_start_offset and rb.log_end_offset == 10
    assert lm2.get_log("a", 1).log_end_offset == 0
    assert sorted((p.topic, p.partition) for p in lm2.all_logs()) == [("a", 0), ("a", 1), ("b-x", 0)]
    data = r0.read(0, 10**6, r0.high_watermark).read_bytes()
    assert [b.last_offset for b in iter_batches(data)][-1] == 26

    # crash (no shutdown): the next startup is unclean and recovers
    r0.append_as_leader(batch(2), 1, 0)
    lm2.checkpoint()
    lm3 = _manager(tmp_path)
    lm3.startup()
    assert not any(lm3.had_clean_shutdown.values())
    assert lm3.get_log("a", 0).log_end_offset == 32
    assert lm3.delete_log("a", 0)
    assert not lm3.delete_log("a", 0)
    assert lm3.get_log("a", 0) is None
    assert not any(p.name.startswith("a-0") for d in lm3.log_dirs for p in d.iterdir())
    lm3.shutdown()


def test_startup_skips_special_dirs(tmp_path: Path) -> None:
    root = tmp_path / "d0"
    (root / "t-0.0123456789abcdef0123456789abcdef-delete").mkdir(parents=True)
    (root / "t-1.abc-future").mkdir()
    (root / "__cluster_metadata-0").mkdir()
    (root / "not_a_partition").mkdir()
    lm = LogManager([root], LogConfig())
    lm.startup()
    assert lm.all_logs() == []
    assert not (root / "t-0.0123456789abcdef0123456789abcdef-delete").exists()
    assert (root / "t-1.abc-future").exists() and (root / "__cluster_metadata-0").exists()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        assert (root / name).read_text() == "0\n0\n"
    lm.shutdown()


def test_flush_dirty_flushes_rolled_segments(tmp_path: Path) -> None:
    lm = _manager(tmp_path, 1)
    lm.startup()
    plog = lm.get_or_create_log("t", 0, TOPIC_ID)
    for _ in range(20):
        plog.append_as_leader(batch(1, value_size=200), 0, 0)
    assert len(plog.segments) > 1
    assert plog.recovery_point == 0
    assert lm.flush_dirty(0) == 1
    assert plog.recovery_point == plog.segments[-1].base_offset
    lm.shutdown()
