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
* ``max.connection.creation.rate`` (broker-wide, not on the inter-broker listener) and
  ``listener.name.<l>.max.connection.creation.rate`` (KIP-612): each new connection is counted in the rate, and
  while a rate is above its limit the listener takes up the next connection only after Kafka's throttle time
  ((rate - limit) / limit x window, at most one ``quota.window.size.seconds``); a waiting connection is not read
  from and does not count against ``max.connections`` yet, as one in Kafka's accept backlog. The rate is the
  replication throttles' ``SimpleRate`` (at least one window), so a burst after a quiet period is one window's
  worth (the client quotas' ``Rate`` would let ``quota.window.num - 1`` windows' worth through at once);
* ``connection_creation_rate`` quotas of ip entities (ClientQuotaRecords, KIP-612): a connection over its
  address's rate (the address's own quota, else the default ip's) is not counted and is closed after the
  throttle time, so that the client does not reconnect at once;
* client quotas (``kbroker.server.client_quotas``): a request over one gets its response at once with
  ``throttle_time_ms`` and the connection is not read from for that time (:meth:`KafkaConnection.throttle`);
* one request at a time per connection, reading paused while ``MAX_QUEUED_FRAMES`` wait, and the connection's
  task yields to the others after each request, so one client pipelining requests cannot starve the rest.

Record data in Fetch responses arrives as :class:`~kbroker.protocol.send.FileRegion` chunks. They are sent
with ``os.sendfile`` straight from the segment file when the transport has nothing buffered (zero-copy on
plain TCP); whatever the socket does not take at once is read with ``os.pread`` and written normally. On TLS
listeners the bytes must go through the encryption, so they are always read and written (no sendfile, as in
Kafka). Regions of at most ``SMALL_REGION_COPY`` bytes that fit the response's joined write are read and written
with the rest of the response: a consumer woken for one small batch costs one send, not three.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from kbroker.protocol.framing import FrameDecoder, FrameError
from kbroker.protocol.send import FileRegion
from kbroker.server.sampled_rate import SampledRate

if TYPE_CHECKING:
    from kbroker.server.broker import Broker

log = logging.getLogger(__name__)

MAX_QUEUED_FRAMES = 16
_SIZE = struct.Struct(">i")
INT_MAX = 2**31 - 1


def _address(peer: tuple[Any, ...] | None) -> str:
    """``host:port`` of a peer name (``?`` when unknown)."""
    if not peer:
        return "?"
    return f"[{peer[0]}]:{peer[1]}" if ":" in str(peer[0]) else f"{peer[0]}:{peer[1]}"


class CloseConnection(Exception):
    """Raised by request processing when Kafka would close the connection (no response is sent)."""


#: in-memory response chunks up to this many bytes in all are joined into one write
JOIN_WRITE_LIMIT = 64 * 1024
#: file regions up to this size are read (``os.pread``) and joined into the response's write instead of sent
#: with ``sendfile``: for a long-polling consumer woken by one small batch, one TCP send per response instead of
#: three (header, ``sendfile``, the rest); larger regions keep the zero-copy path
SMALL_REGION_COPY = 16 * 1024


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


