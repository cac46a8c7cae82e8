"""Request dispatch: API key -> handler module, version checks, response encoding.

Every module in :mod:`kbroker.server.handlers` declares ``API_KEY``, ``VERSIONS`` (a ``range`` of the
versions it handles) and ``async def handle(ctx, request)``; it may also declare ``ADVERTISED`` when the
range advertised in ApiVersions differs (Produce: 0-13 advertised, 3-13 accepted; KAFKA-18659).
ApiVersions answers from this table, so the advertised ranges cannot drift from the handlers.

Behaviour for bad requests follows the Apache broker (protocol guide §1.1, §1.6):

* unknown API key, or a version outside ``VERSIONS``: close the connection without a response;
* ApiVersions at a version above ours: a v0-format response with UNSUPPORTED_VERSION listing our range;
* a request body that cannot be parsed: close the connection.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS, RESPONSES, ApiKey
from kbroker.protocol.codec import DecodeError
from kbroker.protocol.headers import RequestHeader, decode_request_header, encode_response_header, peek_key_version, response_header_version
from kbroker.server.network import CloseConnection

if TYPE_CHECKING:
    from kbroker.server.broker import Broker
    from kbroker.server.network import KafkaConnection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: Broker
    connection: KafkaConnection
    header: RequestHeader
    received_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: throttle time of the controller mutation quota (KIP-599), set by CreateTopics / CreatePartitions /
    #: DeleteTopics (:func:`kbroker.server.handlers.common.mutation_quota`)
    mutation_throttle_ms: int = 0

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def listener_name(self) -> str:
        return self.connection.listener_name


def load_handlers() -> dict[int, ModuleType]:
    """Import every handler module and index it by API key."""
    from kbroker.server import handlers

    table: dict[int, ModuleType] = {}
    for info in pkgutil.iter_modules(handlers.__path__):
        mod = importlib.import_module(f"{handlers.__name__}.{info.name}")
        key = getattr(mod, "API_KEY", None)
        if key is None:
            continue
        if key in table:
            raise RuntimeError(f"two handlers for API key {key}: {table[key].__name__}, {mod.__name__}")
        table[int(key)] = mod
    return table


def advertised_range(mod: ModuleType) -> range:
    return getattr(mod, "ADVERTISED", mod.VERSIONS)


def controller_only(mod: ModuleType) -> bool:
    """Handlers of the controller quorum's own APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, BrokerRegistration)
    declare ``LISTENERS = ("controller",)``: they are answered and advertised only on the listeners named in
    ``controller.listener.names``, as Kafka's controllers do; clients on a broker listener never see them."""
    return tuple(getattr(mod, "LISTENERS", ("broker",))) == ("controller",)


