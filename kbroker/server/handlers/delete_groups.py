"""DeleteGroups (API key 42), versions 0-3.

Behavior: deletes empty groups: tombstones for every committed offset and for the group metadata in
``__consumer_offsets``, written in one batch per partition. GROUP_ID_NOT_FOUND for unknown groups,
NON_EMPTY_GROUP for groups with members, INVALID_GROUP_ID for an empty group id.
Version notes: v2: flexible; v3 (Kafka 4.4): per-group ErrorMessage. As in Kafka 4.4 it is null for the
per-group answers above and for GROUP_AUTHORIZATION_FAILED, and set only when the coordinator partition's
write fails as a whole (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...) and the failure carries a message
(Kafka also sets it for streams-group topology errors; kbroker has no streams groups).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = range(0, 4)


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
