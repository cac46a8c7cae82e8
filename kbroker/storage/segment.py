"""One log segment: ``<base offset:020d>.log`` plus its ``.index``, ``.timeindex`` and ``.txnindex``.

The ``.log`` file is a plain concatenation of v2 record batches exactly as they appear on the wire. It is
opened unbuffered in append mode; every append is one ``write`` of the whole (already offset-assigned)
buffer, and every read is an ``os.pread`` at an explicit position or a ``FileRegion`` handed to the network
layer, so concurrent readers never depend on the file position.

Only batch headers (61 bytes) and CRCs are looked at here; records are decoded only for timestamp lookups.
Not thread-safe for concurrent appends; reads through ``FileRegion`` may happen at any time.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import BinaryIO, Iterator, NamedTuple

from kbroker.protocol.records import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RecordBatch,
)
from kbroker.protocol.send import FileRegion
from kbroker.storage.config import LogConfig
from kbroker.storage.index import OffsetIndex, TimeIndex
from kbroker.storage.txn_index import TransactionIndex
from kbroker.storage.util import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
)

log = logging.getLogger(__name__)

_SCAN_CHUNK = 4096  # bytes read per pread while walking batch headers


class BatchHeader(NamedTuple):
    """Summary of one batch header found in a segment file. ``position`` is the byte offset in the ``.log``."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int
    magic: int
    records_count: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def _header_at(buf: bytes | memoryview, off: int, position: int) -> BatchHeader:
    h = BATCH_HEADER.unpack_from(buf, off)
    return BatchHeader(position, h[1] + LOG_OVERHEAD, h[0], h[0] + h[6], h[8], h[2], h[3], h[12])


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    """Read up to ``size`` bytes at ``position`` (fewer only at end of file)."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogSegment:
    """A segment of a partition log. Construct with ``create`` (new) or ``open`` + ``load``/``recover``.

    State kept in memory: ``size`` (bytes in the ``.log``), ``next_offset`` (last offset + 1, or
    ``base_offset`` when empty), ``max_timestamp_so_far`` / ``offset_of_max_timestamp_so_far`` (the max batch
    timestamp and the last offset of the first batch that reached it; -1 when unknown), ``created_ms`` and
    ``rolling_base_timestamp`` (max timestamp of the first batch, used for ``segment.ms`` rolls).
    """

    def __init__(self, dir: Path, base_offset: int, config: LogConfig, file: BinaryIO, now_ms: int) -> None:
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.config = config
        self.file = file
        self.log_path = self.dir / (filename_prefix(base_offset) + LOG_SUFFIX)
        self.offset_index = OffsetIndex(
            self.dir / (filename_prefix(base_offset) + INDEX_SUFFIX), base_offset, config.segment_index_bytes // 8
        )
        self.time_index = TimeIndex(
            self.dir / (filename_prefix(base_offset) + TIME_INDEX_SUFFIX), base_offset, config.segment_index_bytes // 12
        )
        #: aborted transactions whose ABORT markers are in this segment (written by PartitionLog)
        self.txn_index = TransactionIndex(self.dir / (filename_prefix(base_offset) + TXN_INDEX_SUFFIX))
        self.size = os.fstat(file.fileno()).st_size
        self.next_offset = base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = -1
        self.created_ms = now_ms
        self.rolling_base_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        self._dirty = False
        self.deleted = False
        #: a failed write left bytes past ``size`` that could not be cut off (only recovery may touch it now)
        self.tail_damaged = False

    def relocate(self, new_dir: Path) -> None:
        """The segment's directory was renamed to ``new_dir`` (open handles stay valid): update the paths."""
        self.dir = Path(new_dir)
        self.log_path = self.dir / self.log_path.name
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.path = self.dir / index.path.name

    # -- construction -------------------------------------------------------------------------------

    @classmethod
    def create(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int | None = None) -> LogSegment:
        """Create a new empty segment. Stale index files with the same base offset are emptied.
        Raises FileExistsError if a non-empty ``.log`` with that name exists."""
        path = Path(dir) / (filename_prefix(base_offset) + LOG_SUFFIX)
        if path.exists() and path.stat().st_size > 0:
            raise FileExistsError(f"segment {path} already exists")
        f = open(path, "a+b", buffering=0)
        seg = cls(dir, base_offset, config, f, _now_ms() if now_ms is None else now_ms)
        seg.offset_index.reset([])
        seg.time_index.reset([])
        seg.txn_index.reset([])
        return seg

    @classmethod
    def open(cls, dir: Path, base_offset: int, config: LogConfig, now_ms: int | None = None) -> LogSegment:
        """Open an existing segment file without reading it; follow with ``load()`` or ``recover()``."""
        path = Path(dir) / (filename_prefix(base_offset) + LOG_SUFFIX)
        f = open(path, "a+b", buffering=0)
        return cls(dir, base_offset, config, f, _now_ms() if now_ms is None else now_ms)

    # -- header scanning ----------------------------------------------------------------------------

    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Walk batch headers from ``position`` (must be a batch start) while whole batches fit before ``end``
        (default: the segment size). Stops at a torn or implausible header without raising."""
        fd = self.file.fileno()
        end = self.size if end is None else min(end, self.size)
        buf = b""
        buf_pos = position
        pos = position
        while pos + BATCH_HEADER_SIZE <= end:
            off = pos - buf_pos
            if off < 0 or off + BATCH_HEADER_SIZE > len(buf):
                buf = _pread_exact(fd, max(_SCAN_CHUNK, BATCH_HEADER_SIZE), pos)
                buf_pos = pos
                off = 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            hdr = _header_at(buf, off, pos)
            if hdr.size < BATCH_HEADER_SIZE or pos + hdr.size > end:
                return
            yield hdr
            pos += hdr.size

    def read_header(self, position: int) -> BatchHeader | None:
        """The header at ``position`` or None if fewer than 61 bytes remain there."""
        data = _pread_exact(self.file.fileno(), BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            return None
        return _header_at(data, 0, position)

    def read_batch(self, header: BatchHeader) -> RecordBatch:
        """Read the whole batch described by ``header`` (a copy, via pread)."""
        data = _pread_exact(self.file.fileno(), header.size, header.position)
        return RecordBatch(data)

    # -- load / recover -----------------------------------------------------------------------------

    def load(self) -> bool:
        """Fast open after a clean shutdown: load the indexes, then scan batch headers after the last offset
        index entry to find ``next_offset`` and the max timestamp.

        Returns False when the indexes are missing/inconsistent or the tail is torn; the caller should then
        run ``recover()``. Does not verify CRCs.
        """
        self.size = os.fstat(self.file.fileno()).st_size
        if not self.offset_index.load(self.size) or not self.time_index.load():
            return False
        if not self._rescan_tail():
            return False
        if self.size > 0:
            first = self.read_header(0)
            if first is None or first.base_offset < self.base_offset:
                return False
            self.rolling_base_timestamp = first.max_timestamp if first.max_timestamp >= 0 else None
        return True

    def _rescan_tail(self) -> bool:
        """Recompute in-memory state from the indexes plus the headers after the last offset index entry.
        False if the bytes after that point are not a clean sequence of whole batches."""
        last_off, pos = self.offset_index.last_entry
        ts, ts_off = self.time_index.last_entry
        self.max_timestamp_so_far = ts
        self.offset_of_max_timestamp_so_far = ts_off if ts >= 0 else -1
        next_offset = self.base_offset
        checked_entry = len(self.offset_index) == 0
        prev_next = self.base_offset
        end = pos
        for hdr in self.iter_headers(pos):
            if hdr.magic != MAGIC_V2 or hdr.size - LOG_OVERHEAD < MIN_BATCH_LENGTH or hdr.base_offset < prev_next:
                return False
            if not checked_entry:
                if hdr.last_offset != last_off:
                    return False
                checked_entry = True
            if hdr.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = hdr.max_timestamp
                self.offset_of_max_timestamp_so_far = hdr.last_offset
            next_offset = prev_next = hdr.last_offset + 1
            end = hdr.position + hdr.size
        if end != self.size or not checked_entry:
            return False
        if self.max_timestamp_so_far >= 0 and self.offset_of_max_timestamp_so_far >= next_offset:
            return False  # time index points past the data
        self.next_offset = next_offset
        self.bytes_since_last_index_entry = self.size - pos
        return True

    def recover(self) -> int:
        """Rebuild this segment from its ``.log``: validate every batch (header, magic, length, CRC, offsets
        not going backwards), rebuild both indexes, truncate the file after the last valid batch.

        Returns the number of bytes truncated (0 if the file was intact).
        """
        fd = self.file.fileno()
        file_size = os.fstat(fd).st_size
        interval = self.config.index_interval_bytes
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        max_ts, off_max = -1, -1
        since = 0
        pos = 0
        prev_next = self.base_offset
        first_ts: int | None = None
        max_offset_entries = self.offset_index.max_entries
        max_time_entries = self.time_index.max_entries
        while pos + BATCH_HEADER_SIZE <= file_size:
            head = _pread_exact(fd, BATCH_HEADER_SIZE, pos)
            if len(head) < BATCH_HEADER_SIZE:
                break
            hdr = _header_at(head, 0, pos)
            if hdr.size < BATCH_HEADER_SIZE or pos + hdr.size > file_size or hdr.magic != MAGIC_V2:
                break
            data = _pread_exact(fd, hdr.size, pos)
            if len(data) < hdr.size:
                break
            batch = RecordBatch(data)
            if not batch.verify_crc() or hdr.records_count < 0:
                # Only structure and CRC: a compacted batch may legitimately hold fewer records than its
                # offset range, so the producer-side count check does not apply here.
                log.warning("%s: corrupt batch (CRC/count) at position %d", self.log_path, pos)
                break
            if hdr.base_offset < prev_next or hdr.last_offset < hdr.base_offset:
                log.warning("%s: offsets go backwards at position %d", self.log_path, pos)
                break
            if hdr.last_offset - self.base_offset > 0x7FFFFFFF:
                break
            if first_ts is None:
                first_ts = hdr.max_timestamp
            if hdr.max_timestamp > max_ts:
                max_ts, off_max = hdr.max_timestamp, hdr.last_offset
            if since >= interval and len(offset_entries) < max_offset_entries:
                offset_entries.append((hdr.last_offset, pos))
                if max_ts >= 0 and (not time_entries or max_ts > time_entries[-1][0]) and len(time_entries) < max_time_entries:
                    time_entries.append((max_ts, off_max))
                since = 0
            since += hdr.size
            prev_next = hdr.last_offset + 1
            pos += hdr.size
        truncated = file_size - pos
        if truncated:
            log.warning("%s: truncating %d bytes at position %d", self.log_path, truncated, pos)
            os.ftruncate(fd, pos)
            self._dirty = True
        if max_ts >= 0 and (not time_entries or max_ts > time_entries[-1][0]):
            time_entries.append((max_ts, off_max))  # final entry, like a rolled segment
        self.offset_index.reset(offset_entries)
        self.time_index.reset(time_entries)
        self.txn_index.truncate_to(prev_next)  # markers cut off with a torn tail; the rest is re-added by replay
        self.size = pos
        self.next_offset = prev_next
        self.max_timestamp_so_far = max_ts
        self.offset_of_max_timestamp_so_far = off_max
        self.bytes_since_last_index_entry = since
        self.rolling_base_timestamp = first_ts if first_ts is not None and first_ts >= 0 else None
        return truncated

    # -- append -------------------------------------------------------------------------------------

    def append(
        self, largest_offset: int, largest_timestamp: int, offset_of_max_ts: int, records: bytes | bytearray | memoryview
    ) -> None:
        """Append whole batches (offsets already assigned, all >= ``next_offset``) with one write.

        ``largest_offset`` is the last offset in ``records``; ``largest_timestamp``/``offset_of_max_ts``
        its max timestamp and where it is. Index entries are added per batch every
        ``index.interval.bytes``. Raises OSError on I/O failure.
        """
        mv = records if isinstance(records, memoryview) else memoryview(records)
        n = len(mv)
        if n == 0:
            return
        start = self.size
        f = self.file
        view = mv
        try:
            while view:
                written = f.write(view)
                if written is None:
                    raise OSError("non-blocking write on a segment file")
                view = view[written:]
        except OSError:
            # A short write (disk full, I/O error) must leave no partial batch behind: cut the file back to the
            # size this segment knows, so that nothing later lands at another position than recorded.
            self._dirty = True
            try:
                os.ftruncate(f.fileno(), start)
            except OSError:
                self.tail_damaged = True  # recovery cuts it at the next start; the directory goes offline now
            raise
        self._dirty = True
        if start == 0:
            first_max = BATCH_HEADER.unpack_from(mv, 0)[8]
            self.rolling_base_timestamp = first_max if first_max >= 0 else None
        interval = self.config.index_interval_bytes
        unpack = BATCH_HEADER.unpack_from
        p = 0
        while p < n:
            h = unpack(mv, p)
            size = h[1] + LOG_OVERHEAD
            last = h[0] + h[6]
            if h[8] > self.max_timestamp_so_far:
                self.max_timestamp_so_far = h[8]
                self.offset_of_max_timestamp_so_far = last
            if self.bytes_since_last_index_entry >= interval and not self.offset_index.is_full:
                self.offset_index.append(last, start + p)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += size
            p += size
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp_so_far = offset_of_max_ts
        self.size = start + n
        self.next_offset = largest_offset + 1

    def on_become_inactive(self) -> None:
        """Called when the segment stops being the active one: add a final time index entry so the max
        timestamp survives a restart."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, True)

    # -- lookups ------------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def is_full(self) -> bool:
        """Either index reached ``segment.index.bytes``."""
        return self.offset_index.is_full or self.time_index.is_full

    @property
    def largest_timestamp(self) -> int:
        """Max batch timestamp in the segment, or the file's mtime (ms) when it holds none (retention)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        try:
            return int(os.fstat(self.file.fileno()).st_mtime * 1000)
        except (OSError, ValueError):
            return _now_ms()

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset`` (the batch holding ``offset``, or the
        next one if ``offset`` falls in a gap); None if the segment has none."""
        _, pos = self.offset_index.lookup(offset)
        for hdr in self.iter_headers(max(pos, start_position)):
            if hdr.last_offset >= offset:
                return hdr
        return None

    def batch_end_at_or_before(self, start_position: int, limit: int) -> int:
        """End position of the last whole batch that starts at or after ``start_position`` (a batch start)
        and ends at or before ``limit``; ``start_position`` if even the first does not fit."""
        limit = min(limit, self.size)
        p = max(start_position, self.offset_index.floor_position(limit))
        for hdr in self.iter_headers(p, limit):
            p = hdr.position + hdr.size
        return p

    def read(self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False) -> FileRegion | None:
        """Whole batches starting with the batch that holds ``start_offset``, within ``max_size`` bytes and
        ending at or before byte ``max_position`` (default: segment size).

        With ``min_one_message`` the first batch is returned even if larger than ``max_size``. None when no
        batch qualifies.
        """
        hdr = self.translate_offset(start_offset)
        if hdr is None:
            return None
        return self.read_from(hdr, max_size, max_position, min_one_message)

    def read_from(self, hdr: BatchHeader, max_size: int, max_position: int | None = None, min_one_message: bool = False) -> FileRegion | None:
        """Like ``read`` but starting at an already located batch header."""
        max_position = self.size if max_position is None else min(max_position, self.size)
        if hdr.position + hdr.size > max_position:
            return None
        end = self.batch_end_at_or_before(hdr.position, min(max_position, hdr.position + max(max_size, 0)))
        if end == hdr.position:
            if not min_one_message:
                return None
            end = hdr.position + hdr.size
        return FileRegion(self.file, hdr.position, end - hdr.position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, int, int] | None:
        """First record with timestamp >= ``timestamp`` and offset >= ``starting_offset``:
        ``(offset, record timestamp, batch partition leader epoch)``; None if no such record here.

        Uses the time index to find where to start, walks batch headers to the first batch whose max
        timestamp qualifies and decodes only candidate batches."""
        _, ts_off = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(ts_off)
        for hdr in self.iter_headers(pos):
            if hdr.max_timestamp < timestamp or hdr.last_offset < starting_offset:
                continue
            batch = self.read_batch(hdr)
            for rec in batch.records():
                if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                    return rec.offset, rec.timestamp, batch.partition_leader_epoch
        return None

    def find_max_timestamp_record(self) -> tuple[int, int, int] | None:
        """``(offset, timestamp, leader epoch)`` of the first record carrying the segment's max timestamp."""
        if self.max_timestamp_so_far < 0:
            return None
        hdr = self.translate_offset(self.offset_of_max_timestamp_so_far)
        candidates = [hdr] if hdr is not None and hdr.max_timestamp == self.max_timestamp_so_far else []
        if not candidates:  # fall back to a full header walk
            candidates = [h for h in self.iter_headers(0) if h.max_timestamp == self.max_timestamp_so_far][:1]
        for h in candidates:
            batch = self.read_batch(h)
            for rec in batch.records():
                if rec.timestamp == self.max_timestamp_so_far:
                    return rec.offset, rec.timestamp, batch.partition_leader_epoch
        return None

    # -- truncation / durability / lifecycle --------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and everything after it. Returns the bytes removed."""
        hdr = self.translate_offset(offset)
        if hdr is None:
            return 0
        removed = self.size - hdr.position
        os.ftruncate(self.file.fileno(), hdr.position)
        self._dirty = True
        self.size = hdr.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(hdr.base_offset)
        if not self._rescan_tail():
            self.recover()
        if self.size == 0:
            self.rolling_base_timestamp = None
            self.created_ms = _now_ms()
        return removed

    def flush(self) -> None:
        """fsync the ``.log`` and the indexes."""
        if self._dirty:
            self._dirty = False  # cleared first: an append racing with a threaded flush re-marks it
            try:
                os.fsync(self.file.fileno())
            except BaseException:
                self._dirty = True
                raise
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Flush and close the files (idempotent)."""
        if not self.file.closed:
            try:
                self.flush()
            finally:
                self.file.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def rename_to_deleted(self) -> None:
        """Rename the segment's files with a ``.deleted`` suffix; files stay open for in-flight reads."""
        new_log = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        try:
            os.replace(self.log_path, new_log)
        except FileNotFoundError:
            pass
        self.log_path = new_log
        self.offset_index.rename_to(self.offset_index.path.with_name(self.offset_index.path.name + DELETED_SUFFIX))
        self.time_index.rename_to(self.time_index.path.with_name(self.time_index.path.name + DELETED_SUFFIX))
        self.txn_index.rename_to(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))
        self.deleted = True

    def delete_files(self) -> None:
        """Close (without fsync) and unlink the segment's files."""
        if not self.file.closed:
            self.file.close()
        for p in (self.log_path,):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        self.offset_index.delete_file()
        self.time_index.delete_file()
        self.txn_index.delete_file()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"
