"""SaslHandshake (API key 17), versions 0-1 (KIP-43; v1 KIP-152).

Behavior: on a SASL listener (SASL_PLAINTEXT, SASL_SSL) before authentication, the client names a mechanism:
NONE and the exchange starts when it is one of the listener's ``sasl.enabled.mechanisms``, else
UNSUPPORTED_SASL_MECHANISM and the connection is closed after the answer (a failed authentication, as Kafka's);
both answers list the enabled mechanisms. After a v0 handshake the mechanism's tokens come as bare size-prefixed
frames (the network layer handles them), after v1 in SaslAuthenticate requests. On an authenticated connection a
v1 handshake starts a re-authentication (KIP-368, the same mechanism) when sessions expire
(``connections.max.reauth.ms`` > 0); otherwise, as on a listener without SASL and for a v0 handshake once
authenticated, the answer is ILLEGAL_SASL_STATE and the connection stays open, as Kafka's.
(:mod:`kbroker.security.sasl` has the state machine.)
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
    # on an authenticated connection a v1 handshake starts a re-authentication (KIP-368), but only when sessions
    # expire (connections.max.reauth.ms > 0): otherwise Kafka answers it as any stray handshake, and the
    # connection stays open
    reauth = sasl is not None and sasl.state is SaslState.AUTHENTICATED
    if (sasl is None or sasl.state not in (SaslState.HANDSHAKE, SaslState.AUTHENTICATED)
            or (reauth and (ctx.api_version == 0 or getattr(ctx.connection, "session_expires_at", None) is None))):
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    mechanisms = list(sasl.config.mechanisms)
    if not sasl.handshake(request.mechanism, ctx.api_version):
        # a failed authentication: the answer names the enabled mechanisms, then the connection is closed
        ctx.connection.close_after_response = True
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)
