#!/usr/bin/env python3
"""What partition replication costs and how it behaves, on three combined kbroker nodes (issue 10's benchmark).

Every case starts its own ``KbrokerCluster`` (three combined broker+controller nodes on 127.0.0.1, Kafka's
defaults unless a flag says otherwise) and uses confluent-kafka:

* ``throughput``: ``--mb`` MB of 1 KiB records (idempotent producer, acks=all, ``linger.ms=5``,
  ``batch.size=1 MiB``) to a topic of ``--partitions`` partitions with RF 3 (``min.insync.replicas=2``) and to
  one with RF 1 (acks=all too), ``--rounds`` runs of each in ABBA order, each run's topic deleted before the next
  (``--keep`` to keep them): MB/s, and the three brokers' CPU seconds (utime + stime from /proc/<pid>/stat,
  summed) per GB the client wrote, with the brokers' and the producer process's cores;
* ``latency``: RF 3, acks=all, a producer thread sending ``--rate`` records/s with its send time in the value, a
  consumer (read_uncommitted, assign) already polling: receive time - send time, p50/p99/max over ``--seconds``
  after ``--warmup`` seconds; and the acknowledgement latency (``produce()`` -> delivery callback) p50/p99;
* ``failover``: under an acks=all load (:class:`~kbroker.testing.fault_campaign.Writer`, about 1,000 records/s
  over 3 partitions), kill -9 the leader of partition 0 and time until the first acknowledgement of a record
  produced to partition 0 after the kill; restart the node and wait until every ISR is full again; ``--kills``
  times (or until ``--time-limit``); p50/p99/max, also apart for kills where the leader was the active controller
  too, and when the survivors' Metadata named the new leader. ``broker.session.timeout.ms`` is
  ``--session-timeout-ms`` (Kafka's 9000 by default); at the end everything acknowledged is read back and the
  lost and duplicated records are counted (:class:`~kbroker.testing.history.History`);
* ``catchup``: ``--mb`` MB on an RF 3 topic whose partitions all have one node as a follower (never the
  preferred leader; not the active controller); kill that node, wait until the controller fenced it, delete its
  data directory, restart it (it formats itself again and copies everything from the leaders) and time until it
  is back in the ISR of every partition; a thread samples every 50 ms when it registered and how much of the
  topic's data it holds: MB/s from the restart to the ISR and while copying.

Usage: ``python bench/replication.py {throughput,latency,failover,catchup,all} [options]`` (``--help`` on each).
Every wait is bounded. Not a test: nothing here asserts on speed; figures go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing.cluster import KbrokerCluster, metadata_brokers  # noqa: E402
from kbroker.testing.fault_campaign import (PARTITIONS, TOPIC, Admin, Writer, create_topic,  # noqa: E402
                                            read_back)
from kbroker.testing.history import History  # noqa: E402
from kbroker.testing.plugin import BrokerStartError  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
RECORD = 1024


# ---------------------------------------------------------------------------------------------------- helpers
def say(msg: str) -> None:
    print(msg, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def own_cpu() -> float:
    """utime + stime of this process (the client), in seconds."""
    t = os.times()
    return t.user + t.system


def cluster_cpu(cluster: KbrokerCluster) -> float:
    """utime + stime of every running node, summed."""
    return sum(cpu_seconds(n.pid) for n in cluster.nodes.values() if n.is_running() and n.pid)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank (as bench/cluster_failover.py reports p99)."""
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def spread(seconds: list[float]) -> str:
    return (f"p50 {statistics.median(seconds):.2f} s, p99 {pct(seconds, 0.99):.2f} s, max {max(seconds):.2f} s, "
            f"min {min(seconds):.2f} s" if seconds else "none")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_topic(admin: Admin, name: str, partitions: int, rf: int, min_isr: int,
               assignment: list[list[int]] | None = None) -> None:
    """Create ``name`` and wait until every partition has a leader and a full ISR."""
    config = {"min.insync.replicas": str(min_isr)}
    topic = (NewTopic(name, len(assignment), replica_assignment=assignment, config=config) if assignment
             else NewTopic(name, partitions, rf, config=config))
    admin.client().create_topics([topic])[name].result(60)
    admin.wait_isr(rf, 60, name)


