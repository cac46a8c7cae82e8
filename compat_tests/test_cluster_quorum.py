"""A cluster of three kbroker processes with a KRaft-style metadata quorum (issue 9, first slice).

Three combined broker+controller nodes on 127.0.0.1 (``kbroker.testing.cluster.KbrokerCluster``): the voters
elect one active controller over Kafka's Raft RPCs, every node registers as a broker through it, and topic
metadata committed by the quorum reaches every node. Checked with real clients: confluent-kafka's AdminClient
sees three brokers and one controller, creates topics (spread over the brokers) through the controller,
producers and consumers use the partitions on every node; kill -9 of the active controller elects another and
CreateTopics works again; the killed node restarts and catches up with what was committed while it was down;
a standby forwards admin requests to the active controller; a broker whose heartbeats stop is fenced.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import wire
from kbroker.testing.cluster import KbrokerCluster, wait_until

pytestmark = pytest.mark.timeout(300)


def metadata_of(node) -> tuple[set[int], dict[str, dict[int, int]]]:
    """Metadata v1 asked of ``node`` itself (a client library may ask any broker it knows): (broker ids,
    {topic: {partition: leader}})."""
    with wire.KafkaConnection.to(node.bootstrap) as conn:
        rd = conn.request(wire.API_METADATA, 1, wire.i32(-1))  # null topics: all of them
    brokers = set()
    for _ in range(rd.i32()):
        brokers.add(rd.i32())
        rd.string(), rd.i32(), rd.string()  # host, port, rack
    rd.i32()  # controller id
    topics: dict[str, dict[int, int]] = {}
    for _ in range(rd.i32()):
        rd.i16()
        name = rd.string()
        rd.i8()  # is_internal
        parts = {}
        for _ in range(rd.i32()):
            rd.i16()
            pid, leader = rd.i32(), rd.i32()
            for _ in range(2):  # replicas, isr
                for _ in range(rd.i32()):
                    rd.i32()
            parts[pid] = leader
        topics[name] = parts
    return brokers, topics


def topics_on(node) -> dict[str, dict[int, int]]:
    """{topic: {partition: leader}} as ``node`` itself answers."""
    return metadata_of(node)[1]


def create(bootstrap: str, name: str, partitions: int, timeout: float = 30) -> None:
    """CreateTopics through an AdminClient that waits up to ``timeout`` seconds for the answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout)[name].result(timeout + 30)


@pytest.fixture
def cluster(tmp_path):
    c = KbrokerCluster(tmp_path, nodes=3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_three_nodes_elect_a_controller_and_share_committed_metadata(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = wait_until(lambda: (m := admin.list_topics(timeout=10)) and len(m.brokers) == 3 and m, 60,
                    "all three brokers registered")
    assert sorted(md.brokers) == [1, 2, 3]
    controller = cluster.controller_id()
    assert controller in (1, 2, 3)

    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap, topic, 6)
    for node in cluster.nodes.values():  # committed metadata reaches every node
        t = wait_until(lambda node=node: topics_on(node).get(topic), 30, f"{topic} on node {node.node_id}")
        assert len(t) == 6
    leaders = set(topics_on(cluster.nodes[1])[topic].values())
    assert leaders == {1, 2, 3}, f"partitions not spread over the brokers: leaders {leaders}"

    # data goes to the partitions on every node
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    acked: list = []
    for i in range(600):
        p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 6,
                  on_delivery=lambda err, msg: acked.append(err))
    p.flush(60)
    assert len(acked) == 600 and all(e is None for e in acked), {str(e) for e in acked if e}
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(6)])
    got = set()
    deadline = time.monotonic() + 60
    while len(got) < 600 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.add(m.value())
    c.close()
    assert got == {f"v{i}".encode() for i in range(600)}


def create_topics_v2(conn, name: str, client_id: str) -> int:
    """CreateTopics v2 by hand (one topic, 1 partition, RF 1); returns the topic's error code."""
    body = (wire.i32(1) + wire.string(name) + wire.i32(1) + wire.i16(1) + wire.i32(0) + wire.i32(0)
            + wire.i32(30000) + wire.i8(0))  # no assignments, no configs; timeout; validate_only false
    rd = conn.request(19, 2, body, client_id=client_id)
    rd.i32()  # throttle
    assert rd.i32() == 1
    assert rd.string() == name
    return rd.i16()


