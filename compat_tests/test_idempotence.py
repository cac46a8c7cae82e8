"""Idempotent producers: retried batches are written once, in order, and acknowledged with their offsets.

* Each real client (Java kafka-clients with ``enable.idempotence=true``, ``acks=all``,
  ``max.in.flight.requests.per.connection=5``; confluent-kafka; aiokafka) produces N numbered records through
  ``DroppingProxy``, a loopback TCP proxy that forwards every request but now and then swallows a Produce
  *response* and closes the client's connection, so the client must retry a batch the broker already wrote.
  The partition is then read directly from the broker (raw Fetch, compat_tests/wire.py): records 0..N-1,
  each once, in order, at the offsets the producer was told.
* A broker killed with -9 and restarted still recognises a re-sent last batch of a producer (hand-built with
  ``kbroker.protocol.records.build_batch``, sent as a raw Produce with kbroker's codec): same offset, NONE,
  nothing written; an earlier batch is out of order, as in Kafka 4.3.1 (the state comes back from a snapshot).
* Raw requests for the rules themselves (sequence gap, old epoch, InitProducerId epoch bump); these run
  against any target, so they can be checked against Apache Kafka too.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
import time
import uuid
from typing import Any

import pytest

from compat_tests import wire
from compat_tests.clients import ProduceOptions, create_topic
from compat_tests.records import RecordSpec
from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES, ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import decode_request_header, encode_request_header, response_header_version
from kbroker.protocol.messages import InitProducerIdRequest, MetadataResponse, ProduceRequest
from kbroker.protocol.records import BATCH_HEADER, BATCH_HEADER_SIZE, build_batch
from kbroker.testing.plugin import split_bootstrap

pytestmark = pytest.mark.timeout(60)

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1", "ip6-localhost"}
N_RECORDS = 400


# ============================================================================================ the proxy


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _response_body_offset(frame: bytes, api_key: int, version: int) -> int:
    """Where the body starts in a response frame: after the correlation id, plus the tagged fields of a
    v1 response header."""
    pos = 4
    if response_header_version(api_key, version) == 1:
        count, pos = codec.read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = codec.read_uvarint(frame, pos)
            size, pos = codec.read_uvarint(frame, pos)
            pos += size
    return pos


class ProxyHub:
    """The proxies in front of one cluster (one per broker listener, created as Metadata names brokers) and
    the shared drop policy: the response to the ``first_drop``-th Produce request and every ``every``-th
    after it is swallowed, at most ``max_drops`` times."""

    def __init__(self, first_drop: int = 3, every: int = 6, max_drops: int = 8) -> None:
        self.first_drop, self.every, self.max_drops = first_drop, every, max_drops
        self.lock = threading.Lock()
        self.proxies: dict[tuple[str, int], DroppingProxy] = {}
        self.produce_requests = 0
        self.dropped = 0
        self.batches_forwarded: collections.Counter[tuple[Any, ...]] = collections.Counter()
        self.errors: list[str] = []

    def proxy_for(self, host: str, port: int) -> DroppingProxy:
        if host not in LOOPBACK_NAMES:
            raise AssertionError(f"the proxy only forwards to {LOOPBACK}; the broker advertises {host}:{port}")
        with self.lock:
            proxy = self.proxies.get((LOOPBACK, port))
            if proxy is None:
                proxy = self.proxies[(LOOPBACK, port)] = DroppingProxy(self, port)
            return proxy

    def decide_drop(self, frame: bytes, version: int, body_offset: int) -> bool:
        """Count a Produce request (and the batches in it); True if its response is to be swallowed."""
        req, _ = codec.decode(ProduceRequest, frame, version, body_offset)
        keys = []
        for t in req.topic_data:
            for p in t.partition_data:
                rec = p.records
                if rec is not None and len(rec) >= BATCH_HEADER_SIZE:
                    h = BATCH_HEADER.unpack_from(rec, 0)
                    keys.append((t.name or t.topic_id, p.index, h[9], h[10], h[11], h[6]))
        with self.lock:
            self.produce_requests += 1
            self.batches_forwarded.update(keys)
            n = self.produce_requests
            drop = (self.dropped < self.max_drops and n >= self.first_drop
                    and (n - self.first_drop) % self.every == 0)
            if drop:
                self.dropped += 1
            return drop

    @property
    def duplicate_batches(self) -> int:
        """Batches (same producer id, epoch, sequence) that reached the broker more than once."""
        return sum(1 for k, c in self.batches_forwarded.items() if c > 1 and k[2] >= 0)

    def close(self) -> None:
        for proxy in list(self.proxies.values()):
            proxy.close()


class DroppingProxy:
    """``127.0.0.1:<port>`` -> ``127.0.0.1:<upstream_port>``. Frames are forwarded as they are, except
    Metadata responses (broker addresses rewritten to proxies, so clients keep coming through here) and the
    Produce responses the hub drops: for those the proxy closes both connections instead of answering."""

    def __init__(self, hub: ProxyHub, upstream_port: int) -> None:
        self.hub = hub
        self.upstream_port = upstream_port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((LOOPBACK, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self.socks: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((LOOPBACK, self.upstream_port), timeout=10)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.socks.add(s)
            pending: dict[int, tuple[int, int, bool]] = {}
            threading.Thread(target=self._requests, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(client, upstream, pending), daemon=True).start()

    def _shut(self, *socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
            self.socks.discard(s)

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: dict) -> None:
        try:
            while True:
                frame = _read_frame(client)
                header = decode_request_header(frame)
                drop = False
                if header.api_key == ApiKey.PRODUCE:
                    drop = self.hub.decide_drop(frame, header.api_version, header.body_offset)
                pending[header.correlation_id] = (header.api_key, header.api_version, drop)
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError):
            pass
        except Exception as exc:  # noqa: BLE001 - a proxy bug must fail the test, not hang it
            self.hub.errors.append(f"request pump: {type(exc).__name__}: {exc}")
        self._shut(client, upstream)

    def _responses(self, client: socket.socket, upstream: socket.socket, pending: dict) -> None:
        try:
            while True:
                frame = _read_frame(upstream)
                (corr,) = struct.unpack_from(">i", frame, 0)
                api_key, version, drop = pending.pop(corr, (None, 0, False))
                if drop:
                    break  # the broker has written the batch; the client never hears about it
                if api_key == ApiKey.METADATA:
                    frame = self._rewrite_metadata(frame, version)
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError):
            pass
        except Exception as exc:  # noqa: BLE001
            self.hub.errors.append(f"response pump: {type(exc).__name__}: {exc}")
        self._shut(client, upstream)

    def _rewrite_metadata(self, frame: bytes, version: int) -> bytes:
        pos = _response_body_offset(frame, ApiKey.METADATA, version)
        msg, _ = codec.decode(MetadataResponse, frame, version, pos)
        for b in msg.brokers:
            proxy = self.hub.proxy_for(b.host, b.port)
            b.host, b.port = LOOPBACK, proxy.port
        return frame[:pos] + codec.encode(msg, version)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        self._shut(*list(self.socks))


@pytest.fixture
def proxy_hub(bootstrap_servers: str):
    host, port = split_bootstrap(bootstrap_servers)
    if host not in LOOPBACK_NAMES:
        pytest.skip(f"the dropping proxy only talks to {LOOPBACK}; the broker is at {bootstrap_servers}")
    hub = ProxyHub()
    hub.proxy_for(host, port)
    yield hub
    hub.close()


# ============================================================================================ checks


def check_exactly_once_in_order(bootstrap: str, topic: str, spec: RecordSpec, acks: list, hub: ProxyHub) -> None:
    """The partition (read straight from the broker) holds records 0..N-1 once each, in order, at the
    offsets the producer reported; and the proxy really made the client retry batches."""
    assert not hub.errors, hub.errors
    failed = [a for a in acks if a.error]
    assert not failed, f"{len(failed)} records not acknowledged, e.g. {failed[:3]}"
    assert sorted(a.index for a in acks) == list(range(spec.count))
    batches, hw = wire.read_log(bootstrap, topic, 0)
    records = []
    for b in batches:
        assert b.crc_ok and b.records is not None
        assert b.producer_id >= 0 and b.base_sequence >= 0, "the producer did not run idempotently"
        for r in b.records:
            records.append((b.base_offset + r["offset_delta"], r))
    idx = [int(dict(r["headers"])["idx"]) for _, r in records]
    dups = [i for i, c in collections.Counter(idx).items() if c > 1]
    assert not dups, f"records written twice: {dups[:20]}"
    assert idx == list(range(spec.count)), f"gaps or reordering: {idx[:50]}"
    assert hw == spec.count
    for (offset, r), i in zip(records, idx):
        assert offset == i and r["key"] == spec.key(i) and r["value"] == spec.value(i)
    wrong = [(a.index, a.offset) for a in acks if a.offset is not None and a.offset != a.index]
    assert not wrong, f"acknowledged at other offsets than where the records are: {wrong[:10]}"
    assert hub.dropped >= 1, f"the proxy dropped nothing ({hub.produce_requests} produce requests)"
    assert hub.duplicate_batches >= 1, "no batch reached the broker twice: the retry path was not exercised"


def new_spec(tag: str) -> RecordSpec:
    return RecordSpec.new(tag, N_RECORDS, partitions=1, nulls=False)


OPTS = ProduceOptions(acks="all", idempotence=True, linger_ms=5, batch_size=1024)


# ============================================================================================ clients


def test_java_retries_through_dropping_proxy(java_driver, topic_factory, bootstrap_servers, proxy_hub) -> None:
    from compat_tests.records import Ack

    topic = topic_factory(partitions=1)
    spec = new_spec("java-idem")
    proxy = next(iter(proxy_hub.proxies.values()))
    events = java_driver.run(
        ["produce", "--bootstrap", proxy.bootstrap, "--topic", topic, "--count", str(spec.count), "--acks", "all",
         "--idempotence", "true", "--linger-ms", str(OPTS.linger_ms), "--batch-size", str(OPTS.batch_size),
         *spec.java_args(), "--prop", "max.in.flight.requests.per.connection=5",
         "--prop", "enable.idempotence=true"], check=False, timeout=50)
    acks = []
    for e in events:
        if e.get("event") == "ack":
            acks.append(Ack(e["index"], e.get("partition"), e.get("offset"), None,
                            error=e.get("error") and f"{e.get('error_class')}: {e['error']}"))
    errors = [e for e in events if e.get("event") == "error"]
    assert not errors, f"{errors}\n{java_driver.last_stderr[-2000:]}"
    check_exactly_once_in_order(bootstrap_servers, topic, spec, acks, proxy_hub)


@pytest.mark.parametrize("client_name", ["confluent", "aiokafka"])
def test_python_clients_retry_through_dropping_proxy(client_name, get_client, topic_factory, bootstrap_servers,
                                                     proxy_hub) -> None:
    client = get_client(client_name)
    topic = topic_factory(partitions=1)
    spec = new_spec(f"{client_name}-idem")
    proxy = next(iter(proxy_hub.proxies.values()))
    result = client.produce(proxy.bootstrap, topic, spec, OPTS)
    check_exactly_once_in_order(bootstrap_servers, topic, spec, result.acks, proxy_hub)


# ============================================================================================ raw requests


class RawClient:
    """One connection speaking kbroker's own codec (request header + generated message classes)."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = split_bootstrap(bootstrap)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation_id = 0

    def call(self, msg: Any, version: int) -> Any:
        api_key = type(msg).API_KEY
        self.correlation_id += 1
        frame = encode_request_header(api_key, version, self.correlation_id, "kbroker-idempotence-test")
        frame += codec.encode(msg, version)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        resp = _read_frame(self.sock)
        assert struct.unpack_from(">i", resp, 0)[0] == self.correlation_id
        decoded, end = codec.decode(RESPONSES[api_key], resp, version, _response_body_offset(resp, api_key, version))
        assert end == len(resp)
        return decoded

    def init_producer_id(self, producer_id: int = -1, producer_epoch: int = -1, version: int = 4) -> Any:
        return self.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000,
                                               producer_id=producer_id, producer_epoch=producer_epoch), version)

    def produce(self, topic: str, batch: bytes, version: int = 9, transactional_id: str | None = None) -> Any:
        req = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        return self.call(req, version).responses[0].partition_responses[0]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def seq_batch(pid: int, epoch: int, seq: int, n: int = 3, tag: str = "b", txn: bool = False) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(f"{tag}-{seq + i}".encode(), f"{tag}-value-{seq + i}".encode(), [], now) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def produce_retrying(bootstrap: str, topic: str, batch: bytes, deadline_s: float = 20.0) -> Any:
    """Produce on a fresh connection, retrying while the partition has no leader yet (just restarted)."""
    end = time.monotonic() + deadline_s
    while True:
        c = RawClient(bootstrap)
        try:
            r = c.produce(topic, batch)
        finally:
            c.close()
        if r.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                ErrorCode.LEADER_NOT_AVAILABLE) or time.monotonic() > end:
            return r
        time.sleep(0.2)


