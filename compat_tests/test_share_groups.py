"""Share groups (KIP-932) with real share consumers: librdkafka's ``ShareConsumer`` (confluent-kafka) and the
Java ``KafkaShareConsumer`` (compat_tests/java/ShareDriver.java) against a kbroker process.

A share partition starts at the latest offset when the group first fetches it (``share.auto.offset.reset``
latest, Kafka's default), so each test first produces "warm" records until a consumer receives one, then the
records it checks. Lock durations and delivery count limits are set small through broker properties
(``group.share.record.lock.duration.ms``, ``group.share.delivery.count.limit``) to keep the tests short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from kbroker.testing.plugin import current_target

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A short share heartbeat; Kafka also requires the lower bound (group.share.min.heartbeat.interval.ms) lowered.
FAST_HEARTBEAT = {"group.share.heartbeat.interval.ms": 500, "group.share.min.heartbeat.interval.ms": 500}


def share_props(props: dict[str, Any]) -> dict[str, Any]:
    """Broker properties: FAST_HEARTBEAT plus ``props``; a record lock duration below Kafka's default lower
    bound (15 s) lowers group.share.min.record.lock.duration.ms with it."""
    out: dict[str, Any] = {**FAST_HEARTBEAT, **props}
    lock = out.get("group.share.record.lock.duration.ms")
    if lock is not None and int(lock) < 15000:
        out["group.share.min.record.lock.duration.ms"] = lock
    return out


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    name = unique("share")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    return name


def consumer(bootstrap: str, group: str, explicit: bool = False) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(conf)


class Warmup:
    """Produces "warm" records until one reaches a consumer of the group (the share partition is then
    initialized, so later records are delivered)."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.seen = threading.Event()

    def saw(self, value: bytes | None) -> bool:
        if value is not None and value.startswith(b"warm"):
            self.seen.set()
            return True
        return False

    def run(self, poll=None, timeout: float = 30.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not self.seen.is_set():
            assert time.monotonic() < deadline, "no share consumer received a record"
            self.producer.produce(self.topic, b"warm")
            self.producer.flush(5)
            if poll is not None:
                poll()
            else:
                self.seen.wait(0.3)


def data_messages(messages) -> list:  # noqa: ANN001
    out = []
    for m in messages:
        assert m.error() is None, m.error()
        out.append(m)
    return out


# ============================================================================================ confluent-kafka


def test_confluent_five_share_consumers_share_one_partition(kbroker_factory):
    """5 share consumers of one group on a 1-partition topic: every record reaches exactly one of them."""
    broker = kbroker_factory(FAST_HEARTBEAT)
    topic = make_topic(broker.bootstrap)
    group = unique("sg")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    warm = Warmup(producer, topic)
    n = 60
    got: list[tuple[int, bytes, int]] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(idx: int) -> None:
        try:
            c = consumer(broker.bootstrap, group)
            c.subscribe([topic])
            while not stop.is_set():
                for m in data_messages(c.poll(0.5)):
                    if not warm.saw(m.value()):
                        with lock:
                            got.append((idx, m.value(), m.delivery_count()))
            c.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(5)]
    for t in threads:
        t.start()
    try:
        warm.run()
        for i in range(n):
            producer.produce(topic, b"r-%03d" % i)
            producer.flush(5)
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len({v for _, v, _ in got}) < n:
            time.sleep(0.2)
        time.sleep(1.0)  # a duplicate delivery would show up now
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    values = Counter(v for _, v, _ in got)
    assert sorted(values) == [b"r-%03d" % i for i in range(n)]
    assert all(c == 1 for c in values.values()), {v: c for v, c in values.items() if c > 1}
    assert all(d == 1 for _, _, d in got)
    assert len({idx for idx, _, _ in got}) >= 2, "one consumer got every record"


def _one_consumer_setup(broker_props: dict[str, Any], kbroker_factory):  # noqa: ANN001, ANN202
    broker = kbroker_factory(share_props(broker_props))
    topic = make_topic(broker.bootstrap)
    group = unique("sg")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    return broker, topic, group, producer


def _warm_explicit(c: ShareConsumer, warm: Warmup) -> None:
    """Warm up with an explicit-mode consumer: every warm record is accepted."""

    def poll() -> None:
        msgs = data_messages(c.poll(0.5))
        for m in msgs:
            warm.saw(m.value())
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        if msgs:
            c.commit_sync(10)

    warm.run(poll)


