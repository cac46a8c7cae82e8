"""Transaction markers waiting for replication (kbroker/server/handlers/write_txn_markers.py): waits on
partitions this broker no longer leads are forgotten once there are many, others are kept."""

from __future__ import annotations

from types import SimpleNamespace

from kbroker.server.handlers import write_txn_markers as wtm


def test_prune_drops_waits_on_partitions_no_longer_led():
    led = SimpleNamespace(is_leader=True)
    lost = SimpleNamespace(is_leader=False)
    replaced_old = SimpleNamespace(is_leader=True)
    replaced_new = SimpleNamespace(is_leader=True)
    broker = SimpleNamespace(replica_manager=SimpleNamespace(partitions={
        ("t", 0): led, ("t", 1): lost, ("t", 2): replaced_new}))
    waits = {("t", 0, 7, 1, True): (led, 10), ("t", 1, 7, 1, True): (lost, 10),
             ("t", 2, 7, 1, True): (replaced_old, 10), ("t", 3, 7, 1, False): (led, 4)}
    wtm._prune(broker, waits)
    assert list(waits) == [("t", 0, 7, 1, True)]
