"""SaslHandshake (API key 17), versions 0-1 (KIP-43; v1 KIP-152).

Behavior: on a SASL listener (SASL_PLAINTEXT, SASL_SSL) before authentication, the client names a mechanism:
NONE and the exchange starts when it is one of the listener's ``sasl.enabled.mechanisms``, else
UNSUPPORTED_SASL_MECHANISM; both answers list the enabled mechanisms. After a v0 handshake the mechanism's
tokens come as bare size-prefixed frames (the network layer handles them), after v1 in SaslAuthenticate
requests. On an authenticated connection a v1 handshake starts a re-authentication (KIP-368, the same
mechanism). On a listener without SASL, and for a v0 handshake once authenticated, the answer is
ILLEGAL_SASL_STATE, as Kafka's. (:mod:`kbroker.security.sasl` has the state machine.)
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import SaslHandshakeRequest, SaslHandshakeResponse
from kbroker.security.sasl import SaslState

API_KEY = ApiKey.SASL_HANDSHAKE
VERSIONS = range(0, 2)


async def handle(ctx, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    sasl = getattr(ctx.connection, "sasl", None)
    # on an authenticated connection a v1 handshake starts a re-authentication (KIP-368)
    if (sasl is None or sasl.state not in (SaslState.HANDSHAKE, SaslState.AUTHENTICATED)
            or (sasl.state is SaslState.AUTHENTICATED and ctx.api_version == 0)):
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanisms = list(sasl.config.mechanisms)
    if not sasl.handshake(request.mechanism, ctx.api_version):
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)