def _poll_until(c: ShareConsumer, want, timeout: float, ack=None) -> list:  # noqa: ANN001
    """Poll ``c`` until ``want(messages so far)``; each message is acknowledged with ``ack(m)`` (explicit
    mode) and the acknowledgements committed after each poll."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while not want(seen):
        assert time.monotonic() < deadline, f"timed out; got {[(m.offset(), m.value()) for m in seen]}"
        msgs = data_messages(c.poll(0.5))
        for m in msgs:
            if m.value().startswith(b"warm"):
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                continue
            seen.append(m)
            c.acknowledge(m, ack(m) if ack is not None else AcknowledgeType.ACCEPT)
        if msgs:
            c.commit_sync(10)
    return seen


def _drain(c: ShareConsumer, seconds: float, ack=None) -> list:  # noqa: ANN001
    """Poll for ``seconds``; the non-warm messages (acknowledged like :func:`_poll_until`)."""
    end = time.monotonic() + seconds
    return _poll_until(c, lambda s: time.monotonic() >= end, seconds + 10, ack)


def test_confluent_released_records_come_back_at_once(kbroker_factory):
    """RELEASE makes a record Available again before its 60 s lock would expire; its delivery count grows."""
    broker, topic, group, producer = _one_consumer_setup({"group.share.record.lock.duration.ms": 60000},
                                                         kbroker_factory)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        for i in range(3):
            producer.produce(topic, b"x-%d" % i)
        producer.flush(5)
        released_once: set[int] = set()
        started = time.monotonic()

        def ack(m):  # noqa: ANN001, ANN202
            if m.offset() not in released_once:
                released_once.add(m.offset())
                return AcknowledgeType.RELEASE
            return AcknowledgeType.ACCEPT

        seen = _poll_until(c, lambda s: sum(1 for m in s if m.delivery_count() == 2) >= 3, 20, ack)
        assert time.monotonic() - started < 20  # well below the 60 s lock
        by_offset: dict[int, list[int]] = {}
        for m in seen:
            by_offset.setdefault(m.offset(), []).append(m.delivery_count())
        assert sorted(by_offset.values()) == [[1, 2]] * 3
    finally:
        c.close()


def test_confluent_rejected_records_are_not_redelivered(kbroker_factory):
    broker, topic, group, producer = _one_consumer_setup({"group.share.record.lock.duration.ms": 2000},
                                                         kbroker_factory)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        for i in range(3):
            producer.produce(topic, b"bad-%d" % i)
        producer.flush(5)
        rejected = _poll_until(c, lambda s: len(s) >= 3, 20, lambda m: AcknowledgeType.REJECT)
        assert sorted(m.value() for m in rejected) == [b"bad-0", b"bad-1", b"bad-2"]
        time.sleep(2.5)  # longer than the lock: a rejected record must not come back on expiry either
        producer.produce(topic, b"sentinel")
        producer.flush(5)
        later = _poll_until(c, lambda s: any(m.value() == b"sentinel" for m in s), 20)
        later += _drain(c, 1.0)
        assert [m.value() for m in later] == [b"sentinel"]
    finally:
        c.close()


def test_confluent_delivery_count_limit_archives(kbroker_factory):
    """A record released every time is delivered ``group.share.delivery.count.limit`` times, then archived."""
    broker, topic, group, producer = _one_consumer_setup({"group.share.delivery.count.limit": 3},
                                                         kbroker_factory)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        producer.produce(topic, b"poison")
        producer.flush(5)
        release = lambda m: AcknowledgeType.RELEASE  # noqa: E731
        seen = _poll_until(c, lambda s: len(s) >= 3, 20, release)
        producer.produce(topic, b"sentinel")
        producer.flush(5)
        seen += _poll_until(c, lambda s: any(m.value() == b"sentinel" for m in s), 20, release)
        seen += _drain(c, 1.0, release)
        poison = [m.delivery_count() for m in seen if m.value() == b"poison"]
        assert poison == [1, 2, 3]
    finally:
        c.close()


def _acknowledged_at_close(kbroker_factory, ack_type) -> tuple[list, list]:  # noqa: ANN001
    """Rounds of: a new explicit-mode consumer gets the round's records, acknowledges each with ``ack_type`` and
    closes at once (the acknowledgements go in its final ShareAcknowledge, next to its leave heartbeat). Then
    (every delivery of a round's record, what a last consumer gets besides a sentinel)."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
    finally:
        c.close()
    return _acknowledged_at_close_rounds(broker.bootstrap, topic, group, producer, [ack_type] * 8)


def _acknowledged_at_close_rounds(bootstrap: str, topic: str, group: str, producer: Producer,
                                  acks: list) -> tuple[list, list]:
    """One round per entry of ``acks`` (see :func:`_acknowledged_at_close`) on a share group whose partition is
    already initialized; 3 records a round."""
    deliveries: list = []
    per_round = 3
    for r, ack_type in enumerate(acks):
        for i in range(per_round):
            producer.produce(topic, b"r%d-%d" % (r, i))
        producer.flush(5)
        c = consumer(bootstrap, group, explicit=True)
        c.subscribe([topic])
        try:
            deadline = time.monotonic() + 30
            mine = 0
            while mine < per_round:
                assert time.monotonic() < deadline, f"round {r}: got {mine} of {per_round} records"
                for m in data_messages(c.poll(0.5)):
                    c.acknowledge(m, AcknowledgeType.ACCEPT if m.value().startswith(b"warm") else ack_type)
                    if m.value().startswith(b"r"):
                        deliveries.append((m.value(), m.delivery_count()))
                        mine += m.value().startswith(b"r%d-" % r)
        finally:
            c.close()  # no commit: the acknowledgements are sent by close
    producer.produce(topic, b"sentinel")
    producer.flush(5)
    last = consumer(bootstrap, group, explicit=True)
    last.subscribe([topic])
    try:
        after = _poll_until(last, lambda s: any(m.value() == b"sentinel" for m in s), 30)
        after += _drain(last, 1.0)
    finally:
        last.close()
    return deliveries, [m.value() for m in after if m.value() != b"sentinel"]


@pytest.mark.kafka_reference
@pytest.mark.parametrize("ack_name", ["ACCEPT", "REJECT"])
def test_confluent_acknowledgements_sent_at_close_are_applied(kbroker_factory, ack_name):
    """Acknowledgements a consumer sends as it closes are applied, even when its leave heartbeat (epoch -1, to the
    coordinator) is handled before its last ShareAcknowledge: the records it held are released when its share
    session ends (after that request's acknowledgements), not when it leaves the group. No record is delivered
    twice, in 8 rounds."""
    deliveries, redelivered = _acknowledged_at_close(kbroker_factory, getattr(AcknowledgeType, ack_name))
    counts = Counter(v for v, _ in deliveries)
    assert sorted(counts) == sorted(b"r%d-%d" % (r, i) for r in range(8) for i in range(3))
    assert all(n == 1 for n in counts.values()), {v: n for v, n in counts.items() if n > 1}
    assert all(d == 1 for _, d in deliveries)
    assert redelivered == []


@pytest.mark.kafka_reference
@pytest.mark.parametrize("where", ["group", "broker"])
def test_confluent_partition_max_record_locks_caps_in_flight_records(kbroker_factory, where):
    """``share.partition.max.record.locks`` (group config) or ``group.share.partition.max.record.locks`` (broker)
    of 100: a consumer given a backlog of 300 single-record batches never has more than 100 records at once; it
    still gets all 300, each once."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    broker_props = {"group.share.partition.max.record.locks": 100} if where == "broker" else {}
    broker, topic, group, producer = _one_consumer_setup(broker_props, kbroker_factory)
    if where == "group":
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.partition.max.record.locks", "100", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        _drain(c, 0.5)
        for i in range(300):
            producer.produce(topic, b"m-%03d" % i)
            producer.flush(5)  # one record per batch
        polls: list[int] = []
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < 300:
            assert time.monotonic() < deadline, f"got {len(got)} of 300 records"
            msgs = [m for m in data_messages(c.poll(0.5)) if m.value().startswith(b"m-")]
            for m in msgs:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                polls.append(len(msgs))
                got.extend(m.value() for m in msgs)
                c.commit_sync(10)
    finally:
        c.close()
    assert sorted(got) == [b"m-%03d" % i for i in range(300)]
    assert max(polls) <= 100, polls
    assert len(polls) >= 3, polls


HOLDING_CONSUMER = textwrap.dedent("""
    import json, os, signal, sys
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic, sig = sys.argv[1:5]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    while True:
        msgs = [m for m in c.poll(0.5) if m.error() is None]
        held = [m.offset() for m in msgs if m.value().startswith(b"held")]
        if held:
            print(json.dumps(held), flush=True)
            os.kill(os.getpid(), getattr(signal, sig))
        for m in msgs:
            c.acknowledge(m)
        if msgs:
            c.commit_sync(10)
""")


ONE_POLL_CONSUMER = textwrap.dedent("""
    import json, os, signal, sys
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    while True:
        msgs = [m for m in c.poll(0.5) if m.error() is None]
        held = [m.offset() for m in msgs if m.value().startswith(b"b-")]
        if held:
            print(json.dumps(held), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        for m in msgs:
            c.acknowledge(m)
        if msgs:
            c.commit_sync(10)
""")


@pytest.mark.kafka_reference
def test_confluent_acquisition_takes_whole_batches(kbroker_factory):
    """Kafka's default acquisition (``ShareAcquireMode`` 0, batch-optimized; ShareFetch v1 has no other) hands out
    whole producer batches: a consumer with ``max.poll.records`` 3 that fetches one 10-record batch acquires all
    10 (MaxRecords is a soft limit), so when it is killed after its first poll all 10 come back to the next member
    with delivery count 2 (acquired one by one, 3 of them would come back with 2, the others with 1)."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    b = consumer(broker.bootstrap, group, explicit=True)
    b.subscribe([topic])
    try:
        _warm_explicit(b, Warmup(producer, topic))
    finally:
        b.close()
    proc = subprocess.Popen([sys.executable, "-c", ONE_POLL_CONSUMER, broker.bootstrap, group, topic],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        batcher = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
        for i in range(10):
            batcher.produce(topic, b"b-%d" % i)
        assert batcher.flush(10) == 0
        held = json.loads(proc.stdout.readline())  # what its one poll returned: all it acquired
        assert held
        assert proc.wait(20) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        seen = _poll_until(c, lambda s: len({m.value() for m in s if m.value().startswith(b"b-")}) >= 10, 60)
    finally:
        c.close()
    counts = {m.value(): m.delivery_count() for m in seen if m.value().startswith(b"b-")}
    assert counts == {b"b-%d" % i: 2 for i in range(10)}, counts


def _records_of_a_stopped_consumer(kbroker_factory, sig: str, lock_ms: int):  # noqa: ANN001, ANN202
    """A consumer acquires "held" records and gets ``sig`` (its process killed, or stopped with its connections
    open); another member then polls: (held offsets, seconds until all came back, their messages)."""
    broker, topic, group, producer = _one_consumer_setup({"group.share.record.lock.duration.ms": lock_ms},
                                                         kbroker_factory)
    b = consumer(broker.bootstrap, group, explicit=True)
    b.subscribe([topic])
    try:
        _warm_explicit(b, Warmup(producer, topic))
    finally:
        b.close()  # only the other consumer is in the group now
    proc = subprocess.Popen([sys.executable, "-c", HOLDING_CONSUMER, broker.bootstrap, group, topic, sig],
                            stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        for i in range(3):
            producer.produce(topic, b"held-%d" % i)
        producer.flush(5)
        line = proc.stdout.readline()
        held_at = time.monotonic()
        held = json.loads(line)
        assert held
        if sig == "SIGKILL":
            assert proc.wait(20) == -signal.SIGKILL
        b = consumer(broker.bootstrap, group, explicit=True)
        b.subscribe([topic])
        try:
            seen = _poll_until(b, lambda s: {m.offset() for m in s} >= set(held), 60)
        finally:
            b.close()
        return held, time.monotonic() - held_at, [m for m in seen if m.offset() in held]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_confluent_killed_consumer_records_released_with_its_connection(kbroker_factory):
    """A consumer killed while holding records: its connection closes, its share session ends and the records
    go to another member at once, long before their 30 s lock would expire (Kafka 4.1+, KAFKA-19015)."""
    held, waited, again = _records_of_a_stopped_consumer(kbroker_factory, "SIGKILL", 30000)
    assert waited < 15, f"redelivered after {waited:.1f}s: the closed connection did not release the records"
    assert all(m.delivery_count() == 2 for m in again)


def test_confluent_hung_consumer_records_redelivered_after_lock(kbroker_factory):
    """A consumer that stops (SIGSTOP: its connection stays open) while holding records: another member gets them
    once their lock expires, not before."""
    lock_ms = 3000
    held, waited, again = _records_of_a_stopped_consumer(kbroker_factory, "SIGSTOP", lock_ms)
    assert waited >= lock_ms / 1000 - 0.5, f"redelivered after {waited:.1f}s, before the lock expired"
    assert all(m.delivery_count() == 2 for m in again)


def test_confluent_share_state_survives_kill_9(kbroker_factory):
    """The share partition's state is in ``__share_group_state``: after a kill -9 and a restart, records that were
    accepted are not delivered again and records produced before the crash but never delivered still are (a
    share partition without its state would start over at the latest offset and deliver none of them)."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        for i in range(3):
            producer.produce(topic, b"x-%d" % i)
        producer.flush(5)
        done = _poll_until(c, lambda s: len(s) >= 3, 20)
        assert sorted(m.value() for m in done) == [b"x-0", b"x-1", b"x-2"]
    finally:
        c.close()
    for i in range(3):
        producer.produce(topic, b"y-%d" % i)
    producer.flush(5)
    broker.kill()
    broker.start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        after = _poll_until(c, lambda s: len(s) >= 3, 40)
        after += _drain(c, 1.0)
        assert [m.value() for m in after] == [b"y-0", b"y-1", b"y-2"]
        assert all(m.delivery_count() == 1 for m in after)
    finally:
        c.close()


def share_groups_cli(bootstrap: str, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "kbroker.cli.share_groups", "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")])))
    assert r.returncode == 0, f"kbroker-share-groups {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_share_group_offsets_apis_and_cli(kbroker_factory):
    """kbroker-share-groups (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets,
    ShareGroupDescribe, ListGroups, DeleteGroups): describe an empty group, reset it to the earliest offset so a
    consumer gets the records produced before the group existed, delete its offsets, delete it."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    for i in range(5):
        producer.produce(topic, b"a-%d" % i)
    producer.flush(5)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        _drain(c, 0.5)
        members = share_groups_cli(broker.bootstrap, "--describe", "--group", group, "--members")
        assert members.split("\n")[1].split()[:3] == ["GROUP", "CONSUMER-ID", "HOST"]
        assert f"{topic}:0" in members
    finally:
        c.close()
    offsets = share_groups_cli(broker.bootstrap, "--describe", "--group", group)
    lines = [line.split() for line in offsets.strip().splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    [row] = lines[1:]
    assert row[:3] == [group, topic, "0"] and int(row[3]) >= 6 and row[4] == "0"  # after a-0..a-4 and a warm one
    state = share_groups_cli(broker.bootstrap, "--describe", "--group", group, "--state")
    assert state.split("\n")[2].split()[0] == group and "Empty" in state
    assert group in share_groups_cli(broker.bootstrap, "--list").split()
    reset = share_groups_cli(broker.bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                             "--to-earliest", "--execute")
    assert reset.strip().splitlines()[-1].split() == [group, topic, "0", "0"]
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        got = _poll_until(c, lambda s: {m.value() for m in s} >= {b"a-%d" % i for i in range(5)}, 30)
        assert sorted(m.offset() for m in got)[:5] == [0, 1, 2, 3, 4]
    finally:
        c.close()
    deleted = share_groups_cli(broker.bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert deleted.strip().splitlines()[-1].split() == [topic, "Successful"]
    assert "has no offsets" in share_groups_cli(broker.bootstrap, "--describe", "--group", group)
    assert "was successful" in share_groups_cli(broker.bootstrap, "--delete", "--group", group)
    assert group not in share_groups_cli(broker.bootstrap, "--list").split()


def kafka_share_groups_tool(bootstrap: str, *args: str) -> str:
    """stdout of Kafka's own kafka-share-groups.sh (ShareGroupCommand, from the 4.3.1 jars)."""
    import shutil

    from kbroker.testing.kafka import run_kafka_tool

    if not shutil.which("java"):
        pytest.skip("no java on PATH for Kafka's ShareGroupCommand")
    r = run_kafka_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand", "--bootstrap-server", bootstrap,
                       *args)
    assert r.returncode == 0, f"kafka-share-groups {args} exited {r.returncode}:\n{r.stdout}\n{r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.kafka_reference
def test_share_groups_cli_reset_new_group_and_describe_like_kafka(kbroker_factory):
    """``kbroker-share-groups --reset-offsets --execute`` on a group nobody used creates it (empty) with the start
    offsets; ``--describe`` (and ``--verbose``) then prints what Kafka's kafka-share-groups.sh prints, character
    for character: the start offset and the lag, also once the group's last member left. The start offset shown is
    the one the share partition last wrote, which is the one it had before that write's acknowledgements (Kafka
    moves it once the write completed): 0 after a-0..a-3 were accepted and a-4 released, 4 after a-4 was
    released until archived."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    b = broker.bootstrap
    for i in range(5):  # one batch each: Kafka keeps the start offset at a partly acknowledged batch's base offset
        producer.produce(topic, b"a-%d" % i)
        producer.flush(5)
    reset = share_groups_cli(b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert reset == kafka_share_groups_tool(b, "--reset-offsets", "--group", group, "--topic", topic,
                                            "--to-earliest", "--dry-run")
    assert reset.strip().splitlines()[-1].split() == [group, topic, "0", "0"]
    assert group in share_groups_cli(b, "--list").split()

    def both(*args: str) -> list[list[str]]:
        ours = share_groups_cli(b, "--describe", "--group", group, *args)
        assert ours == kafka_share_groups_tool(b, "--describe", "--group", group, *args)
        return [line.split() for line in ours.strip().splitlines()]

    assert both() == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], [group, topic, "0", "0", "5"]]
    assert both("--verbose") == [["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"],
                                 [group, topic, "0", "0", "0", "5"]]
    c = consumer(b, group, explicit=True)
    c.subscribe([topic])
    try:  # a-0..a-3 accepted, a-4 released: the share partition's start offset moves to 4, one record of lag
        _poll_until(c, lambda s: {m.value() for m in s} >= {b"a-%d" % i for i in range(5)}, 30,
                    lambda m: AcknowledgeType.RELEASE if m.value() == b"a-4" else AcknowledgeType.ACCEPT)
    finally:
        c.close()
    deadline = time.monotonic() + 30
    while "Empty" not in share_groups_cli(b, "--describe", "--group", group, "--state"):
        assert time.monotonic() < deadline, "the group did not become Empty"
        time.sleep(0.5)
    header, row = both()
    assert header == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"] and row[:3] == [group, topic, "0"]
    assert row[4] == "1"  # the released a-4
    # the persisted start offset is the one the share partition had when it wrote the acknowledgements (0), with
    # a-0..a-3 counted as delivered in the lag; the move to 4 is written with the next state change
    assert row[3] == "0"
    c = consumer(b, group, explicit=True)
    c.subscribe([topic])
    try:  # a-4 released at each delivery until the delivery count limit (5) archives it
        got = _poll_until(c, lambda s: len(s) >= 4, 30, lambda m: AcknowledgeType.RELEASE)
        assert [m.value() for m in got] == [b"a-4"] * 4
    finally:
        c.close()
    # the writes of these releases carry start offset 4, the last one too (it archives a-4: delivered, no lag)
    deadline = time.monotonic() + 30
    while (row := both()[1]) != [group, topic, "0", "4", "0"]:
        assert time.monotonic() < deadline, f"--describe: {row}"
        time.sleep(0.5)


# ============================================================================================ Java client

SHARE_DRIVER_SOURCE = os.path.join(REPO_ROOT, "compat_tests", "java", "ShareDriver.java")


@pytest.fixture(scope="session")
def share_driver() -> list[str]:
    """The command prefix that runs ShareDriver (compiled on first use, like GroupDriver)."""
    import fcntl
    import shutil

    from compat_tests.clients import CLASSES_DIR, JARS_DIR
    from compat_tests.conftest import ensure_jars

    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless")
    ensure_jars()
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = CLASSES_DIR / "ShareDriver.class"
    with open(CLASSES_DIR / ".compile-share.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists() or target.stat().st_mtime < os.stat(SHARE_DRIVER_SOURCE).st_mtime:
            r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                                str(JARS_DIR / "*"), SHARE_DRIVER_SOURCE], capture_output=True, text=True,
                               timeout=300)
            if r.returncode != 0:
                pytest.fail(f"javac ShareDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
            os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")]), "ShareDriver"]


class JavaShareConsumers:
    """``ShareDriver consume`` in a subprocess; its JSON events are collected by a reader thread."""

    def __init__(self, driver: list[str], *args: str) -> None:
        self.proc = subprocess.Popen(driver + ["consume", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def wait_for(self, pred, timeout: float, what: str) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not pred(self.events):
            assert not any(e["event"] == "error" for e in self.events), self.events[-1]
            assert self.proc.poll() is None or pred(self.events), \
                f"ShareDriver exited {self.proc.returncode}: {''.join(self.stderr)[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.events[-5:]}"
            time.sleep(0.1)

    def records(self, prefix: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "record" and e["value"].startswith(prefix)]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)


def java_admin(driver: list[str], *args: str) -> dict[str, Any]:
    r = subprocess.run(driver + list(args), capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and events, f"ShareDriver {args[0]} exited {r.returncode}: {events}\n{r.stderr[-2000:]}"
    return events[-1]


def _java_warm(consumers: JavaShareConsumers, producer: Producer, topic: str) -> None:
    deadline = time.monotonic() + 60
    while not consumers.records("warm"):
        assert time.monotonic() < deadline, "no Java share consumer received a record"
        assert consumers.proc.poll() is None, "".join(consumers.stderr)[-3000:]
        producer.produce(topic, b"warm")
        producer.flush(5)
        time.sleep(0.3)


def test_java_five_share_consumers_share_one_partition(kbroker_factory, share_driver):
    """5 KafkaShareConsumers on a 1-partition topic: every record to exactly one of them; the Admin client
    describes the group (5 members, each assigned the partition) and lists it as a share group."""
    broker = kbroker_factory(FAST_HEARTBEAT)
    topic = make_topic(broker.bootstrap)
    group = unique("sg")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    consumers = JavaShareConsumers(share_driver, "--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
                                   "--consumers", "5")
    n = 60
    try:
        consumers.wait_for(lambda ev: any(e["event"] == "ready" for e in ev), 60, "ready")
        _java_warm(consumers, producer, topic)
        for i in range(n):
            producer.produce(topic, b"r-%03d" % i)
            producer.flush(5)
            time.sleep(0.02)
        consumers.wait_for(lambda ev: len({e["value"] for e in consumers.records("r-")}) >= n, 60, "all records")
        time.sleep(1.0)  # a duplicate delivery would show up now
        described = java_admin(share_driver, "describe", "--bootstrap", broker.bootstrap, "--group", group)
        listed = java_admin(share_driver, "list", "--bootstrap", broker.bootstrap)
    finally:
        consumers.close()
    got = consumers.records("r-")
    values = Counter(e["value"] for e in got)
    assert sorted(values) == ["r-%03d" % i for i in range(n)]
    assert all(c == 1 for c in values.values()), {v: c for v, c in values.items() if c > 1}
    assert all(e["delivery"] == 1 for e in got)
    assert len({e["consumer"] for e in got}) >= 2, "one consumer got every record"
    assert described["state"] == "Stable" and len(described["members"]) == 5
    assert all(m["partitions"] == [f"{topic}-0"] and m["epoch"] == described["epoch"] for m in described["members"])
    assert {"id": group, "state": "Stable", "type": "Share"} in listed["groups"]
    assert any(e["event"] == "closed" for e in consumers.events)


def test_java_released_records_archived_at_delivery_count_limit(kbroker_factory, share_driver):
    """A Java consumer releasing every record: each is delivered ``group.share.delivery.count.limit`` (2) times,
    with delivery counts 1 and 2, then archived."""
    broker = kbroker_factory({**FAST_HEARTBEAT, "group.share.delivery.count.limit": 2})
    topic = make_topic(broker.bootstrap)
    group = unique("sg")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    consumers = JavaShareConsumers(share_driver, "--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
                                   "--ack", "release")
    try:
        consumers.wait_for(lambda ev: any(e["event"] == "ready" for e in ev), 60, "ready")
        _java_warm(consumers, producer, topic)
        for i in range(3):
            producer.produce(topic, b"x-%d" % i)
        producer.flush(5)
        consumers.wait_for(lambda ev: len(consumers.records("x-")) >= 6, 30, "two deliveries each")
        time.sleep(1.5)  # archived: no third delivery
    finally:
        consumers.close()
    deliveries: dict[str, list[int]] = {}
    for e in consumers.records("x-"):
        deliveries.setdefault(e["value"], []).append(e["delivery"])
    assert deliveries == {"x-0": [1, 2], "x-1": [1, 2], "x-2": [1, 2]}


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource ``group`` (it need not exist yet)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([res])[res].result(10)


def _java_setup(kbroker_factory, group_configs: dict[str, str] | None = None):  # noqa: ANN001, ANN202
    """A broker, a 1-partition topic, a producer and a share group starting at the earliest offset (group config
    ``share.auto.offset.reset``, so no warm-up is needed) plus ``group_configs``."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest", **(group_configs or {})})
    return broker, topic, group, producer


def java_take(driver: list[str], bootstrap: str, group: str, topic: str, prefix: str, count: int,
              timeout: float = 30.0, **opts: Any) -> list[dict[str, Any]]:
    """``ShareDriver take`` (one explicit-mode KafkaShareConsumer until ``count`` records starting with ``prefix``);
    its events. ``opts`` are its options (``max_poll_records=3`` -> ``--max-poll-records 3``)."""
    args = ["take", "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--prefix", prefix,
            "--count", str(count), "--timeout-ms", str(int(timeout * 1000))]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v).lower() if isinstance(v, bool) else str(v)]
    r = subprocess.run(driver + args, capture_output=True, text=True, timeout=timeout + 60)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and not any(e["event"] == "error" for e in events), \
        f"ShareDriver take exited {r.returncode}: {events[-5:]}\n{r.stderr[-3000:]}"
    return events


def _records(events: list[dict[str, Any]], prefix: str = "") -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "record" and e["value"].startswith(prefix)]


