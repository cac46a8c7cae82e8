"""Sparse segment indexes: ``.index`` (offset -> file position) and ``.timeindex`` (timestamp -> offset).

On-disk entries (big-endian, no header, no checksum):

* ``.index``: 8 bytes per entry: int32 offset relative to the segment base offset, int32 byte position of
  the start of a batch in the ``.log`` file. The offset stored is the last offset of the indexed batch.
* ``.timeindex``: 12 bytes per entry: int64 timestamp (ms), int32 relative offset. An entry is only added
  when the segment's max timestamp grew; its offset is (a record of) the batch that first reached it.

Unlike Apache Kafka we do not preallocate index files: entries are appended to a plain file and mirrored in
memory (``array``) for ``bisect`` lookups. Indexes are advisory: they can always be rebuilt from the ``.log``.

File descriptors: lookups use the in-memory copy, so an index file is only open while entries are being
appended to it. At most :data:`MAX_OPEN_INDEX_FILES` index files are open in the process; the least recently
written one is closed when another is opened (its pending data is fsynced through its path at the next flush).
With 10,000 partitions that keeps index descriptors at about a thousand instead of 20,000.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from array import array
from pathlib import Path
import threading
from collections import OrderedDict
from typing import BinaryIO

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_BIG_ENDIAN = sys.byteorder == "big"


MAX_OPEN_INDEX_FILES = 1024
"""How many index files may be open at once in the process (least recently written closed first)."""

_open_lock = threading.Lock()
_open_files: OrderedDict[int, _IndexFile] = OrderedDict()  # id(index) -> index, least recently used first


class _IndexFile:
    """Shared file handling: lazily opened append-only file, rewrite, fsync, rename, delete."""

    entry_size = 0

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_entries)
        self._file: BinaryIO | None = None
        self._dirty = False

    def _fh(self) -> BinaryIO:
        with _open_lock:
            f = self._file
            if f is None:
                f = self._file = open(self.path, "ab", buffering=0)
                _open_files[id(self)] = self
                while len(_open_files) > MAX_OPEN_INDEX_FILES:
                    _, victim = _open_files.popitem(last=False)
                    victim._drop_handle()
            else:
                _open_files.move_to_end(id(self))
        return f

    def _drop_handle(self) -> None:
        """Close the handle (called with ``_open_lock`` held); writes were unbuffered, nothing is lost."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass

    def _write(self, data: bytes) -> None:
        f = self._fh()
        view = memoryview(data)
        while view:
            n = f.write(view)
            view = view[n:]
        self._dirty = True

    def _rewrite(self, data: bytes) -> None:
        # through a short-lived handle: rewrites happen when a segment is created or recovered (possibly in a
        # worker thread) and leave no descriptor open
        self.close()
        with open(self.path, "wb", buffering=0) as f:
            view = memoryview(data)
            while view:
                n = f.write(view)
                view = view[n:]
        self._dirty = True

    def _read_all(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def flush(self) -> None:
        """fsync the index file if anything was written since the last flush (through its path when the handle
        was closed meanwhile: fsync works on the file, whichever descriptor)."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            f = self._file
            try:
                if f is None:
                    raise ValueError("closed")
                os.fsync(f.fileno())
            except ValueError:  # no handle, or closed by another thread just now
                try:
                    fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    return
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except BaseException:
            self._dirty = True
            raise

    def close(self) -> None:
        with _open_lock:
            _open_files.pop(id(self), None)
            self._drop_handle()

    def rename_to(self, new_path: Path) -> None:
        """Rename the file (if it exists); the open handle keeps working."""
        new_path = Path(new_path)
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            pass
        self.path = new_path

    def delete_file(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_IndexFile):
    """Sparse offset index of one segment. Offsets are absolute in the API, relative on disk."""

    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._rel = array("i")
        self._pos = array("i")

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(offset, position)`` of the last entry, or ``(base_offset, 0)`` when empty."""
        if not self._rel:
            return self.base_offset, 0
        return self.base_offset + self._rel[-1], self._pos[-1]

    def entries(self) -> list[tuple[int, int]]:
        """All ``(absolute offset, position)`` entries (for tests/debugging)."""
        return [(self.base_offset + r, p) for r, p in zip(self._rel, self._pos)]

    def load(self, log_size: int) -> bool:
        """Read the file into memory and sanity-check it against a ``.log`` of ``log_size`` bytes.

        Returns False (leaving the index empty in memory) when the file is missing or inconsistent: size not
        a multiple of 8, offsets not strictly increasing, positions decreasing or beyond the log.
        """
        self._rel = array("i")
        self._pos = array("i")
        data = self._read_all()
        if data is None or len(data) % self.entry_size:
            return False
        a = array("i")
        a.frombytes(data)
        if not _BIG_ENDIAN:
            a.byteswap()
        rel, pos = a[0::2], a[1::2]
        prev_r, prev_p = -1, -1
        for r, p in zip(rel, pos):
            if r <= prev_r or p < prev_p or p >= log_size:
                return False
            prev_r, prev_p = r, p
        self._rel, self._pos = rel, pos
        return True

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``; ignored unless the offset is larger than the last entry's."""
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            return
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} not representable relative to {self.base_offset}")
        self._rel.append(rel)
        self._pos.append(position)
        self._write(_OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= ``offset`` as ``(offset, position)``; ``(base_offset, 0)`` if none."""
        i = bisect.bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def floor_position(self, position: int) -> int:
        """Largest indexed batch position <= ``position`` (0 if none): a known batch boundary."""
        i = bisect.bisect_right(self._pos, position) - 1
        return self._pos[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        n = bisect.bisect_left(self._rel, offset - self.base_offset)
        if n < len(self._rel):
            del self._rel[n:], self._pos[n:]
            self._rewrite(self._encode())

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries (absolute offsets) and rewrite the file."""
        self._rel = array("i", [o - self.base_offset for o, _ in entries])
        self._pos = array("i", [p for _, p in entries])
        self._rewrite(self._encode())

    def _encode(self) -> bytes:
        return b"".join(_OFFSET_ENTRY.pack(r, p) for r, p in zip(self._rel, self._pos))


class TimeIndex(_IndexFile):
    """Sparse time index of one segment: non-decreasing ``(timestamp, offset)`` entries."""

    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._ts = array("q")
        self._rel = array("i")

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry or ``(-1, base_offset)`` when empty."""
        if not self._ts:
            return -1, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + r) for t, r in zip(self._ts, self._rel)]

    def load(self) -> bool:
        """Read and sanity-check the file; False (index left empty) if missing or inconsistent."""
        self._ts = array("q")
        self._rel = array("i")
        data = self._read_all()
        if data is None or len(data) % self.entry_size:
            return False
        ts = array("q")
        rel = array("i")
        prev_t, prev_r = -(2**63), -1
        for t, r in _TIME_ENTRY.iter_unpack(data):
            if t < prev_t or r < prev_r or r < 0:
                return False
            ts.append(t)
            rel.append(r)
            prev_t, prev_r = t, r
        self._ts, self._rel = ts, rel
        return True

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append when ``timestamp`` is larger than the last entry's (and the offset is not smaller).
        Returns True if an entry was written. ``skip_full_check`` allows the final entry at roll time."""
        if not skip_full_check and self.is_full:
            return False
        rel = offset - self.base_offset
        if self._ts and (timestamp <= self._ts[-1] or rel < self._rel[-1]):
            return False
        if timestamp < 0 or not 0 <= rel <= 0x7FFFFFFF:
            return False
        self._ts.append(timestamp)
        self._rel.append(rel)
        self._write(_TIME_ENTRY.pack(timestamp, rel))
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= ``timestamp`` as ``(timestamp, offset)``;
        ``(-1, base_offset)`` if none."""
        i = bisect.bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        rel = offset - self.base_offset
        n = len(self._rel)
        while n > 0 and self._rel[n - 1] >= rel:
            n -= 1
        if n < len(self._rel):
            del self._ts[n:], self._rel[n:]
            self._rewrite(self._encode())

    def reset(self, entries: list[tuple[int, int]]) -> None:
        """Replace all entries ``(timestamp, absolute offset)`` and rewrite the file."""
        self._ts = array("q", [t for t, _ in entries])
        self._rel = array("i", [o - self.base_offset for _, o in entries])
        self._rewrite(self._encode())

    def _encode(self) -> bytes:
        return b"".join(_TIME_ENTRY.pack(t, r) for t, r in zip(self._ts, self._rel))
