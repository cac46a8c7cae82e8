"""The history checker (kbroker.testing.history) finds every anomaly it names, and only those."""

from __future__ import annotations

from kbroker.testing.history import History


def clean() -> History:
    h = History()
    for i in range(5):
        h.attempt("t", b"v%d" % i)
        h.ack("t", 0, i, b"v%d" % i, producer="p")
    h.attempt("t", b"c0", txn="tx")
    h.ack("t", 0, 5, b"c0", producer="p")
    h.end_transaction("tx", committed=True)
    h.attempt("t", b"a0", txn="tx")
    h.ack("t", 0, 6, b"a0", producer="p")
    h.end_transaction("tx", committed=False)
    return h


def read_all(h: History, log: dict[int, bytes], committed_view: dict[int, bytes] | None = None) -> None:
    for off, v in log.items():
        h.read("t", 0, off, v, committed=False)
    for off, v in (committed_view if committed_view is not None else {}).items():
        h.read("t", 0, off, v, committed=True)


LOG = {0: b"v0", 1: b"v1", 2: b"v2", 3: b"v3", 4: b"v4", 5: b"c0", 6: b"a0"}
COMMITTED = {o: v for o, v in LOG.items() if v != b"a0"}


def test_a_clean_history_passes():
    h = clean()
    read_all(h, LOG, COMMITTED)
    r = h.check()
    assert r.ok, r.summary()
    assert r.acknowledged == 7 and r.read == 13


def test_lost_duplicated_moved_reordered_and_phantom_records_are_found():
    h = clean()
    log = dict(LOG)
    del log[2]                           # lost
    log[7] = b"v1"                       # duplicated
    log[3], log[4] = b"v4", b"v3"        # reordered (and both moved)
    log[8] = b"nobody-wrote-this"        # phantom
    read_all(h, log)
    r = h.check()
    assert ("t", 0, 2, b"v2") in r.lost
    assert ("t", 0, b"v1", [1, 7]) in r.duplicated
    assert ("t", 0, b"v3", 3, 4) in r.offset_changed and ("t", 0, b"v4", 4, 3) in r.offset_changed
    assert ("t", 0, b"v3", b"v4") in r.reordered
    assert ("t", 0, 8, b"nobody-wrote-this") in r.phantom
    assert not r.ok
    try:
        r.assert_ok()
    except AssertionError as exc:
        assert "lost 1" in str(exc) and "duplicated" in str(exc)
    else:
        raise AssertionError("assert_ok passed a bad history")


def test_an_acknowledgement_without_an_offset_is_checked_for_loss_only():
    """librdkafka acknowledges messages implicitly (a later batch succeeded), with no offset: such an ack is
    fine wherever its record is, and still lost when no read has it."""
    h = History()
    for i in range(3):
        h.attempt("t", b"v%d" % i)
    h.ack("t", 0, None, b"v0", producer="p")
    h.ack("t", 0, None, b"v1", producer="p")
    h.ack("t", 0, 7, b"v2", producer="p")
    h.read("t", 0, 5, b"v0", committed=False)
    h.read("t", 0, 7, b"v2", committed=False)
    r = h.check()
    assert r.offset_changed == []
    assert r.lost == [("t", 0, None, b"v1")]


def test_read_committed_must_skip_aborted_and_open_transactions_and_keep_committed_ones():
    h = clean()
    h.attempt("t", b"open0", txn="tx")   # a transaction still open: its records must not be read committed
    h.ack("t", 0, 7, b"open0", producer="p")
    log = {**LOG, 7: b"open0"}
    read_all(h, log, {**LOG, 7: b"open0"})  # the committed view shows the aborted and the open record
    r = h.check()
    assert r.aborted_seen == [("t", 0, 6, b"a0")]
    assert r.uncommitted_seen == [("t", 0, 7, b"open0")]
    h2 = clean()
    read_all(h2, LOG, {o: v for o, v in COMMITTED.items() if v != b"c0"})  # a committed record missing
    assert h2.check().lost == [("t", 0, 5, b"c0")]


def test_a_transaction_of_unknown_outcome_is_expected_neither_way():
    h = History()
    h.attempt("t", b"u0", txn="tx")
    h.ack("t", 0, 0, b"u0")
    h.abandon_transaction("tx")
    h.read("t", 0, 0, b"u0", committed=False)
    assert h.check().ok  # not in the committed view either: fine
    h.read("t", 0, 0, b"u0", committed=True)
    assert h.check().ok  # or in it: also fine
