"""Transaction markers on a 3-node cluster: a transaction over 30 partitions led by all three brokers completes
promptly after EndTxn, so the producer's next transaction can start at once.

The coordinator sends one WriteTxnMarkers per destination broker carrying every marker pending for it, all at
once, and writes CompleteCommit when the last broker answers (no polling per partition). Before, each partition
led by another broker took about 200 ms, so a commit over 30 partitions stayed in PrepareCommit for seconds and
the next transaction's AddPartitionsToTxn got CONCURRENT_TRANSACTIONS meanwhile.

* raw requests, transactions version 2 (Produce v12 adds the partitions, EndTxn v5 bumps the epoch): the time
  from the EndTxn answer to DescribeTransactions showing CompleteCommit, over several rounds;
* the abort of an empty transaction right after a commit (EndTxn v5 with the bumped epoch while the commit's
  markers may still be written) is CONCURRENT_TRANSACTIONS until the commit completes, then NONE with the epoch
  bumped again: never PRODUCER_FENCED (KAFKA-18464);
* real clients (the Java client, transactions version 2; confluent-kafka): rounds of begin, one record per
  partition, commit, all delivered, within a bound the per-partition polling could not meet.

The bounds are lax for loaded CI machines; ``bench/transaction_markers.py`` measures the latencies.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import pytest

from compat_tests.test_idempotence import RawClient
from compat_tests import test_transactions
from compat_tests.test_transactions import run_driver
from kbroker.protocol.errors import ErrorCode as E
from kbroker.protocol.messages import (
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from kbroker.protocol.records import build_batch
from kbroker.testing.cluster import KbrokerCluster

pytestmark = [pytest.mark.timeout(300)]

txn_driver = test_transactions.txn_driver  # the session fixture that compiles compat_tests/java/TxnDriver.java

PARTITIONS = 30


class ClusterTxn:
    """A transactions-version-2 producer made of raw requests on a cluster: Produce v12 to each partition's
    leader (the partition joins the transaction implicitly), EndTxn v5 and DescribeTransactions to the
    coordinator. Every call is bounded in time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
        self.topic = topic
        self.tid = f"markers-{uuid.uuid4().hex[:8]}"
        self.timeout = timeout
        self._clients: dict[tuple[str, int], RawClient] = {}
        boot = RawClient(bootstrap)
        deadline = time.monotonic() + timeout
        try:
            while True:  # until the bootstrap broker's metadata has caught up with the topic
                md = boot.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
                self.leaders = {p.partition_index: p.leader_id for p in md.topics[0].partitions}
                if len(self.leaders) == partitions and all(x >= 0 for x in self.leaders.values()):
                    break
                assert time.monotonic() < deadline, f"no leaders for {topic} after {timeout} s: {self.leaders}"
                time.sleep(0.1)
        finally:
            boot.close()
        self.brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        r = self._retry(lambda: self.node(next(iter(self.brokers))).call(
            FindCoordinatorRequest(key_type=1, coordinator_keys=[self.tid]), 4).coordinators[0])
        self.coordinator = self.node(r.node_id)
        r = self._retry(lambda: self.coordinator.call(InitProducerIdRequest(
            transactional_id=self.tid, transaction_timeout_ms=60_000), 5))
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def node(self, node_id: int) -> RawClient:
        addr = self.brokers[node_id]
        if addr not in self._clients:
            self._clients[addr] = RawClient(f"{addr[0]}:{addr[1]}")
        return self._clients[addr]

    def _retry(self, call: Any, retriable: tuple[int, ...] = (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
                                                              E.COORDINATOR_LOAD_IN_PROGRESS,
                                                              E.CONCURRENT_TRANSACTIONS)) -> Any:
        deadline = time.monotonic() + self.timeout
        while True:
            r = call()
            if r.error_code not in retriable or time.monotonic() > deadline:
                assert r.error_code == E.NONE, E(r.error_code).name
                return r
            time.sleep(0.02)

    def produce_all(self, value: bytes) -> int:
        """One record to every partition, each leader's partitions in one Produce v12; partitions answered
        CONCURRENT_TRANSACTIONS (the last transaction still completing) or a retriable error are sent again.
        Returns how many partitions were answered with such errors."""
        todo = set(self.leaders)
        retries = 0
        deadline = time.monotonic() + self.timeout
        while todo:
            assert time.monotonic() < deadline, f"partitions {sorted(todo)} not accepted in {self.timeout} s"
            by_leader: dict[int, list[int]] = {}
            for p in sorted(todo):
                by_leader.setdefault(self.leaders[p], []).append(p)
            for leader, ps in by_leader.items():
                req = ProduceRequest(transactional_id=self.tid, acks=-1, timeout_ms=10_000, topic_data=[
                    ProduceRequest.TopicProduceData(name=self.topic, partition_data=[
                        ProduceRequest.PartitionProduceData(index=p, records=build_batch(
                            [(b"k", value)], producer_id=self.pid, producer_epoch=self.epoch, base_sequence=0,
                            is_transactional=True)) for p in ps])])
                for pr in self.node(leader).call(req, 12).responses[0].partition_responses:
                    if pr.error_code == E.NONE:
                        todo.discard(pr.index)
                    elif pr.error_code in (E.CONCURRENT_TRANSACTIONS, E.NOT_ENOUGH_REPLICAS,
                                           E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION):
                        # the last transaction still completing; a new topic's leader not yet serving it
                        retries += 1
                    else:
                        raise AssertionError(f"partition {pr.index}: {E(pr.error_code).name}")
            if todo:
                time.sleep(0.02)
        return retries

    def end(self, commit: bool) -> tuple[int, int]:
        """EndTxn v5 with the current epoch: (error, retries while CONCURRENT_TRANSACTIONS). On NONE the producer
        continues with the epoch answered."""
        retries = 0
        deadline = time.monotonic() + self.timeout
        while True:
            r = self.coordinator.call(EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                                    producer_epoch=self.epoch, committed=commit), 5)
            if r.error_code != E.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
                break
            retries += 1
            time.sleep(0.01)
        if r.error_code == E.NONE:
            self.pid, self.epoch = r.producer_id, r.producer_epoch
        return r.error_code, retries

    def state(self) -> str:
        return self.coordinator.call(DescribeTransactionsRequest(transactional_ids=[self.tid]),
                                     0).transaction_states[0].transaction_state

    def wait_state(self, state: str, timeout: float | None = None) -> float:
        """Seconds until DescribeTransactions shows ``state`` (polled every 5 ms); fails after ``timeout``."""
        t0 = time.monotonic()
        deadline = t0 + (timeout or self.timeout)
        while (now := self.state()) != state:
            assert time.monotonic() < deadline, f"still {now}, not {state}, after {timeout or self.timeout} s"
            time.sleep(0.005)
        return time.monotonic() - t0

    def close(self) -> None:
        for c in self._clients.values():
            c.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KbrokerCluster(tmp_path_factory.mktemp("txn-markers"), nodes=3)
    with c:
        yield c


