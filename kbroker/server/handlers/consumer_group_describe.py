"""ConsumerGroupDescribe (API key 69), versions 0-1.

Behavior: per group its state (Empty, Assigning, Reconciling, Stable), group epoch, assignment epoch, the
assignor, and every member with its subscription, current assignment and target assignment (topic ids and
names). A classic group or an unknown group is answered GROUP_ID_NOT_FOUND: the Admin client then describes
it with DescribeGroups. Authorized operations (when asked for): READ, DELETE and DESCRIBE without an authorizer,
else the caller's. With an authorizer a group the caller may not DESCRIBE is GROUP_AUTHORIZATION_FAILED, and a
group whose members' assignments hold a topic it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED (Kafka 4.0,
KAFKA-18813).
Answered once the in-sync replicas hold what was read (a group whose wait fails gets its error).
Version notes: v1: ``MemberType`` (1 = consumer protocol member).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
VERSIONS = range(0, 2)


async def handle(ctx, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    names = list(request.group_ids)
    include = request.include_authorized_operations
    if ctx.broker.authorizer is None:
        return ConsumerGroupDescribeResponse(groups=await ctx.broker.group_coordinator.consumer_group_describe(
            names, include))
    allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, names)
    described = iter(await ctx.broker.group_coordinator.consumer_group_describe([n for n in names if n in allowed],
                                                                                include))
    groups = []
    for name in names:
        if name not in allowed:
            groups.append(ConsumerGroupDescribeResponse.DescribedGroup(
                group_id=name, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, authorized_operations=-2147483648))
            continue
        group = next(described)
        topics = {tp.topic_name for m in group.members for a in (m.assignment, m.target_assignment)
                  for tp in a.topic_partitions}
        if topics and len(common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) < len(topics):
            # KAFKA-18813 (Kafka 4.0): a group holding a topic the caller may not DESCRIBE is not described
            groups.append(ConsumerGroupDescribeResponse.DescribedGroup(
                group_id=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorized_operations=-2147483648))
            continue
        if include and group.error_code == ErrorCode.NONE:
            group.authorized_operations = common.authorized_ops(ctx, ResourceType.GROUP, group.group_id, True)
        groups.append(group)
    return ConsumerGroupDescribeResponse(groups=groups)
