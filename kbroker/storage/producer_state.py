"""``ProducerStateManager``: the idempotent-producer state of one partition, and its ``.snapshot`` files.

For every producer id that wrote to the partition it keeps the producer epoch, the last
``NUM_BATCHES_TO_RETAIN`` (5) batches as ``(last sequence, last offset, offset delta, max timestamp)``, the
coordinator epoch of the last transaction marker and the first offset of the producer's open transaction
(-1: none). The rules are Apache Kafka 4.3's (``ProducerAppendInfo``, ``ProducerStateEntry``,
``ProducerStateManager`` and ``UnifiedLog`` in ``storage/.../internals/log/``) and are written below where they
are applied:

* leader appends (origin CLIENT) are checked batch by batch *before* anything is written, in the same call
  that assigns offsets (``PartitionLog.append_as_leader``): first a duplicate check against the retained
  batches, then the epoch and sequence checks; the new state is applied only after the write succeeded;
* follower appends and log recovery (origin REPLICATION) are not validated: an older epoch is logged;
* idle producers expire after ``producer.id.expiration.ms`` (no open transaction, last batch timestamp older);
* snapshots ``<offset:020d>.snapshot`` hold the whole table at an offset; the log is replayed (batch headers
  only) from the latest snapshot at or below the log end offset to rebuild the rest.

Not thread-safe: the owning ``PartitionLog`` calls it from one thread. No asyncio.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple, Sequence

from kbroker.protocol import codec
from kbroker.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kbroker.protocol.records import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    CONTROL_FLAG,
    LOG_OVERHEAD,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    ControlType,
    RecordBatch,
    crc32c,
)
from kbroker.protocol.storage_records import ProducerSnapshot
from kbroker.storage.txn_index import AbortedTxn
from kbroker.storage.util import SNAPSHOT_SUFFIX, TMP_SUFFIX, filename_prefix, fsync_dir, write_atomically

if TYPE_CHECKING:
    from kbroker.storage.segment import LogSegment

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
"""Batches remembered per producer id: the Java producer keeps at most 5 requests in flight per partition."""

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""``producer.id.expiration.ms`` (Kafka's default: one day)."""

DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000
"""``producer.id.expiration.check.interval.ms`` (an internal Kafka setting, 10 minutes)."""

SNAPSHOT_VERSION = 1
_VERSION = struct.Struct(">h")
_CRC = struct.Struct(">I")
_ENTRIES_POSITION = _VERSION.size + _CRC.size  # the CRC covers everything from here to the end
_CONTROL_KEY = struct.Struct(">hh")  # control record key: version, type
_END_TXN_VALUE = struct.Struct(">hi")  # marker value: version, coordinator epoch

INT32_MAX = 2**31 - 1
_SEQUENCE_MODULUS = 2**31
_SCAN_CHUNK = 64 * 1024  # bytes read per pread while walking batch headers during a rebuild


