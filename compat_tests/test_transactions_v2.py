"""Transactions version 2 (KIP-890 part 2) with raw requests over TCP against a kbroker formatted at
``transaction.version`` 2, the default of a new cluster (as Kafka 4.3 formats its latest release).

The case the epoch bump per transaction exists for: a produce request of a transaction that is delayed on the
network and arrives after the producer committed that transaction. With transactions version 1 the producer
keeps its epoch across transactions, so the late batch is accepted: it joins the producer's next transaction
on that partition (``test_v1_late_produce_joins_the_next_transaction`` shows it on this same broker, with the
version 1 requests). With version 2 the epoch was bumped by the commit (EndTxn v5), the partition's
producer state and the coordinator carry the new epoch, and the late batch is refused with
INVALID_PRODUCER_EPOCH: it neither starts a transaction (Produce v12 would otherwise add the partition
implicitly, a hanging transaction) nor joins the next one.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from compat_tests.clients import create_topic
from compat_tests.test_idempotence import RawClient
from compat_tests import test_transactions
from compat_tests.test_transactions import consume_all, describe_transaction, run_driver, unique
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kbroker.protocol.records import build_batch, iter_batches

pytestmark = [pytest.mark.timeout(120)]

txn_driver = test_transactions.txn_driver  # the session fixture that compiles compat_tests/java/TxnDriver.java


def retry(call, ok=lambda r: r.error_code == E.NONE, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = call()
        if ok(r) or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


class Txn:
    """A transactional producer made of raw requests (the coordinator is the single broker)."""

    def __init__(self, client: RawClient, topic: str) -> None:
        self.c = client
        self.topic = topic
        self.tid = f"tv2-{uuid.uuid4().hex[:8]}"
        r = retry(lambda: self.c.call(FindCoordinatorRequest(key=self.tid, key_type=1), 3))
        assert r.error_code == E.NONE
        r = retry(lambda: self.c.call(InitProducerIdRequest(transactional_id=self.tid,
                                                            transaction_timeout_ms=60_000), 5))
        assert r.error_code == E.NONE, E(r.error_code).name
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def produce(self, epoch: int, seq: int, value: bytes, version: int = 12) -> int:
        batch = build_batch([(b"k", value)], producer_id=self.pid, producer_epoch=epoch, base_sequence=seq,
                            is_transactional=True)
        req = ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=self.topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        return self.c.call(req, version).responses[0].partition_responses[0].error_code

    def add_partition(self, epoch: int) -> int:
        r = self.c.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=self.topic, partitions=[0])]), 3)
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    def end(self, epoch: int, commit: bool, version: int = 5) -> Any:
        return self.c.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid, producer_epoch=epoch,
                                         committed=commit), version)

    def describe(self) -> Any:
        return self.c.call(DescribeTransactionsRequest(transactional_ids=[self.tid]), 0).transaction_states[0]


def read_committed(client: RawClient, topic: str) -> tuple[list[bytes], int, int]:
    """(committed values, high watermark, last stable offset) of partition 0."""
    r = client.call(FetchRequest(max_wait_ms=0, isolation_level=1, topics=[FetchRequest.FetchTopic(
        topic=topic, partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=1 << 20)])]), 12)
    p = r.responses[0].partitions[0]
    aborted = {a.producer_id for a in p.aborted_transactions or []}
    values = [rec.value for b in iter_batches(bytes(p.records or b""))
              if not b.is_control and b.producer_id not in aborted for rec in b.records()]
    return values, p.high_watermark, p.last_stable_offset


def producer_epoch_in_partition(client: RawClient, topic: str, pid: int) -> int:
    r = client.call(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[0])]), 0)
    return {p.producer_id: p.producer_epoch for p in r.topics[0].partitions[0].active_producers}[pid]


@pytest.fixture
def raw(bootstrap_servers: str):
    c = RawClient(bootstrap_servers)
    yield c
    c.close()


def test_transaction_version_2_is_finalized_and_advertised(raw: RawClient) -> None:
    r = raw.call(ApiVersionsRequest(client_software_name="kbroker-compat", client_software_version="1"), 4)
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    supported = {f.name: (f.min_version, f.max_version) for f in r.supported_features}
    assert finalized.get("transaction.version") == 2 and supported["transaction.version"] == (0, 2)
    versions = {k.api_key: k.max_version for k in r.api_keys}
    assert versions[26] >= 5 and versions[28] >= 5 and versions[0] >= 12  # EndTxn, TxnOffsetCommit, Produce


def wait_state(t: "Txn", state: str, timeout: float = 30) -> None:
    """Poll DescribeTransactions until the transaction is in ``state`` (AssertionError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = t.describe().transaction_state
        if seen == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"transaction still {seen}, not {state}, after {timeout} s")


