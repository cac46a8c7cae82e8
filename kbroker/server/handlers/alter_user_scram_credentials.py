"""AlterUserScramCredentials (API key 51), version 0 (KIP-554).

Behavior: deletions (user, mechanism) and upsertions (user, mechanism, iterations, salt, salted password) of SCRAM
credentials, written by the quorum controller as RemoveUserScramCredentialRecord / UserScramCredentialRecord (the
controller derives StoredKey and ServerKey from the salted password; the password never reaches the broker). One
result per distinct user name: DUPLICATE_RESOURCE for a user named twice in the request,
UNACCEPTABLE_CREDENTIAL for an empty name or iterations outside 4096..16384 ("Too few iterations" / "Too many
iterations"), UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2),
RESOURCE_NOT_FOUND for the deletion of a credential that does not exist, UNSUPPORTED_VERSION below
``metadata.version`` 3.5-IV2 (rules in ``kbroker.controller.scram_control``). The valid alterations are
committed together. The caller needs ALTER on the CLUSTER resource (``authorizer.class.name``); otherwise every
user named gets CLUSTER_AUTHORIZATION_FAILED (Kafka's ``getErrorResponse``: distinct names, sorted). In a cluster
a node that is not the active controller forwards the request there; the answer comes once the records are
committed.
Version notes: v0 is the only version (flexible).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse as R

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
VERSIONS = range(0, 1)

ALTER = 7  # AclOperation.ALTER


async def handle(ctx, request: AlterUserScramCredentialsRequest) -> R:
    from kbroker.server.handlers import common

    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not common.cluster_authorized(ctx, ALTER):
        return R(results=[R.AlterUserScramCredentialsResult(
            user=name, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="Cluster authorization failed.") for name in sorted(set(names))])
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    users = list(dict.fromkeys(names))  # the controller answers per distinct name, in this order
    deletions = [(d.name, d.mechanism) for d in request.deletions]
    upsertions = [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in request.upsertions]
    controller = ctx.broker.controller

    def write() -> list[tuple[int, str | None]]:
        return [(code, message) for _, code, message in controller.alter_user_scram_credentials(deletions,
                                                                                              upsertions)]

    results = await common.committed_results(ctx, write, len(users), validate_only=False) if users else []
    return R(results=[R.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
                      for user, (code, message) in zip(users, results)])
