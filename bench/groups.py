#!/usr/bin/env python3
"""kbroker consumer-group benchmark with confluent-kafka (librdkafka) consumers against a kbroker subprocess.

Measures, on a 20-partition topic (so that each of 10 members gets 2 partitions):

* cold start: 10 consumers of a new group, created first, then subscribed one after the other from one
  thread (each then polled by a thread of its own); time from the first ``subscribe()`` until every member
  holds its share of a complete, disjoint, balanced assignment (seen through the rebalance callbacks).
  Classic protocol with the broker's ``group.initial.rebalance.delay.ms`` at 0 and at 3000 (issue 3's
  target: delay + 100 ms), and ``group.protocol=consumer`` (KIP-848) if librdkafka supports it;
* leave: in the Stable 10-member group one member calls ``close()`` (LeaveGroup); time from that call
  until the other 9 again hold a complete, balanced assignment including the leaver's partitions;
* commits: synchronous ``commit(asynchronous=False)`` calls per second from one consumer (one partition,
  a new offset each time), and asynchronous commits per second (up to 1000 outstanding, counted when
  their ``on_commit`` callback reports success).

Classic-protocol members learn of a rebalance from a heartbeat response, so the client's
``heartbeat.interval.ms`` bounds the rebalance times; runs are made at the client default (3000) and at
500. For ``group.protocol=consumer`` the interval is the broker's ``group.consumer.heartbeat.interval.ms``.
Each figure is the median of ``--repeat`` runs (min and max shown too). Run:
``.venv/bin/python bench/groups.py [--quick] [--json out.json]``. Not a test: nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import create_topic, machine  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402

PARTITIONS = 20
MEMBERS = 10


class Tracker:
    """Assignments of every member, kept up to date from the rebalance callbacks (which run in each member's
    polling thread). ``watch(members)`` arms the condition: every watched member holds a share of a complete,
    disjoint assignment of the topic whose sizes differ by at most one; the first moment it holds is recorded."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.lock = threading.Lock()
        self.owned: dict[int, set[int]] = {}
        self.watched: list[int] = []
        self.done = threading.Event()
        self.done_at = 0.0

    def watch(self, members: list[int]) -> None:
        with self.lock:
            self.watched = list(members)
            self.done.clear()
            self.done_at = 0.0
            self._check()

    def update(self, member: int, add: list[TopicPartition], remove: list[TopicPartition]) -> None:
        with self.lock:
            s = self.owned.setdefault(member, set())
            s.difference_update(tp.partition for tp in remove)
            s.update(tp.partition for tp in add)
            self._check()

    def _check(self) -> None:
        if not self.watched or self.done.is_set():
            return
        sizes, union = [], set()
        for m in self.watched:
            s = self.owned.get(m, set())
            if union & s:
                return
            union |= s
            sizes.append(len(s))
        lo = self.partitions // len(self.watched)
        if len(union) == self.partitions and all(lo <= n <= lo + 1 for n in sizes):
            self.done_at = time.perf_counter()
            self.done.set()


class Group:
    """``n`` consumers of one group, each polled by its own thread."""

    def __init__(self, bootstrap: str, topic: str, group: str, n: int, conf: dict) -> None:
        self.topic = topic
        self.tracker = Tracker(PARTITIONS)
        base = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "log_level": 3}
        self.consumers = [Consumer({**base, **conf, "client.id": f"m{i}"}) for i in range(n)]
        self.stop = [threading.Event() for _ in range(n)]
        self.closed_at = [0.0] * n
        self.go = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        c = self.consumers[i]
        self.go.wait()
        while not self.stop[i].is_set():
            c.poll(0.02)
        self.closed_at[i] = time.perf_counter()
        try:
            c.close()
        except KafkaException:
            pass

    def start(self) -> float:
        """Subscribe every member, return the time of the first subscribe."""
        t0 = time.perf_counter()
        for i, c in enumerate(self.consumers):
            c.subscribe([self.topic],
                        on_assign=lambda _c, parts, i=i: self.tracker.update(i, parts, []),
                        on_revoke=lambda _c, parts, i=i: self.tracker.update(i, [], parts),
                        on_lost=lambda _c, parts, i=i: self.tracker.update(i, [], parts))
        self.go.set()
        return t0

    def leave(self, i: int, others: list[int]) -> None:
        self.tracker.watch(others)
        self.stop[i].set()

    def close(self) -> None:
        self.go.set()
        for e in self.stop:
            e.set()
        for t in self.threads:
            t.join(30)


