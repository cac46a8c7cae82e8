"""The structural check of the records inside one magic-2 record batch (Kafka's ``LogValidator`` reading each
record with ``DefaultRecord.readFrom``), run on every batch a producer sends before anything is appended.

``check_records(data, count) -> None | (index, message)``

* ``data``: the batch's records, uncompressed (the bytes after the 61-byte batch header, decompressed
  first when the batch is compressed); ``count``: the header's record count.
* Returns None when ``data`` holds exactly ``count`` well-formed records whose offset deltas run 0, 1, 2, ...
  Otherwise the index of the first bad record (-1 when the fault is bytes left over after the last record)
  and a message; the produce handler answers INVALID_RECORD with that index in the record errors of
  Produce v8+ (KIP-467), as Kafka's ``InvalidRecordException`` does.
* The rules (protocol guide, "Record"): length varint, attributes int8, timestampDelta varlong, offsetDelta
  varint, key and value (varint length, negative = null), header count varint (>= 0), each header a key
  (varint length >= 0) and a value (varint length, negative = null); the fields use exactly the declared
  length. Varints are zig-zag with at most 5 bytes (varint) or 10 (varlong). Header keys are not checked
  for UTF-8, as Kafka does not check them.

The check runs in the compiled ``kbroker.protocol._recordcheck`` (``_recordcheck.c``, built by
``pip install``) when it is there, else in :func:`check_records_py` below; ``IMPLEMENTATION`` says which.
``tests/protocol/test_record_check.py`` checks with Hypothesis that both give the same answer for any input.
Cost (bench/record_check.py): the compiled check is a few ms per GB, the Python one seconds per GB.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTATION", "check_records", "check_records_py"]


class _Fault(Exception):
    """Ran past the end (kind 1) or a varint too long (kind 2)."""

    def __init__(self, kind: int) -> None:
        super().__init__(kind)
        self.kind = kind


def _unsigned(data, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _Fault(1)
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise _Fault(2)


def _varint(data, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = data[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _unsigned(data, pos, end, 5)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _skip(pos: int, end: int, n: int) -> int:
    if n > end - pos:
        raise _Fault(1)
    return pos + n


def check_records_py(data, count: int) -> tuple[int, str] | None:
    """The pure-Python check (same answers as the compiled one)."""
    end = len(data)
    pos = 0
    for i in range(count):
        if pos >= end:
            return i, f"The batch declares {count} records but holds only {i}"
        try:
            length, pos = _varint(data, pos, end)
        except _Fault:
            return i, f"Found invalid record structure: the length of record {i} is not a valid varint"
        if length < 0 or length > end - pos:
            return i, (f"Invalid record size: record {i} declares {length} bytes but the batch has only "
                       f"{end - pos} remaining bytes")
        rec_end = pos + length
        p = pos
        try:
            p = _skip(p, rec_end, 1)  # attributes
            _, p = _unsigned(data, p, rec_end, 10)  # timestampDelta
            offset_delta, p = _varint(data, p, rec_end)
            if offset_delta != i:
                return i, f"Record {i} has offset delta {offset_delta}; the offset deltas of a batch must run 0, 1, 2, ..."
            key_length, p = _varint(data, p, rec_end)
            if key_length > 0:
                p = _skip(p, rec_end, key_length)
            value_length, p = _varint(data, p, rec_end)
            if value_length > 0:
                p = _skip(p, rec_end, value_length)
            header_count, p = _varint(data, p, rec_end)
            if header_count < 0:
                return i, f"Found invalid number of record headers {header_count} in record {i}"
            for _ in range(header_count):
                hkey_length, p = _varint(data, p, rec_end)
                if hkey_length < 0:
                    return i, f"Invalid negative header key size {hkey_length} in record {i}"
                p = _skip(p, rec_end, hkey_length)
                hvalue_length, p = _varint(data, p, rec_end)
                if hvalue_length > 0:
                    p = _skip(p, rec_end, hvalue_length)
        except _Fault as fault:
            if fault.kind == 2:
                return i, f"Found invalid record structure: record {i} has a varint longer than its type allows"
            return i, f"Found invalid record structure: the fields of record {i} run past its length of {length} bytes"
        if p != rec_end:
            return i, (f"Invalid record size: expected to read {length} bytes in record {i}, "
                       f"but instead read {length - (rec_end - p)}")
        pos = rec_end
    if pos != end:
        return -1, f"Incorrect declared batch size, {end - pos} bytes remain after the {count} declared records"
    return None


try:
    from kbroker.protocol._recordcheck import check_records  # type: ignore[import-not-found]

    IMPLEMENTATION = "c"
except ImportError:  # not built (no compiler where it was installed): the same check in Python
    check_records = check_records_py
    IMPLEMENTATION = "python"