@pytest.mark.parametrize("ack_name", ["ACCEPT", "REJECT"])
def test_java_acknowledgements_sent_at_close_are_applied(kbroker_factory, share_driver, ack_name):
    """Like test_confluent_acknowledgements_sent_at_close_are_applied with the Java KafkaShareConsumer: 4 rounds of
    a new consumer that acknowledges its round's 3 records with ``ack_name`` and closes without commitSync (close()
    sends them); no record is delivered twice, and a last consumer gets only a sentinel."""
    broker, topic, group, producer = _java_setup(kbroker_factory)
    deliveries: list[tuple[str, int]] = []
    for r in range(4):
        for i in range(3):
            producer.produce(topic, b"r%d-%d" % (r, i))
        producer.flush(5)
        events = java_take(share_driver, broker.bootstrap, group, topic, f"r{r}-", 3, ack=ack_name.lower(),
                           commit=False)
        deliveries += [(e["value"], e["delivery"]) for e in _records(events, "r")]
    producer.produce(topic, b"sentinel")
    producer.flush(5)
    after = _records(java_take(share_driver, broker.bootstrap, group, topic, "sentinel", 1, extra_ms=1000))
    counts = Counter(v for v, _ in deliveries)
    assert sorted(counts) == sorted(f"r{r}-{i}" for r in range(4) for i in range(3))
    assert all(n == 1 for n in counts.values()), {v: n for v, n in counts.items() if n > 1}
    assert all(d == 1 for _, d in deliveries), deliveries
    assert [e["value"] for e in after] == ["sentinel"]