@pytest.mark.kafka_reference
def test_v2_late_produce_after_commit_is_fenced(raw: RawClient, topic_factory) -> None:
    topic = topic_factory(partitions=1)
    t = Txn(raw, topic)
    e0 = t.epoch
    # transaction 1: Produce v12 adds the partition implicitly (no AddPartitionsToTxn)
    assert t.produce(e0, 0, b"t1-a") == E.NONE
    d = t.describe()
    assert (d.transaction_state, [(x.topic, x.partitions) for x in d.topics]) == ("Ongoing", [(topic, [0])])
    r = t.end(e0, commit=True)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, t.pid, e0 + 1)  # the bumped epoch
    # EndTxn is answered once PrepareCommit is durable; CompleteCommit follows once the markers are written
    wait_state(t, "CompleteCommit")
    assert producer_epoch_in_partition(raw, topic, t.pid) == e0 + 1  # the COMMIT marker carried it
    # a batch of transaction 1 that was delayed arrives now: refused, and no transaction is opened by it
    assert t.produce(e0, 1, b"t1-late") == E.INVALID_PRODUCER_EPOCH
    assert t.describe().transaction_state == "CompleteCommit"
    values, hw, lso = read_committed(raw, topic)
    assert values == [b"t1-a"] and lso == hw
    # transaction 2 with the new epoch; the late batch arrives again while it is open: still refused
    assert t.produce(e0 + 1, 0, b"t2-a") == E.NONE
    assert t.produce(e0, 1, b"t1-late") == E.INVALID_PRODUCER_EPOCH
    r = t.end(e0 + 1, commit=True)
    assert (r.error_code, r.producer_epoch) == (E.NONE, e0 + 2)
    # a retry of that EndTxn (the old epoch): CONCURRENT_TRANSACTIONS while the markers are still being written
    # (PrepareCommit, retriable), then answered as the commit that completed
    wait_state(t, "CompleteCommit")
    assert t.end(e0 + 1, commit=True).error_code == E.NONE
    values, hw, lso = read_committed(raw, topic)
    assert values == [b"t1-a", b"t2-a"] and lso == hw  # nothing late, nothing hanging


def test_v1_late_produce_joins_the_next_transaction(raw: RawClient, topic_factory) -> None:
    """The same timeline with the version 1 requests (AddPartitionsToTxn v3, Produce v11, EndTxn v4), as
    librdkafka sends them: the epoch is not bumped, so the late batch of transaction 1 is accepted into
    transaction 2 once that one added the partition: the hazard version 2 closes."""
    topic = topic_factory(partitions=1)
    t = Txn(raw, topic)
    e = t.epoch
    assert t.add_partition(e) == E.NONE
    assert t.produce(e, 0, b"t1-a", version=11) == E.NONE
    r = t.end(e, commit=True, version=4)
    assert r.error_code == E.NONE
    wait_state(t, "CompleteCommit")  # until then AddPartitionsToTxn is CONCURRENT_TRANSACTIONS
    assert producer_epoch_in_partition(raw, topic, t.pid) == e  # no bump
    assert t.add_partition(e) == E.NONE  # transaction 2
    assert t.produce(e, 1, b"t1-late", version=11) == E.NONE  # accepted into transaction 2
    assert t.end(e, commit=True, version=4).error_code == E.NONE
    wait_state(t, "CompleteCommit")  # the markers written: the last stable offset moved past transaction 2
    values, _, _ = read_committed(raw, topic)
    assert values == [b"t1-a", b"t1-late"]


# ============================================================================ the Java 4.3 client and librdkafka


