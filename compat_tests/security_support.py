"""Helpers shared by the TLS and SASL tests (compat_tests/test_tls.py, test_sasl.py): a confluent-kafka
round trip with extra client settings, and a 3-node cluster whose inter-broker traffic goes over an extra
INTERNAL listener."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from kbroker.testing.cluster import KbrokerCluster
from kbroker.testing.fault_campaign import Admin
from kbroker.testing.plugin import free_port


def produce(conf: dict, topic: str, values: list[bytes]) -> None:
    """acks=all; every record must be acknowledged within 30 s."""
    p = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, msg: err and errors.append(str(err)))
    assert p.flush(30) == 0 and not errors, errors[:3]


def consume(conf: dict, topic: str, n: int, timeout: float = 30) -> list[bytes]:
    """Up to ``n`` values of ``topic`` from the beginning, with a fresh group."""
    c = Consumer({**conf, "group.id": f"g-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for m in c.consume(500, 0.5):
            if m.error() is None:
                out.append(m.value())
    c.close()
    return out


def add_internal_listener(cluster: KbrokerCluster) -> None:
    """Give every node of a not yet started cluster an INTERNAL listener on a free port (the cluster's
    overrides say what protocol it speaks and make it ``inter.broker.listener.name``)."""
    for node in cluster.nodes.values():
        port = free_port()
        node.overrides["listeners"] += f",INTERNAL://127.0.0.1:{port}"
        node.overrides["advertised.listeners"] += f",INTERNAL://127.0.0.1:{port}"


def replicate_and_read_back(cluster: KbrokerCluster, records: int) -> None:
    """An RF-3 topic ``rep`` written with acks=all through the PLAINTEXT listeners: every ISR fills to 3 and every
    record reads back."""
    admin = Admin(cluster)
    admin.client().create_topics([NewTopic("rep", 3, 3, config={"min.insync.replicas": "2"})])["rep"].result(30)
    values = [f"r-{i}".encode() for i in range(records)]
    produce({"bootstrap.servers": cluster.bootstrap, "topic.metadata.refresh.interval.ms": 1000}, "rep", values)
    admin.wait_isr(3, 60, "rep")
    assert sorted(consume({"bootstrap.servers": cluster.bootstrap}, "rep", len(values))) == sorted(values)