def delete_topic(admin: Admin, cluster: KbrokerCluster, name: str) -> None:
    """Delete ``name`` and wait until no node has its partition directories any more."""
    admin.client().delete_topics([name])[name].result(60)
    wait_for(lambda: not any(any(n.log_dirs.glob(f"{name}-*")) for n in cluster.nodes.values()), 60,
             f"the directories of {name} removed")


def produce_bulk(bootstrap: str, topic: str, mb: int, size: int = RECORD) -> dict[str, float]:
    """``mb`` MB of ``size``-byte records (incompressible, key-less), idempotent, acks=all, ``linger.ms=5``,
    ``batch.size=1 MiB``; timed from the first ``produce()`` to the end of ``flush()``."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": 300_000})
    count = mb * 1_000_000 // size
    payload = os.urandom(size // 2).hex().encode()[:size]
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    t0 = time.perf_counter()
    deadline = time.monotonic() + 1800
    for _ in range(count):
        while True:
            try:
                p.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.005)
                if time.monotonic() > deadline:
                    raise TimeoutError("the producer's queue did not drain")
    left = p.flush(300)
    seconds = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"{left} records not delivered, {len(errors)} delivery errors (first: "
                           f"{errors[0] if errors else None})")
    return {"records": count, "bytes": count * size, "seconds": seconds, "MB/s": count * size / seconds / 1e6}


@contextlib.contextmanager
def new_cluster(root: str, overrides: dict[str, Any] | None = None, brokers: int = 0) -> Iterator[KbrokerCluster]:
    """A running cluster under ``root`` (3 combined nodes, or 3 controllers and ``brokers`` brokers), stopped
    afterwards. A start that fails (e.g. two nodes given the
    same free port) stops whatever did start and is tried once more, in a fresh directory with new ports."""
    for attempt in range(2):
        cluster = KbrokerCluster(Path(root) / f"cluster{attempt}", nodes=3, overrides=overrides or {},
                                 brokers=brokers)
        try:
            cluster.start()
            break
        except BrokerStartError as exc:
            cluster.stop()
            if attempt:
                raise
            say(f"  the cluster did not start ({str(exc).splitlines()[0]}); once more")
    try:
        yield cluster
    finally:
        cluster.stop()


def wait_for(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


# ------------------------------------------------------------------------------------------------- throughput
def throughput(args: argparse.Namespace, root: str) -> None:
    say(f"throughput: {args.mb} MB of {RECORD} B records per run, {args.partitions} partitions, acks=all, "
        f"idempotent, linger.ms=5, batch.size=1 MiB; {load()}")
    with new_cluster(root) as cluster:
        admin = Admin(cluster)
        make_topic(admin, "warmup", args.partitions, 3, 2)
        produce_bulk(cluster.bootstrap, "warmup", 5)  # connections, code paths, page cache of the first segments
        results: dict[int, list[tuple[float, float]]] = {3: [], 1: []}
        order = ([3, 1, 1, 3] * args.rounds)[:2 * args.rounds]  # ABBA...
        for i, rf in enumerate(order):
            name = f"tput-rf{rf}-{i}"
            make_topic(admin, name, args.partitions, rf, 2 if rf == 3 else 1)
            cpu0, mine0 = cluster_cpu(cluster), own_cpu()
            r = produce_bulk(cluster.bootstrap, name, args.mb)
            cpu, mine = cluster_cpu(cluster) - cpu0, own_cpu() - mine0
            per_gb = cpu / (r["bytes"] / 1e9)
            results[rf].append((r["MB/s"], per_gb))
            say(f"  RF {rf}: {r['bytes'] / 1e6:.0f} MB in {r['seconds']:.1f} s = {r['MB/s']:.1f} MB/s; brokers' CPU "
                f"{cpu:.2f} s = {per_gb:.2f} s per GB written ({cpu / r['seconds']:.2f} cores); the producer's "
                f"process {mine:.2f} s ({mine / r['seconds']:.2f} cores)")
            if not args.keep:
                delete_topic(admin, cluster, name)
    for rf in (3, 1):
        mbs = [x for x, _ in results[rf]]
        cpus = [y for _, y in results[rf]]
        say(f"RF {rf}: {statistics.median(mbs):.1f} MB/s, {statistics.median(cpus):.2f} broker-CPU s/GB "
            f"(median of {len(mbs)})")
    say(f"done; {load()}")


# ---------------------------------------------------------------------------------------------------- latency
def latency(args: argparse.Namespace, root: str) -> None:
    say(f"latency: RF 3, acks=all, idempotent, {args.rate} records/s of {args.size} B over {args.partitions} "
        f"partitions, linger.ms={args.linger_ms}, consumer fetch.wait.max.ms={args.fetch_wait_max_ms}; warm-up "
        f"{args.warmup} s, measured {args.seconds} s; {load()}")
    with new_cluster(root) as cluster:
        admin = Admin(cluster)
        topic = "latency"
        make_topic(admin, topic, args.partitions, 3, 2)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "latency",
                             "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                             "fetch.wait.max.ms": args.fetch_wait_max_ms, "fetch.min.bytes": 1})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": args.linger_ms})
        end_to_end: list[float] = []
        acked: list[float] = []
        errors: list[Any] = []
        stop = threading.Event()

        def consume() -> None:
            while not stop.is_set():  # poll(), not consume(n, t): that waits for n records or t seconds
                m = consumer.poll(0.1)
                now = time.perf_counter_ns()
                if m is not None and m.error() is None:
                    sent = int.from_bytes(m.value()[:8], "big")
                    if measure_from <= sent < measure_to:
                        end_to_end.append((now - sent) / 1e6)

        def delivered(err: Any, msg: Any) -> None:
            now = time.perf_counter_ns()
            if err is not None:
                errors.append(err)
                return
            sent = int.from_bytes(msg.value()[:8], "big")
            if measure_from <= sent < measure_to:
                acked.append((now - sent) / 1e6)

        reader = threading.Thread(target=consume, daemon=True)
        measure_from = time.perf_counter_ns() + int((1.0 + args.warmup) * 1e9)
        measure_to = measure_from + int(args.seconds * 1e9)
        reader.start()
        time.sleep(1.0)  # the consumer connects and polls
        pad = b"x" * (args.size - 8)
        interval = 1e9 / args.rate
        start = time.perf_counter_ns()
        i = in_window = 0
        while True:
            now = time.perf_counter_ns()
            if now >= measure_to:
                break
            due = start + i * interval
            if now < due:  # serve delivery callbacks while waiting for the next send (poll() counts in whole ms)
                wait = (due - now) / 1e9
                producer.poll(wait) if wait >= 0.001 else time.sleep(wait)
                continue
            sent = time.perf_counter_ns()
            producer.produce(topic, sent.to_bytes(8, "big") + pad, partition=i % args.partitions,
                             on_delivery=delivered)
            producer.poll(0)
            i += 1
            in_window += measure_from <= sent < measure_to
        producer.flush(30)
        try:
            wait_for(lambda: len(end_to_end) >= len(acked), 30, "the consumer to read what was acknowledged")
        except TimeoutError as exc:
            say(f"  {exc}")
        stop.set()
        reader.join(10)
        consumer.close()
    if errors:
        say(f"  {len(errors)} delivery errors, first: {errors[0]}")
    say(f"sent {i} records ({in_window} in the measured window), acknowledged of these {len(acked)}, "
        f"read of these {len(end_to_end)}")
    say(f"end-to-end: p50 {pct(end_to_end, 0.5):.2f} ms, p99 {pct(end_to_end, 0.99):.2f} ms, "
        f"max {max(end_to_end):.2f} ms")
    say(f"acknowledgement (acks=all): p50 {pct(acked, 0.5):.2f} ms, p99 {pct(acked, 0.99):.2f} ms, "
        f"max {max(acked):.2f} ms")
    say(f"done; {load()}")


# --------------------------------------------------------------------------------------------------- failover
class TimedWriter(Writer):
    """:class:`Writer` that also notes when each partition first acknowledged a record produced after
    :meth:`set_mark` (callbacks are served every 20 ms by the writer's loop: that is the resolution)."""

    first_ack: list[float | None] | None = None

    def set_mark(self) -> None:
        super().set_mark()
        self.first_ack = [None] * PARTITIONS  # after the mark moved: a callback in between writes the old list

    def _done(self, err, msg) -> None:  # noqa: ANN001
        super()._done(err, msg)
        marks = self.first_ack
        if err is None and marks is not None and marks[msg.partition()] is None and \
                int(msg.value().rsplit(b"-", 1)[1]) >= self.mark:
            marks[msg.partition()] = time.monotonic()


def failover(args: argparse.Namespace, root: str) -> None:
    overrides = {"broker.session.timeout.ms": args.session_timeout_ms,
                 "broker.heartbeat.interval.ms": args.heartbeat_interval_ms}
    say(f"failover: kill -9 the leader of {TOPIC}-0 (RF 3, min.insync.replicas 2, {PARTITIONS} partitions) under "
        f"an idempotent acks=all load of ~1,000 records/s, {args.kills} times; broker.session.timeout.ms="
        f"{args.session_timeout_ms}, broker.heartbeat.interval.ms={args.heartbeat_interval_ms}, the producer's "
        f"topic.metadata.refresh.interval.ms={args.metadata_refresh_ms}"
        f"{''.join(', ' + kv for kv in args.producer_config)}; {load()}")
    times: list[float] = []
    moved: list[float] = []
    of_controller: list[bool] = []
    started = time.monotonic()
    with new_cluster(root, overrides, brokers=getattr(args, "brokers", 0)) as cluster:
        admin = Admin(cluster)
        create_topic(admin)
        h = History()
        extra = dict(kv.split("=", 1) for kv in args.producer_config)
        w = TimedWriter(cluster.bootstrap, h, "failover",
                        {"topic.metadata.refresh.interval.ms": args.metadata_refresh_ms, **extra}).start()
        try:
            w.wait_acked(1000, 60)
            for k in range(args.kills):
                if time.monotonic() - started > args.time_limit:
                    say(f"time limit of {args.time_limit} s reached after {k} kills")
                    break
                victim = admin.state()[0][0]
                was_controller = victim == cluster.controller_id(timeout=30)
                admin.down.add(victim)
                t0 = time.monotonic()
                cluster.kill(victim)
                w.set_mark()
                marks = w.first_ack
                leader_at = None
                deadline = t0 + args.session_timeout_ms / 1000 + 120
                for n in itertools.count():
                    if marks[0] is not None:
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"kill {k + 1}: no acknowledgement on partition 0 within "
                                           f"{deadline - t0:.0f} s (errors {w.errors[:3]})")
                    if leader_at is None and n % 5 == 0 and admin.state()[0][0] not in (victim, -1):
                        leader_at = time.monotonic()
                    time.sleep(0.02)
                first = marks[0]
                took = first - t0
                times.append(took)
                of_controller.append(was_controller)
                if leader_at is not None:
                    moved.append(min(leader_at, first) - t0)
                say(f"kill {k + 1}: node {victim}{' (active controller)' if was_controller else ''}, new leader "
                    f"in Metadata after {min(leader_at or first, first) - t0:.2f} s, first acknowledgement after "
                    f"{took:.2f} s")
                cluster.nodes[victim].start()
                admin.down.discard(victim)
                admin.wait_isr(3, 180, what=f"every ISR full again after kill {k + 1}")
        finally:
            w.stop()
        read = read_back(cluster.bootstrap, h)
        report = h.check()
    limit = args.session_timeout_ms / 1000 + 1
    say(f"{len(times)} kills: first acknowledgement after the kill {spread(times)} (target p99 <= {limit:.1f} s); "
        f"new leader in Metadata {spread(moved)}")
    for label, flag in (("the victim was also the active controller", True), ("it was not", False)):
        some = [t for t, c in zip(times, of_controller) if c == flag]
        say(f"  {len(some)} kills where {label}: {spread(some)}")
    say(f"acknowledged {report.acknowledged}, read back {read}, lost {len(report.lost)}, duplicated "
        f"{len(report.duplicated)}; {time.monotonic() - started:.0f} s; {load()}")


