"""DescribeAcls (API key 29), versions 1-3 (KIP-140 ACL admin API; ACLs in the metadata log, KIP-801).

Behavior: the ACLs matching the filter (``kbroker.security.acl.AclBindingFilter``: resource type or ANY, name or
null, pattern type ANY / MATCH / LITERAL / PREFIXED, principal and host or null, operation and permission or
ANY), grouped by resource pattern (type, name, pattern type), answered from this node's metadata image as Kafka's
brokers answer from their authorizer's copy of it; a filter with an UNKNOWN code gets INVALID_REQUEST "Unknown
patternFilter." / "Unknown entryFilter.". Without an authorizer the answer is SECURITY_DISABLED "No Authorizer
is configured on the broker", as in Kafka. The caller needs DESCRIBE on the CLUSTER resource; otherwise
CLUSTER_AUTHORIZATION_FAILED. In a cluster a node answers from its committed image, so an ACL created through
another node shows once this node has applied the record.
Version notes: v1 added the pattern type filter (v0 is gone in Kafka 4); v2+ flexible; v3 same as v2.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeAclsRequest, DescribeAclsResponse as R

API_KEY = ApiKey.DESCRIBE_ACLS
VERSIONS = range(1, 4)

DESCRIBE = 8  # AclOperation.DESCRIBE


async def handle(ctx, request: DescribeAclsRequest) -> R:
    from kbroker.controller.acl_control import describe_acls
    from kbroker.security.acl import AclBindingFilter
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, DESCRIBE):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.")
    if ctx.broker.authorizer is None:
        return R(error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured on the broker")
    acl_filter = AclBindingFilter(resource_type=request.resource_type_filter,
                                  resource_name=request.resource_name_filter,
                                  pattern_type=request.pattern_type_filter, principal=request.principal_filter,
                                  host=request.host_filter, operation=request.operation,
                                  permission_type=request.permission_type)
    code, message, groups = describe_acls(ctx.broker.controller.image.acls.values(), acl_filter)
    return R(error_code=code, error_message=message, resources=[
        R.DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=ptype, acls=[
            R.AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                             permission_type=a.permission_type) for a in acls])
        for (rtype, name, ptype), acls in groups])
