"""The seeded simulation of partition replication (kbroker/testing/replication_simulation.py) over kbroker's own
replication code: every run keeps every acknowledged acks=all write, the replicas agree and catch up; the same
seed replays the same run; and a broken high watermark rule (a leader acknowledging before its followers hold
the write) is caught. Longer campaigns: ``python -m kbroker.testing.replication_simulation --seeds 1000``
(figures in docs/performance.md).
"""

from __future__ import annotations

import pytest

from kbroker.server.replica_manager import Partition
from kbroker.testing.replication_simulation import InvariantViolation, Simulation

SEEDS = range(20)


def test_seeded_runs_keep_every_acknowledged_write():
    failures = []
    totals = {"acknowledged": 0, "crashes": 0, "power_losses": 0, "leader_changes": 0, "elections": 0,
              "isr_changes": 0, "truncations": 0}
    for seed in SEEDS:
        try:
            r = Simulation(seed).run()
        except InvariantViolation as exc:
            failures.append(str(exc))
            continue
        for k in totals:
            totals[k] += getattr(r, k)
    assert failures == [], f"{len(failures)} seeds failed; replay with python -m " \
                           f"kbroker.testing.replication_simulation --seed N --verbose: {failures[:3]}"
    # the runs exercise what they claim to: failovers, lost tails, ISR changes and follower truncation
    assert totals["acknowledged"] > 10_000 and totals["crashes"] > 100 and totals["power_losses"] > 20
    assert totals["leader_changes"] > 30 and totals["isr_changes"] > 100 and totals["truncations"] > 20, totals
    assert totals["elections"] > 50, totals  # leadership moved away from live leaders too


def test_a_seed_replays_the_same_run():
    assert Simulation(3).run() == Simulation(3).run()


def test_a_leader_acknowledging_before_its_followers_hold_the_write_is_caught(monkeypatch):
    def leader_only(self: Partition) -> bool:
        if self.log.log_end_offset > self.log.high_watermark:
            self.log.high_watermark = self.log.log_end_offset
            self.wake_waiters()
            return True
        return False

    monkeypatch.setattr(Partition, "maybe_increment_high_watermark", leader_only)
    with pytest.raises(InvariantViolation):
        for seed in range(5):
            Simulation(seed).run()


def test_a_follower_keeping_the_epoch_it_led_without_appending_is_caught(monkeypatch):
    """The bug the 1,000-fault campaign found (seed 7, fault 660): a truncation at the log end offset that keeps
    the leader epochs starting there. A replica that led an epoch and appended nothing in it then fetches with
    that epoch forever and never catches up. The simulation's elections of a live leader's successor (sometimes
    twice within milliseconds) and the producer's pauses make such leaders: seeds 2 and 9 of 0-9 catch it."""
    from kbroker.storage.log import PartitionLog

    truncate_to = PartitionLog.truncate_to

    def keeps_empty_epochs(self: PartitionLog, offset: int) -> bool:
        if offset >= self.log_end_offset:
            return False
        return truncate_to(self, offset)

    monkeypatch.setattr(PartitionLog, "truncate_to", keeps_empty_epochs)
    with pytest.raises(InvariantViolation, match="did not catch up"):
        for seed in range(10):
            Simulation(seed).run()