class Apis:
    """The handler table and the code that runs one request frame through it."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.handlers = load_handlers()
        self._controller_only = frozenset(k for k, m in self.handlers.items() if controller_only(m))
        self.request_counts: dict[int, int] = {}
        self.controller_listeners = {n.upper() for n in broker.config.get_list("controller.listener.names")}

    def supported_versions(self, listener: str | None = None) -> list[tuple[int, int, int]]:
        """(api_key, min, max) rows for ApiVersions on ``listener``, sorted by key (controller-only APIs only
        on a controller listener)."""
        on_controller = listener is not None and listener.upper() in self.controller_listeners
        rows = []
        for key, mod in sorted(self.handlers.items()):
            if controller_only(mod) and not on_controller:
                continue
            rng = advertised_range(mod)
            rows.append((key, rng.start, rng.stop - 1))
        return rows

    async def handle_frame(self, conn: KafkaConnection, frame: bytes) -> list[Any] | None:
        """Run one request frame; returns response chunks, or None when no response is due."""
        try:
            api_key, api_version, correlation_id = peek_key_version(frame)
        except DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        sasl = getattr(conn, "sasl", None)
        if sasl is not None:
            if not sasl.allows(api_key):
                raise CloseConnection(f"unexpected {_api_name(api_key)} request during SASL authentication")
            if not sasl.authenticated and len(frame) > sasl.config.max_receive_size:
                raise CloseConnection(f"a request of {len(frame)} bytes before authentication is larger than "
                                      f"sasl.server.max.receive.size")
            if (conn.session_expires_at is not None and time.monotonic() > conn.session_expires_at
                    and api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)):
                raise CloseConnection("the SASL session expired (connections.max.reauth.ms) without "
                                      "re-authentication")
        mod = self.handlers.get(api_key)
        if api_key == ApiKey.API_VERSIONS and mod is not None and api_version not in mod.VERSIONS:
            if api_version > mod.VERSIONS.stop - 1:
                return self._api_versions_fallback(correlation_id)
        controller_api = api_key in self._controller_only
        if controller_api and conn.listener_name.upper() not in self.controller_listeners:
            mod = None  # a controller API on a broker listener: unknown here, as in Kafka
        if mod is None:
            raise CloseConnection(f"unknown API key {api_key}")
        if api_version not in mod.VERSIONS:
            raise CloseConnection(f"unsupported version {api_version} of API {api_key}")
        try:
            header = decode_request_header(frame)
            request, end = codec.decode(REQUESTS[api_key], frame, api_version, header.body_offset)
        except DecodeError as exc:
            raise CloseConnection(f"cannot parse {ApiKey(api_key).name} v{api_version}: {exc}") from None
        self.request_counts[api_key] = self.request_counts.get(api_key, 0) + 1
        ctx = RequestContext(self.broker, conn, header)
        quotas = self.broker.client_quotas
        if quotas.active and not controller_api and not quotas.exempt(ctx, api_key):
            return await self._handle_with_quotas(ctx, mod, request, correlation_id, len(frame))
        response = await mod.handle(ctx, request)
        if response is None:
            return None
        return encode_response(api_key, api_version, correlation_id, response)

    async def _handle_with_quotas(self, ctx: RequestContext, mod: ModuleType, request: Any, correlation_id: int,
                                  request_size: int) -> list[Any] | None:
        """Run a request counted against the client's quotas (``kbroker.server.client_quotas``): Produce bytes,
        consumer Fetch bytes (a fetch over the quota is answered without records), the event loop's time on it;
        a throttle time sets ``throttle_time_ms`` and mutes the connection (:meth:`KafkaConnection.throttle`)."""
        from kbroker.server import client_quotas as cq

        quotas = self.broker.client_quotas
        conn = ctx.connection
        api_key, api_version = ctx.header.api_key, ctx.api_version
        principal, client_id = conn.principal, ctx.client_id
        timed = _Timed(mod.handle(ctx, request))
        response = await timed
        started = time.perf_counter()
        throttle_ms = ctx.mutation_throttle_ms
        if api_key == ApiKey.PRODUCE:
            throttle_ms = max(throttle_ms, quotas.record(cq.PRODUCE, principal, client_id, request_size))
        chunks = encode_response(api_key, api_version, correlation_id, response) if response is not None else None
        if chunks is not None and api_key == ApiKey.FETCH and quotas.has(cq.FETCH):
            replica_id = request.replica_state.replica_id if api_version >= 15 else request.replica_id
            if replica_id < 0:
                size = sum(len(c) for c in chunks)
                fetch_ms = quotas.record(cq.FETCH, principal, client_id, size)
                if fetch_ms:
                    quotas.unrecord(cq.FETCH, principal, client_id, size)  # the records are not sent
                    _strip_records(response)
                    throttle_ms = max(throttle_ms, fetch_ms)
        busy_s = timed.busy + time.perf_counter() - started
        throttle_ms = max(throttle_ms, quotas.record(cq.REQUEST, principal, client_id, busy_s * 100.0))
        if throttle_ms <= 0:
            return chunks
        if response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle_ms)
            chunks = encode_response(api_key, api_version, correlation_id, response)
        conn.throttle(throttle_ms / 1000.0, client_side=cq.client_throttles(api_key, api_version))
        return chunks

    def _api_versions_fallback(self, correlation_id: int) -> list[Any]:
        """KIP-511: answer an ApiVersions request newer than ours with a v0 body and UNSUPPORTED_VERSION."""
        from kbroker.protocol.errors import ErrorCode
        from kbroker.protocol.messages import ApiVersionsResponse

        resp = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                      for k, lo, hi in self.supported_versions()],
        )
        return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, resp)


class _Timed:
    """Await a coroutine, adding up the time its steps run on the event loop (``busy``, seconds): the time a
    request took to handle, without the time it waited (a long-polling fetch, an acks=all produce)."""

    __slots__ = ("coro", "busy")

    def __init__(self, coro: Any) -> None:
        self.coro = coro
        self.busy = 0.0

    def __await__(self) -> Any:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                self.busy += time.perf_counter() - started
                return stop.value
            self.busy += time.perf_counter() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation and the like go on into the coroutine
                value, error = None, exc


def _strip_records(response: Any) -> None:
    """A Fetch response without its records (Kafka answers a consumer over its quota so)."""
    for topic in response.responses:
        for partition in topic.partitions:
            partition.records = b""


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> list[Any]:
    """Response chunks: header + body bytes, with file regions kept as separate chunks."""
    out = bytearray(encode_response_header(correlation_id, response_header_version(api_key, api_version)))
    chunks: list[Any] = []
    codec.encode_into(response, api_version, out, chunks)
    if out:
        chunks.append(bytes(out))
    assert type(response) is RESPONSES[api_key]
    return chunks
