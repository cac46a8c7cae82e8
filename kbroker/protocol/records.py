"""Record batch v2 (magic 2): a zero-copy header view, validation, record decoding and building.

Layout reference: ``/work/shared/kafka-protocol/README.md`` section 3 (facts taken from Apache Kafka's
``DefaultRecordBatch`` / ``DefaultRecord`` and the compression classes; no code copied).

The broker's hot paths (Produce, Fetch, log append/recovery) only touch the 61-byte batch header and the
CRC-32C; they never decompress or decode records. Record decoding (``RecordBatch.records``) is for tests,
timestamp lookups, internal topics and control batches.

Nothing in this module does I/O.
"""

from __future__ import annotations

import struct
import time
import zlib
from enum import IntEnum
from typing import Any, Iterable, Iterator, NamedTuple, Sequence, Union

import crc32c as _crc32c_mod

from kbroker.protocol.errors import CorruptRecordError, InvalidRecordError

__all__ = [
    "BATCH_HEADER",
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_TIMESTAMP",
    "Compression",
    "TimestampType",
    "ControlType",
    "Record",
    "RecordBatch",
    "iter_batches",
    "split_batches_strict",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_max_timestamp_and_type",
    "compress",
    "decompress",
    "build_batch",
    "build_control_batch",
    "encode_varint",
    "decode_varint",
    "encode_varlong",
    "decode_varlong",
    "encode_unsigned_varint",
    "decode_unsigned_varint",
    "crc32c",
]

Buffer = Union[bytes, bytearray, memoryview]

crc32c = _crc32c_mod.crc32c
"""``crc32c(data) -> int``: CRC-32C (Castagnoli) of a bytes-like object (accepts memoryview, no copy)."""

# --------------------------------------------------------------------------------------------------
# Header layout
# --------------------------------------------------------------------------------------------------

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte v2 batch header, all big-endian. Unpacks to the tuple
``(base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count)``."""

BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
assert BATCH_HEADER_SIZE == 61

# Byte offsets of each header field from the start of the batch.
BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12
"""baseOffset (8) + batchLength (4): the part of a batch not counted by ``batch_length``."""

MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49: smallest legal batchLength value

MAGIC_V2 = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# Attribute bits (int16).
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


class Compression(IntEnum):
    """Attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attribute bit 3."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Control record types (key field ``type``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


# --------------------------------------------------------------------------------------------------
# Varints (zig-zag, as used inside records) and unsigned varints
# --------------------------------------------------------------------------------------------------


def encode_unsigned_varint(value: int) -> bytes:
    """LEB128 encoding of a non-negative int (7 bits per byte, low group first)."""
    if value < 0:
        raise ValueError("unsigned varint must be >= 0")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_unsigned_varint(buf: Buffer, pos: int = 0, max_bytes: int = 5) -> tuple[int, int]:
    """Decode an unsigned varint at ``buf[pos]``. Returns ``(value, new_pos)``.

    Raises ``CorruptRecordError`` if the buffer ends early or the varint is longer than ``max_bytes``
    (5 for 32-bit, 10 for 64-bit values).
    """
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        end = pos + max_bytes
        pos += 1
        while True:
            if pos >= end:
                raise CorruptRecordError("varint is too long")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
    except IndexError:
        raise CorruptRecordError("buffer ended inside a varint") from None


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 32-bit int."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint out of int32 range: {value}")
    return encode_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit int."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of int64 range: {value}")
    return encode_unsigned_varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varint (int32) at ``buf[pos]``. Returns ``(value, new_pos)``; CorruptRecordError."""
    b = buf[pos] if pos < len(buf) else -1
    if 0 <= b < 0x80:  # fast path: one byte
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = decode_unsigned_varint(buf, pos, 5)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag varlong (int64) at ``buf[pos]``. Returns ``(value, new_pos)``; CorruptRecordError."""
    b = buf[pos] if pos < len(buf) else -1
    if 0 <= b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = decode_unsigned_varint(buf, pos, 10)
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


