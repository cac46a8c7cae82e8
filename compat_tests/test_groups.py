"""Consumer groups with real clients: the classic protocol and committed offsets (issue 3, part 1).

Every group member is its own process so it can be killed with SIGKILL: Python clients run
compat_tests/test_groups_member.py, the Java client compat_tests/java/GroupDriver.java. Each member
commits synchronously after processing every batch (commit-after-process) and reports what it processed and
committed as JSON lines. Checks:

* N members of one group over a 12-partition topic consume every record exactly once (Java, confluent-kafka,
  kafka-python, aiokafka), and the committed offsets then equal the log end offsets;
* two groups on one topic each receive every record; a mixed group of Java and librdkafka members;
* the client-side assignors (roundrobin, sticky, cooperative-sticky) work unchanged;
* a member that leaves, and one killed with -9, make the group rebalance; nothing is lost, and records
  are processed twice only if the killed member processed them without committing;
* a static member (``group.instance.id``) restarted within its session timeout gets its partitions back
  without a rebalance;
* committed offsets and their metadata survive a kill -9 of the broker;
* lag = log end offset - committed offset, per partition, through the Admin API;
* ListGroups / DescribeGroups / DeleteGroups / OffsetDelete through confluent-kafka's and Java's Admin clients;
* bad input, hand-encoded (stale generation, unknown member, commit during a rebalance, unknown group,
  fenced static member, oversized metadata) gets Kafka's error codes.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest

from compat_tests import wire
from compat_tests.clients import CLASSES_DIR, JARS_DIR, REPO_ROOT, admin_client, create_topic
from compat_tests.event_process import EventProcess

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 12
MEMBER_CLIENTS = ("java", "confluent", "kafka-python", "aiokafka")
GROUP_DRIVER_SOURCE = Path(__file__).parent / "java" / "GroupDriver.java"
SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the quickest a killed member can be noticed


# ============================================================================================ the Java driver


@pytest.fixture(scope="session")
def group_driver() -> list[str]:
    """The command prefix that runs GroupDriver (compiled on first use, like the KafkaDriver fixture)."""
    from compat_tests.conftest import ensure_jars

    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless")
    ensure_jars()
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = CLASSES_DIR / "GroupDriver.class"
    with open(CLASSES_DIR / ".compile-group.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists() or target.stat().st_mtime < GROUP_DRIVER_SOURCE.stat().st_mtime:
            r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                                str(JARS_DIR / "*"), str(GROUP_DRIVER_SOURCE)], capture_output=True, text=True,
                               timeout=300)
            if r.returncode != 0:
                pytest.fail(f"javac GroupDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
            os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")]), "GroupDriver"]


def java_admin(group_driver: list[str], *args: str) -> dict[str, Any]:
    r = subprocess.run(group_driver + list(args), capture_output=True, text=True, timeout=60)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and events, f"GroupDriver {args[0]} exited {r.returncode}: {events}\n{r.stderr[-2000:]}"
    return events[-1]


# ============================================================================================ members


def client_available(name: str) -> None:
    mod = {"confluent": "confluent_kafka", "kafka-python": "kafka", "aiokafka": "aiokafka"}.get(name)
    if mod is not None:
        try:
            __import__(mod)
        except ImportError:
            pytest.skip(f"{name} is not installed")


class Member(EventProcess):
    """A group member process. Its JSON events are collected by a reader thread."""

    def __init__(self, cmd: list[str], name: str) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
                   PYTHONUNBUFFERED="1")
        super().__init__(cmd, name, stdin=subprocess.PIPE, env=env)

    def records(self) -> list[tuple[str, int, int]]:
        return [(e["topic"], e["partition"], e["offset"]) for e in self.snapshot() if e["event"] == "record"]

    def assignment(self) -> set[tuple[str, int]]:
        current: set[tuple[str, int]] = set()
        for e in self.snapshot():
            if e["event"] == "assigned":
                current |= {(t, p) for t, p in e["partitions"]}
            elif e["event"] in ("revoked",):
                current -= {(t, p) for t, p in e["partitions"]}
            elif e["event"] in ("closed", "exited"):
                current = set()
        return current

    def rebalance_events(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] in ("assigned", "revoked")]

    def committed(self) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for e in self.snapshot():
            if e["event"] == "committed":
                for t, p, o in e["offsets"]:
                    out[(t, p)] = o
        return out

    def uncommitted(self) -> set[tuple[str, int, int]]:
        """Records this member processed whose commit-after-process failed (``commit_failed``: the group was
        rebalancing or had moved to another generation) or never ran: Kafka's at-least-once lets the next
        owner of the partition process them again."""
        out: set[tuple[str, int, int]] = set()
        pending: list[tuple[str, int, int]] = []
        for e in self.snapshot():
            if e["event"] == "record":
                pending.append((e["topic"], e["partition"], e["offset"]))
            elif e["event"] == "committed":
                pending = []
            elif e["event"] == "commit_failed":
                out.update(pending)
                pending = []
        return out | set(pending)

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "error"]

    def stop(self, timeout: float = 30) -> None:
        """Clean shutdown: EOF on stdin makes the member close its consumer (and leave the group)."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"{self.name} did not stop within {timeout}s: {''.join(self.stderr[-30:])}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()


