"""Streams groups (KIP-1071) in the group coordinator shard: topology configuration, the sticky task assignor,
heartbeats with revoke-before-assign reconciliation, records replayed on reload, describe / list / delete."""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.coordinator.group.shard import GROUP_AUTHORIZED_OPERATIONS, RequestMeta
from kbroker.coordinator.group.streams_group import (
    ASSIGNMENT_DELAYED,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    StreamsGroupMember,
    assign_tasks,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import StreamsGroupHeartbeatRequest as Req
from tests.coordinator.support import PARTITION
from tests.coordinator.test_consumer_group import CGHarness, image

IN, REP, CHG = "input", "app-words-repartition", "app-counts-changelog"


def topology(epoch: int = 0) -> Req.Topology:
    """Word count: subtopology 0 reads ``input`` and writes the repartition topic; 1 reads it, keeps a changelog."""
    return Req.Topology(epoch=epoch, subtopologies=[
        Req.Subtopology(subtopology_id="0", source_topics=[IN], repartition_sink_topics=[REP]),
        Req.Subtopology(subtopology_id="1", repartition_source_topics=[Req.TopicInfo(name=REP)],
                        state_changelog_topics=[Req.TopicInfo(name=CHG, topic_configs=[
                            Req.KeyValue(key="cleanup.policy", value="compact")])])])


class StreamsHarness(CGHarness):
    def __init__(self, topics: dict[str, int], **kw: Any) -> None:
        kw.setdefault("props", {"group.streams.initial.rebalance.delay.ms": "0"})  # (tested on its own below)
        super().__init__(image({n: (uuid.uuid4().bytes, p) for n, p in topics.items()}), **kw)

    def add_topics(self, topics: dict[str, int]) -> None:
        current = {n: (t.topic_id, len(t.partitions)) for n, t in self.image.topics_by_name.items()}
        self.image = image({**current, **{n: (uuid.uuid4().bytes, p) for n, p in topics.items()}})

    def shb(self, group: str, member: str, epoch: int, *, process: str = "p1", active: Any = None,
            standby: Any = None, topo: Req.Topology | None = None) -> tuple[Any, dict]:
        joining = epoch == 0
        req = Req(group_id=group, member_id=member, member_epoch=epoch, process_id=process if joining else None,
                  rebalance_timeout_ms=30_000 if joining else -1, topology=(topo or topology()) if joining else None,
                  active_tasks=[] if joining else _ids(active), standby_tasks=[] if joining else _ids(standby),
                  warmup_tasks=[] if joining else (None if active is None else []))
        return self.runtime.write(PARTITION, lambda s: s.streams_group_heartbeat(
            RequestMeta(0, "client", "/127.0.0.1"), req))


def _ids(tasks: set[tuple[str, int]] | None) -> list[Req.TaskIds] | None:
    if tasks is None:
        return None
    subs = sorted({s for s, _ in tasks})
    return [Req.TaskIds(subtopology_id=s, partitions=sorted(p for x, p in tasks if x == s)) for s in subs]


def tasks(ids: list[Any] | None) -> set[tuple[str, int]]:
    return {(t.subtopology_id, p) for t in ids or [] for p in t.partitions}


ALL = {(s, p) for s in ("0", "1") for p in range(3)}


def test_missing_internal_topics_then_all_tasks_to_the_one_member():
    h = StreamsHarness({IN: 3})
    resp, create = h.shb("app", "m1", 0)
    assert resp.error_code == 0 and resp.member_epoch == 1
    assert [s.status_code for s in resp.status] == [MISSING_INTERNAL_TOPICS]
    assert create == {REP: (3, -1, {}), CHG: (3, -1, {"cleanup.policy": "compact"})}
    assert tasks(resp.active_tasks) == set()
    assert h.shard.streams_group_describe("app", False, 0).group_state == "NotReady"
    h.add_topics({REP: 3, CHG: 3})
    resp, create = h.shb("app", "m1", 1, active=set(), standby=set())
    assert not resp.status and not create
    assert resp.member_epoch == 2 and tasks(resp.active_tasks) == ALL
    assert h.shard.streams_group_describe("app", False, 0).group_state == "Stable"


def test_missing_source_topic_is_reported_and_nothing_created():
    h = StreamsHarness({})
    resp, create = h.shb("app", "m1", 0)
    assert [s.status_code for s in resp.status] == [MISSING_SOURCE_TOPICS] and create == {}


def test_second_member_gets_tasks_only_after_the_first_revokes_them():
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3})
    r1, _ = h.shb("app", "m1", 0, process="p1")
    assert tasks(r1.active_tasks) == ALL and r1.member_epoch == 1
    r2, _ = h.shb("app", "m2", 0, process="p2")
    assert r2.member_epoch == 2 and tasks(r2.active_tasks) == set()  # its target is still held by m1
    r1b, _ = h.shb("app", "m1", 1, active=ALL, standby=set())
    kept = tasks(r1b.active_tasks)
    assert r1b.member_epoch == 1 and len(kept) == 3  # revoke first, same epoch
    r1c, _ = h.shb("app", "m1", 1, active=kept, standby=set())
    assert r1c.member_epoch == 2
    r2b, _ = h.shb("app", "m2", 2, active=set(), standby=set())
    assert tasks(r2b.active_tasks) == ALL - kept
    assert h.shard.streams_group_describe("app", False, 0).group_state == "Stable"


