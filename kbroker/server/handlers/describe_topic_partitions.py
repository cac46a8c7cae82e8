"""DescribeTopicPartitions (API key 75), version 0 (KIP-966).

Behavior: the requested topics (all topics when the list is empty), sorted by name, with their partitions
starting at ``Cursor``; at most ``ResponsePartitionLimit`` partitions in total, and ``NextCursor`` names
where to continue. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION. With an authorizer, topics the caller may not
DESCRIBE are left out of an all-topics answer and TOPIC_AUTHORIZATION_FAILED when named (as Metadata). No eligible leader replicas (ELR) yet:
empty lists. ``TopicAuthorizedOperations`` is always filled (the request has no flag, as in Kafka): the
caller's operations on the topic (``kbroker.server.authorizer``).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
VERSIONS = range(0, 1)


async def handle(ctx, request: DescribeTopicPartitionsRequest) -> R:
    image = ctx.broker.controller.image
    names = sorted({t.name for t in request.topics}) if request.topics else sorted(image.topics_by_name)
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    denied: set[str] = set()
    if ctx.broker.authorizer is not None:  # as Metadata: all topics -> left out; named -> TOPIC_AUTHORIZATION_FAILED
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        if request.topics:
            denied = {n for n in names if n not in allowed}
        else:
            names = [n for n in names if n in allowed]
    limit = request.response_partition_limit if request.response_partition_limit > 0 else 2000
    resp = R()
    budget = limit
    for name in names:
        if name in denied:
            resp.topics.append(R.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                topic_authorized_operations=-2147483648))
            continue
        topic = image.topics_by_name.get(name)
        if topic is None:
            resp.topics.append(R.DescribeTopicPartitionsResponseTopic(  # Kafka answers the operations here too
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                topic_authorized_operations=common.authorized_ops(ctx, 2, name, True)))
            continue
        out = R.DescribeTopicPartitionsResponseTopic(name=name, topic_id=topic.topic_id,
                                                     is_internal=common.is_internal_topic(name),
                                                     topic_authorized_operations=common.authorized_ops(
                                                         ctx, 2, name, True))  # always: no flag in the request
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        for pid in sorted(topic.partitions):
            if pid < start:
                continue
            if budget == 0:
                resp.next_cursor = R.Cursor(topic_name=name, partition_index=pid)
                break
            p = topic.partitions[pid]
            out.partitions.append(R.DescribeTopicPartitionsResponsePartition(
                partition_index=pid, leader_id=p.leader, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.isr), eligible_leader_replicas=[],
                last_known_elr=[], offline_replicas=[]))
            budget -= 1
        resp.topics.append(out)
        if resp.next_cursor is not None:
            break
    return resp
