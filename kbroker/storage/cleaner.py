"""The log cleaner: compaction of logs whose ``cleanup.policy`` includes ``compact``.

Rules are Apache Kafka's (``LogCleaner``, ``LogCleanerManager``, ``MemoryRecords.filterTo``; facts only):

Choosing a log (:meth:`LogCleaner.grab_filthiest`, on the event loop)
    The *first dirty offset* is where the previous cleaning stopped (``cleaner-offset-checkpoint`` in each
    log dir; the log start offset when unknown or out of range). Cleaning never goes past the *first
    uncleanable offset*: the active segment, the high watermark / last stable offset (no open transaction is
    compacted) and, with ``min.compaction.lag.ms``, the first segment whose largest timestamp is younger than
    the lag; it is rounded down to a segment boundary. The dirty ratio is dirty bytes / (clean + dirty bytes);
    a log is cleaned when the ratio exceeds ``min.cleanable.dirty.ratio``, or when a dirty segment's first
    batch is older than ``max.compaction.lag.ms``. The filthiest log goes first.

Cleaning (:meth:`LogCleaner.clean`, in a worker thread, on a snapshot of closed segments)
    1. An offset map (key -> last offset) is built from the dirty segments; records of aborted
       transactions are left out.
    2. Every segment from the log start up to the first uncleanable offset is rewritten, in groups whose
       total size fits ``segment.bytes``, into ``<base>.log.cleaned``. A record is kept when no later record
       has its key; keyless records are dropped; a tombstone (null value) is kept until its batch's delete
       horizon (``delete.retention.ms`` after the cleaning that first saw it, stored in the batch header,
       KIP-534) has passed. A batch whose records all stay is copied byte for byte; otherwise it is rebuilt
       with the kept records, the same base and last offset (offsets never change), the same producer id,
       epoch and base sequence and the same compression, with a new CRC. A batch left empty is dropped,
       except the last batch of each active producer (its sequence and epoch are needed for idempotence) and
       the last batch of the cleaned range, which stay as empty batches.
    3. Transaction markers: batches of aborted transactions are removed; a COMMIT/ABORT marker is removed
       only once no batch of its transaction is left and its own delete horizon has passed.

Swapping in (:meth:`LogCleaner.install`, on the event loop)
    ``.cleaned`` -> ``.swap`` (the commit point), the replaced segments are renamed ``.deleted`` (kept open
    for in-flight fetches until ``file.delete.delay.ms``), ``.swap`` -> ``.log``, then the indexes computed by
    the worker are written. ``PartitionLog`` finishes an interrupted swap when it loads a log: a ``.swap``
    segment replaces the segments it covers. If the log changed meanwhile (retention, deletion) the result is
    discarded. Nothing here blocks the event loop for long: only the renames and the index writes run there.

No asyncio: the server's periodic task calls these three steps (``kbroker.server.broker``).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from kbroker.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    ControlType,
    RecordBatch,
    _encode_record,
    compress,
    crc32c,
)
from kbroker.storage.checkpoints import CheckpointError, OffsetCheckpointFile
from kbroker.storage.config import LogConfig
from kbroker.storage.util import CLEANED_SUFFIX, LOG_SUFFIX, filename_prefix

if TYPE_CHECKING:
    from kbroker.storage.log import PartitionLog
    from kbroker.storage.log_manager import LogManager
    from kbroker.storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
_U32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_READ_CHUNK = 1 << 20


class CleaningAborted(Exception):
    """The log changed under the cleaner (deleted, closed, segments replaced); the round is thrown away."""


@dataclass(slots=True)
class CleanerConfig:
    """Broker-level cleaner settings (Kafka's ``log.cleaner.*`` keys)."""

    enable: bool = True
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_max_bytes_per_second: float = float("inf")

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> CleanerConfig:
        def get(key: str, default: str) -> str:
            value = props.get(key)
            return default if value is None or str(value).strip() == "" else str(value).strip()

        return cls(enable=get("log.cleaner.enable", "true").lower() == "true",
                   backoff_ms=int(get("log.cleaner.backoff.ms", "15000")),
                   dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size", str(128 * 1024 * 1024))),
                   io_max_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second", "inf")))

    @property
    def max_map_entries(self) -> int:
        # a Python dict entry (bytes key + int) costs roughly 128 bytes
        return max(1000, self.dedupe_buffer_size // 128)


@dataclass(slots=True)
class LogToClean:
    """A compactable log and the range the next cleaning would cover."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int = 0

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanTask:
    """What the worker thread needs: a snapshot taken on the event loop."""

    log: PartitionLog
    dir: Path
    config: LogConfig
    segments: list[tuple[LogSegment, int]]  # (segment, size) from the log start to the first uncleanable offset
    tail: list[tuple[LogSegment, int]]  # the rest of the log, for transaction markers and producers' last batches
    first_dirty_offset: int
    end_offset: int  # first uncleanable offset
    now_ms: int
    active_producers: dict[int, tuple[int, int]] | None  # producer id -> (last data offset or -1, epoch)
    max_map_entries: int
    io_max_bytes_per_second: float = float("inf")


@dataclass(slots=True)
class CleanedSegment:
    """One ``<base>.log.cleaned`` file and the state of the segment it becomes."""

    replaces: list[LogSegment]
    base_offset: int
    path: Path
    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    first_batch_max_timestamp: int | None
    offset_index: list[tuple[int, int]]
    time_index: list[tuple[int, int]]


@dataclass(slots=True)
class CleanResult:
    task: CleanTask
    end_offset: int  # where the next cleaning starts
    segments: list[CleanedSegment] = field(default_factory=list)
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


# ---- reading batches from a segment snapshot ---------------------------------------------------------------


def _iter_batches(seg: LogSegment, size: int, start_position: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(position, batch bytes)`` of the whole batches in ``seg`` up to ``size`` bytes (a snapshot: appends
    after it are not seen). Raises CleaningAborted if the file was closed meanwhile."""
    try:
        fd = seg.file.fileno()
    except ValueError as exc:  # closed: the log was deleted
        raise CleaningAborted(f"{seg.log_path} was closed") from exc
    pos = start_position
    buf = b""
    buf_pos = pos
    while pos + BATCH_HEADER_SIZE <= size:
        off = pos - buf_pos
        if off + BATCH_HEADER_SIZE > len(buf):
            buf, buf_pos, off = _pread(fd, min(_READ_CHUNK, size - pos), pos), pos, 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        batch_size = BATCH_HEADER.unpack_from(buf, off)[1] + LOG_OVERHEAD
        if batch_size < BATCH_HEADER_SIZE or pos + batch_size > size:
            return
        if off + batch_size > len(buf):
            buf, buf_pos, off = _pread(fd, max(batch_size, min(_READ_CHUNK, size - pos)), pos), pos, 0
            if len(buf) < batch_size:
                return
        yield pos, buf[off: off + batch_size]
        pos += batch_size


def _pread(fd: int, n: int, pos: int) -> bytes:
    try:
        data = os.pread(fd, n, pos)
    except (OSError, ValueError) as exc:
        raise CleaningAborted(f"read failed: {exc}") from exc
    while len(data) < n:
        more = os.pread(fd, n - len(data), pos + len(data))
        if not more:
            break
        data += more
    return data


# ---- transactions -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Txn:
    producer_id: int
    first_offset: int
    marker_offset: int
    aborted: bool


class _TxnIndex:
    """Completed transactions of the log (found by scanning its batch headers): which transactional batches
    belong to an aborted transaction, and whether a marker's transaction still has batches left."""

    def __init__(self, txns: list[_Txn]) -> None:
        self.by_producer: dict[int, list[_Txn]] = {}
        for t in txns:
            self.by_producer.setdefault(t.producer_id, []).append(t)
        self.markers = {t.marker_offset: t for t in txns}

    def txn_of(self, producer_id: int, offset: int) -> _Txn | None:
        txns = self.by_producer.get(producer_id)
        if not txns:
            return None
        i = bisect.bisect_left([t.marker_offset for t in txns], offset)
        if i < len(txns) and txns[i].first_offset <= offset:
            return txns[i]
        return None


def _scan_log(segments: list[tuple[LogSegment, int]]) -> tuple[_TxnIndex, dict[int, tuple[int, int]]]:
    """One pass over batch headers (and the key of control records): completed transactions, and each
    producer's last batch ``(last data offset or -1 if the last one is a marker, epoch)``."""
    open_txns: dict[int, int] = {}
    txns: list[_Txn] = []
    last: dict[int, tuple[int, int]] = {}
    for seg, size in segments:
        for _, data in _iter_batches(seg, size):
            h = BATCH_HEADER.unpack_from(data, 0)
            pid, attrs = h[9], h[5]
            if pid < 0:
                continue
            if attrs & CONTROL_FLAG:
                last[pid] = (-1, h[10])
                ctype = _control_type(data)
                if ctype in (ControlType.ABORT, ControlType.COMMIT):
                    first = open_txns.pop(pid, None)
                    if first is not None:
                        txns.append(_Txn(pid, first, h[0], ctype == ControlType.ABORT))
            else:
                last[pid] = (h[0] + h[6], h[10])
                if attrs & TRANSACTIONAL_FLAG:
                    open_txns.setdefault(pid, h[0])
    return _TxnIndex(txns), last


def _control_type(data: bytes) -> int | None:
    try:
        for rec in RecordBatch(data).records():
            if rec.key is not None and len(rec.key) >= 4:
                return _CONTROL_KEY.unpack_from(rec.key)[1]
    except Exception:  # noqa: BLE001 - an unreadable marker is kept as it is
        return None
    return None


class _TxnTracker:
    """Kafka's ``CleanedTransactionMetadata`` for one pass over the log: a data batch of an aborted
    transaction can go; a marker can go once none of its transaction's batches was seen in this pass."""

    def __init__(self, index: _TxnIndex) -> None:
        self.index = index
        self.seen: set[int] = set()  # marker offsets of transactions with a batch seen in this pass

    def on_data_batch(self, h: tuple) -> bool:
        """True if the batch belongs to an aborted transaction (its records can be discarded)."""
        if not h[5] & TRANSACTIONAL_FLAG or h[9] < 0:
            return False
        txn = self.index.txn_of(h[9], h[0])
        if txn is None:
            return False
        self.seen.add(txn.marker_offset)
        return txn.aborted

    def on_control_batch(self, h: tuple, data: bytes) -> bool:
        """True if the marker's transaction has no batch left (the marker may be removed after its horizon)."""
        if h[12] == 0:
            return True  # an empty control batch: already cleaned
        txn = self.index.markers.get(h[0])
        if txn is None:  # a marker of a transaction without batches (or another kind of control record)
            return _control_type(data) in (ControlType.ABORT, ControlType.COMMIT)
        return txn.marker_offset not in self.seen


# ---- building output batches --------------------------------------------------------------------------------


def _empty_batch(h: tuple) -> bytes:
    """Header-only batch keeping the offsets, producer id, epoch, sequence and max timestamp (Kafka's
    ``writeEmptyHeader``)."""
    attrs = h[5] & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG | CONTROL_FLAG)
    header = bytearray(BATCH_HEADER.pack(h[0], BATCH_HEADER_SIZE - LOG_OVERHEAD, h[2], h[3], 0, attrs, h[6], -1, h[8],
                                         h[9], h[10], h[11], 0))
    _U32.pack_into(header, CRC_OFFSET, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    return bytes(header)


def _rebuild_batch(h: tuple, records: list, delete_horizon: int | None) -> tuple[bytes, int]:
    """A batch with ``records`` only (offset deltas from the original base, same last offset, same
    compression); returns ``(bytes, max timestamp)``."""
    base_offset = h[0]
    log_append = bool(h[5] & TIMESTAMP_TYPE_MASK)
    base_ts = delete_horizon if delete_horizon is not None else records[0].timestamp
    max_ts = h[8] if log_append else max(r.timestamp for r in records)
    body = b"".join(_encode_record(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
                    for r in records)
    codec = h[5] & COMPRESSION_MASK
    if codec:
        body = compress(codec, body)
    attrs = h[5] & ~DELETE_HORIZON_FLAG
    if delete_horizon is not None:
        attrs |= DELETE_HORIZON_FLAG
    header = bytearray(BATCH_HEADER.pack(base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body), h[2], h[3], 0,
                                         attrs, h[6], base_ts, max_ts, h[9], h[10], h[11], len(records)))
    _U32.pack_into(header, CRC_OFFSET, crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])))
    return bytes(header) + body, max_ts


