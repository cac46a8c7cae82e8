"""The classic group protocol and committed offsets, driven through the runtime with a fake clock."""

from __future__ import annotations

import pytest

from kbroker.coordinator.group.classic_group import ClassicGroupState as S
from kbroker.coordinator.group.shard import OFFSETS_EXPIRATION_KEY
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from kbroker.coordinator.group.shard import RequestMeta
from kbroker.coordinator.runtime import CoordinatorWriteError
from kbroker.protocol.messages import SyncGroupRequest
from tests.coordinator.support import Harness, Parked


def subscription(*topics: str) -> bytes:
    return b"\x00\x01" + codec.encode(ConsumerProtocolSubscription(topics=list(topics)), 1)


# ---------------------------------------------------------------------------------------------- join / sync

def test_member_id_required_then_join_after_initial_delay():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    first = h.join("g", client_id="app").response
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id.startswith("app-")
    assert h.group("g").state is S.EMPTY and first.member_id in h.group("g").pending_join_members
    box = h.join("g", first.member_id, client_id="app")
    assert not box.done and h.group("g").state is S.PREPARING_REBALANCE
    h.advance(2999)
    assert not box.done
    h.advance(1)
    r = box.response
    assert (r.error_code, r.generation_id, r.leader, r.member_id, r.protocol_name) == (
        E.NONE, 1, first.member_id, first.member_id, "range")
    assert [m.member_id for m in r.members] == [first.member_id]
    assert h.group("g").state is S.COMPLETING_REBALANCE


def test_initial_delay_extends_while_members_arrive_but_not_past_the_rebalance_timeout():
    h = Harness(group_initial_rebalance_delay_ms=1000)
    a = h.join_new("g", rebalance_ms=2500)
    h.advance(500)
    b = h.join_new("g", rebalance_ms=2500)
    h.advance(500)  # t=1000: a member arrived during the delay -> wait another delay
    assert not a.done and not b.done
    h.advance(999)
    assert not a.done
    h.advance(1)  # t=2000
    assert a.done and b.done
    assert a.response.generation_id == b.response.generation_id == 1


def test_v3_join_needs_no_member_id_round_trip():
    h = Harness()
    box = h.join("g", version=3)
    h.advance(0)
    assert box.response.error_code == E.NONE and box.response.member_id


def test_two_members_rebalance_sync_and_stable():
    h = Harness()
    a = h.join_new("g", client_id="a")
    h.advance(0)
    ra = a.response
    sa = h.sync("g", ra.member_id, 1, {ra.member_id: b"A-all"})
    assert sa.response.assignment == b"A-all" and h.group("g").state is S.STABLE
    # a second member joins: the first learns about the rebalance from its heartbeat and rejoins
    b = h.join_new("g", client_id="b")
    assert not b.done and h.group("g").state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", ra.member_id, 1) == E.REBALANCE_IN_PROGRESS
    assert h.commit("g", {("t", 0): 5}, generation=1, member_id=ra.member_id) == {("t", 0): E.NONE}
    a2 = h.join("g", ra.member_id, client_id="a")
    ja, jb = a2.response, b.response
    assert ja.generation_id == jb.generation_id == 2
    assert ja.leader == ra.member_id and len(ja.members) == 2 and jb.members == []
    # follower syncs first and waits for the leader
    sb = h.sync("g", jb.member_id, 2)
    assert not sb.done
    assert h.commit("g", {("t", 0): 6}, generation=2, member_id=jb.member_id) == {("t", 0): E.REBALANCE_IN_PROGRESS}
    sa2 = h.sync("g", ja.member_id, 2, {ja.member_id: b"A", jb.member_id: b"B"})
    assert sa2.response.assignment == b"A" and sb.response.assignment == b"B"
    assert h.group("g").state is S.STABLE
    assert h.heartbeat("g", jb.member_id, 2) == E.NONE
    # the stored generation survives a reload
    g2 = h.reload().group("g")
    assert (g2.state, g2.generation_id, g2.leader_id, g2.protocol_name) == (S.STABLE, 2, ja.member_id, "range")
    assert {m: x.assignment for m, x in g2.members.items()} == {ja.member_id: b"A", jb.member_id: b"B"}


