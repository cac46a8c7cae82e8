"""Heartbeat (API key 12), versions 0-4.

Behavior: keeps a member of a classic group alive for its session timeout. REBALANCE_IN_PROGRESS while the
group prepares a rebalance (the member must rejoin); UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
ILLEGAL_GENERATION for members that are not (or no longer) part of the current generation.
Version notes: v1: throttle time; v3: group instance id; v4: flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import HeartbeatRequest, HeartbeatResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta

API_KEY = ApiKey.HEARTBEAT
VERSIONS = range(0, 5)


async def handle(ctx, request: HeartbeatRequest) -> HeartbeatResponse:
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP,
                                                                   request.group_id):
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    instance_id = request.group_instance_id if ctx.api_version >= 3 else None
    error = ctx.broker.group_coordinator.heartbeat(request_meta(ctx), request.group_id, request.generation_id,
                                                   request.member_id, instance_id)
    return HeartbeatResponse(error_code=error)
