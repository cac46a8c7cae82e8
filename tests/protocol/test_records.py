"""Tests for kbroker.protocol.records (record batch v2 view, codecs, builders)."""

from __future__ import annotations

import gzip
import struct
import zlib

import crc32c
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError
from kbroker.protocol.records import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    ControlType,
    Record,
    RecordBatch,
    build_batch,
    build_control_batch,
    compress,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    decompress,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    iter_batches,
    set_base_offset,
    set_max_timestamp_and_type,
    set_partition_leader_epoch,
    split_batches_strict,
)

CODECS = [0, 1, 2, 3, 4]

SAMPLE = [
    {"key": b"k1", "value": b"v1", "headers": [("h1", b"x"), ("h2", None)], "timestamp": 1_700_000_000_000},
    {"key": None, "value": b"only value", "timestamp": 1_700_000_000_005},
    {"key": b"tombstone", "value": None, "timestamp": 1_699_999_999_990},
    {"key": b"", "value": b"", "headers": [("", b"")], "timestamp": 1_700_000_000_010},
]


def _recompute_crc(buf: bytearray, pos: int = 0) -> None:
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc32c.crc32c(bytes(buf[pos + 21 : pos + 12 + length])))


# -- header / round trip ---------------------------------------------------------------------------


def test_header_struct_is_61_bytes() -> None:
    assert BATCH_HEADER.size == BATCH_HEADER_SIZE == 61


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_all_codecs(codec: int) -> None:
    data = build_batch(
        SAMPLE,
        compression=codec,
        base_offset=100,
        partition_leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
    )
    b = RecordBatch(data)
    b.validate()
    b.validate_records()
    assert b.magic == 2
    assert b.compression == codec
    assert b.base_offset == 100
    assert b.last_offset_delta == 3
    assert b.last_offset == 103 and b.next_offset == 104
    assert b.records_count == 4
    assert b.size == len(data) == b.batch_length + 12
    assert b.partition_leader_epoch == 7
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (42, 3, 10)
    assert b.last_sequence == 13
    assert b.has_producer_id and not b.is_transactional and not b.is_control
    assert b.timestamp_type == 0
    assert b.base_timestamp == SAMPLE[0]["timestamp"]
    assert b.max_timestamp == max(r["timestamp"] for r in SAMPLE)
    recs = list(b.records())
    assert recs == [
        Record(100 + i, r["timestamp"], r.get("key"), r.get("value"), list(r.get("headers") or []))
        for i, r in enumerate(SAMPLE)
    ]


def test_tuple_input_and_defaults() -> None:
    data = build_batch([(b"a", b"b"), (None, b"c", [("k", b"v")], 5)])
    recs = list(RecordBatch(data))
    assert recs[0].key == b"a" and recs[0].value == b"b" and recs[0].headers == []
    assert recs[1].timestamp == 5 and recs[1].headers == [("k", b"v")]
    with pytest.raises(ValueError):
        build_batch([])


def test_view_over_larger_buffer_and_position() -> None:
    a = build_batch([(b"a", b"1", None, 1)])
    b = build_batch([(b"b", b"2", None, 2)], base_offset=1)
    buf = bytearray(a + b)
    view = RecordBatch(buf, len(a))
    assert view.position == len(a)
    assert len(view) == len(b)
    view.validate()
    assert [r.value for r in view] == [b"2"]
    first = RecordBatch(memoryview(buf))
    assert len(first) == len(a)
    first.validate()


def test_short_buffer_raises() -> None:
    with pytest.raises(CorruptRecordError):
        RecordBatch(b"\x00" * 60)


# -- validation ------------------------------------------------------------------------------------