@pytest.fixture
def members() -> Iterable[Callable[..., Member]]:
    """``start(client, bootstrap, group, topics, **options)`` -> a running :class:`Member`; all killed at teardown."""
    started: list[Member] = []

    def start(client: str, bootstrap: str, group: str, topics: list[str], *, driver: list[str] | None = None,
              instance_id: str | None = None, session_ms: int = SESSION_MS, metadata: str = "",
              assignor: str = "range", name: str | None = None) -> Member:
        opts = ["--bootstrap", bootstrap, "--group", group, "--topics", ",".join(topics),
                "--session-timeout-ms", str(session_ms), "--heartbeat-interval-ms", "500",
                "--assignor", assignor, "--metadata", metadata, "--client-id", f"compat-{client}"]
        if instance_id:
            opts += ["--instance-id", instance_id]
        if client == "java":
            assert driver is not None
            cmd = driver + ["member"] + opts
        else:
            cmd = [sys.executable, "-m", "compat_tests.test_groups_member", "--client", client] + opts
        m = Member(cmd, name or f"{client}-{len(started)}")
        started.append(m)
        return m

    yield start
    for m in started:
        m.close()


def driver_for(client: str, request: pytest.FixtureRequest) -> list[str] | None:
    client_available(client)
    return request.getfixturevalue("group_driver") if client == "java" else None


# ============================================================================================ data and checks


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, count: int, start: int = 0, partitions: int = PARTITIONS) -> dict[tuple[str, int, int], str]:
    """``count`` records spread round-robin over the partitions; returns (topic, partition, offset) -> value."""
    from confluent_kafka import Producer

    out: dict[tuple[str, int, int], str] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            out[(msg.topic(), msg.partition(), msg.offset())] = msg.value().decode()

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, value=f"v{i}".encode(), key=str(i).encode(), partition=i % partitions, on_delivery=delivered)
    assert p.flush(30) == 0 and not errors, errors
    assert len(out) == count
    return out


def new_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = unique("groups")
    create_topic(bootstrap, name, partitions)
    return name


def processed(ms: Iterable[Member]) -> Counter:
    c: Counter = Counter()
    for m in ms:
        c.update(m.records())
    return c


def assert_each_once_unless_uncommitted(ms: list[Member], expected: Iterable[tuple[str, int, int]]) -> None:
    """Every record processed, and none twice unless its first processing was never committed: the members
    commit after processing, and a commit the coordinator refuses while the group rebalances
    (REBALANCE_IN_PROGRESS in CompletingRebalance, ILLEGAL_GENERATION once the generation moved on, both as
    in Kafka) leaves that work to the partition's next owner, Kafka's at-least-once."""
    counts = processed(ms)
    assert set(counts) == set(expected)
    dupes = {k for k, n in counts.items() if n > 1}
    uncommitted = set().union(*(m.uncommitted() for m in ms))
    assert dupes <= uncommitted, (
        f"{len(dupes - uncommitted)} records processed twice although committed, e.g. "
        f"{sorted(dupes - uncommitted)[:5]}; processed by "
        f"{[(m.name, sorted(r for r in m.records() if r in dupes)[:3]) for m in ms]}; commit failures "
        f"{[(m.name, [e for e in m.snapshot() if e['event'] == 'commit_failed'][:3]) for m in ms]}")


def wait_consumed(ms: list[Member], expected: Iterable[tuple[str, int, int]], timeout: float = 60) -> None:
    want = set(expected)
    deadline = time.monotonic() + timeout
    while True:
        got = set(processed(ms))
        if want <= got:
            return
        dead = [m.name for m in ms if m.errors()]
        if dead or time.monotonic() > deadline:
            missing = sorted(want - got)
            raise AssertionError(f"{len(missing)} of {len(want)} records not consumed (e.g. {missing[:5]}); "
                                 f"errors: {[(m.name, m.errors()[:2]) for m in ms if m.errors()]}; stderr of "
                                 f"first member: {''.join(ms[0].stderr[-20:])}")
        time.sleep(0.1)


