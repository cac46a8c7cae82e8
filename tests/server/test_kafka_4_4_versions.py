"""The API versions Kafka 4.4.0 added that kbroker answers: ApiVersions v5 (KIP-1242), TxnOffsetCommit v6
(KIP-1319) and DeleteGroups v3, through the real dispatch of one in-process node."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.api_keys import ApiKey as K
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages import (
    ApiVersionsRequest,
    DeleteGroupsRequest,
    EndTxnRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)
from kbroker.protocol.schema import ZERO_UUID
from tests.server.conftest import Node, start_node, stop_node
from tests.server.test_transaction_apis import GROUP, TID, TOPIC, init, setup

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def txn_node(tmp_path: Path):
    n = start_node(tmp_path, **{"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
                                "transaction.state.log.replication.factor": "1"})
    try:
        yield n
    finally:
        stop_node(n)


def api_versions(node: Node, version: int = 5, **kw) -> tuple[int, dict[int, tuple[int, int]]]:
    r = node.call(K.API_VERSIONS, version, ApiVersionsRequest(client_software_name="tests",
                                                              client_software_version="1.0", **kw))
    return r.error_code, {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}


def test_api_versions_v5_checks_cluster_and_node_id(node: Node) -> None:
    cluster_id = node.broker.controller.cluster_id
    err, keys = api_versions(node)
    assert err == E.NONE
    assert (keys[K.API_VERSIONS], keys[K.TXN_OFFSET_COMMIT], keys[K.DELETE_GROUPS]) == ((0, 5), (0, 6), (0, 3))
    assert api_versions(node, cluster_id=cluster_id, node_id=1) == (E.NONE, keys)
    # the client reached another cluster or another node than it meant: back to its bootstrap servers
    assert api_versions(node, cluster_id="another-cluster", node_id=1) == (E.REBOOTSTRAP_REQUIRED, {})
    assert api_versions(node, cluster_id=cluster_id, node_id=2) == (E.REBOOTSTRAP_REQUIRED, {})
    # both or neither
    assert api_versions(node, cluster_id=cluster_id) == (E.INVALID_REQUEST, {})
    assert api_versions(node, node_id=1) == (E.INVALID_REQUEST, {})
    # v4 has no such fields: the same request is just answered
    assert api_versions(node, version=4, cluster_id="another-cluster", node_id=2) == (E.NONE, keys)


def txn_offset_commit(node: Node, version: int, pid: int, epoch: int, topic_id: bytes, offset: int,
                      generation: int = -1) -> tuple[bytes, int]:
    T = TxnOffsetCommitRequest
    r = node.call(K.TXN_OFFSET_COMMIT, version, T(
        transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch,
        generation_id_or_member_epoch=generation, member_id="", topics=[T.TxnOffsetCommitRequestTopic(
            name=TOPIC, topic_id=topic_id, partitions=[T.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset)])]))
    t = r.topics[0]
    return t.topic_id, t.partitions[0].error_code


def test_txn_offset_commit_v6_uses_topic_ids(txn_node: Node) -> None:
    node = txn_node
    setup(node)
    topic_id = node.broker.controller.image.topics_by_name[TOPIC].topic_id
    err, pid, epoch = init(node)
    assert err == E.NONE
    # an unknown group with a generation: GROUP_ID_NOT_FOUND from v6, ILLEGAL_GENERATION before
    assert txn_offset_commit(node, 6, pid, epoch, topic_id, 3, generation=1) == (topic_id, E.GROUP_ID_NOT_FOUND)
    assert txn_offset_commit(node, 5, pid, epoch, topic_id, 3, generation=1) == (ZERO_UUID, E.ILLEGAL_GENERATION)
    unknown = bytes(range(1, 17))
    assert txn_offset_commit(node, 6, pid, epoch, unknown, 5) == (unknown, E.UNKNOWN_TOPIC_ID)
    assert txn_offset_commit(node, 6, pid, epoch, topic_id, 7) == (topic_id, E.NONE)
    r = node.call(K.END_TXN, 5, EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                              committed=True))
    assert r.error_code == E.NONE
    f = node.call(K.OFFSET_FETCH, 7, OffsetFetchRequest(group_id=GROUP, require_stable=True, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]))
    assert (f.topics[0].partitions[0].error_code, f.topics[0].partitions[0].committed_offset) == (E.NONE, 7)


def test_delete_groups_v3_has_error_messages(txn_node: Node) -> None:
    node = txn_node
    setup(node)
    for version in (2, 3):
        r = node.call(K.DELETE_GROUPS, version, DeleteGroupsRequest(groups_names=["no-such-group"]))
        res = r.results[0]
        # as in Kafka 4.4: a per-group answer of the coordinator carries no message
        assert (res.group_id, res.error_code, res.error_message) == ("no-such-group", E.GROUP_ID_NOT_FOUND, None)
