"""Voter changes in the Raft state machine (KIP-853): what the leader accepts and refuses, how every replica
follows the voter set in its log (also across truncation, snapshots and restarts), and that the simulation,
which adds and removes voters under faults, catches a leader that allows two changes at once."""

from __future__ import annotations

import random

import pytest

from kbroker.controller.raft.client import MemoryElectionStore, RaftClient, RaftConfig, VoterChangeError
from kbroker.controller.raft.log import LogEntry, MemoryRaftLog, Voter, VoterSet
from kbroker.controller.raft.messages import FetchRequest
from kbroker.controller.raft.states import QuorumStateName
from kbroker.testing.raft_simulation import InvariantViolation, SimConfig, Simulation


def leader_of(voters: set[int]) -> RaftClient:
    """Node 1 as the leader of ``voters`` in epoch 1, its LeaderChange entry committed."""
    log = MemoryRaftLog()
    c = RaftClient(1, voters, log, MemoryElectionStore(), random.Random(0), now=0, config=RaftConfig())
    c.state = QuorumStateName.CANDIDATE
    c.epoch = 1
    c._become_leader(0)
    c.poll(0)  # flush
    for v in voters - {1}:
        c.handle(FetchRequest(v, 1, log.end_offset, 1), 1)
    c.outbox.clear()
    assert c.high_watermark == log.end_offset
    return c


def catch_up(c: RaftClient, node: int, now: int) -> None:
    c.handle(FetchRequest(node, c.epoch, c.log.end_offset, c.log.last_epoch), now)
    c.outbox.clear()


def test_add_and_remove_voters_one_at_a_time():
    c = leader_of({1, 2, 3})
    with pytest.raises(VoterChangeError) as e:
        c.add_voter(Voter(4), 5)
    assert e.value.error == "REQUEST_TIMED_OUT"  # node 4 has never fetched: not caught up
    catch_up(c, 4, 5)
    offset = c.add_voter(Voter(4, b"\x01" * 16, (("CONTROLLER", "h", 4),)), 6)
    assert c.voters == {1, 2, 3, 4} and c.log.last_voters_offset() == offset
    assert c.log.flushed_offset > offset  # durable before any follower can fetch it
    with pytest.raises(VoterChangeError) as e:
        c.remove_voter(2, None, 7)
    assert e.value.error == "REQUEST_TIMED_OUT"  # the first change is not committed yet
    for v in (2, 3):
        catch_up(c, v, 8)
    assert c.high_watermark > offset  # committed by a majority of the new set (1, 2, 3 of 4)
    with pytest.raises(VoterChangeError) as e:
        c.add_voter(Voter(4), 9)
    assert e.value.error == "DUPLICATE_VOTER"
    with pytest.raises(VoterChangeError) as e:
        c.remove_voter(9, None, 9)
    assert e.value.error == "VOTER_NOT_FOUND"
    with pytest.raises(VoterChangeError) as e:
        c.remove_voter(4, b"\x02" * 16, 9)
    assert e.value.error == "VOTER_NOT_FOUND"  # another directory id: another incarnation of node 4
    c.remove_voter(4, b"\x01" * 16, 9)
    assert c.voters == {1, 2, 3}


def test_a_leader_that_removes_itself_resigns_once_that_is_committed():
    c = leader_of({1, 2, 3})
    offset = c.remove_voter(1, None, 5)
    assert c.is_leader and not c.is_voter  # it leads until the change is committed ...
    catch_up(c, 2, 6)
    c.poll(6)
    assert c.is_leader and c.high_watermark <= offset  # one of the new set {2, 3} is not a majority
    catch_up(c, 3, 7)
    c.poll(7)
    assert c.high_watermark > offset
    assert c.state is not QuorumStateName.LEADER  # ... then resigns, naming its successors
    c.poll(10_000)
    assert c.state is QuorumStateName.UNATTACHED  # an observer from now on: it never campaigns


def test_refusals():
    c = leader_of({1, 2})
    with pytest.raises(VoterChangeError) as e:
        c.remove_voter(1, None, 5)
    assert e.value.error == "INVALID_REQUEST"  # the leader of two cannot remove itself
    c.remove_voter(2, None, 5)
    c.poll(5)
    assert c.voters == {1} and c.high_watermark == c.log.end_offset  # a quorum of one commits alone
    with pytest.raises(VoterChangeError) as e:
        c.remove_voter(1, None, 6)
    assert e.value.error == "INVALID_REQUEST"  # the last voter
    follower = RaftClient(2, {1, 2}, MemoryRaftLog(), MemoryElectionStore(), random.Random(0), now=0)
    with pytest.raises(VoterChangeError) as e:
        follower.add_voter(Voter(3), 0)
    assert e.value.error == "NOT_LEADER_OR_FOLLOWER"


def test_the_voter_set_follows_the_log_across_truncation_and_snapshots():
    log = MemoryRaftLog()
    log.append([LogEntry(0, 1, None), LogEntry(1, 1, VoterSet.of([Voter(1), Voter(2)])), LogEntry(2, 1, (b"a",))])
    log.flush()
    assert log.voters().ids == {1, 2} and log.voters_at(1) is None and log.voters_at(2).ids == {1, 2}
    log.create_snapshot(3, 1, b"state")
    log.append([LogEntry(3, 2, VoterSet.of([Voter(1), Voter(2), Voter(3)]))])
    assert log.voters().ids == {1, 2, 3}
    log.truncate_to(3)  # the uncommitted change goes: the previous set is back
    assert log.voters().ids == {1, 2}
    assert log.delete_before_snapshot((3, 1)) and log.voters().ids == {1, 2}  # carried by the snapshot
    follower = MemoryRaftLog()
    follower.install_snapshot((3, 1), log.read_snapshot((3, 1), 0, 1 << 20))
    assert follower.voters().ids == {1, 2} and follower.snapshot_payload((3, 1)) == b"state"


def test_simulation_with_frequent_voter_changes_keeps_every_invariant():
    changes = 0
    for seed in range(40):
        changes += Simulation(seed, SimConfig(voters=3, observers=2, voter_change_every_ms=400)).run().voter_changes
    assert changes > 40 * 5


def test_simulation_catches_two_voter_changes_at_once(monkeypatch):
    """The harness can fail: a leader that starts a change before the previous one is committed (two servers
    added at once, whose majorities need not overlap) elects two leaders or loses committed entries."""
    monkeypatch.setattr(RaftClient, "_check_voter_change_allowed", lambda self: None if self.is_leader else (
        _ for _ in ()).throw(VoterChangeError("NOT_LEADER_OR_FOLLOWER", "not the leader")))
    cfg = dict(voters=1, observers=4, voter_change_every_ms=150, crash_every_ms=800, partition_every_ms=600)
    with pytest.raises(InvariantViolation):
        for seed in range(200):
            Simulation(seed, SimConfig(**cfg)).run()