def wait_assignment(ms: list[Member], topic: str, timeout: float = 60, partitions: int = PARTITIONS) -> None:
    """Until the members' current assignments split the topic's partitions between them."""
    want = {(topic, p) for p in range(partitions)}
    deadline = time.monotonic() + timeout
    while True:
        sets = [m.assignment() for m in ms]
        union = set().union(*sets)
        if union == want and sum(len(s) for s in sets) == len(want) and all(sets):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"assignments never settled: {[(m.name, sorted(s)) for m, s in zip(ms, sets)]}; "
                                 + "; ".join(f"{m.name}: last events {m.snapshot()[-4:]}, stderr "
                                             f"{''.join(m.stderr[-80:])}" for m in ms))
        time.sleep(0.1)


def wait_balanced(ms: list[Member], topic: str, sizes: list[int], timeout: float = 60) -> None:
    """Until the members' assignments split the topic with exactly these sizes (sorted). A group passes
    through other complete splits while it converges (a late joiner, the consumer protocol's revoke-then-
    assign steps), so a test that checks the final balance waits for it instead of sampling once."""
    deadline = time.monotonic() + timeout
    while True:
        wait_assignment(ms, topic, timeout=max(1.0, deadline - time.monotonic()))
        got = sorted(len(m.assignment()) for m in ms)
        if got == sorted(sizes):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"assignment sizes {got}, expected {sorted(sizes)}")
        time.sleep(0.1)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, tuple[int, str]]:
    """partition -> (committed offset, metadata), with a hand-encoded OffsetFetch v5 (FindCoordinator first).

    Not through confluent-kafka: its Python binding commits metadata with the C string's terminating NUL
    (``"m"`` arrives as ``"m\\x00"``), and decoding ``TopicPartition.metadata`` of list_consumer_group_offsets
    results sometimes reads past the end of a string committed by another client (2.16). The NUL is
    stripped here; what the broker stores is exactly what the client sent."""
    with wire.KafkaConnection.to(bootstrap) as conn:
        deadline = time.monotonic() + 30
        while True:
            rd = conn.request(10, 2, wire.string(group) + wire.i8(0))  # FindCoordinator v2
            rd.i32()
            if rd.i16() == NONE:
                break
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
        while True:
            rd = conn.request(9, 5, wire.string(group) + wire.array([
                wire.string(topic) + wire.array([wire.i32(p) for p in range(partitions)])]))
            rd.i32()
            topics = rd.array(lambda r: (r.string(), r.array(lambda q: (q.i32(), q.i64(), q.i32(), q.string(),
                                                                          q.i16()))))
            error = rd.i16()
            # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR (a restarted node: its __consumer_offsets partition
            # not led again yet): retry
            if error not in (14, 16) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert error == NONE, f"OffsetFetch error {error}"
    out = {}
    for _, parts in topics:
        for p, offset, _, metadata, perr in parts:
            assert perr == NONE, f"partition {p}: error {perr}"
            out[p] = (offset, (metadata or "").rstrip("\x00"))
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


# ============================================================================================ tests


@pytest.mark.parametrize("client", MEMBER_CLIENTS)
def test_group_consumes_every_record_exactly_once(client, request, members, bootstrap_servers):
    driver = driver_for(client, request)
    topic = new_topic(bootstrap_servers)
    group = unique(f"exactly-once-{client}")
    expected = produce(bootstrap_servers, topic, 600)
    ms = [members(client, bootstrap_servers, group, [topic], driver=driver, metadata=f"by-{client}")
          for _ in range(3)]
    wait_consumed(ms, expected)
    wait_assignment(ms, topic)
    counts = processed(ms)
    dupes = {k: n for k, n in counts.items() if n > 1}
    assert not dupes, f"{len(dupes)} records processed more than once, e.g. {list(dupes.items())[:5]}"
    assert set(counts) == set(expected)
    # what the members processed was committed: lag 0 everywhere, with the members' metadata
    ends = end_offsets(bootstrap_servers, topic)
    deadline = time.monotonic() + 20
    while True:
        committed = committed_offsets(bootstrap_servers, group, topic)
        if {p: o for p, (o, _) in committed.items()} == ends or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {p: o for p, (o, _) in committed.items()} == ends
    assert {md for _, md in committed.values()} == {f"by-{client}"}
    for m in ms:
        m.stop()
    assert all(not m.errors() for m in ms), [m.errors() for m in ms]


