"""The group APIs end to end in one process: request frames through the real dispatch, handlers, the
group coordinator and ``__consumer_offsets`` on disk, then a restart that replays it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kbroker.config import BrokerConfig
from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES, ApiKey
from kbroker.protocol.codec import read_uvarint
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.protocol.messages import (
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

pytestmark = pytest.mark.timeout(60)


class _Connection:
    listener_name = "PLAINTEXT"
    client_software = None
    peer = ("127.0.0.1", 5555)


class Node:
    def __init__(self, data_dir: Path, **props: str) -> None:
        from kbroker.server.broker import Broker

        base = {"node.id": "1", "process.roles": "broker,controller", "listeners": "PLAINTEXT://127.0.0.1:0",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir / "logs"),
                "num.partitions": "1", "offsets.topic.replication.factor": "1",
                "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
        base.update(props)
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(BrokerConfig(base))
        self.loop.run_until_complete(self.broker.start())
        self.loop.run_until_complete(self.broker.group_coordinator.wait_loaded())
        self._cid = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    async def acall(self, api_key: int, version: int, request: Any) -> Any:
        self._cid += 1
        frame = encode_request_header(api_key, version, self._cid, "tests") + codec.encode(request, version)
        chunks = await self.broker.apis.handle_frame(_Connection(), frame)
        data = b"".join(bytes(c) for c in chunks)
        pos = 4
        if response_header_version(api_key, version) == 1:
            n, pos = read_uvarint(data, pos)
        response, end = codec.decode(RESPONSES[api_key], data, version, pos)
        assert end == len(data)
        return response

    def call(self, api_key: int, version: int, request: Any) -> Any:
        return self.run(self.acall(api_key, version, request))

    def stop(self) -> None:
        self.loop.run_until_complete(self.broker.stop())
        self.loop.close()


@pytest.fixture
def node(tmp_path: Path):
    n = Node(tmp_path)
    yield n
    n.stop()


def create_topic(node: Node, name: str, partitions: int) -> None:
    r = node.call(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000))
    assert r.topics[0].error_code == 0


def join(node: Node, version: int, group: str, member_id: str = "", instance: str | None = None) -> Any:
    return node.call(ApiKey.JOIN_GROUP, version, JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")]))


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_creates_the_offsets_topic(node, version):
    if version >= 4:
        r = node.call(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]))
        assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [("a", 0, 1), ("b", 0, 1)]
        assert all(c.host == "127.0.0.1" and c.port > 0 for c in r.coordinators)
        txn = node.call(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=1, coordinator_keys=["t"]))
        assert (txn.coordinators[0].error_code, txn.coordinators[0].node_id) == (0, 1)
        share = node.call(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest(key_type=2, coordinator_keys=["s"]))
        assert share.coordinators[0].error_code == E.INVALID_REQUEST
    else:
        r = node.call(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest(key="a"))
        assert (r.error_code, r.node_id, r.host) == (0, 1, "127.0.0.1") and r.port > 0
    md = node.call(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        name="__consumer_offsets")], allow_auto_topic_creation=False))
    t = md.topics[0]
    assert t.error_code == 0 and t.is_internal and len(t.partitions) == 3
    configs = node.broker.topic_configs("__consumer_offsets")
    assert configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [0, 3, 4, 5, 7, 9])
def test_join_sync_heartbeat_leave_each_version(node, version):
    node.call(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g"))
    instance = "inst" if version >= 5 else None
    r = join(node, version, "g", instance=instance)
    if version >= 4 and instance is None:
        assert r.error_code == E.MEMBER_ID_REQUIRED
        r = join(node, version, "g", r.member_id)
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id and r.protocol_name == "range"
    sync_v = min(version, 5)
    s = node.call(ApiKey.SYNC_GROUP, sync_v, SyncGroupRequest(
        group_id="g", generation_id=1, member_id=r.member_id, group_instance_id=instance,
        protocol_type="consumer" if sync_v >= 5 else None, protocol_name="range" if sync_v >= 5 else None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=r.member_id, assignment=b"mine")]))
    assert (s.error_code, s.assignment) == (0, b"mine")
    hb_v = min(version, 4)
    hb = node.call(ApiKey.HEARTBEAT, hb_v, HeartbeatRequest(group_id="g", generation_id=1, member_id=r.member_id,
                                                            group_instance_id=instance))
    assert hb.error_code == 0
    stale = node.call(ApiKey.HEARTBEAT, hb_v, HeartbeatRequest(group_id="g", generation_id=0, member_id=r.member_id,
                                                               group_instance_id=instance))
    assert stale.error_code == E.ILLEGAL_GENERATION
    leave_v = min(version, 5)
    if leave_v >= 3:
        lv = node.call(ApiKey.LEAVE_GROUP, leave_v, LeaveGroupRequest(group_id="g", members=[
            LeaveGroupRequest.MemberIdentity(member_id=r.member_id, group_instance_id=instance),
            LeaveGroupRequest.MemberIdentity(member_id="nobody")]))
        assert lv.error_code == 0 and [m.error_code for m in lv.members] == [0, E.UNKNOWN_MEMBER_ID]
    else:
        lv = node.call(ApiKey.LEAVE_GROUP, leave_v, LeaveGroupRequest(group_id="g", member_id=r.member_id))
        assert lv.error_code == 0
        assert node.call(ApiKey.LEAVE_GROUP, leave_v, LeaveGroupRequest(group_id="g", member_id="x")).error_code \
            == E.UNKNOWN_MEMBER_ID
    d = node.call(ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(groups=["g"]))
    assert (d.groups[0].group_state, d.groups[0].members) == ("Empty", [])


def test_parked_joins_complete_together(node):
    node.call(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g"))
    a = join(node, 9, "g")
    b = join(node, 9, "g")
    first = join(node, 9, "g", a.member_id)
    assert first.generation_id == 1

    async def rejoin_both():
        return await asyncio.gather(
            node.acall(ApiKey.JOIN_GROUP, 9, JoinGroupRequest(
                group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=b.member_id,
                protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range")])),
            node.acall(ApiKey.JOIN_GROUP, 9, JoinGroupRequest(
                group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=a.member_id,
                protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range")])))

    rb, ra = node.run(rejoin_both())
    assert ra.generation_id == rb.generation_id == 2
    assert len(ra.members) == 2 and rb.members == []


@pytest.mark.parametrize("commit_v,fetch_v", [(2, 1), (3, 2), (5, 5), (6, 6), (7, 7), (8, 8), (9, 9)])
def test_commit_fetch_versions_round_trip(node, commit_v, fetch_v):
    create_topic(node, "t", 2)
    node.call(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g"))
    r = node.call(ApiKey.OFFSET_COMMIT, commit_v, OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=42,
                                                                 committed_leader_epoch=3, committed_metadata="md")]),
            OffsetCommitRequest.OffsetCommitRequestTopic(name="missing", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]))
    assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [
        ("t", [0]), ("missing", [E.UNKNOWN_TOPIC_OR_PARTITION])]
    epoch = 3 if commit_v >= 6 and fetch_v >= 5 else -1
    if fetch_v >= 8:
        f = node.call(ApiKey.OFFSET_FETCH, fetch_v, OffsetFetchRequest(groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])]),
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="other", topics=None)]))
        g, other = f.groups
        assert [(p.partition_index, p.committed_offset, p.metadata, p.committed_leader_epoch)
                for p in g.topics[0].partitions] == [(0, 42, "md", epoch), (1, -1, "", -1)]
        assert (other.error_code, other.topics) == (0, [])
    else:
        f = node.call(ApiKey.OFFSET_FETCH, fetch_v, OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]))
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in f.topics[0].partitions] == [
            (0, 42, "md"), (1, -1, "")]
        if fetch_v >= 5:
            assert f.topics[0].partitions[0].committed_leader_epoch == epoch
        if fetch_v >= 2:
            everything = node.call(ApiKey.OFFSET_FETCH, fetch_v, OffsetFetchRequest(group_id="g", topics=None))
            assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [("t", [42])]


def test_admin_apis_and_restart(tmp_path):
    n = Node(tmp_path)
    try:
        create_topic(n, "t", 2)
        n.call(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g"))
        n.call(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(group_id="g", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=10 + p,
                                                                 committed_metadata=f"m{p}") for p in (0, 1)])]))
        r = join(n, 4, "live")
        r = join(n, 4, "live", r.member_id)
        n.call(ApiKey.SYNC_GROUP, 4, SyncGroupRequest(group_id="live", generation_id=1, member_id=r.member_id,
                                                      assignments=[]))
        lg = n.call(ApiKey.LIST_GROUPS, 5, ListGroupsRequest())
        assert {(g.group_id, g.group_state, g.group_type) for g in lg.groups} == {
            ("g", "Empty", "classic"), ("live", "Stable", "classic")}
        assert [g.group_id for g in n.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(
            states_filter=["stable"])).groups] == ["live"]
        assert [g.group_id for g in n.call(ApiKey.LIST_GROUPS, 0, ListGroupsRequest()).groups] == ["g", "live"]
        od = n.call(ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="g", topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(name="t", partitions=[
                OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=1)]),
            OffsetDeleteRequest.OffsetDeleteRequestTopic(name="nope", partitions=[
                OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]))
        assert od.error_code == 0 and [[p.error_code for p in t.partitions] for t in od.topics] == [
            [0], [E.UNKNOWN_TOPIC_OR_PARTITION]]
        dg = n.call(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=["live", "nope"]))
        assert [(x.group_id, x.error_code) for x in dg.results] == [("live", E.NON_EMPTY_GROUP),
                                                                   ("nope", E.GROUP_ID_NOT_FOUND)]
        member = r.member_id
    finally:
        n.stop()
    n = Node(tmp_path)  # replays __consumer_offsets
    try:
        f = n.call(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="g", topics=None))
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in f.topics[0].partitions] == [(0, 10, "m0")]
        d = n.call(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["live", "g", "nope"]))
        live, g, nope = d.groups
        assert (live.group_state, [m.member_id for m in live.members], live.protocol_data) == ("Stable", [member], "range")
        assert (g.group_state, nope.group_state, nope.error_code) == ("Empty", "Dead", 0)
        hb = n.call(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="live", generation_id=1, member_id=member))
        assert hb.error_code == 0
        dg = n.call(ApiKey.DELETE_GROUPS, 0, DeleteGroupsRequest(groups_names=["g"]))
        assert dg.results[0].error_code == 0
        assert n.call(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="g", topics=None)).topics == []
    finally:
        n.stop()


def test_requests_before_the_offsets_topic_exists(node):
    r = join(node, 9, "g")
    assert r.error_code == E.NOT_COORDINATOR
    f = node.call(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="g", topics=None))
    assert f.error_code == E.NOT_COORDINATOR
    assert node.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest()).groups == []
