"""Malformed input on raw sockets: the broker rejects it the way Kafka does and keeps serving.

Frames are built by hand with struct (compat_tests/wire.py), independent of kbroker's codec. After every
case a normal confluent-kafka client must still produce and consume, and for the Produce cases the
partition must hold only the good records (checked with a real consumer and with a raw Fetch whose
batches are all CRC-valid).

Kafka behaviour relied on (SocketServer / RequestContext / ProduceRequest.validateRecords / LogValidator):
* a frame arriving in pieces is reassembled; a half-sent frame just waits for more bytes;
* size > socket.request.max.bytes or negative (InvalidReceiveException), unknown API key, unsupported
  version of any API but ApiVersions: the connection is closed, no response;
* ApiVersions with an unsupported version: a v0-format response, error UNSUPPORTED_VERSION (35), listing
  ApiVersions' own range, and the connection stays open;
* Produce: bad CRC -> CORRUPT_MESSAGE (2); unknown magic -> CORRUPT_MESSAGE; legacy magic in Produce v3+
  -> INVALID_RECORD (87); declared record count != actual -> INVALID_RECORD; nothing is appended.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from compat_tests import wire
from compat_tests.clients import ConfluentClient, ProduceOptions
from compat_tests.records import RecordSpec, verify_round_trip

pytestmark = [pytest.mark.timeout(90), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too

CLOSE_TIMEOUT = 10.0


# ---------------------------------------------------------------------------------------------- helpers


@pytest.fixture
def conn(bootstrap_servers):
    c = wire.KafkaConnection.to(bootstrap_servers, timeout=15)
    yield c
    c.close()


def assert_healthy(bootstrap: str, topic_factory, kafka_broker) -> None:
    """The broker still answers raw ApiVersions on a new connection, and a real client round-trips."""
    if hasattr(kafka_broker, "proc"):
        assert kafka_broker.is_running(), f"kbroker died:\n{kafka_broker.log_tail(60)}"
    with wire.KafkaConnection.to(bootstrap) as c:
        assert wire.api_versions(c, 3).error_code == wire.NONE
    topic = topic_factory(1)
    spec = RecordSpec.new(f"health-{uuid.uuid4().hex[:4]}", 5, partitions=1)
    produced = ConfluentClient().produce(bootstrap, topic, spec, ProduceOptions(linger_ms=0))
    verify_round_trip(spec, produced.acks, ConfluentClient().consume(bootstrap, topic, spec.count, timeout=20))


def assert_closed(c: wire.KafkaConnection, what: str) -> None:
    closed, data = c.wait_closed(CLOSE_TIMEOUT)
    assert closed, f"{what}: connection still open after {CLOSE_TIMEOUT}s (received {data[:64]!r})"
    assert not data, f"{what}: expected the connection closed without a response, got {data[:64]!r}"


def api_versions_frame(corr: int, version: int = 0) -> bytes:
    hv = 2 if version >= 3 else 1
    return wire.frame(wire.request_header(wire.API_API_VERSIONS, version, corr, "raw", hv)
                      + wire.api_versions_body(version))


# ---------------------------------------------------------------------------------------------- framing


def test_frame_sent_in_pieces_is_reassembled(conn):
    data = api_versions_frame(77, 0)
    conn.send_raw(data[:2])
    time.sleep(0.3)
    conn.send_raw(data[2:9])
    closed, got = conn.wait_closed(0.5)
    assert not closed and not got, "broker answered or closed on a partial frame instead of waiting for the rest"
    conn.send_raw(data[9:])
    rd = wire.Reader(conn.recv_frame())
    assert rd.i32() == 77
    res = wire.parse_api_versions_v0(rd)
    assert res.error_code == wire.NONE and wire.API_API_VERSIONS in res.api_keys


def test_truncated_frame_then_close(conn, bootstrap_servers, topic_factory, kafka_broker):
    conn.send_raw(wire.i32(100) + b"\x00\x12\x00\x00\x00\x00")  # promises 100 bytes, sends 6
    closed, got = conn.wait_closed(1.0)
    assert not closed and not got, "a half-sent frame must just wait for more bytes"
    conn.close()
    time.sleep(0.2)
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


@pytest.mark.parametrize("size", [104_857_601, 0x7FFFFFFF], ids=["default-limit+1", "int32-max"])
def test_oversize_frame_closes(conn, size, bootstrap_servers, topic_factory, kafka_broker):
    """size > socket.request.max.bytes (default 104857600): closed without reading the body."""
    conn.send_raw(wire.i32(size) + b"\x00\x12\x00\x00")
    assert_closed(conn, f"frame size {size}")
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


@pytest.mark.parametrize("size", [-1, -2147483648], ids=["minus-one", "int32-min"])
def test_negative_length_frame_closes(conn, size, bootstrap_servers, topic_factory, kafka_broker):
    conn.send_raw(wire.i32(size) + b"\x00" * 16)
    assert_closed(conn, f"frame size {size}")
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


def test_http_request_on_kafka_port_closes(conn, bootstrap_servers, topic_factory, kafka_broker):
    conn.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: kbroker-compat\r\n\r\n")
    closed, data = conn.wait_closed(CLOSE_TIMEOUT)
    assert closed, "an HTTP request on the Kafka port must get the connection closed"
    assert b"HTTP/" not in data, f"broker answered HTTP: {data[:80]!r}"
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


def test_request_over_configured_max_bytes_closes(kbroker_factory):
    """socket.request.max.bytes is honoured: with 2048, a 4096-byte request closes the connection while
    a small request on another connection is served."""
    broker = kbroker_factory({"socket.request.max.bytes": "2048"})
    with wire.KafkaConnection.to(broker.bootstrap) as c:
        body = wire.request_header(wire.API_API_VERSIONS, 0, 5, "x" * 4000)
        c.send_raw(wire.frame(body))
        assert_closed(c, "4 KiB request with socket.request.max.bytes=2048")
    with wire.KafkaConnection.to(broker.bootstrap) as c:
        assert wire.api_versions(c, 3).error_code == wire.NONE
    assert broker.is_running()


# ---------------------------------------------------------------------------------------------- headers / versions


@pytest.mark.parametrize("api_key", [32000, 9999, -1], ids=["32000", "9999", "minus-one"])
def test_unknown_api_key_closes(conn, api_key, bootstrap_servers, topic_factory, kafka_broker):
    conn.send_raw(wire.frame(wire.request_header(api_key, 0, 1, "raw") + b"\x00" * 8))
    assert_closed(conn, f"unknown api key {api_key}")
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


@pytest.mark.parametrize("which", ["max+1", "int16-max"])
def test_unsupported_version_of_metadata_closes(bootstrap_servers, which, topic_factory, kafka_broker):
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        lo, hi = wire.api_versions(c, 3).api_keys[wire.API_METADATA]
    version = hi + 1 if which == "max+1" else 0x7FFF
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        c.send_raw(wire.frame(wire.request_header(wire.API_METADATA, version, 1, "raw", header_version=2)
                              + wire.uvarint(1) + wire.NO_TAGS))
        assert_closed(c, f"Metadata v{version} (broker supports v{lo}-v{hi})")
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


def test_api_versions_unsupported_version_gets_v0_error_response(conn):
    corr = 4242
    conn.send_raw(api_versions_frame(corr, 99))
    rd = wire.Reader(conn.recv_frame())
    assert rd.i32() == corr  # ApiVersions responses always use response header v0
    res = wire.parse_api_versions_v0(rd)
    assert res.error_code == wire.UNSUPPORTED_VERSION, res
    assert wire.API_API_VERSIONS in res.api_keys, f"the error response must list ApiVersions' range: {res}"
    lo, hi = res.api_keys[wire.API_API_VERSIONS]
    assert lo == 0 and hi >= 3, (lo, hi)
    assert rd.remaining() == 0, f"{rd.remaining()} unexpected trailing bytes (v0 has no throttle_time_ms)"
    # the connection stays open: the client retries with a version it now knows
    again = wire.api_versions(conn, 3)
    assert again.error_code == wire.NONE and again.api_keys[wire.API_API_VERSIONS] == (lo, hi)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_each_version_parses(conn, version):
    res = wire.api_versions(conn, version)
    assert res.error_code == wire.NONE
    for key in (wire.API_PRODUCE, wire.API_FETCH, wire.API_LIST_OFFSETS, wire.API_METADATA, wire.API_API_VERSIONS):
        assert key in res.api_keys, f"ApiVersions v{version} does not list api key {key}"
        lo, hi = res.api_keys[key]
        assert 0 <= lo <= hi, (key, lo, hi)
    assert res.api_keys[wire.API_PRODUCE][0] <= 9 <= res.api_keys[wire.API_PRODUCE][1], "Produce v9 unsupported"
    assert res.api_keys[wire.API_FETCH][0] <= 4 <= res.api_keys[wire.API_FETCH][1], "Fetch v4 unsupported"
    if version >= 1:
        assert res.throttle_time_ms is not None and res.throttle_time_ms >= 0


# ---------------------------------------------------------------------------------------------- produce


def good_records(n: int, tag: str, start: int = 0) -> list[wire.Rec]:
    ts = int(time.time() * 1000)
    return [wire.Rec(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), [("raw", str(i).encode())], ts + i)
            for i in range(start, start + n)]


class RawProduceLog:
    """One partition written with hand-encoded Produce v9 requests; tracks what must be in the log."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.good: list[wire.Rec] = []

    def produce_good(self, conn: wire.KafkaConnection, n: int = 3) -> None:
        recs = good_records(n, "good", len(self.good))
        res = wire.produce_v9(conn, self.topic, 0, wire.encode_batch(recs))
        assert res.error_code == wire.NONE, f"valid hand-encoded batch rejected: {res}"
        assert res.base_offset == len(self.good), \
            f"base offset {res.base_offset}, expected {len(self.good)} (a rejected batch took offsets?)"
        self.good += recs

    def check(self) -> None:
        """Raw Fetch: only valid batches holding exactly the good records; a real consumer agrees."""
        batches, hw = wire.read_log(self.bootstrap, self.topic, 0)
        assert hw == len(self.good), f"high watermark {hw}, {len(self.good)} good records written"
        assert all(b.crc_ok and b.magic == 2 for b in batches), [(b.base_offset, b.crc_ok, b.magic) for b in batches]
        stored = [(r["key"], r["value"], r["headers"]) for b in batches for r in (b.records or [])]
        assert stored == [(r.key, r.value, r.headers) for r in self.good]
        consumed = ConfluentClient().consume(self.bootstrap, self.topic, len(self.good), timeout=20)
        assert [(c.offset, c.key, c.value, c.headers, c.timestamp) for c in consumed] == \
            [(i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(self.good)]


@pytest.fixture
def raw_log(bootstrap_servers, topic_factory):
    log = RawProduceLog(bootstrap_servers, topic_factory(1))
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        log.produce_good(c)  # also proves the hand encoder is right: the broker accepts it
    return log


def test_raw_produce_v9_positive_control(raw_log, bootstrap_servers):
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        raw_log.produce_good(c, 5)
    raw_log.check()


def _bad_produce(raw_log, bootstrap_servers, batch: bytes, allowed: set[int], what: str, topic_factory,
                 kafka_broker) -> None:
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        res = wire.produce_v9(c, raw_log.topic, 0, batch)
        assert res.error_code in allowed, f"{what}: error code {res.error_code} ({res.error_message}), " \
                                          f"expected one of {sorted(allowed)}"
        # the same connection keeps working and the rejected batch took no offsets
        raw_log.produce_good(c)
    raw_log.check()
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


def test_produce_bad_crc_is_corrupt_message(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    batch = wire.encode_batch(good_records(3, "badcrc"))
    good_crc = struct.unpack_from(">I", batch, 17)[0]
    bad = wire.encode_batch(good_records(3, "badcrc"), crc=good_crc ^ 0x5A5A5A5A)
    _bad_produce(raw_log, bootstrap_servers, bad, {wire.CORRUPT_MESSAGE}, "bad CRC", topic_factory, kafka_broker)


def test_produce_flipped_payload_byte_is_corrupt_message(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    batch = bytearray(wire.encode_batch(good_records(3, "flip")))
    batch[-3] ^= 0xFF  # inside the last record's header value; CRC no longer matches
    _bad_produce(raw_log, bootstrap_servers, bytes(batch), {wire.CORRUPT_MESSAGE}, "flipped byte", topic_factory,
                 kafka_broker)


def test_produce_unknown_magic_is_corrupt_message(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    bad = wire.encode_batch(good_records(2, "magic3"), magic=3)
    _bad_produce(raw_log, bootstrap_servers, bad, {wire.CORRUPT_MESSAGE}, "magic 3", topic_factory, kafka_broker)


def test_produce_legacy_magic_is_rejected(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    bad = wire.encode_batch(good_records(2, "magic1"), magic=1)
    _bad_produce(raw_log, bootstrap_servers, bad, {wire.INVALID_RECORD, wire.CORRUPT_MESSAGE},
                 "magic 1 in Produce v9", topic_factory, kafka_broker)


@pytest.mark.parametrize("declared", [3, 1, 0], ids=["more-than-sent", "fewer-than-sent", "zero"])
def test_produce_record_count_mismatch_is_rejected(raw_log, bootstrap_servers, declared, topic_factory,
                                                   kafka_broker):
    bad = wire.encode_batch(good_records(2, "count"), count=declared)  # 2 records, CRC valid
    _bad_produce(raw_log, bootstrap_servers, bad, {wire.INVALID_RECORD, wire.CORRUPT_MESSAGE},
                 f"2 records declared as {declared}", topic_factory, kafka_broker)


def test_produce_garbage_compressed_payload_is_rejected(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    """gzip attribute, valid CRC, but the payload is not gzip: rejected with an error, nothing stored."""
    recs = good_records(2, "gzip")
    bad = wire.encode_batch(recs, attributes=1, records_blob=b"this is not gzip data" * 4)
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        res = wire.produce_v9(c, raw_log.topic, 0, bad)
        assert res.error_code != wire.NONE, f"garbage gzip payload accepted: {res}"
        raw_log.produce_good(c)
    raw_log.check()
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)


def test_produce_truncated_batch_is_rejected(raw_log, bootstrap_servers, topic_factory, kafka_broker):
    """batchLength says more bytes than the records field holds."""
    batch = wire.encode_batch(good_records(3, "trunc"))
    with wire.KafkaConnection.to(bootstrap_servers) as c:
        res = wire.produce_v9(c, raw_log.topic, 0, batch[:-7])
        assert res.error_code in {wire.CORRUPT_MESSAGE, wire.INVALID_RECORD}, res
        raw_log.produce_good(c)
    raw_log.check()
    assert_healthy(bootstrap_servers, topic_factory, kafka_broker)