def test_sticky_assignor_with_standby_replicas_on_other_processes():
    members = {m: StreamsGroupMember(m, process_id=p) for m, p in (("a", "p1"), ("b", "p1"), ("c", "p2"))}
    out = assign_tasks(members, {"0": 4}, {}, 1)
    active = [(m, p) for m, a in out.items() for (k, s), ps in a.items() if k == "active" for p in ps]
    assert sorted(p for _, p in active) == [0, 1, 2, 3]
    owner = dict((p, m) for m, p in active)
    for m, a in out.items():
        for (k, s), ps in a.items():
            if k == "standby":
                for p in ps:
                    assert members[m].process_id != members[owner[p]].process_id
    assert sum(len(ps) for a in out.values() for (k, _), ps in a.items() if k == "standby") == 4
    again = assign_tasks(members, {"0": 4}, out, 1)
    assert again == out  # sticky


def test_leave_records_reload_describe_list_delete():
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3})
    r1, _ = h.shb("app", "m1", 0)
    other = h.reload()
    d = other.shard.streams_group_describe("app", True, GROUP_AUTHORIZED_OPERATIONS)
    assert d.error_code == 0 and d.group_epoch == 1 and len(d.members) == 1
    assert tasks(d.members[0].assignment.active_tasks) == ALL
    assert [s.subtopology_id for s in d.topology.subtopologies] == ["0", "1"]
    assert [(g.group_id, g.group_type) for g in h.shard.list_groups(None, {"streams"})] == [("app", "streams")]
    deleted = h.runtime.write(PARTITION, lambda s: s.delete_groups(["app"]))
    assert [r.error_code for r in deleted] == [ErrorCode.NON_EMPTY_GROUP]
    resp, _ = h.shb("app", "m1", -1)
    assert resp.error_code == 0 and resp.member_epoch == -1
    assert h.shard.streams_group_describe("app", False, 0).group_state == "Empty"
    deleted = h.runtime.write(PARTITION, lambda s: s.delete_groups(["app"]))
    assert [r.error_code for r in deleted] == [ErrorCode.NONE]
    assert h.shard.streams_group_describe("app", False, 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_errors():
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3})
    assert h.shb("app", "m1", 5)[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    h.shb("app", "m1", 0)
    assert h.shb("app", "m2", 3)[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.shb("app", "m1", 7)[0].error_code == ErrorCode.FENCED_MEMBER_EPOCH
    bad = Req(group_id="app", member_id="", member_epoch=0)
    resp, _ = h.runtime.write(PARTITION, lambda s: s.streams_group_heartbeat(RequestMeta(0, "c", "/h"), bad))
    assert resp.error_code == ErrorCode.INVALID_REQUEST


def test_session_timeout_removes_the_member():
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3})
    h.shb("app", "m1", 0)
    h.advance(46_000)
    assert h.shard.streams_group_describe("app", False, 0).members == []


def test_initial_rebalance_delay_of_a_new_group():
    """As Kafka 4.3: the first heartbeat of a new group answers epoch 1 without tasks and ASSIGNMENT_DELAYED (group
    epoch 2, Assigning); once ``streams.initial.rebalance.delay.ms`` has passed the next heartbeat assigns."""
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3}, props={"group.streams.initial.rebalance.delay.ms": "3000"})
    resp, _ = h.shb("app", "m1", 0)
    assert resp.member_epoch == 1 and tasks(resp.active_tasks) == set()
    assert [s.status_code for s in resp.status] == [ASSIGNMENT_DELAYED]
    d = h.shard.streams_group_describe("app", False, 0)
    assert (d.group_state, d.group_epoch, d.assignment_epoch) == ("Assigning", 2, 1)
    h.advance(1000)
    resp, _ = h.shb("app", "m1", 1, active=set(), standby=set())
    assert [s.status_code for s in resp.status] == [ASSIGNMENT_DELAYED] and resp.member_epoch == 1
    h.advance(2000)
    resp, _ = h.shb("app", "m1", 1, active=set(), standby=set())
    assert not resp.status and resp.member_epoch == 2 and tasks(resp.active_tasks) == ALL


def test_a_fenced_member_rejoins_under_its_id():
    h = StreamsHarness({IN: 3, REP: 3, CHG: 3})
    h.shb("app", "m1", 0)
    assert h.shb("app", "m1", 9)[0].error_code == ErrorCode.FENCED_MEMBER_EPOCH
    resp, _ = h.shb("app", "m1", 0)
    assert resp.error_code == 0 and resp.member_epoch == 1 and tasks(resp.active_tasks) == ALL
