"""CreateAcls (API key 30), versions 1-3 (KIP-140 ACL admin API; ACLs in the metadata log, KIP-801).

Behavior: each creation (resource type, name, pattern type, principal, host, operation, permission) becomes an
``AccessControlEntryRecord`` written by the quorum controller; one result per creation, in request order:
INVALID_REQUEST with Kafka's message for a CLUSTER ACL not named ``kafka-cluster``, an empty name, an
UNKNOWN / ANY resource type or operation, a pattern type other than LITERAL / PREFIXED, a permission other
than ALLOW / DENY, a principal without ``Type:`` (rules in ``kbroker.controller.acl_control``). An ACL equal to
an existing one succeeds without being added twice. The new ACLs are committed together. Without an authorizer
(``authorizer.class.name`` empty) every result is SECURITY_DISABLED "No Authorizer is configured.", as in Kafka.
The caller needs ALTER on the CLUSTER resource; otherwise every result is CLUSTER_AUTHORIZATION_FAILED. In a
cluster a node that is not the active controller forwards the request there; the answer comes once the records
are committed.
Version notes: v1 added the resource pattern type (v0 is gone in Kafka 4); v2+ flexible; v3 same as v2.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import CreateAclsRequest, CreateAclsResponse as R

API_KEY = ApiKey.CREATE_ACLS
VERSIONS = range(1, 4)

ALTER = 7  # AclOperation.ALTER


def _all(request: CreateAclsRequest, code: int, message: str) -> R:
    return R(results=[R.AclCreationResult(error_code=code, error_message=message) for _ in request.creations])


async def handle(ctx, request: CreateAclsRequest) -> R:
    from kbroker.security.acl import StandardAcl
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, ALTER):
        return _all(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.broker.authorizer is None:
        return _all(request, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    creations = [StandardAcl(resource_type=c.resource_type, resource_name=c.resource_name,
                             pattern_type=c.resource_pattern_type, principal=c.principal, host=c.host,
                             operation=c.operation, permission_type=c.permission_type) for c in request.creations]
    controller = ctx.broker.controller
    results = await common.committed_results(ctx, lambda: controller.create_acls(creations), len(creations),
                                             validate_only=False) if creations else []
    # Kafka leaves a successful result's message at the field's default, "" (not null)
    return R(results=[R.AclCreationResult(error_code=code, error_message="" if message is None and not code
                                          else message) for code, message in results])
