"""The Raft state machine (kbroker.controller.raft) under a seeded simulation: thousands of seeds with message
delays, drops, duplicates, network partitions, crashes that lose unflushed data and restarts; every step checks
single leader per epoch, committed entries never lost or changed, leader completeness and a monotonic high
watermark, and every run ends with a liveness check. Longer campaigns: ``python -m kbroker.testing.raft_simulation
--seeds 100000`` (see docs/cluster.md)."""

from __future__ import annotations

import itertools

import pytest

from kbroker.controller.raft.client import MemoryElectionStore, NotLeaderError, RaftClient, RaftConfig
from kbroker.controller.raft.log import LogEntry, MemoryRaftLog
from kbroker.controller.raft.states import (
    TRANSITIONS,
    ElectionState,
    IllegalStateTransition,
    QuorumStateName,
    check_transition,
)
from kbroker.testing.raft_simulation import InvariantViolation, SimConfig, Simulation

PROFILES = {
    # name: (SimConfig keyword arguments, number of seeds run in CI)
    "3-voters": (dict(voters=3, observers=1), 1000),
    "5-voters-hard": (dict(voters=5, observers=2, crash_every_ms=500, partition_every_ms=1500), 200),
    "1-voter": (dict(voters=1, observers=2), 100),
    "2-voters": (dict(voters=2, observers=0), 150),
    "4-voters-crashy": (dict(voters=4, observers=1, crash_every_ms=700), 200),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_simulation_keeps_every_invariant(profile):
    kwargs, seeds = PROFILES[profile]
    failures = []
    stats = {"committed": 0, "crashes": 0, "partitions": 0, "epochs": 0, "snapshots_fetched": 0}
    for seed in range(seeds):
        try:
            r = Simulation(seed, SimConfig(**kwargs)).run()
        except InvariantViolation as exc:
            failures.append(str(exc))
            continue
        stats["committed"] += r.committed
        stats["crashes"] += r.crashes
        stats["partitions"] += r.partitions
        stats["epochs"] += len(r.leaders)
        stats["snapshots_fetched"] += r.snapshots_fetched
    assert failures == [], f"{len(failures)} seeds failed; replay with python -m kbroker.testing.raft_simulation " \
                           f"--seed N --verbose: {failures[:5]}"
    # the campaign really exercised elections and faults
    assert stats["committed"] > seeds * 100 and stats["epochs"] > seeds
    if kwargs.get("crash_every_ms", 1) and kwargs.get("voters", 3) > 1:
        assert stats["crashes"] > seeds and stats["partitions"] > seeds / 2
    if kwargs.get("voters", 3) >= 3:  # a replica can fall behind while a majority commits
        assert stats["snapshots_fetched"] > seeds  # lagging replicas caught up from the leader's snapshot


def test_one_seed_replays_exactly():
    runs = [Simulation(4711, SimConfig(voters=3)).run() for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].events > 1000


def test_simulation_catches_a_leader_that_counts_unflushed_entries(monkeypatch):
    """The harness can fail: with the leader counting its unflushed log end offset towards the high watermark, a
    crash loses committed entries, and the simulation says so."""

    def broken(self):
        offsets = sorted((self.log.end_offset if v == self.node_id else self._replicas[v].end_offset
                          for v in self.voters), reverse=True)
        m = offsets[len(offsets) // 2]
        if m > self._epoch_start_offset and m > self.high_watermark:
            self.high_watermark = m

    monkeypatch.setattr(RaftClient, "_maybe_advance_high_watermark", broken)
    failed = 0
    for seed in range(60):
        try:
            Simulation(seed, SimConfig(voters=3, crash_every_ms=700)).run()
        except InvariantViolation:
            failed += 1
    assert failed > 0


def test_simulation_catches_a_snapshot_that_loses_entries(monkeypatch):
    """The harness can fail: a replica that installs a fetched snapshot without its last chunk is caught."""
    orig = MemoryRaftLog.install_snapshot

    def lossy(self, snapshot_id, data):
        return orig(self, snapshot_id, data[: len(data) * 3 // 4])

    monkeypatch.setattr(MemoryRaftLog, "install_snapshot", lossy)
    with pytest.raises(InvariantViolation, match="not the committed prefix"):
        for seed in range(30):
            Simulation(seed, SimConfig(voters=3, crash_every_ms=700)).run()


def test_simulation_catches_a_log_cleaned_past_its_snapshot(monkeypatch):
    """The harness can fail: a replica that drops one batch more than its snapshot holds loses committed
    entries, and a lagging replica that catches up from it has a gap."""
    orig = MemoryRaftLog.delete_before_snapshot

    def greedy(self, snapshot_id):
        nxt = [e for e in self.entries() if e.offset >= snapshot_id[0]]
        if not nxt:
            return orig(self, snapshot_id)
        # pretend the snapshot also covers the next batch
        data = self._snapshots.pop(snapshot_id)
        wider = (nxt[0].next_offset, nxt[0].epoch)
        self._snapshots[wider] = data
        return orig(self, wider)

    monkeypatch.setattr(MemoryRaftLog, "delete_before_snapshot", greedy)
    with pytest.raises(InvariantViolation):
        for seed in range(30):
            Simulation(seed, SimConfig(voters=3, crash_every_ms=700)).run()


def test_simulation_catches_double_votes(monkeypatch):
    orig = RaftClient._handle_vote_request

    def forgetful(self, req, now):
        self.voted_id = -1  # a voter that forgets its vote, as if quorum-state were not written
        return orig(self, req, now)

    monkeypatch.setattr(RaftClient, "_handle_vote_request", forgetful)
    with pytest.raises(InvariantViolation, match="two leaders|lacks committed|has LogEntry|below the high"):
        for seed in range(100):
            Simulation(seed, SimConfig(voters=3)).run()


@pytest.mark.parametrize("src,dst", list(itertools.product(QuorumStateName, QuorumStateName)))
def test_transition_table_every_pair(src, dst):
    if dst in TRANSITIONS[src]:
        check_transition(src, dst)
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(src, dst)


def test_leader_cannot_become_candidate_directly():
    assert QuorumStateName.CANDIDATE not in TRANSITIONS[QuorumStateName.LEADER]
    assert QuorumStateName.LEADER not in TRANSITIONS[QuorumStateName.PROSPECTIVE]


def test_single_voter_elects_itself_and_commits_on_flush():
    import random

    log, store = MemoryRaftLog(), MemoryElectionStore()
    c = RaftClient(1, {1}, log, store, random.Random(1), now=0)
    c.poll(0)
    assert c.is_leader and c.epoch == 1 and store.state == ElectionState(1, 1, 1, (1,))
    last = c.append([b"a", b"b"], now=1)
    assert last == 2 and c.high_watermark == 1  # the LeaderChange entry is committed, "a" and "b" not yet flushed
    c.poll(1)
    assert c.high_watermark == 3 and log.flushed_offset == 3
    # a restart comes back resigned in epoch 1, then elects itself in epoch 2
    c2 = RaftClient(1, {1}, log, store, random.Random(2), now=10)
    assert c2.state is QuorumStateName.RESIGNED
    with pytest.raises(NotLeaderError):
        c2.append([b"x"], now=10)
    t = c2.poll(10)
    c2.poll(t)
    assert c2.is_leader and c2.epoch == 2


def test_diverging_follower_truncates_to_the_leaders_epoch_end():
    import random

    from kbroker.controller.raft.messages import FetchRequest, FetchResponse

    leader_log = MemoryRaftLog()
    leader_log.append([LogEntry(0, 1, b"a"), LogEntry(1, 1, b"b"), LogEntry(2, 2, b"c"), LogEntry(3, 2, b"d")])
    store = MemoryElectionStore()
    store.write(ElectionState(3, -1, 1, (1, 2, 3)))
    leader = RaftClient(1, {1, 2, 3}, leader_log, store, random.Random(0), now=0)
    leader.state = QuorumStateName.CANDIDATE  # drive it to leadership of epoch 3 through the real transition
    leader._become_leader(0)
    leader.handle(FetchRequest(2, 3, fetch_offset=4, last_fetched_epoch=1, correlation_id=7), 1)
    (dst, resp), = leader.outbox
    assert dst == 2 and isinstance(resp, FetchResponse)
    assert (resp.diverging_epoch, resp.diverging_end_offset, resp.correlation_id) == (1, 2, 7)


@pytest.mark.parametrize("text", ["", "garbage", "[]", '{"leaderEpoch": -1}', '{"leaderId": 1}',
                                  '{"leaderEpoch": "x"}'])
def test_quorum_state_rejects_damaged_text(text):
    with pytest.raises(ValueError):
        ElectionState.from_json(text)


def test_quorum_state_round_trip():
    s = ElectionState(7, 2, 3, (1, 2, 3))
    assert ElectionState.from_json(s.to_json()) == s


def test_graceful_resignation_hands_over_without_waiting_for_a_timeout():
    """EndQuorumEpoch: the most caught-up voter starts its election at once, and the others grant it."""
    import random

    now = 0
    clients = {i: RaftClient(i, {1, 2, 3}, MemoryRaftLog(), MemoryElectionStore(), random.Random(i), now,
                             RaftConfig(election_timeout_ms=300, fetch_timeout_ms=600)) for i in (1, 2, 3)}

    def run_until(cond, limit_ms):
        nonlocal now
        end = now + limit_ms
        while now < end:
            for c in clients.values():
                c.poll(now)
            for _ in range(50):  # deliver every message, instantly
                moved = False
                for c in list(clients.values()):
                    out, c.outbox = c.outbox, []
                    for dst, msg in out:
                        if dst in clients:
                            clients[dst].handle(msg, now)
                            moved = True
                if not moved:
                    break
            if cond():
                return now
            now += 1
        raise AssertionError("condition not reached")

    run_until(lambda: any(c.is_leader for c in clients.values()), 5000)
    leader = next(c for c in clients.values() if c.is_leader)
    leader.append([b"x"], now)
    run_until(lambda: all(c.high_watermark == leader.log.end_offset for c in clients.values()), 1000)
    epoch = leader.epoch
    start = now
    leader.resign(now)
    del clients[leader.node_id]  # it shuts down, after sending what resign() queued (EndQuorumEpoch)
    out, leader.outbox = leader.outbox, []
    assert {type(m).__name__ for _, m in out} == {"EndQuorumEpochRequest"}
    for dst, msg in out:
        clients[dst].handle(msg, now)
    took = run_until(lambda: any(c.is_leader and c.epoch > epoch for c in clients.values()), 2000) - start
    assert took < 50, f"hand-over took {took} ms; the fetch timeout is 600 ms"
