"""Online migration between the classic and the consumer protocol (KIP-848; kbroker.coordinator.group.migration)
on the deterministic coordinator harness: upgrade on the first ConsumerGroupHeartbeat, classic members served
through JoinGroup / SyncGroup / Heartbeat with the server-side assignment, a partition never owned twice,
replay of a mixed group, downgrade when the last consumer-protocol member leaves, and the migration policy."""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.group.migration import decode_assignment, encode_assignment
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ConsumerProtocolSubscription
from tests.coordinator.test_consumer_group import T1, CGHarness

REBALANCE = ErrorCode.REBALANCE_IN_PROGRESS


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None, version: int = 1) -> bytes:
    sub = ConsumerProtocolSubscription(topics=topics, owned_partitions=[
        ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps) for t, ps in (owned or {}).items()])
    return version.to_bytes(2, "big") + codec.encode(sub, version)


def assigned(data: bytes) -> set[tuple[str, int]]:
    a = decode_assignment(data)
    return set() if a is None else {(tp.topic, p) for tp in a.assigned_partitions for p in tp.partitions}


def classic_group(h: CGHarness, n: int = 2) -> tuple[list[str], int]:
    """``n`` classic members of group "g" on t1 (6 partitions), Stable; returns (member ids, generation)."""
    kw: dict[str, Any] = {"protocols": [("range", subscription(["t1"]))]}
    ids = h.stable_group("g", n, **kw)
    group = h.group("g")
    split = {m: [p for p in range(6) if p % n == i] for i, m in enumerate(ids)}
    value = {m: encode_assignment({"t1": ps}, 1) for m, ps in split.items()}
    leader = group.leader_id
    gen = group.generation_id
    # the harness synced placeholder assignments: sync real ones through a new rebalance
    boxes = [h.join("g", m, **kw) for m in ids]
    h.advance(0)
    gen = boxes[0].responses[-1].generation_id
    syncs = [h.sync("g", m, gen, value if m == leader else None) for m in ids]
    assert all(s.response.error_code == 0 for s in syncs)
    return ids, gen


def owners(h: CGHarness) -> dict[int, set[str]]:
    """partition of t1 -> members that hold it (assigned or pending revocation) in the consumer group."""
    out: dict[int, set[str]] = {}
    for m in h.cg("g").members.values():
        for part in (m.assigned, m.pending_revocation):
            for p in part.get(T1, ()):
                out.setdefault(p, set()).add(m.member_id)
    return out


def rejoin(h: CGHarness, member_id: str, owned: dict[str, list[int]] | None = None) -> Any:
    box = h.join("g", member_id, protocols=[("range", subscription(["t1"], owned))])
    h.advance(0)
    return box.response