class _SegmentWriter:
    """Writes ``<base>.log.cleaned`` and computes the offset and time index entries as ``LogSegment`` would."""

    def __init__(self, dir: Path, base_offset: int, index_interval: int) -> None:
        self.base_offset = base_offset
        self.path = dir / (filename_prefix(base_offset) + LOG_SUFFIX + CLEANED_SUFFIX)
        self.file = open(self.path, "wb")
        self.index_interval = index_interval
        self.size = 0
        self.since_index = 0
        self.next_offset = base_offset
        self.max_ts, self.off_max = -1, -1
        self.first_batch_ts: int | None = None
        self.offset_index: list[tuple[int, int]] = []
        self.time_index: list[tuple[int, int]] = []

    def append(self, data: bytes) -> None:
        h = BATCH_HEADER.unpack_from(data, 0)
        last = h[0] + h[6]
        if self.size == 0:
            self.first_batch_ts = h[8] if h[8] >= 0 else None
        if h[8] > self.max_ts:
            self.max_ts, self.off_max = h[8], last
        if self.since_index >= self.index_interval:
            self.offset_index.append((last, self.size))
            if self.max_ts >= 0 and (not self.time_index or self.max_ts > self.time_index[-1][0]):
                self.time_index.append((self.max_ts, self.off_max))
            self.since_index = 0
        self.file.write(data)
        self.size += len(data)
        self.since_index += len(data)
        self.next_offset = last + 1

    def finish(self, replaces: list[LogSegment]) -> CleanedSegment:
        if self.max_ts >= 0 and (not self.time_index or self.max_ts > self.time_index[-1][0]):
            self.time_index.append((self.max_ts, self.off_max))  # final entry, like a rolled segment
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return CleanedSegment(replaces, self.base_offset, self.path, self.size, self.next_offset, self.max_ts,
                              self.off_max, self.first_batch_ts, self.offset_index, self.time_index)

    def discard(self) -> None:
        if not self.file.closed:
            self.file.close()
        self.path.unlink(missing_ok=True)