def test_two_groups_each_get_every_record(members, bootstrap_servers):
    client_available("confluent")
    client_available("kafka-python")
    topic = new_topic(bootstrap_servers)
    expected = produce(bootstrap_servers, topic, 300)
    g1, g2 = unique("pubsub-a"), unique("pubsub-b")
    a = [members("confluent", bootstrap_servers, g1, [topic]) for _ in range(2)]
    b = [members("kafka-python", bootstrap_servers, g2, [topic]) for _ in range(2)]
    wait_consumed(a, expected)
    wait_consumed(b, expected)
    for ms in (a, b):
        assert_each_once_unless_uncommitted(ms, expected)


@pytest.mark.parametrize("client", MEMBER_CLIENTS)
def test_leave_and_kill_rebalance_without_losing_records(client, request, members, bootstrap_servers):
    driver = driver_for(client, request)
    topic = new_topic(bootstrap_servers)
    group = unique(f"rebalance-{client}")
    expected = produce(bootstrap_servers, topic, 120)
    a, b, c = (members(client, bootstrap_servers, group, [topic], driver=driver, name=f"{client}-{x}")
               for x in "abc")
    ms = [a, b, c]
    wait_consumed(ms, expected)
    wait_assignment(ms, topic)
    # a leaves cleanly: b and c take over its partitions
    a.stop()
    wait_assignment([b, c], topic, timeout=30)
    expected.update(produce(bootstrap_servers, topic, 120, start=120))
    wait_consumed(ms, expected)
    # b is killed with -9: c gets everything once b's session times out
    killed_at = time.monotonic()
    b.kill()
    wait_assignment([c], topic, timeout=SESSION_MS / 1000 + 30)
    took = time.monotonic() - killed_at
    assert took < SESSION_MS / 1000 + 15, f"the group noticed the killed member only after {took:.1f}s"
    expected.update(produce(bootstrap_servers, topic, 120, start=240))
    wait_consumed(ms, expected)
    # duplicates only from work b processed but had not committed when it was killed (or a commit refused
    # during one of the rebalances)
    assert_each_once_unless_uncommitted(ms, expected)
    c.stop()


ASSIGNORS = [("java", "roundrobin"), ("java", "sticky"), ("java", "cooperative-sticky"),
             ("confluent", "roundrobin"), ("confluent", "cooperative-sticky"), ("kafka-python", "roundrobin"),
             ("aiokafka", "roundrobin")]


@pytest.mark.parametrize("client,assignor", ASSIGNORS, ids=[f"{c}-{a}" for c, a in ASSIGNORS])
def test_client_side_assignors(client, assignor, request, members, bootstrap_servers):
    """The assignment is the clients' business: other assignors (and the cooperative protocol, which rebalances
    twice) work unchanged; a member leaving hands its partitions to the others."""
    driver = driver_for(client, request)
    topic = new_topic(bootstrap_servers)
    group = unique(f"assignor-{client}-{assignor}")
    expected = produce(bootstrap_servers, topic, 120)
    ms = [members(client, bootstrap_servers, group, [topic], driver=driver, assignor=assignor) for _ in range(3)]
    wait_consumed(ms, expected)
    wait_assignment(ms, topic)
    ms[0].stop()
    wait_assignment(ms[1:], topic, timeout=30)
    expected.update(produce(bootstrap_servers, topic, 120, start=120))
    wait_consumed(ms, expected)
    assert_each_once_unless_uncommitted(ms, expected)
    for m in ms[1:]:
        m.stop()


def test_mixed_group_java_and_librdkafka(group_driver, members, bootstrap_servers):
    """Java and librdkafka members (both with the range assignor) share one group's partitions."""
    client_available("confluent")
    topic = new_topic(bootstrap_servers)
    group = unique("mixed")
    expected = produce(bootstrap_servers, topic, 240)
    ms = [members("java", bootstrap_servers, group, [topic], driver=group_driver),
          members("confluent", bootstrap_servers, group, [topic]),
          members("java", bootstrap_servers, group, [topic], driver=group_driver),
          members("confluent", bootstrap_servers, group, [topic])]
    wait_consumed(ms, expected)
    wait_balanced(ms, topic, [3, 3, 3, 3])
    assert_each_once_unless_uncommitted(ms, expected)
    for m in ms:
        m.stop()


