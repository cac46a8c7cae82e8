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

``MemoryRaftLog`` keeps everything in lists; :meth:`MemoryRaftLog.crash` drops what was never flushed, which
is how the simulation models a power loss.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Protocol, Sequence


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


class MemoryRaftLog:
    """A :class:`RaftLog` in memory with a flushed offset (what a crash keeps)."""

    def __init__(self) -> None:
        self._entries: list[LogEntry] = []
        self._offsets: list[int] = []  # base offset of each entry, for bisect
        self._epoch_starts: list[tuple[int, int]] = []  # (epoch, start offset), epochs increasing
        self._flushed = 0
        self.lowest_truncation: int | None = None
        """The lowest offset any truncation cut back to since the owner last reset this (simulation checks)."""

    @property
    def end_offset(self) -> int:
        return self._entries[-1].next_offset if self._entries else 0

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

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
        return self._entries[self._index(offset)].epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        starts = self._epoch_starts
        i = bisect_right([e for e, _ in starts], epoch) - 1
        if i < 0:
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

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or past ``offset``; a batch that holds ``offset`` goes whole (as Kafka's log)."""
        if offset >= self.end_offset:
            return
        i = self._index(offset)
        offset = self._offsets[i]
        del self._entries[i:]
        del self._offsets[i:]
        if self.lowest_truncation is None or offset < self.lowest_truncation:
            self.lowest_truncation = offset
        while self._epoch_starts and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()
        self._flushed = min(self._flushed, offset)

    def read(self, offset: int, max_entries: int) -> list[LogEntry]:
        i = self._index(offset)
        return self._entries[i:i + max_entries]

    def flush(self) -> None:
        self._flushed = self.end_offset

    def crash(self) -> None:
        """Lose every batch that was not flushed (a power loss)."""
        self.truncate_to(self._flushed)
