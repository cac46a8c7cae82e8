"""DescribeGroups (API key 15), versions 0-6.

Behavior: per group its state, protocol type, and members (member id, instance id, client id, client host);
in Stable also the chosen protocol and each member's metadata and assignment. An unknown group is reported
as state ``Dead`` without error before v6 and as GROUP_ID_NOT_FOUND from v6 (the Admin client relies on
this). Authorized operations (v3+, when asked for): READ, DELETE and DESCRIBE without an authorizer, else the
caller's. With an authorizer a group the caller may not DESCRIBE is GROUP_AUTHORIZATION_FAILED, as in Kafka.
Answered once the in-sync replicas hold what was read (a group whose wait fails gets its error).
Version notes: v3: authorized operations; v4: group instance id; v5: flexible; v6: error message.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse
from kbroker.server.authorizer import NOT_REQUESTED, AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_GROUPS
VERSIONS = range(0, 7)


async def handle(ctx, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    version = ctx.api_version
    include = request.include_authorized_operations if version >= 3 else False
    names = list(request.groups)
    if ctx.broker.authorizer is None:
        return DescribeGroupsResponse(groups=await ctx.broker.group_coordinator.describe_groups(names, version,
                                                                                               include))
    allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, names)
    described = iter(await ctx.broker.group_coordinator.describe_groups([n for n in names if n in allowed],
                                                                        version, include))
    groups = []
    for name in names:
        if name not in allowed:
            groups.append(DescribeGroupsResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=name, group_state="", protocol_type="",
                protocol_data="", authorized_operations=NOT_REQUESTED))
            continue
        group = next(described)
        if include and group.error_code == ErrorCode.NONE:
            group.authorized_operations = common.authorized_ops(ctx, ResourceType.GROUP, group.group_id, True)
        groups.append(group)
    return DescribeGroupsResponse(groups=groups)
