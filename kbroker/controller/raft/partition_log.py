"""The Raft log on disk: :class:`~kbroker.controller.raft.log.RaftLog` over a
:class:`~kbroker.storage.log.PartitionLog` (``__cluster_metadata-0``, Kafka's on-disk layout).

Each :class:`~kbroker.controller.raft.log.LogEntry` is one record batch; its ``data`` is the batch's bytes as
stored, so followers copy what the leader wrote without re-encoding (Fetch carries the batches). Entries the
leader appends are encoded here: a ``None`` entry becomes a LeaderChange control batch (``LeaderChangeMessage``
v0, control type 2), a tuple of record values becomes one batch of those values (no keys, as KRaft's metadata
records). The epoch of every batch is its ``partition_leader_epoch``; the storage layer's leader-epoch cache
(``leader-epoch-checkpoint``) answers ``end_offset_for_epoch``. ``flushed_offset`` is the log's recovery point:
what is on disk after fsync.

Snapshots are ``<end offset>-<epoch>.checkpoint`` files beside the segments
(:class:`~kbroker.controller.snapshot.SnapshotStore`, Kafka's format). The log start offset is the end offset of
the snapshot the log was cleaned up to: :meth:`PartitionRaftLog.delete_before_snapshot` moves it there and deletes
the segments wholly below it and the older snapshots; :meth:`PartitionRaftLog.install_snapshot` (a snapshot
fetched from the leader) writes the snapshot durably first and then empties the log to restart at its end offset,
so a crash in between leaves a snapshot ahead of the log, which :func:`open_metadata_log_start` repairs at start.
"""

from __future__ import annotations

import struct
import time
from typing import Callable, Sequence

from kbroker.controller.raft.log import LogEntry, VoterHistory, VoterSet
from kbroker.controller.raft.voters_record import batch_voters, voters_batch
from kbroker.controller.snapshot import SnapshotStore, decode_snapshot_voters
from kbroker.protocol import codec
from kbroker.protocol.messages.leader_change_message import LeaderChangeMessage
from kbroker.protocol.records import build_batch, iter_batches
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import AppendOrigin

LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)
"""The key of a LeaderChange control record: version 0, control type 2."""

DEFAULT_READ_MAX_BYTES = 8 * 1024 * 1024


def leader_change_batch(offset: int, epoch: int, leader_id: int, voters: Sequence[int], now_ms: int) -> bytes:
    """The control batch that opens a leader's epoch (KIP-595 ``LeaderChangeMessage``)."""
    msg = LeaderChangeMessage(version=0, leader_id=leader_id,
                              voters=[LeaderChangeMessage.Voter(voter_id=v) for v in voters],
                              granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in voters])
    return build_batch([(LEADER_CHANGE_KEY, codec.encode(msg, 0), [], now_ms)], base_offset=offset,
                       partition_leader_epoch=epoch, is_control=True)