def test_follower_rejoin_with_same_metadata_in_stable_group_does_not_rebalance():
    h = Harness()
    leader, follower = h.stable_group("g", 2)
    r = h.join("g", follower, client_id="c1").response
    assert r.error_code == E.NONE and r.generation_id == 1 and r.members == []
    assert h.group("g").state is S.STABLE
    # the leader rejoining does rebalance (it may want to compute a new assignment)
    box = h.join("g", leader, client_id="c0")
    assert not box.done and h.group("g").state is S.PREPARING_REBALANCE


def test_protocol_selection_votes_among_common_protocols():
    h = Harness()
    p1 = [("cooperative-sticky", b"x"), ("range", b"y")]
    p2 = [("range", b"y"), ("roundrobin", b"z")]
    a = h.join_new("g", protocols=p1)
    b = h.join_new("g", protocols=p2)
    h.advance(0)
    assert a.response.protocol_name == b.response.protocol_name == "range"
    # no common protocol
    c = h.join("g", protocols=[("roundrobin", b"")], version=9).response
    assert c.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    d = h.join("g", protocols=[("range", b"")], protocol_type="connect").response
    assert d.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_join_validation_errors():
    h = Harness()
    assert h.join("").response.error_code == E.INVALID_GROUP_ID
    assert h.join("g", session_ms=10).response.error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join("g", session_ms=3_600_000).response.error_code == E.INVALID_SESSION_TIMEOUT
    assert h.join("nope", "someone").response.error_code == E.UNKNOWN_MEMBER_ID
    h.stable_group("g", 1)
    assert h.join("g", "stranger").response.error_code == E.UNKNOWN_MEMBER_ID
    h2 = Harness(group_max_size=1)
    h2.stable_group("g", 1)
    assert h2.join("g").response.error_code == E.GROUP_MAX_SIZE_REACHED


def test_sync_errors():
    h = Harness()
    leader, follower = h.stable_group("g", 2)
    assert h.sync("nope", leader, 1).response.error_code == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", "stranger", 1).response.error_code == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", leader, 7).response.error_code == E.ILLEGAL_GENERATION
    assert h.sync("g", leader, 1, protocol_type="connect").response.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", leader, 1, protocol_name="roundrobin").response.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # Stable: SyncGroup answers the stored assignment
    assert h.sync("g", follower, 1).response.assignment == f"assignment-{follower}".encode()
    h.join("g", leader, client_id="c0")
    assert h.sync("g", follower, 1).response.error_code == E.REBALANCE_IN_PROGRESS


def test_a_new_rebalance_answers_parked_syncs_with_rebalance_in_progress():
    h = Harness()
    a = h.join_new("g")
    b = h.join_new("g")
    h.advance(0)
    ra, rb = a.response, b.response
    follower = rb if ra.leader == ra.member_id else ra
    parked = h.sync("g", follower.member_id, 1)
    assert not parked.done
    h.join_new("g")  # a third member arrives before the leader synced
    assert parked.response.error_code == E.REBALANCE_IN_PROGRESS


def test_failed_assignment_write_propagates_the_error_and_rebalances():
    h = Harness()
    a = h.join_new("g")
    b = h.join_new("g")
    h.advance(0)
    ra, rb = a.response, b.response
    leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
    parked = h.sync("g", follower.member_id, 1)
    h.writer.fail_with = E.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(Exception):
        h.sync("g", leader.member_id, 1, {leader.member_id: b"x", follower.member_id: b"y"})
    assert parked.response.error_code == E.NOT_COORDINATOR
    h.writer.fail_with = None
    h.advance(0)
    assert h.group("g").state is S.PREPARING_REBALANCE