def java_transactions(driver: list[str], bootstrap: str, topic: str, txn_id: str, n: int) -> list[dict]:
    events = run_driver(driver, "produce", "--bootstrap", bootstrap, "--topic", topic, "--txn-id", txn_id,
                        "--transactions", str(n), "--per-txn", "4", "--abort-every", "3", "--partitions", "2")
    return [e for e in events if e.get("event") == "txn"]


def test_java_client_uses_transactions_v2(txn_driver, bootstrap_servers) -> None:
    """kafka-clients 4.3 reads the finalized transaction.version 2 from ApiVersions and ends every transaction
    with EndTxn v5: the epoch grows by one per transaction (commits and aborts), the markers carry it, and the
    committed data is exactly the committed transactions'."""
    topic, txn_id = unique("tv2-java"), unique("tv2-java-txn")
    create_topic(bootstrap_servers, topic, 2)
    txns = java_transactions(txn_driver, bootstrap_servers, topic, txn_id, 6)
    assert [t["result"] for t in txns] == ["commit", "commit", "abort"] * 2
    state = describe_transaction(bootstrap_servers, txn_id)
    # InitProducerId gave epoch 0; six EndTxn v5 bumped it six times (the last one an abort)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 6)
    with contextlib.closing(RawClient(bootstrap_servers)) as raw:
        assert producer_epoch_in_partition(raw, topic, state.producer_id) == 6
    values = [v for _, _, v in consume_all(bootstrap_servers, topic, 2, "read_committed", expect=16)]
    assert len(values) == 16 and len(set(values)) == 16


def test_java_client_on_a_transaction_version_0_cluster(txn_driver, kbroker_factory) -> None:
    """The same program on a cluster formatted with --feature transaction.version=0: the client falls back to
    the classic protocol (AddPartitionsToTxn, EndTxn v4) and the epoch stays 0."""
    broker = kbroker_factory({"offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"},
                             start=False)
    cfg = broker.write_config()
    out = subprocess.run([sys.executable, "-m", "kbroker.cli.storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg",
                          "-c", str(cfg), "--feature", "transaction.version=0"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    broker.start()
    with contextlib.closing(RawClient(broker.bootstrap)) as raw:
        r = raw.call(ApiVersionsRequest(client_software_name="kbroker-compat", client_software_version="1"), 4)
        assert "transaction.version" not in {f.name for f in r.finalized_features}
    topic, txn_id = unique("tv0-java"), unique("tv0-java-txn")
    create_topic(broker.bootstrap, topic, 2)
    txns = java_transactions(txn_driver, broker.bootstrap, topic, txn_id, 3)
    assert [t["result"] for t in txns] == ["commit", "commit", "abort"]
    state = describe_transaction(broker.bootstrap, txn_id)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 0)
    assert len(consume_all(broker.bootstrap, topic, 2, "read_committed", expect=8)) == 8


def test_confluent_kafka_transactions_on_a_v2_cluster(bootstrap_servers) -> None:
    """librdkafka speaks transactions version 1 (AddPartitionsToTxn, EndTxn below v5) whatever the finalized
    level, as against Kafka: its transactions commit and abort, and its epoch does not move."""
    from confluent_kafka import Producer

    topic, txn_id = unique("tv2-rdkafka"), unique("tv2-rdkafka-txn")
    create_topic(bootstrap_servers, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(30)
    for i in range(4):
        p.begin_transaction()
        for j in range(5):
            p.produce(topic, key=f"{j}", value=f"rd-{i}-{j}", partition=j % 2)
        if i == 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    # commit_transaction returns once PrepareCommit is durable; CompleteCommit follows the markers
    deadline = time.monotonic() + 30
    state = describe_transaction(bootstrap_servers, txn_id)
    while state.transaction_state == "PrepareCommit" and time.monotonic() < deadline:
        time.sleep(0.1)
        state = describe_transaction(bootstrap_servers, txn_id)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", 0)
    values = [v for _, _, v in consume_all(bootstrap_servers, topic, 2, "read_committed", expect=15)]
    assert sorted(values) == sorted(f"rd-{i}-{j}" for i in (0, 1, 3) for j in range(5))