@pytest.mark.parametrize("client", MEMBER_CLIENTS)
def test_static_member_restart_keeps_its_partitions(client, request, members, bootstrap_servers):
    driver = driver_for(client, request)
    topic = new_topic(bootstrap_servers)
    group = unique(f"static-{client}")
    produce(bootstrap_servers, topic, 24)
    session = 20_000
    s1 = members(client, bootstrap_servers, group, [topic], driver=driver, instance_id="s1", session_ms=session)
    s2 = members(client, bootstrap_servers, group, [topic], driver=driver, instance_id="s2", session_ms=session)
    wait_assignment([s1, s2], topic)
    time.sleep(1.0)  # let a rebalance triggered by a late join settle
    wait_assignment([s1, s2], topic)
    before = s2.assignment()
    s1_events = len(s1.rebalance_events())
    s2.kill()
    s2b = members(client, bootstrap_servers, group, [topic], driver=driver, instance_id="s2", session_ms=session)
    s2b.wait_until(lambda ev: any(e["event"] == "assigned" and e["partitions"] for e in ev), 30, "assignment")
    assert s2b.assignment() == before
    time.sleep(1.5)
    assert s1.rebalance_events()[s1_events:] == [], "the other member was rebalanced"
    expected = produce(bootstrap_servers, topic, 24, start=24)
    wait_consumed([s1, s2b], expected)
    own = {(t, p) for t, p, _ in s2b.records() if (t, p, _) in expected}
    assert own <= before


def test_committed_offsets_and_metadata_survive_broker_kill9(kbroker_factory, members):
    client_available("confluent")
    broker = kbroker_factory({"offsets.topic.num.partitions": "5", "group.initial.rebalance.delay.ms": "0"})
    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap)
    group = unique("durable")
    expected = produce(bootstrap, topic, 240)
    m = members("confluent", bootstrap, group, [topic], metadata="checkpoint-\u00e9")
    wait_consumed([m], expected)
    ends = end_offsets(bootstrap, topic)
    deadline = time.monotonic() + 20
    while committed_offsets(bootstrap, group, topic) != {p: (o, "checkpoint-\u00e9") for p, o in ends.items()}:
        assert time.monotonic() < deadline, committed_offsets(bootstrap, group, topic)
        time.sleep(0.2)
    m.stop()
    broker.kill()
    broker.start()
    assert committed_offsets(bootstrap, group, topic) == {p: (o, "checkpoint-\u00e9") for p, o in ends.items()}
    # a consumer of the group resumes where the group left off
    more = produce(bootstrap, topic, 24, start=240)
    m2 = members("confluent", bootstrap, group, [topic])
    wait_consumed([m2], more)
    time.sleep(0.5)
    assert set(m2.records()) == set(more)
    admin = admin_client(bootstrap)
    listed = admin.list_consumer_groups().result(20)
    assert group in {g.group_id for g in listed.valid}, (listed.valid, listed.errors)


def test_lag_is_log_end_minus_committed(members, bootstrap_servers):
    client_available("confluent")
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(bootstrap_servers)
    produce(bootstrap_servers, topic, 12 * 7)
    group = unique("lag")
    commits = {p: p % 8 for p in range(PARTITIONS)}  # 0..7 of 7 records each (offset 7 = caught up)
    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, min(o, 7), metadata=f"p{p}") for p, o in commits.items()],
                 asynchronous=False)
    finally:
        c.close()
    committed = committed_offsets(bootstrap_servers, group, topic)
    ends = end_offsets(bootstrap_servers, topic)
    lag = {p: ends[p] - committed[p][0] for p in range(PARTITIONS)}
    assert lag == {p: 7 - min(o, 7) for p, o in commits.items()}
    assert {p: md for p, (_, md) in committed.items()} == {p: f"p{p}" for p in range(PARTITIONS)}


