"""ShareGroupHeartbeat (API key 76), version 1: membership of a share group (KIP-932).

Behavior (details in ``kbroker.coordinator.group.share_group``): a member joins with epoch 0 and its subscribed
topic names, heartbeats with its member epoch, leaves with -1; the coordinator bumps the group epoch on
membership or subscription changes and assigns partitions with the share simple assignor (a partition may be
assigned to several members). Errors: INVALID_REQUEST, GROUP_ID_NOT_FOUND (not a share group),
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, GROUP_AUTHORIZATION_FAILED,
TOPIC_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION (``share.version`` not finalized), and the coordinator errors
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
Version notes: v0 was Kafka's early-access version (never released); v1 is the 4.1+ version.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta
from kbroker.server.share.manager import share_groups_enabled

API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
VERSIONS = range(1, 2)


async def handle(ctx, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not share_groups_enabled(ctx.broker):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                           error_message="Share groups are not enabled (share.version).")
    if ctx.broker.authorizer is not None:
        if not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        topics = request.subscribed_topic_names or []
        if topics and len(common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) \
                < len(set(topics)):
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return ctx.broker.group_coordinator.share_group_heartbeat(request_meta(ctx), request)
