"""ShareGroupDescribe (API key 77), version 1: share groups' state, epochs and members (KIP-932).

Behavior: one answer per group id: state (Empty, Stable), group and assignment epochs, assignor ``simple``,
each member's id, rack, epoch, client id and host, subscription and assignment (topic ids and names).
Errors per group: INVALID_GROUP_ID (empty id), GROUP_ID_NOT_FOUND (unknown, or not a share group),
GROUP_AUTHORIZATION_FAILED (no DESCRIBE on the group), TOPIC_AUTHORIZATION_FAILED (an assigned topic the caller
may not DESCRIBE), UNSUPPORTED_VERSION (``share.version`` not finalized), and the coordinator errors.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.share.manager import share_groups_enabled

API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
VERSIONS = range(1, 2)


async def handle(ctx, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    names = list(request.group_ids)
    include = request.include_authorized_operations
    coordinator = ctx.broker.group_coordinator
    if not share_groups_enabled(ctx.broker):
        return ShareGroupDescribeResponse(groups=[ShareGroupDescribeResponse.DescribedGroup(
            group_id=name, error_code=ErrorCode.UNSUPPORTED_VERSION, authorized_operations=-2147483648)
            for name in names])
    if ctx.broker.authorizer is None:
        return ShareGroupDescribeResponse(groups=coordinator.share_group_describe(names, include))
    allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, names)
    described = iter(coordinator.share_group_describe([n for n in names if n in allowed], include))
    groups = []
    for name in names:
        if name not in allowed:
            groups.append(ShareGroupDescribeResponse.DescribedGroup(
                group_id=name, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, authorized_operations=-2147483648))
            continue
        group = next(described)
        topics = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
        if topics and len(common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) < len(topics):
            groups.append(ShareGroupDescribeResponse.DescribedGroup(
                group_id=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorized_operations=-2147483648))
            continue
        if include and group.error_code == ErrorCode.NONE:
            group.authorized_operations = common.authorized_ops(ctx, ResourceType.GROUP, group.group_id, True)
        groups.append(group)
    return ShareGroupDescribeResponse(groups=groups)
