"""Fetching from the closest replica (KIP-392) with real clients.

Three combined nodes in racks rack-1, rack-2 and rack-3 (``broker.rack`` per node), every node with
``replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`` and its own metrics port.
Each scenario writes to its own topic (1 partition, RF 3) with an acks=all confluent-kafka producer, then reads
everything back with a confluent-kafka consumer:

* ``client.rack`` = the rack of a follower: the leader names that follower (``PreferredReadReplica``, seen on the
  wire with a Fetch v11 carrying that ``RackId``) and the follower serves every record; on kbroker its metrics
  (the Prometheus ``metrics.port``, which Kafka does not have) also show that the follower's
  ``kbroker_fetch_follower_bytesout_total`` for the topic covers all of them, the leader's
  ``kafka_server_brokertopicmetrics_bytesout_total`` stays 0 and its ``kbroker_fetch_preferred_read_replica_total``
  counts the redirect;
* no ``client.rack``, or a rack no broker is in: the leader names no other replica, so it serves everything (and on
  kbroker no follower serves anything);
* the Java client (kafka-clients 4.3.1, ``compat_tests/java/KafkaDriver.java``) with ``client.rack`` = a follower's
  rack: the same as confluent-kafka.

Metadata names every broker's rack.
"""

from __future__ import annotations

import base64
import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import FetchRequest, FetchResponse, MetadataRequest, MetadataResponse
from kbroker.server.replica_selector import RACK_AWARE
from kbroker.testing.cluster import KbrokerCluster, ask
from kbroker.testing.fault_campaign import Admin, create_topic
from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(300)

N = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ports = {i: free_port() for i in (1, 2, 3)}
    per_node = {i: {"broker.rack": f"rack-{i}", "metrics.port": ports[i], "metrics.host": "127.0.0.1"}
                for i in ports}
    c = KbrokerCluster(tmp_path_factory.mktemp("kip392"), nodes=3, node_overrides=per_node,
                       overrides={"replica.selector.class": RACK_AWARE})
    with c:
        c.metrics_ports = ports  # type: ignore[attr-defined]
        yield c


def _metric(cluster, node: int, name: str, topic: str) -> float:
    port = cluster.metrics_ports[node]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf'^{re.escape(name)}{{topic="{re.escape(topic)}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def _preferred_read_replica(cluster, node: int, topic: str, rack: str | None) -> int:
    """``PreferredReadReplica`` in the answer of ``node`` (the leader) to a consumer's Fetch v11 from ``rack``."""
    n = cluster.nodes[node]
    fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, rack_id=rack or "",
                         topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                             partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    resp = ask(n.host, n.port, ApiKey.FETCH, 11, fetch, FetchResponse, timeout=10)
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == 0
    return pd.preferred_read_replica


def _produce(cluster, topic: str) -> int:
    """N records with acks=all; returns their value bytes."""
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    values = [b"value-%05d-" % i + b"x" * 100 for i in range(N)]
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    return sum(len(v) for v in values)


def _consume(cluster, topic: str, rack: str | None) -> list[bytes]:
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    if rack is not None:
        conf["client.rack"] = rack
    c = Consumer(conf)
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        c.close()
    return got


def _java_consume(java_driver):
    def consume(cluster, topic: str, rack: str | None) -> list[bytes]:
        props = ["--prop", f"client.rack={rack}"] if rack is not None else []
        events = java_driver.run(["consume", "--bootstrap", cluster.bootstrap, "--topic", topic, "--partitions", "0",
                                  "--expect", str(N), "--timeout-ms", "60000", *props], timeout=120)
        return [base64.b64decode(e["value"]) for e in events if e.get("event") == "record"]
    return consume


def _scenario(cluster, topic: str, rack_of,
              consume=_consume) -> tuple[int, dict[str, dict[int, float]] | None, int, int]:
    """Create ``topic``, produce, consume with ``client.rack`` = ``rack_of(leader, followers)``; returns the
    leader, every node's counters for the topic (kbroker only: ``None`` on Kafka), the value bytes written and the
    replica the leader prefers for that rack."""
    admin = Admin(cluster)
    create_topic(admin, topic, partitions=1)
    leader = admin.state(topic)[0][0]
    followers = [i for i in cluster.broker_ids if i != leader]
    written = _produce(cluster, topic)
    admin.wait_isr(3, 30, topic)
    rack = rack_of(leader, followers)
    preferred = _preferred_read_replica(cluster, leader, topic, rack)
    got = consume(cluster, topic, rack)
    assert got == [b"value-%05d-" % i + b"x" * 100 for i in range(N)]
    if cluster.kafka:  # Kafka's per-broker byte counters are JMX only
        return leader, None, written, preferred
    names = ("kbroker_fetch_follower_bytesout_total", "kafka_server_brokertopicmetrics_bytesout_total",
             "kbroker_fetch_preferred_read_replica_total")
    counters = {n: {i: _metric(cluster, i, n, topic) for i in cluster.broker_ids} for n in names}
    return leader, counters, written, preferred


@pytest.mark.kafka_reference
def test_metadata_names_every_broker_rack(cluster):
    node = cluster.nodes[1]
    resp = ask(node.host, node.port, ApiKey.METADATA, 12, MetadataRequest(topics=[]), MetadataResponse, timeout=10)
    assert {b.node_id: b.rack for b in resp.brokers} == {1: "rack-1", 2: "rack-2", 3: "rack-3"}


@pytest.mark.parametrize("client", [pytest.param("confluent", marks=pytest.mark.kafka_reference), "java"])
def test_consumer_in_a_follower_rack_reads_from_that_follower(cluster, client, request):
    chosen = {}

    def rack_of(leader, followers):
        chosen["follower"] = followers[-1]
        return f"rack-{followers[-1]}"

    consume = _java_consume(request.getfixturevalue("java_driver")) if client == "java" else _consume
    leader, counters, written, preferred = _scenario(cluster, f"kip392-follower-{client}", rack_of, consume)
    follower = chosen["follower"]
    assert preferred == follower
    if counters is None:
        return
    served = counters["kbroker_fetch_follower_bytesout_total"]
    assert served[follower] >= written  # every record came from the follower (batch overhead on top)
    assert all(served[i] == 0 for i in served if i != follower)
    assert counters["kafka_server_brokertopicmetrics_bytesout_total"][leader] == 0
    assert counters["kbroker_fetch_preferred_read_replica_total"][leader] >= 1
    print(f"{client}: leader {leader}; follower {follower} (rack-{follower}) served {served[follower]:.0f} bytes "
          f"({written} value bytes), leader redirects: "
          f"{counters['kbroker_fetch_preferred_read_replica_total'][leader]:.0f}")


@pytest.mark.parametrize("rack", [None, "rack-9"], ids=["no-client-rack", "unknown-rack"])
def test_consumer_without_a_matching_rack_reads_from_the_leader(cluster, rack):
    topic = f"kip392-leader-{rack or 'none'}"
    leader, counters, written, preferred = _scenario(cluster, topic, lambda leader, followers: rack)
    assert preferred == -1
    if counters is None:
        return
    assert counters["kafka_server_brokertopicmetrics_bytesout_total"][leader] >= written
    assert all(v == 0 for v in counters["kbroker_fetch_follower_bytesout_total"].values())
    assert all(v == 0 for v in counters["kbroker_fetch_preferred_read_replica_total"].values())
