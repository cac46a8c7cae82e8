"""Consumer groups of the KIP-848 protocol (``group.protocol=consumer``) with real clients (issue 3).

Members are processes, as in compat_tests/test_groups.py (whose helpers this module reuses): the Java client
4.3 (compat_tests/java/GroupDriver.java) and confluent-kafka/librdkafka (compat_tests/test_groups_member.py),
each committing synchronously after processing every batch. The broker computes the assignment (server-side
``uniform`` / ``range`` assignors) and the members reconcile to it through ConsumerGroupHeartbeat. Checks:

* N members of one group over a 12-partition topic consume every record exactly once, and the committed
  offsets (OffsetCommit v9 with member epochs) end at the log end offsets; a Java + librdkafka group shares
  the partitions;
* a member that joins, one that leaves, and one killed with -9: the group rebalances (the killed member is
  fenced after ``group.consumer.session.timeout.ms``) and no record is lost; duplicates only from work the
  killed member processed without committing;
* a broker kill -9 + restart: the group (replayed from ``__consumer_offsets``) and its committed offsets
  survive, the running member goes on, nothing is consumed twice;
* ConsumerGroupDescribe through the Java AdminClient (``describeConsumerGroups``) shows the members, their
  epochs, assignments and target assignments; ListGroups reports the group as type ``consumer``;
* a regular-expression subscription (Java ``SubscriptionPattern``, librdkafka ``^...``) picks up a topic
  created later;
* a static member (``group.instance.id``) that closes and restarts keeps its partitions, without a rebalance
  of the others.

On the kbroker target the module runs its own broker with a 6 s session timeout and a 500 ms heartbeat
interval (``group.consumer.*`` overrides); on external targets it uses the session broker and its settings.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from compat_tests.clients import create_topic
from compat_tests.test_groups import (  # noqa: F401 - group_driver is a fixture
    Member,
    client_available,
    committed_offsets,
    end_offsets,
    group_driver,
    java_admin,
    new_topic,
    processed,
    produce,
    unique,
    wait_assignment,
    wait_balanced,
    wait_consumed,
)
from kbroker.testing.plugin import KbrokerFactory, selected_target

pytestmark = pytest.mark.timeout(120)

CLIENTS = ("java", "confluent")
OVERRIDES = {"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0",
             "group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "6000"}
OWN_SESSION_MS = 6000
KAFKA_DEFAULT_SESSION_MS = 45000


class Cluster:
    def __init__(self, bootstrap: str, session_ms: int, factory: KbrokerFactory | None) -> None:
        self.bootstrap = bootstrap
        self.session_ms = session_ms
        self.factory = factory


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """kbroker target: a broker of this module's own, with short consumer-group timeouts. Other targets: the
    session broker."""
    if selected_target(request.config) != "kbroker":
        yield Cluster(request.getfixturevalue("bootstrap_servers"), KAFKA_DEFAULT_SESSION_MS, None)
        return
    factory = KbrokerFactory(tmp_path_factory.mktemp("consumer-protocol"),
                             request.config.getoption("--kbroker-python"))
    try:
        broker = factory(OVERRIDES)
        yield Cluster(broker.bootstrap, OWN_SESSION_MS, factory)
    finally:
        factory.close()


@pytest.fixture
def cp_members(request: pytest.FixtureRequest) -> Iterator[Callable[..., Member]]:
    """``start(client, bootstrap, group, topics, assignor=..., pattern=None, name=None)`` -> a running member
    with ``group.protocol=consumer``; all killed at teardown."""
    started: list[Member] = []

    def start(client: str, bootstrap: str, group: str, topics: list[str], *, assignor: str = "uniform",
              pattern: str | None = None, metadata: str = "", instance_id: str | None = None,
              name: str | None = None) -> Member:
        client_available(client)
        opts = ["--bootstrap", bootstrap, "--group", group, "--group-protocol", "consumer", "--assignor", assignor,
                "--metadata", metadata, "--client-id", f"compat-cp-{client}"]
        if topics:
            opts += ["--topics", ",".join(topics)]
        if pattern:
            opts += ["--pattern", pattern]
        if instance_id:
            opts += ["--instance-id", instance_id]
        if client == "java":
            cmd = request.getfixturevalue("group_driver") + ["member"] + opts
        else:
            cmd = [sys.executable, "-m", "compat_tests.test_groups_member", "--client", client] + opts
        m = Member(cmd, name or f"{client}-{len(started)}")
        started.append(m)
        return m

    yield start
    for m in started:
        m.close()


def wait_committed(bootstrap: str, group: str, topic: str, want: dict[int, int], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = {p: o for p, (o, _) in committed_offsets(bootstrap, group, topic).items()}
        if got == want:
            return
        assert time.monotonic() < deadline, f"committed {got}, expected {want}"
        time.sleep(0.2)


def no_duplicates(ms: list[Member]) -> None:
    dupes = {k: n for k, n in processed(ms).items() if n > 1}
    assert not dupes, f"{len(dupes)} records processed more than once, e.g. {list(dupes.items())[:5]}"


# ============================================================================================ tests


@pytest.mark.parametrize("client,assignor", [("java", "uniform"), ("confluent", "range")])
def test_group_consumes_every_record_exactly_once(client, assignor, cluster, cp_members):
    bootstrap = cluster.bootstrap
    topic = new_topic(bootstrap)
    group = unique(f"cp-exactly-once-{client}")
    expected = produce(bootstrap, topic, 600)
    ms = [cp_members(client, bootstrap, group, [topic], assignor=assignor, metadata=f"cp-{client}")
          for _ in range(3)]
    wait_consumed(ms, expected)
    wait_assignment(ms, topic)
    no_duplicates(ms)
    assert set(processed(ms)) == set(expected)
    wait_committed(bootstrap, group, topic, end_offsets(bootstrap, topic))
    assert {md for _, md in committed_offsets(bootstrap, group, topic).values()} == {f"cp-{client}"}
    for m in ms:
        m.stop()
    assert all(not m.errors() for m in ms), [m.errors() for m in ms]


def test_mixed_java_and_librdkafka_group(cluster, cp_members):
    bootstrap = cluster.bootstrap
    topic = new_topic(bootstrap)
    group = unique("cp-mixed")
    expected = produce(bootstrap, topic, 240)
    ms = [cp_members("java", bootstrap, group, [topic]), cp_members("confluent", bootstrap, group, [topic]),
          cp_members("java", bootstrap, group, [topic]), cp_members("confluent", bootstrap, group, [topic])]
    wait_consumed(ms, expected)
    wait_balanced(ms, topic, [3, 3, 3, 3])
    no_duplicates(ms)
    for m in ms:
        m.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_join_leave_and_kill_rebalance_without_losing_records(client, cluster, cp_members):
    bootstrap = cluster.bootstrap
    session_s = cluster.session_ms / 1000
    topic = new_topic(bootstrap)
    group = unique(f"cp-rebalance-{client}")
    expected = produce(bootstrap, topic, 120)
    a, b = (cp_members(client, bootstrap, group, [topic], name=f"{client}-{x}") for x in "ab")
    wait_consumed([a, b], expected)
    wait_assignment([a, b], topic)
    # c joins: partitions move to it (revoked by a/b first)
    c = cp_members(client, bootstrap, group, [topic], name=f"{client}-c")
    ms = [a, b, c]
    wait_assignment(ms, topic, timeout=30)
    expected.update(produce(bootstrap, topic, 120, start=120))
    wait_consumed(ms, expected)
    # a leaves cleanly
    a.stop()
    wait_assignment([b, c], topic, timeout=30)
    expected.update(produce(bootstrap, topic, 120, start=240))
    wait_consumed(ms, expected)
    # b is killed with -9: c gets everything once b's session times out
    killed_at = time.monotonic()
    b.kill()
    wait_assignment([c], topic, timeout=session_s + 30)
    took = time.monotonic() - killed_at
    assert took < session_s + 10, f"the group noticed the killed member only after {took:.1f}s"
    expected.update(produce(bootstrap, topic, 120, start=360))
    wait_consumed(ms, expected)
    counts = processed(ms)
    assert set(counts) == set(expected)
    b_committed = b.committed()
    uncommitted_b = {r for r in b.records() if r[2] >= b_committed.get((r[0], r[1]), 0)}
    dupes = {k for k, n in counts.items() if n > 1}
    assert dupes <= uncommitted_b, f"records processed twice although committed: {sorted(dupes - uncommitted_b)[:5]}"
    c.stop()
    assert not c.errors(), c.errors()


def test_describe_and_list_through_the_java_admin(cluster, cp_members, group_driver):
    bootstrap = cluster.bootstrap
    topic = new_topic(bootstrap)
    group = unique("cp-describe")
    produce(bootstrap, topic, 24)
    ms = [cp_members("java", bootstrap, group, [topic]) for _ in range(2)]
    wait_assignment(ms, topic)
    deadline = time.monotonic() + 20
    while True:
        d = java_admin(group_driver, "describe-group", "--bootstrap", bootstrap, "--group", group)
        if d["state"] == "Stable" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert d["type"].lower() == "consumer" and d["state"] == "Stable" and d["assignor"] == "uniform"
    assert d["group_epoch"] is not None and d["group_epoch"] == d["assignment_epoch"]
    assert len(d["members"]) == 2
    parts = sorted(tuple(p) for m in d["members"] for p in m["partitions"])
    assert parts == [(topic, p) for p in range(12)]
    for m in d["members"]:
        assert m["epoch"] == d["assignment_epoch"]
        assert sorted(map(tuple, m["target"])) == sorted(map(tuple, m["partitions"]))
        assert m["client_id"] == "compat-cp-java"
    groups = java_admin(group_driver, "list-groups", "--bootstrap", bootstrap)["groups"]
    listed = [g for g in groups if g["group_id"] == group]
    assert listed and listed[0]["type"].lower() == "consumer" and listed[0]["protocol"] == "consumer"
    for m in ms:
        m.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_regex_subscription_picks_up_new_topics(client, cluster, cp_members):
    """``SubscribedTopicRegex``: Java's ``SubscriptionPattern``; librdkafka sends topics starting with ``^``
    as a regex."""
    bootstrap = cluster.bootstrap
    prefix = unique("cp-regex")
    t1 = f"{prefix}-a"
    create_topic(bootstrap, t1, 3)
    expected = produce(bootstrap, t1, 30, partitions=3)
    pattern = f"{prefix}-.*" if client == "java" else f"^{prefix}-.*"
    m = cp_members(client, bootstrap, unique("cp-regex-group"), [], pattern=pattern)
    wait_consumed([m], expected)
    t2 = f"{prefix}-b"
    create_topic(bootstrap, t2, 2)
    expected2 = produce(bootstrap, t2, 20, partitions=2)
    wait_consumed([m], expected2, timeout=45)
    no_duplicates([m])
    m.stop()


def test_static_member_restart_keeps_its_partitions(cluster, cp_members):
    """A static member that closes (epoch -2) and restarts within the session timeout gets the same
    partitions back under its new member id, and the other member is not rebalanced."""
    bootstrap = cluster.bootstrap
    topic = new_topic(bootstrap)
    group = unique("cp-static")
    produce(bootstrap, topic, 24)
    s1 = cp_members("java", bootstrap, group, [topic], instance_id="s1", name="s1")
    s2 = cp_members("java", bootstrap, group, [topic], instance_id="s2", name="s2")
    wait_assignment([s1, s2], topic)
    before = s2.assignment()
    s1_events = len(s1.rebalance_events())
    s2.stop()
    s2b = cp_members("java", bootstrap, group, [topic], instance_id="s2", name="s2b")
    s2b.wait_until(lambda ev: any(e["event"] == "assigned" and e["partitions"] for e in ev), 30, "assignment")
    assert s2b.assignment() == before
    time.sleep(1.5)
    assert s1.rebalance_events()[s1_events:] == [], "the other member was rebalanced"
    expected = produce(bootstrap, topic, 24, start=24)
    wait_consumed([s1, s2b], expected)
    assert {(t, p) for t, p, _ in s2b.records() if (t, p, _) in expected} <= before
    for m in (s1, s2b):
        m.stop()


def test_group_and_offsets_survive_broker_kill9(cluster, cp_members, request, tmp_path: Path):
    if cluster.factory is None:
        pytest.skip("needs a kbroker of its own (kill -9 and restart)")
    broker = cluster.factory(OVERRIDES)
    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap)
    group = unique("cp-durable")
    expected = produce(bootstrap, topic, 240)
    m = cp_members("java", bootstrap, group, [topic], metadata="before-kill")
    wait_consumed([m], expected)
    ends = end_offsets(bootstrap, topic)
    wait_committed(bootstrap, group, topic, ends)
    events_before = len(m.rebalance_events())
    broker.kill()
    broker.start()
    assert {p: o for p, (o, _) in committed_offsets(bootstrap, group, topic).items()} == ends
    # the running member goes on with the replayed group (same member epoch, same partitions): new records
    # once, old ones not again
    expected2 = produce(bootstrap, topic, 120, start=240)
    wait_consumed([m], expected2, timeout=60)
    no_duplicates([m])
    assert m.rebalance_events()[events_before:] == [], "the member lost its partitions over the restart"
    wait_committed(bootstrap, group, topic, end_offsets(bootstrap, topic))
    m.stop()
    assert not m.errors(), m.errors()
