"""Raft messages through Kafka's wire format: every message of a simulated run is encoded with the generated
codec (Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v17, FetchSnapshot v1), decoded again and handed to the peer, on
disk logs, so the fields the protocol needs survive the wire; plus the refusals a quorum owes a stranger."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from kbroker.controller.raft import messages as rm
from kbroker.controller.raft import wire
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.fetch_request import FetchRequest
from kbroker.protocol.messages.vote_request import VoteRequest
from kbroker.testing.raft_simulation import SimConfig, Simulation

from .test_partition_raft_log import open_log

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def through_wire(dst, msg):
    """Encode and decode ``msg`` as the network would; responses are paired with a stand-in of their request."""
    if isinstance(msg, (rm.VoteRequest, rm.BeginQuorumEpochRequest, rm.EndQuorumEpochRequest, rm.FetchRequest,
                        rm.FetchSnapshotRequest)):
        key, version, req = wire.encode_request(msg, CLUSTER, dst)
        decoded, end = codec.decode(type(req), codec.encode(req, version), version)
        back = wire.decode_request(decoded, CLUSTER, getattr(msg, "correlation_id", 0))
        if isinstance(msg, rm.FetchRequest):
            assert back == rm.FetchRequest(msg.src, msg.epoch, msg.fetch_offset, msg.last_fetched_epoch,
                                           1 << 30, msg.correlation_id, high_watermark=msg.high_watermark)
            return msg  # keep the follower's own batch limit
        assert back == msg
        return back
    if isinstance(msg, rm.VoteResponse):
        request = rm.VoteRequest(dst, msg.candidate_epoch, 0, 0, msg.pre_vote)
    elif isinstance(msg, rm.BeginQuorumEpochResponse):
        request = rm.BeginQuorumEpochRequest(dst, msg.epoch)
    elif isinstance(msg, rm.FetchResponse):
        request = rm.FetchRequest(dst, msg.epoch, msg.fetch_offset, 0, correlation_id=msg.correlation_id)
    elif isinstance(msg, rm.FetchSnapshotResponse):
        request = rm.FetchSnapshotRequest(dst, msg.epoch, msg.snapshot_end_offset, msg.snapshot_epoch, msg.position,
                                          1024, correlation_id=msg.correlation_id)
    else:
        raise AssertionError(msg)
    resp = wire.encode_response(msg)
    version = wire.VERSIONS[{rm.VoteResponse: 52, rm.BeginQuorumEpochResponse: 53, rm.FetchResponse: 1,
                             rm.FetchSnapshotResponse: 59}[type(msg)]]
    decoded, _ = codec.decode(type(resp), codec.encode(resp, version), version)
    back = wire.decode_response(decoded, request, msg.src)
    assert back == msg, (back, msg)
    return back


@pytest.mark.parametrize("seed", range(4))
def test_simulation_through_the_kafka_codec(seed):
    root = Path(tempfile.mkdtemp(prefix="raftwire"))
    try:
        def factory(node_id):
            return open_log(root / str(node_id), node_id)

        def crash(node_id, log):
            log.partition_log.truncate_to(log.flushed_offset)
            log.partition_log.close()
            return factory(node_id)

        r = Simulation(seed, SimConfig(voters=3, observers=1, duration_ms=5_000, settle_ms=6_000),
                       log_factory=factory, crash_log=crash, wire=through_wire).run()
        assert r.committed > 50 and len(r.leaders) >= 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_request_for_another_cluster_is_refused():
    _, _, req = wire.encode_request(rm.VoteRequest(1, 3, 2, 10), "other-cluster", 2)
    with pytest.raises(KafkaError) as e:
        wire.decode_request(req, CLUSTER)
    assert e.value.code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_fetch_for_a_user_topic_is_not_a_raft_fetch():
    req = FetchRequest(cluster_id=CLUSTER, topics=[FetchRequest.FetchTopic(topic_id=b"\x01" * 16, partitions=[
        FetchRequest.FetchPartition(partition=0)])])
    with pytest.raises(KafkaError) as e:
        wire.decode_request(req, CLUSTER)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_ID


def test_vote_for_two_partitions_is_invalid():
    req = VoteRequest(cluster_id=CLUSTER, topics=[VoteRequest.TopicData(topic_name="__cluster_metadata", partitions=[
        VoteRequest.PartitionData(partition_index=0), VoteRequest.PartitionData(partition_index=1)])])
    with pytest.raises(KafkaError) as e:
        wire.decode_request(req, CLUSTER)
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_fetch_carries_the_fetchers_high_watermark_from_v18():
    """Fetch v18 ``HighWatermark`` (KAFKA-14145): what the fetcher knows; absent before v18 (-> None: unknown)."""
    msg = rm.FetchRequest(4, 2, 10, 1, high_watermark=7)
    _, version, req = wire.encode_request(msg, CLUSTER, 1)
    assert version == 18
    for v, want in ((18, 7), (17, None)):
        decoded, _ = codec.decode(type(req), codec.encode(req, v), v)
        assert wire.decode_request(decoded, CLUSTER).high_watermark == want
