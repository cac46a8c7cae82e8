"""Checks of the suite's own tools that need no broker: the hand-written wire codec against two client
libraries' codecs, Python/Java record-content parity, the Java driver's codecs and bounded failures,
and KbrokerProcess's error reporting. If these fail, the other tests' verdicts cannot be trusted."""

from __future__ import annotations

import base64
import sys
import time

import pytest

from compat_tests import wire
from compat_tests.clients import JAVA_CLIENT_VERSION
from compat_tests.records import RecordSpec
from kbroker.testing import BrokerStartError, KbrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)


def test_crc32c_known_vector():
    assert wire.crc32c(b"123456789") == 0xE3069283
    assert wire.crc32c(b"") == 0


def test_varints():
    for v in (0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31)):
        enc = wire.varint(v)
        assert wire.Reader(enc).varint() == v
    assert wire.uvarint(300) == b"\xac\x02"
    assert wire.varint(-1) == b"\x01"


def test_batch_encoding_parsed_by_kafka_python():
    from kafka.record.default_records import DefaultRecordBatch

    recs = [wire.Rec(b"k1", b"v1", [("h", b"x"), ("n", None)], 1_700_000_000_000),
            wire.Rec(None, b"v2" * 100, [], 1_700_000_000_005),
            wire.Rec(b"k3", None, [("dup", b"a"), ("dup", b"b")], 1_699_999_999_999)]
    raw = wire.encode_batch(recs, base_offset=7, producer_id=42, producer_epoch=1, base_sequence=3)
    b = DefaultRecordBatch(bytearray(raw))
    assert b.validate_crc()
    assert (b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence) == (7, 42, 1, 3)
    assert b.max_timestamp == 1_700_000_000_005
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in b]
    assert got == [(7 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(recs)]
    # and our decoder reads back what it wrote
    (mine,) = wire.decode_batches(raw)
    assert mine.crc_ok and mine.count == 3 and mine.last_offset == 9
    assert [(r["key"], r["value"], r["headers"]) for r in mine.records] == [(r.key, r.value, r.headers) for r in recs]
    bad = wire.encode_batch(recs, crc=12345)
    assert not DefaultRecordBatch(bytearray(bad)).validate_crc()
    assert not wire.decode_batches(bad)[0].crc_ok


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_batch_decoding_of_kafka_python_batches(codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    bld = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=5,
                                    producer_epoch=0, base_sequence=0, batch_size=1 << 20)
    for i in range(4):
        bld.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"value" * 50, headers=[("i", b"%d" % i)])
    (b,) = wire.decode_batches(bytes(bld.build()))
    assert b.crc_ok and b.count == 4 and b.codec == wire.CODEC_NAMES[codec] and b.producer_id == 5
    if codec == 0:
        assert [r["key"] for r in b.records] == [b"k0", b"k1", b"k2", b"k3"]


def test_fetch_v4_request_matches_aiokafka_encoding():
    from aiokafka.protocol.fetch import FetchRequest_v4

    ours = wire.fetch_v4_body("some-topic", 2, 17, max_wait_ms=250, min_bytes=1, max_bytes=1000,
                              partition_max_bytes=500, isolation_level=1)
    theirs = FetchRequest_v4(-1, 250, 1, 1000, 1, [("some-topic", [(2, 17, 500)])]).encode()
    assert ours == theirs


def test_fetch_v4_response_parsing_matches_aiokafka_encoding():
    from aiokafka.protocol.fetch import FetchResponse_v4

    records = wire.encode_batch([wire.Rec(b"k", b"v", [], 1)], base_offset=5)
    body = FetchResponse_v4(0, [("t", [(3, 0, 6, 6, [], records)])]).encode()

    class FakeConn:
        def request(self, *a, **k):
            return wire.Reader(body)

    res = wire.fetch_v4(FakeConn(), "t", 3, 5)  # type: ignore[arg-type]
    assert (res.partition, res.error_code, res.high_watermark, res.last_stable_offset) == (3, 0, 6, 6)
    assert [b.base_offset for b in wire.decode_batches(res.records)] == [5]


