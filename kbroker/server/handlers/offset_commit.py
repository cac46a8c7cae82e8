"""OffsetCommit (API key 8), versions 2-10.

Behavior:
* commits of a group member are checked like a heartbeat: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
  ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS while the group completes a rebalance; a commit with generation -1
  and no member id (a consumer without group management, or the Admin client) is accepted while the group
  is Empty and creates the group if needed; for an unknown group a commit with a generation gets
  ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from v9);
* per partition: UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, OFFSET_METADATA_TOO_LARGE above
  ``offset.metadata.max.bytes``; the other partitions are written to ``__consumer_offsets`` in one batch
  (OffsetCommit records with offset, leader epoch, metadata and commit time);
* if that write fails every partition gets the coordinator error (INVALID_COMMIT_OFFSET_SIZE when too large).
Version notes:
* v2-4: RetentionTimeMs (an explicit expire time when not -1); v6: committed leader epoch; v7: group instance
  id; v8: flexible; v9: GROUP_ID_NOT_FOUND for unknown groups; for consumer-protocol (KIP-848) groups the
  generation field is the member epoch: UNKNOWN_MEMBER_ID for non-members (epoch -1 is accepted while the group
  is empty), STALE_MEMBER_EPOCH for another epoch, UNSUPPORTED_VERSION for members below v9; v10: topics by
  topic id (resolved through the metadata image; an unknown id gets UNKNOWN_TOPIC_ID on every partition) and the
  response carries the topic ids.
"""

from __future__ import annotations

from kbroker.coordinator.group.shard import CommitPartition, OffsetCommitInput
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import OffsetCommitRequest, OffsetCommitResponse as R
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta

API_KEY = ApiKey.OFFSET_COMMIT
VERSIONS = range(2, 11)


async def handle(ctx, request: OffsetCommitRequest) -> R:
    version = ctx.api_version
    image = ctx.broker.controller.image
    readable = None  # the topics the caller may READ (None: no authorizer)
    if ctx.broker.authorizer is not None:
        if not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return R(topics=[R.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
                R.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                for p in t.partitions]) for t in request.topics])
        names = [t.name for t in request.topics] if version < 10 else [
            image.topics_by_id[t.topic_id].name for t in request.topics if t.topic_id in image.topics_by_id]
        readable = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)
    parts: list[CommitPartition] = []
    layout: list[tuple[str, bytes, list[CommitPartition]]] = []
    for t in request.topics:
        if version >= 10:
            topic = image.topics_by_id.get(t.topic_id)
            name = topic.name if topic is not None else ""
            error = ErrorCode.NONE if topic is not None else ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = image.topics_by_name.get(t.name)
            name = t.name
            error = ErrorCode.NONE if topic is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if readable is not None and (topic is not None or version < 10) and name not in readable:
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # before UNKNOWN_TOPIC_OR_PARTITION, as in Kafka
        topic_parts = []
        for p in t.partitions:
            cp = CommitPartition(topic=name, partition=p.partition_index, offset=p.committed_offset,
                                 leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                                 metadata=p.committed_metadata,
                                 topic_id=topic.topic_id if topic is not None else ZERO_UUID, error_code=error)
            topic_parts.append(cp)
            parts.append(cp)
        layout.append((t.name, t.topic_id, topic_parts))
    commit = OffsetCommitInput(
        group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id, group_instance_id=request.group_instance_id if version >= 7 else None,
        retention_time_ms=request.retention_time_ms if version <= 4 else -1, partitions=parts)
    gc = ctx.broker.group_coordinator
    if readable is None or any(cp.error_code == ErrorCode.NONE for cp in parts):
        # (with nothing the caller may commit Kafka answers without asking the coordinator)
        gc.commit_offsets(request_meta(ctx), commit)
    if any(cp.error_code == ErrorCode.NONE for cp in parts):
        # acknowledged only once every in-sync replica of the group's __consumer_offsets partition holds it
        code = await gc.replicated(request.group_id)
        if code:
            for cp in parts:
                if cp.error_code == ErrorCode.NONE:
                    cp.error_code = code
    return R(topics=[R.OffsetCommitResponseTopic(name=name, topic_id=topic_id, partitions=[
        R.OffsetCommitResponsePartition(partition_index=cp.partition, error_code=cp.error_code) for cp in tps])
        for name, topic_id, tps in layout])