class PartitionRaftLog:
    """A :class:`~kbroker.controller.raft.log.RaftLog` stored in a :class:`PartitionLog`.

    ``node_id`` and ``voters`` fill the LeaderChange batches this replica writes as leader; ``clock`` returns
    seconds (batch timestamps only).
    """

    def __init__(self, log: PartitionLog, node_id: int, voters: Sequence[int],
                 clock: Callable[[], float] = time.time, read_max_bytes: int = DEFAULT_READ_MAX_BYTES,
                 snapshots: SnapshotStore | None = None) -> None:
        self.partition_log = log
        self.snapshots = snapshots if snapshots is not None else SnapshotStore(log.dir)
        self._start_epoch_cache: tuple[int, int] | None = None
        self.node_id = node_id
        self.static_voters = tuple(sorted(voters))
        self.clock = clock
        self.read_max_bytes = read_max_bytes
        self.lowest_truncation: int | None = None
        self._voters = VoterHistory()
        self._load_voters()

    def _load_voters(self) -> None:
        """The voter set at the log start (the snapshot there) and every KRaftVoters batch in the log."""
        pl = self.partition_log
        start = pl.log_start_offset
        base = None
        for snap in self.snapshots.ids():
            if snap[0] == start or (start == 0 and snap == (0, 0)):
                base = decode_snapshot_voters(self.snapshots.read(snap))
        self._voters.restart_at(start, base)
        pos = start
        while pos < pl.log_end_offset:
            info = pl.read(pos, self.read_max_bytes)
            moved = False
            for batch in iter_batches(info.read_bytes()):
                if batch.is_control:
                    vs = batch_voters(batch)
                    if vs is not None:
                        self._voters.add(batch.base_offset, vs)
                pos = batch.next_offset
                moved = True
            if not moved:
                break

    @property
    def end_offset(self) -> int:
        return self.partition_log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.partition_log.log_start_offset

    def _start_epoch(self) -> int:
        """Epoch of the entry just below the log start: that of the snapshot the log starts at (cached per start)."""
        start = self.partition_log.log_start_offset
        if self._start_epoch_cache is not None and self._start_epoch_cache[0] == start:
            return self._start_epoch_cache[1]
        epoch = 0
        if start > 0:
            epoch = next((e for end, e in self.snapshots.ids() if end == start),
                         max(0, self.partition_log.leader_epoch_cache.epoch_for_offset(start - 1)))
        self._start_epoch_cache = (start, epoch)
        return epoch

    @property
    def last_epoch(self) -> int:
        pl = self.partition_log
        if pl.log_end_offset == pl.log_start_offset and pl.log_start_offset > 0:
            return self._start_epoch()
        return max(0, pl.leader_epoch_cache.latest_epoch)

    @property
    def flushed_offset(self) -> int:
        return self.partition_log.recovery_point

    def epoch_at(self, offset: int) -> int:
        if offset == self.partition_log.log_start_offset - 1:
            return self._start_epoch()
        return self.partition_log.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        pl = self.partition_log
        start = pl.log_start_offset
        if start > 0:
            start_epoch = self._start_epoch()
            if pl.log_end_offset == start:
                return (start_epoch, start) if epoch >= start_epoch else (-1, start)
            found, end = pl.leader_epoch_cache.end_offset_for(epoch, self.end_offset)
            if found < 0 or epoch < pl.leader_epoch_cache.earliest_epoch:
                return (start_epoch, start) if epoch >= start_epoch else (-1, start)
            return (found, end)
        found, end = pl.leader_epoch_cache.end_offset_for(epoch, self.end_offset)
        if found < 0 or epoch < pl.leader_epoch_cache.earliest_epoch:
            return (0, 0)
        return (found, end)

    def append(self, entries: Sequence[LogEntry]) -> None:
        now = int(self.clock() * 1000)
        for e in entries:
            if e.offset != self.end_offset:
                raise ValueError(f"append at offset {e.offset}, log end offset is {self.end_offset}")
            if isinstance(e.data, (bytes, bytearray, memoryview)):
                info = self.partition_log.append_as_follower(e.data, now)
                for batch in iter_batches(bytes(e.data)):
                    if batch.is_control:
                        vs = batch_voters(batch)
                        if vs is not None:
                            self._voters.add(batch.base_offset, vs)
            else:
                if isinstance(e.data, VoterSet):
                    batch = voters_batch(e.data, e.offset, e.epoch, now)
                    info = self.partition_log.append_as_leader(batch, e.epoch, now, origin=AppendOrigin.REPLICATION)
                    self._voters.add(e.offset, e.data)
                    if info.last_offset + 1 != e.next_offset:
                        raise ValueError(f"voters batch at {e.offset} ends at {info.last_offset}")
                    continue
                if e.data is None:
                    batch = leader_change_batch(e.offset, e.epoch, self.node_id, self._voter_ids(), now)
                else:
                    batch = build_batch([(None, v, [], now) for v in e.data], base_offset=e.offset,  # type: ignore[attr-defined]
                                        partition_leader_epoch=e.epoch)
                info = self.partition_log.append_as_leader(batch, e.epoch, now, origin=AppendOrigin.REPLICATION)
            if info.last_offset + 1 != e.next_offset:
                raise ValueError(f"batch at {e.offset} holds offsets up to {info.last_offset}, expected "
                                 f"{e.next_offset - 1}")

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        self.partition_log.truncate_to(offset)
        end = self.end_offset
        self._voters.truncate(end)
        if self.lowest_truncation is None or end < self.lowest_truncation:
            self.lowest_truncation = end

    def read(self, offset: int, max_entries: int) -> list[LogEntry]:
        if offset >= self.end_offset:
            return []
        info = self.partition_log.read(offset, self.read_max_bytes)
        out: list[LogEntry] = []
        for batch in iter_batches(info.read_bytes()):
            if len(out) >= max_entries:
                break
            out.append(LogEntry(batch.base_offset, batch.partition_leader_epoch, bytes(batch),
                                batch.last_offset_delta + 1))
        return out

    def flush(self) -> None:
        self.partition_log.flush()

    # ---- snapshots
    def snapshot_ids(self) -> list[tuple[int, int]]:
        return self.snapshots.ids()

    def latest_snapshot_id(self) -> tuple[int, int] | None:
        return self.snapshots.latest()

    def snapshot_size(self, snapshot_id: tuple[int, int]) -> int | None:
        try:
            return self.snapshots.size(snapshot_id)
        except FileNotFoundError:
            return None

    def read_snapshot(self, snapshot_id: tuple[int, int], position: int, max_bytes: int) -> bytes:
        return self.snapshots.read_chunk(snapshot_id, position, max_bytes)

    def create_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        if not self.log_start_offset <= end_offset <= self.flushed_offset:
            raise ValueError(f"snapshot at {end_offset} outside the flushed log [{self.log_start_offset}, "
                             f"{self.flushed_offset}]")
        self.snapshots.write(end_offset, epoch, data)

    def install_snapshot(self, snapshot_id: tuple[int, int], data: bytes) -> None:
        """The snapshot first (durable), then the log emptied to start at its end offset, then older snapshots go."""
        end = snapshot_id[0]
        self.snapshots.write(end, snapshot_id[1], data)
        self.partition_log.truncate_fully_and_start_at(end)
        self.snapshots.delete_before(end)
        self._voters.restart_at(end, decode_snapshot_voters(bytes(data)))
        if self.lowest_truncation is None or end < self.lowest_truncation:
            self.lowest_truncation = end

    def delete_before_snapshot(self, snapshot_id: tuple[int, int]) -> bool:
        """Move the log start offset to the snapshot's end offset, delete the segments wholly below it and the
        older snapshots. False when there is no such snapshot or nothing to drop."""
        if snapshot_id[0] > self.flushed_offset:
            return False
        if not delete_log_before_snapshot(self.partition_log, self.snapshots, snapshot_id, int(self.clock() * 1000)):
            return False
        self._voters.drop_below(snapshot_id[0])
        return True

    # ---- the voter set
    def _voter_ids(self) -> tuple[int, ...]:
        vs = self._voters.latest()
        return tuple(sorted(vs.ids)) if vs is not None else self.static_voters

    def voters(self) -> VoterSet | None:
        return self._voters.latest()

    def voters_at(self, offset: int) -> VoterSet | None:
        return self._voters.at(offset)

    def last_voters_offset(self) -> int:
        return self._voters.last_offset()