# ---------------------------------------------------------------------------------------------------- catchup
def partition_bytes(log_dirs: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in log_dirs.glob(f"{topic}-*/*.log"))


class CatchupSampler:
    """Every 50 ms, in a thread: when node ``victim`` is listed by node ``other`` (registered), when its log
    directories first hold data of ``topic`` and when they hold ``size`` bytes of it."""

    def __init__(self, cluster: KbrokerCluster, victim: int, other: int, topic: str, size: int,
                 deadline: float) -> None:
        self.registered: float | None = None
        self.first_data: float | None = None
        self.all_data: float | None = None
        self._args = (cluster, victim, other, topic, size, deadline)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CatchupSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        cluster, victim, other, topic, size, deadline = self._args
        while not self._stop.is_set() and time.monotonic() < deadline and self.all_data is None:
            now = time.monotonic()
            if self.registered is None:
                try:
                    if victim in metadata_brokers(cluster.host, cluster.nodes[other].port):
                        self.registered = now
                except (OSError, ValueError):
                    pass
            try:
                held = partition_bytes(cluster.nodes[victim].log_dirs, topic)
            except OSError:  # a file went away while listed (truncation, the directory made)
                held = 0
            if held and self.first_data is None:
                self.first_data = now
            if held >= size:
                self.all_data = now
            self._stop.wait(0.05)