def test_java_partition_max_record_locks_caps_in_flight_records(kbroker_factory, share_driver):
    """Group config ``share.partition.max.record.locks`` 100: a KafkaShareConsumer (max.poll.records 500) given a
    backlog of 300 single-record batches never gets more than 100 records in a poll; it gets all 300, each once."""
    broker, topic, group, producer = _java_setup(kbroker_factory, {"share.partition.max.record.locks": "100"})
    for i in range(300):
        producer.produce(topic, b"m-%03d" % i)
        producer.flush(5)  # one record per batch
    events = java_take(share_driver, broker.bootstrap, group, topic, "m-", 300, timeout=60, extra_ms=500)
    polls = [e["count"] for e in events if e["event"] == "poll"]
    got = [e["value"] for e in _records(events, "m-")]
    assert sorted(got) == ["m-%03d" % i for i in range(300)]
    assert max(polls) <= 100, polls
    assert len(polls) >= 3, polls


@pytest.mark.kafka_reference
@pytest.mark.parametrize("mode", ["batch_optimized", "record_limit"])
def test_java_acquisition_with_max_poll_records(kbroker_factory, share_driver, mode):
    """A KafkaShareConsumer with ``max.poll.records`` 3 and ``share.acquire.mode`` ``mode`` (ShareFetch
    ShareAcquireMode, KIP-1206) fetches one 10-record producer batch and is halted after its first poll (no close:
    its connection drops, its records are released). batch_optimized acquires the whole batch, so all 10 come back
    to the next consumer with delivery count 2; record_limit acquires exactly 3 records a fetch, so its first poll
    has 3 and only those 3 come back with delivery count 2."""
    broker, topic, group, producer = _java_setup(kbroker_factory)
    batcher = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    for i in range(10):
        batcher.produce(topic, b"b-%d" % i)
    assert batcher.flush(10) == 0
    first = java_take(share_driver, broker.bootstrap, group, topic, "b-", 1, max_poll_records=3, acquire_mode=mode,
                      halt=True)
    assert first[-1] == {"event": "halt"}, first
    polled = [e["offset"] for e in _records(first, "b-")]
    again = _records(java_take(share_driver, broker.bootstrap, group, topic, "b-", 10, extra_ms=500), "b-")
    counts = {e["value"]: e["delivery"] for e in again}
    assert sorted(counts) == ["b-%d" % i for i in range(10)] and len(again) == 10, again
    if mode == "batch_optimized":
        assert polled == list(range(10)), polled  # the poll returns the whole batch: more than max.poll.records
        assert counts == {"b-%d" % i: 2 for i in range(10)}, counts
    else:
        assert polled == [0, 1, 2], polled
        assert counts == {"b-%d" % i: 2 if i < 3 else 1 for i in range(10)}, counts


