"""The transaction APIs end to end in one process (real dispatch, coordinator, logs), with a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.api_keys import ApiKey as K
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ListTransactionsRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from kbroker.protocol.records import build_batch, iter_batches
from tests.server.conftest import Node, start_node, stop_node

pytestmark = pytest.mark.timeout(60)

TOPIC = "data"
TID = "tx-a"
GROUP = "g1"


@pytest.fixture
def txn_node(tmp_path: Path):
    n = start_node(tmp_path, **{"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
                                "transaction.state.log.replication.factor": "1"})
    try:
        yield n
    finally:
        stop_node(n)


def setup(node: Node, partitions: int = 2) -> None:
    r = node.call(K.CREATE_TOPICS, 5, CreateTopicsRequest(timeout_ms=5000, topics=[
        CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=partitions, replication_factor=1)]))
    assert r.topics[0].error_code == 0
    for key_type in (0, 1):
        r = node.call(K.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=TID if key_type else GROUP,
                                                                     key_type=key_type))
        assert r.error_code == 0
    node.run(node.broker.group_coordinator.wait_loaded())
    node.run(node.broker.transaction_coordinator.wait_loaded())


def init(node: Node, tid: str = TID, version: int = 4, **kw) -> tuple[int, int, int]:
    r = node.call(K.INIT_PRODUCER_ID, version, InitProducerIdRequest(transactional_id=tid,
                                                                     transaction_timeout_ms=60000, **kw))
    return r.error_code, r.producer_id, r.producer_epoch


def add(node: Node, pid: int, epoch: int, partitions: list[int], tid: str = TID, version: int = 3) -> list[int]:
    r = node.call(K.ADD_PARTITIONS_TO_TXN, version, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC, partitions=partitions)]))
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def produce(node: Node, pid: int, epoch: int, seq: int, partition: int = 0, n: int = 3, tid: str | None = TID,
            txn: bool = True) -> tuple[int, int]:
    batch = build_batch([(b"k", b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=txn)
    r = node.call(K.PRODUCE, 9, ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=batch)])]))
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def end(node: Node, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return node.call(K.END_TXN, version, EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                                       committed=commit)).error_code


def fetch(node: Node, partition: int = 0, isolation: int = 1):
    r = node.call(K.FETCH, 12, FetchRequest(max_wait_ms=0, isolation_level=isolation, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
            partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    return r.responses[0].partitions[0]


def latest(node: Node, partition: int, isolation: int) -> int:
    r = node.call(K.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])]))
    return r.topics[0].partitions[0].offset


def offsets_log_end(node: Node) -> int:
    gc = node.broker.group_coordinator
    return node.broker.replica_manager.get_partition("__consumer_offsets", gc.partition_for(GROUP)).log_end_offset


def txn_offset_commit(node: Node, pid: int, epoch: int, offset: int, version: int = 3) -> int:
    r = node.call(K.TXN_OFFSET_COMMIT, version, TxnOffsetCommitRequest(
        transactional_id=TID, group_id=GROUP, producer_id=pid, producer_epoch=epoch, topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0,
                                                                       committed_offset=offset)])]))
    return r.topics[0].partitions[0].error_code


def offset_fetch(node: Node, require_stable: bool) -> tuple[int, int]:
    r = node.call(K.OFFSET_FETCH, 7, OffsetFetchRequest(group_id=GROUP, require_stable=require_stable, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]))
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def test_transaction_with_offsets_commit_end_to_end(txn_node: Node) -> None:
    node = txn_node
    setup(node)
    err, pid, epoch = init(node)
    assert (err, epoch) == (E.NONE, 0)
    assert add(node, pid, epoch, [0, 1]) == [E.NONE, E.NONE]
    assert produce(node, pid, epoch, 0, partition=0) == (E.NONE, 0)
    assert produce(node, pid, epoch, 0, partition=1) == (E.NONE, 0)
    pd = fetch(node)
    assert (pd.high_watermark, pd.last_stable_offset, bytes(pd.records)) == (3, 0, b"")  # nothing below the LSO
    assert latest(node, 0, 1) == 0 and latest(node, 0, 0) == 3
    r = node.call(K.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid,
                                                                  producer_epoch=epoch, group_id=GROUP))
    assert r.error_code == E.NONE
    assert txn_offset_commit(node, pid, epoch, 42) == E.NONE
    assert offset_fetch(node, require_stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
    assert offset_fetch(node, require_stable=False) == (E.NONE, -1)
    state = node.call(K.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[TID]))
    s = state.transaction_states[0]
    assert (s.transaction_state, s.producer_id, sorted((t.topic, tuple(t.partitions)) for t in s.topics)) == (
        "Ongoing", pid, [("__consumer_offsets", (node.broker.group_coordinator.partition_for(GROUP),)),
                         (TOPIC, (0, 1))])
    producers = node.call(K.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[0])])).topics[0].partitions[0]
    assert [(p.producer_id, p.current_txn_start_offset) for p in producers.active_producers] == [(pid, 0)]
    assert end(node, pid, epoch, True) == E.NONE
    pd = fetch(node)
    assert (pd.high_watermark, pd.last_stable_offset, pd.aborted_transactions) == (4, 4, [])
    data = bytes(pd.records)
    assert [(b.base_offset, b.is_control) for b in iter_batches(data)] == [(0, False), (3, True)]
    assert offset_fetch(node, require_stable=True) == (E.NONE, 42)
    listed = node.call(K.LIST_TRANSACTIONS, 1, ListTransactionsRequest(state_filters=["CompleteCommit", "Bogus"]))
    assert [t.transactional_id for t in listed.transaction_states] == [TID]
    assert listed.unknown_state_filters == ["Bogus"]


def test_abort_fills_aborted_transactions_of_read_committed_fetches(txn_node: Node) -> None:
    node = txn_node
    setup(node)
    _, pid, epoch = init(node)
    add(node, pid, epoch, [0])
    produce(node, pid, epoch, 0)
    assert end(node, pid, epoch, False) == E.NONE
    pd = fetch(node)
    assert (pd.last_stable_offset, [(a.producer_id, a.first_offset) for a in pd.aborted_transactions]) == (4, [(pid, 0)])
    assert fetch(node, isolation=0).aborted_transactions is None


def test_bad_input_writes_nothing(txn_node: Node) -> None:
    node = txn_node
    setup(node)
    _, pid, epoch = init(node)
    # a partition the transaction never added
    assert produce(node, pid, epoch, 0, partition=1)[0] == E.INVALID_TXN_STATE
    assert node.broker.replica_manager.get_partition(TOPIC, 1).log_end_offset == 0
    # a group the transaction never added
    before = offsets_log_end(node)
    assert txn_offset_commit(node, pid, epoch, 5) == E.INVALID_TXN_STATE
    assert offsets_log_end(node) == before
    # unknown producer id / wrong epoch
    assert add(node, pid + 99, epoch, [0]) == [E.INVALID_PRODUCER_ID_MAPPING]
    assert add(node, pid, epoch + 1, [0]) == [E.PRODUCER_FENCED]
    assert add(node, pid, epoch + 1, [0], version=1) == [E.INVALID_PRODUCER_EPOCH]
    assert add(node, pid, epoch, [7]) == [E.UNKNOWN_TOPIC_OR_PARTITION]
    assert end(node, pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
    assert end(node, pid, epoch + 1, True) == E.PRODUCER_FENCED
    assert end(node, pid, epoch + 1, True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert end(node, pid + 99, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert init(node, "")[0] == E.INVALID_REQUEST
    r = node.call(K.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=10**9))
    assert r.error_code == E.INVALID_TRANSACTION_TIMEOUT
    # markers: an older producer epoch or coordinator epoch than the partition has seen is refused
    add(node, pid, epoch, [0])
    produce(node, pid, epoch, 0)
    end(node, pid, epoch, True)

    def marker(producer_epoch: int, coordinator_epoch: int) -> int:
        r = node.call(K.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                name=TOPIC, partition_indexes=[0])])]))
        return r.markers[0].topics[0].partitions[0].error_code

    leo = node.broker.replica_manager.get_partition(TOPIC, 0).log_end_offset
    assert marker(epoch, -5) == E.TRANSACTION_COORDINATOR_FENCED
    node.broker.replica_manager.get_partition(TOPIC, 0).log.producer_state.producers[pid].producer_epoch = 3
    assert marker(epoch, 0) == E.INVALID_PRODUCER_EPOCH
    assert node.broker.replica_manager.get_partition(TOPIC, 0).log_end_offset == leo


def test_fencing_and_restart_keep_the_transaction_state(tmp_path: Path) -> None:
    props = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
    node = start_node(tmp_path, **props)
    try:
        setup(node)
        _, pid, epoch = init(node)
        add(node, pid, epoch, [0])
        produce(node, pid, epoch, 0)
        # a second producer: CONCURRENT_TRANSACTIONS while the first one's transaction is aborted, then epoch 2
        assert init(node)[0] == E.CONCURRENT_TRANSACTIONS
        assert init(node) == (E.NONE, pid, 2)
        assert produce(node, pid, epoch, 3)[0] == E.INVALID_PRODUCER_EPOCH  # the zombie
        add(node, pid, 2, [1])
        assert produce(node, pid, 2, 0, partition=1) == (E.NONE, 0)
    finally:
        stop_node(node)
    node = start_node(tmp_path, **props)
    try:
        node.run(node.broker.transaction_coordinator.wait_loaded())
        node.run(node.broker.group_coordinator.wait_loaded())
        pd = fetch(node, partition=1)
        assert (pd.high_watermark, pd.last_stable_offset) == (3, 0)  # still open after the restart
        assert [(a.producer_id, a.first_offset) for a in fetch(node, partition=0).aborted_transactions] == [(pid, 0)]
        assert end(node, pid, 2, True) == E.NONE
        assert fetch(node, partition=1).last_stable_offset == 4
    finally:
        stop_node(node)


def test_transactional_offsets_are_rebuilt_from_markers_at_load(tmp_path: Path) -> None:
    props = {"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}

    def txn_commit(node: Node, epoch: int, offset: int, commit: bool | None) -> None:
        r = node.call(K.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid,
                                                                      producer_epoch=epoch, group_id=GROUP))
        assert r.error_code == E.NONE
        assert txn_offset_commit(node, pid, epoch, offset) == E.NONE
        if commit is not None:
            assert end(node, pid, epoch, commit) == E.NONE

    node = start_node(tmp_path, **props)
    try:
        setup(node)
        _, pid, _ = init(node)
        txn_commit(node, 0, 10, True)
        txn_commit(node, 0, 20, False)
        txn_commit(node, 0, 30, None)
        assert offset_fetch(node, require_stable=False) == (E.NONE, 10)
    finally:
        stop_node(node)
    node = start_node(tmp_path, **props)
    try:
        node.run(node.broker.transaction_coordinator.wait_loaded())
        node.run(node.broker.group_coordinator.wait_loaded())
        assert offset_fetch(node, require_stable=False) == (E.NONE, 10)
        assert offset_fetch(node, require_stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        assert end(node, pid, 0, True) == E.NONE
        assert offset_fetch(node, require_stable=True) == (E.NONE, 30)
    finally:
        stop_node(node)


def test_transactions_version_2_markers_and_implicit_adds(txn_node: Node) -> None:
    """Produce v12 and TxnOffsetCommit v5 add their partitions; EndTxn v5 answers the bumped epoch, which the
    COMMIT markers carry into the data and offsets partitions; a version 2 marker whose epoch is not above the
    producer's (a stale marker for the open transaction) is refused; the next transaction needs the new epoch."""
    node = txn_node
    setup(node)
    err, pid, epoch = init(node)

    def produce12(e: int, seq: int) -> int:
        batch = build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=e, base_sequence=seq,
                            is_transactional=True)
        r = node.call(K.PRODUCE, 12, ProduceRequest(transactional_id=TID, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
        return r.responses[0].partition_responses[0].error_code

    def marker_v2(e: int) -> int:
        r = node.call(K.WRITE_TXN_MARKERS, 2, WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=e, transaction_result=True, coordinator_epoch=0, transaction_version=2,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]))
        return r.markers[0].topics[0].partitions[0].error_code

    assert produce12(epoch, 0) == E.NONE  # no AddPartitionsToTxn
    assert txn_offset_commit(node, pid, epoch, 7, version=5) == E.NONE  # no AddOffsetsToTxn
    d = node.call(K.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[TID]))
    state = d.transaction_states[0]
    assert state.transaction_state == "Ongoing"
    assert {(t.topic, tuple(t.partitions)) for t in state.topics} == {
        (TOPIC, (0,)), ("__consumer_offsets", (node.broker.group_coordinator.partition_for(GROUP),))}
    assert marker_v2(epoch) == E.INVALID_PRODUCER_EPOCH  # not above the open transaction's epoch
    r = node.call(K.END_TXN, 5, EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=epoch,
                                              committed=True))
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, pid, epoch + 1)
    assert offset_fetch(node, require_stable=True) == (E.NONE, 7)
    producers = node.call(K.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name=TOPIC, partition_indexes=[0])])).topics[0].partitions[0]
    assert [(p.producer_epoch, p.current_txn_start_offset) for p in producers.active_producers] == [(epoch + 1, -1)]
    assert marker_v2(epoch + 1) == E.NONE  # a retried marker of the ended transaction
    assert produce12(epoch, 1) == E.INVALID_PRODUCER_EPOCH  # late
    assert txn_offset_commit(node, pid, epoch, 9, version=5) == E.INVALID_PRODUCER_EPOCH
    assert produce12(epoch + 1, 0) == E.NONE
