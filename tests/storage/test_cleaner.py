"""The log cleaner: latest value per key, offsets kept, tombstones and delete horizons, producers' last
batches, transaction markers, dirty ratio and lag rules, crash-safe swap, and races with the event loop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbroker.protocol.records import ControlType, build_batch, build_control_batch, iter_batches
from kbroker.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.log_manager import LogManager

NOW = 1_700_000_000_000
COMPACT = LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000,
                    message_timestamp_after_max_ms=2**63 - 1)


@pytest.fixture
def manager(tmp_path: Path):
    lm = LogManager([tmp_path / "d"], COMPACT)
    lm.startup(now_ms=NOW)
    yield lm
    lm.shutdown()


def _log(manager: LogManager, config: LogConfig = COMPACT, name: str = "c") -> PartitionLog:
    return manager.get_or_create_log(name, 0, bytes(range(16)), config)


def _append(plog: PartitionLog, records, roll: bool = False, **kw) -> None:
    """Append one batch of ``(key, value)`` records as leader and mark it committed (HW = LEO)."""
    plog.append_as_leader(build_batch([(k, v, None, NOW) for k, v in records], **kw), 0, NOW)
    plog.high_watermark = plog.log_end_offset
    if roll:
        plog.roll(now_ms=NOW)


def _read_all(plog: PartitionLog) -> list:
    data = plog.read(plog.log_start_offset, 1 << 30).read_bytes()
    return list(iter_batches(data))


def _records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Data records (control batches left out) as ``(offset, key, value)``."""
    return [(r.offset, r.key, r.value) for b in _read_all(plog) if not b.is_control for r in b.records()]


def test_latest_value_per_key_with_offsets_unchanged(manager):
    plog = _log(manager)
    expected: dict[bytes, tuple[int, bytes]] = {}
    offset = 0
    for round_ in range(6):
        batch = [(b"k%d" % (i % 4), b"v%d-%d" % (round_, i)) for i in range(3)]
        for k, v in batch:
            expected[k] = (offset, v)
            offset += 1
        _append(plog, batch, roll=True)
    _append(plog, [(b"active", b"x")])  # stays in the active segment
    before_segments = plog.num_segments
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=0))
    assert cleaner.grab_filthiest(NOW) is not None
    result = cleaner.clean_now(plog, NOW)
    assert result is not None and result.end_offset == 18
    got = _records(plog)
    cleaned = [(o, k, v) for o, k, v in got if o < 18]
    assert sorted(cleaned) == sorted((o, k, v) for k, (o, v) in expected.items())
    assert got[-1] == (18, b"active", b"x")
    assert plog.num_segments < before_segments  # segments were merged
    assert plog.log_end_offset == 19 and plog.log_start_offset == 0
    # every batch is valid and keeps its original offset range
    for b in _read_all(plog):
        assert b.verify_crc()
    assert cleaner.clean_now(plog, NOW) is None  # nothing dirty any more
    assert "c 0 18" in (manager.log_dirs[0] / CLEANER_OFFSET_CHECKPOINT).read_text()


def test_cleaned_log_survives_restart(tmp_path):
    for clean_shutdown in (True, False):
        root = tmp_path / f"r{clean_shutdown}"
        lm = LogManager([root], COMPACT)
        lm.startup(now_ms=NOW)
        plog = lm.get_or_create_log("c", 0, bytes(range(16)), COMPACT)
        for i in range(8):
            _append(plog, [(b"k%d" % (i % 2), b"v%d" % i)], roll=True)
        LogCleaner(lm).clean_now(plog, NOW)
        want = _records(plog)
        if clean_shutdown:
            lm.shutdown()
        else:
            for p in lm.all_logs():
                p.flush()
        lm2 = LogManager([root], COMPACT)
        lm2.startup(now_ms=NOW)
        assert _records(lm2.get_log("c", 0)) == want
        assert LogCleaner(lm2).first_dirty[("c", 0)] == 8
        lm2.shutdown()


