"""DescribeGroups (API key 15), versions 0-6.

Behavior: per group its state, protocol type, and members (member id, instance id, client id, client host);
in Stable also the chosen protocol and each member's metadata and assignment. An unknown group is reported
as state ``Dead`` without error before v6 and as GROUP_ID_NOT_FOUND from v6 (the Admin client relies on
this). Authorized operations (v3+, when asked for) are READ, DELETE and DESCRIBE: there is no authorizer.
Answered once the in-sync replicas hold what was read (a group whose wait fails gets its error).
Version notes: v3: authorized operations; v4: group instance id; v5: flexible; v6: error message.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

API_KEY = ApiKey.DESCRIBE_GROUPS
VERSIONS = range(0, 7)


async def handle(ctx, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    version = ctx.api_version
    include = request.include_authorized_operations if version >= 3 else False
    groups = await ctx.broker.group_coordinator.describe_groups(list(request.groups), version, include)
    return DescribeGroupsResponse(groups=groups)
