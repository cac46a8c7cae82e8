"""Large Fetch responses go out with sendfile, also when the client reads slowly and the socket buffer
fills (the broker waits for writability and carries on). The bytes must be exactly the stored batches."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.protocol import codec
from kbroker.protocol.headers import encode_request_header
from kbroker.protocol.messages import FetchRequest, FetchResponse
from kbroker.protocol.records import iter_batches


def _recv_exact(sock: socket.socket, n: int, slow: bool) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 65536 if slow else 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
        if slow and len(out) < 4 << 20:
            time.sleep(0.002)  # a slow reader for the first 4 MiB: the broker's socket buffer fills up
    return bytes(out)


def _fetch(bootstrap: str, topic: str, slow: bool) -> FetchResponse:
    host, port = bootstrap.rsplit(":", 1)
    req = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                           partition_max_bytes=64 << 20, last_fetched_epoch=-1)])])
    body = encode_request_header(1, 12, 7, "zero-copy-test") + codec.encode(req, 12)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exact(sock, 4, False))[0]
        frame = _recv_exact(sock, size, slow)
    assert struct.unpack_from(">i", frame, 0)[0] == 7
    resp, end = codec.decode(FetchResponse, frame, 12, 5)  # v12 is flexible: correlation id + tagged byte
    assert end == len(frame)
    return resp


@pytest.mark.timeout(120)
@pytest.mark.parametrize("slow", [False, True], ids=["fast-reader", "slow-reader"])
def test_large_fetch_is_byte_exact(bootstrap_servers, slow):
    topic = f"zero-copy-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none"})
    count, size = 12000, 1000
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=(str(i).encode() * size)[:size])
    assert producer.flush(60) == 0
    resp = _fetch(bootstrap_servers, topic, slow)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == count
    data = bytes(part.records)
    assert len(data) > 8 << 20  # big enough that the socket buffer must fill at least once
    offsets = []
    for batch in iter_batches(data):
        assert batch.verify_crc()
        for rec in batch.records():
            offsets.append(rec.offset)
            assert rec.value == (str(rec.offset).encode() * size)[:size]
    assert offsets == list(range(count))