# -- sequence arithmetic ----------------------------------------------------------------------------


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` in the producer's sequence space, which wraps from int32 max to 0."""
    return (sequence + increment) % _SEQUENCE_MODULUS


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping below 0 to int32 max."""
    return (sequence - decrement) % _SEQUENCE_MODULUS


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """True when ``next_sequence`` directly follows ``last_sequence`` (int32 max is followed by 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


# -- state ------------------------------------------------------------------------------------------


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is checked (Kafka's ``AppendOrigin``)."""

    CLIENT = "client"  # a producer's request on the leader: duplicates, epoch and sequence are checked
    REPLICATION = "replication"  # follower fetch or log recovery: nothing is rejected
    COORDINATOR = "coordinator"  # a coordinator writing its own records (later: markers): epoch only


class BatchMetadata(NamedTuple):
    """One retained batch: its last sequence and last offset, ``offset_delta`` = last - first offset (also the
    sequence delta) and the batch's max timestamp."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction closed by a COMMIT/ABORT marker at ``last_offset`` (for the transactions part)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    """What the partition knows about one producer id. ``batches`` holds at most ``NUM_BATCHES_TO_RETAIN``
    entries, oldest first; they all belong to ``producer_epoch`` (a new epoch clears them)."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batches")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, current_txn_first_offset: int = -1,
                 batches: Iterable[BatchMetadata] = ()) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def without_batches(self) -> ProducerStateEntry:
        """A copy with the same epoch, coordinator epoch, timestamp and open transaction but no batches: the
        starting point of an append's changes (Kafka's ``withProducerId``)."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset)

    def _maybe_update_epoch(self, producer_epoch: int) -> None:
        if producer_epoch != self.producer_epoch:
            self.batches.clear()  # retained batches always belong to the current epoch
            self.producer_epoch = producer_epoch

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self._maybe_update_epoch(producer_epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))  # drops the oldest
        self.last_timestamp = timestamp

    def update(self, other: ProducerStateEntry) -> None:
        """Apply an append's result: its epoch (a new one drops the retained batches), its batches, and its
        coordinator epoch, timestamp and open transaction."""
        self._maybe_update_epoch(other.producer_epoch)
        self.batches.extend(other.batches)
        self.coordinator_epoch = other.coordinator_epoch
        self.current_txn_first_offset = other.current_txn_first_offset
        self.last_timestamp = other.last_timestamp

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The retained batch with exactly this sequence range in the current epoch, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.last_seq == last_seq and b.first_seq == first_seq:
                return b
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
                f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
                f"current_txn_first_offset={self.current_txn_first_offset}, batches={list(self.batches)})")


class ProducerAppendInfo:
    """Checks the batches one producer adds in one append against its state before the append, and collects
    the resulting state (``updated``), which the manager applies once the append is written."""

    def __init__(self, partition: str, producer_id: int, current: ProducerStateEntry, origin: AppendOrigin) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.current = current
        self.origin = origin
        self.updated = current.without_batches()
        self.started_txn_first_offsets: list[int] = []

    # Kafka 4.3 ProducerAppendInfo.checkProducerEpoch. Produce answers INVALID_PRODUCER_EPOCH for every
    # version (since Kafka 2.7 it is no longer PRODUCER_FENCED, so the client can abort and carry on).
    def _check_epoch(self, producer_epoch: int, offset: int, transaction_version: int = 0) -> None:
        current = self.updated.producer_epoch
        if transaction_version >= 2:
            # A transactions-v2 marker carries an epoch bumped past the data's, so "<=" is stale ...
            invalid = producer_epoch <= current
            # ... except a retried marker for a transaction that already ended (same epoch, nothing open).
            if invalid and producer_epoch == current and (self.updated.current_txn_first_offset < 0
                                                          or producer_epoch == 32767):
                return
        else:
            invalid = producer_epoch < current
        if not invalid:
            return
        message = (f"producer {self.producer_id} in {self.partition} at offset {offset}: epoch {producer_epoch} "
                   f"is older than the current epoch {current}")
        if self.origin is AppendOrigin.REPLICATION:
            log.warning("%s", message)
            return
        raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, message)

    # Kafka 4.3 ProducerAppendInfo.checkSequence (origin CLIENT only).
    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self.current
        if producer_epoch != updated.producer_epoch:
            # A new epoch (after an epoch bump) starts at sequence 0. A producer the partition does not know
            # (never seen, expired, or state lost) has no epoch: any sequence is accepted. Kafka 4.x never
            # answers UNKNOWN_PRODUCER_ID to Produce.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {self.producer_id} in {self.partition} at offset {offset}: a new epoch "
                    f"{producer_epoch} must start at sequence 0, not {first_seq} (current epoch "
                    f"{updated.producer_epoch})")
            return
        if not updated.is_empty:
            last_seq = updated.last_seq  # an earlier batch of this same append
        elif producer_epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # Without an epoch (e.g. every batch of the producer was removed by retention or DeleteRecords) any
        # sequence is accepted; otherwise the batch must follow the last one exactly.
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(last_seq, first_seq):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {self.producer_id} in {self.partition} at offset {offset}: sequence {first_seq} "
                f"does not follow the last sequence {last_seq}")

    def append_data_batch(self, producer_epoch: int, first_seq: int, last_seq: int, max_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        self._check_epoch(producer_epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        self.updated.add_batch(producer_epoch, last_seq, last_offset, last_offset - first_offset, max_timestamp)
        open_txn = self.updated.current_txn_first_offset >= 0
        if open_txn and not is_transactional:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"producer {self.producer_id} in {self.partition} at offset {first_offset}: a "
                             "non-transactional batch while its transaction is open")
        if not open_txn and is_transactional:
            self.updated.current_txn_first_offset = first_offset
            self.started_txn_first_offsets.append(first_offset)

    def append_end_txn_marker(self, control_type: int, coordinator_epoch: int, producer_epoch: int, offset: int,
                              timestamp: int, transaction_version: int = 0) -> CompletedTxn | None:
        """A COMMIT/ABORT marker: checks the epoch and the coordinator epoch and closes the open transaction
        (returned, if it held data). The retained batches stay unless the marker carries a new epoch."""
        self._check_epoch(producer_epoch, offset, transaction_version)
        if self.updated.coordinator_epoch > coordinator_epoch:
            message = (f"producer {self.producer_id} in {self.partition} at offset {offset}: coordinator epoch "
                       f"{coordinator_epoch} is older than {self.updated.coordinator_epoch}")
            if self.origin is AppendOrigin.REPLICATION:
                log.info("%s", message)
            else:
                raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED, message)
        first = self.updated.current_txn_first_offset
        completed = (CompletedTxn(self.producer_id, first, offset, control_type == ControlType.ABORT)
                     if first >= 0 else None)
        u = self.updated
        u._maybe_update_epoch(producer_epoch)
        u.coordinator_epoch = coordinator_epoch
        u.current_txn_first_offset = -1
        u.last_timestamp = timestamp
        return completed


class ProducerAppend:
    """The producer-state side of one append: ``add_batch`` for every batch with a producer id (in log order,
    with its assigned offsets) *before* the write; ``ProducerStateManager.complete_append`` after it."""

    __slots__ = ("manager", "origin", "infos", "completed_txns")

    def __init__(self, manager: ProducerStateManager, origin: AppendOrigin) -> None:
        self.manager = manager
        self.origin = origin
        self.infos: dict[int, ProducerAppendInfo] = {}
        self.completed_txns: list[CompletedTxn] = []

    def add_batch(self, header: Sequence[Any], buf: Any, position: int, first_offset: int, max_timestamp: int,
                  transaction_version: int = 0) -> BatchMetadata | None:
        """Check one batch. ``header`` is its unpacked ``BATCH_HEADER``, ``buf[position:]`` its bytes (read
        only for control batches), ``first_offset`` its (assigned) base offset and ``max_timestamp`` its max
        timestamp as stored (the append time for LogAppendTime topics).

        Returns the retained batch it duplicates (origin CLIENT only; the caller must then write nothing and
        answer with that batch's offsets), else None. Raises ``KafkaError`` (OUT_OF_ORDER_SEQUENCE_NUMBER,
        INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED) when the batch is refused.
        """
        producer_id, producer_epoch, base_seq = header[9], header[10], header[11]
        last_offset = first_offset + header[6]
        manager = self.manager
        if self.origin is AppendOrigin.CLIENT:
            # A retry of any of the last 5 batches (same epoch, same first and last sequence) is a duplicate:
            # not written again, and acknowledged with the offsets it got the first time (Kafka 4.x answers
            # NONE, not DUPLICATE_SEQUENCE_NUMBER).
            entry = manager.producers.get(producer_id)
            if entry is not None:
                dup = entry.find_duplicate(producer_epoch, base_seq,
                                           increment_sequence(base_seq, header[6]) if base_seq >= 0 else NO_SEQUENCE)
                if dup is not None:
                    return dup
        info = self.infos.get(producer_id)
        if info is None:
            current = manager.producers.get(producer_id) or ProducerStateEntry(producer_id)
            info = self.infos[producer_id] = ProducerAppendInfo(manager.name, producer_id, current, self.origin)
        attributes = header[5]
        if attributes & CONTROL_FLAG:
            marker = _end_txn_marker(buf, position, header)
            if marker is not None:  # an empty control batch: the transaction was compacted away
                control_type, coordinator_epoch, timestamp = marker
                done = info.append_end_txn_marker(control_type, coordinator_epoch, producer_epoch, first_offset,
                                                  timestamp, transaction_version)
                if done is not None:
                    self.completed_txns.append(done)
        else:
            last_seq = increment_sequence(base_seq, header[6]) if base_seq >= 0 else NO_SEQUENCE
            info.append_data_batch(producer_epoch, base_seq, last_seq, max_timestamp, first_offset, last_offset,
                                   bool(attributes & TRANSACTIONAL_FLAG))
        return None


def _end_txn_marker(buf: Any, position: int, header: Sequence[Any]) -> tuple[int, int, int] | None:
    """``(control type, coordinator epoch, record timestamp)`` of a COMMIT/ABORT control batch; None for an
    empty control batch. Raises CorruptRecordError for a control batch that is not a transaction marker."""
    size = header[1] + LOG_OVERHEAD
    batch = RecordBatch(bytes(memoryview(buf)[position:position + size]))
    for rec in batch.records():
        if rec.key is None or len(rec.key) < _CONTROL_KEY.size:
            raise CorruptRecordError("control record key is too short")
        control_type = _CONTROL_KEY.unpack_from(rec.key)[1]
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            raise CorruptRecordError("a control batch with a producer id must be a COMMIT or ABORT marker")
        if rec.value is None or len(rec.value) < _END_TXN_VALUE.size:
            raise CorruptRecordError("end transaction marker value is too short")
        return control_type, _END_TXN_VALUE.unpack_from(rec.value)[1], rec.timestamp
    return None


# -- snapshots --------------------------------------------------------------------------------------


class CorruptSnapshotError(ValueError):
    """A ``.snapshot`` file that cannot be used (unknown version, bad CRC, malformed)."""


def snapshot_path(dir: Path, offset: int) -> Path:
    return Path(dir) / (filename_prefix(offset) + SNAPSHOT_SUFFIX)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The file format of Kafka's ``ProducerSnapshot`` v1 (``storage-specs/ProducerSnapshot.json``):
    int16 version 1, uint32 CRC-32C of everything after it, int32 entry count, then per producer id
    ``producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32, timestamp int64,
    coordinatorEpoch int32, currentTxnFirstOffset int64`` (only the last retained batch is stored)."""
    snap = ProducerSnapshot(crc=0, producer_entries=[
        ProducerSnapshot.ProducerEntry(
            producer_id=e.producer_id, epoch=e.producer_epoch, last_sequence=e.last_seq,
            last_offset=e.last_data_offset, offset_delta=e.last_offset_delta, timestamp=e.last_timestamp,
            coordinator_epoch=e.coordinator_epoch, current_txn_first_offset=e.current_txn_first_offset)
        for e in sorted(entries, key=lambda x: x.producer_id)])
    data = bytearray(_VERSION.pack(SNAPSHOT_VERSION) + codec.encode(snap, SNAPSHOT_VERSION))
    _CRC.pack_into(data, _VERSION.size, crc32c(memoryview(data)[_ENTRIES_POSITION:]))
    return bytes(data)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse a snapshot file's bytes. Raises ``CorruptSnapshotError``."""
    if len(data) < _ENTRIES_POSITION:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version = _VERSION.unpack_from(data, 0)[0]
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    try:
        snap, end = codec.decode(ProducerSnapshot, data, SNAPSHOT_VERSION, _VERSION.size)
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the file is unusable
        raise CorruptSnapshotError(f"malformed snapshot: {exc}") from None
    if end != len(data):
        raise CorruptSnapshotError(f"{len(data) - end} bytes after the last snapshot entry")
    computed = crc32c(memoryview(data)[_ENTRIES_POSITION:])
    if snap.crc != computed:
        raise CorruptSnapshotError(f"snapshot CRC {snap.crc:#010x} does not match the computed {computed:#010x}")
    entries = []
    for p in snap.producer_entries:
        entry = ProducerStateEntry(p.producer_id, p.epoch, p.coordinator_epoch, p.timestamp,
                                   p.current_txn_first_offset if p.current_txn_first_offset >= 0 else -1)
        if p.last_offset >= 0:
            entry.add_batch(p.epoch, p.last_sequence, p.last_offset, p.offset_delta, p.timestamp)
        entries.append(entry)
    return entries


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a snapshot file through ``<name>.tmp`` + rename; with ``sync`` also fsync the file and the
    directory. Without it a crash may leave a short file, which loading detects (CRC) and skips."""
    data = encode_snapshot(entries)
    if sync:
        write_atomically(path, data)
        return
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """Entries of a snapshot file. Raises ``CorruptSnapshotError`` (and OSError)."""
    return decode_snapshot(Path(path).read_bytes())


def list_snapshot_files(dir: Path) -> dict[int, Path]:
    """``offset -> path`` for every ``<20 digits>.snapshot`` file in ``dir``."""
    out: dict[int, Path] = {}
    try:
        names = os.listdir(dir)
    except FileNotFoundError:
        return out
    for name in names:
        stem, dot, ext = name.partition(".")
        if dot and "." + ext == SNAPSHOT_SUFFIX and stem.isdigit() and len(stem) == 20:
            out[int(stem)] = Path(dir) / name
    return out


# -- the manager ------------------------------------------------------------------------------------


class ProducerStateManager:
    """Producer id -> ``ProducerStateEntry`` for one partition, plus its snapshot files.

    ``map_end_offset`` is the log offset up to which the table reflects the log (the log end offset during
    normal operation); ``last_snapshot_offset`` the offset of the newest snapshot written or loaded.
    """

    def __init__(self, dir: Path, *, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 name: str | None = None) -> None:
        self.dir = Path(dir)
        self.name = name or self.dir.name
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # first offset of an open transaction -> producer id
        self.map_end_offset = 0
        self.last_snapshot_offset = 0
        self._snapshots = list_snapshot_files(self.dir)

    def __repr__(self) -> str:
        return (f"ProducerStateManager({self.name}, producers={len(self.producers)}, "
                f"map_end_offset={self.map_end_offset}, snapshots={self.snapshot_offsets()})")

    # -- lookups ------------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def is_empty(self) -> bool:
        return not self.producers and not self.ongoing_txns

    # -- appends ------------------------------------------------------------------------------------

    def begin_append(self, origin: AppendOrigin = AppendOrigin.CLIENT) -> ProducerAppend:
        return ProducerAppend(self, origin)

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply one producer's validated changes."""
        entry = self.producers.get(info.producer_id)
        if entry is None:
            self.producers[info.producer_id] = info.updated
        else:
            entry.update(info.updated)
        for first_offset in info.started_txn_first_offsets:
            self.ongoing_txns[first_offset] = info.producer_id

    def complete_append(self, append: ProducerAppend | None, end_offset: int) -> list[CompletedTxn]:
        """After the append was written: apply its changes, close the transactions its markers ended, and move
        ``map_end_offset`` to the new log end offset (also for appends without producer ids, so that a
        snapshot is labelled with the offset it really reflects). Returns the completed transactions."""
        done: list[CompletedTxn] = []
        if append is not None and append.infos:
            for info in append.infos.values():
                self.update(info)
            for txn in append.completed_txns:
                self.ongoing_txns.pop(txn.first_offset, None)
            done = append.completed_txns
        self.map_end_offset = end_offset
        return done

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -- expiration ---------------------------------------------------------------------------------

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """A producer id expires when it has no open transaction and its last batch's timestamp (the batch's
        max timestamp: the producer's CreateTime, or the append time on LogAppendTime topics) is at least
        ``producer.id.expiration.ms`` old. Afterwards its next batch is treated as from an unknown producer."""
        return (entry.current_txn_first_offset < 0
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop expired producer ids (the periodic check). Returns how many were dropped."""
        expired = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots) if self._snapshots else None

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write the table to ``<map_end_offset>.snapshot`` unless a snapshot at that offset (or later) was
        already written. Returns the path written, or None."""
        if self.map_end_offset <= self.last_snapshot_offset:
            return None
        path = snapshot_path(self.dir, self.map_end_offset)
        write_snapshot(path, self.producers.values(), sync)
        self._snapshots[self.map_end_offset] = path
        self.last_snapshot_offset = self.map_end_offset
        return path

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def delete_snapshots_below(self, offset: int) -> None:
        """Remove snapshot files below ``offset`` (those of deleted segments)."""
        for off in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(off)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """At load: keep the snapshots at segment base offsets, plus the newest other one if it lies beyond
        the last segment's base offset (the one written at clean shutdown); delete the rest."""
        self._snapshots = list_snapshot_files(self.dir)
        bases = set(segment_base_offsets)
        strays = sorted(o for o in self._snapshots if o not in bases)
        if not strays:
            return
        keep = strays[-1] if bases and strays[-1] >= max(bases) else None
        for off in strays:
            if off != keep:
                self._delete_snapshot(off)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        """Load the newest usable snapshot (corrupt ones are deleted), skipping expired producer ids; without
        one the table starts empty at the log start offset."""
        while self._snapshots:
            offset = max(self._snapshots)
            path = self._snapshots[offset]
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: cannot use producer snapshot %s: %s", self.name, path, exc)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self.is_expired(entry, now_ms):
                    self._load_entry(entry)
            self.last_snapshot_offset = self.map_end_offset = offset
            return
        self.last_snapshot_offset = self.map_end_offset = log_start_offset

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset >= 0:
            self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside ``(log_start_offset, log_end_offset]``; unless the table already ends at
        ``log_end_offset``, clear it and load the newest remaining snapshot."""
        for off in [o for o in self._snapshots if o > log_end_offset or o <= log_start_offset]:
            self._delete_snapshot(off)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def reload(self, log_start_offset: int, now_ms: int) -> None:
        """Forget the table and load the newest snapshot, as a restart would: each producer keeps only its last
        batch (a snapshot holds no more), so only that one is recognised as a duplicate afterwards."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self._load_from_snapshot(log_start_offset, now_ms)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """The log start offset moved up (retention, DeleteRecords). As in Kafka, producer ids whose batches
        all lie below it are *not* forgotten: they stay until they expire."""
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset
        self.last_snapshot_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was emptied and restarts at ``offset``: forget everything, delete every snapshot."""
        self.producers.clear()
        self.ongoing_txns.clear()
        for off in list(self._snapshots):
            self._delete_snapshot(off)
        self.last_snapshot_offset = 0
        self.map_end_offset = offset


# -- rebuilding from the log ------------------------------------------------------------------------


def _iter_headers(segment: LogSegment, start: int, end: int) -> Iterator[tuple[int, tuple[Any, ...], bytes, int]]:
    """``(position, header, buffer, offset in buffer)`` of each whole batch in ``[start, end)`` of a segment's
    ``.log``; stops at a torn header. Only headers are read (in large preads)."""
    fd = segment.file.fileno()
    buf = b""
    buf_pos = pos = start
    while pos + BATCH_HEADER_SIZE <= end:
        off = pos - buf_pos
        if off + BATCH_HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
            buf_pos, off = pos, 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        h = BATCH_HEADER.unpack_from(buf, off)
        size = h[1] + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE or pos + size > end:
            return
        yield pos, h, buf, off
        pos += size


def _load_producers_from_segment(manager: ProducerStateManager, segment: LogSegment, start_offset: int,
                                 end_position: int) -> None:
    """Replay the batches with producer ids from the one holding ``start_offset`` up to byte ``end_position``
    (origin REPLICATION: nothing is rejected)."""
    hdr = segment.translate_offset(start_offset)
    if hdr is None or hdr.position >= end_position:
        return
    append = manager.begin_append(AppendOrigin.REPLICATION)
    fd = segment.file.fileno()
    for pos, h, buf, off in _iter_headers(segment, hdr.position, end_position):
        if h[9] < 0:
            continue
        if h[5] & CONTROL_FLAG:  # markers need their record: read the whole (small) batch
            data = os.pread(fd, h[1] + LOG_OVERHEAD, pos)
            append.add_batch(h, data, 0, h[0], h[8])
        else:
            append.add_batch(h, buf, off, h[0], h[8])
    aborted = [txn for txn in append.completed_txns if txn.is_aborted]
    if aborted:
        _reindex_aborted_txns(manager, append, segment, aborted)
    for info in append.infos.values():
        manager.update(info)
    for txn in append.completed_txns:
        manager.ongoing_txns.pop(txn.first_offset, None)


def _reindex_aborted_txns(manager: ProducerStateManager, append: ProducerAppend, segment: LogSegment,
                          aborted: list[CompletedTxn]) -> None:
    """Put the aborts found while replaying a segment into its ``.txnindex`` unless they are there already
    (a crash between writing an ABORT marker and its index entry). The last stable offset recorded is a lower
    bound of the real one (the earliest transaction of another producer open at any point of the segment),
    which only makes a read_committed Fetch look at more entries."""
    for txn in aborted:
        others = [first for first, pid in manager.ongoing_txns.items() if pid != txn.producer_id]
        others += [first for pid, info in append.infos.items() if pid != txn.producer_id
                   for first in info.started_txn_first_offsets]
        lso = min(others + [txn.last_offset + 1])
        segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))


def rebuild_producer_state(manager: ProducerStateManager, segments: Sequence[LogSegment], log_start_offset: int,
                           last_offset: int, now_ms: int, reload_from_clean_shutdown: bool = False) -> None:
    """Make ``manager`` reflect the log up to ``last_offset`` (exclusive; normally the log end offset), as
    Kafka's ``UnifiedLog.rebuildProducerState`` does.

    * No snapshot at all after a clean shutdown: the log predates producer snapshots (an upgrade); nothing is
      scanned, empty snapshots are written at the last two segment bases and ``last_offset``.
    * Otherwise snapshots beyond ``last_offset`` (or at/below the log start offset) are deleted, the newest
      remaining one is loaded and the batch headers from its offset to ``last_offset`` are replayed, taking
      snapshots at the last two segment bases on the way and one at ``last_offset`` at the end.
    """
    to_snapshot: list[int] = []
    if segments:
        if len(segments) > 1:
            to_snapshot.append(segments[-2].base_offset)
        to_snapshot.append(segments[-1].base_offset)
    to_snapshot.append(last_offset)
    if manager.latest_snapshot_offset is None and reload_from_clean_shutdown:
        for offset in to_snapshot:
            manager.update_map_end_offset(offset)
            manager.take_snapshot()
        return
    was_empty = manager.is_empty and manager.map_end_offset >= last_offset
    manager.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if last_offset > manager.map_end_offset and not was_empty:
        start_from = manager.map_end_offset
        for i, seg in enumerate(segments):
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if seg.base_offset >= last_offset:
                break
            if next_base is not None and next_base <= start_from:
                continue
            start = max(seg.base_offset, manager.map_end_offset, log_start_offset)
            manager.update_map_end_offset(start)
            if seg.base_offset in to_snapshot:
                manager.take_snapshot()
            end_position = seg.size
            if next_base is None or next_base > last_offset:  # the segment holding last_offset
                stop = seg.translate_offset(last_offset)
                end_position = stop.position if stop is not None else seg.size
            _load_producers_from_segment(manager, seg, start, end_position)
    manager.update_map_end_offset(last_offset)
    manager.take_snapshot()
