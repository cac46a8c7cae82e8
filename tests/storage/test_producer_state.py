"""Idempotent-producer state (kbroker/storage/producer_state.py) through PartitionLog, as Kafka 4.3 applies it:
duplicates of the last 5 batches, epochs, sequences (with wrap-around), expiry, snapshots and recovery."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import ControlType, build_batch, build_control_batch, crc32c, iter_batches
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog
from kbroker.storage.log_manager import LogManager
from kbroker.storage.producer_state import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    AppendOrigin,
    CorruptSnapshotError,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    in_sequence,
    increment_sequence,
    read_snapshot,
)

from .conftest import TOPIC_ID

PID = 4000
TS = 1_000


def ibatch(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = TS, txn: bool = False,
           tag: str = "") -> bytes:
    """An idempotent producer's batch of ``n`` records starting at sequence ``seq``."""
    recs = [(f"k{seq}-{i}".encode(), f"{tag}v{seq}-{i}".encode(), [], ts) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def plain(n: int = 1) -> bytes:
    return build_batch([(b"k", b"v", [], TS)] * n)


def appended(plog: PartitionLog, data: bytes, epoch: int = 0, now: int = 5_000):
    return plog.append_as_leader(data, epoch, now)


def code_of(plog: PartitionLog, data: bytes) -> int:
    leo, size = plog.log_end_offset, plog.size_in_bytes
    with pytest.raises(KafkaError) as ei:
        appended(plog, data)
    assert (plog.log_end_offset, plog.size_in_bytes) == (leo, size), "a refused batch must write nothing"
    return ei.value.code


def log_records(plog: PartitionLog) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for b in iter_batches(plog.read(plog.log_start_offset, 1 << 30).read_bytes())
            for r in b.records()]


def crash_copy(plog: PartitionLog, root: Path) -> Path:
    """What a kill -9 leaves: the partition directory as it is now, without close()."""
    target = root / plog.dir.name
    shutil.copytree(plog.dir, target)
    return target


def reopen(dir: Path, clean: bool, config: LogConfig | None = None, now: int = 0, **kw) -> PartitionLog:
    return PartitionLog(dir, config or LogConfig(), topic_id=TOPIC_ID, clean_shutdown=clean, now_ms=now, **kw)


# -- sequence arithmetic ---------------------------------------------------------------------------


def test_sequence_arithmetic_wraps_at_int32_max() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert decrement_sequence(0, 1) == INT32_MAX
    assert in_sequence(4, 5) and in_sequence(-1, 0) and in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 6) and not in_sequence(4, 4) and not in_sequence(INT32_MAX, 1)


# -- leader appends ---------------------------------------------------------------------------------


def test_in_sequence_batches_are_written_and_tracked(open_log) -> None:
    plog = open_log()
    assert appended(plog, ibatch(0, 3)).first_offset == 0
    assert appended(plog, plain(2)).first_offset == 3
    assert appended(plog, ibatch(3, 2)).first_offset == 5
    entry = plog.producer_state.last_entry(PID)
    assert entry.producer_epoch == 0 and entry.last_seq == 4 and entry.first_seq == 0
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [(0, 2, 0, 2), (3, 4, 5, 6)]
    assert plog.producer_state.map_end_offset == plog.log_end_offset == 7


