"""DeleteGroups (API key 42), versions 0-2.

Behavior: deletes empty groups: tombstones for every committed offset and for the group metadata in
``__consumer_offsets``, written in one batch per partition. GROUP_ID_NOT_FOUND for unknown groups,
NON_EMPTY_GROUP for groups with members, INVALID_GROUP_ID for an empty group id.
Version notes: v2: flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

API_KEY = ApiKey.DELETE_GROUPS
VERSIONS = range(0, 3)


async def handle(ctx, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(results=ctx.broker.group_coordinator.delete_groups(list(request.groups_names)))