def test_crc_detects_corruption_but_not_offset_changes() -> None:
    data = bytearray(build_batch(SAMPLE))
    set_base_offset(data, 0, 12345)
    set_partition_leader_epoch(data, 0, 9)
    b = RecordBatch(data)
    assert b.verify_crc()
    b.validate()
    assert b.base_offset == 12345 and b.partition_leader_epoch == 9
    for pos in (21, 30, 61, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        bb = RecordBatch(bad)
        assert not bb.verify_crc()
        with pytest.raises(CorruptRecordError) as ei:
            bb.validate()
        assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


def test_validate_magic_and_length() -> None:
    data = bytearray(build_batch(SAMPLE))
    bad = bytearray(data)
    bad[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(bad).validate()
    with pytest.raises(CorruptRecordError, match="length"):
        RecordBatch(data[:-1]).validate()
    bad = bytearray(data)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError):
        RecordBatch(bad).validate()


def test_validate_count_mismatches() -> None:
    data = bytearray(build_batch(SAMPLE))
    # lastOffsetDelta inconsistent with count (header only) -> INVALID_RECORD
    bad = bytearray(data)
    struct.pack_into(">i", bad, 23, 7)
    _recompute_crc(bad)
    with pytest.raises(InvalidRecordError) as ei:
        RecordBatch(bad).validate()
    assert ei.value.code == ErrorCode.INVALID_RECORD
    # negative count
    bad = bytearray(data)
    struct.pack_into(">i", bad, 57, -1)
    _recompute_crc(bad)
    with pytest.raises(InvalidRecordError):
        RecordBatch(bad).validate()
    # count says 5 (and delta 4) but only 4 records inside: header passes, decoding fails
    bad = bytearray(data)
    struct.pack_into(">i", bad, 57, 5)
    struct.pack_into(">i", bad, 23, 4)
    _recompute_crc(bad)
    RecordBatch(bad).validate()
    with pytest.raises(InvalidRecordError):
        RecordBatch(bad).validate_records()
    # count says 3 (delta 2) but 4 records inside
    bad = bytearray(data)
    struct.pack_into(">i", bad, 57, 3)
    struct.pack_into(">i", bad, 23, 2)
    _recompute_crc(bad)
    with pytest.raises(InvalidRecordError):
        RecordBatch(bad).validate_records()


def test_validate_records_detects_garbage_payload() -> None:
    data = bytearray(build_batch([(b"k", b"v" * 20, None, 1)]))
    data[61] = 0x7E  # record length varint now says 63 bytes, overrunning the batch
    _recompute_crc(data)
    b = RecordBatch(data)
    b.validate()
    with pytest.raises(CorruptRecordError):
        b.validate_records()
    comp = bytearray(build_batch([(b"k", b"v" * 100, None, 1)], compression=4))
    comp[70] ^= 0xFF
    _recompute_crc(comp)
    with pytest.raises(CorruptRecordError):
        RecordBatch(comp).validate_records()


def test_validate_client_rules() -> None:
    RecordBatch(build_batch(SAMPLE, producer_id=1, producer_epoch=0, base_sequence=0)).validate(client=True)
    with pytest.raises(InvalidRecordError):
        RecordBatch(build_batch(SAMPLE, producer_id=1, producer_epoch=0)).validate(client=True)
    ctrl = build_control_batch(ControlType.COMMIT, 1, 0, 5, 1000)
    RecordBatch(ctrl).validate()
    with pytest.raises(InvalidRecordError):
        RecordBatch(ctrl).validate(client=True)


def test_non_sequential_offset_delta_is_invalid() -> None:
    # Hand-build a batch whose second record claims offset delta 5.
    from kbroker.protocol.records import _encode_record

    body = _encode_record(0, 0, b"a", b"1", None) + _encode_record(5, 0, b"b", b"2", None)
    header = bytearray(BATCH_HEADER.pack(0, 49 + len(body), -1, 2, 0, 0, 1, 10, 10, -1, -1, -1, 2))
    data = header + body
    _recompute_crc(data)
    b = RecordBatch(data)
    b.validate()
    with pytest.raises(InvalidRecordError):
        b.validate_records()
    assert [r.offset for r in b.records()] == [0, 5]


# -- timestamps / setters --------------------------------------------------------------------------


def test_set_max_timestamp_and_type_log_append_time() -> None:
    data = bytearray(build_batch(SAMPLE, compression=1))
    set_max_timestamp_and_type(data, 0, 99_999, True)
    b = RecordBatch(data)
    b.validate()
    assert b.timestamp_type == 1 and b.max_timestamp == 99_999
    assert all(r.timestamp == 99_999 for r in b.records())
    set_max_timestamp_and_type(data, 0, 1234, False)
    b = RecordBatch(data)
    b.validate()
    assert b.timestamp_type == 0
    assert [r.timestamp for r in b] == [r["timestamp"] for r in SAMPLE]


def test_batch_setter_methods_refresh_cache() -> None:
    data = bytearray(build_batch(SAMPLE))
    b = RecordBatch(data)
    b.set_base_offset(77)
    b.set_partition_leader_epoch(3)
    b.set_max_timestamp_and_type(5, True)
    assert (b.base_offset, b.partition_leader_epoch, b.max_timestamp, b.timestamp_type) == (77, 3, 5, 1)
    b.validate()
    assert RecordBatch(bytes(data)).base_offset == 77


def test_build_log_append_time_batch() -> None:
    b = RecordBatch(build_batch(SAMPLE, timestamp_type=1, max_timestamp=555))
    assert b.timestamp_type == 1 and b.max_timestamp == 555
    assert {r.timestamp for r in b} == {555}


# -- control batches -------------------------------------------------------------------------------


def test_control_batch() -> None:
    data = build_control_batch(ControlType.COMMIT, producer_id=9, producer_epoch=2, coordinator_epoch=17,
                               timestamp=1000, base_offset=50, partition_leader_epoch=4)
    b = RecordBatch(data)
    b.validate()
    assert b.is_control and b.is_transactional
    assert b.base_sequence == -1 and b.producer_id == 9 and b.producer_epoch == 2
    assert b.control_type() == ControlType.COMMIT
    assert b.coordinator_epoch() == 17
    rec = next(iter(b))
    assert rec.key == struct.pack(">hh", 0, 1)
    assert rec.value == struct.pack(">hi", 0, 17)
    abort = RecordBatch(build_control_batch(ControlType.ABORT, 1, 0, 3, 1))
    assert abort.control_type() == 0 and abort.coordinator_epoch() == 3
    lc = RecordBatch(build_control_batch(ControlType.LEADER_CHANGE, -1, -1, 0, 1, value=b"\x00\x00xyz"))
    assert lc.is_control and not lc.is_transactional and lc.control_type() == 2 and lc.coordinator_epoch() is None
    assert RecordBatch(build_batch(SAMPLE)).control_type() is None


# -- walking batches -------------------------------------------------------------------------------


def _three_batches() -> tuple[bytes, list[int]]:
    parts = [build_batch(SAMPLE[: i + 1], base_offset=i * 10) for i in range(3)]
    return b"".join(parts), [len(p) for p in parts]


def test_iter_batches_stops_at_truncated_tail() -> None:
    buf, sizes = _three_batches()
    assert [b.base_offset for b in iter_batches(buf)] == [0, 10, 20]
    cut = sizes[0] + sizes[1] + 30
    got = list(iter_batches(buf[:cut]))
    assert [b.base_offset for b in got] == [0, 10]
    assert [b.position for b in got] == [0, sizes[0]]
    assert [b.base_offset for b in iter_batches(buf[: sizes[0] + 5])] == [0]
    assert list(iter_batches(b"")) == []
    for b in iter_batches(buf):
        b.validate()


def test_split_batches_strict() -> None:
    buf, sizes = _three_batches()
    assert [b.base_offset for b in split_batches_strict(buf)] == [0, 10, 20]
    assert split_batches_strict(b"") == []
    with pytest.raises(CorruptRecordError):
        split_batches_strict(buf[:-1])
    with pytest.raises(CorruptRecordError):
        split_batches_strict(buf + b"\x00" * 20)
    garbage = bytearray(buf)
    struct.pack_into(">i", garbage, 8, 3)
    with pytest.raises(CorruptRecordError):
        split_batches_strict(garbage)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(garbage))


