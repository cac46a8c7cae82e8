"""A cluster with separate roles: three controllers and three brokers as six processes (issue 9).

``KbrokerCluster(root, nodes=3, brokers=3)``: nodes 1-3 run ``process.roles=controller`` (a controller listener
and nothing else), nodes 4-6 ``process.roles=broker`` (they follow the metadata log as observers of the quorum
and register with its active controller). Checked with confluent-kafka and the Java client (kafka-clients
4.3.0): only the brokers are in Metadata and DescribeCluster; DescribeQuorum through a broker names the three
voters and the three brokers as observers; topics with replication factor 3 get three distinct brokers per
partition with leaders spread; RF 4 is INVALID_REPLICATION_FACTOR; a consumer group commits through the
coordinator that leads its ``__consumer_offsets`` partition; kill -9 of the active controller elects another and
CreateTopics works again through a broker; a killed broker is fenced and leaves Metadata, and
``kbroker-cluster unregister`` removes it for good (it registers again when restarted); after every process is
restarted all metadata is there.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing.cluster import KbrokerCluster, metadata_brokers, quorum_leader, wait_until

pytestmark = pytest.mark.timeout(400)

FAST_FENCING = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture
def cluster(tmp_path):
    c = KbrokerCluster(tmp_path, nodes=3, brokers=3, overrides=FAST_FENCING)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def describe(admin: AdminClient, topic: str):
    return admin.list_topics(topic, timeout=10).topics[topic]


def create(admin: AdminClient, name: str, partitions: int, rf: int) -> None:
    admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=30)[name].result(60)


def test_controllers_and_brokers_in_separate_processes(cluster, java_driver):
    assert cluster.controller_ids == [1, 2, 3] and cluster.broker_ids == [4, 5, 6]
    for b in cluster.broker_ids:
        assert metadata_brokers(cluster.host, cluster.nodes[b].port) == {4, 5, 6}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    assert set(md.brokers) == {4, 5, 6}
    assert md.controller_id in {4, 5, 6}  # a broker names itself; it forwards to the active controller

    bootstrap = cluster.nodes[5].bootstrap
    cl = java_driver.one(java_driver.run(["admin", "describe-cluster", "--bootstrap", bootstrap]), "cluster")
    assert {n["id"] for n in cl["nodes"]} == {4, 5, 6}
    assert cl["cluster_id"] == cluster.cluster_id

    # DescribeQuorum through a broker reaches the leader: voters are the controllers, the brokers observe
    q = wait_until(lambda: (lambda e: e if {o["id"] for o in e["observers"]} == {4, 5, 6} else None)(
        java_driver.one(java_driver.run(["admin", "describe-quorum", "--bootstrap", bootstrap]), "quorum")),
        30, "three observers in DescribeQuorum")
    assert q["leader"] in (1, 2, 3) and q["leader"] == cluster.controller_id()
    assert {v["id"] for v in q["voters"]} == {1, 2, 3}
    assert all(v["log_end_offset"] > 0 for v in q["voters"])

    # replication factor 3: three distinct brokers per partition, every broker leads two of six
    create(admin, "rf3", 6, 3)
    t = wait_until(lambda: (lambda d: d if len(d.partitions) == 6 else None)(describe(admin, "rf3")), 30, "rf3")
    for p in t.partitions.values():
        assert sorted(p.replicas) == [4, 5, 6] and p.leader == p.replicas[0] and sorted(p.isrs) == [4, 5, 6]
    leaders = [p.leader for p in t.partitions.values()]
    assert sorted(leaders.count(b) for b in (4, 5, 6)) == [2, 2, 2]
    made = java_driver.one(java_driver.run(["admin", "create-topic", "--bootstrap", bootstrap, "--topic", "java-rf3",
                                            "--partitions", "3", "--replication-factor", "3"]), "created")
    assert made["replication_factor"] == 3
    with pytest.raises(KafkaException) as err:
        create(admin, "rf4", 1, 4)
    assert err.value.args[0].name() == "INVALID_REPLICATION_FACTOR"

    # a consumer group on brokers only: records produced to partitions led by every broker, consumed and committed
    create(admin, "events", 3, 1)
    wait_until(lambda: all(p.leader in (4, 5, 6) for p in describe(admin, "events").partitions.values())
               and len(describe(admin, "events").partitions) == 3, 30, "events")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1"})
    for i in range(300):
        producer.produce("events", key=str(i).encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["events"])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < 300 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            seen.add(m.value())
    assert len(seen) == 300
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("events", p) for p in range(3)], timeout=20)
    consumer.close()
    assert sum(tp.offset for tp in committed) == 300
    offsets = describe(admin, "__consumer_offsets")
    assert {p.leader for p in offsets.partitions.values()} <= {4, 5, 6}


def test_failures_of_controllers_and_brokers(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, "before", 3, 1)

    # kill -9 the active controller: another controller takes over; CreateTopics through a broker works again
    leader = cluster.controller_id()
    cluster.kill(leader)
    new_leader = cluster.controller_id(timeout=30, exclude=leader)
    assert new_leader in (1, 2, 3) and new_leader != leader
    wait_until(lambda: _try_create(admin, "after-failover"), 60, "CreateTopics after the failover")

    # kill -9 a broker: fenced after its session (3 s), it leaves every other broker's Metadata
    cluster.kill(6)
    for b in (4, 5):
        wait_until(lambda b=b: metadata_brokers(cluster.host, cluster.nodes[b].port) == {4, 5}, 30,
                   f"broker 6 fenced on broker {b}")
    for p in describe(admin, "before").partitions.values():
        assert p.leader in (4, 5) or p.leader == -1  # no partition led by the dead broker

    # kbroker-cluster (kafka-cluster.sh): the cluster id, and the dead broker unregistered for good
    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kbroker.cli.cluster", *args], capture_output=True, text=True,
                              timeout=60)

    cid = tool("cluster-id", "--bootstrap-server", cluster.nodes[4].bootstrap)
    assert cid.returncode == 0 and cid.stdout.strip() == f"Cluster ID: {cluster.cluster_id}", cid
    gone = tool("unregister", "--bootstrap-server", cluster.nodes[5].bootstrap, "--id", "6")
    assert gone.returncode == 0 and gone.stdout.strip() == "Broker 6 is no longer registered.", gone
    unknown = tool("unregister", "--bootstrap-server", cluster.nodes[5].bootstrap, "--id", "42")
    assert unknown.returncode != 0 and "BROKER_ID_NOT_REGISTERED" in unknown.stderr, unknown
    again = tool("unregister", "--bootstrap-server", cluster.nodes[4].bootstrap, "--id", "6")
    assert again.returncode != 0 and "BROKER_ID_NOT_REGISTERED" in again.stderr, again  # the registration is gone

    # restart every process: all metadata is there, all brokers registered
    cluster.restart(leader)
    cluster.nodes[6].start()
    cluster.wait_registered()
    cluster.stop()
    cluster.start()
    assert quorum_leader(cluster.host, cluster.nodes[4].port) in (1, 2, 3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert {"before", "after-failover"} <= set(topics)
    assert len(topics["before"].partitions) == 3


def _try_create(admin: AdminClient, name: str) -> bool:
    try:
        create(admin, name, 2, 1)
        return True
    except KafkaException as exc:
        if exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
            return True
        return False


def test_bad_input_to_the_quorum_gets_kafkas_errors(cluster):
    """Requests from another cluster, from a node that is not a voter, with a stale epoch, and a second broker
    with a live broker's node.id: Kafka's error codes, and nothing committed or changed by them."""
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import (BeginQuorumEpochRequest, BeginQuorumEpochResponse, BrokerRegistrationRequest,
                                           BrokerRegistrationResponse, VoteRequest, VoteResponse)
    from kbroker.testing.cluster import ask

    leader = cluster.controller_id()
    host, port = cluster.host, cluster.controller_ports[leader]
    follower = next(i for i in cluster.controller_ids if i != leader)
    epoch_before = _quorum_epoch(cluster)

    def vote(cluster_id: str, voter: int, epoch: int) -> VoteResponse:
        req = VoteRequest(cluster_id=cluster_id, voter_id=leader, topics=[VoteRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[VoteRequest.PartitionData(
                partition_index=0, replica_epoch=epoch, replica_id=voter, last_offset_epoch=epoch,
                last_offset=10**9)])])
        return ask(host, port, ApiKey.VOTE, 0, req, VoteResponse)

    assert vote("AAAAAAAAAAAAAAAAAAAAAA", follower, epoch_before + 5).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    # a node that is not a voter asks for a vote in a much later epoch: refused, the leader stays
    refused = vote(cluster.cluster_id, 99, epoch_before + 5).topics[0].partitions[0]
    assert not refused.vote_granted

    # BeginQuorumEpoch for an epoch that is over: FENCED_LEADER_EPOCH
    stale = BeginQuorumEpochRequest(cluster_id=cluster.cluster_id, voter_id=follower, topics=[
        BeginQuorumEpochRequest.TopicData(topic_name="__cluster_metadata", partitions=[
            BeginQuorumEpochRequest.PartitionData(partition_index=0, leader_id=follower, leader_epoch=0)])])
    got = ask(cluster.host, cluster.controller_ports[follower], ApiKey.BEGIN_QUORUM_EPOCH, 1, stale,
              BeginQuorumEpochResponse)
    if epoch_before > 0:
        assert got.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH

    def register(cluster_id: str, broker_id: int) -> int:
        req = BrokerRegistrationRequest(broker_id=broker_id, cluster_id=cluster_id, incarnation_id=uuid.uuid4().bytes,
                                        listeners=[BrokerRegistrationRequest.Listener(
                                            name="PLAINTEXT", host="127.0.0.1", port=1, security_protocol=0)])
        return ask(host, port, ApiKey.BROKER_REGISTRATION, 4, req, BrokerRegistrationResponse).error_code

    assert register("AAAAAAAAAAAAAAAAAAAAAA", 7) == ErrorCode.INCONSISTENT_CLUSTER_ID
    # broker 4 is alive and heartbeating: another incarnation with its id is refused
    assert register(cluster.cluster_id, 4) == ErrorCode.DUPLICATE_BROKER_REGISTRATION

    # nothing of that was committed: same leader and epoch, broker 4 still at its own address, no broker 7
    assert cluster.controller_id() == leader and _quorum_epoch(cluster) == epoch_before
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    assert set(md.brokers) == {4, 5, 6}
    assert md.brokers[4].port == cluster.nodes[4].port


def test_controlled_shutdown_moves_leaders_before_the_broker_goes(cluster):
    """SIGTERM of a broker: before it exits, the active controller fences it and moves the leadership of its
    partitions (BrokerHeartbeat want_shut_down), so it is out of Metadata at once rather than after its session;
    it registers again as soon as it restarts."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, "moving", 3, 3)
    wait_until(lambda: len(describe(admin, "moving").partitions) == 3, 30, "topic moving")
    led_by_5 = [p.id for p in describe(admin, "moving").partitions.values() if p.leader == 5]
    assert led_by_5
    start = time.monotonic()
    assert cluster.nodes[5].stop() == 0
    took = time.monotonic() - start
    # right after the exit, well before its session (3 s) could have expired: broker 5 is gone and leads nothing
    wait_until(lambda: metadata_brokers(cluster.host, cluster.nodes[4].port) == {4, 6}, 1.0, "5 gone")
    admin = AdminClient({"bootstrap.servers": cluster.nodes[4].bootstrap})
    for p in describe(admin, "moving").partitions.values():
        assert p.leader in (4, 6), (p.id, p.leader)
    if not cluster.kafka:  # kbroker's log line
        log = cluster.nodes[5].log_tail(40)
        assert "controlled shutdown: controller" in log, log
    cluster.nodes[5].start()
    cluster.wait_registered(timeout=30)
    assert metadata_brokers(cluster.host, cluster.nodes[4].port) == {4, 5, 6}
    assert took < 10, took