def log_values(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    batches, _ = wire.read_log(bootstrap, topic, 0)
    return [(b.base_offset + r["offset_delta"], r["value"]) for b in batches for r in b.records]


def test_duplicate_after_kill9_and_restart_keeps_its_offset(kbroker_factory) -> None:
    broker = kbroker_factory()
    topic = f"idem-kill9-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    c = RawClient(broker.bootstrap)
    ipid = c.init_producer_id()
    deadline = time.monotonic() + 30
    # a broker just started may not have a block of producer ids yet: COORDINATOR_LOAD_IN_PROGRESS, retriable
    while ipid.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
        time.sleep(0.2)
        ipid = c.init_producer_id()
    assert ipid.error_code == 0 and ipid.producer_id >= 0 and ipid.producer_epoch == 0
    pid = ipid.producer_id
    sent = [seq_batch(pid, 0, 3 * k) for k in range(7)]
    offsets = []
    for b in sent:
        r = c.produce(topic, b)
        assert r.error_code == 0, r
        offsets.append(r.base_offset)
    assert offsets == [3 * k for k in range(7)]
    c.close()
    before = log_values(broker.bootstrap, topic)

    broker.kill()  # SIGKILL: no snapshot at shutdown; producer state must come back from the log
    broker.start()
    # as Kafka 4.3.1: the state rebuilt from the log is loaded from the snapshot recovery writes at the log end,
    # which keeps each producer's last batch only: a retry of that one is a duplicate (its offset answered),
    # one of an earlier batch, even inside the window of 5, is out of order
    r = produce_retrying(broker.bootstrap, topic, sent[6])
    assert (r.error_code, r.base_offset) == (0, offsets[6]), r
    for k in (2, 4, 1):
        r = produce_retrying(broker.bootstrap, topic, sent[k])
        assert r.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (k, r)
    assert log_values(broker.bootstrap, topic) == before  # nothing written again

    broker.stop()  # clean: a snapshot at the log end; only the last batch is remembered across it (Kafka)
    broker.start()
    r = produce_retrying(broker.bootstrap, topic, sent[6])
    assert (r.error_code, r.base_offset) == (0, offsets[6]), r
    r = produce_retrying(broker.bootstrap, topic, seq_batch(pid, 0, 21))
    assert (r.error_code, r.base_offset) == (0, 21), r
    assert len(log_values(broker.bootstrap, topic)) == 24


@pytest.mark.kafka_reference
def test_sequence_and_epoch_errors_write_nothing(bootstrap_servers, topic_factory) -> None:
    topic = topic_factory(partitions=1)
    c = RawClient(bootstrap_servers)
    try:
        pid = c.init_producer_id().producer_id
        assert c.produce(topic, seq_batch(pid, 0, 0)).error_code == 0
        assert c.produce(topic, seq_batch(pid, 0, 5)).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # gap
        assert c.produce(topic, seq_batch(pid, 1, 3)).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # new epoch
        assert c.produce(topic, seq_batch(pid, 1, 0)).error_code == 0  # new epoch from 0 (bumped by hand)
        assert c.produce(topic, seq_batch(pid, 0, 3)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        dup = c.produce(topic, seq_batch(pid, 1, 0))
        assert (dup.error_code, dup.base_offset) == (0, 3)
        # a producer id this partition has never seen is accepted at any sequence (Kafka 4.x)
        assert c.produce(topic, seq_batch(pid + 1_000_000, 0, 42)).error_code == 0
        # a transactional batch without a transactional id
        r = c.produce(topic, seq_batch(pid, 1, 3, txn=True))
        assert r.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # an idempotent batch without a sequence
        no_seq = build_batch([(b"k", b"v", [], 1)], producer_id=pid, producer_epoch=1, base_sequence=-1)
        assert c.produce(topic, no_seq).error_code == ErrorCode.INVALID_RECORD
    finally:
        c.close()
    assert len(log_values(bootstrap_servers, topic)) == 9


def test_init_producer_id_epoch_bump_hands_out_a_new_producer_id(bootstrap_servers) -> None:
    c = RawClient(bootstrap_servers)
    try:
        first = c.init_producer_id(version=4)
        assert first.error_code == 0 and first.producer_epoch == 0
        bumped = c.init_producer_id(first.producer_id, first.producer_epoch, version=4)  # KIP-360, idempotent
        assert bumped.error_code == 0 and bumped.producer_id != first.producer_id and bumped.producer_epoch == 0
        bad = c.init_producer_id(first.producer_id, -1, version=4)
        assert (bad.error_code, bad.producer_id, bad.producer_epoch) == (ErrorCode.INVALID_REQUEST, -1, -1)
    finally:
        c.close()
