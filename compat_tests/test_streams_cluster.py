"""Kafka Streams apps, exactly_once_v2, on a 3-node cluster through kill -9 (issue 35, item 1; classic
group protocol).

Three combined nodes (``KbrokerCluster``; Apache Kafka 4.3.1 nodes under ``--kbroker-target=kafka``) with
``__consumer_offsets`` and ``__transaction_state`` at replication factor 3, ``min.insync.replicas`` 2; the app's
input and output topics and its internal topics (repartition, changelog: ``replication.factor=3``,
``topic.min.insync.replicas=2``) likewise. Two Streams instances (compat_tests/java/StreamsDriver.java) share the
six tasks while a producer writes numbered lines; then one of these is killed with SIGKILL mid-stream:

* one Streams instance: the other takes its tasks over (after the session timeout and the dead instance's
  transaction is aborted) and restores their state from the changelogs; the killed one restarts on its state
  directory and restores from the changelogs too;
* the broker leading input partition 0: the partitions it led get new leaders, the apps carry on;
* the transaction coordinator of one instance's producer: another broker takes ``__transaction_state`` over and
  completes or aborts the open transaction, the producer carries on.

Each time the output read with ``read_committed`` holds each word's counts 1..n exactly once. And running sums with
``num.standby.replicas=1`` (changelog at RF 3) through a kill -9 of one of two instances: the survivor resumes the
killed one's tasks from its standbys' state and the sums stay exact. Killed brokers are restarted after each test,
so the next test starts with three nodes.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.streams_support import StreamsApp, by_key, read_committed, unique
from compat_tests import test_streams
from compat_tests.test_streams import assert_counts_run_one_to_n, word_lines
from kbroker.testing.cluster import KbrokerCluster, wait_until

pytestmark = pytest.mark.timeout(240)

streams_apps = test_streams.streams_apps  # the fixture that starts StreamsDriver instances

OVERRIDES = {
    "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3", "min.insync.replicas": "2", "default.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
    # a killed instance's open transaction is aborted soon after its transaction.timeout.ms (10 s in Streams)
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
PARTITIONS = 3
LINES = 360
STREAMS_OPTIONS = {"replication_factor": 3, "prop": ["topic.min.insync.replicas=2"]}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbrokerCluster]:
    c = KbrokerCluster(tmp_path_factory.mktemp("streams-cluster"), nodes=3, overrides=OVERRIDES)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(shared_cluster: KbrokerCluster) -> Iterator[KbrokerCluster]:
    """The module's cluster, every node running again after the test."""
    yield shared_cluster
    for node in shared_cluster.nodes.values():
        if not node.is_running():
            node.start()
    shared_cluster.wait_registered(timeout=60)


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 3, config={"min.insync.replicas": "2"}) for n in names],
                                  request_timeout=30)
    for f in futures.values():
        f.result(60)

    def ready() -> bool:
        md = admin.list_topics(timeout=10)
        return all(n in md.topics and len(md.topics[n].partitions) == PARTITIONS
                   and all(p.leader >= 0 and len(p.isrs) == 3 for p in md.topics[n].partitions.values())
                   for n in names)
    wait_until(ready, 60, f"topics {names} with leaders and 3 in-sync replicas")


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


def transaction_coordinator(cluster: KbrokerCluster, prefix: str) -> tuple[int, str]:
    """(broker id, transactional.id) of a transaction of the app: each broker's ListTransactions lists the
    transactional ids its coordinator owns (Kafka's Admin asks every broker the same way)."""
    from compat_tests.test_idempotence import RawClient
    from kbroker.protocol.messages import ListTransactionsRequest

    for i in cluster.running():
        raw = RawClient(cluster.nodes[i].bootstrap)
        try:
            states = raw.call(ListTransactionsRequest(), 0).transaction_states
        finally:
            raw.close()
        for s in states:
            if s.transactional_id.startswith(prefix):
                return i, s.transactional_id
    raise LookupError(f"no transaction of {prefix}")


def option(app: StreamsApp, name: str) -> str:
    return app.cmd[app.cmd.index(f"--{name}") + 1]