def test_admin_requests_on_a_standby_are_forwarded(cluster):
    """A standby forwards CreateTopics to the active controller and relays its answer (Kafka's brokers forward
    too, and name any live broker as the controller in Metadata); on kbroker, a request that was already forwarded
    once (kbroker's own ``kbroker-forward-<n>`` client id marks it) is not forwarded again: NOT_CONTROLLER."""
    controller = cluster.controller_id()
    standby = next(i for i in cluster.nodes if i != controller)
    wait_until(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers) == 3,
               60, "all three brokers registered")
    md = AdminClient({"bootstrap.servers": cluster.nodes[standby].bootstrap}).list_topics(timeout=10)
    assert md.controller_id in cluster.running()  # the node answering names itself (a live node); it forwards
    with wire.KafkaConnection.to(cluster.nodes[standby].bootstrap) as conn:
        assert create_topics_v2(conn, "fwd-topic", "kbroker-compat-raw") == 0
        if not cluster.kafka:  # kbroker's forwarding marker; Kafka forwards in an envelope instead
            assert create_topics_v2(conn, "twice-topic", "kbroker-forward-9") == 41  # NOT_CONTROLLER
    # (list_topics asks any broker it knows; a standby learns a commit with its next fetch)
    wait_until(lambda: "fwd-topic" in topics_on(cluster.nodes[controller]), 10, "fwd-topic everywhere")
    assert "twice-topic" not in topics_on(cluster.nodes[controller])
    # confluent-kafka's AdminClient through the standby alone
    name = f"via-standby-{uuid.uuid4().hex[:6]}"
    create(cluster.nodes[standby].bootstrap, name, 2)
    wait_until(lambda: name in topics_on(cluster.nodes[controller]), 10, f"{name} everywhere")


def test_failover_of_the_active_controller_and_catch_up_after_restart(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "all three brokers registered")
    before = f"before-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap, before, 3)
    first = cluster.controller_id()
    killed_at = time.monotonic()
    cluster.kill(first)
    second = cluster.controller_id(timeout=60, exclude=first)
    assert second != first
    after = f"after-{uuid.uuid4().hex[:6]}"
    survivors = ",".join(n.bootstrap for i, n in cluster.nodes.items() if i != first)
    create(survivors, after, 2)  # the new controller commits with the two voters left
    failover_s = time.monotonic() - killed_at
    for i in cluster.running():  # a standby learns of the commit with its next fetch
        wait_until(lambda i=i: (t := topics_on(cluster.nodes[i])) and before in t and after in t, 10,
                   f"both topics on node {i}")
    cluster.restart(first)  # catches up with what was committed while it was down
    names = wait_until(lambda: (t := topics_on(cluster.nodes[first])) and after in t and t, 60,
                       f"node {first} to catch up")
    assert before in names
    cluster.wait_registered(30, brokers=[1, 2, 3])  # it registered again (every broker lists it)
    if not cluster.kafka:  # kbroker's log line
        wait_until(lambda: "registered as broker" in cluster.nodes[first].log_tail(
            200, since=cluster.nodes[first]._start_offset), 30, f"node {first} to register its new incarnation")
    print(f"controller {first} killed; controller {second} took over; CreateTopics succeeded "
          f"{failover_s:.1f} s after the kill")


