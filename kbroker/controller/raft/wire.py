"""Raft messages on the wire: KRaft's Vote (52, v2), BeginQuorumEpoch (53, v1), EndQuorumEpoch (54, v1),
Fetch (1, v18, with the ``SnapshotId`` of KIP-630 and the fetcher's ``HighWatermark`` of KAFKA-14145) and
FetchSnapshot (59, v1) on ``__cluster_metadata`` partition 0, mapped to and from the state machine's messages
(:mod:`kbroker.controller.raft.messages`).

Requests carry the ``cluster_id``; a request for another cluster is refused with ``INCONSISTENT_CLUSTER_ID``
(:func:`decode_request` raises ``KafkaError``). Kafka's responses do not repeat what they answer (the candidate
epoch of a Vote, the fetch offset), so :func:`decode_response` takes the request it answers: the network layer
pairs them by correlation id, as every Kafka client does. Fetched batches travel as the records field, byte for
byte as stored (:class:`~kbroker.controller.raft.partition_log.PartitionRaftLog` entries).

Source: KIP-595 (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch for the metadata log), KIP-996 (``pre_vote``),
KIP-853 (directory ids, endpoints; sent as zero/empty here: static voters).
"""

from __future__ import annotations

from typing import Any

from kbroker.controller.raft import messages as rm
from kbroker.controller.raft.log import LogEntry
from kbroker.controller.uuids import METADATA_TOPIC_ID
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.begin_quorum_epoch_request import BeginQuorumEpochRequest
from kbroker.protocol.messages.begin_quorum_epoch_response import BeginQuorumEpochResponse
from kbroker.protocol.messages.end_quorum_epoch_request import EndQuorumEpochRequest
from kbroker.protocol.messages.fetch_request import FetchRequest
from kbroker.protocol.messages.fetch_response import FetchResponse
from kbroker.protocol.messages.fetch_snapshot_request import FetchSnapshotRequest
from kbroker.protocol.messages.fetch_snapshot_response import FetchSnapshotResponse
from kbroker.protocol.messages.vote_request import VoteRequest
from kbroker.protocol.messages.vote_response import VoteResponse
from kbroker.protocol.records import iter_batches

METADATA_TOPIC = "__cluster_metadata"
VERSIONS = {VoteRequest.API_KEY: 2, BeginQuorumEpochRequest.API_KEY: 1, EndQuorumEpochRequest.API_KEY: 1,
            FetchRequest.API_KEY: 18, FetchSnapshotRequest.API_KEY: 1}
"""The version kbroker sends of each Raft API."""
HW_UNSUPPORTED = 2**63 - 1
"""The Fetch ``HighWatermark`` of a fetcher that does not send its own (the field's default; before v18 it is not on
the wire at all)."""

_ERRORS = {"NONE": 0, "FENCED_LEADER_EPOCH": ErrorCode.FENCED_LEADER_EPOCH,
           "UNKNOWN_LEADER_EPOCH": ErrorCode.UNKNOWN_LEADER_EPOCH,
           "NOT_LEADER_OR_FOLLOWER": ErrorCode.NOT_LEADER_OR_FOLLOWER,
           "SNAPSHOT_NOT_FOUND": ErrorCode.SNAPSHOT_NOT_FOUND, "POSITION_OUT_OF_RANGE": ErrorCode.POSITION_OUT_OF_RANGE}
_ERROR_NAMES = {int(v): k for k, v in _ERRORS.items()}


def _check_cluster(cluster_id: str | None, expected: str) -> None:
    if cluster_id is not None and cluster_id != expected:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                         f"request for cluster {cluster_id!r}, this quorum is cluster {expected!r}")


def _one_partition(topics: list[Any], name_attr: str = "topic_name") -> Any:
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a Raft request names exactly one partition")
    topic = topics[0]
    name = getattr(topic, name_attr, METADATA_TOPIC)
    if name_attr == "topic_id":
        if name != METADATA_TOPIC_ID:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "Raft fetches are for __cluster_metadata only")
    elif name != METADATA_TOPIC:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Raft requests are for {METADATA_TOPIC}, not {name}")
    part = topic.partitions[0]
    if getattr(part, "partition_index", getattr(part, "partition", 0)) != 0:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{METADATA_TOPIC} has partition 0 only")
    return part


