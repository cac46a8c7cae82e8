"""The replicated log as the Raft state machine sees it, and an in-memory implementation for simulations.

Every entry has an offset (0, 1, 2, … without gaps) and the epoch of the leader that appended it; entries of
one epoch are contiguous and epochs only grow along the log (KIP-595). The Raft client needs:

* ``end_offset`` (the log end offset: one past the last record) and ``last_epoch`` (epoch of the last entry, 0
  for an empty log);
* ``end_offset_for_epoch(epoch)``: the largest epoch ``e <= epoch`` present in the log and the offset where
  ``e`` ends (the start of the next epoch, or ``end_offset``). This is how a leader finds where a follower's
  log diverges (Kafka's ``OffsetsForLeaderEpoch`` rule, used by KRaft's Fetch);
* ``append(entries)`` (leader or follower), ``truncate_to(offset)`` (follower, on a diverging epoch; always a
  batch boundary), ``read(offset, max_entries)`` (batches from the one that starts at ``offset``) and
  ``flush()``; ``flushed_offset`` is what survives a crash.

Snapshots (KIP-630): a snapshot ``(end_offset, epoch)`` holds the state machine's state after every entry below
``end_offset``; ``epoch`` is the epoch of the entry at ``end_offset - 1``. Its content is opaque bytes to Raft.
Snapshots are made of committed entries only, so they are never truncated. The log may drop the entries below a
snapshot (``delete_before_snapshot``): ``log_start_offset`` is then that snapshot's end offset, and the snapshot
stands for everything below it (``last_epoch`` of a log with nothing past its start is that snapshot's epoch; an
epoch asked of ``end_offset_for_epoch`` that ends below the start gives ``(-1, log_start_offset)``: unknown). A
replica whose fetch offset is below the leader's log start gets the leader's latest snapshot
(``read_snapshot``) and ``install_snapshot`` resets its log to start at the snapshot's end offset.

The voter set (KIP-853) lives in the log too: an entry whose ``data`` is a :class:`VoterSet` (on disk a KRaftVoters
control batch) makes that set the voters from its offset on, as soon as it is appended (a truncation that removes
it brings the previous set back); ``voters()`` is the set at the log end (``None`` when the log names none: the
static ``controller.quorum.voters`` apply) and ``voters_at(offset)`` the set in force below ``offset``. A snapshot
carries the set in force at its end offset, so a log that starts at a snapshot still knows it.

``MemoryRaftLog`` keeps everything in lists; :meth:`MemoryRaftLog.crash` drops what was never flushed, which
is how the simulation models a power loss (snapshots are durable once written).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Protocol, Sequence

ZERO_DIRECTORY_ID = bytes(16)


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of the metadata quorum (KIP-853 ``VotersRecord.Voter``): its node id, the directory id of its
    metadata log directory (all zeros when unknown, as for static voters) and its controller listeners as
    ``(listener name, host, port)``."""

    node_id: int
    directory_id: bytes = ZERO_DIRECTORY_ID
    endpoints: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The voters of the quorum, sorted by node id. A log entry whose data is a VoterSet changes the voters."""

    voters: tuple[Voter, ...]

    @classmethod
    def of(cls, voters: Sequence[Voter]) -> VoterSet:
        return cls(tuple(sorted(voters, key=lambda v: v.node_id)))

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(v.node_id for v in self.voters)

    def get(self, node_id: int) -> Voter | None:
        return next((v for v in self.voters if v.node_id == node_id), None)

    def with_voter(self, voter: Voter) -> VoterSet:
        return VoterSet.of([*(v for v in self.voters if v.node_id != voter.node_id), voter])

    def without(self, node_id: int) -> VoterSet:
        return VoterSet.of([v for v in self.voters if v.node_id != node_id])


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One batch of the metadata log: ``count`` records from ``offset``, appended by the leader of ``epoch``.

    A batch is the unit of replication and of atomic application (KRaft applies a batch's records together).
    ``data`` is opaque to Raft (the record batch's bytes on disk, the records in a simulation); ``None`` marks a
    control batch (LeaderChange)."""

    offset: int
    epoch: int
    data: object
    count: int = 1

    @property
    def next_offset(self) -> int:
        return self.offset + self.count


