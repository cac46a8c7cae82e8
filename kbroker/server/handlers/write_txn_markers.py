"""WriteTxnMarkers (API key 27), versions 1-2.

The transaction coordinator of this node writes its markers by calling :func:`write_marker` directly; the
API is for other senders, such as the Admin client's ``abortTransaction`` (a hanging transaction).

Behavior:
* for every marker and partition: a COMMIT (TransactionResult true) or ABORT control batch with the
  producer id, epoch and coordinator epoch is appended as leader (uncompressed, base sequence -1,
  transactional and control bits set); the partition's producer state closes the producer's open transaction,
  an ABORT adds an entry to the segment's ``.txnindex``, and the last stable offset moves on;
* for ``__consumer_offsets`` partitions the group coordinator writes the marker and commits (or drops) the
  producer's pending transactional offsets;
* per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH (the
  marker's epoch is older than the producer's), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch
  than the last marker's), NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR.
Version notes:
* v1: flexible (v0 was removed in Kafka 4.0); v2: TransactionVersion (accepted; version 2 markers are handled
  with the version 1 epoch rule, transactions version 2 is not enabled).
"""

from __future__ import annotations

import logging
import time

from kbroker.coordinator.group.config import OFFSETS_TOPIC
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse as R
from kbroker.protocol.records import ControlType, build_control_batch
from kbroker.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

API_KEY = ApiKey.WRITE_TXN_MARKERS
VERSIONS = range(1, 3)


def write_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int, commit: bool) -> int:
    """Append one transaction marker as leader; returns the error code."""
    if topic == OFFSETS_TOPIC:
        return broker.group_coordinator.complete_transaction(partition, producer_id, producer_epoch,
                                                             coordinator_epoch, commit)
    rm = broker.replica_manager
    try:
        part = rm.get_leader_partition(topic, partition)
        data = build_control_batch(ControlType.COMMIT if commit else ControlType.ABORT, producer_id, producer_epoch,
                                   coordinator_epoch, int(time.time() * 1000))
        rm.append_records(part, memoryview(data), -1, AppendOrigin.COORDINATOR)
    except KafkaError as exc:
        return exc.code
    except OSError as exc:
        log.error("writing a marker to %s-%d failed: %s", topic, partition, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


async def handle(ctx, request: WriteTxnMarkersRequest) -> R:
    resp = R()
    for marker in request.markers:
        out = R.WritableTxnMarkerResult(producer_id=marker.producer_id)
        resp.markers.append(out)
        for t in marker.topics:
            topic_result = R.WritableTxnMarkerTopicResult(name=t.name)
            out.topics.append(topic_result)
            for p in t.partition_indexes:
                error = write_marker(ctx.broker, t.name, p, marker.producer_id, marker.producer_epoch,
                                     marker.coordinator_epoch, marker.transaction_result)
                topic_result.partitions.append(R.WritableTxnMarkerPartitionResult(partition_index=p,
                                                                                  error_code=error))
    return resp