def catchup(args: argparse.Namespace, root: str) -> None:
    say(f"catchup: {args.mb} MB of {RECORD} B records on an RF 3 topic of {args.partitions} partitions; kill a "
        f"follower, wipe it, restart, until it is in every ISR again; broker.session.timeout.ms="
        f"{args.session_timeout_ms}; {load()}")
    topic = "catchup"
    with new_cluster(root, {"broker.session.timeout.ms": args.session_timeout_ms}) as cluster:
        admin = Admin(cluster)
        controller = cluster.controller_id(timeout=30)
        victim = max(i for i in cluster.nodes if i != controller)
        others = [i for i in cluster.nodes if i != victim]
        # the victim is the last replica of every partition: never the preferred leader
        assignment = [[others[p % 2], others[(p + 1) % 2], victim] for p in range(args.partitions)]
        make_topic(admin, topic, args.partitions, 3, 2, assignment)
        r = produce_bulk(cluster.bootstrap, topic, args.mb)
        say(f"  produced {r['bytes'] / 1e6:.0f} MB in {r['seconds']:.1f} s ({r['MB/s']:.1f} MB/s)")
        copied = partition_bytes(cluster.nodes[others[0]].log_dirs, topic)
        for run in range(args.runs):
            admin.down.add(victim)
            cluster.kill(victim)
            t_kill = time.monotonic()
            wait_for(lambda: victim not in metadata_brokers(cluster.host, cluster.nodes[others[0]].port),
                     args.session_timeout_ms / 1000 + 60, f"node {victim} fenced")
            fenced = time.monotonic() - t_kill
            shutil.rmtree(cluster.nodes[victim].log_dirs)
            cpu0 = sum(cpu_seconds(cluster.nodes[i].pid) for i in others)
            t0 = time.monotonic()
            seen = CatchupSampler(cluster, victim, others[0], topic, copied, t0 + args.timeout).start()
            cluster.nodes[victim].start()
            t_up = time.monotonic()
            wait_for(lambda: all(victim in isr for _, isr in admin.state(topic).values()), args.timeout,
                     f"node {victim} in every ISR of {topic}")
            t_isr = time.monotonic()
            admin.down.discard(victim)
            seen.stop()
            cpu = sum(cpu_seconds(cluster.nodes[i].pid) for i in others) + cpu_seconds(cluster.nodes[victim].pid) - cpu0
            first, done = seen.first_data or t_isr, seen.all_data or t_isr
            rate = (f"{copied / (done - first) / 1e6:.0f} MB/s while copying" if done - first >= 0.1
                    else "copied within two samples (too little data for a rate)")
            say(f"run {run + 1}: node {victim} fenced {fenced:.1f} s after the kill; restarted with an empty "
                f"directory: registered after {(seen.registered or t_isr) - t0:.2f} s, serving clients after "
                f"{t_up - t0:.2f} s, first partition data after {first - t0:.2f} s, all {copied / 1e6:.0f} MB after "
                f"{done - t0:.2f} s, in every ISR after {t_isr - t0:.2f} s: {copied / (t_isr - t0) / 1e6:.0f} MB/s "
                f"from the restart to the ISR, {rate}; "
                f"brokers' CPU {cpu:.1f} s ({cpu / (copied / 1e9):.2f} s per GB copied, start-up included)")
            copied_now = partition_bytes(cluster.nodes[victim].log_dirs, topic)
            if copied_now != copied:
                say(f"  note: the restarted node holds {copied_now} bytes of {topic}'s segments, the leader's "
                    f"replica {copied}")
    say(f"done; {load()}")


