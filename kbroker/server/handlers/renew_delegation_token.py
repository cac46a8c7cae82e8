"""RenewDelegationToken (API key 39), versions 1-2 (KIP-48).

Behavior: on a connection that may ask for tokens (``kbroker.server.delegation_tokens.allow_token_requests``;
otherwise DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) the active controller finds the token by its HMAC and moves its
expiry to min(max timestamp, now + min(``delegation.token.expiry.time.ms``, ``renew_period_ms`` when > 0)) and
answers it. Errors (``kbroker.controller.delegation_token_control``): DELEGATION_TOKEN_AUTH_DISABLED,
DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_OWNER_MISMATCH (the caller is neither the owner nor a renewer),
DELEGATION_TOKEN_EXPIRED; the controller's error answers expiry 0, the
refusal of a connection -1, as Kafka's. A node that is not the active controller forwards the request
with the caller's principal; the answer comes once the new expiry is committed.
Version notes: v2 is flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import RenewDelegationTokenRequest, RenewDelegationTokenResponse as R

API_KEY = ApiKey.RENEW_DELEGATION_TOKEN
VERSIONS = range(1, 3)


async def handle(ctx, request: RenewDelegationTokenRequest) -> R:
    from kbroker.server.delegation_tokens import change_expiry

    return await change_expiry(ctx, request, R, lambda controller, principal, hmac: controller.renew_delegation_token(
        principal, hmac, request.renew_period_ms))