def test_produce_v9_request_layout():
    batch = wire.encode_batch([wire.Rec(b"k", b"v", [], 1)])
    body = wire.produce_v9_body("t", 1, batch, acks=-1, timeout_ms=1000)
    rd = wire.Reader(body)
    assert rd.compact_string() is None  # transactional_id
    assert (rd.i16(), rd.i32()) == (-1, 1000)
    assert rd.uvarint() == 2  # one topic
    assert rd.compact_string() == "t"
    assert rd.uvarint() == 2  # one partition
    assert rd.i32() == 1
    assert rd.compact_bytes() == batch
    assert rd.tagged_fields() == {} and rd.tagged_fields() == {} and rd.tagged_fields() == {}
    assert rd.remaining() == 0


def test_record_spec_parity_with_java_driver(java_driver):
    spec = RecordSpec.new("parity", 40, partitions=3, pad=7)
    events = java_driver.run(["spec", "--count", str(spec.count)] + spec.java_args())
    assert len(events) == spec.count
    for e in events:
        i = e["index"]
        got = (e["partition"], e["timestamp"], e["key"] and base64.b64decode(e["key"]),
               e["value"] and base64.b64decode(e["value"]), [(k, base64.b64decode(v)) for k, v in e["headers"]])
        assert got == (spec.partition(i), spec.timestamp(i), spec.key(i), spec.value(i), spec.headers(i)), i


def test_java_driver_codecs_selftest(java_driver):
    events = java_driver.run(["selftest"])
    by_codec = {e["codec"]: e for e in events if e.get("event") == "selftest"}
    assert set(by_codec) == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert all(e["ok"] for e in by_codec.values()), by_codec
    done = java_driver.one(events, "done")
    assert done["client_version"] == JAVA_CLIENT_VERSION, done  # the jar the run was meant to use


def test_java_driver_fails_fast_on_closed_port(java_driver):
    port = free_port()
    t0 = time.monotonic()
    events = java_driver.run(["admin", "list-topics", "--bootstrap", f"127.0.0.1:{port}"], check=False, timeout=60)
    took = time.monotonic() - t0
    err = java_driver.one(events, "error")
    assert err["error_class"] == "TimeoutException", err
    assert java_driver.last_returncode == 1
    assert took < 30, f"closed port took {took:.1f}s to fail"


def test_java_driver_rejects_bad_usage(java_driver):
    events = java_driver.run(["produce", "--no-such-option", "1"], check=False)
    assert java_driver.one(events, "error")["error_class"] == "UsageException"
    assert java_driver.last_returncode == 2


def test_kbroker_process_config_and_command(tmp_path):
    proc = KbrokerProcess(tmp_path, overrides={"log.flush.interval.messages": 1, "num.partitions": "3"})
    proc.write_config()
    text = (tmp_path / "server.properties").read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{proc.port}" in text
    assert f"advertised.listeners=PLAINTEXT://127.0.0.1:{proc.port}" in text
    assert "process.roles=broker,controller" in text and "node.id=1" in text
    assert f"log.dirs={tmp_path / 'logs'}" in text
    cmd = proc.command()
    assert cmd[:5] == [sys.executable, "-m", "kbroker.cli.main", "server-start", str(tmp_path / "server.properties")]
    assert cmd[5:] == ["--override", "log.flush.interval.messages=1", "--override", "num.partitions=3"]
    assert proc.bootstrap == f"127.0.0.1:{proc.port}"


def test_kbroker_process_reports_a_broker_that_dies_at_startup(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    proc = KbrokerProcess(tmp_path / "data", python=str(fake), start_timeout=20)
    t0 = time.monotonic()
    with pytest.raises(BrokerStartError) as exc_info:
        proc.start()
    assert time.monotonic() - t0 < 10
    assert "boom: cannot start" in str(exc_info.value)
    assert proc.last_exit_code == 3 or not proc.is_running()
    assert "boom: cannot start" in proc.log_text()
