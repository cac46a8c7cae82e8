"""OffsetCommit v10 / OffsetFetch v10 (topics by topic id) through the real dispatch and codec."""

from __future__ import annotations

import uuid

import pytest

from kbroker.protocol.api_keys import ApiKey as K
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.handlers import offset_commit, offset_fetch
from tests.server.conftest import Node

pytestmark = pytest.mark.timeout(60)

UNKNOWN_ID = uuid.UUID("0123456789abcdef0123456789abcdef").bytes
Commit = OffsetCommitRequest
Fetch = OffsetFetchRequest


def setup(node: Node) -> bytes:
    r = node.call(K.CREATE_TOPICS, 7, CreateTopicsRequest(timeout_ms=5000, topics=[
        CreateTopicsRequest.CreatableTopic(name="t", num_partitions=2, replication_factor=1)]))
    assert r.topics[0].error_code == 0
    assert node.call(K.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g")).error_code == 0
    node.run(node.broker.group_coordinator.wait_loaded())
    topic_id = node.broker.controller.image.topics_by_name["t"].topic_id
    assert topic_id != ZERO_UUID
    return topic_id


def commit_v10(node: Node, topics: list[tuple[bytes, list[tuple[int, int]]]], member_id: str = "",
               epoch: int = -1, group: str = "g"):
    return node.call(K.OFFSET_COMMIT, 10, Commit(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, topics=[
            Commit.OffsetCommitRequestTopic(topic_id=tid, partitions=[
                Commit.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=2,
                                                    committed_metadata=f"m{o}") for p, o in parts])
            for tid, parts in topics]))


def test_v10_is_advertised():
    assert max(offset_commit.VERSIONS) == 10 and max(offset_fetch.VERSIONS) == 10


def test_commit_and_fetch_by_topic_id(node):
    tid = setup(node)
    r = commit_v10(node, [(tid, [(0, 42), (1, 7)]), (UNKNOWN_ID, [(0, 1), (3, 2)])])
    assert [(t.topic_id, t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        (tid, "", [(0, 0), (1, 0)]), (UNKNOWN_ID, "", [(0, E.UNKNOWN_TOPIC_ID), (3, E.UNKNOWN_TOPIC_ID)])]

    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="g", topics=[
        Fetch.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[0, 1]),
        Fetch.OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[5])])]))
    (g,) = f.groups
    assert g.error_code == 0
    assert [(t.topic_id, t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata,
                                   p.error_code) for p in t.partitions]) for t in g.topics] == [
        (tid, "", [(0, 42, 2, "m42", 0), (1, 7, 2, "m7", 0)]),
        (UNKNOWN_ID, "", [(5, -1, -1, "", E.UNKNOWN_TOPIC_ID)])]

    # every committed partition (null topics) is answered with topic ids too
    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="g", topics=None),
                                                   Fetch.OffsetFetchRequestGroup(group_id="none", topics=None)]))
    assert [(g.group_id, g.error_code, [(t.topic_id, [p.committed_offset for p in t.partitions])
                                        for t in g.topics]) for g in f.groups] == [
        ("g", 0, [(tid, [42, 7])]), ("none", 0, [])]

    # the v10 commit is the same committed offset a by-name (v9) fetch sees, and vice versa
    f = node.call(K.OFFSET_FETCH, 9, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="g", topics=[
        Fetch.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])]))
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in f.groups[0].topics] == [("t", [42])]
    r = node.call(K.OFFSET_COMMIT, 9, Commit(group_id="g", topics=[Commit.OffsetCommitRequestTopic(
        name="t", partitions=[Commit.OffsetCommitRequestPartition(partition_index=1, committed_offset=99)])]))
    assert r.topics[0].partitions[0].error_code == 0
    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="g", topics=[
        Fetch.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[1])])]))
    assert [(t.topic_id, [p.committed_offset for p in t.partitions]) for t in f.groups[0].topics] == [(tid, [99])]


def test_only_unknown_ids_still_reports_group_errors(node):
    setup(node)
    # a group id that is empty is still an invalid group even if no topic resolves
    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="", topics=[
        Fetch.OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[0])])]))
    assert f.groups[0].error_code == E.INVALID_GROUP_ID
    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(group_id="g", topics=[
        Fetch.OffsetFetchRequestTopics(topic_id=UNKNOWN_ID, partition_indexes=[0])])]))
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in f.groups[0].topics] == [
        (UNKNOWN_ID, [E.UNKNOWN_TOPIC_ID])]


def test_consumer_group_member_commits_and_fetches_by_topic_id(node):
    tid = setup(node)
    member = uuid.uuid4().hex
    hb = node.call(K.CONSUMER_GROUP_HEARTBEAT, 1, ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"], topic_partitions=[]))
    assert hb.error_code == 0 and hb.member_epoch > 0
    epoch = hb.member_epoch

    r = commit_v10(node, [(tid, [(0, 5)])], member_id=member, epoch=epoch)
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in r.topics] == [(tid, [0])]
    r = commit_v10(node, [(tid, [(0, 6)])], member_id=member, epoch=epoch + 1)
    assert r.topics[0].partitions[0].error_code == E.STALE_MEMBER_EPOCH
    r = commit_v10(node, [(tid, [(0, 6)])], member_id="someone-else", epoch=epoch)
    assert r.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID

    f = node.call(K.OFFSET_FETCH, 10, Fetch(require_stable=True, groups=[Fetch.OffsetFetchRequestGroup(
        group_id="g", member_id=member, member_epoch=epoch, topics=[
            Fetch.OffsetFetchRequestTopics(topic_id=tid, partition_indexes=[0, 1])])]))
    assert f.groups[0].error_code == 0
    assert [(t.topic_id, [(p.committed_offset, p.error_code) for p in t.partitions]) for t in f.groups[0].topics] == [
        (tid, [(5, 0), (-1, 0)])]
    f = node.call(K.OFFSET_FETCH, 10, Fetch(groups=[Fetch.OffsetFetchRequestGroup(
        group_id="g", member_id=member, member_epoch=epoch + 5, topics=None)]))
    assert f.groups[0].error_code == E.STALE_MEMBER_EPOCH
