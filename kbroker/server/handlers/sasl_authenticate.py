"""SaslAuthenticate (API key 36), versions 0-2 (KIP-152; v1 SessionLifetimeMs, KIP-368; v2 flexible).

Behavior: after a v1 SaslHandshake, each request carries one token of the chosen mechanism and the answer the
server's next token. When the exchange completes the connection is authenticated as ``User:<name>``. Wrong
credentials (or a malformed token) are answered, after ``connection.failed.authentication.delay.ms``, with
SASL_AUTHENTICATION_FAILED and a message, and the connection is then closed, as Kafka does. Outside an exchange
(no handshake, a listener without SASL) the answer is ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import asyncio

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse
from kbroker.security.sasl import AuthenticationFailed, SaslState

API_KEY = ApiKey.SASL_AUTHENTICATE
VERSIONS = range(0, 3)


async def handle(ctx, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    conn = ctx.connection
    sasl = getattr(conn, "sasl", None)
    if sasl is None or sasl.state is not SaslState.AUTHENTICATE or sasl.raw_tokens:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="Unexpected SaslAuthenticate request", auth_bytes=b"")
    try:
        token = sasl.authenticate(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        conn.log_failed_authentication(exc)
        await asyncio.sleep(sasl.config.failed_delay_s)
        conn.close_after_response = True
        return SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                        auth_bytes=b"")
    resp = SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=token)
    if sasl.authenticated:
        conn.authenticated(sasl.principal)
        resp.session_lifetime_ms = conn.session_lifetime_ms()
    return resp
