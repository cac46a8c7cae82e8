"""A cluster of three kbroker processes with a KRaft-style metadata quorum (issue 9, first slice).

Three combined broker+controller nodes on 127.0.0.1 (``kbroker.testing.cluster.KbrokerCluster``): the voters
elect one active controller over Kafka's Raft RPCs, every node registers as a broker through it, and topic
metadata committed by the quorum reaches every node. Checked with real clients: confluent-kafka's AdminClient
sees three brokers and one controller, creates topics (spread over the brokers) through the controller,
producers and consumers use the partitions on every node; kill -9 of the active controller elects another and
CreateTopics works again; the killed node restarts and catches up with what was committed while it was down;
a request that needs the controller on another node gets NOT_CONTROLLER.
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
from kbroker.testing.cluster import KbrokerCluster

pytestmark = pytest.mark.timeout(300)


def wait_until(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def topics_on(node) -> dict:
    return AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(timeout=10).topics


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=30)[name].result(60)


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
        assert len(t.partitions) == 6
    leaders = {p.leader for p in topics_on(cluster.nodes[1])[topic].partitions.values()}
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


def test_not_controller_from_a_standby(cluster):
    controller = cluster.controller_id()
    standby = next(i for i in cluster.nodes if i != controller)
    wait_until(lambda: len(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers) == 3,
               60, "all three brokers registered")
    body = (wire.i32(1) + wire.string("nc-topic") + wire.i32(1) + wire.i16(1) + wire.i32(0) + wire.i32(0)
            + wire.i32(30000) + wire.i8(0))  # CreateTopics v2: one topic, no assignments/configs; timeout; validate
    with wire.KafkaConnection.to(cluster.nodes[standby].bootstrap) as conn:
        rd = conn.request(19, 2, body)
        rd.i32()  # throttle
        assert rd.i32() == 1
        assert rd.string() == "nc-topic"
        assert rd.i16() == 41  # NOT_CONTROLLER
    assert "nc-topic" not in topics_on(cluster.nodes[controller])


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
    print(f"controller {first} killed; controller {second} took over; CreateTopics succeeded "
          f"{failover_s:.1f} s after the kill")


def test_describe_quorum_on_the_leader(cluster):
    """kbroker-metadata-quorum (Kafka's layout) against the active controller: its id and epoch, the three voters,
    every voter's log end offset at the high watermark once idle; a standby answers NOT_LEADER_OR_FOLLOWER."""
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
    refused = describe(standby, "--status")
    assert refused.returncode != 0 and "NOT_LEADER_OR_FOLLOWER" in (refused.stderr + refused.stdout)