# ============================================================================================ cluster


def _topic_id(admin: AdminClient, topic: str) -> bytes:
    """The topic's id as the 16 bytes kbroker keys share state with."""
    from confluent_kafka import TopicCollection

    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    return ((tid.get_most_significant_bits() & (2**64 - 1)) << 64
            | (tid.get_least_significant_bits() & (2**64 - 1))).to_bytes(16, "big")


def _all_led(admin: AdminClient, name: str) -> dict[int, int] | None:
    """partition -> leader of ``name`` once every partition has one, else None."""
    t = admin.list_topics(timeout=10).topics.get(name)
    led = {p: pm.leader for p, pm in (t.partitions.items() if t is not None else [])}
    return led if led and all(v >= 0 for v in led.values()) else None


def test_share_state_moves_with_the_partition_leader_in_a_cluster(tmp_path):
    """3 nodes, a replicated 1-partition topic, a share group whose state (``__share_group_state``) is kept by
    another node than the partition's leader: the leader writes the state with WriteShareGroupState, and after
    it is killed the new leader reads it with ReadShareGroupState: accepted records stay done, records produced
    before the crash and never delivered are delivered, each once."""
    from kbroker.coordinator.runtime import partition_for
    from kbroker.coordinator.share.service import SHARE_STATE_TOPIC, coordinator_key
    from kbroker.testing.cluster import KbrokerCluster, wait_until

    with KbrokerCluster(tmp_path, nodes=3, overrides={"broker.session.timeout.ms": 6000,
                                                      "broker.heartbeat.interval.ms": 500,
                                                      **FAST_HEARTBEAT}) as cluster:
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "all three brokers registered")
        topic = unique("share")
        admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=30)[topic].result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})

        probe = consumer(bootstrap, unique("probe"), explicit=True)  # creates __share_group_state
        probe.subscribe([topic])
        try:
            _warm_explicit(probe, Warmup(producer, topic))
        finally:
            probe.close()

        topic_id = _topic_id(admin, topic)

        def leaders() -> tuple[int, dict[int, int], dict[int, int]]:
            try:
                md = admin.list_topics(timeout=10)
            except confluent_kafka.KafkaException:  # a node just killed: its metadata request timed out
                return -1, {}, {}
            state, offsets = md.topics.get(SHARE_STATE_TOPIC), md.topics.get("__consumer_offsets")
            return (md.topics[topic].partitions[0].leader,
                    {p: pm.leader for p, pm in (state.partitions.items() if state is not None else [])},
                    {p: pm.leader for p, pm in (offsets.partitions.items() if offsets is not None else [])})

        leader, state_leaders, group_leaders = wait_until(
            lambda: (x := leaders()) and x[1] and all(v >= 0 for v in x[1].values()) and x, 60,
            "__share_group_state led")
        # the share state is kept by another node than the partition leader, and the group coordinator (whose
        # __consumer_offsets may have one replica, made before every broker registered) survives the kill
        group = next(g for g in (unique("sg") for _ in range(500))
                     if state_leaders[partition_for(coordinator_key(g, topic_id, 0), len(state_leaders))] != leader
                     and group_leaders[partition_for(g, len(group_leaders))] != leader)

        c = consumer(bootstrap, group, explicit=True)
        c.subscribe([topic])
        try:
            _warm_explicit(c, Warmup(producer, topic))
            for i in range(3):
                producer.produce(topic, b"x-%d" % i)
            producer.flush(10)
            done = _poll_until(c, lambda s: len(s) >= 3, 30)
            assert sorted(m.value() for m in done) == [b"x-0", b"x-1", b"x-2"]
            _drain(c, 1.0)  # the acknowledgements are on their way to the share coordinator
        finally:
            c.close()
        for i in range(3):
            producer.produce(topic, b"y-%d" % i)
        producer.flush(10)
        time.sleep(1.0)
        cluster.kill(leader)
        wait_until(lambda: leaders()[0] not in (-1, leader), 60, "a new partition leader")

        c = consumer(bootstrap, group, explicit=True)
        c.subscribe([topic])
        try:
            after = _poll_until(c, lambda s: len(s) >= 3, 60)
            after += _drain(c, 1.5)
            assert [m.value() for m in after] == [b"y-0", b"y-1", b"y-2"]
        finally:
            c.close()


