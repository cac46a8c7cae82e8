"""WriteTxnMarkers (API key 27), versions 1-2.

The transaction coordinator of this node writes its markers by calling :func:`write_marker` directly: into
partitions this node leads at once, and to a partition led by another broker of a cluster with a
WriteTxnMarkers request to that broker (:class:`RemoteMarkers`). The API serves those requests and other
senders, such as the Admin client's ``abortTransaction`` (a hanging transaction).

Behavior:
* for every marker and partition: a COMMIT (TransactionResult true) or ABORT control batch with the
  producer id, epoch and coordinator epoch is appended as leader (uncompressed, base sequence -1,
  transactional and control bits set); the partition's producer state closes the producer's open transaction,
  an ABORT adds an entry to the segment's ``.txnindex``, and the last stable offset moves on;
* for ``__consumer_offsets`` partitions the group coordinator writes the marker and commits (or drops) the
  producer's pending transactional offsets;
* per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH (the
  marker's epoch is older than the producer's), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch
  than the last marker's), NOT_ENOUGH_REPLICAS (also when the in-sync replicas do not all hold the marker
  within 5 s: it is answered only once they do, as Kafka writes markers with acks=all), KAFKA_STORAGE_ERROR.
Version notes:
* v1: flexible (v0 was removed in Kafka 4.0); v2: TransactionVersion: a version 2 marker's epoch must be above
  the producer's epoch in the partition (a retry of a marker for a transaction already ended there is accepted),
  else INVALID_PRODUCER_EPOCH (KIP-890 part 2); below 2 it must not be older.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kbroker.coordinator.group.config import OFFSETS_TOPIC
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse as R
from kbroker.protocol.records import ControlType, build_control_batch
from kbroker.server.inter_node import NodeChannel, NodeRequestError
from kbroker.storage.producer_state import AppendOrigin

log = logging.getLogger(__name__)

API_KEY = ApiKey.WRITE_TXN_MARKERS
VERSIONS = range(1, 3)
#: how long a WriteTxnMarkers answer waits for the in-sync replicas (the sender's deadline is 10 s)
MARKER_REPLICATION_TIMEOUT_S = 5.0


class RemoteMarkers:
    """Transaction markers for partitions led by other brokers: a WriteTxnMarkers request (v1) to the leader on
    ``inter.broker.listener.name``. The coordinator's marker writer is synchronous and retries a partition every
    200 ms until it gets a final answer, so :meth:`write` starts the request and answers NOT_LEADER_OR_FOLLOWER
    (retriable) until a later call finds it finished and returns the leader's answer."""

    def __init__(self, broker) -> None:  # noqa: ANN001
        self.broker = broker
        self._pending: dict[tuple[int, str, int, int, int, bool], asyncio.Task[int]] = {}
        self._channels = broker.inter_broker_channels(f"kbroker-{broker.node_id}")

    def write(self, leader: int, topic: str, partition: int, producer_id: int, producer_epoch: int,
              coordinator_epoch: int, commit: bool, transaction_version: int = 0) -> int:
        key = (leader, topic, partition, producer_id, producer_epoch, commit)
        task = self._pending.get(key)
        if task is None:
            ch = self._channels.get(self.broker.controller.image, leader)
            if ch is None:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            req = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch, transaction_version=transaction_version, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                    name=topic, partition_indexes=[partition])])])
            self._pending[key] = asyncio.get_running_loop().create_task(self._send(ch, req))
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if not task.done():
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        del self._pending[key]
        return task.result()

    @staticmethod
    async def _send(ch: NodeChannel, req: WriteTxnMarkersRequest) -> int:
        try:
            resp = await ch.request(ApiKey.WRITE_TXN_MARKERS, 2, req, 10.0)
            return resp.markers[0].topics[0].partitions[0].error_code
        except NodeRequestError as exc:
            log.info("transaction marker to node %d: %s", ch.node_id, exc)
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        except (IndexError, AttributeError):
            return ErrorCode.UNKNOWN_SERVER_ERROR

    async def close(self) -> None:
        for task in self._pending.values():
            task.cancel()
        self._pending.clear()
        await self._channels.close()


#: a marker appended and not yet on every in-sync replica, as the coordinator's marker writer answers meanwhile
#: (retriable: it asks again, and gets NONE once the high watermark passed the marker)
MARKER_NOT_REPLICATED = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

MARKER_WAITS_PRUNE_AT = 1000
"""Markers waiting for replication kept before those on partitions this broker no longer leads are dropped."""


