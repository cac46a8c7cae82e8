"""DescribeUserScramCredentials (API key 50), version 0 (KIP-554).

Behavior: answered from this node's metadata image (``MetadataImage.scram_credentials``), as Kafka's brokers answer
it from their metadata cache. ``Users`` null or empty: every user that has a SCRAM credential (by name). Named
users: one result each, with ``(mechanism, iterations)`` per credential (mechanism 1 SCRAM-SHA-256, 2
SCRAM-SHA-512), RESOURCE_NOT_FOUND "Attempt to describe a user credential that does not exist: <user>" for a user
without one, DUPLICATE_RESOURCE "Cannot describe SCRAM credentials for the same user twice in a single request:
<user>" for a name listed twice (``kbroker.controller.scram_control``). Salts and keys are never answered. The
caller needs DESCRIBE on the CLUSTER resource (``authorizer.class.name``); otherwise the top-level error and each
named user's result are CLUSTER_AUTHORIZATION_FAILED (Kafka 4.3 leaves those results' user names empty, and its
error answer fails on a null user list; kbroker names the users, and answers a null list with the top-level error
alone). In a cluster a node answers from its committed image, so a
credential altered through another node shows once this node has applied the record.
Version notes: v0 is the only version (flexible).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse as R

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
VERSIONS = range(0, 1)

DESCRIBE = 8  # AclOperation.DESCRIBE


async def handle(ctx, request: DescribeUserScramCredentialsRequest) -> R:
    from kbroker.controller.scram_control import describe_user_scram_credentials
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, DESCRIBE):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return R(error_code=code, error_message=message,
                 results=[R.DescribeUserScramCredentialsResult(user=u.name, error_code=code, error_message=message)
                          for u in request.users or ()])
    users = None if request.users is None else [u.name for u in request.users]
    resp = R()
    for user, code, message, infos in describe_user_scram_credentials(ctx.broker.controller.image, users):
        result = R.DescribeUserScramCredentialsResult(user=user, error_code=code)
        if message is not None:
            result.error_message = message
        result.credential_infos = [R.CredentialInfo(mechanism=m, iterations=i) for m, i in infos]
        resp.results.append(result)
    return resp
