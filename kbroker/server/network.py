"""Connections: frames in, responses out, in request order (protocol guide §1.1).

``KafkaConnection`` is an ``asyncio.Protocol``. ``data_received`` feeds a :class:`FrameDecoder`; complete
frames go to a per-connection queue that one task drains, so requests on a connection are handled one at
a time and responses are written in request order, as the Apache broker does. Reading pauses while more
than ``MAX_QUEUED_FRAMES`` frames wait (back-pressure), and writing awaits ``drain`` when the transport's
buffer is above its high-water mark.

Record data in Fetch responses arrives as :class:`~kbroker.protocol.send.FileRegion` chunks. They are sent
with ``os.sendfile`` straight from the segment file when the transport has nothing buffered (zero-copy on
plain TCP); whatever the socket does not take at once is read with ``os.pread`` and written normally.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
from typing import TYPE_CHECKING, Any

from kbroker.protocol.framing import FrameDecoder, FrameError
from kbroker.protocol.send import FileRegion

if TYPE_CHECKING:
    from kbroker.server.broker import Broker

log = logging.getLogger(__name__)

MAX_QUEUED_FRAMES = 16
_SIZE = struct.Struct(">i")


class CloseConnection(Exception):
    """Raised by request processing when Kafka would close the connection (no response is sent)."""


class KafkaConnection(asyncio.Protocol):
    """One client connection on a listener."""

    def __init__(self, broker: Broker, listener_name: str) -> None:
        self.broker = broker
        self.listener_name = listener_name
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(broker.config.socket_request_max_bytes)
        self.frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.peer: tuple[Any, ...] | None = None
        self.client_software: tuple[str, str] | None = None
        self._paused_reading = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closed = False  # no more bytes can be written
        self._aborted = False  # the broker closed it: stop handling queued requests
        self._task: asyncio.Task[None] | None = None
        self._watch_fd: int | None = None  # dup of the socket fd, watched while sendfile waits

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=4 << 20)
        self.broker.connections.add(self)
        self._task = asyncio.get_running_loop().create_task(self._process())

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self.decoder.feed(data)
        try:
            while True:
                frame = self.decoder.next_frame()
                if frame is None:
                    break
                self.frames.put_nowait(frame)
        except FrameError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        if self.frames.qsize() >= MAX_QUEUED_FRAMES and not self._paused_reading and self.transport:
            self._paused_reading = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._watch_fd is not None:
            try:
                asyncio.get_running_loop().remove_writer(self._watch_fd)
            except Exception:
                pass
            os.close(self._watch_fd)
            self._watch_fd = None
        self._can_write.set()
        self.broker.connections.discard(self)
        self.frames.put_nowait(None)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- processing ----
    def close(self) -> None:
        """Close the connection on the broker's initiative: frames still queued are not handled."""
        self._aborted = True
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()
            self.frames.put_nowait(None)

    async def _process(self) -> None:
        try:
            while True:
                frame = await self.frames.get()
                # When the peer closes, requests it sent before closing are still handled (an acks=0
                # Produce is appended, as Kafka does); only their responses have nowhere to go.
                if frame is None or self._aborted:
                    return
                if self._paused_reading and self.frames.qsize() < MAX_QUEUED_FRAMES // 2 and self.transport:
                    self._paused_reading = False
                    self.transport.resume_reading()
                try:
                    chunks = await self.broker.apis.handle_frame(self, frame)
                except CloseConnection as exc:
                    log.info("closing connection from %s: %s", self.peer, exc)
                    self.close()
                    return
                if chunks is not None:
                    await self._write_response(chunks)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let one connection's bug take the broker down
            log.exception("error processing request from %s", self.peer)
            self.close()

    async def _write_response(self, chunks: list[Any]) -> None:
        transport = self.transport
        if transport is None or self._closed:
            return
        size = sum(len(c) for c in chunks)
        transport.write(_SIZE.pack(size))
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                await self._send_region(chunk)
                if self._closed:
                    return
            else:
                transport.write(chunk)
        if not self._can_write.is_set():
            await self._can_write.wait()

    async def _send_region(self, region: FileRegion) -> None:
        """Send a file region with ``os.sendfile`` straight from the segment file.

        Zero-copy needs the transport's own buffer to be empty (so bytes stay in order); when the socket
        buffer fills, the task waits for writability on a duplicate of the socket's descriptor (the loop
        refuses watchers on a descriptor its transport owns) and carries on with ``sendfile``. If that is
        not possible the rest is read with ``os.pread`` and written through the transport.
        """
        transport = self.transport
        assert transport is not None
        pos, left = region.position, region.size
        file_fd = region.file.fileno()
        if left and self.broker.zero_copy and transport.get_write_buffer_size() == 0:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock_fd = sock.fileno()
                while left > 0 and not self._closed:
                    try:
                        sent = os.sendfile(sock_fd, file_fd, pos, left)
                    except BlockingIOError:
                        if not await self._wait_writable(sock_fd):
                            break
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.EINVAL, errno.ENOSYS):
                            break  # no sendfile for this pair: copy below
                        self.close()
                        return
                    if sent == 0:
                        break  # end of file: handled by the copy loop's check below
                    pos += sent
                    left -= sent
                    self.broker.stats_sendfile_bytes += sent
        while left > 0 and not self._closed:
            data = os.pread(file_fd, min(left, 1 << 20), pos)
            if not data:
                # the file shrank under us: the response can no longer be completed correctly
                log.error("segment file shorter than the region being sent; closing %s", self.peer)
                self.close()
                return
            transport.write(data)
            pos += len(data)
            left -= len(data)
            if not self._can_write.is_set():
                await self._can_write.wait()

    async def _wait_writable(self, sock_fd: int) -> bool:
        """Wait until the socket can take more bytes; False when that cannot be watched (or it closed)."""
        loop = asyncio.get_running_loop()
        if self._watch_fd is None:
            try:
                self._watch_fd = os.dup(sock_fd)
            except OSError:
                return False
        fut: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        watch_fd = self._watch_fd
        try:
            loop.add_writer(watch_fd, ready)
        except (RuntimeError, ValueError, OSError, NotImplementedError):
            return False
        try:
            while not fut.done():
                if self._closed:
                    return False
                try:
                    await asyncio.wait_for(asyncio.shield(fut), 1.0)
                except asyncio.TimeoutError:
                    pass
        finally:
            if self._watch_fd == watch_fd:  # connection_lost has not closed it meanwhile
                loop.remove_writer(watch_fd)
        return not self._closed