def test_share_group_offset_apis_reach_state_kept_by_another_node(tmp_path):
    """3 nodes, a share group whose coordinator (``__consumer_offsets``) is not the node keeping its state
    (``__share_group_state``): DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets sent to
    the group coordinator read, reset and delete the state on the other node (ReadShareGroupStateSummary,
    InitializeShareGroupState, DeleteShareGroupState), with named topics and (describe) without."""
    from kbroker.cli._wire import WireClient
    from kbroker.coordinator.runtime import partition_for
    from kbroker.coordinator.share.service import SHARE_STATE_TOPIC, coordinator_key
    from kbroker.protocol import messages as m
    from kbroker.testing.cluster import KbrokerCluster, wait_until

    with KbrokerCluster(tmp_path, nodes=3, overrides=dict(FAST_HEARTBEAT)) as cluster:
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 60, "all three brokers registered")
        topic = unique("share")
        admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=30)[topic].result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        probe = consumer(bootstrap, unique("probe"), explicit=True)  # creates __share_group_state
        probe.subscribe([topic])
        try:
            _warm_explicit(probe, Warmup(producer, topic))
        finally:
            probe.close()
        topic_id = _topic_id(admin, topic)

        state_leaders = wait_until(lambda: _all_led(admin, SHARE_STATE_TOPIC), 60, "__share_group_state led")
        group_leaders = wait_until(lambda: _all_led(admin, "__consumer_offsets"), 60, "__consumer_offsets led")
        group = next(g for g in (unique("sg") for _ in range(500))
                     if state_leaders[partition_for(coordinator_key(g, topic_id, 0), len(state_leaders))]
                     != group_leaders[partition_for(g, len(group_leaders))])
        coordinator = group_leaders[partition_for(group, len(group_leaders))]

        c = consumer(bootstrap, group, explicit=True)
        c.subscribe([topic])
        try:
            _warm_explicit(c, Warmup(producer, topic))
            for i in range(3):
                producer.produce(topic, b"x-%d" % i)
            producer.flush(10)
            assert len(_poll_until(c, lambda s: len(s) >= 3, 30)) == 3
            _drain(c, 1.0)  # the acknowledgements reach the share coordinator

            D = m.DescribeShareGroupOffsetsRequest
            with WireClient(bootstrap) as wire:
                conn = wire.node(coordinator)

                def describe(named: bool) -> list[tuple[int, int, int]]:
                    req = D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=[
                        D.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[0])] if named else None)])
                    g = conn.send(req, 1).groups[0]
                    assert g.error_code == 0, g
                    return [(p.partition_index, p.error_code, p.start_offset) for t in g.topics for p in t.partitions]

                # every record was accepted: the start offset is past all of them
                [(_, code, start)] = wait_until(lambda: (d := describe(True)) and d[0][2] > 3 and d, 30,
                                                "the state read from the other node")
                assert code == 0
                assert describe(False) == [(0, 0, start)]  # the subscribed topic's state, found on the other node
                c.close()
                c = None
                # its members gone, the group still lists the partition (initialized, state on the other node)
                wait_until(lambda: [(p, e) for p, e, _ in describe(False)] == [(0, 0)]
                           and conn.send(m.ShareGroupDescribeRequest(group_ids=[group]), 1).groups[0].group_state
                           == "Empty", 30, "an empty group listing its partition")
                A = m.AlterShareGroupOffsetsRequest
                alter = A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
                    A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=1)])])
                resp = wait_until(lambda: (r := conn.send(alter)).error_code == 0 and r, 30, "an empty group")
                assert [p.error_code for t in resp.responses for p in t.partitions] == [0]
                assert describe(True) == [(0, 0, 1)]
                # no members: without topics, the partitions the group coordinator recorded as initialized
                # (ShareGroupStatePartitionMetadata), their state read from the other node
                assert describe(False) == [(0, 0, 1)]
                X = m.DeleteShareGroupOffsetsRequest
                deleted = conn.send(X(group_id=group, topics=[X.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]))
                assert deleted.error_code == 0 and [t.error_code for t in deleted.responses] == [0]
                assert describe(True) == [(0, 0, -1)]
                wait_until(lambda: describe(False) == [], 30, "the deleted topic no longer listed")
        finally:
            if c is not None:
                c.close()


@pytest.mark.xfail(condition=current_target() == "kbroker", strict=True,
                   reason="kbroker: InitializeShareGroupState accepts an unknown topic id (Kafka: "
                          "UNKNOWN_TOPIC_OR_PARTITION); a write with an older leader epoch is fenced (Kafka accepts "
                          "it; it fences a read older than the last read); ReadShareGroupStateSummary counts delivery-complete records (Kafka "
                          "-1); a read of deleted state is UNKNOWN_TOPIC_OR_PARTITION (Kafka INVALID_REQUEST)")
def test_share_state_apis_over_the_wire(kbroker_factory):
    """The share coordinator's inter-broker APIs as another broker calls them: FindCoordinator key type 2 (which
    creates __share_group_state), InitializeShareGroupState, WriteShareGroupState (batches overlay the state, an
    older leader epoch is fenced), ReadShareGroupState, ReadShareGroupStateSummary, DeleteShareGroupState."""
    from kbroker.cli._wire import WireClient
    from kbroker.coordinator.share.service import coordinator_key
    from kbroker.protocol import messages as m
    from kbroker.testing.cluster import wait_until

    broker = kbroker_factory({})
    topic = make_topic(broker.bootstrap)
    tid = _topic_id(AdminClient({"bootstrap.servers": broker.bootstrap}), topic)  # the share state of a topic
    with WireClient(broker.bootstrap) as wire:
        key = coordinator_key("g", tid, 0)
        found = wait_until(lambda: (r := wire.send(m.FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), 6))
                           .coordinators[0].error_code == 0 and r, 30, "the share coordinator").coordinators[0]
        assert found.node_id == 1

        def one(resp):  # noqa: ANN001, ANN202
            return resp.results[0].partitions[0]

        init = m.InitializeShareGroupStateRequest(group_id="g", topics=[m.InitializeShareGroupStateRequest.InitializeStateData(
            topic_id=tid, partitions=[m.InitializeShareGroupStateRequest.PartitionData(partition=0, state_epoch=1,
                                                                                       start_offset=5)])])
        wait_until(lambda: one(wire.send(init)).error_code == 0, 30, "InitializeShareGroupState")
        # a topic id the cluster does not know: UNKNOWN_TOPIC_OR_PARTITION
        unknown = m.InitializeShareGroupStateRequest(group_id="g", topics=[
            m.InitializeShareGroupStateRequest.InitializeStateData(topic_id=uuid.uuid4().bytes, partitions=[
                m.InitializeShareGroupStateRequest.PartitionData(partition=0, state_epoch=1, start_offset=5)])])
        assert one(wire.send(unknown)).error_code == 3
        W = m.WriteShareGroupStateRequest

        def write(leader_epoch: int, start: int, batches, state_epoch: int = 1) -> int:  # noqa: ANN001
            return one(wire.send(W(group_id="g", topics=[W.WriteStateData(topic_id=tid, partitions=[W.PartitionData(
                partition=0, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start,
                state_batches=[W.StateBatch(first_offset=f, last_offset=la, delivery_state=st, delivery_count=c)
                               for f, la, st, c in batches])])]))).error_code

        assert write(3, 5, [(5, 9, 0, 1)]) == 0
        assert write(3, 7, [(8, 8, 2, 1)]) == 0
        assert write(3, 7, [], state_epoch=0) == 124  # FENCED_STATE_EPOCH: an older state epoch
        assert write(2, 7, []) == 0  # an older leader epoch is not fenced on writes (Kafka 4.3)
        R = m.ReadShareGroupStateRequest
        read = one(wire.send(R(group_id="g", topics=[R.ReadStateData(topic_id=tid, partitions=[
            R.PartitionData(partition=0, leader_epoch=3)])])))
        # a read (a new leader loading the state) with an epoch older than the last read's: FENCED_LEADER_EPOCH
        fenced = one(wire.send(R(group_id="g", topics=[R.ReadStateData(topic_id=tid, partitions=[
            R.PartitionData(partition=0, leader_epoch=2)])])))
        assert fenced.error_code == 74
        assert (read.error_code, read.state_epoch, read.start_offset) == (0, 1, 7)
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in read.state_batches] == [
            (7, 7, 0, 1), (8, 8, 2, 1), (9, 9, 0, 1)]
        S = m.ReadShareGroupStateSummaryRequest
        summary = one(wire.send(S(group_id="g", topics=[S.ReadStateSummaryData(topic_id=tid, partitions=[
            S.PartitionData(partition=0)])])))
        # delivery_complete_count -1: not known from state the writes did not count (Kafka 4.3)
        assert (summary.error_code, summary.start_offset, summary.leader_epoch, summary.delivery_complete_count) \
            == (0, 7, 3, -1)
        D = m.DeleteShareGroupStateRequest
        assert one(wire.send(D(group_id="g", topics=[D.DeleteStateData(topic_id=tid, partitions=[
            D.PartitionData(partition=0)])]))).error_code == 0
        gone = one(wire.send(R(group_id="g", topics=[R.ReadStateData(topic_id=tid, partitions=[
            R.PartitionData(partition=0)])])))
        assert gone.error_code == 42  # INVALID_REQUEST: a read of a share partition with no state


