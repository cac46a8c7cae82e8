"""DescribeProducers (API key 61), version 0.

Behavior:
* per partition (this node must lead it: NOT_LEADER_OR_FOLLOWER, else UNKNOWN_TOPIC_OR_PARTITION): every
  producer id the partition's producer state knows, with its epoch, last sequence, last timestamp, the
  coordinator epoch of its last marker and the first offset of its open transaction (-1: none).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DescribeProducersRequest, DescribeProducersResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_PRODUCERS
VERSIONS = range(0, 1)


async def handle(ctx, request: DescribeProducersRequest) -> R:
    rm = ctx.broker.replica_manager
    resp = R()
    allowed = None  # the topics the caller may READ (None: no authorizer)
    if ctx.broker.authorizer is not None:
        allowed = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics])
    for t in request.topics:
        out = R.TopicResponse(name=t.name)
        resp.topics.append(out)
        for index in t.partition_indexes:
            pr = R.PartitionResponse(partition_index=index)
            out.partitions.append(pr)
            try:
                if allowed is not None and t.name not in allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                part = rm.get_leader_partition(t.name, index)
            except KafkaError as exc:
                pr.error_code = exc.code
                pr.error_message = ErrorCode(exc.code).name
                continue
            for entry in sorted(part.log.producer_state.producers.values(), key=lambda e: e.producer_id):
                pr.active_producers.append(R.ProducerState(
                    producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=entry.current_txn_first_offset))
    return resp
