"""KIP-392 on one broker: a follower's answers to consumers' fetches, and the leader's preferred read replica.

The follower (node 2 of replicas 1, 2, 3; leader 1, leader epoch 3) holds offsets 0-4 with a high watermark of 3:
consumers read up to the high watermark, get nothing between it and the log end offset, OFFSET_OUT_OF_RANGE
outside the log, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for an older / newer epoch, NOT_LEADER_OR_FOLLOWER
before Fetch v11; a long poll is answered once the replica fetcher moves the high watermark. The leader (node 1)
names a follower in the consumer's rack only if that follower is in the ISR, unfenced, and holds the offset.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from kbroker.controller.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import FetchRequest, FetchResponse
from kbroker.protocol.records import build_batch
from kbroker.server.handlers.fetch import _read_all, handle
from kbroker.server.replica_fetcher import apply_fetched
from kbroker.server.replica_manager import FollowerState, Partition, ReplicaManager
from kbroker.server.replica_selector import RACK_AWARE, preferred_read_replica
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

TOPIC_ID = bytes(range(1, 17))
EPOCH = 3
RACKS = {1: "rack-1", 2: "rack-2", 3: "rack-3"}


def _image(fenced: frozenset[int] = frozenset()) -> MetadataImage:
    topic = TopicImage("t", TOPIC_ID, {0: PartitionImage(0, (1, 2, 3), (1, 2, 3), 1, EPOCH, 1)})
    brokers = {i: BrokerRegistration(i, bytes(16), (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + i, 0),), RACKS[i],
                                     i in fenced) for i in RACKS}
    return MetadataImage(cluster_id="c", topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic},
                         brokers=brokers)


def _replica(tmp_path, local_id: int, selector: str = ""):
    """Partition t-0 on node ``local_id`` (leader 1), offsets 0-4, and a ctx for the Fetch handler."""
    now_ms = int(time.time() * 1000)
    plog = PartitionLog(tmp_path / f"t-0-{local_id}", LogConfig(), topic_id=TOPIC_ID, recovery_point=0,
                        clean_shutdown=False, now_ms=now_ms)
    for i in range(5):
        plog.append_as_leader(build_batch([(b"k", b"v%d" % i)]), EPOCH, now_ms)
    part = Partition("t", 0, TOPIC_ID, plog, 1, EPOCH, 1, [1, 2, 3], [1, 2, 3], local_id=local_id)
    if local_id == 1:
        part.make_leader(now_ms)
    else:
        plog.high_watermark = 3

    def get_leader_partition(topic: str, partition: int) -> Partition:
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    rm = SimpleNamespace(get_partition=lambda t, p: part, get_leader_partition=get_leader_partition,
                         replica_selector=selector, maybe_expand_isr=lambda part, r: None,
                         wait_for_data=lambda parts, timeout, appends=False: ReplicaManager.wait_for_data(
                             None, parts, timeout, appends))  # type: ignore[arg-type]
    broker = SimpleNamespace(controller=SimpleNamespace(image=_image()), replica_manager=rm, metadata_quorum=None,
                             replication_quotas=SimpleNamespace(leader=None), node_id=part.local_id,
                             advertised_listener=lambda name: None, authorizer=None)
    return SimpleNamespace(broker=broker, api_version=17, listener_name="PLAINTEXT"), part


@pytest.fixture
def follower(tmp_path):
    ctx, part = _replica(tmp_path, 2)
    yield ctx, part
    part.log.close()


@pytest.fixture
def leader(tmp_path):
    ctx, part = _replica(tmp_path, 1, RACK_AWARE)
    yield ctx, part
    part.log.close()


def _consumer_fetch(offset: int, epoch: int = EPOCH, rack: str = "", max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, rack_id=rack,
                        topics=[FetchRequest.FetchTopic(topic="t", topic_id=TOPIC_ID, partitions=[
                            FetchRequest.FetchPartition(partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                                                        partition_max_bytes=1 << 20)])])


def _answer(ctx, request: FetchRequest, version: int = 17):
    resp, total, _, _ = _read_all(ctx, request, version)
    return resp.responses[0].partitions[0], total


# ---- the follower ------------------------------------------------------------------------------------

def test_follower_serves_a_consumer_up_to_its_high_watermark(follower):
    ctx, part = follower
    for version in (11, 13, 17):
        pd, total = _answer(ctx, _consumer_fetch(0), version)
        assert pd.error_code == ErrorCode.NONE
        assert (pd.high_watermark, pd.log_start_offset, pd.preferred_read_replica) == (3, 0, -1)
        assert total == part.log.read(0, 1 << 20, 3).size > 0  # offsets 0-2, not 3-4 (above the high watermark)
        assert total < part.log.read(0, 1 << 20).size


def test_follower_answers_nothing_between_its_high_watermark_and_log_end(follower):
    ctx, _ = follower
    for offset in (3, 4, 5):
        pd, total = _answer(ctx, _consumer_fetch(offset))
        assert (pd.error_code, total, len(pd.records)) == (ErrorCode.NONE, 0, 0)


def test_follower_offset_outside_its_log_is_out_of_range(follower):
    ctx, _ = follower
    pd, _ = _answer(ctx, _consumer_fetch(6))
    assert pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_follower_checks_the_consumer_leader_epoch(follower):
    ctx, _ = follower
    assert _answer(ctx, _consumer_fetch(0, epoch=EPOCH - 1))[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    # KIP-951: the answer names the leader and (v16+) its address
    resp = _read_all(ctx, _consumer_fetch(0, epoch=EPOCH - 1), 17)[0]
    pd = resp.responses[0].partitions[0]
    assert (pd.current_leader.leader_id, pd.current_leader.leader_epoch) == (1, EPOCH)
    assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [(1, "127.0.0.1", 9001)]
    # as Kafka's: no hint before v16, although CurrentLeader exists from v12
    resp = _read_all(ctx, _consumer_fetch(0, epoch=EPOCH - 1), 15)[0]
    pd = resp.responses[0].partitions[0]
    assert (pd.current_leader.leader_id, pd.current_leader.leader_epoch, resp.node_endpoints) == (-1, -1, [])
    assert _answer(ctx, _consumer_fetch(0, epoch=EPOCH + 1))[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _answer(ctx, _consumer_fetch(0, epoch=-1))[0].error_code == ErrorCode.NONE


def test_follower_refuses_fetch_before_v11(follower):
    ctx, _ = follower
    pd, _ = _answer(ctx, _consumer_fetch(0), 10)
    assert pd.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_follower_long_poll_wakes_when_the_replica_fetcher_moves_the_high_watermark(follower):
    ctx, part = follower

    async def run() -> tuple[FetchResponse, float]:
        started = time.monotonic()
        task = asyncio.create_task(handle(ctx, _consumer_fetch(3, max_wait_ms=10_000)))
        await asyncio.sleep(0.2)
        assert not task.done()  # nothing visible at 3 yet
        leader_answer = FetchResponse.PartitionData(partition_index=0, high_watermark=5, log_start_offset=0,
                                                    records=b"")
        apply_fetched(part, leader_answer, 1)  # what the replica fetcher does with the leader's answer
        resp = await asyncio.wait_for(task, 5)
        return resp, time.monotonic() - started

    resp, took = asyncio.run(run())
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == ErrorCode.NONE and pd.high_watermark == 5 and len(pd.records) and took < 2


# ---- the leader's preferred read replica ------------------------------------------------------------------

def _caught_up(part: Partition, *nodes: int) -> None:
    now_ms = int(time.time() * 1000)
    for n in nodes:
        part.update_follower_fetch(n, part.log_end_offset, now_ms, 0)


def test_leader_redirects_a_consumer_to_the_in_sync_replica_in_its_rack(leader):
    ctx, part = leader
    _caught_up(part, 2, 3)
    pd, total = _answer(ctx, _consumer_fetch(0, rack="rack-2"))
    assert (pd.error_code, pd.preferred_read_replica, len(pd.records)) == (ErrorCode.NONE, 2, 0)
    assert (pd.high_watermark, pd.log_start_offset) == (part.high_watermark, 0)
    assert total == -1  # answered at once, as Kafka does
    assert _answer(ctx, _consumer_fetch(0, rack="rack-3"))[0].preferred_read_replica == 3


@pytest.mark.parametrize("rack", ["rack-1", "rack-9", ""])
def test_leader_serves_its_own_rack_an_unknown_rack_and_no_rack(leader, rack):
    ctx, part = leader
    _caught_up(part, 2, 3)
    pd, total = _answer(ctx, _consumer_fetch(0, rack=rack))
    assert pd.preferred_read_replica == -1 and total > 0


def test_leader_without_a_selector_or_before_v11_serves_everyone(leader):
    ctx, part = leader
    _caught_up(part, 2, 3)
    assert _answer(ctx, _consumer_fetch(0, rack="rack-2"), 10)[0].preferred_read_replica == -1  # no RackId < v11
    ctx.broker.replica_manager.replica_selector = ""
    pd, total = _answer(ctx, _consumer_fetch(0, rack="rack-2"))
    assert pd.preferred_read_replica == -1 and total > 0


def test_preferred_read_replica_candidates(leader):
    _, part = leader
    image, now_ms = _image(), int(time.time() * 1000)

    def choice(offset: int = 0, img: MetadataImage = image) -> int:
        return preferred_read_replica(RACK_AWARE, part, "rack-2", offset, img, "PLAINTEXT", now_ms)

    assert choice() == -1  # follower 2 has not fetched in this leadership: its log end offset is unknown
    part.followers[2] = FollowerState(log_end_offset=3, log_start_offset=1, last_caught_up_ms=now_ms)
    assert choice(0) == -1  # below its log start
    assert choice(1) == choice(3) == 2
    assert choice(4) == -1  # beyond its log end
    assert choice(img=_image(fenced=frozenset({2}))) != 2  # a fenced broker is not a candidate
    assert choice(1, _image(fenced=frozenset({2}))) == -1
    assert preferred_read_replica(RACK_AWARE, part, "rack-2", 1, image, "OTHER", now_ms) == -1  # no such endpoint
    part.isr = [1, 3]
    assert choice(1) == -1  # out of the ISR
