"""LeaveGroup (API key 13), versions 0-5.

Behavior: removes members from a classic group and starts a rebalance for the others. Static members can be
removed by ``group.instance.id`` alone (the Admin client's removeMembersFromConsumerGroup). Per member:
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (member id and instance id disagree); group level: UNKNOWN_MEMBER_ID
for an unknown group, and the coordinator errors.
Version notes:
* v0-2: one member id, its error is the top-level error; v3: batched members with instance ids;
  v4: flexible; v5: reason per member.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import LeaveGroupRequest, LeaveGroupResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta

API_KEY = ApiKey.LEAVE_GROUP
VERSIONS = range(0, 6)


async def handle(ctx, request: LeaveGroupRequest) -> R:
    version = ctx.api_version
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP,
                                                                   request.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if version < 3:
        members = [(request.member_id, None, None)]
    else:
        members = [(m.member_id, m.group_instance_id, m.reason if version >= 5 else None) for m in request.members]
    error, member_errors = ctx.broker.group_coordinator.leave_group(request_meta(ctx), request.group_id, members)
    if version < 3:
        if error == ErrorCode.NONE and member_errors:
            error = member_errors[0]
        return R(error_code=error)
    resp = R(error_code=error)
    if error == ErrorCode.NONE:
        resp.members = [R.MemberResponse(member_id=mid, group_instance_id=iid, error_code=err)
                        for (mid, iid, _), err in zip(members, member_errors)]
    return resp
