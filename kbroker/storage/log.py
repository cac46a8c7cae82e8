"""``PartitionLog``: the segmented log of one partition replica in ``<log_dir>/<topic>-<partition>/``.

Files in the partition directory (see ``docs/storage-format.md``): ``<20-digit base offset>.log``,
``.index``, ``.timeindex`` (and ``.txnindex`` once an ABORT marker lands in it) per segment,
``leader-epoch-checkpoint``, ``partition.metadata`` and producer ``.snapshot`` files.

Offsets: ``log_start_offset`` is the first offset still readable, ``log_end_offset`` (LEO) the offset the next
record will get (last batch's last offset + 1), ``high_watermark`` the end of the committed prefix (set by the
server; single node: LEO after each append), ``recovery_point`` the offset below which everything was fsynced, and ``last_stable_offset`` (LSO) the
first offset of the earliest open transaction, capped at the high watermark: read_committed consumers read
below it, and the aborted transactions they must skip come from the segments' ``.txnindex`` files.

Threading: all mutating calls must come from one thread (the server's event loop). ``FileRegion`` objects
returned by ``read`` stay valid while a segment is pending deletion (``file.delete.delay.ms``). ``flush`` may run
in a worker thread: it works on a snapshot of the segment list.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from kbroker.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kbroker.protocol.records import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    set_max_timestamp_and_type,
)
from kbroker.protocol.send import FileRegion
from kbroker.storage.config import LogConfig
from kbroker.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from kbroker.storage.log_dir_failure import LogDirFailureChannel
from kbroker.storage.log_validator import validate_for_append
from kbroker.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    ProducerStateManager,
    rebuild_producer_state,
)
from kbroker.storage.segment import LogSegment
from kbroker.storage.txn_index import AbortedTxn
from kbroker.storage.util import (
    CLEANED_SUFFIX,
    DELETE_DIR_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    fsync_dir,
    parse_topic_partition,
    uuid_from_str,
    uuid_to_str,
    write_atomically,
)

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"

# ListOffsets special timestamps.
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_PACK_I64 = struct.Struct(">q").pack_into
_PACK_I32 = struct.Struct(">i").pack_into


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class AppendInfo:
    """Result of an append. Offsets are absolute; ``max_timestamp`` in ms (-1 if none);
    ``log_append_time`` is the broker time stamped into the batches, or -1 for CreateTime topics;
    ``num_messages`` sums the batches' record counts; ``valid_bytes`` is the number of bytes written."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    num_messages: int
    valid_bytes: int


@dataclass(slots=True)
class FetchDataInfo:
    """Whole record batches to send for a fetch: file regions (possibly from several segments) and their
    total ``size`` in bytes. Empty regions means "no data" (send an empty, non-null records field)."""

    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    #: offset just after the last batch returned (-1 when nothing was read)
    next_offset: int = -1

    def read_bytes(self) -> bytes:
        """The fetched bytes (copy, for tests and non-sendfile transports)."""
        return b"".join(r.read_bytes() for r in self.regions)


def _next_offset_of_file(path: Path, base_offset: int) -> int:
    """Last offset + 1 of the whole batches in a segment file (``base_offset`` if it holds none)."""
    end = base_offset
    with open(path, "rb") as f:
        pos = 0
        while True:
            head = os.pread(f.fileno(), BATCH_HEADER_SIZE, pos)
            if len(head) < BATCH_HEADER_SIZE:
                return end
            h = BATCH_HEADER.unpack_from(head, 0)
            if h[1] + LOG_OVERHEAD < BATCH_HEADER_SIZE:
                return end
            end = max(end, h[0] + h[6] + 1)
            pos += h[1] + LOG_OVERHEAD


def read_partition_metadata(dir: Path) -> bytes | None:
    """Topic id (16 bytes) from ``dir/partition.metadata``; None if absent. Raises ValueError if malformed."""
    try:
        text = (Path(dir) / PARTITION_METADATA_FILE).read_text("utf-8")
    except FileNotFoundError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"malformed {PARTITION_METADATA_FILE} in {dir}")
    return uuid_from_str(fields["topic_id"])


def write_partition_metadata(dir: Path, topic_id: bytes) -> None:
    """Write ``version: 0`` / ``topic_id: <base64url>`` atomically."""
    write_atomically(Path(dir) / PARTITION_METADATA_FILE, f"version: 0\ntopic_id: {uuid_to_str(topic_id)}\n".encode())


_F = TypeVar("_F", bound=Callable[..., Any])


