"""The record structure check (kbroker/protocol/record_check.py and its compiled twin _recordcheck.c).

Both implementations must accept every batch kbroker's own encoder writes, refuse each kind of malformed
record with the same index and message, and agree on arbitrary bytes (Hypothesis, seeded from real record
data and mutated).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol import record_check
from kbroker.protocol.record_check import check_records_py
from kbroker.protocol.records import _encode_record, encode_varint, encode_varlong

try:
    from kbroker.protocol._recordcheck import check_records as check_records_c
except ImportError:  # pragma: no cover - reported by test_compiled_check_is_built
    check_records_c = None

IMPLEMENTATIONS = [pytest.param(check_records_py, id="python"), pytest.param(check_records_c, id="c")]


def test_compiled_check_is_built():
    """`pip install -e .` (dev.sh) builds the C check; without it every produce pays seconds per GB."""
    assert check_records_c is not None, "kbroker.protocol._recordcheck was not built (is a C compiler installed?)"
    assert record_check.IMPLEMENTATION == "c"
    assert record_check.check_records is check_records_c


def body(records) -> bytes:
    """Records (key, value, headers) encoded as a batch holds them, offset deltas 0..n-1."""
    return b"".join(_encode_record(i, i * 3, k, v, h) for i, (k, v, h) in enumerate(records))


def raw_record(fields: bytes) -> bytes:
    """A record whose body is ``fields`` as given, with a correct length prefix."""
    return encode_varint(len(fields)) + fields


def fields(offset_delta=0, key=b"k", value=b"v", headers=(), *, header_count=None) -> bytes:
    out = b"\x00" + encode_varlong(5) + encode_varint(offset_delta)
    out += b"\x01" if key is None else encode_varint(len(key)) + key
    out += b"\x01" if value is None else encode_varint(len(value)) + value
    out += encode_varint(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        out += encode_varint(len(hk)) + hk + (b"\x01" if hv is None else encode_varint(len(hv)) + hv)
    return out


GOOD = [
    [(b"k", b"v", None)],
    [(None, None, None)],
    [(None, b"", [])],
    [(b"", b"x" * 300, [("h", b"1"), ("h2", None), ("", b"")])],
    [(b"key-%d" % i, b"value" * i, [("n", str(i).encode())] * (i % 3)) for i in range(50)],
    [(None, b"y" * 70_000, None)],  # multi-byte length varints
]


@pytest.mark.parametrize("check", IMPLEMENTATIONS)
@pytest.mark.parametrize("records", GOOD, ids=range(len(GOOD)))
def test_well_formed_batches_pass(check, records):
    assert check(body(records), len(records)) is None


@pytest.mark.parametrize("check", IMPLEMENTATIONS)
def test_any_negative_length_is_null(check):
    # Kafka reads a negative key, value or header value length as null, not only -1.
    rec = raw_record(b"\x00\x00\x00" + encode_varint(-7) + encode_varint(-2) + encode_varint(1)
                     + encode_varint(1) + b"h" + encode_varint(-5))
    assert check(rec, 1) is None


FAULTS = [
    # (name, data, count, expected index, message fragment)
    ("count larger than records", body([(b"a", b"b", None)]), 2, 1, "declares 2 records but holds only 1"),
    ("bytes after the records", body([(b"a", b"b", None)]) + b"\x00", 1, -1, "Incorrect declared batch size"),
    ("record length past the batch", encode_varint(100) + fields(), 1, 0, "declares 100 bytes"),
    ("negative record length", encode_varint(-3) + fields(), 1, 0, "declares -3 bytes"),
    ("length varint truncated", b"\x80", 1, 0, "length of record 0 is not a valid varint"),
    ("length varint too long", b"\xff\xff\xff\xff\xff\x01", 1, 0, "length of record 0 is not a valid varint"),
    ("offset delta not the index", body([(b"a", b"b", None)]) + raw_record(fields(offset_delta=7)), 2, 1,
     "offset delta 7"),
    ("key longer than the record", raw_record(b"\x00\x00\x00" + encode_varint(50) + b"kk"), 1, 0,
     "run past its length"),
    ("value longer than the record", raw_record(b"\x00\x00\x00\x01" + encode_varint(9) + b"v"), 1, 0,
     "run past its length"),
    ("header count missing", raw_record(b"\x00\x00\x00\x01\x01"), 1, 0, "run past its length"),
    ("negative header count", raw_record(fields(header_count=-1)), 1, 0, "invalid number of record headers -1"),
    ("more headers than present", raw_record(fields(headers=[(b"h", b"v")], header_count=3)), 1, 0,
     "run past its length"),
    ("negative header key size", raw_record(fields(header_count=1) + encode_varint(-1) + b"\x01"), 1, 0,
     "negative header key size -1"),
    ("header value past the record", raw_record(fields(header_count=1) + b"\x02h" + encode_varint(40)), 1, 0,
     "run past its length"),
    ("timestamp varlong too long", raw_record(b"\x00" + b"\xff" * 10 + b"\x01\x00\x01\x01\x00"), 1, 0,
     "varint longer than its type allows"),
    ("offset varint too long", raw_record(b"\x00\x00" + b"\xff" * 5 + b"\x00\x01\x01\x00"), 1, 0,
     "varint longer than its type allows"),
    ("bytes left inside the record", raw_record(fields() + b"\x00\x00"), 1, 0,
     "expected to read 10 bytes in record 0, but instead read 8"),
    ("record without attributes", raw_record(b""), 1, 0, "run past its length of 0 bytes"),
    ("empty data for one record", b"", 1, 0, "declares 1 records but holds only 0"),
]


@pytest.mark.parametrize("check", IMPLEMENTATIONS)
@pytest.mark.parametrize(("name", "data", "count", "index", "fragment"), FAULTS, ids=[f[0] for f in FAULTS])
def test_malformed_records_are_refused(check, name, data, count, index, fragment):
    result = check(data, count)
    assert result is not None, name
    got_index, message = result
    assert got_index == index
    assert fragment in message


def test_memoryview_and_bytearray_inputs():
    data = body(GOOD[4])
    for impl in (check_records_py, check_records_c):
        assert impl(memoryview(data), 50) is None
        assert impl(bytearray(data), 50) is None
        assert impl(memoryview(data)[: len(data) - 1], 50) is not None


def agree(data: bytes, count: int) -> None:
    assert check_records_c(data, count) == check_records_py(data, count)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=8))
def test_both_agree_on_arbitrary_bytes(data, count):
    agree(data, count)


record_input = st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_input, min_size=1, max_size=6), st.data())
def test_both_agree_on_mutated_records(records, data):
    raw = bytearray(body(records))
    assert check_records_c(bytes(raw), len(records)) is None
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "set"]))
        pos = data.draw(st.integers(min_value=0, max_value=max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[pos] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        elif op == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=3))
        elif op == "delete" and raw:
            del raw[pos]
        elif raw:
            raw[pos] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
    count = len(records) + data.draw(st.integers(min_value=-1, max_value=1))
    agree(bytes(raw), max(count, 0))