class RaftLog(Protocol):
    @property
    def end_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    def epoch_at(self, offset: int) -> int: ...

    def append(self, entries: Sequence[LogEntry]) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    def read(self, offset: int, max_entries: int) -> list[LogEntry]: ...

    def flush(self) -> None: ...

    # ---- snapshots
    @property
    def log_start_offset(self) -> int: ...

    def latest_snapshot_id(self) -> tuple[int, int] | None: ...

    def snapshot_size(self, snapshot_id: tuple[int, int]) -> int | None: ...

    def read_snapshot(self, snapshot_id: tuple[int, int], position: int, max_bytes: int) -> bytes: ...

    def create_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None: ...

    def install_snapshot(self, snapshot_id: tuple[int, int], data: bytes) -> None: ...

    def delete_before_snapshot(self, snapshot_id: tuple[int, int]) -> bool: ...

    # ---- the voter set
    def voters(self) -> VoterSet | None: ...

    def voters_at(self, offset: int) -> VoterSet | None: ...

    def last_voters_offset(self) -> int: ...


class VoterHistory:
    """Where the voter set changed in a log: ``(offset of the entry, set)``, ascending, plus the set in force at
    the log start (from the snapshot the log starts at)."""

    def __init__(self) -> None:
        self.base: VoterSet | None = None
        self.changes: list[tuple[int, VoterSet]] = []

    def add(self, offset: int, voters: VoterSet) -> None:
        self.changes.append((offset, voters))

    def truncate(self, offset: int) -> None:
        while self.changes and self.changes[-1][0] >= offset:
            self.changes.pop()

    def at(self, offset: int) -> VoterSet | None:
        """The set in force for an entry at ``offset`` (set by entries below it)."""
        found = self.base
        for off, vs in self.changes:
            if off >= offset:
                break
            found = vs
        return found

    def latest(self) -> VoterSet | None:
        return self.changes[-1][1] if self.changes else self.base

    def last_offset(self) -> int:
        return self.changes[-1][0] if self.changes else -1

    def restart_at(self, offset: int, voters: VoterSet | None) -> None:
        self.base, self.changes = voters, []

    def drop_below(self, offset: int) -> None:
        """The log now starts at ``offset``: changes below it fold into the base."""
        self.base = self.at(offset)
        self.changes = [(o, v) for o, v in self.changes if o >= offset]


def encode_memory_snapshot(voters: VoterSet | None, data: bytes) -> bytes:
    """A :class:`MemoryRaftLog` snapshot as bytes: a first line naming the voter set, then the owner's data."""
    line = "-" if voters is None else ",".join(str(v.node_id) for v in voters.voters)
    return f"voters {line}\n".encode() + data


def decode_memory_snapshot(raw: bytes) -> tuple[VoterSet | None, bytes]:
    head, _, data = raw.partition(b"\n")
    ids = head.decode().split(" ", 1)[1]
    return (None if ids == "-" else VoterSet.of([Voter(int(i)) for i in ids.split(",")])), data


