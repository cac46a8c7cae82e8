"""OffsetDelete (API key 47), version 0.

Behavior: deletes committed offsets of a group (tombstones in ``__consumer_offsets``). GROUP_ID_NOT_FOUND for
an unknown group; NON_EMPTY_GROUP for a group with members whose protocol type is not ``consumer``; for a
``consumer`` group with members, partitions of topics it subscribes to get GROUP_SUBSCRIBED_TO_TOPIC; topics
that do not exist get UNKNOWN_TOPIC_OR_PARTITION; other partitions succeed whether or not an offset existed.
Version notes: no flexible version.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.OFFSET_DELETE
VERSIONS = range(0, 1)


async def handle(ctx, request: OffsetDeleteRequest) -> R:
    image = ctx.broker.controller.image
    readable = None  # the topics the caller may READ (None: no authorizer)
    if ctx.broker.authorizer is not None:
        if not common.authorize(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
            return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        readable = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics])
    known = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics
             if t.name in image.topics_by_name and (readable is None or t.name in readable)]
    error, results = ctx.broker.group_coordinator.delete_offsets(request.group_id, known)
    if error != ErrorCode.NONE:
        return R(error_code=error)
    resp = R(error_code=ErrorCode.NONE)
    for t in request.topics:
        exists = t.name in image.topics_by_name
        denied = readable is not None and t.name not in readable
        resp.topics.append(R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied
                else results.get((t.name, p.partition_index), ErrorCode.NONE) if exists
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            for p in t.partitions]))
    return resp