def delete_log_before_snapshot(log: PartitionLog, snapshots: SnapshotStore, snapshot_id: tuple[int, int],
                               now_ms: int) -> bool:
    """Move ``log``'s start offset to the end offset of snapshot ``snapshot_id`` (which holds committed records
    only), delete the segments wholly below it at once and the older snapshots. False when the snapshot does not
    exist or the log already starts there."""
    end = snapshot_id[0]
    if snapshot_id not in snapshots.ids() or end <= log.log_start_offset or end > log.log_end_offset:
        return False
    if log.high_watermark < end:
        log.high_watermark = end
    log.advance_log_start_offset(end)
    log.delete_retention(now_ms)
    log.purge_deleted(now_ms, force=True)  # metadata reads copy their bytes: nothing refers to the files
    snapshots.delete_before(end)
    return True


def open_metadata_log_start(snapshots: SnapshotStore, log: PartitionLog) -> None:
    """At start: a log that ends below the latest snapshot (a crash while a fetched snapshot was installed) is
    reset to start at it; otherwise the log starts at the earliest snapshot's end offset (everything below was
    cleaned up to it). Snapshots ahead of the log's flushed end cannot exist (they hold committed records, and
    committed records were flushed first)."""
    latest = snapshots.latest()
    if latest is None:
        return
    if log.log_end_offset < latest[0]:
        log.truncate_fully_and_start_at(latest[0])
        snapshots.delete_before(latest[0])
        return
    earliest = snapshots.ids()[0]
    if earliest[0] > log.log_start_offset:
        if log.high_watermark < earliest[0]:
            log.high_watermark = earliest[0]
        log.advance_log_start_offset(earliest[0])
