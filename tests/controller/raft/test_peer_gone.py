"""RaftClient.peer_gone: a follower whose connection to its leader is refused or reset (the leader's process is
gone, kill -9) starts the election without waiting out the fetch timeout; one follower alone cannot depose a
leader the others still hear from (pre-vote)."""

from __future__ import annotations

import random

from kbroker.controller.raft.client import MemoryElectionStore, RaftClient, RaftConfig
from kbroker.controller.raft.log import MemoryRaftLog
from kbroker.controller.raft.states import QuorumStateName as S

CFG = RaftConfig()  # Kafka's defaults: fetch timeout 2000 ms, election timeout 1000 ms


def cluster(seed: int) -> dict[int, RaftClient]:
    rng = random.Random(seed)
    return {i: RaftClient(i, {1, 2, 3}, MemoryRaftLog(), MemoryElectionStore(), random.Random(rng.random()), 0, CFG)
            for i in (1, 2, 3)}


def run(nodes: dict[int, RaftClient], start: int, until: int, down: frozenset[int] = frozenset(),
        cut: frozenset[tuple[int, int]] = frozenset()) -> int:
    """Poll and deliver every message at once, 1 ms steps, from ``start`` to ``until``; ``down`` nodes neither
    run nor receive, messages on ``cut`` links (src, dst) are lost. Returns the time reached."""
    now = start
    while now < until:
        for i, n in nodes.items():
            if i not in down:
                n.poll(now)
        moved = True
        while moved:
            moved = False
            for i, n in nodes.items():
                out, n.outbox = n.outbox, []
                for dst, msg in out:
                    if i in down or dst in down or (i, dst) in cut or dst not in nodes:
                        continue
                    nodes[dst].handle(msg, now)
                    moved = True
        now += 1
    return now


def leader(nodes: dict[int, RaftClient], down: frozenset[int] = frozenset()) -> int | None:
    leaders = [i for i, n in nodes.items() if n.state is S.LEADER and i not in down]
    return leaders[0] if len(leaders) == 1 else None


def test_a_killed_leader_is_replaced_well_before_the_fetch_timeout():
    for seed in range(20):
        nodes = cluster(seed)
        now = run(nodes, 0, 3000)
        old = leader(nodes)
        assert old is not None
        epoch = nodes[old].epoch
        dead = frozenset({old})
        for i in nodes:
            if i != old:
                nodes[i].peer_gone(old, now)  # both followers' connections to it are reset
        start = now
        while leader(nodes, dead) in (None, old) and now < start + 3000:
            now = run(nodes, now, now + 10, down=dead)
        new = leader(nodes, dead)
        assert new is not None and new != old and nodes[new].epoch > epoch
        # a quarter of the election timeout to start, then pre-vote, vote and (if two ran at once) a backoff
        assert now - start < CFG.fetch_timeout_ms, (seed, now - start)


def test_one_follower_losing_its_connection_does_not_depose_the_leader():
    for seed in range(20):
        nodes = cluster(seed)
        now = run(nodes, 0, 3000)
        old = leader(nodes)
        epoch = nodes[old].epoch
        lonely, other = (i for i in nodes if i != old)
        nodes[lonely].peer_gone(old, now)
        # the lonely follower's link to the leader is down for a while; the other follower still fetches
        cut = frozenset({(lonely, old), (old, lonely)})
        now = run(nodes, now, now + 1500, cut=cut)
        assert leader(nodes) == old and nodes[old].epoch == epoch and nodes[other].epoch == epoch
        now = run(nodes, now, now + 3000)  # healed: it follows the same leader again, no new epoch
        assert leader(nodes) == old and all(n.epoch == epoch for n in nodes.values())
        assert nodes[lonely].state is S.FOLLOWER and nodes[lonely].leader_id == old


def test_peer_gone_is_ignored_for_a_node_that_is_not_the_leader():
    nodes = cluster(7)
    now = run(nodes, 0, 3000)
    old = leader(nodes)
    a, b = (i for i in nodes if i != old)
    deadline = nodes[a]._fetch_deadline
    nodes[a].peer_gone(b, now)  # another follower went away: nothing changes
    assert nodes[a]._fetch_deadline == deadline and nodes[a].state is S.FOLLOWER
