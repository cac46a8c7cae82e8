"""A live fuzzer: several connections send mutated versions of the golden request frames (real clients'
requests) to a running broker, while a well-behaved client keeps asking for metadata and producing. The
well-behaved client must get every answer within 1 s, and the broker must still be running with no traceback
in its log. A short seeded slice here; longer runs: KBROKER_LIVE_FUZZ_SECONDS."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Producer

from kbroker.cli._wire import Connection, split_hostport
from kbroker.protocol.messages import MetadataRequest
from kbroker.testing.fuzz import golden_requests, mutate

pytestmark = pytest.mark.timeout(300)
SECONDS = float(os.environ.get("KBROKER_LIVE_FUZZ_SECONDS", "20"))


def fuzz_connection(port: int, seed: int, stop: threading.Event, sent: list[int]) -> None:
    rng = random.Random(seed)
    corpus = golden_requests()
    sock = None
    while not stop.is_set():
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.settimeout(0.5)
            frame = mutate(rng, rng.choice(corpus), corpus)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sent[0] += 1
            try:
                if sock.recv(65536) == b"":
                    sock.close()
                    sock = None
            except socket.timeout:
                pass
        except OSError:
            if sock is not None:
                sock.close()
            sock = None
            time.sleep(0.01)
    if sock is not None:
        sock.close()


def test_live_fuzz_keeps_the_broker_answering(kbroker_factory):
    broker = kbroker_factory()
    stop = threading.Event()
    sent = [0]
    threads = [threading.Thread(target=fuzz_connection, args=(broker.port, seed, stop, sent), daemon=True)
               for seed in range(4)]
    for t in threads:
        t.start()
    host, port = split_hostport(broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 10000})
    worst = 0.0
    checks = 0
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            conn = Connection(host, port, 5.0, "well-behaved")
            try:
                md = conn.send(MetadataRequest(topics=None), 12)
            finally:
                conn.close()
            assert md.brokers
            acks: list[object] = []
            producer.produce("well-behaved", b"x", on_delivery=lambda err, msg: acks.append(err))
            producer.flush(10)
            assert acks == [None]
            took = time.monotonic() - t0
            worst = max(worst, took)
            checks += 1
            assert took < 1.0, f"a well-behaved client waited {took:.2f} s"
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert broker.is_running()
    log = broker.log_tail(5000)
    assert "Traceback" not in log and "error processing request" not in log, log[-3000:]
    print(f"live fuzz: {sent[0]} mutated requests in {SECONDS:.0f} s; {checks} well-behaved round trips, "
          f"slowest {worst * 1000:.0f} ms")
    assert sent[0] > 1000
