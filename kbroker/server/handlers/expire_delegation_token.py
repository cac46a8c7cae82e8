"""ExpireDelegationToken (API key 40), versions 1-2 (KIP-48).

Behavior: on a connection that may ask for tokens (``kbroker.server.delegation_tokens.allow_token_requests``;
otherwise DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) the active controller finds the token by its HMAC; a negative
``expiry_time_period_ms`` removes it at once (RemoveDelegationTokenRecord; the answer's expiry is now), otherwise
its expiry becomes min(max timestamp, now + period) and the controller's sweep removes it once passed. Errors
(``kbroker.controller.delegation_token_control``): DELEGATION_TOKEN_AUTH_DISABLED, DELEGATION_TOKEN_NOT_FOUND,
DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_EXPIRED; the controller's error answers expiry 0, the
refusal of a connection -1, as Kafka's. A node that is not the active
controller forwards the request with the caller's principal; the answer comes once the change is committed.
Version notes: v2 is flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ExpireDelegationTokenRequest, ExpireDelegationTokenResponse as R

API_KEY = ApiKey.EXPIRE_DELEGATION_TOKEN
VERSIONS = range(1, 3)


async def handle(ctx, request: ExpireDelegationTokenRequest) -> R:
    from kbroker.server.delegation_tokens import change_expiry

    return await change_expiry(ctx, request, R, lambda controller, principal, hmac: controller.expire_delegation_token(
        principal, hmac, request.expiry_time_period_ms))