class _FrameQueue:
    """The frames a connection's task has still to handle (``None``: the connection is gone): the part of
    ``asyncio.Queue`` the task needs, with a future only while the task waits for the next frame."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[bytes | None] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: bytes | None) -> None:
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def qsize(self) -> int:
        return len(self._items)

    async def get(self) -> bytes | None:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._items.popleft()


class KafkaConnection(asyncio.Protocol):
    """One client connection on a listener."""

    def __init__(self, broker: Broker, listener_name: str) -> None:
        self.broker = broker
        self.listener_name = listener_name
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(broker.config.socket_request_max_bytes)
        self.frames = _FrameQueue()
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
            from kbroker.controller.delegation_token_control import token_lookup
            from kbroker.security.sasl import SaslAuthenticator, scram_lookup

            self.sasl = SaslAuthenticator(self.security.sasl, scram_lookup(lambda: broker.controller.image),
                                          token_lookup(lambda: broker.controller.image,
                                                       broker.config.get("delegation.token.secret.key")))
        #: close once the response being written is out (a failed authentication)
        self.close_after_response = False
        #: (seconds, client throttles itself) set by a request over a client quota (:meth:`throttle`)
        self._throttle: tuple[float, bool] | None = None
        #: total seconds this connection was muted for quotas
        self.muted_s = 0.0
        #: monotonic time after which only re-authentication is served (``connections.max.reauth.ms``, KIP-368)
        self.session_expires_at: float | None = None

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = transport.get_extra_info("peername")
        self.last_request_at = time.monotonic()
        self.frame_started_at: float | None = None
        # max.connection.creation.rate (KIP-612): the acceptor takes this connection up only once the rate allows
        delay = self.broker.connection_limits.accept_delay(self.listener_name)
        if delay > 0:
            transport.pause_reading()  # type: ignore[attr-defined]
            self._paused_reading = True
            asyncio.get_running_loop().call_later(delay, self._accept)
        else:
            self._accept()

    def _accept(self) -> None:
        """Take the connection up: count it (max.connections, max.connections.per.ip), check its address's
        connection_creation_rate quota, read the TLS principal, start the request loop."""
        transport = self.transport
        if transport is None or self._closed:
            return
        if self._paused_reading:
            self._paused_reading = False
            transport.resume_reading()  # type: ignore[attr-defined]
        limits = self.broker.connection_limits
        refused = limits.admit(self)
        if refused is None:
            close_in = limits.ip_rate_throttle(self)
            if close_in is not None:
                # over its address's connection_creation_rate: closed after the throttle time, so that the client
                # does not come straight back (KIP-612)
                log.info("closing connection from %s in %.0f ms: connection_creation_rate of %s exceeded",
                         self.peer, close_in * 1000, self.peer[0] if self.peer else "?")
                limits.release(self)
                self._closed = self._aborted = True
                transport.pause_reading()  # type: ignore[attr-defined]
                asyncio.get_running_loop().call_later(close_in, transport.abort)  # type: ignore[attr-defined]
                return
        if not refused and self._tls:
            try:
                self.principal = self.security.principal(transport)
            except Exception as exc:  # noqa: BLE001 - NoMatchingRule, an unreadable certificate
                limits.release(self)
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
        transport.set_write_buffer_limits(high=4 << 20)  # type: ignore[attr-defined]
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
        credential's expiry (an OAUTHBEARER token's ``exp``, a delegation token's expiry); 0: sessions do not expire
        (the default)."""
        from kbroker.security.tls import settings

        try:
            reauth = int(settings(self.broker.config, self.listener_name)("connections.max.reauth.ms") or 0)
        except ValueError:
            return 0
        expires = self.sasl.credential_expires_ms if self.sasl is not None else None
        if reauth > 0 and expires is not None:
            reauth = max(1, min(reauth, expires - int(time.time() * 1000)))
        return reauth

    async def _raw_sasl_token(self, frame: bytes) -> bool:
        """A SASL token as a bare frame (after a v0 SaslHandshake): answered with the server's token, size-
        prefixed; a failed authentication is logged and False returned: the connection is closed without an
        answer (Kafka's v0 flow)."""
        from kbroker.security.sasl import AuthenticationFailed

        if len(frame) > self.sasl.config.max_receive_size:
            raise CloseConnection(f"SASL token of {len(frame)} bytes is larger than sasl.server.max.receive.size")
        try:
            token = self.sasl.authenticate(bytes(frame))
        except AuthenticationFailed as exc:
            self.log_failed_authentication(exc)
            await asyncio.sleep(self.sasl.config.failed_delay_s)
            return False
        if self.sasl.authenticated:
            self.authenticated(self.sasl.principal)
        await self._write_response([token])
        return True

    def log_failed_authentication(self, exc: BaseException) -> None:
        """One INFO line per failed SASL authentication (Kafka logs each one at INFO, as ``Failed authentication
        with <address> ...``): the client's address, listener, mechanism, the principal it claimed, the reason."""
        sasl = self.sasl
        log.info("Failed authentication with %s (listener %s, mechanism %s, principal %s): %s",
                      _address(self.peer), self.listener_name, sasl.mechanism if sasl else None,
                      (sasl.claimed_principal if sasl else None) or "unknown", exc)

    # ---- client quotas (KIP-219) ----
    def throttle(self, seconds: float, client_side: bool) -> None:
        """The request being handled is over a client quota: stop reading from this connection for ``seconds``
        once its response is written (``client_side``: the client throttles itself too, KIP-219), or for an older
        client hold the response back that long first."""
        if seconds > 0:
            self._throttle = (max(seconds, self._throttle[0] if self._throttle else 0.0), client_side)

    async def _mute(self, seconds: float) -> None:
        """Read nothing from the client for ``seconds`` (Kafka mutes the channel)."""
        transport = self.transport
        if transport is None or self._closed:
            return
        transport.pause_reading()
        self.muted_s += seconds
        try:
            await asyncio.sleep(seconds)
        finally:
            if not self._paused_reading and not self._closed:
                transport.resume_reading()

    @property
    def closed(self) -> bool:
        """The connection is gone (closed by either side)."""
        return self._closed

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
                        if not await self._raw_sasl_token(frame):
                            self.close()  # a failed authentication (logged)
                            return
                        chunks = None
                    else:
                        chunks = await self.broker.apis.handle_frame(self, frame)
                except CloseConnection as exc:
                    log.info("closing connection from %s: %s", self.peer, exc)
                    self.close()
                    return
                throttle, self._throttle = self._throttle, None
                if throttle is not None and not throttle[1]:
                    await self._mute(throttle[0])  # an old client: the response itself waits
                if chunks is not None:
                    await self._write_response(chunks)
                if throttle is not None and throttle[1]:
                    await self._mute(throttle[0])
                if self.close_after_response:  # a failed authentication (logged by log_failed_authentication)
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
                if chunk.size <= SMALL_REGION_COPY and pending_bytes + chunk.size <= JOIN_WRITE_LIMIT:
                    # a small region is read and joined into the same write: one pread and no second TCP send
                    data = os.pread(chunk.file.fileno(), chunk.size, chunk.position)
                    if len(data) != chunk.size:
                        log.error("segment file shorter than the region being sent; closing %s", self.peer)
                        self.close()
                        return
                    pending.append(data)
                    pending_bytes += len(data)
                    continue
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
        # max.connection.creation.rate, broker-wide and per listener (KIP-612)
        self._config = config
        self.window_num = max(1, config.get_int("quota.window.num"))
        self.window_ms = max(1, config.get_int("quota.window.size.seconds")) * 1000.0
        self.inter_broker_listener = config.get("inter.broker.listener.name")
        self.max_creation_rate = config.get_int("max.connection.creation.rate")
        self.listener_creation_rates: dict[str, int] = {}
        prefix, suffix = "listener.name.", ".max.connection.creation.rate"
        for key, value in config.props.items():
            if key.startswith(prefix) and key.endswith(suffix) and value.strip().isdigit():
                self.listener_creation_rates[key[len(prefix):-len(suffix)].upper()] = int(value)
        self._broker_rate = SampledRate(self.window_num, self.window_ms)
        self._listener_rates: dict[str, SampledRate] = {}
        self._next_accept_ms: dict[str, float] = {}
        # connection_creation_rate quotas per address (ClientQuotaRecords of entity ip)
        self.ip_quotas: dict[str | None, float] = {}
        self._ip_rates: dict[str, SampledRate] = {}
        #: connections closed for an address's connection_creation_rate; seconds the acceptor waited (metrics)
        self.ip_throttled = 0
        self.accept_throttle_s = 0.0

    # ---- connection creation rates (KIP-612) ----
    def apply_image(self, image: Any) -> None:
        """Take the ip entities' ``connection_creation_rate`` quotas (None: the default ip) and a dynamic
        ``max.connection.creation.rate`` from the committed metadata."""
        self.ip_quotas = {}
        for entity, values in image.client_quotas.items():
            if len(entity) == 1 and entity[0][0] == "ip" and "connection_creation_rate" in values:
                self.ip_quotas[entity[0][1]] = values["connection_creation_rate"]
        rate = self._config.get_int("max.connection.creation.rate")  # server.properties, then the dynamic layers
        for layer in (image.broker_configs(), image.broker_configs(self._config.node_id)):
            raw = layer.get("max.connection.creation.rate")
            if raw is not None and raw.strip().isdigit():
                rate = int(raw)
        self.max_creation_rate = rate

    def on_metadata_update(self, old: Any, new: Any, changes: Any = None) -> None:
        if changes is None or getattr(changes, "changed_client_quotas", None) or \
                getattr(changes, "changed_configs", None):
            self.apply_image(new)

    def _throttle_ms(self, rate: SampledRate, limit: float, now_ms: float) -> float:
        """Kafka's bounded throttle time: (rate - limit) / limit x window, at most one quota window."""
        from kbroker.server.client_quotas import throttle_time_ms

        return min(self.window_ms, throttle_time_ms(rate.measure(now_ms), limit, rate.window_size_ms(now_ms)))

    def accept_delay(self, listener: str) -> float:
        """Seconds until the acceptor of ``listener`` takes a connection that arrives now, as Kafka's acceptor
        does under ``max.connection.creation.rate`` (broker-wide, not on the inter-broker listener) and
        ``listener.name.<l>.max.connection.creation.rate``: each accepted connection is counted in the rates, and
        while a rate is above its limit the acceptor waits (Kafka's throttle time, at most one quota window)
        before it accepts the next one."""
        broker_wide = listener.upper() != self.inter_broker_listener.upper() and self.max_creation_rate < INT_MAX
        listener_limit = self.listener_creation_rates.get(listener.upper())
        if not broker_wide and listener_limit is None:
            return 0.0
        now_ms = time.monotonic() * 1000.0
        at_ms = max(now_ms, self._next_accept_ms.get(listener, 0.0))
        throttle = 0.0
        if broker_wide:
            self._broker_rate.record(1, at_ms)
            throttle = self._throttle_ms(self._broker_rate, self.max_creation_rate, at_ms)
        if listener_limit is not None:
            rate = self._listener_rates.setdefault(listener, SampledRate(self.window_num, self.window_ms))
            rate.record(1, at_ms)
            throttle = max(throttle, self._throttle_ms(rate, listener_limit, at_ms))
        self._next_accept_ms[listener] = at_ms + throttle
        self.accept_throttle_s += throttle / 1000.0
        return (at_ms - now_ms) / 1000.0

    def ip_rate_throttle(self, conn: KafkaConnection) -> float | None:
        """The address's ``connection_creation_rate`` quota (its own, else the default ip's): None when this
        connection is within it (it is counted), else the seconds after which it is closed (it is not counted)."""
        if not self.ip_quotas:
            return None
        ip = conn.peer[0] if conn.peer else ""
        limit = self.ip_quotas.get(ip, self.ip_quotas.get(None))
        if limit is None:
            return None
        now_ms = time.monotonic() * 1000.0
        rate = self._ip_rates.setdefault(ip, SampledRate(self.window_num, self.window_ms))
        rate.record(1, now_ms)
        throttle = self._throttle_ms(rate, limit, now_ms)
        if throttle <= 0:
            return None
        rate.unrecord(1, now_ms)
        self.ip_throttled += 1
        return throttle / 1000.0

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