def test_describe_quorum_on_the_leader(cluster):
    """kbroker-metadata-quorum (Kafka's layout) against the active controller: its id and epoch, the three voters,
    every voter's log end offset at the high watermark once idle; a standby forwards the request to the leader (as
    Kafka's brokers forward it to the controller) and gives the leader's answer."""
    wait_until(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers) == 3,
               60, "all three brokers registered")
    leader = cluster.controller_id()

    def describe(node_id: int, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kbroker.cli.metadata_quorum", "--bootstrap-server",
                               cluster.nodes[node_id].bootstrap, "describe", *args],
                              capture_output=True, text=True, timeout=60)

    def caught_up():
        out = describe(leader, "--replication")
        rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
        ends = {int(r[0]): int(r[2]) for r in rows}
        return out if len(ends) == 3 and len(set(ends.values())) == 1 else None

    repl = wait_until(caught_up, 30, "every voter at the same log end offset")
    assert "Leader" in repl.stdout and repl.stdout.count("Follower") == 2, repl.stdout
    status = describe(leader, "--status")
    assert status.returncode == 0, status.stderr
    assert f"LeaderId:               {leader}" in status.stdout, status.stdout
    assert all(f'"id": {i}' in status.stdout for i in (1, 2, 3)), status.stdout
    standby = next(i for i in cluster.nodes if i != leader)
    forwarded = describe(standby, "--status")
    assert forwarded.returncode == 0, forwarded.stderr
    assert f"LeaderId:               {leader}" in forwarded.stdout, forwarded.stdout


def test_a_dead_broker_is_fenced_and_comes_back(tmp_path):
    """kill -9 of a broker that is not the controller: after broker.session.timeout.ms without heartbeats the
    controller fences it; it leaves the Metadata response and its partitions have no leader. Restarted, it
    registers again and leads its partitions again."""
    with KbrokerCluster(tmp_path, nodes=3, overrides={"broker.session.timeout.ms": 3000,
                                                      "broker.heartbeat.interval.ms": 500}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "all three brokers registered")
        topic = f"fence-{uuid.uuid4().hex[:6]}"
        create(cluster.bootstrap, topic, 3)
        controller = cluster.controller_id()
        victim = next(i for i in cluster.nodes if i != controller)
        t = wait_until(lambda: topics_on(cluster.nodes[controller]).get(topic), 10, f"{topic} on the controller")
        led = sorted(pid for pid, leader in t.items() if leader == victim)
        assert led, "the victim leads no partition"
        time.sleep(2)  # heartbeats keep a live broker unfenced well past the session timeout
        assert victim in metadata_of(cluster.nodes[controller])[0]
        killed = time.monotonic()
        cluster.kill(victim)

        def fenced():
            brokers, topics = metadata_of(cluster.nodes[controller])
            return victim not in brokers and all(topics[topic][i] == -1 for i in led)

        wait_until(fenced, 30, f"broker {victim} fenced")
        fenced_after = time.monotonic() - killed
        assert fenced_after >= 2.5, f"fenced after {fenced_after:.1f} s, before its session timed out"
        cluster.nodes[victim].start()

        def back():
            brokers, topics = metadata_of(cluster.nodes[controller])
            return victim in brokers and all(topics[topic][i] == victim for i in led)

        wait_until(back, 60, f"broker {victim} back as the leader of its partitions")
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        acked: list = []
        for i in led:
            p.produce(topic, b"after", partition=i, on_delivery=lambda err, msg: acked.append(err))
        left = p.flush(60)
        assert left == 0 and len(acked) == len(led) and all(e is None for e in acked), \
            f"{left} not delivered, reports {acked}; victim log:\n{cluster.nodes[victim].log_tail(30)}"
        print(f"broker {victim} fenced {fenced_after:.1f} s after kill -9 (session timeout 3 s)")


@pytest.mark.parametrize("client_name", ["confluent", "java"])
def test_idempotent_producers_get_ids_through_the_quorum(cluster, get_client, client_name):
    """InitProducerId on any node: producer ids come in blocks the quorum committed (AllocateProducerIds from
    standbys), so idempotent producers (the Java client's default) work across the cluster; every record is
    acknowledged once and read back once."""
    from compat_tests.clients import ConfluentClient, ProduceOptions
    from compat_tests.records import RecordSpec, verify_round_trip

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "all three brokers registered")
    topic = f"idem-{client_name}-{uuid.uuid4().hex[:6]}"
    create(cluster.bootstrap, topic, 3)
    client = get_client(client_name)
    spec = RecordSpec.new(f"idem-{uuid.uuid4().hex[:4]}", 300, partitions=3)
    produced = client.produce(cluster.bootstrap, topic, spec, ProduceOptions(acks="all", idempotence=True))
    consumed = ConfluentClient().consume(cluster.bootstrap, topic, spec.count, timeout=60)
    verify_round_trip(spec, produced.acks, consumed)


