"""StreamsGroupDescribe (API key 89), version 0 (KIP-1071).

Behavior: per group its state (Empty, NotReady, Assigning, Reconciling, Stable), group epoch, assignment epoch,
its topology (epoch; per subtopology the source, repartition sink, repartition source and changelog topics), and
every member with its process id, client id and host, topology epoch, endpoint, client tags, current assignment
and target assignment (active, standby and warm-up tasks). A group that is not a streams group, or unknown, is
answered GROUP_ID_NOT_FOUND. Authorized operations (when asked for): READ, DELETE and DESCRIBE without an
authorizer, else the caller's; with an authorizer a group the caller may not DESCRIBE is GROUP_AUTHORIZATION_FAILED.
Not given: task offsets and end offsets (empty), ``TopologyDescription`` (null). UNSUPPORTED_VERSION when
``streams.version`` is not finalized.
Answered once the in-sync replicas hold what was read (a group whose wait fails gets its error).
Version notes: v0 is Kafka 4.3's only version.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.streams_group_heartbeat import streams_groups_enabled

API_KEY = ApiKey.STREAMS_GROUP_DESCRIBE
VERSIONS = range(0, 1)


async def handle(ctx, request: StreamsGroupDescribeRequest) -> StreamsGroupDescribeResponse:
    names = list(request.group_ids)
    Described = StreamsGroupDescribeResponse.DescribedGroup
    if not streams_groups_enabled(ctx.broker):
        return StreamsGroupDescribeResponse(groups=[Described(
            group_id=n, error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="Streams groups are not enabled (streams.version).") for n in names])
    include = request.include_authorized_operations
    gc = ctx.broker.group_coordinator
    if ctx.broker.authorizer is None:
        return StreamsGroupDescribeResponse(groups=await gc.streams_group_describe(names, include))
    allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, names)
    described = iter(await gc.streams_group_describe([n for n in names if n in allowed], include))
    groups = []
    for name in names:
        if name not in allowed:
            groups.append(Described(group_id=name, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        group = next(described)
        if include and group.error_code == ErrorCode.NONE:
            group.authorized_operations = common.authorized_ops(ctx, ResourceType.GROUP, group.group_id, True)
        groups.append(group)
    return StreamsGroupDescribeResponse(groups=groups)