def write_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int, commit: bool, transaction_version: int = 0, forward: bool = True) -> int:
    """Append one transaction marker as leader; returns the error code. With ``forward`` (this node's
    coordinator) a partition led by another broker gets it through :class:`RemoteMarkers`; a WriteTxnMarkers
    request is answered here only (NOT_LEADER_OR_FOLLOWER when this node does not lead the partition).

    A marker counts as written once every in-sync replica holds it (Kafka writes markers with acks=all): the
    coordinator's call appends it and answers :data:`MARKER_NOT_REPLICATED` until the partition's high watermark
    passed it, then NONE (NOT_LEADER_OR_FOLLOWER when the leadership moved first: the next leader gets it
    again; a second marker for a producer without an open transaction changes nothing)."""
    remote = broker.remote_markers
    if remote is not None and forward:
        t = broker.controller.image.topics_by_name.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is not None and p.leader != broker.node_id and p.leader >= 0:
            return remote.write(p.leader, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit,
                                transaction_version)
    key = (topic, partition, producer_id, producer_epoch, commit)
    waits = broker.replica_manager.marker_waits
    if len(waits) > MARKER_WAITS_PRUNE_AT:
        _prune(broker, waits)
    if key in waits:
        part, last = waits[key]
        if broker.replica_manager.partitions.get((topic, partition)) is not part or not part.is_leader:
            del waits[key]
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.high_watermark <= last:
            return MARKER_NOT_REPLICATED
        del waits[key]
        return ErrorCode.NONE
    code = _append_marker(broker, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit,
                          transaction_version)
    if code:
        return code
    part = broker.replica_manager.partitions.get((topic, partition))
    if part is None or part.high_watermark >= part.log_end_offset:
        return ErrorCode.NONE
    waits[key] = (part, part.log_end_offset - 1)
    return MARKER_NOT_REPLICATED


def _prune(broker, waits: dict) -> None:
    """Forget waits on partitions this broker no longer leads (a coordinator that moved away never asks again;
    one that does gets NOT_LEADER_OR_FOLLOWER either way)."""
    partitions = broker.replica_manager.partitions
    for key, (part, _) in list(waits.items()):
        if partitions.get((key[0], key[1])) is not part or not part.is_leader:
            del waits[key]


async def _replicated(broker, topic: str, partition: int, timeout_s: float) -> int:
    """Until every in-sync replica of ``topic``-``partition`` holds what was appended (NOT_ENOUGH_REPLICAS when
    that takes longer than ``timeout_s``)."""
    rm = broker.replica_manager
    part = rm.partitions.get((topic, partition))
    if part is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    code = await rm.wait_replicated(part, timeout_s)
    return ErrorCode.NOT_ENOUGH_REPLICAS if code == ErrorCode.REQUEST_TIMED_OUT else code


def _append_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int,
                   coordinator_epoch: int, commit: bool, transaction_version: int = 0) -> int:
    if topic == OFFSETS_TOPIC:
        return broker.group_coordinator.complete_transaction(partition, producer_id, producer_epoch,
                                                             coordinator_epoch, commit)
    rm = broker.replica_manager
    try:
        part = rm.get_leader_partition(topic, partition)
        data = build_control_batch(ControlType.COMMIT if commit else ControlType.ABORT, producer_id, producer_epoch,
                                   coordinator_epoch, int(time.time() * 1000))
        rm.append_records(part, memoryview(data), -1, AppendOrigin.COORDINATOR, transaction_version)
    except KafkaError as exc:
        return exc.code
    except OSError as exc:
        log.error("writing a marker to %s-%d failed: %s", topic, partition, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


async def handle(ctx, request: WriteTxnMarkersRequest) -> R:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.ALTER) and cluster_denied(ctx, AclOperation.CLUSTER_ACTION):
        # as Kafka: ALTER or CLUSTER_ACTION on the cluster, else every partition is refused
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[R.WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for p in t.partition_indexes])
            for t in m.topics]) for m in request.markers])
    resp = R()
    for marker in request.markers:
        out = R.WritableTxnMarkerResult(producer_id=marker.producer_id)
        resp.markers.append(out)
        for t in marker.topics:
            topic_result = R.WritableTxnMarkerTopicResult(name=t.name)
            out.topics.append(topic_result)
            for p in t.partition_indexes:
                error = _append_marker(ctx.broker, t.name, p, marker.producer_id, marker.producer_epoch,
                                       marker.coordinator_epoch, marker.transaction_result,
                                       marker.transaction_version if ctx.api_version >= 2 else 0)
                if not error:  # answered once every in-sync replica holds it (acks=all)
                    error = await _replicated(ctx.broker, t.name, p, MARKER_REPLICATION_TIMEOUT_S)
                topic_result.partitions.append(R.WritableTxnMarkerPartitionResult(partition_index=p,
                                                                                  error_code=error))
    return resp