class _Throttler:
    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.bytes = 0

    def maybe_throttle(self, n: int) -> None:
        if self.rate == float("inf") or self.rate <= 0:
            return
        self.bytes += n
        ahead = self.bytes / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            time.sleep(min(ahead, 1.0))


# ---- the cleaner ------------------------------------------------------------------------------------------


class LogCleaner:
    """Compacts the logs of a :class:`~kbroker.storage.log_manager.LogManager`. See the module docstring.

    ``grab_filthiest``, ``prepare`` and ``install`` must run on the thread that owns the logs (the event loop);
    ``clean`` runs in a worker thread and only reads the segment files of its task.
    """

    def __init__(self, log_manager: LogManager, config: CleanerConfig | None = None) -> None:
        self.log_manager = log_manager
        self.config = config or CleanerConfig()
        self.first_dirty: dict[tuple[str, int], int] = {}
        self._owners: dict[tuple[str, int], PartitionLog] = {}  # which log a first dirty offset belongs to
        self.in_progress: set[tuple[str, int]] = set()
        self.rounds = 0
        self._load_checkpoints()

    # -- checkpoints --------------------------------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        for root in self.log_manager.log_dirs:
            path = Path(root) / CLEANER_OFFSET_CHECKPOINT
            try:
                if path.is_file() and path.stat().st_size == 0:
                    continue  # Kafka creates the file empty at start-up and keeps it so until a log is cleaned
                self.first_dirty.update(OffsetCheckpointFile(path).read())
            except (CheckpointError, OSError) as exc:
                log.warning("ignoring unreadable cleaner checkpoint in %s: %s", root, exc)

    def _write_checkpoint(self, root: Path) -> None:
        live = {(p.topic, p.partition) for p in self.log_manager.all_logs()}
        entries = {tp: off for tp, off in self.first_dirty.items()
                   if tp in live and self.log_manager.log_dir_of(*tp) == root}
        OffsetCheckpointFile(root / CLEANER_OFFSET_CHECKPOINT).write(entries)

    # -- choosing ----------------------------------------------------------------------------------------

    def cleanable(self, plog: PartitionLog, now_ms: int) -> LogToClean | None:
        """The cleanable range of a compacted log, or None if the log is not compacted or has no closed
        dirty segment."""
        cfg = plog.config
        if plog.closed or not cfg.compact:
            return None
        segs = plog.segments
        start, leo = plog.log_start_offset, plog.log_end_offset
        tp = (plog.topic, plog.partition)
        if self._owners.setdefault(tp, plog) is not plog:  # deleted and re-created: a new log, all dirty
            self._owners[tp] = plog
            self.first_dirty.pop(tp, None)
        first_dirty = self.first_dirty.get(tp, start)
        if first_dirty < start or first_dirty > leo:
            first_dirty = start
        bases = [s.base_offset for s in segs]

        def floor_index(offset: int) -> int:
            return max(0, bisect.bisect_right(bases, offset) - 1)

        dirty_idx = floor_index(first_dirty)
        dirty_segs = segs[dirty_idx:-1]
        uncleanable = min(plog.high_watermark, bases[-1], _first_unstable_offset(plog))
        if cfg.min_compaction_lag_ms > 0:
            for s in dirty_segs:
                if s.largest_timestamp > now_ms - cfg.min_compaction_lag_ms:
                    uncleanable = min(uncleanable, s.base_offset)
                    break
        unclean_idx = floor_index(max(first_dirty, uncleanable))
        uncleanable = bases[unclean_idx]  # rounded down to a segment boundary
        clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
        cleanable_bytes = sum(s.size for s in segs[dirty_idx:unclean_idx])
        delay = 0
        if cfg.max_compaction_lag_ms < 2**63 - 1:
            stamps = [s.rolling_base_timestamp for s in dirty_segs
                      if s.rolling_base_timestamp is not None and s.rolling_base_timestamp > 0]
            if stamps and min(stamps) < now_ms - cfg.max_compaction_lag_ms:
                delay = now_ms - cfg.max_compaction_lag_ms - min(stamps)
        return LogToClean(plog, first_dirty, uncleanable, clean_bytes, cleanable_bytes, delay)

    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        """The log most in need of cleaning: one past ``max.compaction.lag.ms`` first, else the highest dirty
        ratio above its ``min.cleanable.dirty.ratio``; None if no log qualifies."""
        if not self.config.enable:
            return None
        candidates = []
        for plog in self.log_manager.all_logs():
            if (plog.topic, plog.partition) in self.in_progress:
                continue
            ltc = self.cleanable(plog, now_ms)
            if ltc is None or ltc.cleanable_bytes <= 0:
                continue
            if ltc.max_compaction_delay_ms > 0 or ltc.cleanable_ratio > plog.config.min_cleanable_dirty_ratio:
                candidates.append(ltc)
        if not candidates:
            return None
        return max(candidates, key=lambda c: (c.max_compaction_delay_ms > 0, c.max_compaction_delay_ms,
                                              c.cleanable_ratio))

    def prepare(self, ltc: LogToClean, now_ms: int) -> CleanTask:
        """Snapshot what ``clean`` needs (segment objects and their current sizes, producers, config)."""
        plog = ltc.log
        segs = plog.segments
        inside = [(s, s.size) for s in segs if s.base_offset < ltc.first_uncleanable_offset]
        tail = [(s, s.size) for s in segs if s.base_offset >= ltc.first_uncleanable_offset]
        producers = None
        state = getattr(plog, "producer_state", None)
        if state is not None and hasattr(state, "producers"):
            producers = {pid: (e.last_data_offset, e.producer_epoch) for pid, e in state.producers.items()}
        self.in_progress.add((plog.topic, plog.partition))
        return CleanTask(plog, plog.dir, plog.config, inside, tail, ltc.first_dirty_offset,
                         ltc.first_uncleanable_offset, now_ms, producers, self.config.max_map_entries,
                         self.config.io_max_bytes_per_second)

    # -- cleaning (worker thread) ---------------------------------------------------------------------

    @staticmethod
    def clean(task: CleanTask) -> CleanResult:
        """Build the offset map and write the cleaned segments. Reads only the task's snapshot."""
        throttler = _Throttler(task.io_max_bytes_per_second)
        txn_index, last_batches = _scan_log(task.segments + task.tail)
        active = task.active_producers if task.active_producers is not None else last_batches
        offset_map, end = _build_offset_map(task, txn_index, throttler)
        result = CleanResult(task, end)
        groups = _group_segments([(s, n) for s, n in task.segments if s.base_offset < end], task.config, end)
        tracker = _TxnTracker(txn_index)
        latest = end - 1
        writers: list[_SegmentWriter] = []
        try:
            for group in groups:
                writer = _SegmentWriter(task.dir, group[0][0].base_offset, task.config.index_interval_bytes)
                writers.append(writer)
                for seg, size in group:
                    for _, data in _iter_batches(seg, size):
                        result.bytes_read += len(data)
                        throttler.maybe_throttle(len(data))
                        out = _filter_batch(data, offset_map, latest, end, tracker, active, task, result)
                        if out is not None:
                            writer.append(out)
                            result.bytes_written += len(out)
                result.segments.append(writer.finish([s for s, _ in group]))
        except BaseException:
            for w in writers:
                w.discard()
            raise
        return result

    # -- swapping in (event loop) -------------------------------------------------------------------------

    def install(self, result: CleanResult) -> bool:
        """Swap the cleaned segments in; False (and the files removed) if the log changed meanwhile."""
        plog = result.task.log
        tp = (plog.topic, plog.partition)
        self.in_progress.discard(tp)
        try:
            if plog.closed:
                raise CleaningAborted("log closed")
            for cleaned in result.segments:
                plog.replace_segments(cleaned.replaces, cleaned)
        except (CleaningAborted, ValueError) as exc:
            log.info("%s-%d: cleaning discarded (%s)", plog.topic, plog.partition, exc)
            self.discard(result)
            return False
        self.first_dirty[tp] = result.end_offset
        self.rounds += 1
        root = self.log_manager.log_dir_of(*tp)
        if root is not None:
            try:
                self._write_checkpoint(root)
            except OSError as exc:
                log.warning("could not write %s: %s", CLEANER_OFFSET_CHECKPOINT, exc)
        log.info("%s-%d: cleaned offsets [%d, %d): %d of %d records kept, %d -> %d bytes", plog.topic,
                 plog.partition, plog.log_start_offset, result.end_offset, result.records_kept, result.records_read,
                 result.bytes_read, result.bytes_written)
        return True

    def discard(self, result: CleanResult | CleanTask) -> None:
        task = result.task if isinstance(result, CleanResult) else result
        self.in_progress.discard((task.log.topic, task.log.partition))
        if isinstance(result, CleanResult):
            for cleaned in result.segments:
                cleaned.path.unlink(missing_ok=True)

    def clean_now(self, plog: PartitionLog, now_ms: int | None = None) -> CleanResult | None:
        """Clean one log synchronously (tests and tools): prepare, clean and install in the calling thread."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        ltc = self.cleanable(plog, now)
        if ltc is None or ltc.cleanable_bytes <= 0:
            return None
        task = self.prepare(ltc, now)
        try:
            result = self.clean(task)
        except BaseException:
            self.discard(task)
            raise
        return result if self.install(result) else None


def _first_unstable_offset(plog: PartitionLog) -> int:
    state = getattr(plog, "producer_state", None)
    ongoing = getattr(state, "ongoing_txns", None)
    if ongoing:
        return min(ongoing)
    return plog.log_end_offset


def _build_offset_map(task: CleanTask, txn_index: _TxnIndex, throttler: _Throttler) -> tuple[dict[bytes, int], int]:
    """key -> last offset over the dirty segments; stops at a segment boundary when the map is full.
    Returns the map and the end of the mapped range (the first offset not mapped)."""
    offset_map: dict[bytes, int] = {}
    tracker = _TxnTracker(txn_index)
    start = task.first_dirty_offset
    dirty = [(s, n) for s, n in task.segments if s.next_offset > start or s.base_offset >= start]
    end = task.end_offset
    for i, (seg, size) in enumerate(dirty):
        if i > 0 and len(offset_map) >= task.max_map_entries:
            end = seg.base_offset
            break
        for _, data in _iter_batches(seg, size):
            throttler.maybe_throttle(len(data))
            h = BATCH_HEADER.unpack_from(data, 0)
            if h[5] & CONTROL_FLAG or h[0] + h[6] < start:
                continue
            if tracker.on_data_batch(h):
                continue  # aborted: its keys do not count
            for rec in RecordBatch(data).records():
                if rec.key is not None and rec.offset >= start:
                    offset_map[rec.key] = rec.offset
    return offset_map, end


def _group_segments(segments: list[tuple[LogSegment, int]], config: LogConfig, end: int) -> list[list[tuple[LogSegment, int]]]:
    """Consecutive segments whose sizes add up to at most ``segment.bytes`` and whose offsets fit one
    segment (int32 relative offsets) become one cleaned segment."""
    groups: list[list[tuple[LogSegment, int]]] = []
    for i, (seg, size) in enumerate(segments):
        if groups:
            group = groups[-1]
            total = sum(n for _, n in group)
            upper = segments[i + 1][0].base_offset - 1 if i + 1 < len(segments) else end - 1
            if total + size <= config.segment_bytes and upper - group[0][0].base_offset <= 0x7FFFFFFF:
                group.append((seg, size))
                continue
        groups.append([(seg, size)])
    return groups


def _filter_batch(data: bytes, offset_map: dict[bytes, int], latest: int, end: int, tracker: _TxnTracker,
                  active: Mapping[int, tuple[int, int]], task: CleanTask, result: CleanResult) -> bytes | None:
    """The batch as it goes into the cleaned segment (unchanged, rebuilt or emptied), or None to drop it."""
    h = BATCH_HEADER.unpack_from(data, 0)
    is_control = bool(h[5] & CONTROL_FLAG)
    now = task.now_ms
    has_horizon = bool(h[5] & DELETE_HORIZON_FLAG)
    horizon = h[7] if has_horizon else None
    if is_control:
        can_discard = tracker.on_control_batch(h, data)
        discard_records = can_discard and horizon is not None and horizon <= now
    else:
        can_discard = tracker.on_data_batch(h)
        discard_records = can_discard
    last_offset = h[0] + h[6]
    retain_empty = False
    if h[9] >= 0 and h[9] in active:
        last_data, epoch = active[h[9]]
        retain_empty = last_offset == last_data if last_data >= 0 else (is_control and h[10] == epoch)
    if not retain_empty and last_offset + 1 == end:
        retain_empty = True  # keep the round's last offset
    if discard_records and not retain_empty:
        return None
    records = list(RecordBatch(data).records()) if h[12] > 0 else []
    result.records_read += len(records)
    kept = []
    tombstones = False
    for rec in records:
        if discard_records:
            break
        if not is_control:
            if rec.offset <= latest:
                if rec.key is None or offset_map.get(rec.key, -1) > rec.offset:
                    continue
                if rec.value is None and horizon is not None and now >= horizon:
                    continue
        kept.append(rec)
        if rec.value is None:
            tombstones = True
    result.records_kept += len(kept)
    if kept:
        need_horizon = (tombstones or (is_control and can_discard)) and not has_horizon
        if len(kept) == len(records) and not need_horizon:
            return data
        new_horizon = now + task.config.delete_retention_ms if need_horizon else horizon
        return _rebuild_batch(h, kept, new_horizon)[0]
    if retain_empty:
        return _empty_batch(h)
    return None