def test_upgrade_serve_classic_members_and_downgrade():
    h = CGHarness()
    (m1, m2), gen = classic_group(h)
    # a consumer-protocol member joins: the classic group becomes a consumer group
    c = h.hb("g", "c", 0, topics=["t1"])
    assert c.error_code == 0 and "g" in h.shard.consumer_groups and "g" not in h.shard.groups
    group = h.cg("g")
    assert group.members[m1].classic is not None and group.members[m1].member_epoch == gen
    assert {p for p in group.members[m1].assigned[T1]} == {0, 2, 4}
    assert group.group_epoch == gen + 1 and c.member_epoch == gen + 1
    assert not c.assignment.topic_partitions or not c.assignment.topic_partitions[0].partitions  # all held
    assert all(len(o) == 1 for o in owners(h).values())
    listed = {g.group_id: g for g in h.shard.list_groups(None, None)}
    assert listed["g"].group_type == "consumer"
    described = {m.member_id: m.member_type for m in h.shard.consumer_group_describe("g", False, 0).members}
    assert described == {m1: 0, m2: 0, "c": 1}

    # the classic members learn of the rebalance through Heartbeat, rejoin (eager: nothing owned) and sync
    assert h.heartbeat("g", m1, gen) == REBALANCE
    j1 = rejoin(h, m1)
    assert j1.error_code == 0 and j1.generation_id == gen + 1 and j1.leader == "" and j1.members == []
    s1 = h.sync("g", m1, j1.generation_id, protocol_type="consumer", protocol_name="range").response
    assert s1.error_code == 0
    kept1 = assigned(s1.assignment)
    assert all(len(o) == 1 for o in owners(h).values())
    assert h.heartbeat("g", m2, gen) == REBALANCE
    j2 = rejoin(h, m2)
    s2 = h.sync("g", m2, j2.generation_id).response
    kept2 = assigned(s2.assignment)
    assert all(len(o) == 1 for o in owners(h).values())
    # the consumer member gets the released partitions
    c = h.hb("g", "c", c.member_epoch, topics=["t1"], owned=[])
    c = h.hb("g", "c", c.member_epoch, topics=["t1"], owned=[(T1, [p for tp in c.assignment.topic_partitions
                                                                   for p in tp.partitions])]
             if c.assignment else [])
    got_c = {p for p, o in owners(h).items() if o == {"c"}}
    assert kept1 | kept2 | {("t1", p) for p in got_c} == {("t1", p) for p in range(6)}
    assert not kept1 & kept2 and len(got_c) == 2, (kept1, kept2, got_c)
    # classic members commit with their generation (= member epoch), any OffsetCommit version
    assert h.commit("g", {("t1", 0): 5}, generation=j1.generation_id, member_id=m1, version=7) == {("t1", 0): 0}
    assert h.commit("g", {("t1", 0): 5}, generation=gen, member_id=m1, version=7) == {
        ("t1", 0): ErrorCode.ILLEGAL_GENERATION}
    assert h.heartbeat("g", m1, j1.generation_id) in (0, REBALANCE)

    # a reloaded coordinator rebuilds the mixed group from the log
    again = h.reload()
    assert again.cg("g").members[m1].classic == h.cg("g").members[m1].classic
    assert dict(again.cg("g").members[m2].assigned) == dict(h.cg("g").members[m2].assigned)

    # the last consumer-protocol member leaves: back to a classic group, which rebalances
    epoch = h.cg("g").members["c"].member_epoch
    assert h.hb("g", "c", -1).error_code == 0
    assert "g" not in h.shard.consumer_groups and "g" in h.shard.groups
    classic = h.group("g")
    assert classic.state.value == "PreparingRebalance" and set(classic.members) == {m1, m2}
    assert classic.protocol_type == "consumer" and classic.protocol_name == "range"
    assert h.heartbeat("g", m1, epoch) == REBALANCE
    boxes = [h.join("g", m, protocols=[("range", subscription(["t1"]))]) for m in (m1, m2)]
    h.advance(0)
    assert all(b.response.error_code == 0 for b in boxes)
    assert boxes[0].response.generation_id == epoch + 1


def test_policy_disabled_or_downgrade_only_refuses_the_upgrade():
    for policy in ("disabled", "downgrade"):
        h = CGHarness(consumer_group_migration_policy=policy)
        classic_group(h)
        assert h.hb("g", "c", 0, topics=["t1"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert "g" in h.shard.groups


def test_upgrade_only_policy_keeps_a_consumer_group():
    h = CGHarness(consumer_group_migration_policy="upgrade")
    (m1, m2), gen = classic_group(h)
    assert h.hb("g", "c", 0, topics=["t1"]).error_code == 0
    h.hb("g", "c", -1)
    assert "g" in h.shard.consumer_groups and set(h.cg("g").members) == {m1, m2}


def test_a_classic_member_that_stops_heartbeating_is_removed():
    h = CGHarness()
    (m1, m2), gen = classic_group(h)
    h.hb("g", "c", 0, topics=["t1"])
    for _ in range(3):  # the classic members' session timeout is 10 s (the harness's JoinGroup), c's 6 s
        h.advance(4000)
        assert h.hb("g", "c", h.cg("g").members["c"].member_epoch, topics=["t1"]).error_code == 0
        if h.heartbeat("g", m2, h.cg("g").members[m2].member_epoch if m2 in h.cg("g").members else -1) == 0:
            pass
    assert m1 not in h.cg("g").members
