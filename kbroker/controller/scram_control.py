"""SCRAM credentials in the metadata log (KIP-554): AlterUserScramCredentials planned against a metadata image,
DescribeUserScramCredentials answered from one, and the credential arithmetic of RFC 5802 section 3.

Credentials are ``UserScramCredentialRecord`` / ``RemoveUserScramCredentialRecord`` in ``__cluster_metadata``,
replayed into ``MetadataImage.scram_credentials`` ((user name, mechanism code) -> ``ScramCredential``). Mechanism
codes are Kafka's ``ScramMechanism`` types: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (0 and anything else: unknown).
A client never sends a password: it sends the salt, the iteration count and SaltedPassword = Hi(password, salt,
iterations) (PBKDF2-HMAC with the mechanism's hash); the controller keeps StoredKey = H(HMAC(SaltedPassword,
"Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"), which is what a SCRAM server needs.

Rules of AlterUserScramCredentials, as Kafka's controller applies them (``ScramControlManager``), per user name:

1. a user named more than once in one request, whether by deletions, upsertions or both: DUPLICATE_RESOURCE
   "A user credential cannot be altered twice in the same request" (a user whose first alteration already
   failed keeps that error);
2. ``metadata.version`` below 3.5-IV2 (level 11): UNSUPPORTED_VERSION "The current metadata.version does not
   support SCRAM";
3. an empty user name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
4. a mechanism other than 1 or 2: UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism";
5. upsertions: iterations below 4096: UNACCEPTABLE_CREDENTIAL "Too few iterations"; above 16384:
   UNACCEPTABLE_CREDENTIAL "Too many iterations";
6. deletions: a (user, mechanism) without a credential: RESOURCE_NOT_FOUND "Attempt to delete a user credential
   that does not exist".

The records of the valid alterations (deletions first, then upsertions) are committed together, atomically.
Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Sequence

from kbroker.controller.image import MetadataImage
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import RemoveUserScramCredentialRecord, UserScramCredentialRecord

__all__ = [
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MECHANISM_CODES",
    "MECHANISM_NAMES",
    "MIN_ITERATIONS",
    "SCRAM_METADATA_VERSION",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "credential_record",
    "describe_user_scram_credentials",
    "plan_alter_user_scram_credentials",
    "salted_password",
    "scram_keys",
]

#: Kafka's ``ScramMechanism`` type codes
SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2
MECHANISM_NAMES: dict[int, str] = {SCRAM_SHA_256: "SCRAM-SHA-256", SCRAM_SHA_512: "SCRAM-SHA-512"}
MECHANISM_CODES: dict[str, int] = {name: code for code, name in MECHANISM_NAMES.items()}
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}

#: Bounds of the iteration count (Kafka's ``ScramMechanism.minIterations`` and the controller's maximum)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Iterations when a tool is given none (``kafka-configs.sh``, ``kafka-storage.sh --add-scram``)
DEFAULT_ITERATIONS = 4096
#: ``metadata.version`` 3.5-IV2, the first that has SCRAM records
SCRAM_METADATA_VERSION = 11

DUPLICATE_MESSAGE = "A user credential cannot be altered twice in the same request"
UNSUPPORTED_MESSAGE = "The current metadata.version does not support SCRAM"
DELETE_MISSING_MESSAGE = "Attempt to delete a user credential that does not exist"
DESCRIBE_MISSING_MESSAGE = "Attempt to describe a user credential that does not exist: "
DESCRIBE_DUPLICATE_MESSAGE = "Cannot describe SCRAM credentials for the same user twice in a single request: "

#: (user, error code, error message or None)
AlterResult = tuple[str, int, "str | None"]
#: (user, error code, error message or None, [(mechanism code, iterations)])
DescribeResult = tuple[str, int, "str | None", list[tuple[int, int]]]


def _hash(mechanism: int) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism code {mechanism}") from None


def salted_password(mechanism: int, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(password, salt, iterations): PBKDF2-HMAC with the mechanism's hash (``mechanism`` 1 or 2, else
    ``ValueError``), output as long as the hash. ``password`` as UTF-8 when given as text."""
    pw = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.pbkdf2_hmac(_hash(mechanism), pw, salt, iterations)


def scram_keys(mechanism: int, salted: bytes) -> tuple[bytes, bytes]:
    """``(stored_key, server_key)`` of a SaltedPassword: H(HMAC(salted, "Client Key")) and HMAC(salted,
    "Server Key") with the mechanism's hash (``mechanism`` 1 or 2, else ``ValueError``)."""
    name = _hash(mechanism)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


