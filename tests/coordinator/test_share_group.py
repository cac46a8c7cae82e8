"""Share groups (KIP-932) on the group coordinator: ShareGroupHeartbeat scenarios on a fake clock, the simple
assignor, ShareGroupDescribe, and the share side of ListGroups / DescribeGroups / DeleteGroups."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kbroker.coordinator.group.share_group import ShareGroupMember, simple_assignment
from kbroker.coordinator.group.shard import GROUP_AUTHORIZED_OPERATIONS, GroupCoordinatorShard, RequestMeta
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ConsumerGroupHeartbeatRequest, ShareGroupHeartbeatRequest as Req
from tests.coordinator.support import PARTITION
from tests.coordinator.test_consumer_group import CGHarness, image

T1 = uuid.UUID(int=1).bytes
T2 = uuid.UUID(int=2).bytes


class SGHarness(CGHarness):
    def __init__(self, **kw: Any) -> None:
        kw.setdefault("share_group_heartbeat_interval_ms", 500)
        kw.setdefault("share_group_session_timeout_ms", 6000)
        super().__init__(image({"t1": (T1, 1), "t2": (T2, 4)}), **kw)
        self.removed: list[tuple[str, str]] = []

    def _build(self, partition: int, timer: Any) -> GroupCoordinatorShard:
        shard = super()._build(partition, timer)
        shard.on_share_member_removed = lambda g, m: self.removed.append((g, m))
        return shard

    def shb(self, group: str, member: str, epoch: int, topics: list[str] | None = None,
            rack: str | None = None) -> Any:
        req = Req(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack, subscribed_topic_names=topics)
        return self.runtime.write(PARTITION, lambda s: s.share_group_heartbeat(
            RequestMeta(1, "client", "/127.0.0.1"), req))


def parts(resp: Any) -> dict[bytes, list[int]]:
    return {tp.topic_id: tp.partitions for tp in resp.assignment.topic_partitions}


def test_simple_assignor_shares_partitions_when_members_outnumber_them():
    members = {f"m{i}": ShareGroupMember(f"m{i}", subscribed_topic_names=("t1", "t2")) for i in range(5)}
    out = simple_assignment(members, {"t1": (T1, 1), "t2": (T2, 4)})
    assert all(out[m][T1] == {0} for m in members)  # the one partition goes to everybody
    owners = {p: [m for m in members if p in out[m][T2]] for p in range(4)}
    assert sorted(len(v) for v in owners.values()) == [1, 1, 1, 2]
    two = simple_assignment({m: members[m] for m in ("m0", "m1")}, {"t2": (T2, 4)})
    assert two == {"m0": {T2: frozenset({0, 2})}, "m1": {T2: frozenset({1, 3})}}
    only_t1 = {"a": ShareGroupMember("a", subscribed_topic_names=("t1",)),
               "b": ShareGroupMember("b", subscribed_topic_names=("t2",))}
    assert simple_assignment(only_t1, {"t1": (T1, 1), "t2": (T2, 4)}) == {
        "a": {T1: frozenset({0})}, "b": {T2: frozenset({0, 1, 2, 3})}}


def test_members_join_share_the_partition_and_move_to_the_group_epoch():
    h = SGHarness()
    a = h.shb("g", "a", 0, ["t1"])
    # a new group is at epoch 1 (as Kafka): the first join bumps it to 2
    assert a.error_code == 0 and a.member_epoch == 2 and parts(a) == {T1: [0]} and a.heartbeat_interval_ms == 500
    b = h.shb("g", "b", 0, ["t1"])
    assert b.member_epoch == 3 and parts(b) == {T1: [0]}
    a2 = h.shb("g", "a", 2)
    assert a2.member_epoch == 3 and parts(a2) == {T1: [0]}  # the epoch moved: the assignment is sent again
    a3 = h.shb("g", "a", 3)
    assert a3.member_epoch == 3 and a3.assignment is None
    assert h.shb("g", "a", 2).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.shb("g", "a", 4).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.shb("g", "zz", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.shb("nope", "a", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_subscription_change_reassigns():
    h = SGHarness()
    h.shb("g", "a", 0, ["t1"])
    r = h.shb("g", "a", 2, ["t1", "t2"])
    assert r.member_epoch == 3 and parts(r) == {T1: [0], T2: [0, 1, 2, 3]}


def test_leave_and_session_timeout_remove_members():
    h = SGHarness()
    h.shb("g", "a", 0, ["t1"])
    h.shb("g", "b", 0, ["t1"])
    left = h.shb("g", "a", -1)
    assert left.error_code == 0 and left.member_epoch == -1
    assert h.removed == [("g", "a")]
    assert set(h.shard.share_groups["g"].members) == {"b"}
    h.advance(5000)
    kept = h.shb("g", "b", 3)  # a heartbeat in time keeps it; a's leaving moved the group epoch
    assert kept.error_code == 0 and kept.member_epoch == 4
    h.advance(6001)
    assert h.removed == [("g", "a"), ("g", "b")]
    assert h.shb("g", "b", 4).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.shard.share_groups["g"].members == {}


@pytest.mark.parametrize("kw", [
    dict(group="", member="a", epoch=0, topics=["t1"]),
    dict(group="g", member="", epoch=0, topics=["t1"]),
    dict(group="g", member="a", epoch=0, topics=None),
    dict(group="g", member="a", epoch=-2, topics=["t1"]),
    dict(group="g", member="a", epoch=0, topics=["t1"], rack=""),
])
def test_invalid_heartbeats(kw):
    h = SGHarness()
    assert h.shb(kw.pop("group"), kw.pop("member"), kw.pop("epoch"), **kw).error_code == ErrorCode.INVALID_REQUEST


def test_max_size_and_group_type_conflicts():
    h = SGHarness(share_group_max_size=1)
    h.shb("g", "a", 0, ["t1"])
    assert h.shb("g", "b", 0, ["t1"]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    cg = h.runtime.write(PARTITION, lambda s: s.consumer_group_heartbeat(
        RequestMeta(1, "c", "/h"), ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="x", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=["t1"],
            topic_partitions=[])))
    assert cg.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a consumer group" in cg.error_message
    h.hb("cg", "x", 0, topics=["t1"])
    r = h.shb("cg", "a", 0, ["t1"])
    assert r.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in r.error_message


def test_describe_list_delete():
    h = SGHarness()
    h.shb("g", "a", 0, ["t1", "t2"], rack="r1")
    d = h.runtime.read(PARTITION, lambda s: s.share_group_describe("g", True, GROUP_AUTHORIZED_OPERATIONS))
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        0, "Stable", 2, 2, "simple")
    [m] = d.members
    assert (m.member_id, m.rack_id, m.member_epoch, m.subscribed_topic_names) == ("a", "r1", 2, ["t1", "t2"])
    assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [("t1", [0]),
                                                                                          ("t2", [0, 1, 2, 3])]
    missing = h.runtime.read(PARTITION, lambda s: s.share_group_describe("x", False, 0))
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = h.runtime.read(PARTITION, lambda s: s.list_groups(None, None))
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
        ("g", "share", "Stable", "share")]
    assert h.runtime.read(PARTITION, lambda s: s.list_groups(None, {"consumer"})) == []
    classic = h.runtime.read(PARTITION, lambda s: s.describe_group("g", 6, False))
    assert classic.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a classic group" in classic.error_message
    [res] = h.runtime.write(PARTITION, lambda s: s.delete_groups(["g"]))
    assert res.error_code == ErrorCode.NON_EMPTY_GROUP
    h.shb("g", "a", -1)
    empty = h.runtime.read(PARTITION, lambda s: s.share_group_describe("g", False, 0))
    assert empty.group_state == "Empty"
    [res] = h.runtime.write(PARTITION, lambda s: s.delete_groups(["g"]))
    assert res.error_code == 0 and "g" not in h.shard.share_groups


def test_records_replay_into_the_same_groups():
    """A coordinator that loads the partition (replays __consumer_offsets) has the same share groups; its
    members get session timers again."""
    h = SGHarness()
    h.shb("g", "a", 0, ["t1", "t2"], rack="r1")
    h.shb("g", "b", 0, ["t2"])
    h.shb("g", "c", 0, ["t1"])
    h.shb("g", "c", -1)
    h.shb("empty", "x", 0, ["t1"])
    h.shb("empty", "x", -1)
    before = h.shard.share_groups
    r = h.reload()
    after = r.shard.share_groups
    assert set(after) == {"g", "empty"}
    for gid in before:
        b, a = before[gid], after[gid]
        assert (a.group_epoch, a.assignment_epoch, a.target) == (b.group_epoch, b.assignment_epoch, b.target)
        assert {m: (x.member_epoch, x.assigned, x.subscribed_topic_names, x.rack_id) for m, x in a.members.items()} \
            == {m: (x.member_epoch, x.assigned, x.subscribed_topic_names, x.rack_id) for m, x in b.members.items()}
    assert set(after["g"].members) == {"a", "b"} and after["empty"].members == {}
    # the reloaded coordinator serves the members where they were
    resp = r.runtime.write(PARTITION, lambda s: s.share_group_heartbeat(
        RequestMeta(1, "client", "/127.0.0.1"), Req(group_id="g", member_id="a",
                                                     member_epoch=before["g"].members["a"].member_epoch)))
    assert resp.error_code == 0 and resp.member_epoch == before["g"].group_epoch  # c's leaving moved the epoch
    r.advance(3000)
    epoch_a = r.shard.share_groups["g"].members["a"].member_epoch
    assert r.runtime.write(PARTITION, lambda s: s.share_group_heartbeat(
        RequestMeta(1, "client", "/127.0.0.1"), Req(group_id="g", member_id="a", member_epoch=epoch_a))).error_code == 0
    r.advance(3001)  # no heartbeat from b: removed by the session timer the load scheduled
    assert set(r.shard.share_groups["g"].members) == {"a"}
    [res] = r.runtime.write(PARTITION, lambda s: s.delete_groups(["empty"]))
    assert res.error_code == 0
    assert "empty" not in r.shard.share_groups and "empty" not in r.reload().shard.share_groups


def test_share_state_partition_metadata_record():
    """ShareGroupStatePartitionMetadata (record 15): a heartbeat's subscribed partitions become *initializing*
    (once per retry interval), then *initialized*; DeleteShareGroupOffsets removes a topic; the record replays;
    DeleteGroups passes the initialized partitions to the deletion hook."""
    from kbroker.coordinator.group.share_group import INITIALIZE_RETRY_INTERVAL_MS

    h = SGHarness(share_group_session_timeout_ms=2 * INITIALIZE_RETRY_INTERVAL_MS)
    deleted: list[tuple[str, dict[bytes, frozenset[int]]]] = []
    h.shard.on_share_group_deleted = lambda g, ps: deleted.append((g, ps))

    def pending() -> dict[bytes, frozenset[int]]:
        return h.runtime.write(PARTITION, lambda s: s.share_group_initialize_pending("g"))

    def initialized(shard: Any = None) -> dict[bytes, frozenset[int]]:
        return (shard or h.shard).share_group_initialized_partitions("g")

    assert h.runtime.write(PARTITION, lambda s: s.share_group_initialize_pending("nope")) == {}
    h.shb("g", "a", 0, ["t1", "t2"])
    assert pending() == {T1: frozenset({0}), T2: frozenset({0, 1, 2, 3})}
    assert pending() == {} and initialized() == {}  # initializing: not asked again within the retry interval
    h.advance(INITIALIZE_RETRY_INTERVAL_MS)
    assert pending() == {T1: frozenset({0}), T2: frozenset({0, 1, 2, 3})}  # asked again after it
    # a failed initialization is no longer initializing: asked again at once, not after the retry interval
    h.runtime.write(PARTITION, lambda s: s.share_group_initialize_failed("g", {T1: frozenset({0}),
                                                                           T2: frozenset({3})}))
    assert pending() == {T1: frozenset({0}), T2: frozenset({3})}
    assert pending() == {}
    h.runtime.write(PARTITION, lambda s: s.share_group_state_initialized("g", {T2: frozenset({0, 1})}))
    assert initialized() == {T2: frozenset({0, 1})}
    h.runtime.write(PARTITION, lambda s: s.share_group_state_initialized("g", {T1: frozenset({0}),
                                                                          T2: frozenset({2, 3})}))
    assert initialized() == {T1: frozenset({0}), T2: frozenset({0, 1, 2, 3})}
    assert pending() == {}
    st = h.shard.share_state_partitions["g"]
    assert st.initializing == {} and st.initialized[T2][0] == "t2"
    h.runtime.write(PARTITION, lambda s: s.share_group_state_deleted("g", [T1]))
    assert initialized() == {T2: frozenset({0, 1, 2, 3})}
    r = h.reload()
    assert initialized(r.shard) == {T2: frozenset({0, 1, 2, 3})}
    h.shb("g", "a", -1)
    [res] = h.runtime.write(PARTITION, lambda s: s.delete_groups(["g"]))
    assert res.error_code == 0 and "g" not in h.shard.share_state_partitions
    assert deleted == [("g", {T2: frozenset({0, 1, 2, 3})})]


def test_assignment_waits_for_initialized_share_state():
    """With ``share_state_gated`` (a broker's coordinator, as Kafka): only partitions with initialized share state
    are assigned; once more get it, the next heartbeat bumps the group epoch and assigns them."""
    h = SGHarness()
    h.shard.share_state_gated = True
    a = h.shb("g", "a", 0, ["t2"])
    assert a.member_epoch == 2 and parts(a) == {}
    assert h.runtime.write(PARTITION, lambda s: s.share_group_initialize_pending("g")) == {T2: frozenset(range(4))}
    assert h.shb("g", "a", 2).assignment is None  # nothing initialized yet: nothing new
    h.runtime.write(PARTITION, lambda s: s.share_group_state_initialized("g", {T2: frozenset({1, 2})}))
    a2 = h.shb("g", "a", 2)
    assert a2.member_epoch == 3 and parts(a2) == {T2: [1, 2]}
    b = h.shb("g", "b", 0, ["t2"])
    assert b.member_epoch == 4 and parts(b) == {T2: [2]}
    h.runtime.write(PARTITION, lambda s: s.share_group_state_initialized("g", {T2: frozenset({0, 3})}))
    a3 = h.shb("g", "a", 3)
    assert a3.member_epoch == 5 and parts(a3) == {T2: [0, 2]}
    assert h.shb("g", "a", 5).assignment is None  # assigned as initialized: no further bump


def test_share_assignment_interval_defers_the_next_target():
    """KIP-1263 for share groups (Kafka 4.3, probed): a member joining within ``group.share.assignment.interval.ms``
    of the last computation gets that target's epoch and nothing; the first heartbeat after the interval computes
    the target for the bumped group epoch and every member moves to it."""
    h = SGHarness(share_group_assignment_interval_ms=1000)
    a = h.shb("g", "a", 0, ["t2"])
    assert a.member_epoch == 2 and parts(a) == {T2: [0, 1, 2, 3]}
    h.advance(100)
    b = h.shb("g", "b", 0, ["t2"])
    assert (b.member_epoch, parts(b)) == (2, {})
    g = h.shard.share_groups["g"]
    assert (g.group_epoch, g.assignment_epoch) == (3, 2)
    assert h.shb("g", "a", 2).assignment is None
    h.advance(900)
    a2 = h.shb("g", "a", 2)
    assert a2.member_epoch == 3 and parts(a2) == {T2: [0, 2]}
    b2 = h.shb("g", "b", 2)
    assert b2.member_epoch == 3 and parts(b2) == {T2: [1, 3]}
    assert (g := h.shard.share_groups["g"]).group_epoch == g.assignment_epoch == 3