def test_tombstones_removed_after_delete_horizon(manager):
    plog = _log(manager)
    _append(plog, [(b"a", b"1"), (b"b", b"1")], roll=True)
    _append(plog, [(b"a", None)], roll=True)  # tombstone for a
    _append(plog, [(b"c", b"1")])
    cleaner = LogCleaner(manager)
    cleaner.clean_now(plog, NOW)
    assert [(k, v) for _, k, v in _records(plog)] == [(b"b", b"1"), (b"a", None), (b"c", b"1")]
    tomb = next(b for b in _read_all(plog) if b.base_offset == 2)
    assert tomb.has_delete_horizon and tomb.base_timestamp == NOW + 1000
    assert [r.timestamp for r in tomb.records()] == [NOW]  # record timestamps survive the new base
    # a later cleaning before the horizon keeps it; after the horizon it goes
    plog.roll(now_ms=NOW)
    _append(plog, [(b"d", b"1")], roll=True)
    cleaner.clean_now(plog, NOW + 999)
    assert (b"a", None) in [(k, v) for _, k, v in _records(plog)]
    _append(plog, [(b"e", b"1")], roll=True)
    cleaner.clean_now(plog, NOW + 1000)
    assert b"a" not in [k for _, k, _ in _records(plog)]
    assert [o for o, _, _ in _records(plog)] == sorted(o for o, _, _ in _records(plog))


def test_last_batch_of_each_producer_is_kept_empty(manager):
    plog = _log(manager)
    plog.append_as_leader(build_batch([(b"k", b"old", None, NOW)], producer_id=42, producer_epoch=0,
                                      base_sequence=0), 0, NOW)
    plog.roll(now_ms=NOW)
    _append(plog, [(b"k", b"new")], roll=True)
    _append(plog, [(b"z", b"1")])
    LogCleaner(manager).clean_now(plog, NOW)
    batches = _read_all(plog)
    first = batches[0]
    assert (first.producer_id, first.records_count, first.base_sequence, first.last_offset) == (42, 0, 0, 0)
    assert first.verify_crc()
    assert [(k, v) for _, k, v in _records(plog)] == [(b"k", b"new"), (b"z", b"1")]


def test_transactions_aborted_data_goes_markers_wait(manager):
    plog = _log(manager)

    def follower(data: bytes) -> None:
        plog.append_as_follower(data, NOW)
        plog.high_watermark = plog.log_end_offset

    pid, epoch = 7, 0
    follower(build_batch([(b"t", b"aborted", None, NOW)], base_offset=0, producer_id=pid, producer_epoch=epoch,
                         base_sequence=0, is_transactional=True, partition_leader_epoch=0))
    follower(build_control_batch(ControlType.ABORT, pid, epoch, 0, NOW, base_offset=1, partition_leader_epoch=0))
    follower(build_batch([(b"t", b"committed", None, NOW)], base_offset=2, producer_id=pid, producer_epoch=epoch,
                         base_sequence=1, is_transactional=True, partition_leader_epoch=0))
    follower(build_control_batch(ControlType.COMMIT, pid, epoch, 0, NOW, base_offset=3, partition_leader_epoch=0))
    plog.roll(now_ms=NOW)
    follower(build_batch([(b"t", b"plain", None, NOW)], base_offset=4, partition_leader_epoch=0))
    plog.roll(now_ms=NOW)
    follower(build_batch([(b"x", b"1", None, NOW)], base_offset=5, partition_leader_epoch=0))
    cleaner = LogCleaner(manager)
    cleaner.clean_now(plog, NOW)
    batches = {b.base_offset: b for b in _read_all(plog)}
    assert 0 not in batches  # the aborted transaction's data is gone
    # its marker stays while this pass still saw the transaction's batch; the committed one too
    assert batches[1].is_control and not batches[1].has_delete_horizon
    assert batches[3].is_control and not batches[3].has_delete_horizon
    # the committed record was superseded, but the batch is the producer's last one: kept, empty
    assert (batches[2].records_count, batches[2].producer_id, batches[2].is_transactional) == (0, pid, True)
    assert [(k, v) for _, k, v in _records(plog)] == [(b"t", b"plain"), (b"x", b"1")]

    def more(key: bytes) -> None:
        follower(build_batch([(key, b"1", None, NOW)], base_offset=plog.log_end_offset, partition_leader_epoch=0))
        plog.roll(now_ms=NOW)

    more(b"y")
    cleaner.clean_now(plog, NOW)
    batches = {b.base_offset: b for b in _read_all(plog)}
    assert batches[1].has_delete_horizon and batches[1].base_timestamp == NOW + 1000  # now an empty txn
    assert not batches[3].has_delete_horizon  # the producer's empty last batch still belongs to it
    more(b"w")
    cleaner.clean_now(plog, NOW + 1000)
    batches = {b.base_offset: b for b in _read_all(plog)}
    assert 1 not in batches and 3 in batches and 2 in batches