# -- codecs ----------------------------------------------------------------------------------------

PAYLOAD = b"".join(b"record %d " % i for i in range(30000))  # ~300 KB, several lz4/snappy blocks


@pytest.mark.parametrize("codec", CODECS)
def test_compress_round_trip(codec: int) -> None:
    assert decompress(codec, compress(codec, PAYLOAD)) == PAYLOAD
    assert decompress(codec, compress(codec, b"")) == b""


def test_lz4_frame_flags_match_kafka() -> None:
    frame = compress(3, PAYLOAD)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # magic, little-endian 0x184D2204
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20  # independent blocks
    assert not flg & 0x10  # no block checksum
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB max block size
    info = lz4.frame.get_frame_info(frame)
    assert info["block_linked"] is False and info["content_checksum"] is False
    # Reads frames written with other settings (linked blocks, checksums, content size).
    other = lz4.frame.compress(PAYLOAD, block_linked=True, content_checksum=True, store_size=True)
    assert decompress(3, other) == PAYLOAD


def test_snappy_xerial_framing_and_raw_fallback() -> None:
    framed = compress(2, PAYLOAD)
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    # chunks: int32 length + raw snappy block, each decoding to at most 32 KiB
    pos, chunks = 16, 0
    while pos < len(framed):
        (n,) = struct.unpack_from(">i", framed, pos)
        assert len(snappy.decompress(framed[pos + 4 : pos + 4 + n])) <= 32 * 1024
        pos += 4 + n
        chunks += 1
    assert pos == len(framed) and chunks > 1
    assert decompress(2, snappy.compress(PAYLOAD)) == PAYLOAD
    with pytest.raises(CorruptRecordError):
        decompress(2, framed[:-3])
    batch = RecordBatch(build_batch(SAMPLE, compression=2))
    batch.validate_records()