class MemoryRaftLog:
    """A :class:`RaftLog` in memory with a flushed offset (what a crash keeps)."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._offsets: list[int] = []  # base offset of each entry, for bisect
        self._epoch_starts: list[tuple[int, int]] = []  # (epoch, start offset), epochs increasing
        self._flushed = 0
        self._start = 0
        self._snapshots: dict[tuple[int, int], bytes] = {}
        self._voters = VoterHistory()
        self.lowest_truncation: int | None = None
        """The lowest offset any truncation cut back to since the owner last reset this (simulation checks)."""

    @property
    def end_offset(self) -> int:
        return self._entries[-1].next_offset if self._entries else self._start

    @property
    def log_start_offset(self) -> int:
        return self._start

    def _start_epoch(self) -> int:
        """Epoch of the entry just below the log start (that of the snapshot the log starts at), 0 at offset 0."""
        for end, epoch in self._snapshots:
            if end == self._start:
                return epoch
        return 0

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._start_epoch()

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def entries(self) -> list[LogEntry]:
        return list(self._entries)

    def _index(self, offset: int) -> int:
        """Index of the entry that holds ``offset`` (or ``len`` at the end)."""
        if offset >= self.end_offset:
            return len(self._entries)
        return max(0, bisect_right(self._offsets, offset) - 1)

    def epoch_at(self, offset: int) -> int:
        if offset < self._start:
            if offset == self._start - 1:
                return self._start_epoch()
            raise ValueError(f"offset {offset} is below the log start offset {self._start}")
        return self._entries[self._index(offset)].epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        starts = self._epoch_starts
        i = bisect_right([e for e, _ in starts], epoch) - 1
        if i < 0:
            if self._start > 0:
                start_epoch = self._start_epoch()
                return (start_epoch, self._start) if epoch >= start_epoch else (-1, self._start)
            return (0, 0)  # no epoch <= the one asked for: everything diverges
        found = starts[i][0]
        end = starts[i + 1][1] if i + 1 < len(starts) else self.end_offset
        return (found, end)

    def append(self, entries: Sequence[LogEntry]) -> None:
        for e in entries:
            if e.offset != self.end_offset or e.count < 1:
                raise ValueError(f"append of {e.count} at offset {e.offset}, log end offset is {self.end_offset}")
            if e.epoch < self.last_epoch:
                raise ValueError(f"epoch {e.epoch} below the log's last epoch {self.last_epoch}")
            if not self._epoch_starts or self._epoch_starts[-1][0] != e.epoch:
                self._epoch_starts.append((e.epoch, e.offset))
            self._entries.append(e)
            self._offsets.append(e.offset)
            if isinstance(e.data, VoterSet):
                self._voters.add(e.offset, e.data)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or past ``offset``; a batch that holds ``offset`` goes whole (as Kafka's log)."""
        if offset >= self.end_offset:
            return
        latest = self.latest_snapshot_id()
        if offset < self._start or (latest is not None and offset < latest[0]):
            raise ValueError(f"truncation to {offset} below a snapshot (log start {self._start}, latest snapshot "
                             f"{latest}): snapshots hold committed entries only")
        i = self._index(offset)
        offset = self._offsets[i]
        del self._entries[i:]
        del self._offsets[i:]
        if self.lowest_truncation is None or offset < self.lowest_truncation:
            self.lowest_truncation = offset
        while self._epoch_starts and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()
        self._voters.truncate(offset)
        self._flushed = min(self._flushed, offset)

    def read(self, offset: int, max_entries: int) -> list[LogEntry]:
        if offset < self._start:
            raise ValueError(f"read at {offset} below the log start offset {self._start}")
        i = self._index(offset)
        return self._entries[i:i + max_entries]

    def flush(self) -> None:
        self._flushed = self.end_offset

    # ---- snapshots
    def snapshot_ids(self) -> list[tuple[int, int]]:
        return sorted(self._snapshots)

    def latest_snapshot_id(self) -> tuple[int, int] | None:
        return max(self._snapshots) if self._snapshots else None

    def snapshot_size(self, snapshot_id: tuple[int, int]) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: tuple[int, int], position: int, max_bytes: int) -> bytes:
        return self._snapshots[snapshot_id][position:position + max_bytes]

    def snapshot_payload(self, snapshot_id: tuple[int, int]) -> bytes:
        """The owner's data of a snapshot (without the voter set line)."""
        return decode_memory_snapshot(self._snapshots[snapshot_id])[1]

    def create_snapshot(self, end_offset: int, epoch: int, data: bytes) -> None:
        """Store the owner's ``data`` with the voter set in force at ``end_offset`` (a first line)."""
        if not self._start <= end_offset <= self._flushed:
            raise ValueError(f"snapshot at {end_offset} outside the flushed log [{self._start}, {self._flushed}]")
        self._snapshots[(end_offset, epoch)] = encode_memory_snapshot(self._voters.at(end_offset), bytes(data))

    def install_snapshot(self, snapshot_id: tuple[int, int], data: bytes) -> None:
        """Replace the whole log by a snapshot fetched from the leader: it starts at the snapshot's end offset."""
        end = snapshot_id[0]
        self._snapshots = {k: v for k, v in self._snapshots.items() if k[0] > end}
        self._snapshots[snapshot_id] = bytes(data)
        self._entries.clear()
        self._offsets.clear()
        self._epoch_starts.clear()
        self._voters.restart_at(end, decode_memory_snapshot(bytes(data))[0])
        self._start = self._flushed = end

    def delete_before_snapshot(self, snapshot_id: tuple[int, int]) -> bool:
        """Drop the entries below ``snapshot_id``'s end offset and the older snapshots; False if there is no
        such snapshot or the log already starts there."""
        end = snapshot_id[0]
        if snapshot_id not in self._snapshots or end <= self._start or end > self._flushed:
            return False
        i = self._index(end)
        del self._entries[:i]
        del self._offsets[:i]
        if self._entries and self._entries[0].offset < end:
            raise AssertionError(f"snapshot end offset {end} inside batch {self._entries[0]}")
        self._epoch_starts = [(e, max(s, end)) for j, (e, s) in enumerate(self._epoch_starts)
                              if j + 1 >= len(self._epoch_starts) or self._epoch_starts[j + 1][1] > end]
        if not self._entries:
            self._epoch_starts = []
        self._voters.drop_below(end)
        self._start = end
        self._snapshots = {k: v for k, v in self._snapshots.items() if k[0] >= end}
        return True

    # ---- the voter set
    def voters(self) -> VoterSet | None:
        return self._voters.latest()

    def voters_at(self, offset: int) -> VoterSet | None:
        return self._voters.at(offset)

    def last_voters_offset(self) -> int:
        return self._voters.last_offset()

    def crash(self) -> None:
        """Lose every batch that was not flushed (a power loss)."""
        self.truncate_to(self._flushed)
