"""Leader-side checks and conversions that depend on the topic config (the part of Kafka's ``LogValidator``
that the batch header alone cannot settle).

``validate_for_append`` runs inside :meth:`PartitionLog.append_as_leader` before offsets are assigned:

* ``message.timestamp.type=CreateTime``: every record's timestamp must lie within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``, else INVALID_TIMESTAMP
  with the index of each bad record (KIP-467, ``RecordErrors``). The header's max timestamp bounds every
  record, so records are decoded only when the header is out of range or a lower limit is set.
* ``cleanup.policy`` with ``compact``: every record needs a key, else INVALID_RECORD naming each keyless
  record (KIP-467), as Kafka refuses keyless records on compacted topics. This decodes the batch, so only
  compacted topics pay for it.
* ``compression.type`` other than ``producer``: a batch whose codec differs from the topic's
  (``uncompressed`` = none) is re-encoded with the topic codec and level; header fields (producer id, epoch,
  sequence, timestamps, count) are kept and the CRC is recomputed. A batch already in the topic codec is
  left byte-for-byte as the producer sent it.

Control batches (transaction markers, KRaft records) are never touched. Nothing here does I/O.
"""

from __future__ import annotations

import struct
import zlib

from kbroker.protocol.errors import ErrorCode, InvalidRecordError, KafkaError, RecordErrors
from kbroker.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RecordBatch,
    _encode_record,
    compress,
    crc32c,
)
from kbroker.storage.config import LONG_MAX, LogConfig

__all__ = ["CODECS", "compress_with_level", "recompress_batch", "validate_for_append"]

#: ``compression.type`` value -> attribute codec (``producer`` keeps whatever the producer used).
CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

# Kafka's default levels (CompressionType / Compression builders): gzip -1 = zlib's default (6).
_DEFAULT_LEVELS = {1: -1, 3: 9, 4: 3}


def compress_with_level(codec: int, data: bytes, level: int | None) -> bytes:
    """``records.compress`` with the topic's ``compression.<codec>.level`` (gzip, lz4, zstd)."""
    if level is None or codec not in _DEFAULT_LEVELS:
        return compress(codec, data)
    if codec == 1:
        return zlib.compress(data, 6 if level == -1 else level, 31)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(data, compression_level=level, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False, block_checksum=False, store_size=False)
    import zstandard

    return zstandard.ZstdCompressor(level=level).compress(data)


def _level(config: LogConfig, codec: int) -> int | None:
    if codec == 1:
        return config.compression_gzip_level
    if codec == 3:
        return config.compression_lz4_level
    if codec == 4:
        return config.compression_zstd_level
    return None


def recompress_batch(batch: bytes | bytearray | memoryview, codec: int, level: int | None = None) -> bytes:
    """Re-encode one batch with ``codec`` (0-4): same header fields, records re-encoded with their own offset
    and timestamp deltas, new length and CRC. Raises CorruptRecordError / InvalidRecordError for records
    that do not decode."""
    view = RecordBatch(batch)
    view.validate_records()
    h = view.header
    base_offset, base_ts = h[0], h[7]
    body = b"".join(_encode_record(rec.offset - base_offset, rec.timestamp - base_ts if rec.timestamp >= 0 else 0,
                                   rec.key, rec.value, rec.headers)
                    for rec in _records_with_create_time(view))
    if codec:
        body = compress_with_level(codec, body, level)
    attrs = (h[5] & ~COMPRESSION_MASK) | codec
    header = bytearray(BATCH_HEADER.pack(h[0], BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body), h[2], h[3], 0, attrs,
                                         h[6], h[7], h[8], h[9], h[10], h[11], h[12]))
    crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _U32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + body


def _records_with_create_time(view: RecordBatch):  # noqa: ANN202
    """Records of ``view`` with their own (delta-derived) timestamps, even in a LogAppendTime batch."""
    if not view.timestamp_type:
        return view.records()
    # records() resolves LogAppendTime batches to the batch timestamp; re-read the raw deltas instead.
    raw = bytearray(view.buffer)
    _I16.pack_into(raw, ATTRIBUTES_OFFSET, view.attributes & ~0x08)
    return RecordBatch(raw).records()


def validate_for_append(buf: bytearray, config: LogConfig, now_ms: int, partition: str = "") -> bytearray:
    """Check (and possibly convert) producer batches for the topic config; returns ``buf`` itself when nothing
    changes, else a new bytearray. Raises ``KafkaError(INVALID_TIMESTAMP)``, ``InvalidRecordError``."""
    target = CODECS.get(config.compression_type)  # None for "producer"
    check_ts = not config.log_append_time and (config.message_timestamp_before_max_ms < LONG_MAX
                                               or config.message_timestamp_after_max_ms < LONG_MAX)
    compact = config.compact
    if target is None and not check_ts and not compact:
        return buf
    lo = now_ms - config.message_timestamp_before_max_ms
    hi = now_ms + config.message_timestamp_after_max_ms
    unpack = BATCH_HEADER.unpack_from
    out: list[bytes | memoryview] | None = None
    n = len(buf)
    pos = 0
    with memoryview(buf) as mv:
        while pos + BATCH_HEADER_SIZE <= n:
            h = unpack(mv, pos)
            size = h[1] + LOG_OVERHEAD
            if size < BATCH_HEADER_SIZE or pos + size > n:
                break  # the caller reports malformed input
            piece: bytes | memoryview = mv[pos: pos + size]
            if not h[5] & CONTROL_FLAG:
                if check_ts:
                    # The header bounds the batch: its max timestamp is every record's upper bound, so only a
                    # lower limit (message.timestamp.before.max.ms) or a header outside the range needs records.
                    header_ok = all(ts < 0 or lo <= ts <= hi for ts in (h[7], h[8]))
                    if not header_ok or config.message_timestamp_before_max_ms < LONG_MAX:
                        bad = [(i, f"Timestamp {rec.timestamp} of message with offset {h[0] + i} is out of range. "
                                   f"The timestamp should be within [{lo}, {hi}]")
                               for i, rec in enumerate(RecordBatch(piece).records())
                               if rec.timestamp >= 0 and not lo <= rec.timestamp <= hi]
                        if bad:
                            raise RecordErrors(ErrorCode.INVALID_TIMESTAMP, bad)
                if compact:
                    bad = [(i, f"Compacted topic cannot accept message without key in topic partition {partition}.")
                           for i, rec in enumerate(RecordBatch(piece).records()) if rec.key is None]
                    if bad:
                        raise RecordErrors(ErrorCode.INVALID_RECORD, bad)
                if target is not None and (h[5] & COMPRESSION_MASK) != target:
                    piece = recompress_batch(piece, target, _level(config, target))
                    if out is None:
                        out = [mv[:pos]]
            if out is not None:
                out.append(piece)
            pos += size
        if out is None:
            return buf
        if pos < n:
            out.append(mv[pos:])
        result = bytearray(b"".join(out))
        del out
    return result
