"""ListGroups (API key 16), versions 0-5.

Behavior: every group of every ``__consumer_offsets`` partition this node leads, with its protocol type,
state (v4+) and type (v5+: ``classic``). Filters: ``StatesFilter`` (v4+) and ``TypesFilter`` (v5+), both
case-insensitive; empty means all. COORDINATOR_LOAD_IN_PROGRESS while a partition is still loading (the
groups of the loaded partitions are listed). Answered once the in-sync replicas hold what was read.
Version notes: v3: flexible; v4: states; v5: types.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ListGroupsRequest, ListGroupsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.LIST_GROUPS
VERSIONS = range(0, 6)


async def handle(ctx, request: ListGroupsRequest) -> ListGroupsResponse:
    version = ctx.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    error, groups = await ctx.broker.group_coordinator.list_groups(states, types)
    if ctx.broker.authorizer is not None and not common.cluster_authorized(ctx, AclOperation.DESCRIBE,
                                                                           log_denied=False):
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, [g.group_id for g in groups],
                                          log_denied=False)
        groups = [g for g in groups if g.group_id in allowed]
    groups.sort(key=lambda g: g.group_id)
    return ListGroupsResponse(error_code=error, groups=groups)
