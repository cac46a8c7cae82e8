"""ListOffsets (API key 2), versions 1-11.

Behavior, per partition (timestamps are Kafka's special values or a time in ms):
* -2 earliest: the log start offset; -4 earliest local: the same (no tiered storage);
* -1 latest: the high watermark (read_uncommitted) or the last stable offset (read_committed);
* -3 max timestamp (v7+): the offset and timestamp of the record with the largest timestamp;
* -5 latest tiered (v9+): -1 (no tiered storage); -6 earliest pending upload (v11+): -1;
* a time: the first offset whose record timestamp is >= it (only offsets below the bound of the isolation
  level count), else offset -1 and timestamp -1;
* CurrentLeaderEpoch (v4+) fenced/unknown checks as for Fetch.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.LIST_OFFSETS
VERSIONS = range(1, 12)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6


async def handle(ctx, request: ListOffsetsRequest) -> ListOffsetsResponse:
    rm = ctx.broker.replica_manager
    version = ctx.api_version
    read_committed = version >= 2 and request.isolation_level == 1
    resp = ListOffsetsResponse()
    allowed = None  # the topics the caller may DESCRIBE (None: no authorizer)
    if ctx.broker.authorizer is not None:
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                          [t.name for t in request.topics])
    for t in request.topics:
        out_t = ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name)
        resp.topics.append(out_t)
        for p in t.partitions:
            out = ListOffsetsResponse.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                                   timestamp=-1, offset=-1, leader_epoch=-1)
            out_t.partitions.append(out)
            try:
                if allowed is not None and t.name not in allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                part = rm.get_partition(t.name, p.partition_index)
                part.check_leader_epoch(p.current_leader_epoch)  # before leadership, as Kafka
                if not part.is_leader:
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                upper = part.last_stable_offset if read_committed else part.high_watermark
                ts = p.timestamp
                if ts == LATEST:
                    out.offset = upper
                    out.leader_epoch = part.leader_epoch
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    out.offset = part.log_start_offset
                    out.leader_epoch = part.log.leader_epoch_cache.epoch_for_offset(out.offset)
                elif ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
                    out.offset = -1
                elif ts == MAX_TIMESTAMP or ts >= 0:
                    found = part.log.fetch_offset_by_timestamp(ts)
                    if found is not None and found[0] < upper:
                        out.offset, out.timestamp, out.leader_epoch = found
                elif ts < 0:
                    raise KafkaError(ErrorCode.INVALID_REQUEST if version >= 1 else ErrorCode.UNKNOWN_SERVER_ERROR)
            except KafkaError as exc:
                out.error_code = exc.code
    return resp
