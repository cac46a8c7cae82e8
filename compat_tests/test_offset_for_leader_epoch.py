"""OffsetForLeaderEpoch (API key 23, versions 2-4; KIP-101, KIP-320) against three combined nodes.

* On the wire: the leader answers each epoch with where it ends in its log (the start of the next epoch, the log
  end offset for the current one), an epoch older than the log's first with where the first starts, a newer one
  with (-1, -1); CurrentLeaderEpoch is fenced (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); a follower answers
  NOT_LEADER_OR_FOLLOWER, an unknown partition UNKNOWN_TOPIC_OR_PARTITION; v2, v3 and v4 alike.
* A real client: a confluent-kafka consumer (``auto.offset.reset=error``) reading a partition whose leader is
  killed validates its position with OffsetForLeaderEpoch at the new leader (on kbroker its request counter says
  so) and goes on reading every record once, in order, with no offset reset.
"""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import OffsetForLeaderEpochRequest as Q, OffsetForLeaderEpochResponse as R
from kbroker.testing.cluster import KbrokerCluster, ask, wait_until
from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(300)

TOPIC = "epochs"
FAST = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 300, "replica.lag.time.max.ms": 5000,
        "topic.metadata.refresh.interval.ms": 1000}


def epochs_of(node, partitions: list[tuple[int, int, int]], version: int = 4,
              topic: str = TOPIC) -> list[tuple[int, int, int]]:
    """``(error, leader epoch, end offset)`` per ``(partition, current leader epoch, leader epoch)`` asked."""
    req = Q(replica_id=-1, topics=[Q.OffsetForLeaderTopic(topic=topic, partitions=[
        Q.OffsetForLeaderPartition(partition=p, current_leader_epoch=cur, leader_epoch=e)
        for p, cur, e in partitions])])
    resp = ask(node.host, node.port, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, req, R, timeout=10)
    assert [t.topic for t in resp.topics] == [topic]
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions]


def _state(admin: AdminClient) -> tuple[int, list[int]]:
    md = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.get(0)
    return (md.leader, list(md.isrs)) if md is not None else (-1, [])


def _produce(bootstrap: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "topic.metadata.refresh.interval.ms": 1000})
    for v in values:
        p.produce(TOPIC, value=v, partition=0)
    assert p.flush(60) == 0


def _requests(port: int, api: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "kafka_network_requestmetrics_requests_total" and s.labels.get("request") == api)


def test_epochs_end_where_the_next_leader_began(tmp_path):
    ports = {i: free_port() for i in (1, 2, 3)}
    cluster = KbrokerCluster(tmp_path, nodes=3, overrides=FAST, node_overrides={
        i: {"metrics.port": p, "metrics.host": "127.0.0.1"} for i, p in ports.items()})
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                      config={"min.insync.replicas": "2"})])[TOPIC].result(30)
        wait_until(lambda: _state(admin) == (1, [1, 2, 3]), 30, "node 1 leading with a full ISR")
        _produce(cluster.bootstrap, [b"e0-%d" % i for i in range(10)])
        leader = cluster.nodes[1]
        # epoch 0 is the current one: it ends at the log end offset; a newer one is unknown
        for version in (2, 3, 4):
            assert epochs_of(leader, [(0, 0, 0), (0, -1, 3)], version) == [(0, 0, 10), (0, -1, -1)], version
        assert epochs_of(leader, [(0, 1, 0)]) == [(ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)]
        assert epochs_of(cluster.nodes[2], [(0, 0, 0)]) == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)]
        assert epochs_of(leader, [(0, -1, 0)], topic="no-such-topic") == \
            [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
        assert epochs_of(leader, [(1, -1, 0)]) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]

        # the real consumers read the first ten, then the leader dies and they go on from the new one
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "epochs", "enable.auto.commit": False,
                      "auto.offset.reset": "error", "topic.metadata.refresh.interval.ms": 1000})
        c.assign([TopicPartition(TOPIC, 0, 0)])
        got: list[bytes] = []

        def consume(n: int) -> bool:
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            return len(got) >= n

        wait_until(lambda: consume(10), 30, "the first ten records")
        cluster.kill(1)
        wait_until(lambda: _state(admin)[0] in (2, 3), 30, "a new leader")
        new_leader_id = _state(admin)[0]
        new_leader = cluster.nodes[new_leader_id]
        _produce(cluster.bootstrap, [b"e1-%d" % i for i in range(10)])
        wait_until(lambda: consume(20), 60, "the next ten records from the new leader")
        assert got == [b"e0-%d" % i for i in range(10)] + [b"e1-%d" % i for i in range(10)]
        # librdkafka checked its position against the new leader's log before fetching from it (KIP-320):
        # kbroker's request counter (its Prometheus metrics.port; Kafka has JMX only) says so
        if not cluster.kafka:
            wait_until(lambda: _requests(ports[new_leader_id], "OffsetForLeaderEpoch") >= 1, 10,
                       "an OffsetForLeaderEpoch at the new leader")
        c.close()

        # the new leader (epoch 1): epoch 0 ends where epoch 1 began (offset 10); epoch 1 at its log end
        assert epochs_of(new_leader, [(0, 1, 0), (0, 1, 1), (0, -1, 2)]) == [(0, 0, 10), (0, 1, 20), (0, -1, -1)]
        assert epochs_of(new_leader, [(0, 0, 0)]) == [(ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]

        # the old leader comes back as a follower: it answers NOT_LEADER_OR_FOLLOWER
        cluster.nodes[1].start()
        wait_until(lambda: sorted(_state(admin)[1]) == [1, 2, 3], 60, "node 1 back in the ISR")
        assert epochs_of(cluster.nodes[1], [(0, -1, 0)]) == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)]