def test_retry_of_any_of_the_last_five_batches_returns_the_original_offsets(open_log) -> None:
    plog = open_log()
    firsts = {}
    seq = 0
    for i in range(7):
        appended(plog, plain())  # other writers in between: offsets and sequences differ
        firsts[seq] = appended(plog, ibatch(seq, 2, tag=f"#{i}"), now=10_000 + i).first_offset
        seq += 2
    leo, size = plog.log_end_offset, plog.size_in_bytes
    retained = sorted(firsts)[-NUM_BATCHES_TO_RETAIN:]
    for s in retained:
        info = appended(plog, ibatch(s, 2, tag="retry"), now=99_999)
        assert (info.first_offset, info.last_offset) == (firsts[s], firsts[s] + 1)
        assert info.valid_bytes == 0 and info.num_messages == 0
        assert info.log_append_time == TS  # Kafka reports the original batch's timestamp here
    assert (plog.log_end_offset, plog.size_in_bytes) == (leo, size)
    assert all(not v.startswith(b"retry") for _, v in log_records(plog))
    # the two oldest batches fell out of the window: a retry is no longer recognised, and is out of order
    for s in sorted(firsts)[:-NUM_BATCHES_TO_RETAIN]:
        assert code_of(plog, ibatch(s, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_duplicate_needs_the_same_epoch_and_the_exact_sequence_range(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, 3))
    # same first sequence, different length: not a duplicate, and not in sequence either
    assert code_of(plog, ibatch(0, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(plog, ibatch(1, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # the same range in a newer epoch is no duplicate: a new epoch starting at sequence 0 is written
    assert appended(plog, ibatch(0, 3, epoch=1)).first_offset == 3


def test_gap_is_out_of_order_and_nothing_is_written(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, 2))
    assert code_of(plog, ibatch(3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(plog, ibatch(1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a retry
    assert appended(plog, ibatch(2)).first_offset == 2


def test_older_epoch_is_invalid_producer_epoch(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, epoch=3))
    assert code_of(plog, ibatch(1, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(plog, ibatch(0, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH  # even a "retry" of seq 0


def test_new_epoch_must_start_at_sequence_zero_and_drops_the_old_window(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, 2, epoch=0))
    appended(plog, ibatch(2, 2, epoch=0))
    assert code_of(plog, ibatch(4, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(plog, ibatch(0, 1, epoch=1)).first_offset == 4
    entry = plog.producer_state.last_entry(PID)
    assert entry.producer_epoch == 1 and [b.last_seq for b in entry.batches] == [0]
    assert code_of(plog, ibatch(2, 2, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_unknown_producer_is_accepted_at_any_sequence(open_log) -> None:
    # Kafka 4.x: no state (new, expired, or all its batches deleted) -> no epoch -> any sequence is
    # accepted; the broker never answers UNKNOWN_PRODUCER_ID to Produce.
    plog = open_log()
    assert appended(plog, ibatch(17, 2)).first_offset == 0
    assert appended(plog, ibatch(19)).first_offset == 2
    assert code_of(plog, ibatch(21 + 1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_from_int32_max_to_zero(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(INT32_MAX - 1, 1))
    first = appended(plog, ibatch(INT32_MAX, 3)).first_offset  # sequences MAX, 0, 1
    entry = plog.producer_state.last_entry(PID)
    assert (entry.batches[-1].first_seq, entry.batches[-1].last_seq) == (INT32_MAX, 1)
    assert appended(plog, ibatch(INT32_MAX, 3)).first_offset == first  # the wrapped batch is recognised
    assert code_of(plog, ibatch(3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(plog, ibatch(2)).first_offset == first + 3
    # a batch ending exactly at MAX is followed by 0
    plog2 = open_log(name="t-1")
    appended(plog2, ibatch(INT32_MAX - 1, 2, pid=9))
    assert appended(plog2, ibatch(0, 1, pid=9)).first_offset == 2


def test_producers_are_independent(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, pid=1))
    appended(plog, ibatch(5, pid=2))
    appended(plog, ibatch(1, pid=1))
    assert appended(plog, ibatch(0, pid=1)).first_offset == 0
    assert appended(plog, ibatch(5, pid=2)).first_offset == 1
    assert code_of(plog, ibatch(7, pid=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_log_append_time_topic_remembers_the_append_time(open_log) -> None:
    plog = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = appended(plog, ibatch(0), now=7_777)
    assert info.log_append_time == 7_777
    dup = appended(plog, ibatch(0), now=8_888)
    assert (dup.first_offset, dup.log_append_time) == (0, 7_777)


def test_several_batches_of_one_producer_in_one_append(open_log) -> None:
    plog = open_log()
    info = appended(plog, ibatch(0, 2) + ibatch(2, 1) + ibatch(3, 4))
    assert (info.first_offset, info.last_offset) == (0, 6)
    assert [b.last_seq for b in plog.producer_state.last_entry(PID).batches] == [1, 2, 6]
    leo = plog.log_end_offset
    with pytest.raises(KafkaError) as ei:  # the second batch is out of order: nothing of the append is written
        appended(plog, ibatch(7) + ibatch(9))
    assert ei.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and plog.log_end_offset == leo
    assert plog.producer_state.last_entry(PID).last_seq == 6


def test_replication_origin_applies_without_checks(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, epoch=5))
    b = bytearray(ibatch(9, epoch=4))
    struct.pack_into(">q", b, 0, plog.log_end_offset)
    info = plog.append_as_follower(bytes(b))  # older epoch and a gap: a follower takes what the leader wrote
    assert info.first_offset == 1
    # the older epoch is only logged; the state follows what the log now holds, as in Kafka
    entry = plog.producer_state.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq) == (4, 9)


# -- transactions groundwork ------------------------------------------------------------------------


def test_transactional_state_and_markers(open_log) -> None:
    plog = open_log()
    appended(plog, ibatch(0, 2, txn=True), now=1)
    entry = plog.producer_state.last_entry(PID)
    assert entry.current_txn_first_offset == 0 and plog.producer_state.ongoing_txns == {0: PID}
    assert code_of(plog, ibatch(2)) == ErrorCode.INVALID_TXN_STATE
    marker = bytearray(build_control_batch(ControlType.COMMIT, PID, 0, coordinator_epoch=7, timestamp=TS))
    struct.pack_into(">q", marker, 0, plog.log_end_offset)
    plog.append_as_follower(bytes(marker))
    entry = plog.producer_state.last_entry(PID)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_seq) == (-1, 7, 1)
    assert plog.producer_state.ongoing_txns == {}
    # the marker keeps the epoch's batches: the sequence simply continues, now outside a transaction
    assert appended(plog, ibatch(0, 2, txn=True)).valid_bytes == 0
    assert appended(plog, ibatch(2)).first_offset == 3


def test_marker_rules_for_the_coordinator_origin() -> None:
    current = ProducerStateEntry(PID, producer_epoch=3, coordinator_epoch=5, current_txn_first_offset=10)
    info = ProducerAppendInfo("t-0", PID, current, AppendOrigin.COORDINATOR)
    with pytest.raises(KafkaError) as ei:
        info.append_end_txn_marker(ControlType.ABORT, 4, 3, 20, TS)
    assert ei.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KafkaError) as ei:
        info.append_end_txn_marker(ControlType.ABORT, 5, 2, 20, TS)
    assert ei.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # transactions v2: the marker epoch must be bumped past the current one ...
    with pytest.raises(KafkaError):
        info.append_end_txn_marker(ControlType.COMMIT, 5, 3, 20, TS, transaction_version=2)
    done = info.append_end_txn_marker(ControlType.COMMIT, 5, 4, 20, TS, transaction_version=2)
    assert done == (PID, 10, 20, False)
    # ... except a retry of the marker of a transaction that already ended
    retry = ProducerAppendInfo("t-0", PID, info.updated, AppendOrigin.COORDINATOR)
    assert retry.append_end_txn_marker(ControlType.COMMIT, 5, 4, 21, TS, transaction_version=2) is None


# -- expiry -----------------------------------------------------------------------------------------


def test_idle_producers_expire_and_then_count_as_unknown(open_log) -> None:
    plog = open_log(producer_id_expiration_ms=1_000)
    appended(plog, ibatch(0, ts=100))
    appended(plog, ibatch(0, pid=PID + 1, ts=900))
    appended(plog, ibatch(0, pid=PID + 2, ts=100, txn=True))
    psm = plog.producer_state
    assert psm.remove_expired_producers(1_099) == 0
    assert psm.remove_expired_producers(1_100) == 1  # idle for >= producer.id.expiration.ms
    assert psm.last_entry(PID) is None and psm.last_entry(PID + 1) is not None
    assert psm.remove_expired_producers(10**9) == 1 and psm.last_entry(PID + 2) is not None  # open transaction
    # its next batch is accepted at any sequence; an old retry is no longer recognised and is written again
    assert appended(plog, ibatch(5, ts=2_000)).first_offset == 3
    assert appended(plog, ibatch(6, ts=2_000)).first_offset == 4


def test_log_manager_checks_expiry_periodically(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "d"], LogConfig(), producer_id_expiration_ms=1_000,
                    producer_id_expiration_check_interval_ms=60_000)
    lm.startup(now_ms=0)
    plog = lm.get_or_create_log("t", 0, TOPIC_ID)
    plog.append_as_leader(ibatch(0, ts=0), 0, 0)
    lm.cleanup(500)
    assert plog.producer_state.last_entry(PID) is not None
    lm.cleanup(30_000)  # expired, but the check interval has not passed since the check at 500
    assert plog.producer_state.last_entry(PID) is not None
    lm.cleanup(60_500)
    assert plog.producer_state.last_entry(PID) is None
    lm.shutdown()


def test_expired_producers_are_not_loaded_from_a_snapshot(open_log, log_dir: Path) -> None:
    plog = open_log()
    appended(plog, ibatch(0, ts=100))
    appended(plog, ibatch(0, pid=PID + 1, ts=5_000))
    plog.close()
    again = open_log(now_ms=100 + 86_400_000)
    assert again.producer_state.last_entry(PID) is None
    assert again.producer_state.last_entry(PID + 1) is not None


# -- snapshot format --------------------------------------------------------------------------------


def test_snapshot_bytes_follow_kafkas_layout() -> None:
    e = ProducerStateEntry(7, producer_epoch=2, coordinator_epoch=9, last_timestamp=123, current_txn_first_offset=-1)
    e.add_batch(2, 41, 1000, 3, 123)
    empty = ProducerStateEntry(8, producer_epoch=1, last_timestamp=50)
    data = encode_snapshot([empty, e])
    body = struct.pack(">i", 2)
    body += struct.pack(">qhiqiqiq", 7, 2, 41, 1000, 3, 123, 9, -1)
    body += struct.pack(">qhiqiqiq", 8, 1, -1, -1, 0, 50, -1, -1)
    assert data == struct.pack(">hI", 1, crc32c(body)) + body
    got = decode_snapshot(data)
    assert got[0] == e and got[1] == empty
    assert (got[0].batches[0].first_seq, got[0].batches[0].first_offset) == (38, 997)


@given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, INT32_MAX),
                          st.integers(0, 2**62), st.integers(0, 100), st.integers(-1, 2**62),
                          st.integers(-1, 2**31 - 1), st.integers(-1, 2**62)),
                unique_by=lambda t: t[0], max_size=20))
def test_snapshot_round_trip(entries) -> None:
    made = []
    for pid, epoch, last_seq, last_off, delta, ts, coord, txn in entries:
        e = ProducerStateEntry(pid, epoch, coord, ts, txn)
        e.add_batch(epoch, last_seq, last_off + delta, delta, ts)
        made.append(e)
    assert decode_snapshot(encode_snapshot(made)) == sorted(made, key=lambda e: e.producer_id)


def test_snapshot_corruption_is_detected() -> None:
    e = ProducerStateEntry(7, 0, -1, 1, -1)
    e.add_batch(0, 4, 9, 4, 1)
    data = bytearray(encode_snapshot([e]))
    for i in range(2, len(data)):  # every bit flip after the version is caught by the CRC (or the parser)
        for bit in (0, 7):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            with pytest.raises(CorruptSnapshotError):
                decode_snapshot(bytes(bad))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(struct.pack(">h", 2) + bytes(data[2:]))  # unknown version
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data) + b"\0")
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data[:-1]))


# -- snapshot files ---------------------------------------------------------------------------------


def _snapshots(plog: PartitionLog) -> list[str]:
    return sorted(n for n in os.listdir(plog.dir) if n.endswith(".snapshot"))


def test_snapshots_at_roll_and_close_and_removed_with_their_segments(open_log) -> None:
    plog = open_log(LogConfig(segment_bytes=300, retention_bytes=0))
    for s in range(12):
        appended(plog, ibatch(s, tag="x" * 40))
    bases = [seg.base_offset for seg in plog.segments]
    assert len(bases) > 3
    assert plog.producer_state.snapshot_offsets() == bases[1:]  # one per roll, at the new segment's base
    snap = read_snapshot(plog.dir / f"{bases[1]:020d}.snapshot")
    assert [(e.producer_id, e.last_seq, e.last_data_offset) for e in snap] == [(PID, bases[1] - 1, bases[1] - 1)]
    plog.high_watermark = plog.log_end_offset
    leo = plog.log_end_offset
    plog.delete_retention(now_ms=10**12)  # retention.bytes 0: every segment goes, the active one after a roll
    assert plog.log_start_offset == leo
    assert plog.producer_state.snapshot_offsets() == [leo]
    assert plog.producer_state.last_entry(PID).last_seq == 11  # retention does not forget producers (Kafka)
    plog.close()
    assert _snapshots(plog) == [f"{leo:020d}.snapshot"]


def test_stray_snapshots_are_removed_at_load(open_log) -> None:
    plog = open_log(LogConfig(segment_bytes=300))
    for s in range(8):
        appended(plog, ibatch(s, tag="x" * 40))
    bases = [seg.base_offset for seg in plog.segments]
    plog.close()
    d = plog.dir
    (d / f"{bases[1] + 1:020d}.snapshot").write_bytes(b"stray, between two segment bases")
    (d / f"{plog.log_end_offset + 5:020d}.snapshot").write_bytes(b"stray, newer than everything")
    again = open_log(LogConfig(segment_bytes=300))
    # the newest stray is kept by remove_stray_snapshots, then dropped for lying beyond the log end offset;
    # the clean-shutdown snapshot at the log end offset is not a segment base but stays.
    assert again.producer_state.snapshot_offsets() == bases[1:] + [again.log_end_offset]
    assert again.producer_state.last_entry(PID).last_seq == 7


# -- recovery ---------------------------------------------------------------------------------------


def test_clean_restart_loads_the_snapshot_and_catches_a_retry_of_the_last_batch(open_log) -> None:
    plog = open_log()
    for s in range(0, 10, 2):
        appended(plog, ibatch(s, 2))
    plog.close()
    again = open_log()
    entry = again.producer_state.last_entry(PID)
    assert [(b.first_seq, b.last_seq) for b in entry.batches] == [(8, 9)]  # a snapshot holds the last batch only
    assert appended(again, ibatch(8, 2)).first_offset == 8
    # as in Kafka, older batches of the window are not in the snapshot: their retry is out of order
    assert code_of(again, ibatch(6, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert appended(again, ibatch(10)).first_offset == 10


def test_after_a_crash_only_the_last_batch_is_recognised(open_log, tmp_path: Path) -> None:
    # as Kafka 4.3.1 (compat_tests/test_idempotence.py checks it against Kafka): recovery rebuilds the state from
    # the log, writes it as a snapshot at the log end and loads it from there, which keeps each producer's last
    # batch only
    plog = open_log()
    offsets = {}
    for s in range(0, 16, 2):
        offsets[s] = appended(plog, ibatch(s, 2)).first_offset
    crashed = reopen(crash_copy(plog, tmp_path / "crash"), clean=False)
    leo = crashed.log_end_offset
    assert leo == plog.log_end_offset
    info = appended(crashed, ibatch(14, 2))
    assert (info.first_offset, info.valid_bytes) == (offsets[14], 0)
    for s in (12, 6, 4):  # inside the window of 5 before the crash, no longer after it
        assert code_of(crashed, ibatch(s, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert crashed.log_end_offset == leo
    assert appended(crashed, ibatch(16)).first_offset == leo
    crashed.close()


def test_after_a_crash_replay_starts_at_the_latest_snapshot(open_log, tmp_path: Path) -> None:
    # the replay from the latest snapshot (at the last segment's base) rebuilds the log's producer state, which is
    # then loaded from the snapshot recovery writes at the log end: the last batch only, as in Kafka
    cfg = LogConfig(segment_bytes=500)
    plog = open_log(cfg)
    offsets = {}
    for s in range(0, 40, 2):
        offsets[s] = appended(plog, ibatch(s, 2, tag="y" * 30)).first_offset
    snap = max(plog.producer_state.snapshot_offsets())
    assert snap == plog.segments[-1].base_offset
    crashed = reopen(crash_copy(plog, tmp_path / "crash"), clean=False, config=cfg)
    assert max(crashed.producer_state.snapshot_offsets()) == crashed.log_end_offset
    assert [b.first_seq for b in crashed.producer_state.last_entry(PID).batches] == [38]
    assert appended(crashed, ibatch(38, 2)).first_offset == offsets[38]
    assert code_of(crashed, ibatch(36, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    crashed.close()


def test_crash_without_any_snapshot_replays_from_the_log_start(open_log, tmp_path: Path) -> None:
    plog = open_log()
    for s in range(3):
        appended(plog, ibatch(s))
    assert plog.producer_state.snapshot_offsets() == []
    crashed = reopen(crash_copy(plog, tmp_path / "crash"), clean=False)
    # the producer is known again (replayed from the log start), with its last batch: the state is loaded from
    # the snapshot written after the rebuild
    assert [b.last_seq for b in crashed.producer_state.last_entry(PID).batches] == [2]
    assert crashed.producer_state.snapshot_offsets() == [3]
    crashed.close()


def test_recovery_after_a_torn_tail_forgets_the_lost_batch(open_log, tmp_path: Path) -> None:
    plog = open_log()
    for s in range(4):
        appended(plog, ibatch(s))
    copy = crash_copy(plog, tmp_path / "crash")
    seg = copy / "00000000000000000000.log"
    size = seg.stat().st_size
    os.truncate(seg, size - 7)  # the last batch (seq 3, offset 3) is torn
    crashed = reopen(copy, clean=False)
    assert crashed.log_end_offset == 3
    assert crashed.producer_state.last_entry(PID).last_seq == 2
    assert appended(crashed, ibatch(2)).valid_bytes == 0  # still a duplicate
    info = appended(crashed, ibatch(3))  # the retry of the lost batch is written (again)
    assert (info.first_offset, info.valid_bytes > 0) == (3, True)
    crashed.close()


def test_snapshot_beyond_the_recovered_log_end_is_deleted(open_log, tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300)
    plog = open_log(cfg)
    for s in range(10):
        appended(plog, ibatch(s, tag="z" * 40))
    last_base = plog.segments[-1].base_offset
    copy = crash_copy(plog, tmp_path / "crash")
    # lose the newest segment entirely (its data never reached the disk) but keep the snapshot at its base
    for suffix in (".log", ".index", ".timeindex"):
        (copy / f"{last_base:020d}{suffix}").unlink()
    crashed = reopen(copy, clean=False, config=cfg)
    assert crashed.log_end_offset == last_base
    assert max(crashed.producer_state.snapshot_offsets()) == last_base  # rebuilt up to, not beyond, the LEO
    assert crashed.producer_state.last_entry(PID).last_data_offset == last_base - 1
    crashed.close()


def test_corrupt_latest_snapshot_falls_back_to_an_older_one(open_log, tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300)
    plog = open_log(cfg)
    for s in range(10):
        appended(plog, ibatch(s, tag="z" * 40))
    copy = crash_copy(plog, tmp_path / "crash")
    latest = max(plog.producer_state.snapshot_offsets())
    p = copy / f"{latest:020d}.snapshot"
    p.write_bytes(p.read_bytes()[:-3])
    crashed = reopen(copy, clean=False, config=cfg)
    entry = crashed.producer_state.last_entry(PID)
    # replayed from the older snapshot up to the log end, then loaded from the snapshot written there
    assert entry.last_seq == 9 and [b.last_seq for b in entry.batches] == [9]
    assert max(crashed.producer_state.snapshot_offsets()) == crashed.log_end_offset
    crashed.close()


def test_truncation_rebuilds_producer_state(open_log) -> None:
    cfg = LogConfig(segment_bytes=300)
    plog = open_log(cfg)
    for s in range(12):
        appended(plog, ibatch(s, tag="w" * 40))
    bases = [seg.base_offset for seg in plog.segments]
    cut = bases[-2] + 1
    plog.truncate_to(cut)
    assert plog.log_end_offset == cut
    assert all(o <= cut for o in plog.producer_state.snapshot_offsets())
    assert plog.producer_state.last_entry(PID).last_seq == cut - 1
    assert appended(plog, ibatch(cut - 1)).valid_bytes == 0
    assert appended(plog, ibatch(cut)).first_offset == cut
    plog.truncate_fully_and_start_at(100)
    assert plog.producer_state.last_entry(PID) is None and _snapshots(plog) == []
    assert appended(plog, ibatch(57)).first_offset == 100  # unknown again: any sequence


def test_upgrade_without_snapshots_after_a_clean_shutdown_skips_the_scan(open_log) -> None:
    # Kafka's upgrade rule: a log with no snapshot at all after a clean shutdown predates producer state,
    # so it is not scanned; empty snapshots are written instead.
    plog = open_log()
    appended(plog, ibatch(0))
    plog.close()
    for name in _snapshots(plog):
        (plog.dir / name).unlink()
    again = open_log()
    assert again.producer_state.last_entry(PID) is None and _snapshots(again) == ["00000000000000000001.snapshot"]


# -- a producer with retries, restarts and crashes, against a model ---------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.tuples(st.just("send"), st.integers(1, 3)),
                          st.tuples(st.just("retry"), st.integers(0, 6)),
                          st.tuples(st.just("restart"), st.booleans())), max_size=40))
def test_retries_never_duplicate_or_reorder(tmp_path_factory, ops) -> None:
    root = tmp_path_factory.mktemp("model")
    cfg = LogConfig(segment_bytes=400)
    plog = reopen(root / "t-0", clean=True, config=cfg)
    sent: list[tuple[int, int, int]] = []  # (first seq, count, first offset) of every batch written
    window_ok = 0  # how many of the newest batches a restart left recognisable
    seq = 0
    for i, (op, arg) in enumerate(ops):
        if op == "send":
            info = appended(plog, ibatch(seq, arg, tag=f"s{i}"))
            assert info.first_offset == plog.log_end_offset - arg and info.valid_bytes > 0
            sent.append((seq, arg, info.first_offset))
            seq += arg
            window_ok = min(window_ok + 1, NUM_BATCHES_TO_RETAIN)
        elif op == "retry" and arg < len(sent):
            first_seq, count, first_offset = sent[-1 - arg]
            leo = plog.log_end_offset
            if arg < window_ok:
                assert appended(plog, ibatch(first_seq, count, tag="dup")).first_offset == first_offset
            else:
                try:
                    appended(plog, ibatch(first_seq, count, tag="dup"))
                    raise AssertionError("an old retry outside the window must be refused")
                except KafkaError as exc:
                    assert exc.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert plog.log_end_offset == leo
        elif op == "restart":
            if arg:  # clean: the snapshot at the log end keeps only the last batch
                plog.close()
                window_ok = min(window_ok, 1)
            else:  # kill -9: replayed from an older snapshot, so possibly more than the last batch is known
                dead = plog
                plog_dir = crash_copy(dead, root / f"crash{i}")
                dead.close()
                shutil.rmtree(dead.dir)
                shutil.move(str(plog_dir), str(dead.dir))
            plog = reopen(root / "t-0", clean=bool(arg), config=cfg)
            entry = plog.producer_state.last_entry(PID)
            known = 0 if entry is None else len(entry.batches)
            assert known == (min(len(sent), 1) if arg else min(known, window_ok))
            assert known >= min(len(sent), 1)
            window_ok = known
    values = [v for _, v in log_records(plog)]
    assert not any(v.startswith(b"dup") for v in values)
    expected = []
    s = 0
    for i, (op, arg) in enumerate(ops):
        if op == "send":
            expected += [f"s{i}v{s}-{k}".encode() for k in range(arg)]
            s += arg
    assert values == expected
    plog.close()
