"""KIP-848 consumer groups: assignors, reconciliation, ConsumerGroupHeartbeat scenarios on a fake clock, and
replay (a coordinator rebuilt from the log has the same groups)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from kbroker.controller.image import MetadataImage, PartitionImage, TopicImage
from kbroker.coordinator.group.assignors import MemberSpec, RangeAssignor, UniformAssignor, parse_assignors
from kbroker.coordinator.group.consumer_group import ConsumerGroupMember, MemberState, reconcile
from kbroker.coordinator.group.shard import GroupCoordinatorShard, RequestMeta
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ConsumerGroupHeartbeatRequest as Req
from tests.coordinator.support import PARTITION, Harness

T1 = uuid.UUID(int=1).bytes
T2 = uuid.UUID(int=2).bytes
T3 = uuid.UUID(int=3).bytes


# ============================================================================================ assignors


def _counts(result: dict[str, dict[bytes, set[int]]]) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def _owners(result: dict[str, dict[bytes, set[int]]]) -> dict[tuple[bytes, int], str]:
    owners: dict[tuple[bytes, int], str] = {}
    for m, a in result.items():
        for tid, ps in a.items():
            for p in ps:
                assert (tid, p) not in owners, f"{(tid, p)} assigned twice"
                owners[(tid, p)] = m
    return owners


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 12, 13])
def test_uniform_balances_homogeneous_groups(n):
    members = {f"m{i}": MemberSpec(frozenset({T1, T2})) for i in range(n)}
    result = UniformAssignor().assign(members, {T1: 12, T2: 5})
    counts = _counts(result)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(_owners(result)) == 17


def test_uniform_is_sticky_when_a_member_joins_and_leaves():
    assignor = UniformAssignor()
    topics = {T1: 12}
    first = assignor.assign({m: MemberSpec(frozenset({T1})) for m in ("a", "b", "c")}, topics)
    targets = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in first.items()}
    # d joins: only 3 partitions move (one from each), the rest stay put
    second = assignor.assign({**{m: MemberSpec(frozenset({T1}), target=targets[m]) for m in targets},
                              "d": MemberSpec(frozenset({T1}))}, topics)
    assert _counts(second) == {"a": 3, "b": 3, "c": 3, "d": 3}
    for m in ("a", "b", "c"):
        assert second[m][T1] <= first[m][T1]
    # c leaves: its partitions go to the others, nobody else loses anything
    targets = {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in second.items()}
    third = assignor.assign({m: MemberSpec(frozenset({T1}), target=targets[m]) for m in ("a", "b", "d")}, topics)
    assert sorted(_counts(third).values()) == [4, 4, 4]
    for m in ("a", "b", "d"):
        assert second[m][T1] <= third[m][T1]


def test_uniform_respects_heterogeneous_subscriptions():
    members = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2})),
               "c": MemberSpec(frozenset({T2, T3}))}
    result = UniformAssignor().assign(members, {T1: 6, T2: 6, T3: 6})
    owners = _owners(result)
    assert len(owners) == 18
    for (tid, _), m in owners.items():
        assert tid in members[m].subscribed_topic_ids
    counts = _counts(result)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_uniform_ignores_unsubscribed_and_missing_topics_in_previous_targets():
    members = {"a": MemberSpec(frozenset({T1}), target={T1: frozenset({0, 1, 9}), T2: frozenset({0})}),
               "b": MemberSpec(frozenset({T1}))}
    result = UniformAssignor().assign(members, {T1: 4})
    assert result == {"a": {T1: {0, 1}}, "b": {T1: {2, 3}}}


def test_range_gives_contiguous_ranges_per_topic_sorted_by_instance_then_member_id():
    members = {"m2": MemberSpec(frozenset({T1, T2})), "m1": MemberSpec(frozenset({T1, T2})),
               "m3": MemberSpec(frozenset({T1}), instance_id="a")}
    result = RangeAssignor().assign(members, {T1: 7, T2: 4})
    # order: static "a" (m3) first, then m1, m2
    assert result["m3"] == {T1: {0, 1, 2}}
    assert result["m1"] == {T1: {3, 4}, T2: {0, 1}}
    assert result["m2"] == {T1: {5, 6}, T2: {2, 3}}


def test_parse_assignors_accepts_names_and_kafka_class_names():
    assert parse_assignors("uniform,range") == ("uniform", "range")
    assert parse_assignors("org.apache.kafka.coordinator.group.assignor.RangeAssignor, uniform") == ("range", "uniform")
    with pytest.raises(ValueError):
        parse_assignors("sticky")


# ============================================================================================ reconciliation


def _member(epoch: int, assigned: dict[bytes, set[int]], state: MemberState = MemberState.STABLE,
            pending: dict[bytes, set[int]] | None = None) -> ConsumerGroupMember:
    return ConsumerGroupMember("m", member_epoch=epoch, previous_member_epoch=epoch - 1, state=state,
                               assigned={t: frozenset(p) for t, p in assigned.items()},
                               pending_revocation={t: frozenset(p) for t, p in (pending or {}).items()})


def _free(tid: bytes, p: int) -> int:
    return -1


def test_reconcile_revokes_before_taking_the_next_epoch():
    m = _member(1, {T1: {0, 1, 2, 3}})
    owned = [(T1, [0, 1, 2, 3])]
    r = reconcile(m, 2, {T1: frozenset({0, 1})}, _free, owned)
    assert (r.state, r.member_epoch, dict(r.assigned), dict(r.pending_revocation)) == (
        MemberState.UNREVOKED_PARTITIONS, 1, {T1: {0, 1}}, {T1: {2, 3}})
    # still owning a revoked partition: no progress
    assert reconcile(r, 2, {T1: frozenset({0, 1})}, _free, [(T1, [0, 1, 3])]) is r
    # revoked: next epoch
    done = reconcile(r, 2, {T1: frozenset({0, 1})}, _free, [(T1, [0, 1])])
    assert (done.state, done.member_epoch, done.previous_member_epoch, dict(done.assigned)) == (
        MemberState.STABLE, 2, 1, {T1: {0, 1}})


def test_reconcile_waits_for_partitions_still_held_by_others():
    held = {(T1, 2): 1}
    m = _member(1, {T1: {0}})
    r = reconcile(m, 2, {T1: frozenset({0, 1, 2})}, lambda t, p: held.get((t, p), -1), [(T1, [0])])
    assert (r.state, r.member_epoch, dict(r.assigned)) == (MemberState.UNRELEASED_PARTITIONS, 2, {T1: {0, 1}})
    del held[(T1, 2)]
    r2 = reconcile(r, 2, {T1: frozenset({0, 1, 2})}, lambda t, p: held.get((t, p), -1), [(T1, [0, 1])])
    assert (r2.state, dict(r2.assigned)) == (MemberState.STABLE, {T1: {0, 1, 2}})


def test_reconcile_without_owned_partitions_assumes_the_member_still_holds_them():
    m = _member(1, {T1: {0, 1}})
    r = reconcile(m, 2, {T1: frozenset({0})}, _free, None)
    assert r.state is MemberState.UNREVOKED_PARTITIONS


# ============================================================================================ heartbeats


def image(topics: dict[str, tuple[bytes, int]], offset: int = 10) -> MetadataImage:
    tis = {name: TopicImage(name, tid, {p: PartitionImage(p, (1,), (1,), 1, 0, 0) for p in range(n)})
           for name, (tid, n) in topics.items()}
    return MetadataImage(cluster_id="c", offset=offset, topics_by_name=tis,
                         topics_by_id={t.topic_id: t for t in tis.values()})


class CGHarness(Harness):
    """The coordinator harness plus a metadata image and ConsumerGroupHeartbeat helpers."""

    def __init__(self, img: MetadataImage | None = None, **kw: Any) -> None:
        self.image = img or image({"t1": (T1, 6), "t2": (T2, 3)})
        kw.setdefault("consumer_group_heartbeat_interval_ms", 500)
        kw.setdefault("consumer_group_session_timeout_ms", 6000)
        # most tests follow one rebalance step by step: no assignment interval (tests of the interval set it)
        kw.setdefault("consumer_group_assignment_interval_ms", 0)
        kw.setdefault("share_group_assignment_interval_ms", 0)
        super().__init__(**kw)

    def _build(self, partition: int, timer: Any) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(partition, self.config, timer, self.scheduler.now_ms,
                                     image_provider=lambda: self.image)

    def reload(self) -> CGHarness:
        from kbroker.coordinator.runtime import ManualScheduler
        return CGHarness(self.image, writer=self.writer, scheduler=ManualScheduler(self.scheduler.now_ms()),
                         **self.config.__dict__)

    def hb(self, group: str, member: str, epoch: int, *, topics: list[str] | None = None,
           owned: list[tuple[bytes, list[int]]] | None = None, version: int = 1, instance: str | None = None,
           regex: str | None = None, assignor: str | None = None, rebalance_ms: int = -1) -> Any:
        if epoch == 0:
            rebalance_ms = 300_000 if rebalance_ms == -1 else rebalance_ms
            owned = [] if owned is None else owned
        req = Req(group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
                  rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=regex,
                  server_assignor=assignor,
                  topic_partitions=None if owned is None else [Req.TopicPartitions(topic_id=t, partitions=ps)
                                                               for t, ps in owned])
        return self.runtime.write(PARTITION, lambda s: s.consumer_group_heartbeat(
            RequestMeta(version, "client", "/127.0.0.1"), req))

    def cg(self, group: str) -> Any:
        return self.shard.consumer_groups[group]


def owned_of(resp: Any) -> list[tuple[bytes, list[int]]]:
    return [(tp.topic_id, list(tp.partitions)) for tp in resp.assignment.topic_partitions]


def settle(h: CGHarness, group: str, members: dict[str, Any], rounds: int = 6) -> dict[str, Any]:
    """Heartbeat every member with what it owns until nothing changes; returns member -> last response."""
    state = {m: (r.member_epoch, owned_of(r) if r.assignment is not None else []) for m, r in members.items()}
    last = dict(members)
    for _ in range(rounds):
        for m in state:
            epoch, owned = state[m]
            r = h.hb(group, m, epoch, owned=owned)
            assert r.error_code == 0, (m, r)
            last[m] = r
            state[m] = (r.member_epoch, owned_of(r) if r.assignment is not None else owned)
    return last


def assignment_of(h: CGHarness, group: str) -> dict[str, dict[bytes, set[int]]]:
    return {mid: {t: set(p) for t, p in m.assigned.items()} for mid, m in h.cg(group).members.items()}


def test_first_member_joins_and_gets_every_partition():
    h = CGHarness()
    r = h.hb("g", "m1", 0, topics=["t1"])
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch == 2 and r.heartbeat_interval_ms == 500
    assert owned_of(r) == [(T1, [0, 1, 2, 3, 4, 5])]
    g = h.cg("g")
    # a new group is at epoch 1 (as Kafka): the join bumps it to 2
    assert (g.group_epoch, g.assignment_epoch, g.state.value) == (2, 2, "Stable")
    # a plain heartbeat: no assignment in the response (nothing changed)
    r2 = h.hb("g", "m1", 2)
    assert r2.error_code == 0 and r2.assignment is None


def test_a_join_that_cannot_be_stored_changes_and_logs_nothing(caplog):
    """__consumer_offsets below min.insync.replicas (issue 33): every join attempt fails with
    COORDINATOR_NOT_AVAILABLE, the group epoch does not move, and the join is logged only once it is stored."""
    from kbroker.coordinator.runtime import CoordinatorWriteError

    h = CGHarness()
    h.writer.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    caplog.set_level("INFO", logger="kbroker.coordinator")
    for _ in range(20):
        with pytest.raises(CoordinatorWriteError) as exc:
            h.hb("g", "m1", 0, topics=["t1"])
        assert exc.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        h.advance(100)
    assert "g" not in h.shard.consumer_groups
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("consumer_ops")]
    assert lines == []
    h.writer.fail_with = None
    r = h.hb("g", "m1", 0, topics=["t1"])
    assert (r.error_code, r.member_epoch) == (0, 2)
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("consumer_ops")]
    assert lines == ["group g: member m1 joins (consumer protocol)", "group g: group epoch 2",
                     "group g: target assignment for epoch 2 computed with the uniform assignor"], lines


def test_second_member_gets_partitions_only_after_the_first_revoked_them():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"])
    b = h.hb("g", "b", 0, topics=["t1"])
    assert b.member_epoch == 3 and owned_of(b) == []  # everything is still held by a
    assert h.cg("g").state.value == "Reconciling"
    # a is told to revoke 3 partitions (same epoch)
    a2 = h.hb("g", "a", a.member_epoch, owned=owned_of(a))
    assert a2.member_epoch == 2 and len(owned_of(a2)[0][1]) == 3
    assert h.cg("g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # b asks again: still nothing while a holds them
    assert h.hb("g", "b", 3, owned=[]).assignment is None
    a3 = h.hb("g", "a", 2, owned=owned_of(a2))
    assert a3.member_epoch == 3 and a3.assignment is None  # same partitions, next epoch
    b3 = h.hb("g", "b", 3, owned=[])
    assert sorted(owned_of(a2)[0][1] + owned_of(b3)[0][1]) == [0, 1, 2, 3, 4, 5]
    assert h.cg("g").state.value == "Stable"


def test_three_members_split_two_topics_and_a_leave_rebalances():
    h = CGHarness()
    first = {m: h.hb("g", m, 0, topics=["t1", "t2"]) for m in ("a", "b", "c")}
    settle(h, "g", first)
    assign = assignment_of(h, "g")
    assert sorted(sum(len(p) for p in a.values()) for a in assign.values()) == [3, 3, 3]
    left = h.hb("g", "b", -1)
    assert left.error_code == 0 and left.member_epoch == -1
    assert "b" not in h.cg("g").members
    rest = {m: h.hb("g", m, h.cg("g").members[m].member_epoch, owned=[(t, sorted(p)) for t, p in assign[m].items()])
            for m in ("a", "c")}
    settle(h, "g", rest)
    assign = assignment_of(h, "g")
    assert sorted(sum(len(p) for p in a.values()) for a in assign.values()) == [4, 5]
    assert h.cg("g").state.value == "Stable"


def test_session_timeout_fences_a_silent_member():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"])
    b = h.hb("g", "b", 0, topics=["t1"])
    for _ in range(4):
        h.advance(2000)
        h.hb("g", "a", h.cg("g").members["a"].member_epoch, owned=owned_of(a) if a.assignment else [])
    assert "b" not in h.cg("g").members
    assert h.hb("g", "b", b.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    r = h.hb("g", "a", h.cg("g").members["a"].member_epoch, owned=[(T1, [0, 1, 2, 3, 4, 5])])
    assert r.error_code == 0


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"], rebalance_ms=10_000)
    h.hb("g", "b", 0, topics=["t1"])
    h.hb("g", "a", 2, owned=owned_of(a))
    assert h.cg("g").members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(6):  # a keeps heartbeating but never gives up its partitions
        h.advance(2000)
        h.hb("g", "a", 2, owned=owned_of(a))
        h.hb("g", "b", 3, owned=[])
    assert "a" not in h.cg("g").members


def test_epoch_errors():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"])
    assert h.hb("g", "a", 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb("g", "nobody", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("nogroup", "a", 2).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    h.hb("g", "b", 0, topics=["t1"])
    a2 = h.hb("g", "a", 2, owned=owned_of(a))
    a3 = h.hb("g", "a", 2, owned=owned_of(a2))
    assert a3.member_epoch == 3
    # the previous epoch with a subset of the assignment is accepted (a lost response)...
    assert h.hb("g", "a", 2, owned=owned_of(a2)).error_code == 0
    # ...with partitions beyond the assignment it is not
    assert h.hb("g", "a", 2, owned=[(T1, [0, 1, 2, 3, 4, 5])]).error_code == ErrorCode.FENCED_MEMBER_EPOCH


@pytest.mark.parametrize("kw,code", [
    (dict(group="", member="m", epoch=0, topics=["t1"]), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="", epoch=0, topics=["t1"]), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="m", epoch=0), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="m", epoch=0, topics=["t1"], owned=[(T1, [0])]), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="m", epoch=-3), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="m", epoch=-2), ErrorCode.INVALID_REQUEST),
    (dict(group="g", member="m", epoch=0, topics=["t1"], assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR),
    (dict(group="g", member="m", epoch=0, regex="(unclosed"), ErrorCode.INVALID_REGULAR_EXPRESSION),
])
def test_invalid_heartbeats(kw, code):
    h = CGHarness()
    assert h.hb(kw.pop("group"), kw.pop("member"), kw.pop("epoch"), **kw).error_code == code


def test_v0_member_id_is_generated_by_the_coordinator():
    h = CGHarness()
    r = h.hb("g", "", 0, topics=["t1"], version=0)
    assert r.error_code == 0 and r.member_id and r.member_id in h.cg("g").members


def test_static_member_leaves_with_minus_two_and_comes_back_with_its_partitions():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"], instance="ia")
    b = h.hb("g", "b", 0, topics=["t1"], instance="ib")
    settle(h, "g", {"a": a, "b": b})
    before = assignment_of(h, "g")["b"]
    epoch_before = h.cg("g").group_epoch
    assert h.hb("g", "b", -2, instance="ib").member_epoch == -2
    # another process with the same instance id cannot join while b is still there...
    assert h.hb("g", "x", 0, topics=["t1"], instance="ia").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    # ...b's restart (new member id) can, and gets the same partitions without a new group epoch
    b2 = h.hb("g", "b2", 0, topics=["t1"], instance="ib")
    assert b2.error_code == 0 and {t: set(p) for t, p in owned_of(b2)} == before
    assert "b" not in h.cg("g").members and h.cg("g").group_epoch == epoch_before
    # the old member id is fenced
    assert h.hb("g", "b", 2, instance="ib").error_code == ErrorCode.FENCED_INSTANCE_ID


def test_regex_subscription_and_new_topics():
    h = CGHarness(image({"orders-1": (T1, 2), "other": (T2, 2)}))
    r = h.hb("g", "a", 0, regex="orders-.*")
    assert owned_of(r) == [(T1, [0, 1])]
    h.image = image({"orders-1": (T1, 2), "other": (T2, 2), "orders-2": (T3, 3)}, offset=20)
    h.shard.on_topics_changed({"orders-2"}, True)
    r2 = h.hb("g", "a", r.member_epoch, owned=owned_of(r))
    assert sorted(owned_of(r2)) == [(T1, [0, 1]), (T3, [0, 1, 2])]
    assert h.cg("g").resolved_regexes["orders-.*"].topics == {"orders-1", "orders-2"}


def test_partitions_added_to_a_subscribed_topic_are_assigned():
    h = CGHarness(image({"t1": (T1, 2)}))
    r = h.hb("g", "a", 0, topics=["t1"])
    h.image = image({"t1": (T1, 4)}, offset=30)
    h.shard.on_topics_changed({"t1"}, False)
    r2 = h.hb("g", "a", r.member_epoch, owned=owned_of(r))
    assert owned_of(r2) == [(T1, [0, 1, 2, 3])] and r2.member_epoch == 3


def test_range_assignor_chosen_by_members():
    h = CGHarness()
    first = {m: h.hb("g", m, 0, topics=["t1"], assignor="range") for m in ("a", "b")}
    settle(h, "g", first)
    assert assignment_of(h, "g") == {"a": {T1: {0, 1, 2}}, "b": {T1: {3, 4, 5}}}


def test_offset_commit_and_fetch_check_member_epochs():
    h = CGHarness()
    a = h.hb("g", "a", 0, topics=["t1"])
    assert h.commit("g", {("t1", 0): 5}, generation=2, member_id="a") == {("t1", 0): 0}
    assert h.commit("g", {("t1", 0): 5}, generation=1, member_id="a") == {("t1", 0): ErrorCode.STALE_MEMBER_EPOCH}
    assert h.commit("g", {("t1", 0): 5}, generation=2, member_id="x") == {("t1", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert h.commit("g", {("t1", 0): 5}, generation=2, member_id="a", version=8) == {
        ("t1", 0): ErrorCode.UNSUPPORTED_VERSION}
    # the admin client's commit (epoch -1) only once the group is empty
    assert h.commit("g", {("t1", 0): 7}) == {("t1", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    shard = h.shard
    assert shard.validate_offset_fetch_member("g", "a", 2) == 0
    assert shard.validate_offset_fetch_member("g", "a", 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert shard.validate_offset_fetch_member("g", "x", 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert shard.validate_offset_fetch_member("g", None, -1) == 0
    # TxnOffsetCommit (sendOffsetsToTransaction with the consumer's group metadata)
    assert shard.validate_consumer_group_commit(h.cg("g"), 3, "a", 2, transactional=True) == 0
    # (the TxnOffsetCommit handler reports it as ILLEGAL_GENERATION below v6, KIP-1319)
    assert shard.validate_consumer_group_commit(h.cg("g"), 3, "a", 1, transactional=True) == \
        ErrorCode.STALE_MEMBER_EPOCH
    h.hb("g", "a", a.member_epoch and -1)
    assert h.commit("g", {("t1", 0): 7}) == {("t1", 0): 0}
    assert h.fetch("g", [("t1", [0])])[("t1", 0)][0] == 7


def test_list_describe_and_classic_interplay():
    h = CGHarness()
    h.hb("g", "a", 0, topics=["t1"])
    listed = {g.group_id: g for g in h.shard.list_groups(None, None)}
    assert (listed["g"].group_type, listed["g"].protocol_type, listed["g"].group_state) == ("consumer", "consumer",
                                                                                            "Stable")
    assert h.shard.list_groups(None, {"classic"}) == []
    d = h.shard.describe_group("g", 6, False)
    assert d.error_code == ErrorCode.GROUP_ID_NOT_FOUND and d.error_message == "Group g is not a classic group."
    assert h.shard.describe_group("g", 5, False).group_state == "Dead"
    cd = h.shard.consumer_group_describe("g", False, 0)
    assert cd.error_code == 0 and cd.group_state == "Stable" and cd.assignor_name == "uniform"
    assert cd.members[0].assignment.topic_partitions[0].topic_name == "t1"
    # a classic JoinGroup into a consumer group with members (online migration): another protocol type, or a
    # subscription that is not a ConsumerProtocolSubscription, is refused
    assert h.join("g", protocol_type="connect").response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join_new("g").response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # ConsumerGroupDescribe of a classic group
    h.commit("simple", {("t1", 0): 1})
    assert h.shard.consumer_group_describe("simple", False, 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # the simple (offsets-only) classic group becomes a consumer group on the first heartbeat; offsets stay
    assert h.hb("simple", "m", 0, topics=["t1"]).error_code == 0
    assert "simple" not in h.shard.groups and h.fetch("simple", [("t1", [0])])[("t1", 0)][0] == 1


def test_delete_group_only_when_empty():
    h = CGHarness()
    h.hb("g", "a", 0, topics=["t1"])
    res = h.runtime.write(PARTITION, lambda s: s.delete_groups(["g"]))
    assert res[0].error_code == ErrorCode.NON_EMPTY_GROUP
    h.hb("g", "a", -1)
    res = h.runtime.write(PARTITION, lambda s: s.delete_groups(["g"]))
    assert res[0].error_code == 0 and "g" not in h.shard.consumer_groups
    assert h.reload().shard.consumer_groups == {}


def _snapshot(h: CGHarness) -> dict[str, Any]:
    return {gid: (g.group_epoch, g.assignment_epoch, dict(g.members), dict(g.target_assignment),
                  dict(g.subscription_metadata), dict(g.resolved_regexes), dict(g.partition_epochs),
                  dict(g.static_members))
            for gid, g in h.shard.consumer_groups.items()}


def test_replay_rebuilds_every_consumer_group():
    h = CGHarness(image({"t1": (T1, 6), "orders": (T2, 3)}))
    first = {m: h.hb("g", m, 0, topics=["t1"]) for m in ("a", "b")}
    first["c"] = h.hb("g", "c", 0, regex="ord.*", instance="ic")
    settle(h, "g", first, rounds=2)  # leave some members mid-reconciliation
    h.hb("g2", "x", 0, topics=["t1"])
    h.hb("g2", "x", -1)
    reloaded = h.reload()
    assert _snapshot(reloaded) == _snapshot(h)
    assert {g: s.state for g, s in reloaded.shard.consumer_groups.items()} == \
        {g: s.state for g, s in h.shard.consumer_groups.items()}


def test_assignment_interval_defers_the_next_target_assignment():
    """KIP-1263 (Kafka 4.3, probed): the target assignment is computed at most once per
    ``group.consumer.assignment.interval.ms``. The first member's join computes one at once (group epoch 1 -> 2);
    a member joining 100 ms later bumps the group epoch to 3 but gets the last target's epoch (2) and nothing;
    the first heartbeat 1000 ms after the last computation computes epoch 3, and the first member is told to
    revoke. The epochs and the computation time survive a reload (records 3 and 6)."""
    h = CGHarness(consumer_group_assignment_interval_ms=1000)
    a = h.hb("g", "a", 0, topics=["t1"])
    assert a.member_epoch == 2 and owned_of(a) == [(T1, [0, 1, 2, 3, 4, 5])]
    computed_at = h.cg("g").assignment_timestamp_ms
    assert computed_at == h.scheduler.now_ms()
    h.advance(100)
    b = h.hb("g", "b", 0, topics=["t1"])
    assert (b.member_epoch, owned_of(b)) == (2, [])
    g = h.cg("g")
    assert (g.group_epoch, g.assignment_epoch, g.state.value) == (3, 2, "Assigning")
    assert h.hb("g", "a", 2, owned=owned_of(a)).assignment is None  # still the epoch-2 target
    reloaded = h.reload().cg("g")
    assert (reloaded.group_epoch, reloaded.assignment_epoch, reloaded.assignment_timestamp_ms) == (3, 2, computed_at)
    h.advance(899)
    assert h.hb("g", "b", 2, owned=[]).member_epoch == 2  # 999 ms: not yet
    h.advance(1)
    a2 = h.hb("g", "a", 2, owned=owned_of(a))
    assert a2.member_epoch == 2 and len(owned_of(a2)[0][1]) == 3  # told to revoke half
    g = h.cg("g")
    assert (g.group_epoch, g.assignment_epoch, g.assignment_timestamp_ms) == (3, 3, computed_at + 1000)
    assert h.hb("g", "b", 2, owned=[]).member_epoch == 3


def test_group_config_overrides_the_assignment_interval():
    """``consumer.assignment.interval.ms`` of the group (ConfigResource GROUP) over the broker's interval: 0
    computes the target on every group epoch bump."""
    h = CGHarness(consumer_group_assignment_interval_ms=60_000)
    h.image = dataclasses.replace(h.image, configs={(32, "g0"): {"consumer.assignment.interval.ms": "0"}})
    for gid, second_epoch in (("g0", 3), ("g", 2)):
        h.hb(gid, "a", 0, topics=["t1"])
        assert h.hb(gid, "b", 0, topics=["t1"]).member_epoch == second_epoch