def test_ratio_and_compaction_lags(manager):
    plog = _log(manager, LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.9))
    for i in range(3):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    _append(plog, [(b"z", b"z")])
    cleaner = LogCleaner(manager)
    ltc = cleaner.cleanable(plog, NOW)
    assert ltc.cleanable_ratio == 1.0 and ltc.first_uncleanable_offset == 3
    assert cleaner.grab_filthiest(NOW).log is plog
    cleaner.clean_now(plog, NOW)
    _append(plog, [(b"k", b"again")], roll=True)
    ltc = cleaner.cleanable(plog, NOW)
    assert 0 < ltc.cleanable_ratio < 0.9 and cleaner.grab_filthiest(NOW) is None
    # max.compaction.lag.ms forces it despite the ratio
    plog.update_config(LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=10))
    assert cleaner.grab_filthiest(NOW + 100).log is plog
    # min.compaction.lag.ms keeps young segments out
    plog.update_config(LogConfig(cleanup_policy="compact", min_compaction_lag_ms=60_000))
    assert cleaner.cleanable(plog, NOW + 1000).cleanable_bytes == 0
    assert cleaner.cleanable(plog, NOW + 120_000).cleanable_bytes > 0
    # delete-only topics are never compacted
    assert cleaner.cleanable(_log(manager, LogConfig(), "d"), NOW) is None


def test_interrupted_swap_is_completed_on_load(manager, tmp_path):
    plog = _log(manager)
    for i in range(4):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    _append(plog, [(b"z", b"z")])
    cleaner = LogCleaner(manager)
    task = cleaner.prepare(cleaner.cleanable(plog, NOW), NOW)
    result = cleaner.clean(task)
    (cleaned,) = result.segments
    # crash right after the commit point: the .swap exists, the old segments are still there
    swap = cleaned.path.with_name(cleaned.path.name.replace(".cleaned", ".swap"))
    os.replace(cleaned.path, swap)
    plog.flush()
    reopened = PartitionLog(plog.dir, COMPACT, clean_shutdown=False, now_ms=NOW)
    assert [(o, k, v) for o, k, v in _records(reopened)] == [(3, b"k", b"3"), (4, b"z", b"z")]
    assert not any(p.name.endswith((".swap", ".cleaned")) for p in plog.dir.iterdir())
    reopened.close()


def test_leftover_cleaned_file_is_ignored(manager):
    plog = _log(manager)
    for i in range(3):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    cleaner = LogCleaner(manager)
    result = cleaner.clean(cleaner.prepare(cleaner.cleanable(plog, NOW), NOW))
    assert result.segments[0].path.exists()
    plog.flush()
    reopened = PartitionLog(plog.dir, COMPACT, clean_shutdown=False, now_ms=NOW)
    assert [v for _, _, v in _records(reopened)] == [b"0", b"1", b"2"]  # crash before the swap: nothing lost
    assert not result.segments[0].path.exists()
    reopened.close()


def test_install_discards_when_the_log_changed(manager):
    plog = _log(manager, LogConfig(cleanup_policy="compact,delete", retention_ms=1, file_delete_delay_ms=0,
                                   min_cleanable_dirty_ratio=0.01))
    for i in range(3):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    cleaner = LogCleaner(manager)
    task = cleaner.prepare(cleaner.cleanable(plog, NOW), NOW)
    result = cleaner.clean(task)
    assert plog.delete_retention(NOW + 10) > 0  # retention ran on the event loop meanwhile
    assert cleaner.install(result) is False
    assert not result.segments[0].path.exists()
    assert ("c", 0) not in cleaner.in_progress


