"""DescribeDelegationToken (API key 41), versions 1-3 (KIP-48; v3 KIP-373 adds the requester).

Behavior: answered from this node's metadata image (``MetadataImage.delegation_tokens``), as Kafka's brokers
answer it from their token cache. DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a connection that may not ask for tokens
(``kbroker.server.delegation_tokens.allow_token_requests``), DELEGATION_TOKEN_AUTH_DISABLED without
``delegation.token.secret.key``. ``owners`` empty: no tokens; null: every token the caller may see; otherwise the
tokens owned or renewable by one of the owners named. The caller sees a token it owns, may renew or requested, one it has DESCRIBE on (DELEGATION_TOKEN resource named by the token id), and one whose owner it has
DESCRIBE_TOKENS on (USER resource ``User:<name>``). Each token comes with its HMAC, timestamps and renewers, by
issue time. Tokens expired but not yet swept are still listed, as in Kafka.
Version notes: v2 is flexible; v3 adds the token requester.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeDelegationTokenRequest, DescribeDelegationTokenResponse as R

API_KEY = ApiKey.DESCRIBE_DELEGATION_TOKEN
VERSIONS = range(1, 4)

DESCRIBE, DESCRIBE_TOKENS = 8, 14  # AclOperation
DELEGATION_TOKEN, USER = 6, 7  # ResourceType


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


async def handle(ctx, request: DescribeDelegationTokenRequest) -> R:
    from kbroker.controller.delegation_token_control import token_hmac
    from kbroker.server import delegation_tokens as dt
    from kbroker.server.handlers import common

    if not dt.allow_token_requests(ctx):
        return R(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    secret = dt.secret_key(ctx)
    if not secret:
        return R(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    if request.owners is not None and not request.owners:
        return R()
    owners = None if request.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    caller = common.principal_of(ctx)
    resp = R()
    tokens = sorted(ctx.broker.controller.image.delegation_tokens.values(),
                    key=lambda t: (t.issue_timestamp, t.token_id))
    for t in tokens:
        if owners is not None and not any(t.owner_or_renewer(o) for o in owners):
            continue
        if not (t.owner_or_renewer(caller) or t.requester == caller
                or common.authorize(ctx, DESCRIBE, DELEGATION_TOKEN, t.token_id, log_denied=False)
                or common.authorize(ctx, DESCRIBE_TOKENS, USER, t.owner, log_denied=False)):
            continue
        (otype, oname), (rtype, rname) = _split(t.owner), _split(t.requester)
        resp.tokens.append(R.DescribedDelegationToken(
            principal_type=otype, principal_name=oname, token_requester_principal_type=rtype,
            token_requester_principal_name=rname, issue_timestamp=t.issue_timestamp,
            expiry_timestamp=t.expiry_timestamp, max_timestamp=t.max_timestamp, token_id=t.token_id,
            hmac=token_hmac(secret, t.token_id),
            renewers=[R.DescribedDelegationTokenRenewer(principal_type=k, principal_name=n)
                      for k, n in map(_split, t.renewers)]))
    return resp
