"""The transaction marker sender (kbroker/server/handlers/write_txn_markers.py): markers queued for one broker
become one WriteTxnMarkers request, one marker entry per transaction; its failures are logged once per
interval, with the count of those left out. The sending over TCP is compat_tests/test_transaction_markers.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from kbroker.server.handlers import write_txn_markers as wtm


def queued(topic: str, partition: int, pid: int, epoch: int = 3, commit: bool = True) -> wtm._QueuedMarker:
    return wtm._QueuedMarker(topic, partition, pid, epoch, 7, commit, 2, lambda code: None)


def test_markers_of_several_transactions_make_one_request() -> None:
    req = wtm.TransactionMarkerSender._request([
        queued("a", 0, 1000), queued("b", 4, 1001, commit=False), queued("a", 2, 1000), queued("b", 1, 1000)])
    shape = [(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch, m.transaction_version,
              [(t.name, t.partition_indexes) for t in m.topics]) for m in req.markers]
    assert shape == [(1000, 3, True, 7, 2, [("a", [0, 2]), ("b", [1])]),
                     (1001, 3, False, 7, 2, [("b", [4])])]


def test_request_failures_are_logged_once_per_interval(monkeypatch, caplog) -> None:
    now = [100.0]
    monkeypatch.setattr(wtm.time, "monotonic", lambda: now[0])
    broker = SimpleNamespace(node_id=1, inter_broker_channels=lambda client_id: None)
    sender = wtm.TransactionMarkerSender(broker)
    with caplog.at_level(logging.WARNING, logger=wtm.__name__):
        for _ in range(50):
            sender._failed(2, "WriteTxnMarkers to broker 2 failed (timed out)", 30)
            now[0] += 0.1
        sender._failed(3, "broker 3 is not available", 1)  # another destination has its own interval
        now[0] += wtm.MARKER_LOG_INTERVAL_S
        sender._failed(2, "WriteTxnMarkers to broker 2 failed (timed out)", 30)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0] == "WriteTxnMarkers to broker 2 failed (timed out): 30 transaction marker(s) will be sent again"
    assert lines[1].startswith("broker 3 is not available")
    assert "49 more such failures" in lines[2]