def cold_start(bootstrap: str, topic: str, group: str, conf: dict, timeout: float) -> tuple[float, Group]:
    g = Group(bootstrap, topic, group, MEMBERS, conf)
    g.tracker.watch(list(range(MEMBERS)))
    t0 = g.start()
    if not g.tracker.done.wait(timeout):
        g.close()
        raise TimeoutError(f"group {group} not complete after {timeout} s: {g.tracker.owned}")
    return (g.tracker.done_at - t0) * 1000, g


def leave_one(g: Group, timeout: float) -> float:
    g.leave(0, list(range(1, MEMBERS)))
    if not g.tracker.done.wait(timeout):
        raise TimeoutError(f"no complete assignment after a leave within {timeout} s: {g.tracker.owned}")
    return (g.tracker.done_at - g.closed_at[0]) * 1000


def bench_commits(bootstrap: str, topic: str, seconds: float) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits", "enable.auto.commit": False,
                  "log_level": 3})
    # a member of a Stable group (commits carry its member id and generation)
    assigned = threading.Event()
    c.subscribe([topic], on_assign=lambda *_: assigned.set())
    deadline = time.monotonic() + 30
    while not assigned.is_set() and time.monotonic() < deadline:
        c.poll(0.05)
    if not assigned.is_set():
        raise TimeoutError("commit consumer got no assignment")
    offset = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    n_sync = 0
    while time.perf_counter() < end:
        offset += 1
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        n_sync += 1
    sync_s = time.perf_counter() - t0

    done = {"ok": 0, "err": 0}

    def on_commit(err, _parts):
        done["err" if err is not None else "ok"] += 1

    # on_commit is a configuration property, so the async commits come from a second consumer (another group)
    c2 = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits-async", "enable.auto.commit": False,
                   "log_level": 3, "on_commit": on_commit})
    assigned.clear()
    c2.subscribe([topic], on_assign=lambda *_: assigned.set())
    deadline = time.monotonic() + 30
    while not assigned.is_set() and time.monotonic() < deadline:
        c2.poll(0.05)
    if not assigned.is_set():
        raise TimeoutError("async commit consumer got no assignment")
    sent = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        if sent - done["ok"] - done["err"] >= 1000:
            c2.poll(0.001)
            continue
        offset += 1
        c2.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
        sent += 1
        c2.poll(0)
    deadline = time.monotonic() + 30
    while done["ok"] + done["err"] < sent and time.monotonic() < deadline:
        c2.poll(0.01)
    async_s = time.perf_counter() - t0
    committed = c2.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    c.close()
    c2.close()
    if done["err"]:
        raise RuntimeError(f"{done['err']} async commits failed")
    if committed != offset:
        raise RuntimeError(f"last committed offset {committed}, expected {offset}")
    return {"sync_commits": n_sync, "sync_seconds": sync_s, "sync_commits/s": n_sync / sync_s,
            "sync_ms_per_commit": sync_s / n_sync * 1000,
            "async_commits": done["ok"], "async_seconds": async_s, "async_commits/s": done["ok"] / async_s}


def summary(values: list[float]) -> dict:
    return {"median_ms": statistics.median(values), "min_ms": min(values), "max_ms": max(values), "runs": values}


