"""The link-fault proxy (kbroker.testing.proxy) in front of a real kbroker, with confluent-kafka clients: what a
client sees when its link is partitioned, cut or slowed, and that every acknowledged record is there after the
link heals. The cluster tests use the same proxy on node-to-node links."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbroker.testing.plugin import free_port
from kbroker.testing.proxy import TcpProxy

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def proxied(kbroker_factory):
    """A kbroker that advertises a proxy's address, so every client byte crosses the proxy."""
    port = free_port()
    proxy = TcpProxy("127.0.0.1", port).start()
    adv = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    broker = kbroker_factory(overrides={"listeners": f"PLAINTEXT://127.0.0.1:{port}", "advertised.listeners": adv},
                             port=port)
    try:
        yield broker, proxy
    finally:
        proxy.stop()


def produce(bootstrap: str, topic: str, values: list[bytes], timeout_ms: int = 30000) -> list[tuple[int, object]]:
    acks: list[tuple[int, object]] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": timeout_ms, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: acks.append((msg.offset(), err)))
    p.flush(timeout_ms / 1000 + 5)
    return acks


def consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.time() + 30
    while len(out) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def test_partition_stalls_then_heals_with_nothing_lost(proxied):
    broker, proxy = proxied
    topic = f"proxy-{uuid.uuid4().hex[:8]}"
    assert [err for _, err in produce(proxy.address, topic, [b"before"])] == [None]
    p = Producer({"bootstrap.servers": proxy.address, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000, "linger.ms": 0})
    acks: list[tuple[int, object]] = []
    proxy.partition()
    t0 = time.monotonic()
    for i in range(10):
        p.produce(topic, f"during-{i}".encode(), on_delivery=lambda err, msg: acks.append((msg.offset(), err)))
    p.poll(3.0)
    assert acks == [], "nothing can be acknowledged through a partitioned link"
    proxy.heal()
    p.flush(40)
    assert [err for _, err in acks] == [None] * 10
    assert time.monotonic() - t0 >= 3.0
    got = consume(proxy.address, topic, 11)
    assert got == [b"before"] + [f"during-{i}".encode() for i in range(10)]


def test_cut_closes_connections_and_clients_reconnect(proxied):
    broker, proxy = proxied
    topic = f"proxy-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": proxy.address, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 30000, "linger.ms": 0, "reconnect.backoff.ms": 50})
    acks: list[object] = []
    p.produce(topic, b"a", on_delivery=lambda err, msg: acks.append(err))
    p.flush(20)
    accepted = proxy.connections_accepted
    proxy.cut()
    time.sleep(0.5)
    proxy.heal()
    p.produce(topic, b"b", on_delivery=lambda err, msg: acks.append(err))
    p.flush(30)
    assert acks == [None, None]
    assert proxy.connections_accepted > accepted, "the producer had to reconnect after the cut"
    assert consume(proxy.address, topic, 2) == [b"a", b"b"]


def test_delay_slows_every_round_trip(proxied):
    broker, proxy = proxied
    topic = f"proxy-{uuid.uuid4().hex[:8]}"
    produce(proxy.address, topic, [b"warm"])
    proxy.set_delay(150)
    p = Producer({"bootstrap.servers": proxy.address, "acks": "all", "linger.ms": 0})
    sent = time.monotonic()
    done: list[float] = []
    p.produce(topic, b"slow", on_delivery=lambda err, msg: done.append(time.monotonic()))
    p.flush(20)
    assert done and done[0] - sent >= 0.3  # 150 ms each way
    proxy.set_delay(0)


def test_proxy_listens_on_loopback_only():
    with pytest.raises(ValueError):
        TcpProxy("127.0.0.1", 9, listen_host="0.0.0.0")