def test_java_admin_share_group_offsets(kbroker_factory, share_driver):
    """The Java Admin client's listShareGroupOffsets, alterShareGroupOffsets and deleteShareGroupOffsets on an
    empty share group: the start offset and lag, a reset to offset 2 that a consumer then reads from, and the
    deletion; altering a group with members is refused."""
    broker, topic, group, producer = _one_consumer_setup({}, kbroker_factory)
    for i in range(4):
        producer.produce(topic, b"a-%d" % i)
    producer.flush(5)
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        _warm_explicit(c, Warmup(producer, topic))
        producer.produce(topic, b"later")
        producer.flush(5)
        _poll_until(c, lambda s: any(m.value() == b"later" for m in s), 20, lambda m: AcknowledgeType.RELEASE)
        refused = subprocess.run(share_driver + ["alter", "--bootstrap", broker.bootstrap, "--group", group,
                                                 "--topic", topic, "--partition", "0", "--offset", "0"],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "GroupNotEmptyException" in refused.stdout, refused.stdout
    finally:
        c.close()  # the released "later" record stays Available: one record of lag
    listed = java_admin(share_driver, "offsets", "--bootstrap", broker.bootstrap, "--group", group)
    [(name, info)] = listed["offsets"].items()
    assert name == f"{topic}-0" and info["start"] >= 5 and info["lag"] == 1
    assert java_admin(share_driver, "alter", "--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
                      "--partition", "0", "--offset", "2")["event"] == "altered"
    assert java_admin(share_driver, "offsets", "--bootstrap", broker.bootstrap,
                      "--group", group)["offsets"][f"{topic}-0"]["start"] == 2
    c = consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    try:
        got = _poll_until(c, lambda s: {b"a-2", b"a-3"} <= {m.value() for m in s}, 30)
        assert min(m.offset() for m in got) == 2 and b"a-0" not in {m.value() for m in got}
    finally:
        c.close()
    assert java_admin(share_driver, "delete-offsets", "--bootstrap", broker.bootstrap, "--group", group,
                      "--topic", topic)["event"] == "deleted-offsets"
    assert java_admin(share_driver, "offsets", "--bootstrap", broker.bootstrap, "--group", group)["offsets"] == {}


def test_group_config_share_auto_offset_reset_earliest(kbroker_factory):
    """``share.auto.offset.reset=earliest`` set on the group (ConfigResource GROUP, IncrementalAlterConfigs) makes
    a new share group start at the log start: records produced before any consumer existed are delivered.
    With the default (latest) they are not."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    broker = kbroker_factory(FAST_HEARTBEAT)
    topic = make_topic(broker.bootstrap)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, f"old-{i}".encode())
    assert producer.flush(10) == 0
    early, late = unique("sg-early"), unique("sg-late")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ResourceType.GROUP, early, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)

    def read(group: str, seconds: float) -> list[bytes]:
        c = consumer(broker.bootstrap, group)
        c.subscribe([topic])
        out: list[bytes] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(out) < 10:
            out.extend(m.value() for m in data_messages(c.poll(0.5)))
        c.close()
        return out

    assert sorted(read(early, 20)) == sorted(f"old-{i}".encode() for i in range(10))
    assert read(late, 4) == []


def test_share_group_on_three_nodes_coordinators_apart_from_the_leader(tmp_path, share_driver):
    """3 nodes; a 1-partition topic led (manual replica assignment) by another node than both the share group's
    coordinator (FindCoordinator key type 0) and its share coordinator (FindCoordinator key type 2, the leader of
    the group's ``__share_group_state`` partition). librdkafka: acknowledgements (ACCEPT and REJECT) a consumer
    sends as it closes are applied, none redelivered; the Java KafkaShareConsumer: a plain consume of 20 records,
    each once; the Java Admin client's listShareGroupOffsets: the start offset and a lag of 0; the Java consumer's
    acknowledgements sent by close() applied, and whole-batch acquisition beyond max.poll.records;
    ``kbroker-share-groups --reset-offsets`` of a new group then ``--describe`` of it, empty, through its coordinator
    while another node keeps its share state; then that group's cap of 100 record locks with librdkafka."""
    from kbroker.cli._wire import WireClient
    from kbroker.coordinator.share.service import SHARE_STATE_TOPIC, coordinator_key
    from kbroker.protocol import messages as m
    from kbroker.testing.cluster import KbrokerCluster, wait_until

    with KbrokerCluster(tmp_path, nodes=3, overrides=dict(FAST_HEARTBEAT)) as cluster:
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        nodes = sorted(wait_until(lambda: len(b := admin.list_topics(timeout=10).brokers) == 3 and b, 60,
                                  "all three brokers registered"))
        topic = unique("share")
        leader = nodes[0]
        created = admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[nodes])],
                                      request_timeout=30)
        created[topic].result(60)
        assert wait_until(lambda: _all_led(admin, topic), 60, "the topic led") == {0: leader}
        topic_id = _topic_id(admin, topic)
        candidates = [unique("sg") for _ in range(30)]

        def coordinators(wire, key_type: int, keys: list[str]) -> dict[str, int] | None:  # noqa: ANN001
            resp = wire.send(m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=keys), 6)
            found = {c.key: c.node_id for c in resp.coordinators if c.error_code == 0}
            return found if len(found) == len(keys) else None

        with WireClient(bootstrap) as wire:  # key type 2 creates __share_group_state
            group_coord = wait_until(lambda: coordinators(wire, 0, candidates), 60, "the group coordinators")
            keys = {coordinator_key(g, topic_id, 0): g for g in candidates}
            share_coord = {keys[k]: n for k, n in
                           wait_until(lambda: coordinators(wire, 2, list(keys)), 60, "the share coordinators").items()}
        group = next(g for g in candidates if group_coord[g] != leader and share_coord[g] != leader)
        assert SHARE_STATE_TOPIC in admin.list_topics(timeout=10).topics
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})

        deliveries, redelivered = _acknowledged_at_close_rounds(
            bootstrap, topic, group, producer, [AcknowledgeType.ACCEPT, AcknowledgeType.REJECT] * 2)
        counts = Counter(v for v, _ in deliveries)
        assert sorted(counts) == sorted(b"r%d-%d" % (r, i) for r in range(4) for i in range(3))
        assert all(n == 1 for n in counts.values()), {v: n for v, n in counts.items() if n > 1}
        assert all(d == 1 for _, d in deliveries) and redelivered == []

        for i in range(20):
            producer.produce(topic, b"p-%02d" % i)
        producer.flush(10)
        got = _records(java_take(share_driver, bootstrap, group, topic, "p-", 20, timeout=60, extra_ms=1000))
        assert sorted(e["value"] for e in got) == ["p-%02d" % i for i in range(20)]
        assert all(e["delivery"] == 1 for e in got), got
        # listShareGroupOffsets (group coordinator): the state the leader wrote to the share coordinator, the lag with
        # the leader's high watermark. All 33 records (4 rounds of 3, the sentinel, these 20) are done; the persisted
        # start offset is the one the share partition had when it wrote the acknowledgement of the 20 (13), which
        # counts them as delivered in the lag
        want = {f"{topic}-0": {"start": 13, "lag": 0}}
        wait_until(lambda: java_admin(share_driver, "describe", "--bootstrap", bootstrap, "--group", group)["state"]
                   == "Empty", 30, "an empty group")
        deadline = time.monotonic() + 30
        while (listed := java_admin(share_driver, "offsets", "--bootstrap", bootstrap, "--group", group, "--topic",
                                    topic, "--partition", "0")["offsets"]) != want:
            assert time.monotonic() < deadline, f"listShareGroupOffsets: {listed}, not {want}"
            time.sleep(0.5)

        # KafkaShareConsumer: acknowledgements close() sends (no commitSync) are applied, ACCEPT then REJECT
        for r, ack in enumerate(["accept", "reject"]):
            for i in range(3):
                producer.produce(topic, b"j%d-%d" % (r, i))
            producer.flush(10)
            events = java_take(share_driver, bootstrap, group, topic, f"j{r}-", 3, ack=ack, commit=False)
            assert [e["delivery"] for e in _records(events, f"j{r}-")] == [1, 1, 1], events
        # whole-batch acquisition: max.poll.records 3 and one 10-record batch; halted after its first poll, the
        # consumer held all 10, which come back with delivery count 2 (and none of the acknowledged j records)
        batcher = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1000})
        for i in range(10):
            batcher.produce(topic, b"b-%d" % i)
        assert batcher.flush(10) == 0
        first = java_take(share_driver, bootstrap, group, topic, "b-", 1, max_poll_records=3, halt=True)
        assert first[-1] == {"event": "halt"} and len(_records(first, "b-")) == 10, first
        again = java_take(share_driver, bootstrap, group, topic, "b-", 10, extra_ms=500)
        assert {e["value"]: e["delivery"] for e in _records(again, "b-")} == {"b-%d" % i: 2 for i in range(10)}
        assert _records(again, "j") == []

        # kbroker-share-groups on a new group whose share state is kept by another node than its coordinator:
        # --reset-offsets creates it with the start offset, --describe (no members, no topics named) lists it:
        # the group coordinator's record of initialized partitions (ShareGroupStatePartitionMetadata)
        group2 = next(g for g in candidates if g != group and group_coord[g] != share_coord[g])
        reset = share_groups_cli(bootstrap, "--reset-offsets", "--group", group2, "--topic", topic, "--to-earliest",
                                 "--execute")
        assert reset.strip().splitlines()[-1].split() == [group2, topic, "0", "0"]
        [row] = [line.split() for line in share_groups_cli(bootstrap, "--describe", "--group",
                                                           group2).strip().splitlines()[1:]]
        assert row[:4] == [group2, topic, "0", "0"] and int(row[4]) > 0, row

        # share.partition.max.record.locks 100 (group config) on the leader: librdkafka given a backlog of 300
        # single-record batches (the group reset to the end first) gets never more than 100 records a poll, all once
        share_groups_cli(bootstrap, "--reset-offsets", "--group", group2, "--topic", topic, "--to-latest",
                         "--execute")
        set_group_configs(bootstrap, group2, {"share.partition.max.record.locks": "100"})
        for i in range(300):
            producer.produce(topic, b"m-%03d" % i)
            producer.flush(10)  # one record per batch
        c = consumer(bootstrap, group2, explicit=True)
        c.subscribe([topic])
        polls: list[int] = []
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len([v for v in got if v.startswith(b"m-")]) < 300:
                assert time.monotonic() < deadline, f"got {len(got)} records"
                msgs = data_messages(c.poll(0.5))
                for msg in msgs:
                    c.acknowledge(msg, AcknowledgeType.ACCEPT)
                if msgs:
                    polls.append(len(msgs))
                    got.extend(msg.value() for msg in msgs)
                    c.commit_sync(10)
        finally:
            c.close()
        assert sorted(v for v in got if v.startswith(b"m-")) == [b"m-%03d" % i for i in range(300)]
        assert max(polls) <= 100 and len(polls) >= 3, polls


