"""Consume-transform-produce, exactly once, while the group rebalances, on 3 nodes (issue 33 item 2).

Three nodes (RF 3, ``min.insync.replicas`` 2 for the topics, ``__consumer_offsets`` and
``__transaction_state``); an input topic of 31 partitions gets ``RECORDS`` records from one idempotent producer,
written steadily over about ``FEED_SECONDS`` while the steps below run. Processors (``compat_tests/eos_processor.py``, librdkafka, one process each, transactional.id per
processor, offsets committed in the transaction with the group's metadata, KIP-447) copy them to the output topic
while the group changes under them: a second and a third processor join, one leaves with SIGTERM, one is killed
with SIGKILL (its open transaction is aborted when a processor of the same transactional id starts again, or by
the transaction timeout). Under the range and cooperative-sticky assignors of the classic protocol (dynamic and
static members) and under the consumer protocol (KIP-848): a read_committed reader of the output finds every input
record exactly once, and no processor was fenced (PRODUCER_FENCED and other fatal errors end a processor: the
issue saw them on the abort of an empty transaction right after a commit).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.event_process import EventProcess
from kbroker.testing.cluster import KbrokerCluster, wait_until

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 31
RECORDS = 4000
FEED_SECONDS = 25
OVERRIDES = {
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3", "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
    # a killed KIP-848 member is out after 10 s, not the default 45 s
    "group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "10000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KbrokerCluster(tmp_path_factory.mktemp("eos-rebalance"), nodes=3, overrides=OVERRIDES)
    try:
        c.start()
        yield c
    finally:
        c.stop()


class Processor(EventProcess):
    def __init__(self, bootstrap: str, group: str, topics: tuple[str, str], instance: int, protocol: str,
                 assignor: str, static: bool) -> None:
        cmd = [sys.executable, "compat_tests/eos_processor.py", "--bootstrap", bootstrap, "--group", group,
               "--input", topics[0], "--output", topics[1], "--instance", str(instance), "--protocol", protocol,
               "--assignor", assignor]
        super().__init__(cmd + (["--static"] if static else []), f"processor {instance}")

    def committed(self) -> int:
        return sum(e["records"] for e in self.snapshot() if e["event"] == "committed")

    def fatal(self) -> list[dict]:
        return [e for e in self.snapshot() if e["event"] == "fatal"]

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _read_committed(bootstrap: str, topic: str, expected: int, timeout: float) -> Counter:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    seen: Counter = Counter()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(500, 0.5) if m.error() is None]
            for m in msgs:
                seen[m.value()] += 1
            if msgs:
                quiet_since = time.monotonic()
            elif sum(seen.values()) >= expected and time.monotonic() - quiet_since > 3:
                break  # everything there, and nothing more arriving (a duplicate would come now)
    finally:
        consumer.close()
    return seen


# cooperative-sticky with static members is left out: against Apache Kafka 4.3.1 librdkafka 2.16's group stalled
# in one of four runs (60 records of partitions moved from the static member that left never consumed in 240 s)
@pytest.mark.parametrize("protocol,assignor,static", [
    ("classic", "range", True),
    ("classic", "cooperative-sticky", False),
    ("consumer", "uniform", False),
], ids=["range-static", "cooperative-sticky-dynamic", "kip848"])
def test_exactly_once_through_rebalances(cluster, protocol, assignor, static):
    tag = uuid.uuid4().hex[:6]
    topics, group = (f"eos-in-{tag}", f"eos-out-{tag}"), f"eos-{tag}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name, parts in ((topics[0], PARTITIONS), (topics[1], 8)):
        admin.create_topics([NewTopic(name, parts, 3)], request_timeout=30)[name].result(60)
    wait_until(lambda: all(len(admin.list_topics(t, timeout=10).topics[t].partitions) == n
                           for t, n in ((topics[0], PARTITIONS), (topics[1], 8))), 30, "topics")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    stop_feeding = threading.Event()

    def feed() -> None:
        """The input, written steadily (about FEED_SECONDS long) while the group changes: every rebalance meets
        processors at work, whatever each step takes on this target."""
        for i in range(RECORDS):
            if stop_feeding.is_set():
                return
            producer.produce(topics[0], key=str(i % 97).encode(), value=f"r{i}".encode())
            if i % 50 == 49:
                producer.poll(0)
                time.sleep(FEED_SECONDS * 50 / RECORDS)
        producer.flush(60)

    feeder = threading.Thread(target=feed, name="eos-feeder")

    def assigned(p: Processor) -> bool:
        return any(e["event"] == "assigned" and e["partitions"] for e in p.snapshot())

    def start(instance: int) -> Processor:
        return Processor(cluster.bootstrap, group, topics, instance, protocol, assignor, static)

    procs: dict[int, Processor] = {}

    def until(pred, timeout: float, what: str) -> None:
        try:
            wait_until(pred, timeout, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + "\n".join(
                f"{p.name}: {p.snapshot()[-6:]}\n{''.join(p.stderr[-10:])}" for p in procs.values())) from None

    try:
        feeder.start()
        procs[1] = start(1)
        until(lambda: procs[1].committed() >= 200, 90, "processor 1 commits")
        procs[2] = start(2)  # joins: a rebalance while 1 has a transaction open
        until(lambda: assigned(procs[2]), 90, "processor 2 gets partitions")
        procs[3] = start(3)
        until(lambda: assigned(procs[3]), 90, "processor 3 gets partitions")
        left = procs[2].stop()
        assert left == 0, (left, procs[2].snapshot()[-5:], "".join(procs[2].stderr[-30:]))  # leaves
        procs[1].kill()  # no leave, a transaction perhaps open: fenced and aborted by its successor below
        procs[4] = Processor(cluster.bootstrap, group, topics, 1, protocol, assignor, static)
        feeder.join(120)
        assert producer.flush(60) == 0
        until(lambda: sum(p.committed() for p in procs.values()) >= RECORDS, 240,
                   "every input record processed")
        seen = _read_committed(cluster.bootstrap, topics[1], RECORDS, 120)
    finally:
        stop_feeding.set()
        if feeder.is_alive():
            feeder.join(30)
        codes = {i: p.stop() for i, p in procs.items()}  # every processor ends here (1 was killed: -9)
    events = Counter(e["event"] for p in procs.values() for e in p.snapshot())
    print(f"{protocol}/{assignor}{' static' if static else ''}: {dict(events)}")
    # the group did rebalance under the processors (each join, the leave, the kill)
    assert events["assigned"] >= 5, events
    fatal = {i: p.fatal() for i, p in procs.items() if p.fatal()}
    assert not fatal, fatal
    assert codes == {1: -9, 2: 0, 3: 0, 4: 0}, codes
    missing = [f"r{i}" for i in range(RECORDS) if seen[f"r{i}".encode()] == 0]
    duplicated = {v: n for v, n in seen.items() if n > 1}
    assert not missing and not duplicated, (len(missing), missing[:10], len(duplicated), list(duplicated)[:10])
    assert sum(seen.values()) == RECORDS