class InputWriter(threading.Thread):
    """Writes ``lines`` (with ``keys``, when given) to ``topic`` with one idempotent producer (acks=all), ``chunk``
    lines every ``pause`` seconds; ``written`` counts the lines delivered so far."""

    def __init__(self, bootstrap: str, topic: str, lines: list[str], chunk: int = 10, pause: float = 0.4,
                 keys: list[str] | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.lines, self.chunk, self.pause = bootstrap, topic, lines, chunk, pause
        self.keys = keys
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        failed: list[str] = []
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "message.timeout.ms": 90000, "log_level": 2})
        try:
            for i in range(0, len(self.lines), self.chunk):
                for j, line in enumerate(self.lines[i:i + self.chunk], i):
                    p.produce(self.topic, value=line, key=self.keys[j] if self.keys else None,
                              on_delivery=lambda err, msg: failed.append(str(err)) if err is not None else None)
                assert p.flush(90) == 0 and not failed, f"undelivered input: {failed[:3]}"
                self.written = min(len(self.lines), i + self.chunk)
                time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def run_word_count_through(cluster: KbrokerCluster, streams_apps: Callable[..., StreamsApp], seed: int,
                           kill: Callable[[str, StreamsApp, StreamsApp], None],
                           options: dict[str, Any] = STREAMS_OPTIONS) -> tuple[StreamsApp, StreamsApp]:
    """Two word-count instances sharing the six tasks; a producer writes ``LINES`` lines; ``kill(app_id, a, b)``
    runs once a quarter of them are written and every output partition has committed records; then the rest of
    the input, and the read_committed output checked: each word's counts run 1..n. Prints the figures."""
    boot = cluster.bootstrap
    source, sink = unique("streams-in"), unique("streams-out")
    create_topics(boot, source, sink)
    app_id = unique("wc")
    a = streams_apps("wordcount", "a", boot, app_id, input=source, output=sink, **options)
    b = streams_apps("wordcount", "b", boot, app_id, input=source, output=sink, **options)
    wait_until(lambda: a.tasks()["state"] == b.tasks()["state"] == "RUNNING"
               and len(a.tasks()["active"]) + len(b.tasks()["active"]) == 2 * PARTITIONS, 90,
               "both instances RUNNING with the 6 tasks between them")
    lines = word_lines(LINES, seed)
    writer = InputWriter(boot, source, lines)
    writer.start()
    # a kill mid-stream, once every task has committed output (so each changelog partition holds state)
    wait_until(lambda: writer.written >= LINES // 4 or writer.error, 60, "a quarter of the input written")
    wait_until(lambda: {r[0] for r in read_committed(boot, sink, PARTITIONS, 10**6, timeout=1.5, idle=0)}
               == set(range(PARTITIONS)), 60, "committed output in every partition")
    at_kill = writer.written
    assert at_kill < LINES, "the input was all written before the kill"
    started = time.monotonic()
    kill(app_id, a, b)
    writer.join(150)
    assert not writer.is_alive() and writer.error is None, f"input writer: {writer.error}"
    expected = collections.Counter(w for line in lines for w in line.split())
    records = read_committed(boot, sink, PARTITIONS, sum(expected.values()), timeout=120)
    assert_counts_run_one_to_n(records, expected)
    print(f"killed at {at_kill}/{LINES} lines; the {len(records)} counts complete and exact "
          f"{time.monotonic() - started:.1f} s after the kill")
    for app in (a, b):
        print(f"{app.name}: errors {[e['root_class'] for e in app.errors()]}")
    return a, b


def test_word_count_through_kill_of_a_streams_instance(cluster: KbrokerCluster,
                                                       streams_apps: Callable[..., StreamsApp]) -> None:
    restarted: list[StreamsApp] = []

    def kill(app_id: str, a: StreamsApp, b: StreamsApp) -> None:
        a.kill()
        b.wait_running(timeout=90, active=2 * PARTITIONS)  # after the session timeout: b has every task
        # a comes back on its state directory: under EOS nothing was checkpointed, so its stores are rebuilt
        restarted.append(streams_apps("wordcount", "a2", cluster.bootstrap, app_id, state_dir=a.state_dir,
                                      input=option(a, "input"), output=option(a, "output"), **STREAMS_OPTIONS))
        restarted[0].wait_running(timeout=90)  # with tasks of its own again

    a, b = run_word_count_through(cluster, streams_apps, 11, kill)
    took_over = [e for e in b.restored() if e["store"] == "counts" and e["records"] > 0]
    assert took_over, f"b restored no counts from the changelog: {b.restored()}"
    # a's local state was not checkpointed (EOS): back on its state directory it rebuilds from the changelogs
    rebuilt = [e for e in restarted[0].restored() if e["store"] == "counts" and e["records"] > 0]
    assert rebuilt, f"the restarted instance restored no counts: {restarted[0].restored()}"
    assert not b.errors(), b.errors()


@pytest.mark.parametrize("group_protocol", ["classic", "streams"])
def test_word_count_through_kill_of_the_input_leader(cluster: KbrokerCluster, streams_apps: Callable[..., StreamsApp],
                                                     group_protocol: str) -> None:
    """With ``group.protocol=streams`` too (KIP-1071): the streams group's coordinator may be a node that is not the
    active controller (the internal topics are then created through it), and may be the node killed."""
    def kill(app_id: str, a: StreamsApp, b: StreamsApp) -> None:
        cluster.kill(partition_leader(cluster.bootstrap, option(a, "input"), 0))

    options = {**STREAMS_OPTIONS, "prop": STREAMS_OPTIONS["prop"] + [f"group.protocol={group_protocol}"]}
    a, b = run_word_count_through(cluster, streams_apps, 12, kill, options)


def test_word_count_through_kill_of_the_transaction_coordinator(cluster: KbrokerCluster,
                                                                streams_apps: Callable[..., StreamsApp]) -> None:
    killed: list[tuple[int, str]] = []

    def kill(app_id: str, a: StreamsApp, b: StreamsApp) -> None:
        killed.append(transaction_coordinator(cluster, app_id))
        cluster.kill(killed[0][0])

    a, b = run_word_count_through(cluster, streams_apps, 13, kill)
    coordinator, txn_id = killed[0]
    now = transaction_coordinator(cluster, txn_id)
    assert now[0] != coordinator, f"{txn_id} still coordinated by the killed broker {coordinator}"


def test_running_sums_with_standby_replicas_through_kill_of_an_instance(
        cluster: KbrokerCluster, streams_apps: Callable[..., StreamsApp]) -> None:
    """Running sums (``num.standby.replicas=1``, changelog at RF 3) by two instances: each holds standby replicas of
    the other's tasks. One is killed mid-stream; the other runs every task from its standbys' state (each restore
    starts where the standby had got to) and the read_committed sums stay exact."""
    import random

    boot = cluster.bootstrap
    source, sink = unique("sums-in"), unique("sums-out")
    create_topics(boot, source, sink)
    app_id = unique("sums")
    opts = {"input": source, "output": sink, "standby": 1, **STREAMS_OPTIONS}
    a = streams_apps("sum", "a", boot, app_id, **opts)
    b = streams_apps("sum", "b", boot, app_id, **opts)
    wait_until(lambda: a.tasks()["state"] == b.tasks()["state"] == "RUNNING"
               and len(a.tasks()["active"]) + len(b.tasks()["active"]) == PARTITIONS
               and len(a.tasks()["standby"]) + len(b.tasks()["standby"]) == PARTITIONS, 90,
               "both instances RUNNING, each task active on one and standby on the other")
    rng = random.Random(21)
    keys = [f"k{rng.randrange(12)}" for _ in range(LINES)]
    values = [str(rng.randint(1, 100)) for _ in range(LINES)]
    writer = InputWriter(boot, source, values, keys=keys)
    writer.start()
    wait_until(lambda: writer.written >= LINES // 4 or writer.error, 60, "a quarter of the input written")
    wait_until(lambda: {r[0] for r in read_committed(boot, sink, PARTITIONS, 10**6, timeout=1.5, idle=0)}
               == set(range(PARTITIONS)), 60, "committed output in every partition")
    victim, survivor = (a, b) if a.tasks()["active"] else (b, a)
    taken = {int(t.split("_")[1]) for t in victim.tasks()["active"]}
    mark = len(survivor.snapshot())
    assert writer.written < LINES, "the input was all written before the kill"
    victim.kill()
    survivor.wait_running(timeout=90, active=PARTITIONS)
    writer.join(150)
    assert not writer.is_alive() and writer.error is None, f"input writer: {writer.error}"
    expected: dict[str | None, list[str | None]] = {}
    totals: collections.Counter[str] = collections.Counter()
    for k, v in zip(keys, values):
        totals[k] += int(v)
        expected.setdefault(k, []).append(str(totals[k]))
    got = read_committed(boot, sink, PARTITIONS, LINES, timeout=120)
    assert by_key(got) == expected
    restores = [e for e in survivor.snapshot()[mark:] if e["event"] == "restore_start" and e["store"] == "sums"
                and e["partition"] in taken]
    assert {e["partition"] for e in restores} == taken and all(e["start"] > 0 for e in restores), \
        f"{survivor.name} did not resume {sorted(taken)} from its standbys: {restores}"