def test_admin_groups_confluent(members, bootstrap_servers):
    """List/Describe/DeleteGroups through confluent-kafka's AdminClient; OffsetDelete (which confluent-kafka's
    Python AdminClient does not offer) and removing members through kafka-python's KafkaAdminClient."""
    client_available("confluent")
    client_available("kafka-python")
    from confluent_kafka import ConsumerGroupState, KafkaError
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    admin = admin_client(bootstrap_servers)
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        topic = new_topic(bootstrap_servers)
        group = unique("admin")
        expected = produce(bootstrap_servers, topic, 48)
        ms = [members("confluent", bootstrap_servers, group, [topic]) for _ in range(2)]
        wait_consumed(ms, expected)
        wait_assignment(ms, topic)
        time.sleep(0.5)
        listed = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(20)
        assert group in {g.group_id for g in listed.valid}
        assert group not in {g.group_id for g in admin.list_consumer_groups(
            states={ConsumerGroupState.EMPTY}).result(20).valid}
        desc = admin.describe_consumer_groups([group])[group].result(20)
        assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
        assert len(desc.members) == 2 and not desc.is_simple_consumer_group
        assigned = sorted(tp.partition for mem in desc.members for tp in mem.assignment.topic_partitions)
        assert assigned == list(range(PARTITIONS))
        assert all(mem.host.startswith("/") and mem.client_id == "compat-confluent" for mem in desc.members)
        # a group with members cannot be deleted, nor can the offsets of a topic it subscribes to
        with pytest.raises(Exception) as info:
            admin.delete_consumer_groups([group])[group].result(20)
        assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        res = kadmin.delete_group_offsets(group, [KTP(topic, 0)])
        assert [getattr(e, "__name__", type(e).__name__) for e in res.values()] == ["GroupSubscribedToTopicError"]
        for m in ms:
            m.stop()
        empty = admin.describe_consumer_groups([group])[group].result(20)
        assert empty.state == ConsumerGroupState.EMPTY and not empty.members
        res = kadmin.delete_group_offsets(group, [KTP(topic, 0), KTP(topic, 1)])
        assert sorted(tp.partition for tp, err in res.items() if err is None or getattr(err, "errno", 0) == 0) == [0, 1]
        committed = committed_offsets(bootstrap_servers, group, topic)
        assert committed[0][0] < 0 and committed[1][0] < 0 and committed[2][0] == 4
        admin.delete_consumer_groups([group])[group].result(20)
        assert group not in {g.group_id for g in admin.list_consumer_groups().result(20).valid}
        with pytest.raises(Exception) as info:
            admin.delete_consumer_groups([group])[group].result(20)
        assert info.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    finally:
        kadmin.close()


def test_admin_groups_java(group_driver, members, bootstrap_servers):
    topic = new_topic(bootstrap_servers)
    group = unique("jadmin")
    expected = produce(bootstrap_servers, topic, 24)
    m = members("java", bootstrap_servers, group, [topic], driver=group_driver, metadata="java-md",
                instance_id="jinst")
    wait_consumed([m], expected)
    wait_assignment([m], topic)
    listed = java_admin(group_driver, "list-groups", "--bootstrap", bootstrap_servers)
    mine = [g for g in listed["groups"] if g["group_id"] == group]
    assert mine and mine[0]["state"] == "Stable" and mine[0]["type"] == "Classic"
    d = java_admin(group_driver, "describe-group", "--bootstrap", bootstrap_servers, "--group", group)
    assert (d["state"], d["type"], d["assignor"], d["simple"]) == ("Stable", "Classic", "range", False)
    assert [mem["instance_id"] for mem in d["members"]] == ["jinst"]
    assert sorted(p for _, p in d["members"][0]["partitions"]) == list(range(PARTITIONS))
    deadline = time.monotonic() + 20
    while True:
        offs = java_admin(group_driver, "group-offsets", "--bootstrap", bootstrap_servers, "--group", group)
        if sorted((p, o, md) for _, p, o, md in offs["offsets"]) == [(p, 2, "java-md") for p in range(PARTITIONS)]:
            break
        assert time.monotonic() < deadline, offs
        time.sleep(0.3)
    busy = java_admin(group_driver, "delete-offsets", "--bootstrap", bootstrap_servers, "--group", group,
                      "--topic", topic, "--partitions", "0")
    assert busy["errors"] == {"0": "GroupSubscribedToTopicException"}
    assert java_admin(group_driver, "delete-group", "--bootstrap", bootstrap_servers,
                      "--group", group)["error"] == "GroupNotEmptyException"
    m.stop()
    # a static member does not leave on close: remove it as the Admin client would (LeaveGroup by instance id)
    with wire.KafkaConnection.to(bootstrap_servers) as conn:
        rd = conn.request(13, 3, wire.string(group) + wire.array([wire.string("") + wire.string("jinst")]))
        rd.i32()
        assert rd.i16() == 0
    ok = java_admin(group_driver, "delete-offsets", "--bootstrap", bootstrap_servers, "--group", group,
                    "--topic", topic, "--partitions", "0,1")
    assert ok["errors"] == {"0": None, "1": None}
    assert java_admin(group_driver, "delete-group", "--bootstrap", bootstrap_servers, "--group", group)["error"] is None
    assert java_admin(group_driver, "delete-group", "--bootstrap", bootstrap_servers,
                      "--group", group)["error"] == "GroupIdNotFoundException"


