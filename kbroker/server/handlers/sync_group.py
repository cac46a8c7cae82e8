"""SyncGroup (API key 14), versions 0-5.

Behavior:
* the leader sends the assignment; it is stored as a ``GroupMetadata`` record in ``__consumer_offsets`` and
  then every member's parked SyncGroup is answered with its assignment and the group is Stable;
* followers that sync before the leader are parked; in a Stable group SyncGroup returns the stored assignment;
* errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (a new rebalance
  started), INCONSISTENT_GROUP_PROTOCOL (v5 protocol type/name differ from the group's), and the
  coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE when the assignment cannot be stored).
Version notes:
* v3: group instance id; v4: flexible; v5: protocol type and name in request and response.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import SyncGroupRequest, SyncGroupResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta

API_KEY = ApiKey.SYNC_GROUP
VERSIONS = range(0, 6)


async def handle(ctx, request: SyncGroupRequest) -> SyncGroupResponse:
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP,
                                                                   request.group_id):
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    return await ctx.broker.group_coordinator.sync_group(request_meta(ctx), request)