# --------------------------------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # magic, version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024  # uncompressed bytes per xerial chunk (writer's choice)
_GZIP_LEVEL = 6


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a records payload for attribute codec ``codec`` (0-4).

    gzip: RFC 1952 stream; snappy: xerial framing (16-byte header, then int32 BE length + raw snappy block
    per 32 KiB chunk); lz4: LZ4 frame with independent 64 KiB blocks, no checksums, no content size;
    zstd: one standard frame. Raises ``ValueError`` for an unknown codec.
    """
    if codec == 0:
        return bytes(data)
    if codec == 1:
        return zlib.compress(data, _GZIP_LEVEL, 31)
    if codec == 2:
        import snappy

        mv = memoryview(data)
        parts = [_XERIAL_HEADER]
        for start in range(0, len(mv), _XERIAL_BLOCK):
            block = snappy.compress(bytes(mv[start : start + _XERIAL_BLOCK]))
            parts.append(_I32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
    if codec == 4:
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a records payload compressed with attribute codec ``codec`` (0-4).

    gzip accepts concatenated members; snappy accepts xerial framing or one bare raw snappy block; lz4
    accepts any LZ4 frame(s); zstd uses a streaming decoder (content size may be absent) across frames.
    Raises ``CorruptRecordError`` if the data cannot be decoded and ``ValueError`` for an unknown codec.
    """
    if codec == 0:
        return bytes(data)
    try:
        if codec == 1:
            return _gunzip(data)
        if codec == 2:
            return _unsnappy(data)
        if codec == 3:
            import lz4.frame

            return lz4.frame.decompress(data)
        if codec == 4:
            import zstandard

            dctx = zstandard.ZstdDecompressor()
            parts: list[bytes] = []
            rest: Buffer = data
            while True:
                dobj = dctx.decompressobj()
                parts.append(dobj.decompress(rest))
                if not dobj.eof:
                    raise CorruptRecordError("truncated zstd frame")
                rest = dobj.unused_data
                if not rest:
                    return b"".join(parts)
    except CorruptRecordError:
        raise
    except Exception as exc:  # library-specific error types
        raise CorruptRecordError(f"cannot decompress codec {codec}: {exc}") from exc
    raise ValueError(f"unknown compression codec {codec}")


def _gunzip(data: Buffer) -> bytes:
    out: list[bytes] = []
    rest = bytes(data)
    while rest:
        d = zlib.decompressobj(31)
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        rest = d.unused_data
        if rest.strip(b"\x00") == b"":  # trailing padding, as the gzip module tolerates
            break
    return b"".join(out)


def _unsnappy(data: Buffer) -> bytes:
    import snappy

    mv = memoryview(data)
    if len(mv) >= 16 and mv[:8] == _XERIAL_MAGIC:
        out: list[bytes] = []
        pos, end = 16, len(mv)
        while pos < end:
            if pos + 4 > end:
                raise CorruptRecordError("truncated xerial snappy chunk header")
            (n,) = _I32.unpack_from(mv, pos)
            pos += 4
            if n < 0 or pos + n > end:
                raise CorruptRecordError("truncated xerial snappy chunk")
            out.append(snappy.decompress(bytes(mv[pos : pos + n])))
            pos += n
        return b"".join(out)
    return snappy.decompress(bytes(mv))


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


