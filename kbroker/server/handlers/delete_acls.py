"""DeleteAcls (API key 31), versions 1-3 (KIP-140 ACL admin API; ACLs in the metadata log, KIP-801).

Behavior: each filter (resource type or ANY, name or null, pattern type ANY / MATCH / LITERAL / PREFIXED,
principal, host (null: any), operation or ANY, permission or ANY; ``kbroker.security.acl.AclBindingFilter``)
removes the ACLs it matches, written by the quorum controller as ``RemoveAccessControlEntryRecord``; its result
lists them (``MatchingAcls``, each with error NONE). A filter with an UNKNOWN code gets INVALID_REQUEST "Unknown
patternFilter." / "Unknown entryFilter.". The removals of one request are committed together. Without an
authorizer every filter result is SECURITY_DISABLED "No Authorizer is configured.", as in Kafka. The caller needs
ALTER on the CLUSTER resource; otherwise every filter result is CLUSTER_AUTHORIZATION_FAILED. In a cluster a node
that is not the active controller forwards the request there; the answer comes once the removals are committed.
Version notes: v1 added the pattern type filter (v0 is gone in Kafka 4); v2+ flexible; v3 same as v2.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DeleteAclsRequest, DeleteAclsResponse as R

API_KEY = ApiKey.DELETE_ACLS
VERSIONS = range(1, 4)

ALTER = 7  # AclOperation.ALTER


def _all(request: DeleteAclsRequest, code: int, message: str) -> R:
    return R(filter_results=[R.DeleteAclsFilterResult(error_code=code, error_message=message)
                             for _ in request.filters])


async def handle(ctx, request: DeleteAclsRequest) -> R:
    from kbroker.protocol.errors import KafkaError
    from kbroker.security.acl import AclBindingFilter
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, ALTER):
        return _all(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if ctx.broker.authorizer is None:
        return _all(request, ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    filters = [AclBindingFilter(resource_type=f.resource_type_filter, resource_name=f.resource_name_filter,
                                pattern_type=f.pattern_type_filter, principal=f.principal_filter,
                                host=f.host_filter, operation=f.operation, permission_type=f.permission_type)
               for f in request.filters]
    if not filters:
        return R()
    try:
        results = ctx.broker.controller.delete_acls(filters)
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        return _all(request, exc.code, exc.message)
    if any(matched for _, _, matched in results):
        code, message = await common.metadata_committed(ctx.broker)
        if code:
            return _all(request, code, message or ErrorCode(code).name)
    return R(filter_results=[
        R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[
            R.DeleteAclsMatchingAcl(resource_type=a.resource_type, resource_name=a.resource_name,
                                    pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                                    operation=a.operation, permission_type=a.permission_type) for a in matched])
        for code, message, matched in results])
