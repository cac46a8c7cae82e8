"""Committed metadata reaches every node of a cluster at once (issue 33).

Three combined broker+controller nodes (``kbroker.testing.cluster.KbrokerCluster``, Kafka's defaults:
``metadata.max.idle.interval.ms=500``, Raft fetches long-poll for up to 500 ms). Topics are created through one
node with confluent-kafka's AdminClient (bootstrapped with that node only); from the moment each CreateTopics is
answered (the topic is committed), the other two nodes are asked directly, with a hand-encoded Metadata v4 request
(``allow_auto_topic_creation=false``, one kept connection per node), until each lists the topic.

The leader of the metadata quorum answers a parked follower or observer Fetch as soon as its high watermark passes
the one that fetcher knows (Fetch v18 ``HighWatermark``, KAFKA-14145), and a follower applies what is committed
as soon as it learns so; before that, followers waited for the next append (the NoOp record written every 500 ms
of idleness) or the end of their long poll: 500 ms or more. The bounds here are lax for a loaded CI machine (each
node's median under 100 ms, the p90 of all under 250 ms; the measured figures, a few ms, are in docs/performance.md
from bench/metadata_visibility.py); Kafka 4.3 meets them too.
"""

from __future__ import annotations

import math
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import wire
from kbroker.testing.cluster import KbrokerCluster

pytestmark = [pytest.mark.timeout(300), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too

TOPICS = 20
WARMUP_TOPICS = 5
MEDIAN_BOUND_S = 0.100
"""Each node's median: without the fix, the node(s) the leader does not tell wait ~0.5 s for every topic."""
P90_BOUND_S = 0.250
"""Over every sample. Lax for a loaded CI machine, and a p90 rather than a p99: a single stall of a loaded machine
(Kafka's JVMs show some of 0.2-0.45 s on two busy cores) must not fail the test; the 500 ms long poll fails both."""


def metadata_v4_lists(conn: wire.KafkaConnection, topic: str) -> bool:
    """Does the node behind ``conn`` list ``topic`` (no error, partitions with leaders) in Metadata v4 with
    ``allow_auto_topic_creation=false``?"""
    rd = conn.request(wire.API_METADATA, 4, wire.array([wire.string(topic)]) + wire.i8(0))
    rd.i32()  # throttle_time_ms
    for _ in range(rd.i32()):  # brokers: node_id, host, port, rack
        rd.i32(), rd.string(), rd.i32(), rd.string()
    rd.string()  # cluster_id
    rd.i32()  # controller_id
    listed = False
    for _ in range(rd.i32()):
        error, name = rd.i16(), rd.string()
        rd.i8()  # is_internal
        leaders = []
        for _ in range(rd.i32()):
            rd.i16(), rd.i32()  # error_code, partition_index
            leaders.append(rd.i32())
            for _ in range(2):  # replica_nodes, isr_nodes
                for _ in range(rd.i32()):
                    rd.i32()
        listed = listed or (name == topic and error == 0 and bool(leaders) and min(leaders) >= 0)
    return listed


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


@pytest.fixture
def cluster(tmp_path):
    c = KbrokerCluster(tmp_path, nodes=3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_topic_created_through_one_node_is_at_once_in_every_nodes_metadata(cluster):
    entry, *others = cluster.broker_ids
    admin = AdminClient({"bootstrap.servers": cluster.nodes[entry].bootstrap})
    conns = {i: wire.KafkaConnection(cluster.host, cluster.nodes[i].port) for i in others}
    try:
        # warm up: the AdminClient knows the controller, every connection is open, every node has registered, a
        # JVM has compiled the path
        for k in range(WARMUP_TOPICS):
            name = f"visibility-warmup-{k}"
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(60)
            deadline = time.monotonic() + 60
            while not all(metadata_v4_lists(c, name) for c in conns.values()):
                assert time.monotonic() < deadline, f"{name} never reached every node"
                time.sleep(0.01)

        took: dict[int, list[float]] = {i: [] for i in others}
        for k in range(TOPICS):
            name = f"visibility-{k}"
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(60)
            t0 = time.monotonic()
            missing = set(others)
            while missing:
                for i in sorted(missing):
                    if metadata_v4_lists(conns[i], name):
                        took[i].append(time.monotonic() - t0)
                        missing.discard(i)
                assert time.monotonic() - t0 < 30, f"{name} not in the Metadata of nodes {sorted(missing)} after 30 s"
                time.sleep(0.001)
    finally:
        for c in conns.values():
            c.close()
        del admin

    every = [t for ts in took.values() for t in ts]
    report = (f"create-to-visible on nodes {others} (created through node {entry}): "
              + ", ".join(f"p{round(q * 100)} {quantile(every, q) * 1000:.1f} ms" for q in (0.5, 0.9, 0.99))
              + "; per node (ms): " + "; ".join(f"{i}: {[round(t * 1000) for t in took[i]]}" for i in others))
    print(report)
    assert len(every) == TOPICS * len(others)
    assert all(quantile(took[i], 0.5) < MEDIAN_BOUND_S for i in others), report
    assert quantile(every, 0.9) < P90_BOUND_S, report
