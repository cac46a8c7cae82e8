"""Requests from this node to another kbroker node (controller quorum, later replica fetchers).

:class:`NodeChannel` is one TCP connection to one peer, opened on first use and re-opened after a failure
with a backoff: requests are pipelined and their responses matched by correlation id (Kafka's
``NetworkClient`` does the same). Every request has a deadline; a request that cannot be sent, or whose answer
does not come in time, fails with :class:`NodeRequestError` and the connection is dropped, so a peer that was
SIGSTOPped or cut off does not hold anything but its own requests.

The channel does not negotiate versions: kbroker nodes of one cluster speak the versions that
:mod:`kbroker.controller.raft.wire` names.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from typing import Any

from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.server.task_util import cancel_and_wait

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class NodeRequestError(Exception):
    """A request to a peer failed: not connected, timed out, connection lost or a malformed answer.

    ``peer_gone`` is True when the peer's host said so itself (connection refused, or the connection closed or
    reset by the other end): the process is not there, as after kill -9, rather than slow or cut off."""

    def __init__(self, message: str, peer_gone: bool = False) -> None:
        super().__init__(message)
        self.peer_gone = peer_gone


class NodeChannel:
    """Requests to one peer at ``host:port``. ``client_id`` names this node in the peer's logs; ``ssl_context``
    (the peer's listener is a TLS one) wraps the connection, the peer's certificate checked against ``host``;
    ``sasl`` (a SASL listener: :class:`~kbroker.security.sasl.SaslClientConfig`) authenticates each new
    connection with SaslHandshake v1 and SaslAuthenticate before any request goes out."""

    def __init__(self, node_id: int, host: str, port: int, client_id: str,
                 connect_timeout_s: float = 1.0, reconnect_backoff_s: float = 0.05,
                 ssl_context: ssl.SSLContext | None = None, sasl: Any = None) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_backoff_s = reconnect_backoff_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._correlation = 0
        self._next_connect = 0.0
        self._closed = False

    async def request(self, api_key: int, version: int, msg: Any, timeout_s: float) -> Any:
        """Send ``msg`` and return the decoded response; raises :class:`NodeRequestError`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self._ensure_connected(deadline)
        writer = self._writer
        if writer is None:
            raise NodeRequestError(f"not connected to node {self.node_id} at {self.host}:{self.port}")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        corr = self._correlation
        body = encode_request_header(api_key, version, corr, self.client_id) + codec.encode(msg, version)
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending[corr] = (api_key, version, fut)
        try:
            writer.write(_SIZE.pack(len(body)) + body)
            return await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            self._drop(f"no answer from node {self.node_id} within {timeout_s:g} s")
            raise NodeRequestError(f"request to node {self.node_id} timed out") from None
        finally:
            self._pending.pop(corr, None)

    async def close(self) -> None:
        self._closed = True
        self._drop("channel closed")
        await cancel_and_wait(self._reader_task)

    # ------------------------------------------------------------------ connection
    async def _ensure_connected(self, deadline: float) -> None:
        if self._writer is not None:
            return
        async with self._connecting:
            if self._writer is not None or self._closed:
                return
            loop = asyncio.get_running_loop()
            if loop.time() < self._next_connect:
                raise NodeRequestError(f"node {self.node_id} unreachable (backing off)")
            try:
                tls: dict[str, Any] = {}
                if self.ssl_context is not None:
                    tls = {"ssl": self.ssl_context, "server_hostname": self.host}
                # a TLS handshake and a SASL exchange take a few round trips and some CPU more
                slow = 3 if tls or self.sasl is not None else 1
                limit = max(0.001, min(self.connect_timeout_s * slow, deadline - loop.time()))
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port, **tls), limit)
                if self.sasl is not None:
                    try:
                        await asyncio.wait_for(self._authenticate(reader, writer), limit)
                    except BaseException:
                        writer.close()
                        raise
            except NodeRequestError:
                self._next_connect = loop.time() + max(self.reconnect_backoff_s, 1.0)
                raise
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                self._next_connect = loop.time() + self.reconnect_backoff_s
                raise NodeRequestError(f"cannot connect to node {self.node_id} at {self.host}:{self.port}: "
                                       f"{exc or type(exc).__name__}",
                                       peer_gone=isinstance(exc, ConnectionRefusedError)) from None
            self._reader, self._writer = reader, writer
            self._reader_task = loop.create_task(self._read_loop(reader))

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The SASL exchange on a new connection (:func:`kbroker.security.sasl.client_requests`);
        :class:`NodeRequestError` when refused."""
        from kbroker.security.sasl import AuthenticationFailed, client_requests

        steps = client_requests(self.sasl)
        corr = -1
        try:
            request, version = next(steps)
            while True:
                api_key = type(request).API_KEY
                body = encode_request_header(api_key, version, corr, self.client_id) + codec.encode(request, version)
                corr -= 1
                writer.write(_SIZE.pack(len(body)) + body)
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                pos = codec._skip_tagged(frame, 4) if response_header_version(api_key, version) >= 1 else 4
                request, version = steps.send(codec.decode(RESPONSES[api_key], frame, version, pos)[0])
        except StopIteration:
            return
        except AuthenticationFailed as exc:
            raise NodeRequestError(f"authentication to node {self.node_id} failed: {exc}") from None

    def _drop(self, why: str, peer_gone: bool = False) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            log.debug("connection to node %s dropped: %s", self.node_id, why)
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()
        self._reader_task = None
        pending, self._pending = self._pending, {}
        for _, _, fut in pending.values():
            if not fut.done():
                fut.set_exception(NodeRequestError(why, peer_gone))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if size < 4 or size > MAX_RESPONSE_BYTES:
                    raise NodeRequestError(f"malformed response size {size}")
                frame = await reader.readexactly(size)
                (corr,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.get(corr)
                if entry is None:
                    continue  # the request timed out meanwhile
                api_key, version, fut = entry
                pos = 4
                if response_header_version(api_key, version) >= 1:
                    pos = codec._skip_tagged(frame, pos)
                resp, _ = codec.decode(RESPONSES[api_key], frame, version, pos)
                if not fut.done():
                    fut.set_result(resp)
        except asyncio.CancelledError:
            raise
        except (OSError, asyncio.IncompleteReadError, NodeRequestError, codec.DecodeError) as exc:
            self._drop(f"connection to node {self.node_id} lost: {exc or type(exc).__name__}",
                       peer_gone=isinstance(exc, (ConnectionResetError, asyncio.IncompleteReadError)))


class BrokerChannels:
    """Channels to other brokers on their ``listener`` (``inter.broker.listener.name``), at the address their
    registration in the metadata image names: one per (node, host, port), kept open and reused. ``ssl_context``
    for a TLS listener (:func:`kbroker.security.listener.client_ssl_context`)."""

    def __init__(self, client_id: str, listener: str, ssl_context: ssl.SSLContext | None = None,
                 sasl: Any = None) -> None:
        self.client_id = client_id
        self.listener = listener
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._channels: dict[tuple[int, str, int], NodeChannel] = {}

    def get(self, image: Any, node_id: int) -> NodeChannel | None:
        """The channel to broker ``node_id``; None when it is not registered, fenced or has no listener."""
        reg = image.brokers.get(node_id)
        ep = (reg.endpoint(self.listener) or (reg.endpoints[0] if reg.endpoints else None)) if reg is not None else None
        if ep is None or reg.fenced:
            return None
        key = (node_id, ep.host, ep.port)
        ch = self._channels.get(key)
        if ch is None:
            ch = self._channels[key] = NodeChannel(node_id, ep.host, ep.port, self.client_id,
                                                   ssl_context=self.ssl_context, sasl=self.sasl)
        return ch

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
