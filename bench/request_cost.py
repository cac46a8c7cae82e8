#!/usr/bin/env python3
"""The broker's CPU cost per produce request (issue 13), with confluent-kafka against a kbroker subprocess.

Cases (each on a fresh topic, 100 B records, acks=1, broker CPU from /proc/<pid>/stat):

* ``single``: one producer, one partition, one record per request (``linger.ms=0``, a flush after every
  record): broker CPU microseconds per request;
* ``many``: ``--producers`` producers (default 50) on one topic of ``--partitions`` partitions (default 10),
  ``linger.ms=5``, each producing as fast as its queue allows for ``--seconds``: records/s, produce requests/s
  (librdkafka's own count of requests sent), broker CPU microseconds per request;
* ``latency``: one producer sending ``--rate`` records/s (default 1000) one per request over 6 partitions and
  one consumer long-polling them: broker cores, end-to-end latency p50/p99 (ms, from the record timestamp),
  fetch responses per second.

Usage: ``python bench/request_cost.py [--case single|many|latency|both] [--python PATH] [--acls N]``
(``--python``: the interpreter whose kbroker is measured, e.g. another checkout's venv; ``--acls N``: the broker
runs kbroker's ACL authorizer holding N ACLs of other principals and topics, half of them prefixed, plus the ones
that let the bench's client (User:ANONYMOUS, not a super user) create, describe and write its topics, so every
request is authorized against a populated index: issue 11's cost of ACL checks). Not a test: nothing asserts on
speed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing import KbrokerProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
VALUE = b"x" * 100


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def create(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the answer is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    time.sleep(0.5)


def single(broker: KbrokerProcess, n: int) -> dict[str, float]:
    create(broker.bootstrap, "cost-single", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1})
    errors: list[str] = []

    def delivered(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))

    for _ in range(200):  # warm up (connections, metadata)
        p.produce("cost-single", VALUE, partition=0, on_delivery=delivered)
        p.flush(10)
    cpu0, t0 = cpu_seconds(broker.pid), time.monotonic()
    for _ in range(n):
        p.produce("cost-single", VALUE, partition=0, on_delivery=delivered)
        p.flush(10)
    took, cpu = time.monotonic() - t0, cpu_seconds(broker.pid) - cpu0
    if errors:
        raise SystemExit(f"{len(errors)} records failed: {errors[:3]}")
    return {"requests": n, "requests_per_s": n / took, "broker_us_per_request": cpu / n * 1e6}


def many(broker: KbrokerProcess, producers: int, partitions: int, seconds: float) -> dict[str, float]:
    create(broker.bootstrap, "cost-many", partitions)
    sent_requests = [0] * producers
    acked = [0] * producers
    stop = threading.Event()

    def run(i: int) -> None:
        def stats(raw: str) -> None:
            s = json.loads(raw)
            sent_requests[i] = sum(b.get("tx", 0) for b in s.get("brokers", {}).values())

        def delivered(err, msg) -> None:  # noqa: ANN001
            if err is None:
                acked[i] += 1

        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": 1,
                      "queue.buffering.max.messages": 20000, "statistics.interval.ms": 500, "stats_cb": stats})
        while not stop.is_set():
            try:
                p.produce("cost-many", VALUE, on_delivery=delivered)
            except BufferError:
                p.poll(0.005)
                continue
            p.poll(0)
        p.flush(30)
        p.poll(0.6)  # a last statistics callback

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    time.sleep(2)  # ramp up
    a0, r0, cpu0, t0 = sum(acked), sum(sent_requests), cpu_seconds(broker.pid), time.monotonic()
    time.sleep(seconds)
    a1, r1, cpu1, t1 = sum(acked), sum(sent_requests), cpu_seconds(broker.pid), time.monotonic()
    stop.set()
    for t in threads:
        t.join()
    requests = max(1, r1 - r0)
    return {"records_per_s": (a1 - a0) / (t1 - t0), "requests_per_s": requests / (t1 - t0),
            "broker_cores": (cpu1 - cpu0) / (t1 - t0), "broker_us_per_request": (cpu1 - cpu0) / requests * 1e6}


def latency(broker: KbrokerProcess, rate: int, seconds: float) -> dict[str, float]:
    from confluent_kafka import Consumer, TopicPartition

    create(broker.bootstrap, "cost-latency", 6)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cost-latency", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 500, "statistics.interval.ms": 500,
                  "stats_cb": lambda raw: fetches.__setitem__(0, sum(b.get("rx", 0) for b in json.loads(raw).get(
                      "brokers", {}).values()))})
    fetches = [0]
    c.assign([TopicPartition("cost-latency", p, 0) for p in range(6)])
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            m = c.poll(0.1)
            if m is not None and not m.error():
                lat.append(time.time() * 1000 - m.timestamp()[1])
        c.close()

    t = threading.Thread(target=consume)
    t.start()
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": 1})
    interval = 1.0 / rate
    time.sleep(1.0)
    cpu0, t0, f0, sent = cpu_seconds(broker.pid), time.monotonic(), fetches[0], 0
    nxt = t0
    while time.monotonic() - t0 < seconds:
        p.produce("cost-latency", VALUE, partition=sent % 6)
        p.poll(0)
        sent += 1
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    took, cpu, f1 = time.monotonic() - t0, cpu_seconds(broker.pid) - cpu0, fetches[0]
    p.flush(10)
    time.sleep(1.0)
    stop.set()
    t.join()
    lat.sort()
    pick = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
    return {"records_per_s": sent / took, "broker_cores": cpu / took, "e2e_p50_ms": pick(0.5),
            "e2e_p99_ms": pick(0.99), "responses_per_s": (f1 - f0) / took}


def load_acls(root: str, python: str | None, n: int) -> dict[str, str]:
    """Start a broker whose only super user is User:ANONYMOUS, add ``n`` unrelated ACLs and the bench client's, stop
    it; returns the properties under which it restarts with those ACLs and no super user."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    authz = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    broker = KbrokerProcess(root, python=python, log_level="WARNING")
    broker.overrides.update({**authz, "super.users": "User:ANONYMOUS"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        allow = AclPermissionType.ALLOW
        acls = [AclBinding(ResourceType.TOPIC, f"team{i % 100}-topic{i}",
                           ResourcePatternType.PREFIXED if i % 2 else ResourcePatternType.LITERAL,
                           f"User:user{i % 500}", "*", AclOperation.READ if i % 3 else AclOperation.WRITE, allow)
                for i in range(n)]
        for op in (AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.WRITE):
            acls.append(AclBinding(ResourceType.TOPIC, "cost-", ResourcePatternType.PREFIXED, "User:ANONYMOUS", "*",
                                   op, allow))
        for op in (AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE):
            acls.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                                   "User:ANONYMOUS", "*", op, allow))
        acls.append(AclBinding(ResourceType.GROUP, "cost-", ResourcePatternType.PREFIXED, "User:ANONYMOUS", "*",
                               AclOperation.READ, allow))
        for i in range(0, len(acls), 1000):
            for f in admin.create_acls(acls[i:i + 1000], request_timeout=60).values():
                f.result()
        got = admin.describe_acls(any_acl(), request_timeout=60).result()
        print(f"acls: {len(got)} in the broker", flush=True)
    finally:
        broker.stop()
    return authz


def any_acl():  # noqa: ANN201
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["single", "many", "latency", "both"], default="both")
    ap.add_argument("--rate", type=int, default=1000, help="records/s of the latency case")
    ap.add_argument("--requests", type=int, default=5000, help="requests of the single case")
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--python", default=None, help="the interpreter that runs the measured kbroker")
    ap.add_argument("--acls", type=int, default=None, help="run with kbroker's ACL authorizer and this many ACLs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-cost-") as root:
        overrides = load_acls(root, args.python, args.acls) if args.acls is not None else {}
        broker = KbrokerProcess(root, python=args.python, log_level="WARNING")
        broker.overrides.update(overrides)
        broker.start()
        try:
            if args.case in ("single", "both"):
                print("single:", {k: round(v, 1) for k, v in single(broker, args.requests).items()}, flush=True)
            if args.case in ("many", "both"):
                got = many(broker, args.producers, args.partitions, args.seconds)
                print("many:", {k: round(v, 2) for k, v in got.items()}, flush=True)
            if args.case == "latency":
                got = latency(broker, args.rate, args.seconds)
                print("latency:", {k: round(v, 3) for k, v in got.items()}, flush=True)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
