"""JoinGroup (API key 11), versions 0-9.

Behavior (the classic group protocol; details in ``kbroker.coordinator.group.shard``):
* a member without id gets one; dynamic members (v4+) are first answered MEMBER_ID_REQUIRED and join again
  with it (KIP-394); static members (``group.instance.id``, v5+) join at once and fence an older member id of
  the same instance with FENCED_INSTANCE_ID (KIP-345);
* the response is parked until the rebalance completes: every member rejoined, the rebalance timeout passed,
  or (first join into an empty group) ``group.initial.rebalance.delay.ms`` passed; the leader gets the member
  list with each member's metadata for the chosen protocol;
* errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT (outside ``group.min/max.session.timeout.ms``),
  INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS.
Version notes:
* v0: no rebalance timeout (the session timeout is used); v4: MEMBER_ID_REQUIRED; v5: group instance id;
  v6: flexible; v7: protocol type and nullable protocol name in the response; v8: reason;
  v9: SkipAssignment (a static leader that rejoins a Stable group gets the members but keeps the assignment).
"""

from __future__ import annotations

from kbroker.coordinator.group.shard import RequestMeta
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import JoinGroupRequest, JoinGroupResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.JOIN_GROUP
VERSIONS = range(0, 10)


def request_meta(ctx) -> RequestMeta:
    peer = ctx.connection.peer
    host = f"/{peer[0]}" if peer else ""
    return RequestMeta(ctx.api_version, ctx.client_id, host)


async def handle(ctx, request: JoinGroupRequest) -> JoinGroupResponse:
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP,
                                                                   request.group_id):
        return JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                 protocol_name="" if ctx.api_version < 7 else None, leader="", member_id="")
    resp = await ctx.broker.group_coordinator.join_group(request_meta(ctx), request)
    if ctx.api_version < 7 and resp.protocol_name is None:
        resp.protocol_name = ""
    return resp
