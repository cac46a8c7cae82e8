"""Helpers shared by the TLS, SASL and authorization tests (compat_tests/test_tls.py, test_sasl.py,
test_authorization.py): a confluent-kafka round trip with extra client settings, a 3-node cluster whose
inter-broker traffic goes over an extra INTERNAL listener, and a raw connection (``Wire``) for requests the
clients do not send as such."""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES
from kbroker.protocol.headers import encode_request_header, response_header_version
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


class Wire:
    """A raw connection: the SASL exchange itself, or requests sent as built (``send(message, version)``)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.corr = 0

    def send(self, msg, version: int):  # noqa: ANN001, ANN201
        key = type(msg).API_KEY
        self.corr += 1
        body = encode_request_header(key, version, self.corr, "sasl-test") + codec.encode(msg, version)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        frame = self.frame()
        pos = 4
        if response_header_version(key, version) >= 1:
            pos = codec._skip_tagged(frame, pos)
        return codec.decode(RESPONSES[key], frame, version, pos)[0]

    def raw(self, token: bytes) -> bytes:
        self.sock.sendall(struct.pack(">i", len(token)) + token)
        return self.frame()

    def frame(self) -> bytes:
        head = self._recv(4)
        return self._recv(struct.unpack(">i", head)[0])

    def _recv(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def closed_within(self, seconds: float) -> bool:
        self.sock.settimeout(seconds)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, OSError):
            return True

    def close(self) -> None:
        self.sock.close()
