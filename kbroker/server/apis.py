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
        if mod is not None and controller_only(mod) and conn.listener_name.upper() not in self.controller_listeners:
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
        response = await mod.handle(ctx, request)
        if response is None:
            return None
        return encode_response(api_key, api_version, correlation_id, response)

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
