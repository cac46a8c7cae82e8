"""OffsetCommit / OffsetFetch v10 (topic ids) with the real Java 4.3 client in ``group.protocol=consumer``.

The Java consumer of the KIP-848 protocol uses topic ids in OffsetCommit and OffsetFetch as soon as the broker
advertises v10: a member (compat_tests/java/GroupDriver.java) consumes a topic and commits after every batch;
the broker's request counters (``metrics.port``) must show OffsetCommit and OffsetFetch at v10 and none at
lower versions, and the committed offsets read back by name (confluent-kafka, v9 and below) are the log end
offsets. The version counts are checked on the kbroker target only (kbroker's metrics endpoint); on other
targets the commits and the offsets read back are.
"""

from __future__ import annotations

import urllib.request

import pytest

from compat_tests.test_groups import (  # noqa: F401 - group_driver is a fixture
    Member,
    client_available,
    committed_offsets,
    end_offsets,
    group_driver,
    new_topic,
    produce,
    unique,
    wait_consumed,
)
from kbroker.testing.plugin import current_target, free_port

pytestmark = pytest.mark.timeout(120)


def _request_counts(port: int, api: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {s.labels["version"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "kafka_network_requestmetrics_requests_total" and s.labels.get("request") == api}


def test_java_consumer_protocol_commits_and_fetches_with_v10(kbroker_factory, group_driver):
    client_available("java")
    port = free_port()
    props = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
             "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"}
    on_kbroker = current_target() == "kbroker"
    if on_kbroker:  # kbroker's Prometheus endpoint counts the request versions
        props.update({"metrics.port": str(port), "metrics.host": "127.0.0.1"})
    broker = kbroker_factory(props)
    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap)
    group = unique("offsets-v10")
    expected = produce(bootstrap, topic, 300)
    m = Member(group_driver + ["member", "--bootstrap", bootstrap, "--group", group, "--group-protocol",
                               "consumer", "--assignor", "uniform", "--metadata", "v10", "--client-id",
                               "compat-v10", "--topics", topic], "java-v10")
    try:
        wait_consumed([m], expected)
        ends = end_offsets(bootstrap, topic)
        m.wait_until(lambda _: {p: o for (t, p), o in m.committed().items() if t == topic} == ends, 30,
                     "commits up to the log end offsets")
        m.stop()
        assert not m.errors(), m.errors()
    finally:
        m.close()
    assert {p: o for p, (o, _) in committed_offsets(bootstrap, group, topic).items()} == ends
    if not on_kbroker:
        return  # the versions used are counted by kbroker's metrics.port endpoint only
    commits = _request_counts(port, "OffsetCommit")
    fetches = _request_counts(port, "OffsetFetch")
    assert commits.get("10", 0) >= 1, commits
    assert fetches.get("10", 0) >= 1, fetches
    assert {v for v, n in commits.items() if n and v != "10"} == set(), commits
