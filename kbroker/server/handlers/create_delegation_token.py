"""CreateDelegationToken (API key 38), versions 1-3 (KIP-48; v3 KIP-373: a token for another owner).

Behavior: on a connection that may ask for tokens (``kbroker.server.delegation_tokens.allow_token_requests``;
otherwise DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) the active controller creates a token and answers its id and
HMAC (rules in ``kbroker.controller.delegation_token_control``: DELEGATION_TOKEN_AUTH_DISABLED without
``delegation.token.secret.key``, INVALID_PRINCIPAL_TYPE for a renewer that is not a ``User``, lifetimes from
``delegation.token.max.lifetime.ms`` / ``delegation.token.expiry.time.ms`` and the request's ``max_lifetime_ms``
when > 0). The owner is ``owner_principal_*`` (v3) when it names one, else the caller; a token for another owner
needs CREATE_TOKENS on the USER resource named by the owner's principal (``User:alice``), else
DELEGATION_TOKEN_AUTHORIZATION_FAILED. An error answer carries the owner and requester, timestamps -1 and no
HMAC. A node that is not the active controller forwards the request with the caller's principal; the answer
comes once the token's record is committed.
Version notes: v2 is flexible; v3 adds the owner to the request and the requester to the response.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import CreateDelegationTokenRequest, CreateDelegationTokenResponse as R

API_KEY = ApiKey.CREATE_DELEGATION_TOKEN
VERSIONS = range(1, 4)

CREATE_TOKENS = 13  # AclOperation.CREATE_TOKENS
USER = 7  # ResourceType.USER


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


async def handle(ctx, request: CreateDelegationTokenRequest) -> R:
    from kbroker.server import delegation_tokens as dt
    from kbroker.server.handlers import common

    forwarded = dt.forwarded_principal(ctx)
    requester = forwarded or common.principal_of(ctx)
    named_owner = f"{request.owner_principal_type}:{request.owner_principal_name}" \
        if request.owner_principal_name else None
    owner = named_owner or requester

    def response(code: int, owner: str, requester: str, issue: int = -1, expiry: int = -1, max_ts: int = -1,
                 token_id: str = "", hmac: bytes = b"") -> R:
        (otype, oname), (rtype, rname) = _split(owner), _split(requester)
        return R(error_code=code, principal_type=otype, principal_name=oname, token_requester_principal_type=rtype,
                 token_requester_principal_name=rname, issue_timestamp_ms=issue, expiry_timestamp_ms=expiry,
                 max_timestamp_ms=max_ts, token_id=token_id, hmac=hmac)

    if forwarded is None:
        if not dt.allow_token_requests(ctx):
            return response(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
        if owner != requester and not common.authorize(ctx, CREATE_TOKENS, USER, owner):
            return response(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
        if any(r.principal_type != "User" for r in request.renewers):
            return response(ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester)
    renewers = [(r.principal_type, r.principal_name) for r in request.renewers]

    def write() -> R:
        return response(*ctx.broker.controller.create_delegation_token(requester, named_owner, renewers,
                                                                       request.max_lifetime_ms))

    return await dt.on_controller(ctx, request, requester, write, lambda code: response(code, owner, requester))
