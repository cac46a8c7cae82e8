"""``TransactionIndex``: the aborted transactions whose ABORT markers lie in one segment (``<base>.txnindex``).

File format (Kafka's ``TransactionIndex`` / ``AbortedTxn``, protocol guide §4): a plain sequence of 34-byte
entries, no header and no checksum::

    int16 version (0), int64 producerId, int64 firstOffset, int64 lastOffset, int64 lastStableOffset

``firstOffset`` is the first offset of the aborted transaction's data in this partition, ``lastOffset`` the
offset of its ABORT marker, and ``lastStableOffset`` the partition's last stable offset right after the marker
(the first offset of the earliest transaction still open, else ``lastOffset + 1``). Entries are appended in
marker order, so ``lastOffset`` grows along the file.

A read_committed Fetch asks every segment from the one holding the fetch offset for the entries that overlap
the fetched range (``collect``): an entry whose ``lastStableOffset`` reaches the end of the range ends the
search, because every later abort belongs to a transaction that started after that range.

The file is created lazily (most segments never see an abort). Entries are kept in memory too; a torn
trailing entry (a crash in the middle of a write) is dropped when the file is opened. Not thread-safe.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Iterable, NamedTuple

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    """The ``.txnindex`` of one segment (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: list[AbortedTxn] = []
        self._fd: int | None = None
        self._dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
            if version != VERSION:
                log.warning("%s: entry at byte %d has unknown version %d; ignoring the rest", self.path, pos, version)
                whole = pos
                break
            self.entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):
            log.warning("%s: dropping %d trailing bytes", self.path, len(data) - whole)
            os.truncate(self.path, whole)

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    @property
    def last_offset(self) -> int:
        """The marker offset of the last entry (-1 when empty)."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> bool:
        """Add an entry; markers arrive in offset order, so an entry at or before the last one is a replay of
        what is already there (log recovery) and is skipped. Returns True if written."""
        if txn.last_offset <= self.last_offset:
            return False
        os.write(self._file(), txn.encode())
        self.entries.append(txn)
        self._dirty = True
        return True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound_offset)``, and whether the search is complete (an
        entry's last stable offset reached ``upper_bound_offset``)."""
        out: list[AbortedTxn] = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    def reset(self, entries: Iterable[AbortedTxn]) -> None:
        """Replace the whole file (log cleaner output, truncation)."""
        self.entries = sorted(entries, key=lambda t: t.last_offset)
        self.close()
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        data = b"".join(t.encode() for t in self.entries)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) != len(self.entries):
            self.reset(keep)

    def flush(self) -> None:
        if self._dirty and self._fd is not None:
            self._dirty = False
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            try:
                if self._dirty:
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
                self._dirty = False

    def rename_to(self, new_path: Path) -> None:
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            pass
        self.path = Path(new_path)

    def delete_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)
