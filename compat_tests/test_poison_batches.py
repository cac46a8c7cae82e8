"""Poison batches: a batch whose header and CRC are valid but whose records are malformed must be refused
before anything is appended, as Kafka's LogValidator refuses it (every record's length, varints, key/value and
header lengths, the count against the header; compressed batches after decompression).

Before the record check existed, such batches were accepted with error 0; afterwards confluent-kafka consumers
stalled at that offset and kafka-python raised CorruptRecordError. Here each kind of poison batch, uncompressed
and in gzip, lz4 and zstd, is sent with hand-encoded Produce v9 (compat_tests/wire.py, independent of
kbroker's codec; no client library writes malformed records) and must get INVALID_RECORD with the bad record's
index in ``record_errors``; then good batches around it are read back complete and in order by confluent-kafka
and kafka-python.
"""

from __future__ import annotations

import gzip
import time

import lz4.frame
import pytest
import zstandard

from compat_tests import wire
from compat_tests.clients import ConfluentClient, KafkaPythonClient
from kbroker.testing.plugin import current_target

pytestmark = pytest.mark.timeout(240)

COMPRESS = {
    "none": (0, lambda b: b),
    "gzip": (1, gzip.compress),
    "lz4": (3, lambda b: lz4.frame.compress(b, store_size=False, content_checksum=False)),
    "zstd": (4, lambda b: zstandard.ZstdCompressor().compress(b)),
}


def rec(i: int, ts: int, tag: str = "p") -> wire.Rec:
    return wire.Rec(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), [("h", b"x")], ts + i)


def records_blob(recs: list[wire.Rec]) -> bytes:
    return b"".join(wire.encode_record(i, r.timestamp - recs[0].timestamp, r) for i, r in enumerate(recs))


def body_of(record: bytes) -> bytes:
    """The body of one encoded record (its length varint dropped)."""
    pos = 0
    while record[pos] & 0x80:
        pos += 1
    return record[pos + 1:]


def with_length(body: bytes) -> bytes:
    return wire.varint(len(body)) + body


def poison(kind: str, recs: list[wire.Rec]) -> tuple[bytes, int]:
    """(records blob, index of the bad record or -1) for 5 records where record 2 is malformed."""
    ts0 = recs[0].timestamp
    enc = [wire.encode_record(i, r.timestamp - ts0, r) for i, r in enumerate(recs)]
    body = body_of(enc[2])
    if kind == "length-past-batch":
        enc[2] = wire.varint(len(body) + 500) + body
        return b"".join(enc[:3]), 2
    if kind == "length-short":  # the record claims fewer bytes than its fields use
        enc[2] = wire.varint(len(body) - 3) + body
    elif kind == "length-long":  # bytes left inside the record
        enc[2] = with_length(body + b"\x00\x00")
    elif kind == "key-past-record":  # key length larger than the record
        enc[2] = with_length(body[:3] + wire.varint(200) + body[4:])
    elif kind == "varint-too-long":  # the offset delta as 6 continuation bytes
        enc[2] = with_length(body[:2] + b"\xff" * 6 + b"\x00" + body[3:])
    elif kind == "negative-header-count":
        enc[2] = with_length(body[:-5] + wire.varint(-1))
    elif kind == "offset-delta":  # record 2 says it is record 4
        enc[2] = with_length(body[:2] + wire.varint(4) + body[3:])
    elif kind == "missing-records":  # the header says 5, the batch holds 2
        return b"".join(enc[:2]), 2
    elif kind == "trailing-bytes":
        return b"".join(enc) + b"\x00\x00\x00", -1
    else:
        raise AssertionError(kind)
    return b"".join(enc), 2


KINDS = ["length-past-batch", "length-short", "length-long", "key-past-record", "varint-too-long",
         "negative-header-count", "offset-delta", "missing-records", "trailing-bytes"]


def on_kbroker() -> bool:
    return current_target() == "kbroker"


def kafka_checks(kind: str, codec: str) -> bool:
    """Whether Apache Kafka 4.3.1 refuses this poison batch too. It does not check an uncompressed record's offset
    delta (the batch is appended), a compressed batch's record claiming fewer bytes than it holds (appended), or a
    compressed record's offset delta (UNKNOWN_SERVER_ERROR): kbroker refuses all three with INVALID_RECORD, so they
    are checked on kbroker only."""
    if kind == "offset-delta":
        return False
    return not (kind == "length-short" and codec != "none")


