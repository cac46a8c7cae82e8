"""Response byte chunks, some of which may be file regions sent with ``sendfile``.

A response is encoded as a list of chunks: ``bytes`` for ordinary encoded fields and ``FileRegion``
for record data that stays in a segment file (zero-copy Fetch, the style of Kafka's ``FileRecords``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Union


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes of ``file`` starting at byte ``position``.

    The file is read with ``os.pread`` or ``sendfile`` at an explicit offset, never through the file
    position, so many regions of one open file can be in flight at once.
    """

    file: BinaryIO
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def read_bytes(self) -> bytes:
        """The region's bytes, read with ``os.pread`` (a copy; for tests and non-sendfile transports)."""
        import os

        fd = self.file.fileno()
        out = bytearray()
        pos, left = self.position, self.size
        while left > 0:
            chunk = os.pread(fd, left, pos)
            if not chunk:
                break
            out += chunk
            pos += len(chunk)
            left -= len(chunk)
        return bytes(out)


Chunk = Union[bytes, bytearray, memoryview, FileRegion]


def chunks_size(chunks: list[Chunk]) -> int:
    """Total byte length of a chunk list."""
    return sum(len(c) for c in chunks)
