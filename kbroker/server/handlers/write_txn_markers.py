"""WriteTxnMarkers (API key 27), versions 1-2.

The transaction coordinator of this node hands each marker to :func:`send_marker`: a partition this node leads
gets it appended at once (the answer follows once its in-sync replicas hold it), a partition led by another
broker of a cluster goes to :class:`TransactionMarkerSender`, which sends one WriteTxnMarkers request per
destination broker carrying every marker queued for it (all partitions of all transactions) and answers each
marker from that broker's response. The API serves those requests and other senders, such as the Admin
client's ``abortTransaction`` (a hanging transaction).

Behavior:
* for every marker and partition: a COMMIT (TransactionResult true) or ABORT control batch with the
  producer id, epoch and coordinator epoch is appended as leader (uncompressed, base sequence -1,
  transactional and control bits set); the partition's producer state closes the producer's open transaction,
  an ABORT adds an entry to the segment's ``.txnindex``, and the last stable offset moves on;
* for ``__consumer_offsets`` partitions the group coordinator writes the marker and commits (or drops) the
  producer's pending transactional offsets;
* every marker of the request is appended first, then the answer waits for the in-sync replicas of all of
  them at once (Kafka writes markers with acks=all);
* per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH (the
  marker's epoch is older than the producer's), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch
  than the last marker's), NOT_ENOUGH_REPLICAS (the in-sync replicas do not all hold the marker within 5 s),
  KAFKA_STORAGE_ERROR.
Version notes:
* v1: flexible (v0 was removed in Kafka 4.0); v2: TransactionVersion: a version 2 marker's epoch must be above
  the producer's epoch in the partition (a retry of a marker for a transaction already ended there is accepted),
  else INVALID_PRODUCER_EPOCH (KIP-890 part 2); below 2 it must not be older.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from kbroker.log_limit import LogLimiter
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
#: the sender's deadline for a WriteTxnMarkers request (s)
MARKER_REQUEST_TIMEOUT_S = 10.0
#: at most one log line per this many seconds for one kind of failed marker request (the others are counted)
MARKER_LOG_INTERVAL_S = 10.0

#: done(error code): the answer for one marker
MarkerDone = Callable[[int], None]
#: replication waits of markers appended here for this node's coordinator (a strong reference until done)
_local_waits: set[asyncio.Task[int]] = set()


@dataclass(slots=True)
class _QueuedMarker:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    transaction_version: int
    done: MarkerDone


class TransactionMarkerSender:
    """Markers for partitions led by other brokers (Kafka's transaction marker channel): markers queued during
    one turn of the event loop are sent as one WriteTxnMarkers request (v2) per destination broker on
    ``inter.broker.listener.name``, every broker's at once; each marker's ``done`` gets its partition's error
    from the response. A failed request (the broker unreachable or not answering within
    :data:`MARKER_REQUEST_TIMEOUT_S`) answers its markers NETWORK_EXCEPTION or REQUEST_TIMED_OUT (retriable:
    the coordinator sends them again after a backoff, to the leader it then finds). Failures are logged at most
    once per :data:`MARKER_LOG_INTERVAL_S` per destination."""

    def __init__(self, broker) -> None:  # noqa: ANN001
        self.broker = broker
        self._queues: dict[int, list[_QueuedMarker]] = {}
        self._drain_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._channels = broker.inter_broker_channels(f"kbroker-{broker.node_id}")
        #: destination -> (monotonic time of the last line logged, failures not logged since)
        #: failed requests: one WARNING per destination broker and interval
        self._log_state = LogLimiter(MARKER_LOG_INTERVAL_S)
        #: WriteTxnMarkers requests sent (tests, benchmarks)
        self.requests_sent = 0

    def send(self, leader: int, topic: str, partition: int, producer_id: int, producer_epoch: int,
             coordinator_epoch: int, commit: bool, transaction_version: int, done: MarkerDone) -> None:
        """Queue one marker for broker ``leader``; ``done`` is called once, from the event loop."""
        self._queues.setdefault(leader, []).append(_QueuedMarker(
            topic, partition, producer_id, producer_epoch, coordinator_epoch, commit, transaction_version, done))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        queues, self._queues = self._queues, {}
        for leader, entries in queues.items():
            ch = self._channels.get(self.broker.controller.image, leader)
            if ch is None:  # not registered, fenced: the coordinator finds the leader again when it retries
                self._failed(leader, f"broker {leader} is not available", len(entries))
                for e in entries:
                    e.done(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            task = asyncio.get_running_loop().create_task(self._send(ch, entries))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _request(entries: list[_QueuedMarker]) -> WriteTxnMarkersRequest:
        markers: dict[tuple[int, int, bool, int, int], dict[str, list[int]]] = {}
        for e in entries:
            key = (e.producer_id, e.producer_epoch, e.commit, e.coordinator_epoch, e.transaction_version)
            markers.setdefault(key, {}).setdefault(e.topic, []).append(e.partition)
        return WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            transaction_version=tv, topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                name=topic, partition_indexes=partitions) for topic, partitions in topics.items()])
            for (pid, epoch, commit, coordinator_epoch, tv), topics in markers.items()])

    async def _send(self, ch: NodeChannel, entries: list[_QueuedMarker]) -> None:
        results: dict[tuple[int, str, int], int] = {}
        failure = ErrorCode.NONE
        self.requests_sent += 1
        try:
            resp = await ch.request(ApiKey.WRITE_TXN_MARKERS, 2, self._request(entries), MARKER_REQUEST_TIMEOUT_S)
            for m in resp.markers:
                for t in m.topics:
                    for p in t.partitions:
                        results[(m.producer_id, t.name, p.partition_index)] = p.error_code
        except NodeRequestError as exc:
            failure = ErrorCode.REQUEST_TIMED_OUT if "timed out" in str(exc) else ErrorCode.NETWORK_EXCEPTION
            self._failed(ch.node_id, f"WriteTxnMarkers to broker {ch.node_id} failed ({exc})", len(entries))
        except asyncio.CancelledError:
            return  # shut down: nobody waits any more
        for e in entries:
            code = failure or results.get((e.producer_id, e.topic, e.partition), ErrorCode.UNKNOWN_SERVER_ERROR)
            try:
                e.done(code)
            except Exception:
                log.exception("transaction marker callback failed")

    def _failed(self, destination: int, what: str, markers: int) -> None:
        allowed = self._log_state.allow(destination, time.monotonic())
        if allowed is None:
            return
        suppressed, since = allowed
        more = f"; {suppressed} more such failures in the last {since:.0f} s" if suppressed else ""
        log.warning("%s: %d transaction marker(s) will be sent again%s", what, markers, more)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
        self._queues.clear()
        await self._channels.close()


def send_marker(broker, topic: str, partition: int, producer_id: int, producer_epoch: int,
                coordinator_epoch: int, commit: bool, transaction_version: int, done: MarkerDone) -> int | None:
    """Write one transaction marker for this node's transaction coordinator. Returns the error code when the
    answer is known at once; None when ``done`` will get it (called once, later, from the event loop).

    A partition led by another broker goes to ``broker.marker_sender`` (:class:`TransactionMarkerSender`). On a
    partition led here the marker is appended and counts as written once every in-sync replica holds it (Kafka
    writes markers with acks=all): NONE, NOT_LEADER_OR_FOLLOWER when the leadership moved first (the next leader
    gets it again; a second marker for a producer without an open transaction changes nothing) or
    NOT_ENOUGH_REPLICAS after :data:`MARKER_REPLICATION_TIMEOUT_S`."""
    sender = broker.marker_sender
    if sender is not None:
        t = broker.controller.image.topics_by_name.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if p is not None and p.leader != broker.node_id and p.leader >= 0:
            sender.send(p.leader, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit,
                        transaction_version, done)
            return None
    code = _append_marker(broker, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit,
                          transaction_version)
    if code:
        return code
    part = broker.replica_manager.partitions.get((topic, partition))
    if part is None or part.high_watermark >= part.log_end_offset:
        return ErrorCode.NONE
    task = asyncio.get_running_loop().create_task(
        _replicated(broker, topic, partition, MARKER_REPLICATION_TIMEOUT_S))
    _local_waits.add(task)

    def finished(t: asyncio.Task[int]) -> None:
        _local_waits.discard(t)
        if not t.cancelled():
            done(t.result() if t.exception() is None else ErrorCode.UNKNOWN_SERVER_ERROR)

    task.add_done_callback(finished)
    return None


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
    appended: list[tuple[R.WritableTxnMarkerPartitionResult, str, int]] = []
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
                result = R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=error)
                topic_result.partitions.append(result)
                if not error:
                    appended.append((result, t.name, p))
    # answered once every in-sync replica holds every marker appended (acks=all), waiting for all at once
    waits = list(dict.fromkeys((topic, p) for _, topic, p in appended))
    codes = dict(zip(waits, await asyncio.gather(*(_replicated(ctx.broker, topic, p, MARKER_REPLICATION_TIMEOUT_S)
                                                   for topic, p in waits))))
    for result, topic, p in appended:
        result.error_code = codes[(topic, p)]
    return resp