def test_gzip_concatenated_members_and_zstd_without_content_size() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(1, two) == b"abcdef"
    assert decompress(1, zlib.compress(b"x" * 100, 9, 31)) == b"x" * 100
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    obj = cctx.compressobj()
    chunked = obj.compress(PAYLOAD) + obj.flush()
    assert zstandard.get_frame_parameters(chunked).content_size in (0, -1, zstandard.CONTENTSIZE_UNKNOWN)
    assert decompress(4, chunked) == PAYLOAD
    assert decompress(4, chunked + cctx.compress(b"tail")) == PAYLOAD + b"tail"
    with pytest.raises(CorruptRecordError):
        decompress(4, chunked[:-4])
    with pytest.raises(CorruptRecordError):
        decompress(1, gzip.compress(b"abc")[:-2])


def test_unknown_codec() -> None:
    with pytest.raises(ValueError):
        compress(5, b"x")
    with pytest.raises(ValueError):
        decompress(6, b"x")


# -- varints ---------------------------------------------------------------------------------------


def test_varint_known_encodings() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(300) == b"\xd8\x04"
    assert encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"
    assert encode_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"
    assert encode_unsigned_varint(300) == b"\xac\x02"
    assert decode_unsigned_varint(b"\xac\x02") == (300, 2)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\xff\xff\xff\xff\xff\x01")  # 6 bytes: too long for int32
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80")
    with pytest.raises(ValueError):
        encode_varint(2**31)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(n: int) -> None:
    enc = encode_varint(n)
    assert decode_varint(enc) == (n, len(enc))
    assert decode_varint(b"\x00" + enc, 1) == (n, len(enc) + 1)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    enc = encode_varlong(n)
    assert len(enc) <= 10
    assert decode_varlong(enc) == (n, len(enc))


# -- property test ---------------------------------------------------------------------------------

_opt_bytes = st.one_of(st.none(), st.binary(max_size=40))
_record = st.fixed_dictionaries(
    {
        "key": _opt_bytes,
        "value": _opt_bytes,
        "headers": st.lists(st.tuples(st.text(max_size=8), _opt_bytes), max_size=3),
        "timestamp": st.integers(0, 2**41),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_record, min_size=1, max_size=12),
    st.sampled_from(CODECS),
    st.integers(0, 2**40),
    st.booleans(),
)
def test_build_parse_property(records: list[dict], codec: int, base_offset: int, log_append: bool) -> None:
    data = build_batch(records, compression=codec, base_offset=base_offset, timestamp_type=int(log_append))
    b = RecordBatch(data)
    b.validate()
    b.validate_records()
    assert b.records_count == len(records)
    assert b.last_offset == base_offset + len(records) - 1
    decoded = list(b.records())
    for i, (rec, src) in enumerate(zip(decoded, records)):
        assert rec.offset == base_offset + i
        assert rec.key == src["key"] and rec.value == src["value"]
        assert rec.headers == src["headers"]
        assert rec.timestamp == (b.max_timestamp if log_append else src["timestamp"])
    assert b.max_timestamp == max(r["timestamp"] for r in records)
    # concatenations walk cleanly, and a truncated copy loses only the tail
    two = data + data
    assert len(list(iter_batches(two))) == 2
    assert len(list(iter_batches(two[:-1]))) == 1