def _io_guarded(what: str) -> Callable[[_F], _F]:
    """Map an I/O error of a log operation to the log directory going offline (``KAFKA_STORAGE_ERROR``), and
    refuse the operation at once when the directory is already offline. Without a failure channel (tools,
    tests, the metadata log) the ``OSError`` propagates unchanged."""

    def deco(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
            ch = self.failure_channel
            if ch is None:
                return fn(self, *args, **kwargs)
            if ch.offline:
                ch.check(self.log_dir, f"{what} of {self.topic}-{self.partition}")
            try:
                return fn(self, *args, **kwargs)
            except OSError as exc:
                raise ch.io_failed(self.log_dir, f"{what} of {self.topic}-{self.partition}", exc) from exc

        return wrapper  # type: ignore[return-value]

    return deco


class PartitionLog:
    """The log of one partition replica.

    Args:
        dir: ``<log_dir>/<topic>-<partition>``; created if missing.
        config: topic log config (may be replaced later with ``update_config``).
        topic_id: 16-byte topic id; written to ``partition.metadata`` if absent, checked if present
            (``KafkaError(INCONSISTENT_TOPIC_ID)`` on mismatch). None: use what the file says.
        recovery_point: offset from ``recovery-point-offset-checkpoint``; segments at/after it are recovered
            after an unclean shutdown.
        clean_shutdown: True if the broker shut down cleanly (``.kafka_cleanshutdown`` existed).
        high_watermark: from ``replication-offset-checkpoint`` (clamped to [log start, LEO]); None -> LEO.
        log_start_offset: from ``log-start-offset-checkpoint``; never below the first segment's base offset.
        now_ms: wall clock for segment creation times and producer expiry at load (default: now).
        producer_id_expiration_ms: ``producer.id.expiration.ms`` for ``producer_state``.
        failure_channel: where an I/O error takes this log's directory offline (appends, reads, flushes,
            truncation and retention then raise ``KafkaError(KAFKA_STORAGE_ERROR)``); None: ``OSError`` propagates.

    ``producer_state`` (:class:`~kbroker.storage.producer_state.ProducerStateManager`) is rebuilt at load from
    the latest ``<offset>.snapshot`` at or below the log end offset plus the batch headers after it.
    """

    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        *,
        topic_id: bytes | None = None,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        high_watermark: int | None = None,
        log_start_offset: int | None = None,
        now_ms: int | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        now = _now_ms() if now_ms is None else now_ms
        self.failure_channel = failure_channel
        self.dir = Path(dir)
        self.log_dir = self.dir.parent
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config
        self.topic_id = self._init_partition_metadata(topic_id)
        self.leader_epoch_cache = LeaderEpochCache(self.dir / LEADER_EPOCH_CHECKPOINT)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self._pending_flush_to: int | None = None
        self._last_flush_ms = now

        self._load_segments(recovery_point, clean_shutdown, log_start_offset or 0, now)
        self._leo = self._segments[-1].next_offset
        self.log_start_offset = min(max(self._segments[0].base_offset, log_start_offset or 0), self._leo)
        self.recovery_point = self._leo
        hw = self._leo if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self.log_start_offset), self._leo)
        # Entries past the recovered log end go (the log lost records in recovery). An entry that starts exactly
        # at the log end stays: it is what assign() wrote when the epoch began with nothing appended since, and
        # dropping it would only make the next become-leader write the same file again (one fsync'd write per
        # empty partition at every start: 10,000 partitions took ~10 s of start-up on this alone).
        self.leader_epoch_cache.truncate_from_end(self._leo + 1)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        if self.leader_epoch_cache.damaged and self._leo > self.log_start_offset:
            self._rebuild_leader_epoch_cache()
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms=producer_id_expiration_ms)
        self.producer_state.remove_stray_snapshots(self._bases)
        rebuild_producer_state(self.producer_state, self._segments, self.log_start_offset, self._leo, now,
                               clean_shutdown)
        if not clean_shutdown:
            # as Kafka after an unclean shutdown: the state rebuilt from the log is written as a snapshot at the
            # log end and loaded from it, so a producer's earlier batches are no longer recognised as duplicates
            # (only its last batch is; a retry of an older one is OUT_OF_ORDER_SEQUENCE_NUMBER)
            self.producer_state.reload(self.log_start_offset, now)

    # -- open / recovery ----------------------------------------------------------------------------

    def _rebuild_leader_epoch_cache(self) -> None:
        """Rebuild ``leader-epoch-checkpoint`` from the batch headers (it was unreadable)."""
        cache = self.leader_epoch_cache
        cache.clear()
        for seg in self._segments:
            for h in seg.iter_headers():
                if h.next_offset <= self.log_start_offset:
                    continue
                if h.partition_leader_epoch >= 0 and h.partition_leader_epoch > cache.latest_epoch:
                    cache.assign(h.partition_leader_epoch, max(h.base_offset, self.log_start_offset))
        log.warning("%s: rebuilt leader-epoch-checkpoint from the log (%d epochs)", self.dir, len(cache))

    def _init_partition_metadata(self, topic_id: bytes | None) -> bytes | None:
        try:
            existing = read_partition_metadata(self.dir)
        except ValueError as exc:  # UnicodeDecodeError included
            log.warning("%s is damaged (%s); it is written again with the topic id from the cluster metadata",
                        self.dir / "partition.metadata", " ".join(str(exc).split())[:100])
            existing = None
        if topic_id is None:
            return existing
        if existing is not None and existing != topic_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"{self.dir} belongs to topic id {uuid_to_str(existing)}, not {uuid_to_str(topic_id)}",
            )
        if existing is None:
            write_partition_metadata(self.dir, topic_id)
        return topic_id

    def _load_segments(self, recovery_point: int, clean_shutdown: bool, start_offset: int, now: int) -> None:
        bases: list[int] = []
        stems_with_log: set[str] = set()
        names = sorted(os.listdir(self.dir))
        for name in names:
            path = self.dir / name
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and path.is_file():
                continue  # an interrupted cleaner swap: completed below
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)) and path.is_file():
                log.info("removing stray file %s", path)
                path.unlink()
                continue
            stem, dot, ext = name.partition(".")
            if dot and "." + ext == LOG_SUFFIX and stem.isdigit() and len(stem) == 20:
                bases.append(int(stem))
                stems_with_log.add(stem)
        for name in names:
            stem, dot, ext = name.partition(".")
            if (dot and "." + ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and stem.isdigit()
                    and stem not in stems_with_log):
                (self.dir / name).unlink(missing_ok=True)
        bases.sort()
        swapped = self._complete_swaps(bases)

        # Segments from the one holding the recovery point onwards are recovered after an unclean shutdown.
        recover_from = len(bases)
        if not clean_shutdown:
            recover_from = max(0, bisect.bisect_right(bases, recovery_point) - 1)

        corrupt = False
        for i, base in enumerate(bases):
            seg = LogSegment.open(self.dir, base, self.config, now)
            if corrupt:
                log.warning("deleting segment %s after a corrupt one", seg.log_path)
                seg.delete_files()
                continue
            need_recovery = i >= recover_from or base in swapped
            if not need_recovery and not seg.load():
                log.info("%s: index missing or inconsistent, rebuilding", seg.log_path)
                need_recovery = True
            if need_recovery:
                truncated = seg.recover()
                seg.flush()
                if truncated and i < len(bases) - 1:
                    corrupt = True
            if self._segments and seg.base_offset < self._segments[-1].next_offset:
                log.warning("%s overlaps the previous segment; deleting it and later segments", seg.log_path)
                seg.delete_files()
                corrupt = True
                continue
            self._segments.append(seg)
        if not self._segments:
            self._segments.append(LogSegment.create(self.dir, max(start_offset, 0), self.config, now))
            fsync_dir(self.dir)
        self._bases = [s.base_offset for s in self._segments]

    def _complete_swaps(self, bases: list[int]) -> set[int]:
        """Finish log-cleaner swaps cut short by a crash: each ``<base>.log.swap`` (already complete: it was
        renamed from ``.cleaned`` after an fsync) replaces the segments whose base offsets fall in the offset
        range it covers, then becomes ``<base>.log``. ``bases`` is updated in place; returns the swapped bases
        (their indexes are rebuilt)."""
        swapped: set[int] = set()
        for name in sorted(os.listdir(self.dir)):
            stem = name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
            if not name.endswith(LOG_SUFFIX + SWAP_SUFFIX) or not (stem.isdigit() and len(stem) == 20):
                continue
            base = int(stem)
            swap = self.dir / name
            end = _next_offset_of_file(swap, base)
            for old in [b for b in bases if base <= b < max(end, base + 1)]:
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (self.dir / (f"{old:020d}" + suffix)).unlink(missing_ok=True)
                bases.remove(old)
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (self.dir / (f"{base:020d}" + suffix)).unlink(missing_ok=True)
            os.replace(swap, self.dir / (f"{base:020d}" + LOG_SUFFIX))
            log.info("%s: completed an interrupted cleaner swap of segment %d", self.dir, base)
            bisect.insort(bases, base)
            swapped.add(base)
        if swapped:
            fsync_dir(self.dir)
        return swapped

    # -- simple properties --------------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy of the list)."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        """Offset of the next record to be appended (last offset + 1)."""
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        """Set the HW, clamped to ``[log_start_offset, log_end_offset]``."""
        self._high_watermark = min(max(value, self.log_start_offset), self._leo)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction still open in this partition (None: none is open)."""
        ongoing = self.producer_state.ongoing_txns
        return min(ongoing) if ongoing else None

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the first offset of the earliest open transaction if it is below the high watermark, else
        the high watermark (never below the log start offset). Every transaction below it is decided."""
        first_unstable = self.first_unstable_offset
        if first_unstable is None or first_unstable >= self._high_watermark:
            return self._high_watermark
        return max(first_unstable, self.log_start_offset)

    def fetch_offsets(self) -> tuple[int, int, int, int]:
        """(high watermark, last stable offset, log start offset, log end offset) in one call: what an incremental
        fetch session compares for each of its partitions on every request (KIP-227), thousands per request."""
        return self._high_watermark, self.last_stable_offset, self.log_start_offset, self._leo

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (a read_committed Fetch):
        the ``.txnindex`` entries of the segments from the one holding ``fetch_offset`` on, stopping at the
        first entry whose last stable offset reaches ``upper_bound_offset``."""
        out: list[AbortedTxn] = []
        for seg in self._segments[self._segment_index_for(fetch_offset):]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def _index_aborted_transactions(self, completed: list, segment: LogSegment) -> None:
        """Write the ``.txnindex`` entries of the transactions an append's ABORT markers closed (before the
        producer state forgets them: the LSO after each one is the first offset of the earliest transaction
        of *another* producer still open, else the marker offset + 1)."""
        for txn in completed:
            if not txn.is_aborted:
                continue
            others = [first for first, pid in self.producer_state.ongoing_txns.items() if pid != txn.producer_id]
            lso = min(others) if others else txn.last_offset + 1
            segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    @property
    def size_in_bytes(self) -> int:
        """Bytes in live segment ``.log`` files."""
        return sum(s.size for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    def update_config(self, config: LogConfig) -> None:
        """Apply a new topic config (index sizes apply to segments created afterwards)."""
        self.config = config
        for seg in self._segments:
            seg.config = config

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"hw={self._high_watermark}, leo={self._leo}, segments={len(self._segments)})"
        )

    # -- append -------------------------------------------------------------------------------------

    @_io_guarded("append")
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT, transaction_version: int = 0) -> AppendInfo:
        """Append one or more validated batches, assigning offsets from the LEO.

        The input is copied once into a bytearray in which each batch's baseOffset and partitionLeaderEpoch
        are rewritten (outside the CRC); for LogAppendTime topics maxTimestamp/attributes are set to
        ``now_ms`` and the CRC recomputed. The whole buffer is written with one write.

        Raises ``KafkaError(MESSAGE_TOO_LARGE)`` if a batch exceeds ``max.message.bytes``,
        ``KafkaError(RECORD_LIST_TOO_LARGE)`` if the whole append exceeds ``segment.bytes``,
        ``CorruptRecordError`` if the bytes are not whole batches. Nothing is written on error.

        Batches with a producer id are checked by ``producer_state`` as offsets are assigned (errors
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH ...). A retry of one of the producer's last 5
        batches (origin CLIENT) writes nothing and returns that batch's original offsets, its timestamp as
        ``log_append_time`` (as Kafka does) and ``valid_bytes == 0``. ``transaction_version`` 2 checks a
        transaction marker with the transactions-version-2 epoch rule (:meth:`ProducerAppend.add_batch`).
        """
        self._check_open()
        buf = bytearray(records)
        # topic-config checks and conversions (timestamps, keys on compacted topics, compression.type)
        buf = validate_for_append(buf, self.config, now_ms, f"{self.topic}-{self.partition}")
        n = len(buf)
        if n == 0:
            return AppendInfo(-1, -1, -1, -1, -1, self.log_start_offset, 0, 0)
        if n > self.config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"append of {n} bytes exceeds segment.bytes {self.config.segment_bytes}",
            )
        log_append = self.config.log_append_time
        max_message = self.config.max_message_bytes
        unpack = BATCH_HEADER.unpack_from
        first = offset = self._leo
        max_ts, off_max, num, pos = -1, -1, 0, 0
        producers = self.producer_state.begin_append(origin)
        while pos < n:
            if n - pos < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{n - pos} trailing bytes are not a record batch")
            h = unpack(buf, pos)
            size = h[1] + LOG_OVERHEAD
            if size < BATCH_HEADER_SIZE or pos + size > n or h[6] < 0:
                raise CorruptRecordError(f"malformed batch at byte {pos}")
            if size > max_message:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE, f"batch of {size} bytes exceeds max.message.bytes {max_message}"
                )
            _PACK_I64(buf, pos, offset)
            _PACK_I32(buf, pos + 12, leader_epoch)
            last = offset + h[6]
            if log_append:
                set_max_timestamp_and_type(buf, pos, now_ms, True)
                batch_max = now_ms
            else:
                batch_max = h[8]
            if batch_max > max_ts:
                max_ts, off_max = batch_max, last
            if h[9] >= 0:  # producer id: duplicate / epoch / sequence checks, before anything is written
                dup = producers.add_batch(h, buf, pos, offset, batch_max, transaction_version)
                if dup is not None:
                    return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, dup.last_offset,
                                      dup.timestamp, self.log_start_offset, 0, 0)
            num += h[12]
            offset = last + 1
            pos += size
        last_offset = offset - 1
        self._maybe_roll(n, first, last_offset, max_ts, now_ms)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first)
        self.active_segment.append(last_offset, max_ts, off_max, buf)
        self._leo = offset
        if producers.completed_txns:
            self._index_aborted_transactions(producers.completed_txns, self.active_segment)
        self.producer_state.complete_append(producers, offset)
        if self._leo - self.recovery_point >= self.config.flush_messages:
            self.flush()
        return AppendInfo(
            first_offset=first,
            last_offset=last_offset,
            max_timestamp=max_ts,
            offset_of_max_timestamp=off_max,
            log_append_time=now_ms if log_append else -1,
            log_start_offset=self.log_start_offset,
            num_messages=num,
            valid_bytes=n,
        )

    @_io_guarded("append")
    def append_as_follower(self, records: bytes | bytearray | memoryview, now_ms: int | None = None) -> AppendInfo:
        """Append batches that already carry offsets and leader epochs (replication / tests).

        Batches must be whole and their base offsets must not be below the LEO (gaps are allowed).
        New epochs found in batch headers are added to the leader epoch cache.
        Raises ``CorruptRecordError`` for malformed input, ``KafkaError(UNKNOWN_SERVER_ERROR)`` for offsets
        below the LEO.
        """
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        mv = memoryview(records).cast("B") if not isinstance(records, (bytes, bytearray)) else memoryview(records)
        n = len(mv)
        if n == 0:
            return AppendInfo(-1, -1, -1, -1, -1, self.log_start_offset, 0, 0)
        unpack = BATCH_HEADER.unpack_from
        expected = self._leo
        first = -1
        max_ts, off_max, num, pos = -1, -1, 0, 0
        epochs: list[tuple[int, int]] = []
        producers = self.producer_state.begin_append(AppendOrigin.REPLICATION)
        while pos < n:
            if n - pos < BATCH_HEADER_SIZE:
                raise CorruptRecordError(f"{n - pos} trailing bytes are not a record batch")
            h = unpack(mv, pos)
            size = h[1] + LOG_OVERHEAD
            if size < BATCH_HEADER_SIZE or pos + size > n or h[6] < 0:
                raise CorruptRecordError(f"malformed batch at byte {pos}")
            if h[0] < expected:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"batch offset {h[0]} is below the expected {expected}")
            if first < 0:
                first = h[0]
            if h[2] >= 0 and (not epochs or h[2] > epochs[-1][0]):
                epochs.append((h[2], h[0]))
            if h[8] > max_ts:
                max_ts, off_max = h[8], h[0] + h[6]
            if h[9] >= 0:
                producers.add_batch(h, mv, pos, h[0], h[8])
            num += h[12]
            expected = h[0] + h[6] + 1
            pos += size
        last_offset = expected - 1
        self._maybe_roll(n, first, last_offset, max_ts, now)
        for epoch, start in epochs:
            self.leader_epoch_cache.assign(epoch, start)
        self.active_segment.append(last_offset, max_ts, off_max, mv)
        self._leo = expected
        if producers.completed_txns:
            self._index_aborted_transactions(producers.completed_txns, self.active_segment)
        self.producer_state.complete_append(producers, expected)
        if self._leo - self.recovery_point >= self.config.flush_messages:
            self.flush()
        return AppendInfo(first, last_offset, max_ts, off_max, -1, self.log_start_offset, num, n)

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_ts: int, now_ms: int) -> None:
        seg = self.active_segment
        if seg.size == 0:
            if first_offset > seg.base_offset:
                # Empty active segment but the data starts later (gap in a follower append): replace it so
                # that the file name keeps matching the first offset in it.
                self._replace_empty_active(first_offset, now_ms)
            return
        cfg = self.config
        if seg.rolling_base_timestamp is not None and max_ts >= 0:
            waited = max_ts - seg.rolling_base_timestamp
        else:
            waited = now_ms - seg.created_ms
        if (
            seg.size > cfg.segment_bytes - size
            or waited > cfg.segment_ms
            or seg.is_full
            or last_offset - seg.base_offset > 0x7FFFFFFF
        ):
            self.roll(first_offset, now_ms)

    def _replace_empty_active(self, base_offset: int, now_ms: int) -> None:
        old = self._segments.pop()
        old.delete_files()
        self._segments.append(LogSegment.create(self.dir, base_offset, self.config, now_ms))
        self._bases = [s.base_offset for s in self._segments]
        fsync_dir(self.dir)

    @_io_guarded("roll")
    def roll(self, base_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default LEO). An empty active segment is kept.
        The previous segment gets its final time index entry and is flushed by the next
        ``maybe_flush_by_time`` call."""
        now = _now_ms() if now_ms is None else now_ms
        base = self._leo if base_offset is None else base_offset
        old = self.active_segment
        if old.size == 0:
            return old
        old.on_become_inactive()
        new = LogSegment.create(self.dir, base, self.config, now)
        self._segments.append(new)
        self._bases.append(base)
        self.producer_state.update_map_end_offset(base)
        self.producer_state.take_snapshot(sync=False)  # recovery replays from here; not fsynced (CRC-checked)
        fsync_dir(self.dir)
        self._pending_flush_to = base
        return new

    # -- read ---------------------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    @_io_guarded("read")
    def read(
        self, fetch_offset: int, max_bytes: int, upper_bound_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset`` whose last offset is < ``upper_bound_offset``
        (default LEO; pass the HW for consumers), up to ``max_bytes`` (the first batch is returned even if
        larger when ``min_one_message``). May span several segments.

        Raises ``KafkaError(OFFSET_OUT_OF_RANGE)`` when ``fetch_offset`` is below the log start offset or
        above the LEO. Returns an empty result when ``fetch_offset >= upper_bound_offset``.
        """
        leo = self._leo
        if fetch_offset < self.log_start_offset or fetch_offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {fetch_offset} outside [{self.log_start_offset}, {leo}] of {self.topic}-{self.partition}",
            )
        upper = leo if upper_bound_offset is None else min(upper_bound_offset, leo)
        out = FetchDataInfo()
        if fetch_offset >= upper:
            return out
        segs = self._segments
        i = self._segment_index_for(fetch_offset)
        offset = fetch_offset
        while i < len(segs) and offset < upper:
            seg = segs[i]
            hdr = seg.translate_offset(offset)
            if hdr is None:  # nothing at/after offset in this segment
                i += 1
                if i < len(segs):
                    offset = max(offset, segs[i].base_offset)
                continue
            max_pos = seg.size
            if upper < seg.next_offset:
                bound = seg.translate_offset(upper, hdr.position)
                if bound is not None:
                    max_pos = bound.position
            region = seg.read_from(hdr, max_bytes - out.size, max_pos, min_one_message and not out.regions)
            if region is None:
                break
            out.regions.append(region)
            out.size += region.size
            end = region.position + region.size
            following = seg.read_header(end) if end < seg.size else None
            out.next_offset = following.base_offset if following is not None else seg.next_offset
            if region.position + region.size < max_pos or out.size >= max_bytes or max_pos < seg.size:
                break
            i += 1
            if i < len(segs):
                offset = segs[i].base_offset
        return out

    # -- timestamps ---------------------------------------------------------------------------------

    @_io_guarded("read")
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets lookup: ``(offset, timestamp, leader_epoch)`` or None.

        -2 (earliest) and -4 (earliest local): log start offset, timestamp -1, its epoch.
        -1 (latest): LEO, timestamp -1, the latest epoch (callers serving consumers may use the HW instead).
        -3 (max timestamp): the first record carrying the largest timestamp (decodes that one batch).
        ``timestamp >= 0``: the first record with timestamp >= ``timestamp`` at or after the log start
        (decodes only candidate batches). None when there is no such record. Epochs are -1 when unknown.
        The result is not capped at the high watermark; callers do that.
        """
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self.log_start_offset, -1, self.leader_epoch_cache.epoch_for_offset(self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return self._leo, -1, self.leader_epoch_cache.latest_epoch
        if timestamp == MAX_TIMESTAMP:
            best: LogSegment | None = None
            for seg in self._segments:
                if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                    best = seg
            return best.find_max_timestamp_record() if best is not None else None
        if timestamp < 0:
            return None
        for seg in self._segments:
            if seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    # -- durability ---------------------------------------------------------------------------------

    @_io_guarded("flush")
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets in ``[recovery_point, up_to)`` (default: up to the LEO) and
        advance the recovery point to ``up_to``."""
        target = self._leo if up_to is None else min(up_to, self._leo)
        for seg in list(self._segments):  # snapshot: may run in a worker thread
            if up_to is None or seg.base_offset < target:
                seg.flush()  # cheap no-op for segments with nothing written since their last fsync
        if target > self.recovery_point:
            self.recovery_point = target
        if self._pending_flush_to is not None and self._pending_flush_to <= target:
            self._pending_flush_to = None
        self._last_flush_ms = _now_ms()

    @_io_guarded("flush")
    def maybe_flush_by_time(self, now_ms: int) -> bool:
        """Flush segments rolled since the last flush, and everything if ``flush.ms`` has elapsed with
        unflushed data. Returns True if something was flushed."""
        did = False
        if self._pending_flush_to is not None:
            self.flush(self._pending_flush_to)
            did = True
        if self._leo > self.recovery_point and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            did = True
        return did

    # -- retention / truncation ---------------------------------------------------------------------

    @_io_guarded("retention")
    def delete_retention(self, now_ms: int) -> int:
        """Delete old segments: those wholly below the log start offset, then (if ``cleanup.policy`` has
        ``delete``) those past ``retention.ms`` (by largest timestamp) and beyond ``retention.bytes``.

        Never deletes segments not wholly below the high watermark; always a prefix. As Kafka, a non-empty
        active segment past retention (once every older segment is) is deleted too, after a roll.
        Deleted segments are renamed ``*.deleted`` and purged after ``file.delete.delay.ms``. Advances the log
        start offset. Returns the number of segments deleted.
        """
        self._check_open()
        cfg = self.config
        deleted = self._delete_prefix(lambda seg, nxt: nxt.base_offset <= self.log_start_offset, now_ms)
        if "delete" in cfg.cleanup_policy.split(","):
            if cfg.retention_ms >= 0:
                deleted += self._delete_prefix(lambda seg, nxt: now_ms - seg.largest_timestamp > cfg.retention_ms, now_ms,
                                               include_active=True)
            if cfg.retention_bytes >= 0:
                excess = [self.size_in_bytes - cfg.retention_bytes]

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    if excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                deleted += self._delete_prefix(over_size, now_ms, include_active=True)
        return deleted

    @_io_guarded("compaction")
    def replace_segments(self, old: list[LogSegment], cleaned: object, now_ms: int | None = None) -> LogSegment:
        """Swap a log-cleaner output in for ``old`` (consecutive closed segments of this log).

        ``cleaned`` describes ``<base>.log.cleaned`` (attributes ``path``, ``base_offset``, ``next_offset``,
        ``max_timestamp``, ``offset_of_max_timestamp``, ``first_batch_max_timestamp``, ``offset_index``,
        ``time_index``; see ``kbroker.storage.cleaner.CleanedSegment``). Order, crash-safe: ``.cleaned`` ->
        ``.swap`` (from here a restart completes the swap), the old segments are renamed ``.deleted`` and purged
        after ``file.delete.delay.ms`` (in-flight fetches keep reading them), ``.swap`` -> ``.log``, then the
        indexes are written. Raises ValueError, before touching any file, if ``old`` is no longer in the log."""
        self._check_open()
        now = _now_ms() if now_ms is None else now_ms
        idx = next((i for i, s in enumerate(self._segments) if s is old[0]), -1)
        if idx < 0 or len(self._segments) - 1 < idx + len(old) or any(
                a is not b for a, b in zip(self._segments[idx: idx + len(old)], old)):
            raise ValueError("the segments to replace are no longer in the log")
        base = old[0].base_offset
        if cleaned.base_offset != base:  # type: ignore[attr-defined]
            raise ValueError("the cleaned segment does not start where the replaced ones do")
        final = self.dir / (f"{base:020d}" + LOG_SUFFIX)
        swap = final.with_name(final.name + SWAP_SUFFIX)
        os.replace(cleaned.path, swap)  # type: ignore[attr-defined]
        fsync_dir(self.dir)
        due = now + self.config.file_delete_delay_ms
        for seg in old:
            seg.rename_to_deleted()
            self._pending_deletes.append((due, seg))
        os.replace(swap, final)
        fsync_dir(self.dir)
        seg = LogSegment.open(self.dir, base, self.config, now)
        seg.offset_index.reset(list(cleaned.offset_index))  # type: ignore[attr-defined]
        seg.time_index.reset(list(cleaned.time_index))  # type: ignore[attr-defined]
        seg.next_offset = max(base, cleaned.next_offset)  # type: ignore[attr-defined]
        seg.max_timestamp_so_far = cleaned.max_timestamp  # type: ignore[attr-defined]
        seg.offset_of_max_timestamp_so_far = cleaned.offset_of_max_timestamp  # type: ignore[attr-defined]
        seg.rolling_base_timestamp = cleaned.first_batch_max_timestamp  # type: ignore[attr-defined]
        seg.txn_index.reset([t for s in old for t in s.txn_index.entries])  # aborted txns keep being skipped
        seg.flush()
        self._segments[idx: idx + len(old)] = [seg]
        self._bases = [s.base_offset for s in self._segments]
        return seg

    def _delete_prefix(self, predicate: Callable[[LogSegment, LogSegment | None], bool], now_ms: int,
                       include_active: bool = False) -> int:
        victims: list[LogSegment] = []
        segs = self._segments
        for i in range(len(segs) - 1):
            seg, nxt = segs[i], segs[i + 1]
            if nxt.base_offset > self._high_watermark or not predicate(seg, nxt):
                break
            victims.append(seg)
        active = self.active_segment
        if (include_active and len(victims) == len(segs) - 1 and active.size > 0
                and self._leo <= self._high_watermark and predicate(active, None)):
            # Kafka: a non-empty active segment wholly below the high watermark goes too (retention): the log
            # rolls to an empty segment at the log end offset first
            self.roll(now_ms=now_ms)
            victims.append(active)
        if not victims:
            return 0
        del self._segments[: len(victims)]
        self._bases = [s.base_offset for s in self._segments]
        due = now_ms + self.config.file_delete_delay_ms
        for seg in victims:
            seg.rename_to_deleted()
            self._pending_deletes.append((due, seg))
            log.info("%s-%d: scheduled deletion of segment %d", self.topic, self.partition, seg.base_offset)
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self._set_log_start_offset(new_start)
        self.producer_state.delete_snapshots_below(new_start)
        return len(victims)

    def _set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = min(offset, self._leo)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
        if self._high_watermark < self.log_start_offset:
            self._high_watermark = self.log_start_offset
        if self.recovery_point < self.log_start_offset:
            self.recovery_point = self.log_start_offset

    @_io_guarded("delete records")
    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: move the log start offset up to ``offset`` (<= HW); whole segments below it are
        removed by the next ``delete_retention``. Raises ``KafkaError(OFFSET_OUT_OF_RANGE)`` beyond the HW."""
        if offset > self._high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is above the high watermark")
        if offset > self.log_start_offset:
            self._set_log_start_offset(offset)

    @_io_guarded("segment deletion")
    def purge_deleted(self, now_ms: int, force: bool = False) -> int:
        """Close and unlink segments whose deletion delay has passed (all if ``force``). Returns the count."""
        keep: list[tuple[int, LogSegment]] = []
        purged = 0
        for due, seg in self._pending_deletes:
            if force or due <= now_ms:
                seg.delete_files()
                purged += 1
            else:
                keep.append((due, seg))
        self._pending_deletes = keep
        return purged

    @property
    def pending_deletes(self) -> list[LogSegment]:
        return [s for _, s in self._pending_deletes]

    @_io_guarded("truncation")
    def truncate_to(self, offset: int) -> bool:
        """Remove everything from ``offset`` on (a batch holding ``offset`` is removed whole, so the LEO may
        end up below ``offset``). Below the log start offset the log is emptied and restarted at ``offset``.
        Returns True if anything was removed. FileRegions over truncated bytes become invalid.

        Truncating at or past the log end offset removes no record but still drops leader epochs that start at
        the log end offset (as Kafka does): a replica that led an epoch without appending anything in it keeps
        that epoch as its latest one, so as a follower its fetches would name an epoch the new leader never
        had, get a diverging epoch ending at this very offset, truncate to it and fetch again, for ever."""
        self._check_open()
        if offset >= self._leo:
            self.leader_epoch_cache.truncate_from_end(self._leo)
            return False
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            seg = self._segments.pop()
            seg.delete_files()
        self._bases = [s.base_offset for s in self._segments]
        active = self.active_segment
        active.truncate_to(offset)
        self._leo = active.next_offset
        self._high_watermark = min(self._high_watermark, self._leo)
        self.recovery_point = min(self.recovery_point, self._leo)
        if self._pending_flush_to is not None and self._pending_flush_to > self._leo:
            self._pending_flush_to = None
        self.leader_epoch_cache.truncate_from_end(self._leo)
        rebuild_producer_state(self.producer_state, self._segments, self.log_start_offset, self._leo, _now_ms())
        return True

    @_io_guarded("truncation")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all data and restart the log empty at ``offset`` (LEO = HW = log start = ``offset``)."""
        self._check_open()
        for seg in self._segments:
            seg.delete_files()
        self._segments = [LogSegment.create(self.dir, offset, self.config)]
        self._bases = [offset]
        fsync_dir(self.dir)
        self._leo = self.log_start_offset = self._high_watermark = self.recovery_point = offset
        self._pending_flush_to = None
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)

    # -- lifecycle ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self.topic}-{self.partition} is closed")

    def close(self) -> None:
        """Flush and close all files (pending-deleted segments are removed). Idempotent."""
        if self._closed:
            return
        self.active_segment.on_become_inactive()  # persist the max timestamp for a fast reopen
        self.flush()
        self.producer_state.take_snapshot()  # at the log end offset: a clean restart replays nothing
        for seg in self._segments:
            seg.close()
        self.purge_deleted(0, force=True)
        self._closed = True

    def close_without_flush(self) -> None:
        """Close the files without writing anything (the log's directory failed). Idempotent."""
        if self._closed:
            return
        for seg in self._segments:
            for closer in (seg.file.close, seg.offset_index.close, seg.time_index.close, seg.txn_index.close):
                try:
                    closer()
                except OSError:
                    pass
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def adopt(self, future: PartitionLog, target_dir: Path) -> Path:
        """Finish moving this log to another log directory (AlterReplicaLogDirs): take over the files of
        ``future`` (a copy of this log in ``<other root>/<topic>-<partition>.<uuid>-future`` holding exactly this
        log's batches, ``future.log_end_offset == self.log_end_offset``) and rename its directory to
        ``target_dir``. This object stays the partition's log (every holder keeps it); ``future`` is spent.

        Crash-safe order: ``future`` is flushed with this log's leader epochs, then this log's directory is
        renamed to ``...-delete`` (removed at the next start), then the future one to ``target_dir``; a start
        that finds a future directory without the partition's log promotes it (``LogManager.startup``).
        Returns the retired directory (the caller removes it). Raises ``ValueError`` if ``future`` is not caught
        up, ``OSError`` from the renames."""
        if future.log_end_offset != self._leo or future.log_start_offset != self.log_start_offset:
            raise ValueError(f"{future.dir} is not caught up with {self.dir}")
        self._check_open()
        cache = future.leader_epoch_cache
        cache.replace_entries(self.leader_epoch_cache.entries())
        if self.topic_id is not None:
            write_partition_metadata(future.dir, self.topic_id)
        future.flush()
        future.producer_state.take_snapshot()
        retired = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.replace(self.dir, retired)
        fsync_dir(retired.parent)
        os.replace(future.dir, target_dir)
        fsync_dir(target_dir.parent)
        old_segments = self._segments + [seg for _, seg in self._pending_deletes]
        self.dir = Path(target_dir)
        self.log_dir = self.dir.parent
        for seg in future._segments + [seg for _, seg in future._pending_deletes]:
            seg.relocate(self.dir)
        self._segments, self._bases = future._segments, future._bases
        self._pending_deletes = future._pending_deletes
        self.leader_epoch_cache = cache
        cache.path = self.dir / LEADER_EPOCH_CHECKPOINT
        self.producer_state = future.producer_state
        self.producer_state.dir = self.dir
        self.recovery_point = future.recovery_point
        self._pending_flush_to = None
        future._segments, future._bases, future._pending_deletes = [], [], []
        future._closed = True
        for seg in old_segments:
            for closer in (seg.file.close, seg.offset_index.close, seg.time_index.close, seg.txn_index.close):
                try:
                    closer()
                except OSError:
                    pass
        return retired

    def delete(self) -> None:
        """Close the log, rename its directory to ``<topic>-<partition>.<uuid hex>-delete`` and remove it."""
        if not self._closed:
            for seg in self._segments:
                seg.delete_files()
            self.purge_deleted(0, force=True)
            self._closed = True
        target = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.replace(self.dir, target)
            fsync_dir(target.parent)
        except FileNotFoundError:
            return
        shutil.rmtree(target, ignore_errors=True)