# ---------------------------------------------------------------------------------------------------- requests
def encode_request(msg: Any, cluster_id: str, dst: int, max_bytes: int = 8 * 1024 * 1024) -> tuple[int, int, Any]:
    """A state-machine request -> ``(api_key, version, generated request)`` for node ``dst``."""
    if isinstance(msg, rm.VoteRequest):
        req = VoteRequest(cluster_id=cluster_id, voter_id=dst, topics=[VoteRequest.TopicData(
            topic_name=METADATA_TOPIC, partitions=[VoteRequest.PartitionData(
                partition_index=0, replica_epoch=msg.candidate_epoch, replica_id=msg.src,
                last_offset_epoch=msg.last_offset_epoch, last_offset=msg.last_offset, pre_vote=msg.pre_vote)])])
    elif isinstance(msg, rm.BeginQuorumEpochRequest):
        req = BeginQuorumEpochRequest(cluster_id=cluster_id, voter_id=dst, topics=[BeginQuorumEpochRequest.TopicData(
            topic_name=METADATA_TOPIC, partitions=[BeginQuorumEpochRequest.PartitionData(
                partition_index=0, leader_id=msg.src, leader_epoch=msg.epoch)])])
    elif isinstance(msg, rm.EndQuorumEpochRequest):
        req = EndQuorumEpochRequest(cluster_id=cluster_id, topics=[EndQuorumEpochRequest.TopicData(
            topic_name=METADATA_TOPIC, partitions=[EndQuorumEpochRequest.PartitionData(
                partition_index=0, leader_id=msg.src, leader_epoch=msg.epoch,
                preferred_candidates=[EndQuorumEpochRequest.ReplicaInfo(candidate_id=c)
                                      for c in msg.preferred_successors])])])
    elif isinstance(msg, rm.FetchRequest):
        req = FetchRequest(cluster_id=cluster_id, replica_state=FetchRequest.ReplicaState(
            replica_id=msg.src, replica_epoch=-1), max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
            topics=[FetchRequest.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=msg.epoch, fetch_offset=msg.fetch_offset,
                last_fetched_epoch=msg.last_fetched_epoch, partition_max_bytes=max_bytes,
                replica_directory_id=msg.directory_id,
                high_watermark=HW_UNSUPPORTED if msg.high_watermark is None else msg.high_watermark)])])
    elif isinstance(msg, rm.FetchSnapshotRequest):
        req = FetchSnapshotRequest(cluster_id=cluster_id, replica_id=msg.src, max_bytes=msg.max_bytes, topics=[
            FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[FetchSnapshotRequest.PartitionSnapshot(
                partition=0, current_leader_epoch=msg.epoch, snapshot_id=FetchSnapshotRequest.SnapshotId(
                    end_offset=msg.snapshot_end_offset, epoch=msg.snapshot_epoch), position=msg.position)])])
    else:
        raise TypeError(f"not a Raft request: {msg!r}")
    return type(req).API_KEY, VERSIONS[type(req).API_KEY], req


def decode_request(req: Any, cluster_id: str, correlation_id: int = 0) -> Any:
    """A generated request received from a peer -> the state machine's request.

    Raises ``KafkaError`` (INCONSISTENT_CLUSTER_ID, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID)
    for a request the quorum must refuse; the caller answers with that code."""
    _check_cluster(req.cluster_id, cluster_id)
    if isinstance(req, VoteRequest):
        p = _one_partition(req.topics)
        return rm.VoteRequest(p.replica_id, p.replica_epoch, p.last_offset_epoch, p.last_offset, p.pre_vote)
    if isinstance(req, BeginQuorumEpochRequest):
        p = _one_partition(req.topics)
        return rm.BeginQuorumEpochRequest(p.leader_id, p.leader_epoch)
    if isinstance(req, EndQuorumEpochRequest):
        p = _one_partition(req.topics)
        successors = tuple(c.candidate_id for c in p.preferred_candidates) or tuple(p.preferred_successors)
        return rm.EndQuorumEpochRequest(p.leader_id, p.leader_epoch, successors)
    if isinstance(req, FetchRequest):
        p = _one_partition(req.topics, "topic_id")
        replica = req.replica_state.replica_id if req.replica_state.replica_id >= 0 else req.replica_id
        return rm.FetchRequest(replica, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                               max_entries=1 << 30, correlation_id=correlation_id,
                               directory_id=bytes(p.replica_directory_id),
                               high_watermark=None if p.high_watermark == HW_UNSUPPORTED else p.high_watermark)
    if isinstance(req, FetchSnapshotRequest):
        p = _one_partition(req.topics, "name")
        return rm.FetchSnapshotRequest(req.replica_id, p.current_leader_epoch, p.snapshot_id.end_offset,
                                       p.snapshot_id.epoch, p.position, req.max_bytes, correlation_id)
    raise TypeError(f"not a Raft request: {type(req).__name__}")


