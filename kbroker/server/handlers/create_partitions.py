"""CreatePartitions (API key 37), versions 0-3.

Behavior: each topic goes to the quorum controller, which adds PartitionRecords for the new partitions
(rules and messages as Kafka's: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS when the count is not an
increase, INVALID_REPLICA_ASSIGNMENT for a bad manual assignment, INVALID_REQUEST for a topic named twice);
``validate_only`` checks without writing. The broker creates the new partition logs when it applies the
committed records, before this response is sent, so produce and fetch work on them at once.
Version notes: v2 flexible; v3 may return THROTTLING_QUOTA_EXCEEDED in Kafka (kbroker has no quotas).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse as R

API_KEY = ApiKey.CREATE_PARTITIONS
VERSIONS = range(0, 4)


async def handle(ctx, request: CreatePartitionsRequest) -> R:
    topics = [(t.name, t.count, [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None)
              for t in request.topics]
    results = ctx.broker.controller.create_partitions(topics, validate_only=request.validate_only)
    return R(results=[R.CreatePartitionsTopicResult(name=name, error_code=code, error_message=msg)
                      for name, code, msg in results])