class Record(NamedTuple):
    """One decoded record. ``timestamp`` in ms since the epoch (already resolved for LogAppendTime);
    ``headers`` is a list of ``(key, value)`` with UTF-8 keys and nullable byte values."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_ts: int | None, strict: bool
) -> Iterator[Record]:
    """Decode ``count`` records from the plaintext ``data``.

    ``strict`` additionally checks that offset deltas are 0..count-1 and that no bytes remain.
    Raises CorruptRecordError for malformed bytes, InvalidRecordError for count/offset mismatches.
    """
    pos = 0
    end = len(data)
    dv = decode_varint
    dl = decode_varlong
    for i in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but holds only {i}")
        length, pos = dv(data, pos)
        body_end = pos + length
        if length < 0 or body_end > end:
            raise CorruptRecordError(f"record {i} length {length} overruns the batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = dl(data, pos)
        off_delta, pos = dv(data, pos)
        if strict and off_delta != i:
            raise InvalidRecordError(f"record {i} has offset delta {off_delta}")
        klen, pos = dv(data, pos)
        if klen < 0:
            key = None
        else:
            key = data[pos : pos + klen]
            pos += klen
        vlen, pos = dv(data, pos)
        if vlen < 0:
            value = None
        else:
            value = data[pos : pos + vlen]
            pos += vlen
        hcount, pos = dv(data, pos)
        if hcount < 0:
            raise CorruptRecordError(f"record {i} has negative header count")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(hcount):
            hklen, pos = dv(data, pos)
            if hklen < 0:
                raise CorruptRecordError("null header key")
            try:
                hkey = data[pos : pos + hklen].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptRecordError("header key is not UTF-8") from exc
            pos += hklen
            hvlen, pos = dv(data, pos)
            if hvlen < 0:
                hval = None
            else:
                hval = data[pos : pos + hvlen]
                pos += hvlen
            headers.append((hkey, hval))
        if pos != body_end:
            raise CorruptRecordError(f"record {i}: declared length {length} but read {length + pos - body_end}")
        ts = log_append_ts if log_append_ts is not None else base_timestamp + ts_delta
        yield Record(base_offset + off_delta, ts, key, value, headers)
    if strict and pos != end:
        raise InvalidRecordError(f"{end - pos} bytes left after the {count} declared records")


def _encode_record(offset_delta: int, timestamp_delta: int, key: Any, value: Any, headers: Any) -> bytes:
    parts = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(b"\x01")  # varint -1
    else:
        key = bytes(key)
        parts.append(encode_varint(len(key)))
        parts.append(key)
    if value is None:
        parts.append(b"\x01")
    else:
        value = bytes(value)
        parts.append(encode_varint(len(value)))
        parts.append(value)
    hdrs = list(headers or ())
    parts.append(encode_varint(len(hdrs)))
    for hk, hv in hdrs:
        hkb = hk.encode("utf-8") if isinstance(hk, str) else bytes(hk)
        parts.append(encode_varint(len(hkb)))
        parts.append(hkb)
        if hv is None:
            parts.append(b"\x01")
        else:
            hv = bytes(hv)
            parts.append(encode_varint(len(hv)))
            parts.append(hv)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


# --------------------------------------------------------------------------------------------------
# RecordBatch view
# --------------------------------------------------------------------------------------------------


class RecordBatch:
    """Zero-copy view of one v2 record batch.

    ``RecordBatch(buf, pos=0)`` views the batch starting at ``buf[pos]``; the view is cut to the batch's
    own size (``batch_length + 12``) when ``buf`` holds more. The header is unpacked once and cached; after
    changing the underlying bytes use the setter methods (which refresh the cache) or build a new view.

    Note: a memoryview over a ``bytearray`` prevents that bytearray from being resized while the view lives.

    Raises ``CorruptRecordError`` if fewer than 61 bytes are available (the header cannot be read).
    ``position`` is ``pos`` (informational: where the batch starts inside the buffer it was cut from).
    """

    __slots__ = ("_mv", "_h", "position")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        avail = len(mv) - pos
        if avail < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"record batch needs {BATCH_HEADER_SIZE} header bytes, have {max(avail, 0)}")
        h = BATCH_HEADER.unpack_from(mv, pos)
        size = h[1] + LOG_OVERHEAD
        if BATCH_HEADER_SIZE <= size < avail:
            mv = mv[pos : pos + size]
        elif pos:
            mv = mv[pos:]
        self._mv = mv
        self._h = h
        self.position = pos

    # -- raw access ---------------------------------------------------------------------------------

    @property
    def buffer(self) -> memoryview:
        """The batch bytes (a memoryview, no copy)."""
        return self._mv

    def __bytes__(self) -> bytes:
        return bytes(self._mv)

    def __len__(self) -> int:
        return len(self._mv)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size}, compression={self.compression}, "
            f"control={self.is_control}, txn={self.is_transactional})"
        )

    @property
    def header(self) -> tuple[int, ...]:
        """The cached 13-tuple from ``BATCH_HEADER.unpack_from``."""
        return self._h

    # -- header fields ------------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self._h[0]

    @property
    def batch_length(self) -> int:
        """Bytes after the batchLength field (size - 12)."""
        return self._h[1]

    @property
    def partition_leader_epoch(self) -> int:
        return self._h[2]

    @property
    def magic(self) -> int:
        return self._h[3]

    @property
    def crc(self) -> int:
        """Stored CRC-32C (unsigned)."""
        return self._h[4]

    @property
    def attributes(self) -> int:
        return self._h[5]

    @property
    def last_offset_delta(self) -> int:
        return self._h[6]

    @property
    def base_timestamp(self) -> int:
        return self._h[7]

    @property
    def max_timestamp(self) -> int:
        return self._h[8]

    @property
    def producer_id(self) -> int:
        return self._h[9]

    @property
    def producer_epoch(self) -> int:
        return self._h[10]

    @property
    def base_sequence(self) -> int:
        return self._h[11]

    @property
    def records_count(self) -> int:
        return self._h[12]

    # -- derived ------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Total batch size in bytes as declared by the header (batch_length + 12)."""
        return self._h[1] + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self._h[0] + self._h[6]

    @property
    def next_offset(self) -> int:
        return self._h[0] + self._h[6] + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps past int32 max to 0); -1 without a base sequence."""
        if self._h[11] < 0:
            return NO_SEQUENCE
        return (self._h[11] + self._h[6]) % 0x80000000

    @property
    def compression(self) -> int:
        return self._h[5] & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self._h[5] & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[5] & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self._h[5] & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h[5] & DELETE_HORIZON_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self._h[9] >= 0

    # -- checks -------------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C over bytes 21..end of the viewed batch."""
        return crc32c(self._mv[ATTRIBUTES_OFFSET:])

    def verify_crc(self) -> bool:
        """True if the stored CRC matches bytes 21..end (one crc32c call over a memoryview)."""
        return crc32c(self._mv[ATTRIBUTES_OFFSET:]) == self._h[4]

    def validate(self, *, client: bool = False) -> None:
        """Check the header and CRC without decompressing.

        Raises ``CorruptRecordError`` (CORRUPT_MESSAGE) when the batch is shorter than 61 bytes, the magic is
        not 2, ``batch_length`` disagrees with the bytes viewed, or the CRC is wrong. Raises
        ``InvalidRecordError`` (INVALID_RECORD, as Kafka's log validator does) for a negative record count or
        ``last_offset_delta != records_count - 1`` when the count is positive.

        With ``client=True`` (batches from a producer) also rejects, with INVALID_RECORD: an empty batch,
        a control batch, and a producer id without a base sequence.
        """
        h = self._h
        if len(self._mv) < BATCH_HEADER_SIZE:
            raise CorruptRecordError("record batch shorter than its header")
        if h[3] != MAGIC_V2:
            raise CorruptRecordError(f"unsupported record batch magic {h[3]}")
        if h[1] < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {h[1]} is smaller than the header")
        if h[1] + LOG_OVERHEAD != len(self._mv):
            raise CorruptRecordError(
                f"batch length {h[1]} disagrees with the {len(self._mv)} bytes available"
            )
        if not self.verify_crc():
            raise CorruptRecordError(
                f"record batch CRC mismatch (stored {h[4]:#010x}, computed {self.compute_crc():#010x})"
            )
        count = h[12]
        if count < 0:
            raise InvalidRecordError(f"negative record count {count}")
        if count > 0 and h[6] != count - 1:
            raise InvalidRecordError(
                f"last offset delta {h[6]} inconsistent with record count {count}"
            )
        if client:
            if count == 0:
                raise InvalidRecordError("empty record batch")
            if h[5] & CONTROL_FLAG:
                raise InvalidRecordError("clients may not write control batches")
            if h[9] >= 0 and h[11] < 0:
                raise InvalidRecordError("idempotent batch without a base sequence")

    def validate_records(self) -> None:
        """``validate()`` then decompress and decode every record.

        Checks that exactly ``records_count`` records are present, that each parses, and that offset deltas
        run 0, 1, 2, ... Raises ``CorruptRecordError`` for undecodable data and ``InvalidRecordError`` for
        count/offset mismatches.
        """
        self.validate()
        h = self._h
        data = self._payload()
        for _ in _decode_records(data, h[12], h[0], h[7], None, True):
            pass

    # -- record access ------------------------------------------------------------------------------

    def _payload(self) -> bytes:
        codec = self._h[5] & COMPRESSION_MASK
        raw = self._mv[RECORDS_OFFSET:]
        if codec == 0:
            return bytes(raw)
        if codec > 4:
            raise CorruptRecordError(f"unknown compression codec {codec}")
        return decompress(codec, raw)

    def records(self) -> Iterator[Record]:
        """Decode the records (decompressing if needed). LogAppendTime batches give every record
        ``max_timestamp``. Raises CorruptRecordError / InvalidRecordError on malformed data."""
        h = self._h
        log_append = h[8] if h[5] & TIMESTAMP_TYPE_MASK else None
        return _decode_records(self._payload(), h[12], h[0], h[7], log_append, False)

    def __iter__(self) -> Iterator[Record]:
        return self.records()

    def control_record(self) -> tuple[int, int, bytes | None] | None:
        """For a control batch: ``(type, key_version, value bytes)`` of its record; None if not a control
        batch or it holds no record. Raises CorruptRecordError if the key is not 4 bytes."""
        if not self.is_control:
            return None
        for rec in self.records():
            if rec.key is None or len(rec.key) < 4:
                raise CorruptRecordError("control record key is too short")
            version, ctype = _CONTROL_KEY.unpack_from(rec.key)
            return ctype, version, rec.value
        return None

    def control_type(self) -> int | None:
        """Type of a control batch's record (``ControlType`` value, or an unknown int); None otherwise."""
        cr = self.control_record()
        return None if cr is None else cr[0]

    def coordinator_epoch(self) -> int | None:
        """Coordinator epoch of a COMMIT/ABORT marker; None for other batches."""
        cr = self.control_record()
        if cr is None or cr[0] not in (ControlType.ABORT, ControlType.COMMIT) or cr[2] is None:
            return None
        if len(cr[2]) < _END_TXN_VALUE.size:
            raise CorruptRecordError("end transaction marker value is too short")
        return _END_TXN_VALUE.unpack_from(cr[2])[1]

    # -- in-place setters (need a writable buffer) --------------------------------------------------

    def set_base_offset(self, offset: int) -> None:
        """Rewrite baseOffset in place (outside the CRC)."""
        _I64.pack_into(self._mv, BASE_OFFSET_OFFSET, offset)
        self._h = BATCH_HEADER.unpack_from(self._mv, 0)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Rewrite partitionLeaderEpoch in place (outside the CRC)."""
        _I32.pack_into(self._mv, PARTITION_LEADER_EPOCH_OFFSET, epoch)
        self._h = BATCH_HEADER.unpack_from(self._mv, 0)

    def set_max_timestamp_and_type(self, timestamp: int, log_append_time: bool) -> None:
        """Set maxTimestamp and the timestamp-type bit, recomputing the CRC."""
        set_max_timestamp_and_type(self._mv, 0, timestamp, log_append_time)
        self._h = BATCH_HEADER.unpack_from(self._mv, 0)


# --------------------------------------------------------------------------------------------------
# Walking concatenated batches
# --------------------------------------------------------------------------------------------------

_LEN_AT_8 = struct.Struct(">i")


def iter_batches(buf: Buffer, pos: int = 0) -> Iterator[RecordBatch]:
    """Yield a ``RecordBatch`` view for each complete batch in ``buf[pos:]``.

    Stops silently at a truncated tail (fewer than 12 bytes left, fewer than 61, or fewer than the declared
    size), as a Fetch response may end with a partial batch. Raises ``CorruptRecordError`` if a batch
    declares a length smaller than the v2 header (the bytes cannot be a batch).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    while end - pos >= LOG_OVERHEAD:
        (length,) = _LEN_AT_8.unpack_from(mv, pos + BATCH_LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at byte {pos} declares length {length}")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield _view(mv, pos, size)
        pos += size


def _view(mv: memoryview, pos: int, size: int) -> RecordBatch:
    b = RecordBatch.__new__(RecordBatch)
    b._mv = mv[pos : pos + size]
    b._h = BATCH_HEADER.unpack_from(mv, pos)
    b.position = pos
    return b


def split_batches_strict(buf: Buffer) -> list[RecordBatch]:
    """Split ``buf`` into batch views, requiring it to be exactly a concatenation of whole batches.

    Raises ``CorruptRecordError`` for a partial or garbage tail or a length below the header size.
    An empty buffer gives ``[]``. Does not check CRCs (call ``validate()`` on each).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(mv)
    out: list[RecordBatch] = []
    pos = 0
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"{end - pos} trailing bytes do not form a record batch")
        (length,) = _LEN_AT_8.unpack_from(mv, pos + BATCH_LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at byte {pos} declares length {length}")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            raise CorruptRecordError(f"batch at byte {pos} is truncated ({end - pos} of {size} bytes)")
        out.append(_view(mv, pos, size))
        pos += size
    return out


# --------------------------------------------------------------------------------------------------
# In-place setters on writable buffers
# --------------------------------------------------------------------------------------------------


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Write baseOffset of the batch at ``buf[pos]`` (not covered by the CRC)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Write partitionLeaderEpoch of the batch at ``buf[pos]`` (not covered by the CRC)."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp_and_type(buf: bytearray | memoryview, pos: int, timestamp: int, log_append_time: bool) -> None:
    """Write maxTimestamp and the timestamp-type attribute bit of the batch at ``buf[pos]`` and recompute
    its CRC. No-op if both already have the requested values. The batch must be complete in ``buf``."""
    (attrs,) = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (old_ts,) = _I64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    new_attrs = (attrs | TIMESTAMP_TYPE_MASK) if log_append_time else (attrs & ~TIMESTAMP_TYPE_MASK)
    if new_attrs == attrs and old_ts == timestamp:
        return
    (length,) = _I32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
    end = pos + length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptRecordError("cannot update the timestamp of a truncated batch")
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, new_attrs)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    if isinstance(buf, memoryview):
        crc = crc32c(buf[pos + ATTRIBUTES_OFFSET : end])
    else:
        with memoryview(buf) as whole, whole[pos + ATTRIBUTES_OFFSET : end] as covered:
            crc = crc32c(covered)
    _U32.pack_into(buf, pos + CRC_OFFSET, crc)


# --------------------------------------------------------------------------------------------------
# Building batches
# --------------------------------------------------------------------------------------------------

RecordInput = Union[dict, Sequence[Any]]


def _now_ms() -> int:
    return int(time.time() * 1000)


def build_batch(
    records: Iterable[RecordInput],
    *,
    compression: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one v2 batch.

    ``records``: dicts with optional keys ``key``, ``value``, ``headers`` (list of ``(str, bytes|None)``),
    ``timestamp`` (ms), or tuples ``(key, value[, headers[, timestamp]])``. A missing timestamp is "now".
    Offset deltas are 0..n-1. ``base_timestamp`` defaults to the first record's timestamp; ``max_timestamp``
    defaults to the largest record timestamp (for ``timestamp_type=1`` pass the append time here).
    Raises ``ValueError`` for an empty record list.
    """
    norm: list[tuple[Any, Any, Any, int]] = []
    now: int | None = None
    for r in records:
        if isinstance(r, dict):
            key, value, headers, ts = r.get("key"), r.get("value"), r.get("headers"), r.get("timestamp")
        else:
            r = tuple(r)
            key = r[0] if len(r) > 0 else None
            value = r[1] if len(r) > 1 else None
            headers = r[2] if len(r) > 2 else None
            ts = r[3] if len(r) > 3 else None
        if ts is None:
            if now is None:
                now = _now_ms()
            ts = now
        norm.append((key, value, headers, int(ts)))
    if not norm:
        raise ValueError("a record batch needs at least one record")
    first_ts = norm[0][3] if base_timestamp is None else base_timestamp
    max_ts = max(r[3] for r in norm) if max_timestamp is None else max_timestamp
    body = b"".join(
        _encode_record(i, ts - first_ts, key, value, headers) for i, (key, value, headers, ts) in enumerate(norm)
    )
    if compression:
        body = compress(compression, body)
    attrs = (compression & COMPRESSION_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
    if is_transactional:
        attrs |= TRANSACTIONAL_FLAG
    if is_control:
        attrs |= CONTROL_FLAG
    count = len(norm)
    header = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attrs,
            count - 1,
            first_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + body


def build_control_batch(
    control_type: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    *,
    value: bytes | None = None,
) -> bytes:
    """Encode a control batch holding one control record (uncompressed, baseSequence -1).

    For COMMIT (1) / ABORT (0) the value is the end-transaction marker ``(int16 version 0, int32
    coordinator_epoch)`` and the transactional bit is set. For other (KRaft) types pass the serialised
    message as ``value``; the transactional bit is then clear.
    """
    key = _CONTROL_KEY.pack(0, control_type)
    txn = control_type in (ControlType.ABORT, ControlType.COMMIT)
    if value is None and txn:
        value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, None, timestamp)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=txn,
        is_control=True,
    )