def _quorum_epoch(cluster) -> int:
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
    from kbroker.testing.cluster import ask

    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    resp = ask(cluster.host, cluster.nodes[4].port, ApiKey.DESCRIBE_QUORUM, 0, req, DescribeQuorumResponse)
    return resp.topics[0].partitions[0].leader_epoch


def test_transactions_across_brokers(cluster):
    """A transactional producer whose partitions are led by all three brokers, and a consume-transform-produce
    loop whose group is coordinated by yet another: the coordinator writes COMMIT/ABORT markers to partitions
    on other brokers with WriteTxnMarkers; a read_committed consumer sees exactly the committed records and the
    group's offsets are committed with the transaction."""
    from confluent_kafka import TopicPartition as TP

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name in ("tx-out", "tx-in", "tx-copy"):
        create(admin, name, 6, 1)
    wait_until(lambda: all(len(describe(admin, n).partitions) == 6 and
                           all(p.leader in (4, 5, 6) for p in describe(admin, n).partitions.values())
                           for n in ("tx-out", "tx-in", "tx-copy")), 30, "topics")
    assert {p.leader for p in describe(admin, "tx-out").partitions.values()} == {4, 5, 6}

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-across",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(60):
        producer.produce("tx-out", key=f"c{i}".encode(), value=b"committed", partition=i % 6)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("tx-out", key=f"a{i}".encode(), value=b"aborted", partition=i % 6)
    producer.flush(30)
    producer.abort_transaction(60)

    def read(topic: str, expect: int, isolation: str) -> list:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False})
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < expect:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
        end = time.monotonic() + 2  # nothing more arrives
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        c.close()
        return got

    committed = read("tx-out", 60, "read_committed")
    assert sorted(m.key() for m in committed) == sorted(f"c{i}".encode() for i in range(60))
    assert len(read("tx-out", 90, "read_uncommitted")) == 90  # the aborted ones are in the log, skipped above

    # consume-transform-produce: offsets of the input committed in the same transaction as the output
    feeder = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(30):
        feeder.produce("tx-in", value=str(i).encode(), partition=i % 6)
    assert feeder.flush(30) == 0
    group = "ctp-across"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe(["tx-in"])
    copier = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-copier"})
    copier.init_transactions(60)
    copied, deadline = 0, time.monotonic() + 60
    while copied < 30 and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(30, 1.0) if not m.error()]
        if not msgs:
            continue
        copier.begin_transaction()
        for m in msgs:
            copier.produce("tx-copy", value=m.value(), partition=m.partition())
        copier.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                           consumer.consumer_group_metadata(), 60)
        copier.commit_transaction(60)
        copied += len(msgs)
    assert copied == 30
    offsets = consumer.committed([TP("tx-in", p) for p in range(6)], timeout=20)
    consumer.close()
    assert sum(tp.offset for tp in offsets) == 30
    assert sorted(int(m.value()) for m in read("tx-copy", 30, "read_committed")) == list(range(30))

    # KIP-890 across brokers: a transactional batch for a partition that was never added to the transaction is
    # refused by its leader after asking the coordinator on another broker; once added, it is accepted
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest,
                                           EndTxnResponse, FindCoordinatorRequest, FindCoordinatorResponse,
                                           InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
                                           ProduceResponse)
    from kbroker.protocol.records import build_batch
    from kbroker.testing.cluster import ask

    host = cluster.host
    found = wait_until(lambda: (lambda r: r if r.coordinators[0].error_code == 0 else None)(ask(
        host, cluster.nodes[4].port, ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(
            key_type=1, coordinator_keys=["tx-raw"]), FindCoordinatorResponse)), 30, "the coordinator of tx-raw")
    coordinator = found.coordinators[0].node_id
    cport = cluster.nodes[coordinator].port
    init = wait_until(lambda: (lambda r: r if r.error_code == 0 else None)(ask(
        host, cport, ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
            transactional_id="tx-raw", transaction_timeout_ms=60000), InitProducerIdResponse)), 30, "a producer id")
    partition, leader = next((p, meta.leader) for p, meta in describe(admin, "tx-out").partitions.items()
                             if meta.leader != coordinator)

    def produce() -> int:
        batch = build_batch([(b"k", b"raw", [], int(time.time() * 1000))], producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, base_sequence=0, is_transactional=True)
        req = ProduceRequest(transactional_id="tx-raw", acks=1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name="tx-out", partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        resp = ask(host, cluster.nodes[leader].port, ApiKey.PRODUCE, 9, req, ProduceResponse)
        return resp.responses[0].partition_responses[0].error_code

    assert produce() == ErrorCode.INVALID_TXN_STATE
    added = ask(host, cport, ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx-raw", v3_and_below_producer_id=init.producer_id,
        v3_and_below_producer_epoch=init.producer_epoch, v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="tx-out", partitions=[partition])]),
        AddPartitionsToTxnResponse)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce() == ErrorCode.NONE
    ended = ask(host, cport, ApiKey.END_TXN, 3, EndTxnRequest(
        transactional_id="tx-raw", producer_id=init.producer_id, producer_epoch=init.producer_epoch, committed=False),
        EndTxnResponse)
    assert ended.error_code == 0

    # transactions version 2 across brokers: Produce v12 on another broker adds the partition through the
    # coordinator (AddPartitionsToTxn v4 without verify_only), EndTxn v5 bumps the epoch and the COMMIT marker
    # carries it to that broker, and a late batch of the committed transaction is refused there
    init2 = wait_until(lambda: (lambda r: r if r.error_code == 0 else None)(ask(
        host, cport, ApiKey.INIT_PRODUCER_ID, 5, InitProducerIdRequest(
            transactional_id="tx-raw", transaction_timeout_ms=60000), InitProducerIdResponse)), 30, "a new epoch")
    pid, epoch = init2.producer_id, init2.producer_epoch

    def produce_v12(e: int, seq: int) -> int:
        batch = build_batch([(b"k", b"tv2", [], int(time.time() * 1000))], producer_id=pid, producer_epoch=e,
                            base_sequence=seq, is_transactional=True)
        req = ProduceRequest(transactional_id="tx-raw", acks=-1, timeout_ms=10000, topic_data=[
            ProduceRequest.TopicProduceData(name="tx-out", partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        resp = ask(host, cluster.nodes[leader].port, ApiKey.PRODUCE, 12, req, ProduceResponse)
        return resp.responses[0].partition_responses[0].error_code

    assert produce_v12(epoch, 0) == ErrorCode.NONE
    ended = ask(host, cport, ApiKey.END_TXN, 5, EndTxnRequest(
        transactional_id="tx-raw", producer_id=pid, producer_epoch=epoch, committed=True), EndTxnResponse)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
    # EndTxn answers once the commit is decided; the marker reaches the leader after that. Once a read_committed
    # consumer sees the record, the marker (with the bumped epoch) is there, and a late batch of the committed
    # transaction is refused (one that arrived before the marker would have been part of the transaction)
    committed = read("tx-out", 61, "read_committed")
    assert sorted(m.key() for m in committed) == sorted([f"c{i}".encode() for i in range(60)] + [b"k"])
    assert produce_v12(epoch, 1) == ErrorCode.INVALID_PRODUCER_EPOCH


DEV_CLUSTER = [sys.executable, "-m", "kbroker.testing.cluster"]


@contextlib.contextmanager
def dev_cluster(tmp_path, *args: str, timeout: float = 150):
    """``kbroker-dev-cluster ARGS --dir tmp_path`` until it prints ``ready``: yields ``(process, lines)``, its output
    lines so far (a thread keeps appending them); on exit a process still running gets SIGINT (its nodes run in
    sessions of their own), then SIGKILL if it hangs."""
    import signal

    proc = subprocess.Popen([*DEV_CLUSTER, *args, "--dir", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def reader() -> None:  # the command's output, line by line (ends when it exits)
        for line in proc.stdout:
            lines.append(line.strip())

    threading.Thread(target=reader, daemon=True).start()
    try:
        deadline = time.monotonic() + timeout
        while "ready" not in lines and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert "ready" in lines, lines
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def dev_cluster_bootstrap(lines: list[str]) -> str:
    return next(x for x in lines if x.startswith("bootstrap.servers=")).split("=", 1)[1]


@pytest.mark.kbroker_only("kbroker-dev-cluster, a kbroker tool, starts kbroker nodes (Kafka has no such command)")
def test_dev_cluster_command(tmp_path):
    """``kbroker-dev-cluster --controllers 1 --brokers 2``: one controller-only node (its brokers follow it over
    Raft) and two brokers; it prints the bootstrap servers, clients use them, and SIGINT stops every node."""
    import os
    import signal

    with dev_cluster(tmp_path, "--controllers", "1", "--brokers", "2", timeout=120) as (proc, lines):
        bootstrap = dev_cluster_bootstrap(lines)
        pids = [int(x.split(" pid ")[1].split()[0]) for x in lines if x.startswith("node ")]
        assert [x.split()[2] for x in lines if x.startswith("node ")] == ["controller", "broker", "broker"]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert set(admin.list_topics(timeout=10).brokers) == {2, 3}
        create(admin, "dev", 2, 1)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "1"})
        for i in range(20):
            producer.produce("dev", value=str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["dev"])
        got, deadline = set(), time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.add(int(m.value()))
        consumer.close()
        assert got == set(range(20))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 0
        time.sleep(0.5)  # the reader thread takes the last lines
        assert "stopped" in lines, lines
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.mark.kbroker_only("kbroker-dev-cluster, a kbroker tool, starts kbroker nodes (Kafka has no such command)")
def test_dev_cluster_survives_a_dead_node_and_is_driven_from_the_shell(tmp_path):
    """``kbroker-dev-cluster --controllers 3`` (three combined nodes): internal topics get replication factor 3 and
    min.insync.replicas 2; a node killed behind its back is reported once and the others keep serving acks=all
    writes; ``kbroker-dev-cluster stop|start|kill|status NODE --dir DIR`` act on one node through the control
    socket, and a node started again rejoins."""
    import os
    import signal

    def ctl(*args: str) -> str:
        out = subprocess.run([*DEV_CLUSTER, *args, "--dir", str(tmp_path)], capture_output=True, text=True,
                             timeout=200)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
        return out.stdout

    with dev_cluster(tmp_path, "--controllers", "3") as (proc, lines):
        bootstrap = dev_cluster_bootstrap(lines)
        pids = {int(x.split()[1]): int(x.split(" pid ")[1].split()[0]) for x in lines if x.startswith("node ")}
        assert sorted(pids) == [1, 2, 3]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        create(admin, "dev3", 3, 3)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev3-g", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["dev3"])
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

        def produce(start: int) -> None:
            for i in range(start, start + 30):
                producer.produce("dev3", value=str(i).encode(), partition=i % 3)
            assert producer.flush(60) == 0

        def consume(want: set[int], got: set[int]) -> None:
            deadline = time.monotonic() + 90
            while not want <= got and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    got.add(int(m.value()))
                    consumer.commit(m, asynchronous=False)
            assert want <= got

        got: set[int] = set()
        produce(0)
        consume(set(range(30)), got)
        offsets = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        assert {len(p.replicas) for p in offsets.partitions.values()} == {3}
        # a node killed behind the dev cluster's back: reported once, the others serve acks=all (min.insync 2)
        os.kill(pids[3], signal.SIGKILL)
        wait_until(lambda: any(x.startswith("node 3 exited") for x in lines), 30, "the dead node reported")
        assert proc.poll() is None
        produce(30)
        consume(set(range(60)), got)
        assert "node 3" in ctl("status") and "down" in ctl("status")
        ctl("start", "3")
        # stopped from the shell: not reported as a failure; killed from the shell; started again
        ctl("stop", "2")
        produce(60)
        ctl("start", "2")
        ctl("kill", "1")
        produce(90)
        ctl("start", "1")
        consume(set(range(120)), got)
        assert sum(x.startswith("node ") and "exited" in x for x in lines) == 1, lines
        assert ctl("status").count("running") == 3
        consumer.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
