"""Replication throttles (KIP-73, kbroker/server/replication_quota.py): the sampled rate on a fake clock, the
quota manager, the throttled-replica lists from the metadata image, and the two places that apply them: the
leader's read for a follower's Fetch and the follower's choice of what to fetch. The behaviour across real
processes is in compat_tests/test_replication_throttle.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from kbroker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage, PartitionImage, TopicImage
from kbroker.controller.topic_configs import LONG_MAX
from kbroker.protocol.messages import FetchRequest
from kbroker.protocol.records import build_batch
from kbroker.server.handlers.fetch import _read_all
from kbroker.server.replica_fetcher import ReplicaFetcher
from kbroker.server.replica_manager import Partition
from kbroker.server.replication_quota import (
    ALL_REPLICAS,
    LEADER_REPLICATION,
    ReplicationQuotaManager,
    ReplicationQuotas,
    SampledRate,
    parse_throttled_replicas,
)
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0  # seconds

    def __call__(self) -> float:
        return self.now


# ---- the rate ----------------------------------------------------------------------------------------

def test_rate_is_the_retained_sum_over_the_time_since_the_oldest_sample_at_least_one_window():
    r = SampledRate(window_num=11, window_ms=1000)
    r.record(1000, 0)
    assert r.measure(0) == 1000  # one window at least: no spike from a zero-length interval
    assert r.measure(500) == 1000
    assert r.measure(4000) == 250  # 1000 bytes over 4 s
    r.record(1000, 4000)  # a second sample
    assert r.measure(5000) == 400  # 2000 over 5 s
    # a sample is dropped once window.num x window.size passed since anything was recorded in it
    assert r.measure(10999) == pytest.approx(2000 / 10.999)
    assert r.measure(11000) == pytest.approx(1000 / 7.0)  # the first one is gone; the second began at 4 s
    assert r.measure(15000) == 0


def test_steady_traffic_measures_its_rate_and_the_ring_stays_bounded():
    r = SampledRate(window_num=11, window_ms=1000)
    for i in range(300):  # 100 bytes every 100 ms for 30 s: 1,000 bytes/s
        r.record(100, i * 100)
    assert r.measure(30000) == pytest.approx(1000, rel=0.06)
    assert len(r._samples) == 12  # window.num + 1


def test_bad_windows_are_refused():
    with pytest.raises(ValueError):
        SampledRate(0, 1000)


# ---- the quota manager -------------------------------------------------------------------------------

def test_quota_exceeded_only_above_the_bound_and_only_for_throttled_replicas_outside_the_isr():
    clock = FakeClock()
    q = ReplicationQuotaManager(LEADER_REPLICATION, window_num=11, window_size_s=1, clock=clock)
    assert q.upper_bound == LONG_MAX
    q.record(10_000_000)
    assert not q.is_quota_exceeded()  # unbounded (Long.MAX_VALUE, the default)
    q.update_quota(5_000_000)
    assert q.rate() == 10_000_000 and q.is_quota_exceeded()
    clock.now += 2.0
    assert q.rate() == 5_000_000 and not q.is_quota_exceeded()  # equal to the bound is acceptable
    clock.now += 0.5
    assert not q.is_quota_exceeded()
    q.mark_throttled("t", frozenset({0, 2}))
    q.mark_throttled("all", ALL_REPLICAS)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and q.is_throttled("all", 99)
    assert not q.is_throttled("other", 0)
    q.record(20_000_000)
    assert q.should_throttle("t", 0, in_sync=False)
    assert not q.should_throttle("t", 0, in_sync=True)  # in-sync replicas never wait
    assert not q.should_throttle("t", 1, in_sync=False)  # not a throttled replica
    q.remove_throttle("t")
    assert not q.should_throttle("t", 0, in_sync=False)
    q.update_quota(LONG_MAX)
    assert not q.should_throttle("all", 0, in_sync=False)


@pytest.mark.parametrize("value,broker,expected", [
    ("*", 1, ALL_REPLICAS),
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1,1:2,2:1", 2, frozenset({1})),
    ("0:1,1:2", 3, frozenset()),
    ("", 1, frozenset()),
    (" 3:1 , 4:1 ", 1, frozenset({3, 4})),
])
def test_throttled_replica_lists(value, broker, expected):
    got = parse_throttled_replicas(value, broker)
    assert got == expected and (got is ALL_REPLICAS) == (expected is ALL_REPLICAS)


def _image(configs: dict) -> MetadataImage:
    return MetadataImage(cluster_id="c", configs=configs)


def test_quotas_follow_the_metadata_image():
    quotas = ReplicationQuotas(node_id=2)
    quotas.apply_image(_image({
        (BROKER_RESOURCE, ""): {"leader.replication.throttled.rate": "100", "follower.replication.throttled.rate": "7"},
        (BROKER_RESOURCE, "2"): {"leader.replication.throttled.rate": "200"},
        (BROKER_RESOURCE, "3"): {"follower.replication.throttled.rate": "300"},
        (TOPIC_RESOURCE, "a"): {"leader.replication.throttled.replicas": "0:1,1:2",
                                "follower.replication.throttled.replicas": "*"},
        (TOPIC_RESOURCE, "b"): {"leader.replication.throttled.replicas": "0:3"},
    }))
    # this broker's own value, else the cluster default
    assert (quotas.leader.upper_bound, quotas.follower.upper_bound) == (200, 7)
    assert quotas.leader.throttled() == {"a": frozenset({1}), "b": frozenset()}
    assert quotas.follower.throttled() == {"a": ALL_REPLICAS}
    # configs deleted: unthrottled again, lists gone
    quotas.on_metadata_update(None, _image({(TOPIC_RESOURCE, "b"): {"retention.ms": "1"}}),
                              SimpleNamespace(changed_configs={(TOPIC_RESOURCE, "a")}, deleted_topics={}))
    assert (quotas.leader.upper_bound, quotas.follower.upper_bound) == (LONG_MAX, LONG_MAX)
    assert quotas.leader.throttled() == {} and quotas.follower.throttled() == {}


# ---- the leader's read for a follower ----------------------------------------------------------------

TOPIC_ID = bytes(range(1, 17))


@pytest.fixture
def leader(tmp_path):
    """Partition t-0 led by broker 1, replicas 1, 2, 3, ISR [1, 2], with 5 batches; a ctx for ``_read_all``."""
    now_ms = int(time.time() * 1000)
    plog = PartitionLog(tmp_path / "t-0", LogConfig(), topic_id=TOPIC_ID, recovery_point=0, clean_shutdown=False,
                        now_ms=now_ms)
    part = Partition("t", 0, TOPIC_ID, plog, 1, 1, 1, [1, 2, 3], [1, 2], local_id=1)
    part.make_leader(now_ms)
    for _ in range(5):
        plog.append_as_leader(build_batch([(b"k", b"v" * 1000)]), 1, now_ms)
    topic = TopicImage("t", TOPIC_ID, {0: PartitionImage(0, (1, 2, 3), (1, 2), 1, 1, 1)})
    image = MetadataImage(cluster_id="c", topics_by_name={"t": topic}, topics_by_id={TOPIC_ID: topic})
    rm = SimpleNamespace(get_partition=lambda t, p: part, maybe_expand_isr=lambda part, r: None)
    ctx = SimpleNamespace(broker=SimpleNamespace(controller=SimpleNamespace(image=image), replica_manager=rm,
                                                 authorizer=None))
    yield ctx, part
    plog.close()


def _follower_fetch(replica_id: int) -> FetchRequest:
    return FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=1),
                        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                            topic_id=TOPIC_ID, partitions=[FetchRequest.FetchPartition(
                                partition=0, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=-1,
                                partition_max_bytes=1 << 20)])])


def test_leader_sends_nothing_to_an_out_of_sync_follower_while_its_quota_is_exceeded(leader):
    ctx, part = leader
    clock = FakeClock()
    quota = ReplicationQuotaManager(LEADER_REPLICATION, clock=clock)
    quota.update_quota(1000)
    # not throttled yet: everything, and what a throttled replica's answer holds is counted
    resp, total, _, throttled = _read_all(ctx, _follower_fetch(3), 17, replica_id=3, quota=quota)
    assert total > 5000 and throttled == 0  # t-0 is not in leader.replication.throttled.replicas
    quota.mark_throttled("t", frozenset({0}))
    resp, total, _, throttled = _read_all(ctx, _follower_fetch(3), 17, replica_id=3, quota=quota)
    assert total > 5000 and throttled == total  # quota not exceeded yet
    quota.record(throttled)
    assert quota.is_quota_exceeded()
    # exceeded: follower 3 (outside the ISR) gets no records, the rest of the answer as usual
    resp, total, parts, throttled = _read_all(ctx, _follower_fetch(3), 17, replica_id=3, quota=quota)
    pd = resp.responses[0].partitions[0]
    assert (total, throttled, len(pd.records), pd.error_code) == (0, 0, 0, 0)
    assert pd.high_watermark == part.high_watermark and pd.log_start_offset == 0 and parts == [part]
    assert part.followers[3].log_end_offset == 0  # its position is still recorded
    # follower 2 is in the ISR: never throttled (its bytes still count)
    resp, total, _, throttled = _read_all(ctx, _follower_fetch(2), 17, replica_id=2, quota=quota)
    assert total > 5000 and throttled == total
    # once the rate is back under the bound, follower 3 gets records again
    clock.now += 30
    assert not quota.is_quota_exceeded()
    assert _read_all(ctx, _follower_fetch(3), 17, replica_id=3, quota=quota)[1] > 5000


def test_a_held_back_follower_long_poll_is_answered_once_the_rate_allows(leader):
    """Not after the whole ``max_wait_ms`` (Kafka's DelayedFetch waits for it, or for an append)."""
    import asyncio

    from kbroker.server.handlers.fetch import handle

    ctx, part = leader
    quota = ReplicationQuotaManager(LEADER_REPLICATION)  # the real clock
    quota.update_quota(100_000)
    quota.mark_throttled("t", ALL_REPLICAS)
    quota.record(30_000)  # 0.3 s worth at the bound, but measured over at least a window: over it for 1 s
    quota.update_quota(20_000)
    assert quota.throttle_time_s() == pytest.approx(1.5, abs=0.05)
    quota.update_quota(25_000)  # 1.2 s

    ctx.api_version = 17
    ctx.broker.metadata_quorum = None
    ctx.broker.replication_quotas = SimpleNamespace(leader=quota)
    ctx.broker.replica_manager.wait_for_data = lambda parts, timeout, appends=False: asyncio.sleep(timeout)
    request = _follower_fetch(3)
    request.max_wait_ms = 3000
    started = time.monotonic()
    resp = asyncio.run(handle(ctx, request))
    took = time.monotonic() - started
    assert len(resp.responses[0].partitions[0].records) and 1.0 < took < 2.0, took
    assert quota.recorded_bytes > 30_000  # what it sent counts


# ---- the follower's choice of partitions -------------------------------------------------------------

def test_follower_leaves_out_throttled_replicas_outside_the_isr_while_its_quota_is_exceeded():
    quota = ReplicationQuotaManager("FollowerReplication", clock=FakeClock())
    manager = SimpleNamespace(quota=quota, node_id=3)
    fetcher = ReplicaFetcher(manager, leader_id=1, fetcher_id=0)  # type: ignore[arg-type]

    def part(topic: str, isr: list[int]) -> SimpleNamespace:
        return SimpleNamespace(topic=topic, partition_index=0, isr=isr)

    out_of_sync, in_sync, other = part("t", [1, 2]), part("u", [1, 2, 3]), part("v", [1, 2])
    quota.mark_throttled("t", ALL_REPLICAS)
    quota.mark_throttled("u", ALL_REPLICAS)
    everything = [out_of_sync, in_sync, other]
    assert fetcher._unthrottled(everything) == everything  # unbounded
    quota.update_quota(100)
    assert fetcher._unthrottled(everything) == everything  # nothing recorded yet
    quota.record(1000)
    assert fetcher._unthrottled(everything) == [in_sync, other]
    manager.quota = None
    assert fetcher._unthrottled(everything) == everything


# ---- the configs, through a running broker ------------------------------------------------------------

def test_throttle_configs_are_dynamic_broker_keys_reported_like_kafka(node):
    from kbroker.controller.config_def import validate_server_config
    from tests.server.test_operator_apis import BROKER, DELETE, SET, TOPIC, _create, _describe, _incremental

    quotas = node.broker.replication_quotas
    _, cfg = _describe(node, BROKER, "1")
    # as Kafka 4.3.1: the dynamic-only rates are listed once set, with no default synonym
    assert "leader.replication.throttled.rate" not in cfg
    window = cfg["replication.quota.window.num"]
    assert (window.value, window.config_source, window.read_only) == ("11", 5, True)
    assert cfg["replication.quota.window.size.seconds"].value == "1"
    # per broker over the cluster default, as Kafka resolves them; the running quotas follow
    assert _incremental(node, BROKER, "", [("leader.replication.throttled.rate", SET, "1000"),
                                           ("follower.replication.throttled.rate", SET, "2000")]).error_code == 0
    assert _incremental(node, BROKER, "1", [("leader.replication.throttled.rate", SET, "300")]).error_code == 0
    _, cfg = _describe(node, BROKER, "1")
    rate = cfg["leader.replication.throttled.rate"]
    assert (rate.value, rate.config_source, rate.read_only, rate.config_type) == ("300", 2, False, 5)
    assert [(s.value, s.source) for s in rate.synonyms] == [("300", 2), ("1000", 3)]
    assert cfg["follower.replication.throttled.rate"].config_source == 3
    assert (quotas.leader.upper_bound, quotas.follower.upper_bound) == (300, 2000)
    # refused as Kafka refuses them
    bad = _incremental(node, BROKER, "1", [("leader.replication.throttled.rate", SET, "-1")])
    assert bad.error_code == 42 and "Value must be at least 0" in bad.error_message
    bad = _incremental(node, BROKER, "", [("replication.quota.window.num", SET, "5")])
    assert (bad.error_code, bad.error_message) == (
        42, "Cannot update these configs dynamically: [replication.quota.window.num]")
    # the topic lists
    _create(node, "thr", 2)
    assert _incremental(node, TOPIC, "thr", [("leader.replication.throttled.replicas", SET, "0:1,1:2"),
                                             ("follower.replication.throttled.replicas", SET, "*")]).error_code == 0
    assert quotas.leader.throttled() == {"thr": frozenset({0})}
    assert quotas.follower.throttled() == {"thr": ALL_REPLICAS}
    assert _incremental(node, TOPIC, "thr", [("leader.replication.throttled.replicas", SET, "0-1")]).error_code == 40
    # deleted: unthrottled again
    assert _incremental(node, BROKER, "1", [("leader.replication.throttled.rate", DELETE, None)]).error_code == 0
    assert _incremental(node, BROKER, "", [("leader.replication.throttled.rate", DELETE, None),
                                           ("follower.replication.throttled.rate", DELETE, None)]).error_code == 0
    assert _incremental(node, TOPIC, "thr", [("leader.replication.throttled.replicas", DELETE, None)]).error_code == 0
    assert (quotas.leader.upper_bound, quotas.follower.upper_bound) == (LONG_MAX, LONG_MAX)
    assert quotas.leader.throttled() == {}
    # in server.properties: no effect, and the broker says so
    assert validate_server_config({"leader.replication.throttled.rate": "5", "replication.quota.window.num": "3"}) == [
        "The configuration 'leader.replication.throttled.rate' can only be set dynamically (kbroker-configs --alter "
        "--entity-type brokers); its value in server.properties has no effect."]
    assert ReplicationQuotas.from_config(node.broker.config).leader._rate.window_num == 11


def test_throttle_time_is_how_long_until_the_rate_is_back_at_the_bound():
    clock = FakeClock()
    q = ReplicationQuotaManager(LEADER_REPLICATION, clock=clock)
    q.record(1_000_000)
    assert q.throttle_time_s() == 0  # unbounded
    q.update_quota(200_000)
    assert q.throttle_time_s() == pytest.approx(5.0)  # 1 MB at 200 kB/s
    clock.now += 0.5
    assert q.throttle_time_s() == pytest.approx(4.5)  # the first second counts as a whole window, but has not passed
    clock.now += 2.5
    assert q.throttle_time_s() == pytest.approx(2.0) and q.is_quota_exceeded()
    clock.now += 2.0
    assert q.throttle_time_s() == 0 and not q.is_quota_exceeded()
