"""Online migration of a live group between the classic and the consumer protocol (KIP-848), with member processes
of confluent-kafka (librdkafka, compat_tests/test_groups_member.py) or of the Java client
(compat_tests/java/GroupDriver.java) committing after every batch while a producer keeps writing numbered records.

The group starts with three ``group.protocol=classic`` members (eager ``range``). They are replaced one at a time by
``group.protocol=consumer`` members: the first one's ConsumerGroupHeartbeat upgrades the group, whose classic
members then keep working through JoinGroup / SyncGroup / Heartbeat with assignments computed by the broker. Then the
consumer members are replaced one at a time by classic members again: when the last consumer-protocol member
leaves, the group is downgraded to a classic group. At each step the group type is checked (ListGroups), and at
the end:

* every produced record was consumed;
* no record was committed by two members: a member "committed" a record when it processed it and later committed
  a larger offset of that partition; two members committing the same record means two owners of one partition at
  once (the check fails if the coordinator ever hands a partition to a member before its previous owner gave it
  up);
* records processed twice are only those whose first processing was never committed (at-least-once);
* the group's committed offsets end at the log end offsets.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Iterator

import pytest

from compat_tests.clients import admin_client
from compat_tests.test_groups import (
    Member,
    assert_each_once_unless_uncommitted,
    committed_offsets,
    end_offsets,
    group_driver,
    new_topic,
    unique,
    wait_assignment,
    wait_consumed,
)

pytestmark = pytest.mark.timeout(300)
_FIXTURES = (group_driver,)  # a fixture of compat_tests.test_groups, used through request.getfixturevalue

PARTITIONS = 6
OVERRIDES = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
             "group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "6000",
             # the lower bounds of the two (Kafka refuses a broker value below them)
             "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.min.session.timeout.ms": "6000"}


@pytest.fixture(params=["confluent", "java"])
def start_member(request: pytest.FixtureRequest) -> Iterator[Callable[..., Member]]:
    """``start(bootstrap, group, topic, protocol, name)``: a member process of the parameter's client
    (confluent-kafka, or the Java client through compat_tests/java/GroupDriver.java)."""
    client = request.param
    prefix = request.getfixturevalue("group_driver") + ["member"] if client == "java" else \
        [sys.executable, "-m", "compat_tests.test_groups_member", "--client", "confluent"]
    started: list[Member] = []

    def start(bootstrap: str, group: str, topic: str, protocol: str, name: str) -> Member:
        cmd = prefix + ["--bootstrap", bootstrap, "--group", group, "--topics", topic, "--group-protocol", protocol,
                        "--assignor", "range" if protocol == "classic" else "uniform", "--session-timeout-ms",
                        "6000", "--heartbeat-interval-ms", "500", "--client-id", f"migration-{name}", "--metadata",
                        name]
        started.append(Member(cmd, f"{client}-{name}"))
        return started[-1]

    yield start
    for m in started:
        m.close()


class Producer:
    """Writes numbered records round-robin over the partitions until stopped; ``sent`` holds what was acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer as P

        self.producer = P({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.topic = topic
        self.sent: set[tuple[str, int, int]] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:  # noqa: ANN001
        if err is not None:
            self.errors.append(str(err))
        else:
            self.sent.add((msg.topic(), msg.partition(), msg.offset()))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=f"n-{n}".encode(), partition=n % PARTITIONS,
                                  on_delivery=self._delivered)
            n += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(30)

    def stop(self) -> set[tuple[str, int, int]]:
        self._stop.set()
        self._thread.join(60)
        assert not self.errors, self.errors[:3]
        return set(self.sent)


def group_type(bootstrap: str, group: str) -> str | None:
    admin = admin_client(bootstrap)
    listed = admin.list_consumer_groups(request_timeout=10).result(15)
    for g in listed.valid:
        if g.group_id == group:
            return g.type.name.lower() if g.type is not None else None
    return None


def wait_type(bootstrap: str, group: str, want: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (got := group_type(bootstrap, group)) != want:
        assert time.monotonic() < deadline, f"group type {got}, expected {want}"
        time.sleep(0.2)


def committed_by_two(ms: list[Member]) -> dict[tuple[str, int, int], list[str]]:
    """Records that two members both processed and then covered with a commit of their own."""
    by: dict[tuple[str, int, int], list[str]] = {}
    for m in ms:
        done: set[tuple[str, int, int]] = set()
        seen: list[tuple[str, int, int]] = []
        for e in m.snapshot():
            if e["event"] == "record":
                seen.append((e["topic"], e["partition"], e["offset"]))
            elif e["event"] == "committed":
                upto = {(t, p): o for t, p, o in e["offsets"]}
                done |= {r for r in seen if r[2] < upto.get((r[0], r[1]), -1)}
        for r in done:
            by.setdefault(r, []).append(m.name)
    return {r: names for r, names in by.items() if len(names) > 1}


def test_classic_to_consumer_and_back_while_producing(kbroker_factory, start_member):
    broker = kbroker_factory(OVERRIDES)
    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap, PARTITIONS)
    group = unique("migration")
    producer = Producer(bootstrap, topic)
    everyone: list[Member] = []

    classic = [start_member(bootstrap, group, topic, "classic", f"classic-{i}") for i in range(3)]
    everyone += classic
    wait_assignment(classic, topic, partitions=PARTITIONS)
    assert group_type(bootstrap, group) == "classic"

    # upgrade: one consumer-protocol member joins, then each classic member is replaced by another one
    live = list(classic)
    consumers: list[Member] = []
    for i in range(3):
        c = start_member(bootstrap, group, topic, "consumer", f"consumer-{i}")
        everyone.append(c)
        consumers.append(c)
        live.append(c)
        wait_assignment(live, topic, timeout=90, partitions=PARTITIONS)
        assert group_type(bootstrap, group) == "consumer"
        leaving = live.pop(0)
        leaving.stop()
        wait_assignment(live, topic, timeout=90, partitions=PARTITIONS)
    assert group_type(bootstrap, group) == "consumer"

    # downgrade: classic members replace the consumer ones; the group stays a consumer group until the last
    # consumer-protocol member leaves
    for i in range(3):
        k = start_member(bootstrap, group, topic, "classic", f"classic-again-{i}")
        everyone.append(k)
        live.append(k)
        wait_assignment(live, topic, timeout=90, partitions=PARTITIONS)
        leaving = live.pop(0)
        leaving.stop()
        if i < 2:
            assert group_type(bootstrap, group) == "consumer"
        wait_assignment(live, topic, timeout=90, partitions=PARTITIONS)
    wait_type(bootstrap, group, "classic")

    sent = producer.stop()
    assert len(sent) > 300
    wait_consumed(everyone, sent, timeout=90)
    expected = end_offsets(bootstrap, topic, PARTITIONS)
    deadline = time.monotonic() + 30
    while {p: o for p, (o, _) in committed_offsets(bootstrap, group, topic, PARTITIONS).items()} != expected:
        assert time.monotonic() < deadline, (committed_offsets(bootstrap, group, topic, PARTITIONS), expected)
        time.sleep(0.2)
    for m in live:
        m.stop()
    twice = committed_by_two(everyone)
    assert not twice, f"{len(twice)} records committed by two members, e.g. {sorted(twice.items())[:5]}"
    assert_each_once_unless_uncommitted(everyone, sent)
    assert all(not m.errors() for m in everyone), [(m.name, m.errors()[:2]) for m in everyone if m.errors()]