def test_share_state_topic_keys_and_group_lock_duration_on_three_nodes(tmp_path):
    """3 nodes started with ``share.coordinator.state.topic.num.partitions`` 7, ``.replication.factor`` 2 and
    ``.min.isr`` 1 (Kafka's defaults are 50, 3, 2) and ``group.share.min.record.lock.duration.ms`` 1000 /
    ``group.share.max.record.lock.duration.ms`` 30000: ``__share_group_state`` (created by the first
    FindCoordinator of key type 2) has 7 partitions of 2 replicas and ``min.insync.replicas`` 1 (Admin
    describe), and no node logs the keys as unknown. The group config ``share.record.lock.duration.ms`` is bounded
    by the two broker keys: 999 and 30001 are refused (INVALID_CONFIG), 1000 is taken; a librdkafka share consumer
    of that group stopped (SIGSTOP, its connection open) while holding records on a partition led by another node
    than the group's coordinator and its share coordinator: another consumer gets them with delivery count 2
    within seconds (the broker's 30 s lock would hold them for 30 s)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    from kbroker.cli._wire import WireClient
    from kbroker.coordinator.share.service import SHARE_STATE_TOPIC, coordinator_key
    from kbroker.protocol import messages as m
    from kbroker.testing.cluster import KbrokerCluster, wait_until

    keys = {"share.coordinator.state.topic.num.partitions": 7, "share.coordinator.state.topic.replication.factor": 2,
            "share.coordinator.state.topic.min.isr": 1, "group.share.min.record.lock.duration.ms": 1000,
            "group.share.max.record.lock.duration.ms": 30000}
    with KbrokerCluster(tmp_path, nodes=3, overrides={**FAST_HEARTBEAT, **keys}) as cluster:
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        nodes = sorted(wait_until(lambda: len(b := admin.list_topics(timeout=10).brokers) == 3 and b, 60,
                                  "all three brokers registered"))
        topic = unique("share")
        leader = nodes[0]
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[nodes])],
                            request_timeout=30)[topic].result(60)
        assert wait_until(lambda: _all_led(admin, topic), 60, "the topic led") == {0: leader}
        topic_id = _topic_id(admin, topic)
        candidates = [unique("sg") for _ in range(30)]

        def coordinators(wire, key_type: int, ks: list[str]) -> dict[str, int] | None:  # noqa: ANN001
            resp = wire.send(m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=ks), 6)
            found = {c.key: c.node_id for c in resp.coordinators if c.error_code == 0}
            return found if len(found) == len(ks) else None

        with WireClient(bootstrap) as wire:  # key type 2 creates __share_group_state
            group_coord = wait_until(lambda: coordinators(wire, 0, candidates), 60, "the group coordinators")
            by_key = {coordinator_key(g, topic_id, 0): g for g in candidates}
            share_coord = {by_key[k]: n for k, n in
                           wait_until(lambda: coordinators(wire, 2, list(by_key)), 60,
                                      "the share coordinators").items()}
        group = next(g for g in candidates if group_coord[g] != leader and share_coord[g] != leader)

        state = wait_until(lambda: _all_led(admin, SHARE_STATE_TOPIC), 60, "__share_group_state led")
        assert sorted(state) == list(range(7))
        parts = admin.list_topics(timeout=10).topics[SHARE_STATE_TOPIC].partitions
        assert {len(p.replicas) for p in parts.values()} == {2}, {i: p.replicas for i, p in parts.items()}
        res = ConfigResource(ResourceType.TOPIC, SHARE_STATE_TOPIC)
        described = admin.describe_configs([res])[res].result(30)
        assert described["min.insync.replicas"].value == "1"

        for bad in ("999", "30001"):
            with pytest.raises(KafkaException) as refused:
                set_group_configs(bootstrap, group, {"share.record.lock.duration.ms": bad})
            assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value
        set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest",
                                             "share.record.lock.duration.ms": "1000"})
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        proc = subprocess.Popen([sys.executable, "-c", HOLDING_CONSUMER, bootstrap, group, topic, "SIGSTOP"],
                                stdout=subprocess.PIPE, text=True)
        try:
            for i in range(3):
                producer.produce(topic, b"held-%d" % i)
            producer.flush(10)
            held = json.loads(proc.stdout.readline())
            held_at = time.monotonic()
            assert held
            c = consumer(bootstrap, group, explicit=True)
            c.subscribe([topic])
            try:
                seen = _poll_until(c, lambda s: {msg.offset() for msg in s} >= set(held), 60)
            finally:
                c.close()
            waited = time.monotonic() - held_at
        finally:
            proc.kill()
            proc.wait(10)
        assert waited < 15, f"redelivered after {waited:.1f}s: not the group's 1 s lock"
        assert all(msg.delivery_count() == 2 for msg in seen if msg.offset() in held), \
            [(msg.offset(), msg.delivery_count()) for msg in seen]
        for node in cluster.nodes.values():
            log = node.log_path.read_text(errors="replace") if node.log_path and node.log_path.exists() else ""
            warned = [line for line in log.splitlines() if "share.coordinator.state.topic" in line
                      and ("unknown" in line.lower() or "isn't a known" in line or "not used" in line)]
            assert not warned, warned[:3]