# ============================================================================================ bad input (raw)

NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82


def nbytes(b: bytes) -> bytes:
    return wire.i32(len(b)) + b


class RawGroupClient:
    """Hand-encoded group requests (non-flexible versions) on one connection."""

    def __init__(self, bootstrap: str) -> None:
        self.conn = wire.KafkaConnection.to(bootstrap, timeout=30)

    def close(self) -> None:
        self.conn.close()

    def send_join(self, group: str, member_id: str, instance: str | None = None) -> None:
        body = (wire.string(group) + wire.i32(SESSION_MS) + wire.i32(10_000) + wire.string(member_id)
                + wire.string(instance) + wire.string("consumer")
                + wire.array([wire.string("range") + nbytes(b"\x00\x00\x00\x00\x00\x00")]))
        self._corr = self.conn.next_correlation_id()
        self.conn.send_raw(wire.frame(wire.request_header(11, 5, self._corr) + body))

    def recv_join(self) -> dict[str, Any]:
        rd = wire.Reader(self.conn.recv_frame())
        assert rd.i32() == self._corr
        rd.i32()
        out = {"error": rd.i16(), "generation": rd.i32(), "protocol": rd.string(), "leader": rd.string(),
               "member_id": rd.string()}
        out["members"] = rd.array(lambda r: (r.string(), r.string(), r.bytes_()))
        return out

    def join(self, group: str, member_id: str = "", instance: str | None = None) -> dict[str, Any]:
        self.send_join(group, member_id, instance)
        return self.recv_join()

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes]) -> int:
        body = (wire.string(group) + wire.i32(generation) + wire.string(member_id) + wire.string(None)
                + wire.array([wire.string(m) + nbytes(a) for m, a in assignments.items()]))
        rd = self.conn.request(14, 3, body)
        rd.i32()
        return rd.i16()

    def heartbeat(self, group: str, generation: int, member_id: str, instance: str | None = None) -> int:
        rd = self.conn.request(12, 3, wire.string(group) + wire.i32(generation) + wire.string(member_id)
                               + wire.string(instance))
        rd.i32()
        return rd.i16()

    def commit(self, group: str, generation: int, member_id: str, topic: str, offset: int,
               metadata: str | None = "") -> int:
        body = (wire.string(group) + wire.i32(generation) + wire.string(member_id) + wire.string(None)
                + wire.array([wire.string(topic) + wire.array([wire.i32(0) + wire.i64(offset) + wire.i32(-1)
                                                               + wire.string(metadata)])]))
        rd = self.conn.request(8, 7, body)
        rd.i32()
        topics = rd.array(lambda r: (r.string(), r.array(lambda q: (q.i32(), q.i16()))))
        return topics[0][1][0][1]

    def leave(self, group: str, member_id: str) -> int:
        rd = self.conn.request(13, 3, wire.string(group) + wire.array([wire.string(member_id) + wire.string(None)]))
        rd.i32()
        return rd.i16()

    def find_coordinator(self, group: str) -> int:
        rd = self.conn.request(10, 2, wire.string(group) + wire.i8(0))
        rd.i32()
        return rd.i16()


