"""Transactions in the log: the last stable offset, the ``.txnindex`` and aborted-transaction lookups."""

from __future__ import annotations

import struct

from kbroker.protocol.records import ControlType, build_batch, build_control_batch
from kbroker.storage.config import LogConfig
from kbroker.storage.producer_state import AppendOrigin
from kbroker.storage.txn_index import ENTRY_SIZE, AbortedTxn

NOW = 10_000


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch([(b"k", b"v%d" % i, None, NOW) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def plain(n: int = 1) -> bytes:
    return build_batch([(b"k", b"p", None, NOW)] * n)


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(ControlType.COMMIT if commit else ControlType.ABORT, pid, epoch, coordinator_epoch, NOW)


def append(plog, data: bytes, origin: AppendOrigin = AppendOrigin.CLIENT):
    info = plog.append_as_leader(data, 0, NOW, origin)
    plog.high_watermark = plog.log_end_offset
    return info


def test_last_stable_offset_follows_the_earliest_open_transaction(open_log) -> None:
    plog = open_log()
    append(plog, plain(2))  # 0-1
    assert plog.last_stable_offset == 2
    append(plog, txn_batch(1, 0))  # 2-3, producer 1 opens at 2
    append(plog, txn_batch(2, 0))  # 4-5, producer 2 opens at 4
    assert plog.first_unstable_offset == 2 and plog.last_stable_offset == 2
    append(plog, marker(1, commit=True), AppendOrigin.COORDINATOR)  # 6
    assert plog.last_stable_offset == 4
    append(plog, marker(2, commit=False), AppendOrigin.COORDINATOR)  # 7
    assert plog.last_stable_offset == plog.high_watermark == 8
    plog.high_watermark = 3
    append(plog, txn_batch(1, 2))
    plog.high_watermark = 8
    assert plog.last_stable_offset == 8  # capped at the high watermark (the open txn starts at 8)


def test_abort_markers_fill_the_txn_index_and_fetch_collects_them(open_log) -> None:
    plog = open_log()
    append(plog, txn_batch(1, 0))  # 0-1
    append(plog, txn_batch(2, 0))  # 2-3
    append(plog, marker(1, commit=False), AppendOrigin.COORDINATOR)  # 4: LSO after it = 2 (producer 2 open)
    append(plog, marker(2, commit=True), AppendOrigin.COORDINATOR)  # 5: commits are not indexed
    append(plog, txn_batch(3, 0))  # 6-7
    append(plog, marker(3, commit=False), AppendOrigin.COORDINATOR)  # 8
    seg = plog.active_segment
    assert seg.txn_index.entries == [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 6, 8, 9)]
    raw = seg.txn_index.path.read_bytes()
    assert len(raw) == 2 * ENTRY_SIZE == 68
    assert struct.unpack(">hqqqq", raw[:34]) == (0, 1, 0, 4, 2)
    assert plog.collect_aborted_transactions(0, 9) == seg.txn_index.entries
    assert plog.collect_aborted_transactions(5, 9) == [AbortedTxn(3, 6, 8, 9)]
    assert plog.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 4, 2)]
    info = plog.read(0, 1 << 20, plog.last_stable_offset)
    assert info.next_offset == 9


def test_txn_index_survives_restart_roll_and_truncation(open_log) -> None:
    cfg = LogConfig(segment_bytes=400)
    plog = open_log(cfg)
    for pid in range(1, 6):
        append(plog, txn_batch(pid, 0))
        append(plog, marker(pid, commit=pid % 2 == 0), AppendOrigin.COORDINATOR)
    assert plog.num_segments > 1
    before = plog.collect_aborted_transactions(0, plog.log_end_offset)
    assert [t.producer_id for t in before] == [1, 3, 5]
    plog.close()
    plog = open_log(cfg)
    assert plog.collect_aborted_transactions(0, plog.log_end_offset) == before
    plog.truncate_to(before[-1].last_offset)
    assert [t.producer_id for t in plog.collect_aborted_transactions(0, plog.log_end_offset)] == [1, 3]
    assert plog.first_unstable_offset == before[-1].first_offset  # producer 5's transaction is open again


def test_recovery_restores_a_missing_index_entry(open_log, log_dir) -> None:
    plog = open_log()
    append(plog, txn_batch(7, 0))
    append(plog, marker(7, commit=False), AppendOrigin.COORDINATOR)
    index_path = plog.active_segment.txn_index.path
    plog.active_segment.flush()
    # a crash between the marker and its index entry: the entry is lost, no clean-shutdown snapshot
    index_path.unlink()
    for snap in log_dir.glob("t-0/*.snapshot"):
        snap.unlink()
    plog._closed = True
    plog.active_segment.close()
    plog = open_log(clean_shutdown=False)
    assert plog.collect_aborted_transactions(0, plog.log_end_offset) == [AbortedTxn(7, 0, 2, 3)]
    assert plog.last_stable_offset == plog.log_end_offset


def test_open_transaction_survives_restart(open_log) -> None:
    plog = open_log()
    append(plog, plain())
    append(plog, txn_batch(9, 0))
    plog.close()
    plog = open_log(high_watermark=3)
    assert plog.last_stable_offset == 1
