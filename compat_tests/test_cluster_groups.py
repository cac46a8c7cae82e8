"""Group coordinators in a cluster whose ``__consumer_offsets`` lost its in-sync replicas (issue 33).

Three controllers and three brokers; ``__consumer_offsets`` has one partition, replication factor 3 and
``min.insync.replicas`` 2. With two of the three brokers killed the coordinator cannot store a group's
assignment (NOT_ENOUGH_REPLICAS): SyncGroup is answered COORDINATOR_NOT_AVAILABLE and the group waits for its
members to rejoin. The coordinator must not start generation after generation on its own (the hot loop
issue 33 saw: generation 10 -> 7,136 in 6.5 s), nor flood its log; a KIP-848 member's heartbeats fail the same
way without a loop; once the brokers are back both groups work again.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing.cluster import KbrokerCluster, metadata_brokers, wait_until

pytestmark = pytest.mark.timeout(300)

OVERRIDES = {
    "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "3", "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
}
#: a new generation of the group in the coordinator's log (``GroupCoordinatorShard._complete_join``)
GENERATION_LINE = re.compile(r"group (\S+): generation (\d+) ")


@pytest.fixture
def cluster(tmp_path):
    c = KbrokerCluster(tmp_path, nodes=3, brokers=3, overrides=OVERRIDES)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _consumer(bootstrap: str, group: str, protocol: str = "classic") -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "max.poll.interval.ms": 60000}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    return Consumer(conf)


def _generations(text: str, group: str) -> list[int]:
    return [int(m.group(2)) for m in GENERATION_LINE.finditer(text) if m.group(1) == group]


@pytest.mark.kbroker_only("counts the group's generations in the coordinator's log")
def test_classic_group_waits_for_its_members_while_the_assignment_cannot_be_stored(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic, group, kip848 = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}", f"c-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=30)[topic].result(60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"before")
    assert producer.flush(30) == 0

    first = _consumer(cluster.bootstrap, group)
    first.subscribe([topic])
    wait_until(lambda: first.poll(0.2) is not None and first.assignment(), 60, "the first member consumes")
    coordinator = admin.describe_consumer_groups([group])[group].result(30).coordinator.id
    others = [b for b in cluster.broker_ids if b != coordinator]
    for b in others:
        cluster.kill(b)
    node = cluster.nodes[coordinator]
    wait_until(lambda: metadata_brokers(cluster.host, node.port) == {coordinator}, 30, "the others fenced")
    offsets = AdminClient({"bootstrap.servers": node.bootstrap})
    wait_until(lambda: offsets.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
               .partitions[0].isrs == [coordinator], 30, "__consumer_offsets below min.insync.replicas")

    # a second member makes the group rebalance; the leader's assignment cannot be stored. A KIP-848 member of
    # another group cannot store its join either.
    mark = node.log_size()
    second = _consumer(node.bootstrap, group)
    second.subscribe([topic])
    third = _consumer(node.bootstrap, kip848, "consumer")
    third.subscribe([topic])
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        for c in (first, second, third):
            c.poll(0.05)
    text = node.log_text()[mark:]
    gens = _generations(text, group)
    assert "failed with NOT_ENOUGH_REPLICAS" in text, node.log_tail(80, since=mark)
    # every generation needs the members' JoinGroups (librdkafka retries about once a second), not thousands;
    # the failed appends are logged once per 10 s
    assert 1 <= len(gens) <= 30, (len(gens), gens[:5], gens[-5:])
    assert text.count("failed with NOT_ENOUGH_REPLICAS") <= 2, node.log_tail(40, since=mark)
    assert sum(1 for line in text.splitlines() if kip848 in line) <= 30, node.log_tail(40, since=mark)
    assert text.count("\n") < 300, node.log_tail(40, since=mark)

    # the brokers return: the group settles and both members consume
    for b in others:
        cluster.nodes[b].start()
    cluster.wait_registered(timeout=60)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"after")
    assert producer.flush(30) == 0
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    kip848_got: list[bytes] = []
    while time.monotonic() < deadline and not (b"after" in got and b"after" in kip848_got):
        for c, into in ((first, got), (second, got), (third, kip848_got)):
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                into.append(msg.value())
    assert b"after" in got and kip848_got == [b"before", b"after"], (got, kip848_got, node.log_tail(60))
    desc = admin.describe_consumer_groups([group])[group].result(30)
    assert str(desc.state).endswith("STABLE") and len(desc.members) == 2, desc
    for c in (first, second, third):
        c.close()