def test_fetch_in_flight_reads_replaced_segments(manager):
    plog = _log(manager)
    for i in range(3):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    region = plog.read(0, 1 << 20)
    LogCleaner(manager).clean_now(plog, NOW)
    old = list(iter_batches(region.read_bytes()))  # the old file is still open until file.delete.delay.ms
    assert [b.base_offset for b in old] == [0, 1, 2]
    assert [o for o, _, _ in _records(plog)] == [2]


def test_compaction_matches_a_model(tmp_path_factory):
    """Random keyed writes (some tombstones, some compressed batches, some producers): after cleaning, the
    cleaned range holds exactly the latest record of each key at its original offset; tombstones go once
    their horizon passed."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    batch_st = st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=4)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(batches=st.lists(st.tuples(batch_st, st.sampled_from([0, 1, 3, 4]), st.booleans()), min_size=1,
                            max_size=12))
    def check(batches):
        lm = LogManager([tmp_path_factory.mktemp("model")], COMPACT)
        lm.startup(now_ms=NOW)
        try:
            plog = lm.get_or_create_log("m", 0, bytes(range(16)), COMPACT)
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            offset = 0
            for records, codec, roll in batches:
                recs = [(b"k%d" % k, None if tomb else b"v%d" % offset) for k, tomb in records]
                for i, (k, v) in enumerate(recs):
                    latest[k] = (offset + i, v)
                _append(plog, recs, roll=roll, compression=codec)
                offset += len(recs)
            plog.roll(now_ms=NOW)
            cleaner = LogCleaner(lm)
            cleaner.clean_now(plog, NOW)
            got = [(o, k, v) for o, k, v in _records(plog)]
            assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
            assert sorted(got) == sorted((o, k, v) for k, (o, v) in latest.items())
            _append(plog, [(b"other", b"x")], roll=True)
            cleaner.clean_now(plog, NOW + 1000)  # past every delete horizon
            got = [(k, v) for _, k, v in _records(plog) if k != b"other"]
            assert sorted(got) == sorted((k, v) for k, (_, v) in latest.items() if v is not None)
            for b in _read_all(plog):
                assert b.verify_crc()
        finally:
            lm.shutdown()

    check()


def test_recreated_log_starts_dirty(manager):
    plog = _log(manager)
    for i in range(3):
        _append(plog, [(b"k", b"%d" % i)], roll=True)
    cleaner = LogCleaner(manager)
    cleaner.clean_now(plog, NOW)
    assert cleaner.first_dirty[("c", 0)] == 3
    manager.delete_log("c", 0)
    again = _log(manager)
    for i in range(5):
        _append(again, [(b"k", b"%d" % i)], roll=True)
    assert cleaner.cleanable(again, NOW).first_dirty_offset == 0
    cleaner.clean_now(again, NOW)
    assert [v for _, _, v in _records(again)] == [b"4"]


def test_empty_cleaner_checkpoint_as_kafka_leaves_it_is_read_quietly(tmp_path, caplog):
    """Kafka creates ``cleaner-offset-checkpoint`` empty at start-up and keeps it so until it cleans a log: a log
    directory Kafka wrote has one. Kafka reads an empty checkpoint file as no entries; so does kbroker, without the
    warning a damaged checkpoint gets."""
    root = tmp_path / "d"
    root.mkdir()
    (root / CLEANER_OFFSET_CHECKPOINT).write_bytes(b"")
    lm = LogManager([root], COMPACT)
    lm.startup(now_ms=NOW)
    try:
        with caplog.at_level("WARNING", logger="kbroker.storage.cleaner"):
            cleaner = LogCleaner(lm)
        assert cleaner.first_dirty == {}
        assert not [r for r in caplog.records if r.name == "kbroker.storage.cleaner"]
        (root / CLEANER_OFFSET_CHECKPOINT).write_bytes(b"0\n")  # a truncated one still warns
        with caplog.at_level("WARNING", logger="kbroker.storage.cleaner"):
            LogCleaner(lm)
        assert any("unreadable cleaner checkpoint" in r.getMessage() for r in caplog.records)
    finally:
        lm.shutdown()