@pytest.mark.kafka_reference
def test_bad_input_gets_kafkas_errors(bootstrap_servers):
    topic = new_topic(bootstrap_servers, partitions=1)
    group = unique("bad")
    a, b = RawGroupClient(bootstrap_servers), RawGroupClient(bootstrap_servers)
    try:
        deadline = time.monotonic() + 30
        while a.find_coordinator(group) != NONE:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # member A: MEMBER_ID_REQUIRED round trip, then generation 1 as the leader
        first = a.join(group)
        assert first["error"] == MEMBER_ID_REQUIRED and first["member_id"]
        ja = a.join(group, first["member_id"])
        member_a = ja["member_id"]
        assert (ja["error"], ja["leader"], ja["protocol"]) == (NONE, member_a, "range")
        gen1 = ja["generation"]
        assert a.sync(group, gen1 + 5, member_a, {}) == ILLEGAL_GENERATION
        assert a.sync(group, gen1, "stranger", {}) == UNKNOWN_MEMBER_ID
        assert a.sync(group, gen1, member_a, {member_a: b"all"}) == NONE
        assert a.heartbeat(group, gen1, member_a) == NONE
        assert a.heartbeat(group, gen1 - 1, member_a) == ILLEGAL_GENERATION
        assert a.heartbeat(group, gen1, "stranger") == UNKNOWN_MEMBER_ID
        assert a.heartbeat(unique("nope"), 1, "x") == UNKNOWN_MEMBER_ID
        assert a.commit(group, gen1, member_a, topic, 1) == NONE
        assert a.commit(group, gen1 - 1, member_a, topic, 1) == ILLEGAL_GENERATION
        assert a.commit(group, gen1, "stranger", topic, 1) == UNKNOWN_MEMBER_ID
        assert a.commit(group, -1, "", topic, 1) == UNKNOWN_MEMBER_ID  # simple commits only into an empty group
        assert a.commit(group, gen1, member_a, topic, 1, metadata="x" * 5000) == OFFSET_METADATA_TOO_LARGE
        assert a.commit(unique("nope"), 3, "m", topic, 1) == ILLEGAL_GENERATION
        # member B joins: a rebalance starts; A still commits for its generation, then rejoins
        jb0 = b.join(group)
        assert jb0["error"] == MEMBER_ID_REQUIRED
        b.send_join(group, jb0["member_id"])  # parked until A rejoins
        # B's join travels on its own connection: A's heartbeat may reach the coordinator first (NONE); once
        # the join is in, the rebalance is on
        deadline = time.monotonic() + 10
        while (hb := a.heartbeat(group, gen1, member_a)) == NONE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hb == REBALANCE_IN_PROGRESS
        assert a.commit(group, gen1, member_a, topic, 2) == NONE
        ja2 = a.join(group, member_a)
        jb = b.recv_join()
        assert ja2["error"] == jb["error"] == NONE and ja2["generation"] == jb["generation"] > gen1
        assert len(ja2["members"]) == 2 and jb["members"] == []
        # the new generation is not in place until the leader syncs: commits get REBALANCE_IN_PROGRESS
        assert b.commit(group, jb["generation"], jb["member_id"], topic, 3) == REBALANCE_IN_PROGRESS
        assert a.sync(group, ja2["generation"], member_a, {member_a: b"a", jb["member_id"]: b"b"}) == NONE
        assert b.commit(group, jb["generation"], jb["member_id"], topic, 3) == NONE
        assert a.leave(group, "stranger") == NONE  # per-member error in v3+; top level is fine
        assert a.leave(group, member_a) == NONE
        assert b.leave(group, jb["member_id"]) == NONE
        # static members: a second incarnation fences the first
        s1 = a.join(group, "", instance="inst-1")
        assert s1["error"] == NONE and s1["member_id"]
        assert a.sync(group, s1["generation"], s1["member_id"], {s1["member_id"]: b""}) == NONE
        s2 = b.join(group, "", instance="inst-1")
        assert s2["error"] == NONE and s2["member_id"] != s1["member_id"]
        assert a.heartbeat(group, s1["generation"], s1["member_id"], "inst-1") == FENCED_INSTANCE_ID
        assert b.heartbeat(group, s2["generation"], s2["member_id"], "inst-1") == NONE
    finally:
        a.close()
        b.close()
    # unknown groups through the admin APIs
    with wire.KafkaConnection.to(bootstrap_servers) as conn:
        missing = unique("missing")
        rd = conn.request(42, 1, wire.array([wire.string(missing)]))  # DeleteGroups v1
        rd.i32()
        assert rd.array(lambda r: (r.string(), r.i16())) == [(missing, GROUP_ID_NOT_FOUND)]
        rd = conn.request(47, 0, wire.string(missing) + wire.array([wire.string(topic) + wire.array([wire.i32(0)])]))
        assert rd.i16() == GROUP_ID_NOT_FOUND  # OffsetDelete v0
        rd = conn.request(15, 3, wire.array([wire.string(missing)]) + wire.i8(0))  # DescribeGroups v3
        rd.i32()
        groups = rd.array(lambda r: (r.i16(), r.string(), r.string(), r.string(), r.string(),
                                     r.array(lambda m: (m.string(), m.string(), m.string(), m.bytes_(), m.bytes_())),
                                     r.i32()))
        assert groups[0][:3] == (NONE, missing, "Dead")
