"""Size-prefixed frames (protocol guide §1.1): a 4-byte big-endian signed length, then that many bytes.

:class:`FrameDecoder` is sans-I/O in the style of h11: ``feed(data)`` only buffers and
``next_frame()`` returns a complete frame, or ``None`` when more bytes are needed. A negative size or a
size above ``max_frame_size`` (``socket.request.max.bytes``) raises :class:`FrameError`; the Apache broker
closes the connection in that case.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent a frame that cannot be accepted (negative or oversized length)."""


class FrameDecoder:
    """Split a byte stream into frames without copying more than once per frame."""

    __slots__ = ("_buf", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = 104857600) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def pending_frame_size(self) -> int | None:
        """Declared size of the next frame, once its 4-byte prefix has arrived (validated)."""
        if len(self._buf) - self._pos < 4:
            return None
        size = _SIZE.unpack_from(self._buf, self._pos)[0]
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameError(f"frame size {size} exceeds socket.request.max.bytes {self.max_frame_size}")
        return size

    def next_frame(self) -> bytes | None:
        """The next complete frame (without its size prefix), or None if more data is needed."""
        size = self.pending_frame_size()
        if size is None:
            return None
        start = self._pos + 4
        end = start + size
        if end > len(self._buf):
            return None
        frame = bytes(self._buf[start:end])
        self._pos = end
        if self._pos > 1 << 20 and self._pos * 2 > len(self._buf):
            del self._buf[: self._pos]
            self._pos = 0
        return frame