def create_spread_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    """A topic with replication factor 3 whose partition leaders are spread over the 3 brokers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from compat_tests.clients import wait_topic_ready

    name = f"markers-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=30)[name].result(30)
    wait_topic_ready(bootstrap, name, partitions, 30)
    return name


@pytest.mark.kafka_reference
def test_commit_over_30_partitions_on_3_brokers_completes_promptly(cluster) -> None:
    topic = create_spread_topic(cluster.bootstrap)
    t = ClusterTxn(cluster.bootstrap, topic, PARTITIONS)
    try:
        assert len(set(t.leaders.values())) == 3  # markers go to every broker, the coordinator's too
        to_complete = []
        for i in range(8):
            t.produce_all(f"r{i}".encode())
            epoch = t.epoch
            assert t.end(commit=True) == (E.NONE, 0)
            assert t.epoch == epoch + 1  # transactions version 2: the commit bumped the epoch
            to_complete.append(t.wait_state("CompleteCommit", timeout=20))
        # per-partition polling kept each commit in PrepareCommit for ~200 ms per remote partition (~4 s here)
        assert statistics.median(to_complete) < 1.0, to_complete
    finally:
        t.close()


@pytest.mark.kafka_reference
def test_abort_of_an_empty_transaction_right_after_a_commit_is_not_fenced(cluster) -> None:
    topic = create_spread_topic(cluster.bootstrap)
    t = ClusterTxn(cluster.bootstrap, topic, PARTITIONS)
    try:
        for i in range(10):
            t.produce_all(f"r{i}".encode())
            assert t.end(commit=True)[0] == E.NONE
            epoch = t.epoch
            # at once, with the epoch the commit answered: waits (CONCURRENT_TRANSACTIONS) while the commit's
            # markers are written, then aborts the empty transaction, bumping the epoch once more
            error, _ = t.end(commit=False)
            assert error == E.NONE, f"round {i}: {E(error).name}"
            assert t.epoch == epoch + 1
            t.wait_state("CompleteAbort", timeout=20)
    finally:
        t.close()


@pytest.mark.kafka_reference
def test_java_client_rounds_of_30_partition_transactions(cluster, txn_driver) -> None:
    topic = create_spread_topic(cluster.bootstrap)
    rounds = 15
    t0 = time.monotonic()
    events = run_driver(txn_driver, "produce", "--bootstrap", cluster.bootstrap, "--topic", topic,
                        "--txn-id", f"markers-java-{uuid.uuid4().hex[:8]}", "--transactions", str(rounds),
                        "--per-txn", str(PARTITIONS), "--partitions", str(PARTITIONS), timeout=240)
    elapsed = time.monotonic() - t0
    txns = [e for e in events if e["event"] == "txn"]
    assert [e["result"] for e in txns] == ["commit"] * rounds
    assert all(len({p for p, _ in e["offsets"]}) == PARTITIONS for e in txns)
    # JVM start included; each commit used to hold the next transaction back by ~4 s (60 s for 15 rounds)
    assert elapsed < 45, f"{rounds} transactions took {elapsed:.1f} s"


@pytest.mark.kafka_reference
def test_confluent_kafka_rounds_of_30_partition_transactions(cluster) -> None:
    from confluent_kafka import Producer

    topic = create_spread_topic(cluster.bootstrap)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"markers-ck-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5})
    errors: list[Any] = []
    p.init_transactions(30)
    rounds = 15
    t0 = time.monotonic()
    for i in range(rounds):
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.produce(topic, f"r{i}".encode(), partition=part,
                      on_delivery=lambda err, _m: err is not None and errors.append(err))
        p.commit_transaction(30)
    elapsed = time.monotonic() - t0
    assert not errors, errors[:3]
    assert elapsed < 40, f"{rounds} transactions took {elapsed:.1f} s"