def test_assignment_that_cannot_be_stored_waits_for_the_members_to_rejoin(caplog):
    """__consumer_offsets below min.insync.replicas (issue 33): the leader's SyncGroup gets
    COORDINATOR_NOT_AVAILABLE (Kafka's mapping of NOT_ENOUGH_REPLICAS) and the group goes back to
    PreparingRebalance; no generation starts until the member joins again, one per JoinGroup; the failed appends
    are logged once, not once each; once the replicas are back the group gets Stable."""
    h = Harness()
    [member] = h.stable_group("g", 1)
    g = h.group("g")
    h.writer.fail_with = E.NOT_ENOUGH_REPLICAS
    caplog.set_level("INFO", logger="kbroker.coordinator")
    for i in range(30):
        join = h.join("g", member, client_id="c0").response  # the leader rejoins: a new generation at once
        assert (join.error_code, join.generation_id) == (E.NONE, 2 + i)
        box = Parked()
        request = SyncGroupRequest(group_id="g", generation_id=join.generation_id, member_id=member,
                                   assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member,
                                                                                            assignment=b"a")])
        with pytest.raises(CoordinatorWriteError):
            h.runtime.write(0, lambda s: s.sync_group(RequestMeta(5), request, box))
        assert box.response.error_code == E.COORDINATOR_NOT_AVAILABLE
        assert g.state is S.PREPARING_REBALANCE
        h.advance(5000 if i == 0 else 100)  # nobody asks: nothing happens (the session timer waits for the member)
        assert (g.state, g.generation_id) == (S.PREPARING_REBALANCE, 2 + i)
        assert h.heartbeat("g", member, g.generation_id) == E.REBALANCE_IN_PROGRESS
    warnings = [r for r in caplog.records if "append to partition" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # 30 failures within 10 s: one line
    h.writer.fail_with = None
    join = h.join("g", member, client_id="c0").response
    assert join.generation_id == 32
    assert h.sync("g", member, 32, {member: b"a"}).response.error_code == E.NONE
    assert g.state is S.STABLE and g.members[member].assignment == b"a"
    assert any("succeed again" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------- liveness

def test_session_timeout_removes_a_silent_member_and_rebalances():
    h = Harness()
    leader, follower = h.stable_group("g", 2, session_ms=10_000)
    h.advance(6000)
    assert h.heartbeat("g", leader, 1) == E.NONE
    h.advance(3999)
    assert h.heartbeat("g", leader, 1) == E.NONE
    h.advance(1)  # the follower never heartbeated: gone after 10 s
    assert h.heartbeat("g", leader, 1) == E.REBALANCE_IN_PROGRESS
    g = h.group("g")
    assert follower not in g.members and g.state is S.PREPARING_REBALANCE
    assert h.heartbeat("g", follower, 1) == E.UNKNOWN_MEMBER_ID
    r = h.join("g", leader, client_id="c0").response
    assert r.generation_id == 2 and [m.member_id for m in r.members] == [leader]


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    leader, follower = h.stable_group("g", 2, session_ms=60_000, rebalance_ms=20_000)
    box = h.join("g", leader, client_id="c0", session_ms=60_000, rebalance_ms=20_000)
    h.advance(19_999)
    assert not box.done
    assert h.heartbeat("g", follower, 1) == E.REBALANCE_IN_PROGRESS
    h.advance(1)
    assert box.response.generation_id == 2 and [m.member_id for m in box.response.members] == [leader]
    assert follower not in h.group("g").members


def test_pending_member_expires_and_stops_blocking_the_rebalance():
    h = Harness()
    leader, = h.stable_group("g", 1, session_ms=30_000)
    pending = h.join("g", client_id="late", session_ms=10_000).response  # MEMBER_ID_REQUIRED, then silence
    assert pending.error_code == E.MEMBER_ID_REQUIRED
    box = h.join("g", leader, client_id="c0", session_ms=30_000)  # leader rejoins -> rebalance
    assert not box.done  # waits for the pending member
    h.advance(10_000)
    assert box.response.generation_id == 2


def test_members_that_do_not_sync_are_removed():
    h = Harness()
    a = h.join_new("g", rebalance_ms=15_000, session_ms=30_000)
    b = h.join_new("g", rebalance_ms=15_000, session_ms=30_000)
    h.advance(0)
    ra, rb = a.response, b.response
    leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
    h.sync("g", leader.member_id, 1, {leader.member_id: b"x"})
    assert h.group("g").state is S.STABLE
    h.advance(15_000)  # the follower never sent SyncGroup
    assert follower.member_id not in h.group("g").members
    assert h.group("g").state is S.PREPARING_REBALANCE


# ---------------------------------------------------------------------------------------------- leave

def test_leave_group_rebalances_the_rest_and_empty_group_is_stored():
    h = Harness()
    leader, follower = h.stable_group("g", 2)
    top, errors = h.leave("g", (follower, None), ("stranger", None))
    assert (top, errors) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
    assert h.group("g").state is S.PREPARING_REBALANCE
    r = h.join("g", leader, client_id="c0").response
    assert r.generation_id == 2 and len(r.members) == 1
    assert h.leave("g", (leader, None)) == (E.NONE, [E.NONE])
    g = h.group("g")
    assert g.state is S.EMPTY and g.generation_id == 3 and not g.members
    reloaded = h.reload().group("g")
    assert (reloaded.state, reloaded.generation_id) == (S.EMPTY, 3)
    assert h.leave("nope", ("x", None)) == (E.UNKNOWN_MEMBER_ID, [])


def test_parked_join_of_a_leaving_member_is_answered():
    h = Harness()
    leader, follower = h.stable_group("g", 2)
    box = h.join("g", leader, client_id="c0")
    assert h.leave("g", (leader, None)) == (E.NONE, [E.NONE])
    assert box.response.error_code == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------------------------- static members

def test_static_member_restart_keeps_its_assignment_without_rebalance():
    h = Harness()
    a = h.join("g", instance_id="i-a", client_id="a")
    b = h.join("g", instance_id="i-b", client_id="b")
    h.advance(0)
    ra, rb = a.response, b.response
    assert ra.error_code == E.NONE and ra.member_id.startswith("i-a-")  # no MEMBER_ID_REQUIRED for static
    leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
    sf = h.sync("g", follower.member_id, 1, instance_id=None)
    h.sync("g", leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    assert sf.response.assignment == b"F"
    # the follower restarts (new process, no member id) within its session timeout
    fid = "i-b" if follower is rb else "i-a"
    again = h.join("g", instance_id=fid, client_id="restarted").response
    assert again.error_code == E.NONE and again.generation_id == 1 and again.member_id != follower.member_id
    g = h.group("g")
    assert g.state is S.STABLE and g.generation_id == 1
    assert h.sync("g", again.member_id, 1, instance_id=fid).response.assignment == b"F"
    # the old incarnation is fenced
    assert h.heartbeat("g", follower.member_id, 1, instance_id=fid) == E.FENCED_INSTANCE_ID
    assert h.commit("g", {("t", 0): 1}, generation=1, member_id=follower.member_id,
                    instance_id=fid) == {("t", 0): E.FENCED_INSTANCE_ID}
    assert h.heartbeat("g", again.member_id, 1, instance_id=fid) == E.NONE
    # the replacement was stored
    g2 = h.reload().group("g")
    assert g2.static_members[fid] == again.member_id and g2.members[again.member_id].assignment == b"F"


def test_static_leader_restart_gets_members_but_skips_assignment():
    h = Harness()
    a = h.join("g", instance_id="i-a")
    h.advance(0)
    ra = a.response
    h.sync("g", ra.member_id, 1, {ra.member_id: b"L"})
    again = h.join("g", instance_id="i-a").response
    assert again.skip_assignment and again.leader == again.member_id and len(again.members) == 1
    old_style = h.join("g", instance_id="i-a", version=8).response  # before v9: old leader id, no members
    assert not old_style.skip_assignment and old_style.leader == again.member_id and old_style.members == []


def test_static_member_not_rejoining_keeps_its_place_until_session_timeout():
    h = Harness()
    a = h.join("g", instance_id="i-a", session_ms=30_000, rebalance_ms=5_000)
    b = h.join("g", instance_id="i-b", session_ms=30_000, rebalance_ms=5_000)
    h.advance(0)
    ra, rb = a.response, b.response
    leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
    h.sync("g", follower.member_id, 1)
    h.sync("g", leader.member_id, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    box = h.join("g", leader.member_id, instance_id=("i-a" if leader is ra else "i-b"),
                 session_ms=30_000, rebalance_ms=5_000)
    h.advance(5_000)
    r = box.response  # the static follower did not rejoin but is still a member of generation 2
    assert r.generation_id == 2 and {m.member_id for m in r.members} == {leader.member_id, follower.member_id}


def test_leave_by_instance_id_and_fencing():
    h = Harness()
    a = h.join("g", instance_id="i-a")
    h.advance(0)
    ra = a.response
    assert h.leave("g", ("other-id", "i-a")) == (E.NONE, [E.FENCED_INSTANCE_ID])
    assert h.leave("g", ("", "i-unknown")) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    assert h.leave("g", ("", "i-a")) == (E.NONE, [E.NONE])
    assert ra.member_id not in h.group("g").members


# ---------------------------------------------------------------------------------------------- offsets

def test_commit_and_fetch_round_trip_metadata_and_leader_epoch():
    h = Harness()
    assert h.commit("g", {("t", 0): 10, ("t", 1): 20}, metadata="hello \u00e9", leader_epoch=3) == {
        ("t", 0): E.NONE, ("t", 1): E.NONE}
    assert h.fetch("g", [("t", [0, 1, 2])]) == {("t", 0): (10, "hello \u00e9", 3), ("t", 1): (20, "hello \u00e9", 3),
                                              ("t", 2): (-1, "", -1)}
    assert h.fetch("g") == {("t", 0): (10, "hello \u00e9", 3), ("t", 1): (20, "hello \u00e9", 3)}
    assert h.fetch("unknown", [("t", [0])]) == {("t", 0): (-1, "", -1)}
    assert h.fetch("unknown") == {}
    # a simple commit created an Empty group without protocol type
    g = h.group("g")
    assert g.state is S.EMPTY and g.protocol_type is None
    assert h.reload().fetch("g") == h.fetch("g")


def test_commit_metadata_limit():
    h = Harness(offset_metadata_max_bytes=8)
    assert h.commit("g", {("t", 0): 1}, metadata="x" * 8) == {("t", 0): E.NONE}
    assert h.commit("g", {("t", 0): 2}, metadata="x" * 9) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert h.fetch("g", [("t", [0])])[("t", 0)][0] == 1
    assert h.commit("g", {("t", 0): 3}, metadata=None) == {("t", 0): E.NONE}
    assert h.fetch("g", [("t", [0])])[("t", 0)] == (3, "", -1)


def test_commit_member_checks():
    h = Harness()
    leader, follower = h.stable_group("g", 2)
    ok = {("t", 0): E.NONE}
    assert h.commit("g", {("t", 0): 1}, generation=1, member_id=leader) == ok
    assert h.commit("g", {("t", 0): 1}, generation=0, member_id=leader) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit("g", {("t", 0): 1}, generation=1, member_id="x") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # generation -1 without a member: only while the group is Empty
    assert h.commit("g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.commit("", {("t", 0): 1}) == {("t", 0): E.INVALID_GROUP_ID}
    assert h.commit("nope", {("t", 0): 1}, generation=3, member_id="m", version=8) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.commit("nope", {("t", 0): 1}, generation=3, member_id="m", version=9) == {("t", 0): E.GROUP_ID_NOT_FOUND}
    # a rebalance in progress still accepts commits of the current generation (PreparingRebalance)
    h.join("g", leader, client_id="c0")
    assert h.commit("g", {("t", 0): 2}, generation=1, member_id=follower) == ok


def test_commit_with_retention_time_expires_at_that_time():
    h = Harness()
    h.commit("g", {("t", 0): 1}, retention_ms=1000)
    h.advance(999)
    assert h.shard.expired_offset_records(h.scheduler.now_ms()) == []
    h.advance(1)
    assert len(h.shard.expired_offset_records(h.scheduler.now_ms())) == 2  # offset + empty group


def test_offsets_of_an_empty_group_expire_and_the_group_is_deleted():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    leader, = h.stable_group("g", 1)
    h.commit("g", {("t", 0): 7}, generation=1, member_id=leader)
    for _ in range(20):  # a Stable group's offsets of subscribed topics never expire (subscription unknown here)
        h.advance(6_000)
        assert h.heartbeat("g", leader, 1) == E.NONE
    assert h.fetch("g", [("t", [0])])[("t", 0)][0] == 7
    h.leave("g", (leader, None))
    assert h.group("g").state is S.EMPTY
    h.advance(50_000)
    assert h.fetch("g", [("t", [0])])[("t", 0)][0] == 7
    h.advance(20_000)  # 60 s after the group became empty (checked every 10 s)
    assert h.fetch("g", [("t", [0])])[("t", 0)][0] == -1
    assert "g" not in h.shard.groups
    assert "g" not in h.reload().shard.groups
    assert h.runtime.contexts[0].timer.is_scheduled(OFFSETS_EXPIRATION_KEY)


def test_offsets_of_topics_a_consumer_group_left_expire():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    leader, = h.stable_group("g", 1, protocols=[("range", subscription("t"))])
    h.commit("g", {("t", 0): 1, ("old", 0): 2}, generation=1, member_id=leader)
    for _ in range(14):
        h.advance(6_000)
        assert h.heartbeat("g", leader, 1) == E.NONE
    assert h.fetch("g") == {("t", 0): (1, "", -1)}


def test_delete_offsets():
    h = Harness()
    leader, = h.stable_group("g", 1, protocols=[("range", subscription("t"))])
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation=1, member_id=leader)
    top, errors = h.runtime.write(0, lambda s: s.delete_offsets("g", [("t", [0]), ("u", [0, 1])]))
    assert top == E.NONE
    assert errors == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE, ("u", 1): E.NONE}
    assert h.fetch("g") == {("t", 0): (1, "", -1)}
    assert h.runtime.write(0, lambda s: s.delete_offsets("nope", [("t", [0])])) == (E.GROUP_ID_NOT_FOUND, {})
    h2 = Harness()
    h2.stable_group("c", 1, protocol_type="connect")
    assert h2.runtime.write(0, lambda s: s.delete_offsets("c", [("t", [0])]))[0] == E.NON_EMPTY_GROUP


# ---------------------------------------------------------------------------------------------- admin

def test_list_describe_delete():
    h = Harness()
    leader, follower = h.stable_group("busy", 2)
    h.commit("simple", {("t", 0): 1})
    listed = h.runtime.read(0, lambda s: s.list_groups(None, None))
    assert {(g.group_id, g.group_state, g.protocol_type, g.group_type) for g in listed} == {
        ("busy", "Stable", "consumer", "classic"), ("simple", "Empty", "", "classic")}
    assert [g.group_id for g in h.runtime.read(0, lambda s: s.list_groups({"empty"}, None))] == ["simple"]
    assert h.runtime.read(0, lambda s: s.list_groups(None, {"consumer"})) == []
    d = h.runtime.read(0, lambda s: s.describe_group("busy", 6, False))
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (E.NONE, "Stable", "consumer", "range")
    assert {m.member_id: m.member_assignment for m in d.members} == {
        leader: f"assignment-{leader}".encode(), follower: f"assignment-{follower}".encode()}
    assert all(m.client_host == "/127.0.0.1" and m.member_metadata == b"meta" for m in d.members)
    missing6 = h.runtime.read(0, lambda s: s.describe_group("nope", 6, False))
    missing5 = h.runtime.read(0, lambda s: s.describe_group("nope", 5, False))
    assert (missing6.error_code, missing5.error_code, missing5.group_state) == (E.GROUP_ID_NOT_FOUND, E.NONE, "Dead")
    res = h.runtime.write(0, lambda s: s.delete_groups(["busy", "simple", "nope", ""]))
    assert [(r.group_id, r.error_code) for r in res] == [
        ("busy", E.NON_EMPTY_GROUP), ("simple", E.NONE), ("nope", E.GROUP_ID_NOT_FOUND), ("", E.INVALID_GROUP_ID)]
    assert "simple" not in h.shard.groups and h.fetch("simple") == {}
    r = h.reload()
    assert "simple" not in r.shard.groups and set(r.shard.groups) == {"busy"}
