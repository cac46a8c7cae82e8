"""Delegation tokens in the metadata log (KIP-48): CreateDelegationToken, RenewDelegationToken and
ExpireDelegationToken planned against a metadata image, the expiry sweep, and the token's HMAC and SCRAM
credentials.

A token is a ``DelegationTokenRecord`` in ``__cluster_metadata`` (owner, requester and renewers as principal strings
``User:<name>``; issue, max and expiry timestamps in epoch ms), replayed into ``MetadataImage.delegation_tokens``;
``RemoveDelegationTokenRecord`` drops it. The token's secret is never written anywhere: it is
HMAC-SHA512(key = ``delegation.token.secret.key`` as UTF-8, message = token id as UTF-8), which every node with the
same secret key computes (Kafka's ``DelegationTokenManager.createHmac``). A client authenticates with the token over
SCRAM-SHA-256/512 with the ``tokenauth=true`` extension: user name the token id, password the HMAC in standard
base64; the node derives the SCRAM credential from that password (4096 iterations, a fresh salt) and the session's
principal is the token's owner.

Rules, as Kafka's controller applies them (``DelegationTokenControlManager``), in this order:

* every API: no ``delegation.token.secret.key``: DELEGATION_TOKEN_AUTH_DISABLED; ``metadata.version`` below
  3.6-IV2 (level 14): UNSUPPORTED_VERSION;
* create: a renewer whose principal type is not ``User``: INVALID_PRINCIPAL_TYPE. The owner is the request's owner
  when it names one, else the requester. ``max_timestamp`` = now + min(``delegation.token.max.lifetime.ms``, the
  request's max lifetime when > 0); ``expiry_timestamp`` = min(max_timestamp, now +
  ``delegation.token.expiry.time.ms``); the token id is a random Kafka Uuid string;
* renew / expire: the token is found by its HMAC (DELEGATION_TOKEN_NOT_FOUND); the caller must be its owner or
  a renewer, not merely its requester (DELEGATION_TOKEN_OWNER_MISMATCH); a token past its max or expiry timestamp:
  DELEGATION_TOKEN_EXPIRED. Renew: expiry = min(max_timestamp, now + min(``delegation.token.expiry.time.ms``, the
  request's period when > 0)). Expire: a negative period removes the token now (the answer's expiry is now),
  otherwise expiry = min(max_timestamp, now + period);
* the sweep (every ``delegation.token.expiry.check.interval.ms`` on the active controller) removes the tokens
  whose max or expiry timestamp has passed.

Nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac as hmac_lib
import os
from typing import Callable, Sequence

from kbroker.controller.image import DelegationToken, MetadataImage
from kbroker.controller.uuids import random_uuid, uuid_to_str
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import DelegationTokenRecord, RemoveDelegationTokenRecord

__all__ = [
    "DELEGATION_TOKEN_METADATA_VERSION",
    "TOKEN_ITERATIONS",
    "CreateResult",
    "expired_token_records",
    "plan_create_delegation_token",
    "plan_expire_delegation_token",
    "plan_renew_delegation_token",
    "token_for_hmac",
    "token_hmac",
    "token_password",
    "token_lookup",
    "token_scram_credential",
]

#: ``metadata.version`` 3.6-IV2, the first whose controller writes delegation token records
DELEGATION_TOKEN_METADATA_VERSION = 14
#: SCRAM iterations of a token's credential (Kafka's ``ScramMechanism.minIterations``)
TOKEN_ITERATIONS = 4096
USER_TYPE = "User"

#: (error code, owner, requester, issue ms, expiry ms, max ms, token id, hmac)
CreateResult = tuple[int, str, str, int, int, int, str, bytes]


def token_hmac(secret_key: str, token_id: str) -> bytes:
    """HMAC-SHA512 of ``token_id`` (UTF-8) keyed with ``secret_key`` (UTF-8): the token's 64-byte secret."""
    return hmac_lib.new(secret_key.encode("utf-8"), token_id.encode("utf-8"), hashlib.sha512).digest()


def token_password(hmac: bytes) -> str:
    """The SCRAM password of a token: its HMAC in standard base64 with padding."""
    return base64.b64encode(hmac).decode("ascii")


def token_scram_credential(secret_key: str, token_id: str, mechanism: int) -> tuple[bytes, bytes, bytes, int]:
    """``(salt, stored_key, server_key, iterations)`` for a SCRAM exchange with token ``token_id`` (``mechanism``
    1 SCRAM-SHA-256 or 2 SCRAM-SHA-512): derived from :func:`token_password` with a fresh 32-byte salt."""
    from kbroker.controller.scram_control import salted_password, scram_keys

    salt = os.urandom(32)
    salted = salted_password(mechanism, token_password(token_hmac(secret_key, token_id)), salt, TOKEN_ITERATIONS)
    stored_key, server_key = scram_keys(mechanism, salted)
    return salt, stored_key, server_key, TOKEN_ITERATIONS


def token_for_hmac(image: MetadataImage, secret_key: str, hmac: bytes) -> DelegationToken | None:
    """The token of ``image`` whose HMAC is ``hmac`` (compared in constant time), or None."""
    for token in image.delegation_tokens.values():
        if hmac_lib.compare_digest(token_hmac(secret_key, token.token_id), bytes(hmac)):
            return token
    return None


def _record(token: DelegationToken, expiry_timestamp: int) -> DelegationTokenRecord:
    return DelegationTokenRecord(owner=token.owner, requester=token.requester, renewers=list(token.renewers),
                                 issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp,
                                 expiration_timestamp=expiry_timestamp, token_id=token.token_id)