class Partition:
    """One partition written with hand-encoded Produce v9; remembers the good records it holds."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic, self.good = bootstrap, topic, []

    def produce_good(self, conn: wire.KafkaConnection, codec: str, n: int = 4) -> None:
        ts = int(time.time() * 1000)
        recs = [rec(len(self.good) + i, ts, "good") for i in range(n)]
        attr, comp = COMPRESS[codec]
        res = wire.produce_v9(conn, self.topic, 0, wire.encode_batch(recs, attributes=attr,
                                                                     records_blob=comp(records_blob(recs))))
        assert res.error_code == wire.NONE, res
        assert res.base_offset == len(self.good), "a refused batch took offsets"
        self.good += recs

    def check_consumers(self) -> None:
        want = [(i, r.key, r.value) for i, r in enumerate(self.good)]
        for client in (ConfluentClient(), KafkaPythonClient()):
            got = client.consume(self.bootstrap, self.topic, len(self.good), timeout=30)
            assert [(c.offset, c.key, c.value) for c in got] == want, f"{client.name} read {len(got)} records"


@pytest.mark.parametrize("codec", list(COMPRESS))
def test_poison_batches_are_refused_and_consumers_read_on(bootstrap_servers, topic_factory, codec):
    part = Partition(bootstrap_servers, topic_factory(1))
    attr, comp = COMPRESS[codec]
    with wire.KafkaConnection.to(bootstrap_servers) as conn:
        part.produce_good(conn, codec)
        for kind in KINDS:
            if not on_kbroker() and not kafka_checks(kind, codec):
                continue
            recs = [rec(i, int(time.time() * 1000)) for i in range(5)]
            blob, index = poison(kind, recs)
            batch = wire.encode_batch(recs, attributes=attr, records_blob=comp(blob))  # CRC valid
            res = wire.produce_v9(conn, part.topic, 0, batch)
            assert res.error_code == wire.INVALID_RECORD, f"{kind}/{codec}: {res}"
            if not on_kbroker():  # Kafka names neither the record nor the fault of a malformed record
                assert res.record_errors == [] and res.error_message is None, f"{kind}/{codec}: {res}"
            elif index >= 0:
                assert [i for i, _ in res.record_errors] == [index], f"{kind}/{codec}: {res.record_errors}"
                assert res.error_message and "One or more records have been rejected" in res.error_message
            else:
                assert res.record_errors == [] and "Incorrect declared batch size" in (res.error_message or "")
            part.produce_good(conn, codec)  # the same connection goes on; the refused batch took no offsets
    batches, hw = wire.read_log(bootstrap_servers, part.topic, 0)
    checked = [k for k in KINDS if on_kbroker() or kafka_checks(k, codec)]
    assert hw == len(part.good) == 4 * (len(checked) + 1)
    assert all(b.crc_ok for b in batches)
    part.check_consumers()


@pytest.mark.kbroker_only("kbroker's per-record error messages (record_errors); Kafka 4.3.1 answers a malformed "
                          "record with INVALID_RECORD and neither record errors nor an error message")
def test_messages_name_the_fault(bootstrap_servers, topic_factory):
    """The record error says what is wrong with the record, in Kafka's words where Kafka has them."""
    topic = topic_factory(1)
    expected = {
        "length-past-batch": "Invalid record size",
        "length-long": "Invalid record size: expected to read",
        "negative-header-count": "Found invalid number of record headers -1",
        "varint-too-long": "Found invalid record structure",
        "offset-delta": "has offset delta 4",
        "missing-records": "declares 5 records but holds only 2",
    }
    with wire.KafkaConnection.to(bootstrap_servers) as conn:
        for kind, fragment in expected.items():
            recs = [rec(i, int(time.time() * 1000)) for i in range(5)]
            blob, _ = poison(kind, recs)
            res = wire.produce_v9(conn, topic, 0, wire.encode_batch(recs, records_blob=blob))
            assert res.error_code == wire.INVALID_RECORD
            assert fragment in (res.record_errors[0][1] or ""), (kind, res.record_errors)