def consumer_protocol_supported(bootstrap: str) -> bool:
    try:
        Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "group.protocol": "consumer"}).close()
        return True
    except (KafkaException, ValueError):
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one run of each and 2 s of commits (a smoke check)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each group measurement (default 3)")
    ap.add_argument("--commit-seconds", type=float, default=5.0)
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--data-dir", default=None, help="parent directory for the broker's data (e.g. /dev/shm)")
    ap.add_argument("--max-seconds", type=int, default=170, help="give up (and stop the broker) after this long")
    args = ap.parse_args()
    repeat = 1 if args.quick else args.repeat
    commit_s = 2.0 if args.quick else args.commit_seconds

    def on_alarm(*_):
        raise TimeoutError(f"benchmark exceeded --max-seconds={args.max_seconds}")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.max_seconds)

    results: dict = {"machine": machine(), "partitions": PARTITIONS, "members": MEMBERS, "cases": []}
    rows: list[tuple[str, str, dict]] = []

    def record(kind: str, label: str, conf: dict, values: list[float]) -> None:
        s = summary(values)
        results["cases"].append({"measure": kind, "case": label, "config": conf, **s})
        rows.append((kind, label, s))
        print(f"{kind:<10} {label:<58} median {s['median_ms']:8.0f} ms  (min {s['min_ms']:.0f}, "
              f"max {s['max_ms']:.0f}, {len(values)} runs)", flush=True)

    n_group = 0
    # (broker overrides, cases); each case: (label, consumer config, measure leave too?)
    plan = [
        ({"group.initial.rebalance.delay.ms": "0"}, [
            ("classic, initial delay 0, client heartbeat 3000 ms", {"heartbeat.interval.ms": 3000}, True),
            ("classic, initial delay 0, client heartbeat 500 ms", {"heartbeat.interval.ms": 500}, True),
            ("consumer (KIP-848), broker heartbeat interval 5000 ms", {"group.protocol": "consumer"}, False),
        ]),
        ({"group.initial.rebalance.delay.ms": "3000", "group.consumer.heartbeat.interval.ms": "500"}, [
            ("classic, initial delay 3000, client heartbeat 3000 ms", {"heartbeat.interval.ms": 3000}, False),
            ("consumer (KIP-848), broker heartbeat interval 500 ms", {"group.protocol": "consumer"}, False),
        ]),
    ]
    try:
        for b, (overrides, cases) in enumerate(plan):
            with tempfile.TemporaryDirectory(prefix="kbroker-bench-groups-", dir=args.data_dir) as data_dir:
                broker = KbrokerProcess(data_dir, overrides=overrides).start()
                try:
                    topic = "bench-groups"
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    for label, conf, with_leave in cases:
                        if conf.get("group.protocol") == "consumer" and not consumer_protocol_supported(
                                broker.bootstrap):
                            print(f"skipped: {label} (librdkafka has no group.protocol=consumer)")
                            continue
                        colds, leaves = [], []
                        for _ in range(repeat):
                            n_group += 1
                            ms, g = cold_start(broker.bootstrap, topic, f"bench-g{n_group}", conf, 60)
                            colds.append(ms)
                            try:
                                if with_leave:
                                    leaves.append(leave_one(g, 60))
                            finally:
                                g.close()
                        record("cold", label, {"broker": overrides, "client": conf}, colds)
                        if leaves:
                            record("leave", label, {"broker": overrides, "client": conf}, leaves)
                    if b == 0:
                        cm = bench_commits(broker.bootstrap, topic, commit_s)
                        results["commits"] = cm
                        print(f"commits    sync {cm['sync_commits/s']:8.0f}/s ({cm['sync_ms_per_commit']:.2f} ms "
                              f"each) | async {cm['async_commits/s']:8.0f}/s (up to 1000 outstanding)",
                              flush=True)
                finally:
                    broker.stop()
    finally:
        signal.alarm(0)
    print(json.dumps(results["machine"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
