"""Leader epoch cache: which leader epoch started at which offset, persisted as ``leader-epoch-checkpoint``.

File format (text)::

    0                <- version
    2                <- number of entries
    0 0              <- epoch, start offset (ascending in both)
    3 1500

Used for ListOffsets/Fetch leader epochs and OffsetForLeaderEpoch (end offset of an epoch).
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from kbroker.storage.util import write_atomically

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """Ordered ``(epoch, start_offset)`` entries kept in memory and rewritten atomically on every change.

    ``path`` None keeps the cache in memory only (tests). A malformed file is logged and treated as empty.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._epochs: list[int] = []
        self._starts: list[int] = []
        #: the file existed but could not be read; its owner rebuilds the entries from the log
        self.damaged = False
        if self.path is not None:
            self._load()

    # -- persistence ---------------------------------------------------------------------------------

    def _load(self) -> None:
        assert self.path is not None
        try:
            lines = self.path.read_text("utf-8").splitlines()
        except FileNotFoundError:
            return
        except UnicodeDecodeError:
            log.warning("ignoring malformed %s: not text (garbage bytes); the epochs are rebuilt from the log",
                        self.path)
            self.damaged = True
            return
        try:
            if int(lines[0]) != 0:
                raise ValueError("unsupported version")
            count = int(lines[1])
            entries = [tuple(int(x) for x in ln.split()) for ln in lines[2:] if ln.strip()]
            if len(entries) != count or any(len(e) != 2 for e in entries):
                raise ValueError("entry count mismatch")
        except (ValueError, IndexError) as exc:
            log.warning("ignoring malformed %s: %s; the epochs are rebuilt from the log", self.path, exc)
            self.damaged = True
            return
        for epoch, start in entries:
            if self._epochs and (epoch <= self._epochs[-1] or start < self._starts[-1]):
                log.warning("ignoring out-of-order entry %s %s in %s", epoch, start, self.path)
                continue
            self._epochs.append(epoch)
            self._starts.append(start)

    def _flush(self) -> None:
        if self.path is None:
            return
        lines = ["0", str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts)]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("ascii"))

    # -- queries -------------------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        """``[(epoch, start_offset), ...]`` ascending."""
        return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int:
        """Newest epoch, or -1 when empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._epochs[0] if self._epochs else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """Epoch of the leader that wrote ``offset`` (largest start <= offset), or -1 if before all entries."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """The first offset of ``epoch`` in this log (None: the epoch is not in the cache)."""
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return self._starts[i]
        return None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end_offset)`` for the largest known epoch <= ``requested_epoch``.

        The end offset is the start offset of the next larger epoch, or ``log_end_offset`` when that epoch is
        the latest (or ``requested_epoch`` is newer than every known one). ``requested_epoch`` below every known
        epoch: ``(requested_epoch, start offset of the first known epoch)``, as Kafka's LeaderEpochFileCache
        answers (that epoch's records, if any, are gone; a follower truncates there and a consumer's position
        check compares with it). ``(-1, -1)`` when the cache is empty or ``requested_epoch`` is -1.
        """
        if not self._epochs or requested_epoch < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch >= self._epochs[-1]:
            return self._epochs[-1], log_end_offset
        i = bisect.bisect_right(self._epochs, requested_epoch) - 1
        if i < 0:
            return requested_epoch, self._starts[0]
        return self._epochs[i], self._starts[i + 1]

    # -- updates -------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True if the cache changed.

        Ignored when ``epoch`` is not newer than the latest one. Entries whose start offset is >=
        ``start_offset`` (left over from a truncated log) are dropped first.
        """
        if epoch < 0:
            return False
        if self._epochs and epoch <= self._epochs[-1]:
            return False
        while self._starts and self._starts[-1] >= start_offset:
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated to ``end_offset``)."""
        n = bisect.bisect_left(self._starts, end_offset)
        if n < len(self._starts):
            del self._epochs[n:], self._starts[n:]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset`` (log start moved); the epoch covering ``start_offset``
        is kept with its start moved up to ``start_offset``."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:i], self._starts[:i]
        self._starts[0] = start_offset
        self._flush()

    def replace_entries(self, entries: list[tuple[int, int]]) -> None:
        """Make the cache hold exactly ``entries`` (``[(epoch, start_offset), ...]`` ascending, as
        :meth:`entries` gives them) and write the file if that changed anything."""
        if list(zip(self._epochs, self._starts)) == list(entries):
            return
        self._epochs = [e for e, _ in entries]
        self._starts = [s for _, s in entries]
        self._flush()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._flush()
