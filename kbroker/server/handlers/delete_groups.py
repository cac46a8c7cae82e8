"""DeleteGroups (API key 42), versions 0-2.

Behavior: deletes empty groups: tombstones for every committed offset and for the group metadata in
``__consumer_offsets``, written in one batch per partition. GROUP_ID_NOT_FOUND for unknown groups,
NON_EMPTY_GROUP for groups with members, INVALID_GROUP_ID for an empty group id.
Version notes: v2: flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = range(0, 3)


async def handle(ctx, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    names = list(request.groups_names)
    if ctx.broker.authorizer is None:
        return DeleteGroupsResponse(results=ctx.broker.group_coordinator.delete_groups(names))
    allowed = common.authorized_names(ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    results = ctx.broker.group_coordinator.delete_groups([n for n in names if n in allowed])
    denied = list(dict.fromkeys(n for n in names if n not in allowed))
    results.extend(DeleteGroupsResponse.DeletableGroupResult(group_id=n,
                                                             error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                   for n in denied)
    return DeleteGroupsResponse(results=results)
