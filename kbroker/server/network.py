"""Connections: frames in, responses out, in request order (protocol guide §1.1).

``KafkaConnection`` is an ``asyncio.Protocol``. ``data_received`` feeds a :class:`FrameDecoder`; complete
frames go to a per-connection queue that one task drains, so requests on a connection are handled one at
a time and responses are written in request order, as the Apache broker does. Reading pauses while more
than ``MAX_QUEUED_FRAMES`` frames wait (back-pressure), and writing awaits ``drain`` when the transport's
buffer is above its high-water mark.

Limits a client cannot get around (issue: reliability of one node):

* ``connections.max.idle.ms`` (Kafka's key, default 600000): a connection that completed no request for that
  long is closed;
* ``kbroker.request.read.timeout.ms`` (kbroker's own key, default 30000): a request frame that has begun
  must arrive whole within that time, so a frame trickled byte by byte cannot hold a connection;
* ``max.connections`` and ``max.connections.per.ip`` / ``max.connections.per.ip.overrides`` (Kafka's keys):
  a connection over a limit is closed at once (Kafka stops accepting at the broker-wide limit instead);
* one request at a time per connection, reading paused while ``MAX_QUEUED_FRAMES`` wait, and the connection's
  task yields to the others after each request, so one client pipelining requests cannot starve the rest.

Record data in Fetch responses arrives as :class:`~kbroker.protocol.send.FileRegion` chunks. They are sent
with ``os.sendfile`` straight from the segment file when the transport has nothing buffered (zero-copy on
plain TCP); whatever the socket does not take at once is read with ``os.pread`` and written normally. On TLS
listeners the bytes must go through the encryption, so they are always read and written (no sendfile, as in
Kafka).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
import time
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


#: in-memory response chunks up to this many bytes in all are joined into one write
JOIN_WRITE_LIMIT = 64 * 1024


def _write_joined(transport: Any, chunks: list[Any], total: int) -> None:
    if not chunks:
        return
    if len(chunks) == 1:
        transport.write(chunks[0])
    elif total <= JOIN_WRITE_LIMIT:
        transport.write(b"".join(chunks))
    else:
        for chunk in chunks:
            transport.write(chunk)


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
        self.security = broker.listener_security.get(listener_name)
        #: who is talking (``User:ANONYMOUS`` unless a TLS client certificate or SASL says otherwise)
        self.principal = "User:ANONYMOUS"
        # sendfile would put the file's bytes on the socket beneath TLS: TLS connections copy (as Kafka does)
        self._tls = self.security is not None and self.security.tls
        #: SASL listeners: the authentication state (nothing but ApiVersions and the SASL requests before it)
        self.sasl: Any = None
        if self.security is not None and self.security.sasl is not None:
            from kbroker.security.sasl import SaslAuthenticator, scram_lookup

            self.sasl = SaslAuthenticator(self.security.sasl, scram_lookup(lambda: broker.controller.image))
        #: close once the response being written is out (a failed authentication)
        self.close_after_response = False
        #: monotonic time after which only re-authentication is served (``connections.max.reauth.ms``, KIP-368)
        self.session_expires_at: float | None = None

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        self.last_request_at = time.monotonic()
        self.frame_started_at: float | None = None
        refused = self.broker.connection_limits.admit(self)
        if not refused and self._tls:
            try:
                self.principal = self.security.principal(transport)
            except Exception as exc:  # noqa: BLE001 - NoMatchingRule, an unreadable certificate
                self.broker.connection_limits.release(self)
                refused = f"authentication failed: {exc}"
        if refused:
            log.info("closing connection from %s: %s", self.peer, refused)
            self._closed = self._aborted = True
            transport.abort()  # type: ignore[attr-defined]
            return
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
                self.last_request_at = time.monotonic()
            self.frame_started_at = (self.frame_started_at or time.monotonic()) if self.decoder.buffered else None
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
        self.broker.connection_limits.release(self)
        self.frames.put_nowait(None)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- SASL ----
    def authenticated(self, principal: str) -> None:
        """The SASL exchange completed as ``principal``; a new session starts (KIP-368)."""
        self.principal = principal
        lifetime = self.session_lifetime_ms()
        self.session_expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None

    def session_lifetime_ms(self) -> int:
        """The session's lifetime (KIP-368): ``connections.max.reauth.ms`` of this listener, shortened to the
        credential's expiry (an OAUTHBEARER token's ``exp``); 0: sessions do not expire (the default)."""
        from kbroker.security.tls import settings

        try:
            reauth = int(settings(self.broker.config, self.listener_name)("connections.max.reauth.ms") or 0)
        except ValueError:
            return 0
        expires = self.sasl.credential_expires_ms if self.sasl is not None else None
        if reauth > 0 and expires is not None:
            reauth = max(1, min(reauth, expires - int(time.time() * 1000)))
        return reauth

    async def _raw_sasl_token(self, frame: bytes) -> None:
        """A SASL token as a bare frame (after a v0 SaslHandshake): answered with the server's token, size-
        prefixed; a failed authentication closes the connection without an answer (Kafka's v0 flow)."""
        from kbroker.security.sasl import AuthenticationFailed

        if len(frame) > self.sasl.config.max_receive_size:
            raise CloseConnection(f"SASL token of {len(frame)} bytes is larger than sasl.server.max.receive.size")
        try:
            token = self.sasl.authenticate(bytes(frame))
        except AuthenticationFailed as exc:
            await asyncio.sleep(self.sasl.config.failed_delay_s)
            raise CloseConnection(f"authentication failed: {exc}") from None
        if self.sasl.authenticated:
            self.authenticated(self.sasl.principal)
        await self._write_response([token])

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
                    if self.sasl is not None and self.sasl.raw_tokens:
                        await self._raw_sasl_token(frame)
                        chunks = None
                    else:
                        chunks = await self.broker.apis.handle_frame(self, frame)
                except CloseConnection as exc:
                    log.info("closing connection from %s: %s", self.peer, exc)
                    self.close()
                    return
                if chunks is not None:
                    await self._write_response(chunks)
                if self.close_after_response:
                    log.info("closing connection from %s after a failed authentication", self.peer)
                    self.close()
                    return
                self.last_request_at = time.monotonic()
                if self.frames.qsize():
                    await asyncio.sleep(0)  # let other connections' requests in between (fairness)
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
        # One transport.write per run of in-memory chunks, size prefix included (a syscall each otherwise);
        # large chunks are written as they are rather than copied into one buffer.
        pending: list[Any] = [_SIZE.pack(size)]
        pending_bytes = 4
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                _write_joined(transport, pending, pending_bytes)
                pending, pending_bytes = [], 0
                await self._send_region(chunk)
                if self._closed:
                    return
            else:
                pending.append(chunk)
                pending_bytes += len(chunk)
        _write_joined(transport, pending, pending_bytes)
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
        if left and self.broker.zero_copy and not self._tls and transport.get_write_buffer_size() == 0:
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


class ConnectionLimits:
    """``max.connections`` / ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) and the
    idle and partial-request deadlines, checked by :meth:`sweep` (the broker calls it about once a second)."""

    def __init__(self, config: Any) -> None:
        self.max_connections = config.get_int("max.connections")
        self.max_per_ip = config.get_int("max.connections.per.ip")
        self.overrides: dict[str, int] = {}
        for item in config.get_list("max.connections.per.ip.overrides"):
            host, sep, n = item.rpartition(":")
            if sep and n.strip().isdigit():
                self.overrides[host.strip()] = int(n)
        self.idle_ms = config.get_int("connections.max.idle.ms")
        self.read_timeout_ms = config.get_int("kbroker.request.read.timeout.ms")
        self.per_ip: dict[str, int] = {}
        self.total = 0

    def admit(self, conn: KafkaConnection) -> str | None:
        """Count ``conn`` in, or say why it is refused."""
        ip = conn.peer[0] if conn.peer else ""
        limit = self.overrides.get(ip, self.max_per_ip)
        if self.per_ip.get(ip, 0) >= limit:
            return f"too many connections from {ip} (max.connections.per.ip {limit})"
        if self.total >= self.max_connections:
            return f"too many connections (max.connections {self.max_connections})"
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self.total += 1
        conn._counted = True  # type: ignore[attr-defined]
        return None

    def release(self, conn: KafkaConnection) -> None:
        if not getattr(conn, "_counted", False):
            return
        conn._counted = False  # type: ignore[attr-defined]
        ip = conn.peer[0] if conn.peer else ""
        self.total -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)

    def sweep(self, connections: set[KafkaConnection]) -> int:
        """Close connections idle past ``connections.max.idle.ms`` or with a frame begun longer than
        ``kbroker.request.read.timeout.ms`` ago. Returns how many were closed."""
        now = time.monotonic()
        closed = 0
        for conn in list(connections):
            started = getattr(conn, "frame_started_at", None)
            if started is not None and (now - started) * 1000 > self.read_timeout_ms:
                log.info("closing connection from %s: a request frame has been arriving for more than %d ms",
                         conn.peer, self.read_timeout_ms)
            elif (conn.frames.qsize() == 0 and (now - getattr(conn, "last_request_at", now)) * 1000 > self.idle_ms
                  and not conn._closed):
                log.info("closing connection from %s: idle for more than %d ms (connections.max.idle.ms)",
                         conn.peer, self.idle_ms)
            else:
                continue
            conn.close()
            closed += 1
        return closed