# ------------------------------------------------------------------------------------------------------- main
CASES = {"throughput": throughput, "latency": latency, "failover": failover, "catchup": catchup}


def cluster_root(args: argparse.Namespace) -> Iterator[str]:
    """A fresh directory for one case's cluster (under ``--root`` when given), removed afterwards."""
    if args.root:
        Path(args.root).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"kbroker-replication-{args.what}-", dir=args.root) as root:
        yield root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Each case: python bench/replication.py CASE --help")
    ap.add_argument("--root", help="where each case makes its cluster's (temporary) directory, e.g. /dev/shm "
                                   f"(default {tempfile.gettempdir()})")
    sub = ap.add_subparsers(dest="what", required=True, metavar="{throughput,latency,failover,catchup,all}")

    t = sub.add_parser("throughput", help="MB/s and broker CPU per GB with RF 3 and RF 1")
    t.add_argument("--mb", type=int, default=200, help="MB per run (default 200)")
    t.add_argument("--partitions", type=int, default=3, help="partitions of each topic (default 3)")
    t.add_argument("--keep", action="store_true",
                   help="keep each run's topic (by default it is deleted before the next run: on this project's VM "
                        "the kernel's cost per GB written grows several-fold once a few GB of fresh memory are in "
                        "use, which would charge later runs more than earlier ones)")
    t.add_argument("--rounds", type=int, default=3,
                   help="runs of each RF, in ABBA order: RF 3, RF 1, RF 1, RF 3, ... (default 3)")

    lat = sub.add_parser("latency", help="end-to-end and acknowledgement latency at a fixed rate, RF 3")
    lat.add_argument("--rate", type=int, default=1000, help="records per second (default 1000)")
    lat.add_argument("--size", type=int, default=100, help="record value bytes (default 100)")
    lat.add_argument("--seconds", type=float, default=30.0, help="measured time (default 30)")
    lat.add_argument("--warmup", type=float, default=5.0, help="seconds before the measured time (default 5)")
    lat.add_argument("--partitions", type=int, default=3, help="default 3")
    lat.add_argument("--linger-ms", type=int, default=0, help="producer linger.ms (default 0)")
    lat.add_argument("--fetch-wait-max-ms", type=int, default=500,
                     help="consumer fetch.wait.max.ms (default 500, librdkafka's)")

    f = sub.add_parser("failover", help="kill -9 of a partition's leader until acks=all writes resume")
    f.add_argument("--kills", type=int, default=50, help="default 50")
    f.add_argument("--brokers", type=int, default=0,
                   help="3 controllers and this many brokers (default 0: 3 combined nodes, where a killed leader "
                        "is often the active controller too)")
    f.add_argument("--session-timeout-ms", type=int, default=9000,
                   help="broker.session.timeout.ms (default 9000, Kafka's)")
    f.add_argument("--heartbeat-interval-ms", type=int, default=2000,
                   help="broker.heartbeat.interval.ms (default 2000, Kafka's)")
    f.add_argument("--time-limit", type=float, default=3600.0,
                   help="stop starting new kills after this many seconds (default 3600)")
    f.add_argument("--metadata-refresh-ms", type=int, default=1000,
                   help="the producer's topic.metadata.refresh.interval.ms (default 1000): how soon it asks the "
                        "survivors again for the new leader (a dead leader cannot answer with a KIP-951 hint)")
    f.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                   help="another librdkafka setting of the producer, e.g. retry.backoff.max.ms=250 (repeatable)")

    c = sub.add_parser("catchup", help="a wiped follower copying everything back into the ISR")
    c.add_argument("--mb", type=int, default=500, help="MB on the topic (default 500)")
    c.add_argument("--partitions", type=int, default=3, help="default 3")
    c.add_argument("--runs", type=int, default=1, help="wipes of the same follower (default 1)")
    c.add_argument("--session-timeout-ms", type=int, default=9000, help="broker.session.timeout.ms (default 9000)")
    c.add_argument("--timeout", type=float, default=900.0, help="longest wait for the catch-up (default 900 s)")

    sub.add_parser("all", help="every case above with its defaults")
    args = ap.parse_args(argv)
    say(f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, {load()}")
    if args.what == "all":
        for name in CASES:
            case_args = ap.parse_args([*(["--root", args.root] if args.root else []), name])
            for root in cluster_root(case_args):
                CASES[name](case_args, root)
        return 0
    for root in cluster_root(args):
        CASES[args.what](args, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
