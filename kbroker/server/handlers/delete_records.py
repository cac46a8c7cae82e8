"""DeleteRecords (API key 21), versions 0-2.

Behavior, per partition (as Kafka's ``ReplicaManager.deleteRecords`` / ``Partition.deleteRecordsOnLeader``):
* unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; not the leader NOT_LEADER_OR_FOLLOWER;
* a topic whose ``cleanup.policy`` lacks ``delete`` (compact only) POLICY_VIOLATION;
* offset -1 means the high watermark; any other negative offset, or one above the high watermark,
  OFFSET_OUT_OF_RANGE;
* otherwise the log start offset moves up to the offset (never down) and ``LowWatermark`` is the new log
  start offset. Fetches below it get OFFSET_OUT_OF_RANGE and ListOffsets earliest returns it at once; whole
  segments below it are deleted by the next retention pass (``log.retention.check.interval.ms``). The log
  start offset checkpoint is written before the response, so the deletion survives a crash.
With one replica there is nothing to wait for: ``TimeoutMs`` is not used.
Version notes: v2 flexible.
"""

from __future__ import annotations

import logging

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

log = logging.getLogger(__name__)

API_KEY = ApiKey.DELETE_RECORDS
VERSIONS = range(0, 3)

HIGH_WATERMARK = -1


async def handle(ctx, request: DeleteRecordsRequest) -> R:
    rm = ctx.broker.replica_manager
    resp = R()
    moved = False
    allowed = None  # the topics the caller may DELETE records of (None: no authorizer)
    if ctx.broker.authorizer is not None:
        allowed = common.authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in request.topics])
    for t in request.topics:
        out_t = R.DeleteRecordsTopicResult(name=t.name)
        resp.topics.append(out_t)
        for p in t.partitions:
            out = R.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1)
            out_t.partitions.append(out)
            try:
                if allowed is not None and t.name not in allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                part = rm.get_leader_partition(t.name, p.partition_index)
                plog = part.log
                if not plog.config.delete:
                    raise KafkaError(ErrorCode.POLICY_VIOLATION)
                offset = part.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                if offset < 0 or offset > part.high_watermark:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                if offset > plog.log_start_offset:
                    plog.advance_log_start_offset(offset)
                    moved = True
                out.low_watermark = plog.log_start_offset
            except KafkaError as exc:
                out.error_code = exc.code
    if moved:
        try:
            ctx.broker.log_manager.checkpoint()
        except OSError as exc:  # the periodic checkpoint will retry
            log.warning("could not write the log start offset checkpoint: %s", exc)
    return resp