# --------------------------------------------------------------------------------------------------- responses
def encode_response(resp: Any) -> Any:
    """A state-machine response -> the generated response to send back."""
    if isinstance(resp, rm.VoteResponse):
        return VoteResponse(topics=[VoteResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[
            VoteResponse.PartitionData(partition_index=0, error_code=_ERRORS[resp.error], leader_id=resp.leader_id,
                                       leader_epoch=resp.epoch, vote_granted=resp.vote_granted)])])
    if isinstance(resp, rm.BeginQuorumEpochResponse):
        return BeginQuorumEpochResponse(topics=[BeginQuorumEpochResponse.TopicData(
            topic_name=METADATA_TOPIC, partitions=[BeginQuorumEpochResponse.PartitionData(
                partition_index=0, error_code=_ERRORS[resp.error], leader_id=resp.leader_id,
                leader_epoch=resp.epoch)])])
    if isinstance(resp, rm.FetchResponse):
        records = b"".join(bytes(e.data) for e in resp.entries)  # type: ignore[arg-type]
        return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic_id=METADATA_TOPIC_ID, partitions=[FetchResponse.PartitionData(
                partition_index=0, error_code=_ERRORS[resp.error], high_watermark=resp.high_watermark,
                diverging_epoch=FetchResponse.EpochEndOffset(resp.diverging_epoch, resp.diverging_end_offset),
                current_leader=FetchResponse.LeaderIdAndEpoch(resp.leader_id, resp.epoch),
                snapshot_id=FetchResponse.SnapshotId(resp.snapshot_end_offset, resp.snapshot_epoch),
                records=records)])])
    if isinstance(resp, rm.FetchSnapshotResponse):
        return FetchSnapshotResponse(topics=[FetchSnapshotResponse.TopicSnapshot(
            name=METADATA_TOPIC, partitions=[FetchSnapshotResponse.PartitionSnapshot(
                index=0, error_code=_ERRORS[resp.error],
                snapshot_id=FetchSnapshotResponse.SnapshotId(resp.snapshot_end_offset, resp.snapshot_epoch),
                current_leader=FetchSnapshotResponse.LeaderIdAndEpoch(resp.leader_id, resp.epoch),
                size=resp.size, position=resp.position, unaligned_records=resp.data)])])
    raise TypeError(f"not a Raft response: {resp!r}")


def decode_response(resp: Any, request: Any, src: int) -> Any:
    """A generated response from node ``src`` -> the state machine's response to ``request`` (its own request,
    as it was sent). A top-level error, or one the state machine does not know, yields ``None``: the request
    failed and the state machine retries after its timeout."""
    if resp.error_code:
        return None
    if isinstance(request, rm.VoteRequest):
        p = resp.topics[0].partitions[0]
        if p.error_code:
            return None
        return rm.VoteResponse(src, p.leader_epoch, p.leader_id, p.vote_granted, request.candidate_epoch,
                               request.pre_vote)
    if isinstance(request, rm.BeginQuorumEpochRequest):
        p = resp.topics[0].partitions[0]
        error = _ERROR_NAMES.get(p.error_code)
        return None if error is None else rm.BeginQuorumEpochResponse(src, p.leader_epoch, p.leader_id, error)
    if isinstance(request, rm.FetchRequest):
        p = resp.responses[0].partitions[0]
        error = _ERROR_NAMES.get(p.error_code)
        if error is None:
            return None
        entries = tuple(LogEntry(b.base_offset, b.partition_leader_epoch, bytes(b), b.last_offset_delta + 1)
                        for b in iter_batches(p.records or b""))
        return rm.FetchResponse(src, p.current_leader.leader_epoch, p.current_leader.leader_id, error,
                                request.fetch_offset, p.high_watermark, p.diverging_epoch.epoch,
                                p.diverging_epoch.end_offset, entries, request.correlation_id,
                                p.snapshot_id.end_offset, p.snapshot_id.epoch)
    if isinstance(request, rm.FetchSnapshotRequest):
        p = resp.topics[0].partitions[0]
        error = _ERROR_NAMES.get(p.error_code)
        if error is None:
            return None
        return rm.FetchSnapshotResponse(src, p.current_leader.leader_epoch, p.current_leader.leader_id, error,
                                        p.snapshot_id.end_offset, p.snapshot_id.epoch, p.size, p.position,
                                        bytes(p.unaligned_records or b""), request.correlation_id)
    return None  # EndQuorumEpoch: nothing to learn from the answer