def test_an_isolated_leader_commits_nothing_and_rejoins(tmp_path):
    """Split brain: the active controller is cut off from the other two nodes by iptables rules (the harness's
    ``firewall``: what its processes and theirs send to each other is dropped; silence, no reset), while its clients
    still reach it. The majority elects a new leader in a later epoch and commits;
    the old leader commits nothing (CreateTopics sent to it fails: it cannot reach a majority, and check-quorum
    makes it resign). After the links heal it follows the new leader: the majority's topic is there, the
    minority's is not, and pre-vote keeps it from disrupting the new leader's epoch. The quorum is read as
    kafka-metadata-quorum --bootstrap-controller reads it: DescribeQuorum on the controller listeners, answered
    by the leader (a broker listener forwards it to the controller it knows, the cut-off one for a while)."""
    c = KbrokerCluster(tmp_path, nodes=3, firewall=True)
    try:
        c.start()
        old = c.controller_id()
        a, b = (i for i in c.nodes if i != old)
        majority = f"{c.nodes[a].bootstrap},{c.nodes[b].bootstrap}"
        create(majority, "before-split", 1)
        old_epoch = wait_until(lambda: _quorum(c, c.nodes), 30, "the quorum's leader")["epoch"]

        c.isolate(old)
        q = wait_until(lambda: (lambda q: q if q and q["leader"] in (a, b) else None)(_quorum(c, (a, b))), 60,
                       "a new leader on the majority side")
        new, new_epoch = q["leader"], q["epoch"]
        assert new_epoch > old_epoch
        # sent to the old leader itself on the wire (an AdminClient would send it to the controller named in
        # Metadata, which Kafka's nodes pick among every live broker, the majority's included)
        try:
            with wire.KafkaConnection.to(c.nodes[old].bootstrap, timeout=45) as conn:
                minority = create_topics_v2(conn, "minority-topic", "kbroker-compat-raw")
        except OSError:  # not answered at all
            minority = None
        assert minority != 0, "CreateTopics committed by the cut-off leader"
        # a broker forwards CreateTopics to the controller its forwarding channel knows; Kafka's learns of the new
        # one only when a request to the old one times out (controller.socket.timeout.ms, 30 s): allow for that
        create(majority, "majority-topic", 1, timeout=75)
        assert "majority-topic" not in topics_on(c.nodes[old])

        c.heal()
        for i in c.nodes:  # every node applies the committed log (followers learn the commit with their next fetch)
            wait_until(lambda i=i: "majority-topic" in topics_on(c.nodes[i]), 60, f"node {i} applying the commit")
            topics = topics_on(c.nodes[i])
            assert "minority-topic" not in topics and "before-split" in topics, (i, topics)
        # the old leader follows the new one: it fetches up to the high watermark, and no election was forced
        q = wait_until(lambda: (lambda q: q if q and q["leos"].get(old, -1) >= q["hw"] else None)(_quorum(c, c.nodes)),
                       30, f"node {old} following {new}")
        assert (q["leader"], q["epoch"]) == (new, new_epoch)
    finally:
        c.stop()


def _quorum(c, node_ids) -> dict | None:
    """The quorum as its leader answers DescribeQuorum on its controller listener (the first of ``node_ids`` that
    answers without error): leader id, epoch, high watermark and each voter's log end offset; None when none of
    them answers as leader."""
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
    from kbroker.testing.cluster import ask

    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    for i in node_ids:
        try:
            resp = ask(c.host, c.controller_ports[i], ApiKey.DESCRIBE_QUORUM, 0, req, DescribeQuorumResponse,
                       timeout=5)
        except OSError:
            continue
        if resp.error_code or not resp.topics or not resp.topics[0].partitions:
            continue
        part = resp.topics[0].partitions[0]
        if part.error_code == 0 and part.leader_id == i:
            return {"leader": part.leader_id, "epoch": part.leader_epoch, "hw": part.high_watermark,
                    "leos": {v.replica_id: v.log_end_offset for v in part.current_voters}}
    return None