def _common_error(image: MetadataImage, secret_key: str) -> int | None:
    if not secret_key:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    if image.metadata_version < DELEGATION_TOKEN_METADATA_VERSION:
        return ErrorCode.UNSUPPORTED_VERSION
    return None


def plan_create_delegation_token(
    image: MetadataImage, now_ms: int, secret_key: str, max_lifetime_config_ms: int, expiry_time_config_ms: int,
    requester: str, owner: str | None, renewers: Sequence[tuple[str, str]], max_lifetime_ms: int,
) -> tuple[list[DelegationTokenRecord], CreateResult]:
    """CreateDelegationToken for ``requester`` (principal string) on behalf of ``owner`` (None or empty: the
    requester); ``renewers`` are ``(principal type, name)``. Returns the record to commit (none on an error) and
    the answer; the rules are in the module docstring."""
    owner = owner or requester
    failed = (owner, requester, -1, -1, -1, "", b"")
    code = _common_error(image, secret_key)
    if code is None and any(t != USER_TYPE for t, _ in renewers):
        code = ErrorCode.INVALID_PRINCIPAL_TYPE
    if code is not None:
        return [], (code, *failed)
    lifetime = min(max_lifetime_config_ms, max_lifetime_ms) if max_lifetime_ms > 0 else max_lifetime_config_ms
    max_timestamp = now_ms + lifetime
    expiry = min(max_timestamp, now_ms + expiry_time_config_ms)
    token_id = uuid_to_str(random_uuid())
    token = DelegationToken(token_id=token_id, owner=owner, requester=requester,
                            renewers=tuple(f"{t}:{n}" for t, n in renewers), issue_timestamp=now_ms,
                            max_timestamp=max_timestamp, expiry_timestamp=expiry)
    return [_record(token, expiry)], (ErrorCode.NONE, owner, requester, now_ms, expiry, max_timestamp, token_id,
                                      token_hmac(secret_key, token_id))


def _find(image: MetadataImage, now_ms: int, secret_key: str, principal: str,
          hmac: bytes) -> tuple[int, DelegationToken | None]:
    code = _common_error(image, secret_key)
    if code is not None:
        return code, None
    token = token_for_hmac(image, secret_key, hmac)
    if token is None:
        return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, None
    if not token.owner_or_renewer(principal):
        return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, None
    if token.max_timestamp < now_ms or token.expiry_timestamp < now_ms:
        return ErrorCode.DELEGATION_TOKEN_EXPIRED, None
    return ErrorCode.NONE, token


def plan_renew_delegation_token(image: MetadataImage, now_ms: int, secret_key: str, expiry_time_config_ms: int,
                                principal: str, hmac: bytes, renew_period_ms: int
                                ) -> tuple[list[DelegationTokenRecord], int, int]:
    """RenewDelegationToken by ``principal`` -> (records, error code, new expiry timestamp ms; 0 on an error, the
    response's default, as Kafka's controller answers)."""
    code, token = _find(image, now_ms, secret_key, principal, hmac)
    if token is None:
        return [], code, 0
    period = min(expiry_time_config_ms, renew_period_ms) if renew_period_ms > 0 else expiry_time_config_ms
    expiry = min(token.max_timestamp, now_ms + period)
    return [_record(token, expiry)], ErrorCode.NONE, expiry


def plan_expire_delegation_token(image: MetadataImage, now_ms: int, secret_key: str, principal: str, hmac: bytes,
                                 expiry_time_period_ms: int
                                 ) -> tuple[list[DelegationTokenRecord | RemoveDelegationTokenRecord], int, int]:
    """ExpireDelegationToken by ``principal`` -> (records, error code, new expiry timestamp ms; 0 on an error)."""
    code, token = _find(image, now_ms, secret_key, principal, hmac)
    if token is None:
        return [], code, 0
    if expiry_time_period_ms < 0:
        return [RemoveDelegationTokenRecord(token_id=token.token_id)], ErrorCode.NONE, now_ms
    expiry = min(token.max_timestamp, now_ms + expiry_time_period_ms)
    return [_record(token, expiry)], ErrorCode.NONE, expiry


def expired_token_records(image: MetadataImage, now_ms: int) -> list[RemoveDelegationTokenRecord]:
    """The removals of the tokens of ``image`` whose max or expiry timestamp is before ``now_ms`` (by id)."""
    return [RemoveDelegationTokenRecord(token_id=token_id) for token_id, t in sorted(image.delegation_tokens.items())
            if t.max_timestamp < now_ms or t.expiry_timestamp < now_ms]


def token_lookup(image_of: Callable[[], MetadataImage], secret_key: str
                 ) -> Callable[[str, int], tuple[tuple[bytes, bytes, bytes, int], str, int] | None]:
    """The SCRAM server's lookup of a delegation token (``kbroker.security.sasl.TokenLookup``): (token id,
    mechanism code) -> (credential, the owner's name, expiry epoch ms) from the image ``image_of()`` returns; None
    for a token it does not hold or when ``secret_key`` is empty (tokens disabled)."""

    def lookup(token_id: str, mechanism: int) -> tuple[tuple[bytes, bytes, bytes, int], str, int] | None:
        token = image_of().delegation_tokens.get(token_id)
        if token is None or not secret_key:
            return None
        owner = token.owner.split(":", 1)[1] if ":" in token.owner else token.owner
        return token_scram_credential(secret_key, token_id, mechanism), owner, token.expiry_timestamp

    return lookup