def credential_record(name: str, mechanism: int, *, password: str | None = None, salted: bytes | None = None,
                      salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS) -> UserScramCredentialRecord:
    """The ``UserScramCredentialRecord`` of user ``name`` from a ``password`` (or an already ``salted`` password,
    which needs its ``salt``). Without ``salt`` a random one of 32 bytes is drawn. Raises ``ValueError`` for an
    unknown mechanism, iterations outside 4096..16384, or neither/both of password and salted."""
    if (password is None) == (salted is None):
        raise ValueError("give exactly one of password and salted password")
    if salted is not None and salt is None:
        raise ValueError("a salted password needs its salt")
    _hash(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")
    if salt is None:
        salt = os.urandom(32)
    if salted is None:
        assert password is not None
        salted = salted_password(mechanism, password, salt, iterations)
    stored_key, server_key = scram_keys(mechanism, salted)
    return UserScramCredentialRecord(name=name, mechanism=mechanism, salt=salt, stored_key=stored_key,
                                     server_key=server_key, iterations=iterations)


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def plan_alter_user_scram_credentials(
    image: MetadataImage,
    deletions: Sequence[tuple[str, int]],
    upsertions: Sequence[tuple[str, int, int, bytes, bytes]],
) -> tuple[list[UserScramCredentialRecord | RemoveUserScramCredentialRecord], list[AlterResult]]:
    """AlterUserScramCredentials against ``image`` (the controller's latest).

    ``deletions``: ``(user, mechanism code)``; ``upsertions``: ``(user, mechanism code, iterations, salt,
    salted password)``, as the request carries them. Returns the records to commit (removals, then credentials)
    and one ``(user, error code, error message)`` per distinct user name, in the order the names first appear
    (deletions before upsertions); the rules are in the module docstring."""
    supported = image.metadata_version >= SCRAM_METADATA_VERSION
    errors: dict[str, tuple[int, str]] = {}
    dels: dict[str, tuple[str, int]] = {}
    ups: dict[str, tuple[str, int, int, bytes, bytes]] = {}
    order: dict[str, None] = {}
    for d in deletions:
        name, mechanism = d
        order.setdefault(name)
        if name in errors:
            continue
        if dels.pop(name, None) is not None:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)
            continue
        problem = (ErrorCode.UNSUPPORTED_VERSION, UNSUPPORTED_MESSAGE) if not supported else \
            _check_name_and_mechanism(name, mechanism)
        if problem is None and (name, mechanism) not in image.scram_credentials:
            problem = ErrorCode.RESOURCE_NOT_FOUND, DELETE_MISSING_MESSAGE
        if problem is not None:
            errors[name] = problem
        else:
            dels[name] = d
    for u in upsertions:
        name, mechanism, iterations = u[0], u[1], u[2]
        order.setdefault(name)
        if name in errors:
            continue
        if dels.pop(name, None) is not None or ups.pop(name, None) is not None:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)
            continue
        problem = (ErrorCode.UNSUPPORTED_VERSION, UNSUPPORTED_MESSAGE) if not supported else \
            _check_name_and_mechanism(name, mechanism)
        if problem is None and iterations < MIN_ITERATIONS:
            problem = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        elif problem is None and iterations > MAX_ITERATIONS:
            problem = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if problem is not None:
            errors[name] = problem
        else:
            ups[name] = u
    records: list[UserScramCredentialRecord | RemoveUserScramCredentialRecord] = [
        RemoveUserScramCredentialRecord(name=name, mechanism=mechanism) for name, mechanism in dels.values()]
    for name, mechanism, iterations, salt, salted in ups.values():
        stored_key, server_key = scram_keys(mechanism, salted)
        records.append(UserScramCredentialRecord(name=name, mechanism=mechanism, salt=salt, stored_key=stored_key,
                                                 server_key=server_key, iterations=iterations))
    results: list[AlterResult] = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append((name, code, message))
    return records, results


def describe_user_scram_credentials(image: MetadataImage, users: Sequence[str] | None) -> list[DescribeResult]:
    """DescribeUserScramCredentials from ``image``: ``users`` None or empty describes every user that has a
    credential (by name); otherwise each distinct name in request order, RESOURCE_NOT_FOUND "Attempt to describe
    a user credential that does not exist: <user>" when it has none, DUPLICATE_RESOURCE "Cannot describe SCRAM
    credentials for the same user twice in a single request: <user>" when it is named twice. Each found user
    lists ``(mechanism code, iterations)`` by mechanism code (Kafka's ``ScramImage.describe``)."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (user, mechanism), cred in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append((mechanism, cred.iterations))
    if not users:
        return [(user, ErrorCode.NONE, None, infos) for user, infos in sorted(by_user.items())]
    counts: dict[str, int] = {}
    for user in users:
        counts[user] = counts.get(user, 0) + 1
    out: list[DescribeResult] = []
    for user, n in counts.items():
        if n > 1:
            out.append((user, ErrorCode.DUPLICATE_RESOURCE, DESCRIBE_DUPLICATE_MESSAGE + user, []))
        elif user not in by_user:
            out.append((user, ErrorCode.RESOURCE_NOT_FOUND, DESCRIBE_MISSING_MESSAGE + user, []))
        else:
            out.append((user, ErrorCode.NONE, None, by_user[user]))
    return out
