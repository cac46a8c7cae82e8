"""ConsumerGroupDescribe (API key 69), versions 0-1.

Behavior: per group its state (Empty, Assigning, Reconciling, Stable), group epoch, assignment epoch, the
assignor, and every member with its subscription, current assignment and target assignment (topic ids and
names). A classic group or an unknown group is answered GROUP_ID_NOT_FOUND: the Admin client then describes
it with DescribeGroups. Authorized operations (when asked for): READ, DELETE and DESCRIBE (no authorizer).
Answered once the in-sync replicas hold what was read (a group whose wait fails gets its error).
Version notes: v1: ``MemberType`` (1 = consumer protocol member).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
VERSIONS = range(0, 2)


async def handle(ctx, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    groups = await ctx.broker.group_coordinator.consumer_group_describe(list(request.group_ids),
                                                                        request.include_authorized_operations)
    return ConsumerGroupDescribeResponse(groups=groups)
