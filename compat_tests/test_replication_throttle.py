"""Replication throttles (KIP-73) across real processes, set and removed with confluent-kafka's AdminClient.

Three combined nodes, a topic with one partition, RF 3 and ``min.insync.replicas=1``. A follower (not the active
controller) is SIGSTOPped, :data:`SIZE` bytes are produced while it is stopped, it leaves the ISR
(``replica.lag.time.max.ms`` behind the log end), then it is resumed and the time until it is back in the ISR is
measured, three times:

1. without throttles: it catches up at once;
2. with ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` at :data:`RATE` on every
   broker (IncrementalAlterConfigs of each BROKER resource, sent to that broker, before the follower is stopped:
   a stopped broker cannot answer for itself) and both topic lists set to ``*`` while it is out: the catch-up
   takes about SIZE / RATE (the leader answers the out-of-sync follower with empty records while its rate is
   exceeded, and the follower leaves the partition out of its fetches while its own is);
3. with the configs deleted: fast again.

An answer to IncrementalAlterConfigs means committed, not applied everywhere: before going on, the test asks each
node with DescribeConfigs (answered from its own metadata image) until it has the change. ``replica.fetch.max.bytes``
is 64 KiB so that the throttles act on 64 KiB steps instead of 1 MiB ones.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   ResourceType)

from kbroker.controller.topic_configs import LONG_MAX
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from kbroker.testing.cluster import KbrokerCluster, ask, wait_until
from kbroker.testing.fault_campaign import Admin, create_topic

pytestmark = pytest.mark.timeout(240)

TOPIC = "thr"
SIZE = 2_400_000
"""Bytes produced while the follower is out (2,400 records of 1,000 bytes)."""
RATE = 200_000
"""The throttle, bytes/s."""
OVERRIDES = {"broker.session.timeout.ms": 60000, "broker.heartbeat.interval.ms": 500,
             "replica.lag.time.max.ms": 1500, "replica.fetch.max.bytes": 65536}
TOPIC_TYPE, BROKER = 2, 4
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICA_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def _alter(cluster: KbrokerCluster, resource: ConfigResource, via: int) -> None:
    """One IncrementalAlterConfigs, sent to node ``via`` (a BROKER resource goes to the broker it names)."""
    admin = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)


def _described(cluster: KbrokerCluster, nid: int, rtype: int, name: str, key: str) -> str | None:
    """``key`` of a resource as node ``nid`` sees it (DescribeConfigs answered from its own metadata image)."""
    R = DescribeConfigsRequest
    req = R(resources=[R.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=[key])])
    resp = ask(cluster.host, cluster.nodes[nid].port, ApiKey.DESCRIBE_CONFIGS, 4, req, DescribeConfigsResponse)
    configs = resp.results[0].configs
    return configs[0].value if configs else None


def _set_rates(cluster: KbrokerCluster, rate: int | None) -> None:
    """Both rates on every broker, each through itself (``None``: delete them); returns once each broker has
    them (an answer means committed, not yet applied by every broker)."""
    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    for nid in cluster.broker_ids:
        _alter(cluster, ConfigResource(ResourceType.BROKER, str(nid), incremental_configs=[
            ConfigEntry(k, None if rate is None else str(rate), incremental_operation=op) for k in RATE_KEYS]), via=nid)
    # deleted: kbroker describes the default (Long.MAX_VALUE); Kafka's answer for the deleted dynamic key is not
    # that value (observed: it times out waiting for it), so either "unset" answer counts there
    want = {str(rate)} if rate is not None else {str(LONG_MAX), None}
    for nid in cluster.broker_ids:
        wait_until(lambda: all(_described(cluster, nid, BROKER, str(nid), k) in want for k in RATE_KEYS), 15,
                   f"node {nid} with its throttle rates at {want}")


def _set_replicas(cluster: KbrokerCluster, throttled: bool, live: list[int]) -> None:
    """Both replica lists of the topic to ``*`` (``throttled`` False: delete them); returns once every node of
    ``live`` has applied it."""
    op = AlterConfigOpType.SET if throttled else AlterConfigOpType.DELETE
    _alter(cluster, ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry(k, "*" if throttled else None, incremental_operation=op) for k in REPLICA_KEYS]), via=live[0])
    for nid in live:
        wait_until(lambda: all((_described(cluster, nid, TOPIC_TYPE, TOPIC, k) == "*") == throttled
                               for k in REPLICA_KEYS), 15, f"node {nid} with the topic's throttled replicas")


def test_throttled_follower_catches_up_at_the_throttled_rate(tmp_path):
    with KbrokerCluster(tmp_path, nodes=3, overrides=OVERRIDES) as cluster:
        admin = Admin(cluster)
        create_topic(admin, TOPIC, partitions=1, min_isr=1)
        leader, isr = admin.state(TOPIC)[0]
        controller = cluster.controller_id()
        # a follower that is not the active controller (stopping it must not stop the metadata quorum)
        follower = next(b for b in isr if b not in (leader, controller))
        live = [b for b in cluster.broker_ids if b != follower]
        p = Producer({"bootstrap.servers": cluster.nodes[leader].bootstrap, "acks": "1", "linger.ms": 5,
                      "batch.size": 16384, "message.timeout.ms": 30000})
        sent = 0

        def catch_up(throttle: bool) -> float:
            """Stop the follower, produce SIZE bytes, wait until it left the ISR, (``throttle``) throttle the
            topic's replicas, resume it: seconds until it is back in the ISR."""
            nonlocal sent
            cluster.pause(follower)
            admin.down.add(follower)
            try:
                for _ in range(SIZE // 1000):
                    p.produce(TOPIC, value=f"{sent:08d}".encode() + b"x" * 992, partition=0)
                    sent += 1
                    p.poll(0)
                assert p.flush(60) == 0
                # as Kafka's leader: a stopped follower leaves the ISR once it is behind the log end for
                # replica.lag.time.max.ms (one that has everything would stay in)
                wait_until(lambda: follower not in admin.state(TOPIC)[0][1], 20, f"node {follower} out of the ISR")
                if throttle:
                    _set_replicas(cluster, True, live)
            finally:
                cluster.resume(follower)
            resumed = time.monotonic()
            # asked of another node: the resumed one answers from its stale image (itself in the ISR) a while
            wait_until(lambda: follower in admin.state(TOPIC)[0][1], 90, f"node {follower} back in the ISR")
            took = time.monotonic() - resumed
            admin.down.discard(follower)
            return took

        started = time.monotonic()
        free = catch_up(False)
        _set_rates(cluster, RATE)  # while every broker is up: each is asked through itself
        throttled = catch_up(True)
        # reported like Kafka: this broker's dynamic value
        res = ConfigResource(ResourceType.BROKER, str(leader))
        via_leader = AdminClient({"bootstrap.servers": cluster.nodes[leader].bootstrap})
        entries = via_leader.describe_configs([res])[res].result(30)
        rate_entry = entries["leader.replication.throttled.rate"]
        assert (rate_entry.value, rate_entry.source) == (str(RATE), ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        _set_rates(cluster, None)
        _set_replicas(cluster, False, cluster.broker_ids)
        again = catch_up(False)
        expected = SIZE / RATE
        print(f"catch-up of {SIZE:,} bytes: {free:.1f} s unthrottled, {throttled:.1f} s at {RATE:,} B/s "
              f"(size/rate {expected:.1f} s; {SIZE / throttled:,.0f} B/s measured), {again:.1f} s after the throttle "
              f"was removed; test body {time.monotonic() - started:.1f} s")
        assert throttled >= 0.6 * expected, f"throttled catch-up took {throttled:.1f} s"
        assert free < 0.4 * expected and again < 0.4 * expected, (free, again)
