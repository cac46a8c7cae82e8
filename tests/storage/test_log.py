"""PartitionLog / LogSegment behaviour: append, read, indexes, timestamps, recovery, retention."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import iter_batches
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

from .conftest import TOPIC_ID, batch


def _offsets(data: bytes) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in iter_batches(data)]


def _state(plog: PartitionLog) -> dict:
    return {
        "lso": plog.log_start_offset,
        "leo": plog.log_end_offset,
        "hw": plog.high_watermark,
        "bases": [s.base_offset for s in plog.segments],
        "sizes": [s.size for s in plog.segments],
        "next": [s.next_offset for s in plog.segments],
        "maxts": [(s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far) for s in plog.segments],
        "index": [s.offset_index.entries() for s in plog.segments],
        "timeindex": [s.time_index.entries() for s in plog.segments],
        "epochs": plog.leader_epoch_cache.entries(),
        "topic_id": plog.topic_id,
    }


# -- append / offsets ------------------------------------------------------------------------------


def test_offsets_and_leo_for_multi_record_batches(open_log) -> None:
    plog = open_log()
    assert plog.log_end_offset == 0 and plog.high_watermark == 0
    info = plog.append_as_leader(batch(5), leader_epoch=3, now_ms=1)
    assert (info.first_offset, info.last_offset, info.num_messages) == (0, 4, 5)
    assert plog.log_end_offset == 5
    info = plog.append_as_leader(batch(1) + batch(3), leader_epoch=3, now_ms=1)
    assert (info.first_offset, info.last_offset, info.num_messages) == (5, 8, 4)
    assert info.log_append_time == -1 and info.valid_bytes == len(batch(1)) + len(batch(3))
    assert plog.log_end_offset == 9
    data = plog.read(0, 10**6).read_bytes()
    assert _offsets(data) == [(0, 4), (5, 5), (6, 8)]
    for b in iter_batches(data):
        b.validate()
        assert b.partition_leader_epoch == 3
    assert plog.leader_epoch_cache.entries() == [(3, 0)]
    plog.append_as_leader(batch(1), leader_epoch=4, now_ms=1)
    assert plog.leader_epoch_cache.entries() == [(3, 0), (4, 9)]


def test_append_rejects_oversized_batches(open_log) -> None:
    plog = open_log(LogConfig(max_message_bytes=200))
    with pytest.raises(KafkaError) as ei:
        plog.append_as_leader(batch(1, value_size=500), 0, 0)
    assert ei.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert plog.log_end_offset == 0 and plog.size_in_bytes == 0
    plog2 = open_log(LogConfig(segment_bytes=300), name="u-0")
    with pytest.raises(KafkaError) as ei:
        plog2.append_as_leader(batch(1, value_size=400), 0, 0)
    assert ei.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


def test_log_append_time(open_log) -> None:
    plog = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = plog.append_as_leader(batch(3, ts=5, codec=1), 0, now_ms=777)
    assert info.log_append_time == 777 and info.max_timestamp == 777
    (b,) = list(iter_batches(plog.read(0, 10**6).read_bytes()))
    b.validate()
    assert b.timestamp_type == 1 and {r.timestamp for r in b.records()} == {777}


def test_segments_roll_and_read_across_them(open_log) -> None:
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=256)
    plog = open_log(cfg)
    sizes = []
    for i in range(60):
        b = batch(1 + i % 3, ts=1000 + i, tag=i)
        sizes.append(len(b))
        plog.append_as_leader(b, 0, 0)
    assert len(plog.segments) > 5
    assert all(s.size <= 1024 for s in plog.segments)
    assert [s.base_offset for s in plog.segments] == sorted(s.base_offset for s in plog.segments)
    for prev, nxt in zip(plog.segments, plog.segments[1:]):
        assert prev.next_offset == nxt.base_offset  # contiguous
        assert (plog.dir / f"{nxt.base_offset:020d}.log").exists()
    leo = plog.log_end_offset
    assert leo == sum(1 + i % 3 for i in range(60))
    everything = plog.read(0, 10**9)
    assert len(everything.regions) == len(plog.segments)
    data = everything.read_bytes()
    assert len(data) == sum(sizes) == everything.size
    offs = _offsets(data)
    assert offs[0][0] == 0 and offs[-1][1] == leo - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(offs, offs[1:]))
    # every offset: the first returned batch holds it
    for o in range(leo):
        got = plog.read(o, 1).read_bytes()
        first = next(iter_batches(got))
        assert first.base_offset <= o <= first.last_offset
    # byte budget across segments: whole batches only, never over budget (besides the first)
    for budget in (100, 700, 1500, 5000):
        d = plog.read(0, budget)
        assert d.size <= max(budget, sizes[0])
        assert sum(b.size for b in iter_batches(d.read_bytes())) == d.size


def test_read_upper_bound_and_mid_batch(open_log) -> None:
    plog = open_log()
    for _ in range(3):
        plog.append_as_leader(batch(2), 0, 0)  # offsets 0-1, 2-3, 4-5
    assert _offsets(plog.read(0, 10**6, 3).read_bytes()) == [(0, 1)]
    assert _offsets(plog.read(0, 10**6, 4).read_bytes()) == [(0, 1), (2, 3)]
    assert _offsets(plog.read(3, 10**6, 6).read_bytes()) == [(2, 3), (4, 5)]
    assert _offsets(plog.read(3, 10**6, 5).read_bytes()) == [(2, 3)]
    assert plog.read(3, 10**6, 3).regions == []
    assert plog.read(4, 10**6, 3).regions == []
    assert plog.read(6, 10**6).regions == []  # at LEO
    plog.high_watermark = 4
    assert _offsets(plog.read(0, 10**6, plog.high_watermark).read_bytes()) == [(0, 1), (2, 3)]
    for bad in (-1, 7):
        with pytest.raises(KafkaError) as ei:
            plog.read(bad, 100)
        assert ei.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_min_one_message_and_whole_batches(open_log) -> None:
    plog = open_log()
    big = batch(1, value_size=500)
    for _ in range(3):
        plog.append_as_leader(big, 0, 0)
    one = plog.read(0, 10)
    assert one.size == len(big) and _offsets(one.read_bytes()) == [(0, 0)]
    assert plog.read(0, 10, min_one_message=False).regions == []
    assert _offsets(plog.read(0, len(big) * 2 - 1).read_bytes()) == [(0, 0)]
    assert _offsets(plog.read(0, len(big) * 2).read_bytes()) == [(0, 0), (1, 1)]
    assert _offsets(plog.read(1, 0).read_bytes()) == [(1, 1)]


def test_high_watermark_clamped(open_log) -> None:
    plog = open_log()
    plog.append_as_leader(batch(4), 0, 0)
    plog.high_watermark = 100
    assert plog.high_watermark == 4
    plog.high_watermark = -3
    assert plog.high_watermark == 0


# -- indexes ---------------------------------------------------------------------------------------


def test_offset_index_is_sparse_and_points_at_batches(open_log) -> None:
    plog = open_log(LogConfig(index_interval_bytes=1000))
    b = batch(2, value_size=100)  # ~ 300 bytes
    for _ in range(40):
        plog.append_as_leader(b, 0, 0)
    seg = plog.active_segment
    entries = seg.offset_index.entries()
    assert 0 < len(entries) < 40
    expected_max = seg.size // 1000 + 1
    assert len(entries) <= expected_max
    for off, pos in entries:
        hdr = seg.read_header(pos)
        assert hdr is not None and hdr.last_offset == off
    gaps = [b2[1] - b1[1] for b1, b2 in zip(entries, entries[1:])]
    assert all(g >= 1000 for g in gaps)
    assert os.path.getsize(seg.offset_index.path) == 8 * len(entries)
    raw = seg.offset_index.path.read_bytes()
    rel, pos = struct.unpack_from(">ii", raw, 0)
    assert (seg.base_offset + rel, pos) == entries[0]
    tentries = seg.time_index.entries()
    assert os.path.getsize(seg.time_index.path) == 12 * len(tentries)


def test_indexes_deleted_are_rebuilt(open_log) -> None:
    cfg = LogConfig(index_interval_bytes=300, segment_bytes=4000)
    plog = open_log(cfg)
    for i in range(50):
        plog.append_as_leader(batch(2, ts=[1000 + i, 2000 + i], value_size=60), 0, 0)
    plog.close()
    first = open_log(cfg)
    before = _state(first)
    before_reads = [first.read(o, 500).read_bytes() for o in (0, 17, 63)]
    first.close()
    for p in list(plog.dir.iterdir()):
        if p.suffix in (".index", ".timeindex"):
            p.unlink()
    reopened = open_log(cfg)
    assert _state(reopened) == before
    assert [reopened.read(o, 500).read_bytes() for o in (0, 17, 63)] == before_reads
    reopened.close()
    # an inconsistent index (entry beyond the log) is rebuilt too
    seg_idx = sorted(plog.dir.glob("*.index"))[0]
    seg_idx.write_bytes(seg_idx.read_bytes() + struct.pack(">ii", 10**6, 10**8))
    assert _state(open_log(cfg)) == before


# -- timestamps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 3])
def test_offset_for_timestamp_exact_within_batches(open_log, codec: int) -> None:
    plog = open_log(LogConfig(segment_bytes=600, index_interval_bytes=100))
    plog.append_as_leader(batch(3, ts=[100, 105, 110], codec=codec), 1, 0)  # 0..2
    plog.append_as_leader(batch(3, ts=[120, 115, 130], codec=codec), 1, 0)  # 3..5
    for i in range(10):  # later segments, increasing timestamps 200.. (2 records each)
        plog.append_as_leader(batch(2, ts=[200 + 10 * i, 205 + 10 * i], value_size=80, codec=codec), 2, 0)
    assert len(plog.segments) > 2
    f = plog.fetch_offset_by_timestamp
    assert f(0) == (0, 100, 1)
    assert f(100) == (0, 100, 1)
    assert f(101) == (1, 105, 1)
    assert f(106) == (2, 110, 1)
    assert f(111) == (3, 120, 1)  # first record >= 111 is offset 3 (ts 120), not 4 (ts 115)
    assert f(116) == (3, 120, 1)
    assert f(121) == (5, 130, 1)
    assert f(131) == (6, 200, 2)
    assert f(246) == (6 + 2 * 5, 250, 2)
    assert f(285) == (6 + 2 * 8 + 1, 285, 2)
    assert f(296) is None
    assert f(-2) == (0, -1, 1)
    assert f(-1) == (plog.log_end_offset, -1, 2)


def test_max_timestamp_lookup(open_log) -> None:
    plog = open_log(LogConfig(segment_bytes=500))
    plog.append_as_leader(batch(2, ts=[10, 20]), 0, 0)
    plog.append_as_leader(batch(4, ts=[30, 999, 40, 999], codec=4), 0, 0)  # offsets 2..5, max at 3
    for i in range(8):
        plog.append_as_leader(batch(2, ts=[50 + i, 60 + i], value_size=100), 0, 0)
    assert len(plog.segments) > 1
    assert plog.fetch_offset_by_timestamp(-3) == (3, 999, 0)
    plog.close()
    reopened = open_log(LogConfig(segment_bytes=500))
    assert reopened.fetch_offset_by_timestamp(-3) == (3, 999, 0)
    assert open_log(LogConfig(), clean_shutdown=True).fetch_offset_by_timestamp(-3) == (3, 999, 0)


def test_max_timestamp_empty_log(open_log) -> None:
    plog = open_log()
    assert plog.fetch_offset_by_timestamp(-3) is None
    assert plog.fetch_offset_by_timestamp(5) is None
    assert plog.fetch_offset_by_timestamp(-2) == (0, -1, -1)


def test_time_based_roll(open_log) -> None:
    plog = open_log(LogConfig(segment_ms=1000))
    plog.append_as_leader(batch(1, ts=10_000), 0, 0)
    plog.append_as_leader(batch(1, ts=10_500), 0, 0)
    assert len(plog.segments) == 1
    plog.append_as_leader(batch(1, ts=11_001), 0, 0)
    assert [s.base_offset for s in plog.segments] == [0, 2]


# -- recovery --------------------------------------------------------------------------------------


def _fill(plog: PartitionLog, n: int = 30) -> list[bytes]:
    out = []
    for i in range(n):
        b = batch(1 + i % 4, ts=1000 + i, value_size=40, tag=i)
        plog.append_as_leader(b, 0, 0)
        out.append(b)
    return out


@pytest.mark.parametrize("clean", [False, True])
def test_recovery_truncates_torn_tail(open_log, clean: bool) -> None:
    cfg = LogConfig(segment_bytes=2000, index_interval_bytes=200)
    plog = open_log(cfg)
    _fill(plog)
    good = plog.read(0, 10**9).read_bytes()
    plog.close()
    last_seg = sorted(plog.dir.glob("*.log"))[-1]
    size = last_seg.stat().st_size
    last_batch = list(iter_batches(good))[-1]
    with open(last_seg, "r+b") as f:
        f.truncate(size - last_batch.size // 2)  # cut the last batch in half
    reopened = open_log(cfg, clean_shutdown=clean, recovery_point=0)
    assert reopened.log_end_offset == last_batch.base_offset
    assert reopened.read(0, 10**9).read_bytes() == good[: len(good) - last_batch.size]
    assert last_seg.stat().st_size == size - last_batch.size
    # appends continue at the recovered LEO
    info = reopened.append_as_leader(batch(1), 0, 0)
    assert info.first_offset == last_batch.base_offset


def test_recovery_of_corrupt_byte_drops_later_segments(open_log) -> None:
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=200)
    plog = open_log(cfg)
    _fill(plog, 40)
    good = plog.read(0, 10**9).read_bytes()
    batches = list(iter_batches(good))
    segs = plog.segments
    assert len(segs) >= 3
    victim_seg = segs[1]
    victim_hdr = victim_seg.translate_offset(victim_seg.base_offset + 1)
    plog.close()
    # flip a byte inside the CRC-covered part of a batch in the second segment
    with open(victim_seg.log_path, "r+b") as f:
        f.seek(victim_hdr.position + 70)
        byte = f.read(1)
        f.seek(victim_hdr.position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = open_log(cfg, clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == victim_hdr.base_offset
    assert [s.base_offset for s in reopened.segments] == [segs[0].base_offset, segs[1].base_offset]
    assert len(list(plog.dir.glob("*.log"))) == 2
    kept = reopened.read(0, 10**9).read_bytes()
    n_kept = sum(1 for b in batches if b.last_offset < victim_hdr.base_offset)
    assert kept == b"".join(bytes(b.buffer) for b in batches[:n_kept])


def test_unclean_shutdown_only_recovers_after_recovery_point(open_log) -> None:
    cfg = LogConfig(segment_bytes=1500)
    plog = open_log(cfg)
    _fill(plog, 40)
    plog.close()
    clean = open_log(cfg)
    state = _state(clean)
    clean.close()
    mtimes = {p.name: p.stat().st_mtime_ns for p in plog.dir.glob("*.index")}
    reopened = open_log(cfg, clean_shutdown=False, recovery_point=state["bases"][-1])
    assert _state(reopened) == state
    changed = {p.name for p in plog.dir.glob("*.index") if p.stat().st_mtime_ns != mtimes[p.name]}
    assert changed <= {f"{state['bases'][-1]:020d}.index"}  # only the last segment was rebuilt


def test_reopen_gives_identical_state(open_log) -> None:
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=500)
    plog = open_log(cfg)
    _fill(plog, 50)
    plog.append_as_leader(batch(2), 5, 0)
    plog.high_watermark = plog.log_end_offset - 1
    reads = [plog.read(o, 700).read_bytes() for o in range(0, plog.log_end_offset, 7)]
    lookups = [plog.fetch_offset_by_timestamp(t) for t in (-3, -2, -1, 0, 1010, 1030, 1049, 5000)]
    hw = plog.high_watermark
    plog.close()  # adds the final time index entry of the active segment
    state = _state(plog)
    for clean in (True, False):
        again = open_log(cfg, clean_shutdown=clean, high_watermark=hw)
        st2 = _state(again)
        assert st2 == state
        assert [again.read(o, 700).read_bytes() for o in range(0, again.log_end_offset, 7)] == reads
        assert [again.fetch_offset_by_timestamp(t) for t in (-3, -2, -1, 0, 1010, 1030, 1049, 5000)] == lookups
        again.close()


def test_stray_files_removed_and_topic_id_checked(open_log, log_dir: Path) -> None:
    plog = open_log()
    plog.append_as_leader(batch(1), 0, 0)
    plog.close()
    d = log_dir / "t-0"
    for name in ("00000000000000000000.log.deleted", "00000000000000000005.index.swap", "x.cleaned",
                 "00000000000000000077.index"):
        (d / name).write_bytes(b"junk")
    again = open_log()
    names = sorted(os.listdir(d))
    assert names == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        "00000000000000000001.snapshot",  # producer state at the log end offset, written by close()
        "leader-epoch-checkpoint", "partition.metadata",
    ]
    assert again.log_end_offset == 1
    again.close()
    with pytest.raises(KafkaError) as ei:
        open_log(topic_id=bytes(16))
    assert ei.value.code == ErrorCode.INCONSISTENT_TOPIC_ID
    assert open_log(topic_id=None).topic_id == TOPIC_ID


# -- truncation / retention / deletion ---------------------------------------------------------------


def test_truncate_to(open_log) -> None:
    plog = open_log(LogConfig(segment_bytes=600))
    plog.append_as_leader(batch(3), 1, 0)  # 0-2
    for i in range(10):
        plog.append_as_leader(batch(2, value_size=50), 2 + i // 5, 0)  # 3.., epoch 2 then 3
    plog.high_watermark = plog.log_end_offset
    assert plog.truncate_to(8)  # offset 8 is inside batch 7-8 -> batch removed, LEO 7
    assert plog.log_end_offset == 7 and plog.high_watermark == 7
    assert _offsets(plog.read(0, 10**9).read_bytes())[-1] == (5, 6)
    assert plog.leader_epoch_cache.entries() == [(1, 0), (2, 3)]
    assert not plog.truncate_to(100)
    info = plog.append_as_leader(batch(1), 4, 0)
    assert info.first_offset == 7
    assert plog.truncate_to(1)
    assert plog.log_end_offset == 0 and len(plog.segments) == 1


def test_append_as_follower(open_log) -> None:
    leader = open_log()
    for e in (1, 1, 2):
        leader.append_as_leader(batch(2), e, 0)
    data = leader.read(0, 10**9).read_bytes()
    follower = PartitionLog(leader.dir.parent / "f-0", LogConfig(), clean_shutdown=True)
    info = follower.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert follower.log_end_offset == 6
    assert follower.leader_epoch_cache.entries() == [(1, 0), (2, 4)]
    assert follower.read(0, 10**9).read_bytes() == data
    with pytest.raises(KafkaError):
        follower.append_as_follower(data)
    follower.close()


def test_retention_by_time(open_log) -> None:
    cfg = LogConfig(segment_bytes=800, retention_ms=10_000, file_delete_delay_ms=1000)
    plog = open_log(cfg)
    for i in range(30):
        plog.append_as_leader(batch(1, ts=1000 * i, value_size=100), 0, 0)  # ts 0 .. 29000
    plog.high_watermark = plog.log_end_offset
    segs = plog.segments
    assert len(segs) > 3
    held = plog.read(0, 10**6)  # in-flight read of the oldest data
    now = 35_000  # keep segments whose largest timestamp >= 25000
    deleted = plog.delete_retention(now)
    assert deleted > 0
    remaining = plog.segments
    assert all(now - s.largest_timestamp <= 10_000 for s in remaining[:-1])
    assert remaining[0].base_offset == plog.log_start_offset == segs[deleted].base_offset
    assert list(plog.dir.glob("*.log.deleted"))
    assert held.read_bytes()  # still readable during the delete delay
    with pytest.raises(KafkaError):
        plog.read(0, 100)
    assert plog.purge_deleted(now + 999) == 0
    assert plog.purge_deleted(now + 1000) == deleted
    assert not list(plog.dir.glob("*.deleted"))
    # everything old and below the high watermark: the active segment goes too (Kafka), after a roll to an
    # empty segment at the log end offset
    leo = plog.log_end_offset
    plog.delete_retention(10**9)
    assert len(plog.segments) == 1 and plog.segments[0] is not remaining[-1]
    assert plog.segments[0].size == 0 and plog.segments[0].base_offset == leo == plog.log_start_offset
    # an empty active segment is kept
    assert plog.delete_retention(10**9 + 1) == 0 and len(plog.segments) == 1


def test_retention_by_bytes_and_hw_bound(open_log) -> None:
    cfg = LogConfig(segment_bytes=1000, retention_bytes=2500, retention_ms=-1, file_delete_delay_ms=0)
    plog = open_log(cfg)
    for i in range(40):
        plog.append_as_leader(batch(1, value_size=150), 0, 0)
    total = plog.size_in_bytes
    plog.high_watermark = 0
    assert plog.delete_retention(0) == 0  # nothing below the HW
    plog.high_watermark = plog.log_end_offset
    deleted = plog.delete_retention(0)
    assert deleted > 0
    assert plog.size_in_bytes < total
    assert plog.size_in_bytes >= 2500  # never deletes below retention.bytes
    assert plog.size_in_bytes - 2500 < plog.segments[0].size  # the next-oldest segment would overshoot
    assert plog.log_start_offset == plog.segments[0].base_offset
    plog.purge_deleted(0)
    assert not list(plog.dir.glob("*.deleted"))


def test_advance_log_start_offset_deletes_whole_segments(open_log) -> None:
    plog = open_log(LogConfig(segment_bytes=700, retention_ms=-1, file_delete_delay_ms=0))
    for _ in range(20):
        plog.append_as_leader(batch(1, value_size=150), 0, 0)
    plog.high_watermark = plog.log_end_offset
    plog.advance_log_start_offset(7)
    assert plog.log_start_offset == 7
    plog.delete_retention(0)
    assert plog.segments[0].base_offset <= 7 < plog.segments[0].next_offset
    assert plog.log_start_offset == 7
    assert next(iter_batches(plog.read(7, 1).read_bytes())).base_offset == 7


def test_flush_messages_and_time(open_log) -> None:
    plog = open_log(LogConfig(flush_messages=3))
    plog.append_as_leader(batch(2), 0, 0)
    assert plog.recovery_point == 0
    plog.append_as_leader(batch(1), 0, 0)
    assert plog.recovery_point == 3
    plog2 = open_log(LogConfig(flush_ms=100), name="u-0")
    plog2.append_as_leader(batch(1), 0, 0)
    plog2._last_flush_ms = 0
    assert not plog2.maybe_flush_by_time(50)
    assert plog2.recovery_point == 0
    assert plog2.maybe_flush_by_time(200)
    assert plog2.recovery_point == plog2.log_end_offset


def test_delete_removes_directory(open_log, log_dir: Path) -> None:
    plog = open_log()
    plog.append_as_leader(batch(1), 0, 0)
    plog.delete()
    assert not (log_dir / "t-0").exists()
    assert not [p for p in log_dir.iterdir() if p.name.endswith("-delete")]


# -- property: random appends then reads -------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(0, 250), st.sampled_from([0, 1, 3])), min_size=1, max_size=25),
    st.integers(300, 2000),
    st.integers(0, 600),
)
def test_random_appends_read_back(tmp_path_factory, appends, segment_bytes, interval) -> None:
    d = tmp_path_factory.mktemp("prop") / "p-0"
    cfg = LogConfig(segment_bytes=max(segment_bytes, 2000), index_interval_bytes=interval)
    plog = PartitionLog(d, cfg, clean_shutdown=True)
    expected: list[tuple[int, int, bytes]] = []
    for i, (n, vs, codec) in enumerate(appends):
        b = batch(n, ts=list(range(1000 * i, 1000 * i + n)), value_size=vs, codec=codec, tag=i)
        info = plog.append_as_leader(b, 0, 0)
        expected.append((info.first_offset, info.last_offset, b[61:]))
    data = plog.read(0, 10**9).read_bytes()
    got = list(iter_batches(data))
    assert [(g.base_offset, g.last_offset) for g in got] == [(e[0], e[1]) for e in expected]
    assert all(bytes(g.buffer[61:]) == e[2] for g, e in zip(got, expected))
    for first, last, _ in expected:
        for o in {first, last}:
            fb = next(iter_batches(plog.read(o, 1).read_bytes()))
            assert (fb.base_offset, fb.last_offset) == (first, last)
    i = len(appends) // 2
    assert plog.fetch_offset_by_timestamp(1000 * i) == (expected[i][0], 1000 * i, 0)
    plog.close()
    again = PartitionLog(d, cfg, clean_shutdown=False)
    assert again.read(0, 10**9).read_bytes() == data
    again.close()


@pytest.mark.parametrize("tail", [b"\x00" * 100, b"\x00" * 30, b"\xff" * 7])
@pytest.mark.parametrize("clean", [False, True])
def test_recovery_drops_garbage_tail(open_log, tail: bytes, clean: bool) -> None:
    plog = open_log()
    _fill(plog, 5)
    good = plog.read(0, 10**9).read_bytes()
    leo = plog.log_end_offset
    plog.close()
    seg = sorted(plog.dir.glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(tail)
    again = open_log(clean_shutdown=clean)
    assert again.log_end_offset == leo
    assert again.read(0, 10**9).read_bytes() == good
    assert seg.stat().st_size == len(good)
