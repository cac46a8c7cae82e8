#!/usr/bin/env python3
"""One node of kbroker, Apache Kafka 4.3.1 and Tansu 0.6 side by side (issue 36), with the load generated in
processes of its own, so that the client is not what is measured.

Cases, per target, in alternating rounds (kbroker, kafka, tansu, kbroker, ...), medians printed:

* ``start``: seconds from spawning the (already formatted) server to its first ApiVersions answer;
  ``rss_idle_MB`` five seconds later;
* ``produce``: Kafka's own ``kafka-producer-perf-test`` (``org.apache.kafka.tools.ProducerPerformance``, its own
  JVM), N records of 1 KiB to a one-partition topic, ``acks=1``; then ``acks=all`` with idempotence
  (``produce_idem``); MB/s as the tool reports it, broker CPU seconds per GB (``/proc/<pid>/stat``), the client's
  CPU seconds per GB (``getrusage(RUSAGE_CHILDREN)``), the broker's peak RSS;
* ``consume``: ``kafka-consumer-perf-test`` (``ConsumerPerformance``) reading the acks=1 topic back; the tool's
  ``fetch.MB.sec`` (without the group join), broker and client CPU per GB;
* ``produce_librdkafka``: confluent-kafka in a child process, the acks=1 case again (MB/s, broker CPU s/GB);
* ``latency_1000`` / ``latency_10000``: end to end (CreateTime to receipt) at that many 100-byte records/s,
  producer and consumer in this process (p50, p99, p99.9 in ms);
* ``many``: 50 producers over 10 partitions, 100-byte records, in 5 client processes (``bench/request_cost.py``'s
  ``many`` case: records/s, acknowledgement p99).

Kafka runs with the JVM flags of its start scripts (``kbroker.testing.kafka``) and ``-Xms1g -Xmx1g``, the heap
``kafka-server-start.sh`` sets; kbroker with its defaults; Tansu with memory storage. Every target gets the same
topic settings. Not a test: nothing asserts on speed. Usage::

    ./dev.sh bench --against kafka [--against tansu] [--rounds 3] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402
from kbroker.testing.plugin import api_versions_probe  # noqa: E402

import run as run_bench  # noqa: E402  (bench/run.py: cpu_seconds, bench_latency, machine)

KAFKA_HEAP = "-Xms1g -Xmx1g"  # kafka-server-start.sh's default heap
TOOL_JVM = ["-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Target:
    """A started server: ``bootstrap``, ``pid``, ``stop()``, and ``start_s`` (spawn to first answer)."""

    def __init__(self, name: str, root: str) -> None:
        self.name = name
        if name == "tansu":
            from request_cost import Tansu  # noqa: PLC0415

            t0 = time.perf_counter()
            self.server: Any = Tansu(root)
            self.start_s = time.perf_counter() - t0
        else:
            if name == "kafka":
                from kbroker.testing.kafka import KafkaProcess  # noqa: PLC0415

                self.server = KafkaProcess(root, heap_opts=KAFKA_HEAP)
                self.server.format()  # formatting is a separate, one-off step, not start-up
            else:
                self.server = KbrokerProcess(root, log_level="WARNING")
            t0 = time.perf_counter()
            self.server._spawn()
            deadline = time.monotonic() + 120
            host, port = self.server.bootstrap.rsplit(":", 1)
            while not api_versions_probe(host, int(port), timeout=1.0):
                if time.monotonic() > deadline or not self.server.is_running():
                    raise RuntimeError(f"{name} did not start: {self.server.log_tail(40)}")
                time.sleep(0.01)
            self.start_s = time.perf_counter() - t0
            self.server.wait_ready(60)
        self.bootstrap = self.server.bootstrap
        self.pid = self.server.pid

    def stop(self) -> None:
        self.server.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


class PeakRss:
    """The broker's largest RSS while a block runs, sampled every 100 ms in a thread."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except OSError:
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)


def java_tool(main_class: str, *args: str, timeout: float = 600) -> str:
    from kbroker.testing.kafka import java_bin, kafka_classpath  # noqa: PLC0415

    cmd = [java_bin(), *TOOL_JVM, "-cp", kafka_classpath(), main_class, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{main_class} failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.stdout


def perf_produce(t: Target, topic: str, count: int, props: list[str]) -> dict[str, float]:
    create_topic(t.bootstrap, topic)
    cpu0, client0 = run_bench.cpu_seconds(t.pid), children_cpu()
    with PeakRss(t.pid) as peak:
        out = java_tool("org.apache.kafka.tools.ProducerPerformance", "--bootstrap-server", t.bootstrap,
                        "--topic", topic, "--num-records", str(count), "--record-size", "1024",
                        "--throughput", "-1", "--producer-props", "linger.ms=5", "batch.size=1048576", *props)
    cpu, client = run_bench.cpu_seconds(t.pid) - cpu0, children_cpu() - client0
    last = [line for line in out.splitlines() if "records sent" in line][-1]
    m = re.search(r"\(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency.*?(\d+) ms 99th", last)
    assert m, last
    gb = count * 1024 / 1e9
    return {"MB/s": float(m.group(1)), "broker_cpu_s_per_GB": cpu / gb, "client_cpu_s_per_GB": client / gb,
            "avg_latency_ms": float(m.group(2)), "p99_latency_ms": float(m.group(4)), "peak_rss_MB": peak.peak}


def perf_consume(t: Target, topic: str, count: int) -> dict[str, float]:
    cpu0, client0 = run_bench.cpu_seconds(t.pid), children_cpu()
    out = java_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", t.bootstrap,
                    "--topic", topic, "--num-records", str(count), "--timeout", "60000",
                    "--command-property", "auto.offset.reset=earliest")
    cpu, client = run_bench.cpu_seconds(t.pid) - cpu0, children_cpu() - client0
    lines = [line for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values))
    gb = count * 1024 / 1e9
    return {"MB/s": float(row["fetch.MB.sec"]), "with_join_MB/s": float(row["MB.sec"]),
            "broker_cpu_s_per_GB": cpu / gb, "client_cpu_s_per_GB": client / gb,
            "rebalance_ms": float(row["rebalance.time.ms"])}


LIBRDKAFKA_PRODUCER = """
import sys, time, os
sys.path.insert(0, {bench!r})
import run
r = run.bench_produce({bootstrap!r}, os.getpid(), {topic!r}, {count}, 1024, "1", "none")
print(r["seconds"])
"""


def librdkafka_produce(t: Target, topic: str, count: int) -> dict[str, float]:
    create_topic(t.bootstrap, topic)
    code = LIBRDKAFKA_PRODUCER.format(bench=str(Path(__file__).resolve().parent), bootstrap=t.bootstrap,
                                      topic=topic, count=count)
    cpu0, client0 = run_bench.cpu_seconds(t.pid), children_cpu()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    cpu, client = run_bench.cpu_seconds(t.pid) - cpu0, children_cpu() - client0
    seconds = float(out.stdout.strip().splitlines()[-1])
    gb = count * 1024 / 1e9
    return {"MB/s": count * 1024 / seconds / 1e6, "broker_cpu_s_per_GB": cpu / gb,
            "client_cpu_s_per_GB": client / gb}


def latency(t: Target, rate: int, seconds: float) -> dict[str, float]:
    topic = f"lat-{rate}"
    create_topic(t.bootstrap, topic)
    r = run_bench.bench_latency(t.bootstrap, topic, rate, seconds)
    return {k: r[k] for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms") if k in r}


def many(t: Target, seconds: float) -> dict[str, float]:
    import request_cost  # noqa: PLC0415

    return request_cost.many(t.server, 50, 10, seconds, 5, 0.0)


def run_target(name: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    count = 30_000 if args.quick else 300_000
    seconds = 3.0 if args.quick else 10.0
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix=f"versus-{name}-", dir=args.data_dir) as root:
        t = Target(name, root)
        try:
            time.sleep(5)
            out["start"] = {"seconds": t.start_s, "rss_idle_MB": rss_mb(t.pid)}
            out["produce"] = perf_produce(t, "p1", count, ["acks=1"])
            out["produce_idem"] = perf_produce(t, "pall", count, ["acks=all", "enable.idempotence=true"])
            out["consume"] = perf_consume(t, "p1", count)
            out["produce_librdkafka"] = librdkafka_produce(t, "plib", count)
            out["latency_1000"] = latency(t, 1000, seconds)
            out["latency_10000"] = latency(t, 10000, seconds)
            out["many"] = many(t, seconds)
            out["start"]["rss_after_MB"] = rss_mb(t.pid)
        finally:
            t.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", action="append", choices=["kafka", "tansu"], default=[],
                    help="targets beside kbroker (repeatable)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are printed")
    ap.add_argument("--quick", action="store_true", help="a tenth of the records and 3 s latency runs")
    ap.add_argument("--data-dir", default=None, help="parent directory for the servers' data")
    ap.add_argument("--json", help="write every round and the medians as JSON to this file")
    args = ap.parse_args()
    targets = ["kbroker", *dict.fromkeys(args.against)]
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {t: [] for t in targets}
    load = []
    for r in range(args.rounds):
        for name in targets:
            load.append(os.getloadavg()[0])
            got = run_target(name, args)
            rounds[name].append(got)
            print(f"round {r + 1} {name}: " + json.dumps({c: {k: round(v, 2) for k, v in vals.items()}
                                                            for c, vals in got.items()}), flush=True)
    medians = {name: {case: {k: statistics.median(run[case][k] for run in runs) for k in runs[0][case]}
                      for case in runs[0]} for name, runs in rounds.items()}
    print(f"\nmedians of {args.rounds} rounds; load average at the start of each run: "
          f"{min(load):.1f}-{max(load):.1f}; machine {json.dumps(run_bench.machine())}")
    for case in medians["kbroker"]:
        for key in medians["kbroker"][case]:
            cells = "  ".join(f"{name} {medians[name][case].get(key, float('nan')):10.2f}" for name in targets)
            ratio = ""
            if "kafka" in medians and medians["kafka"][case].get(key):
                ratio = f"  kbroker/kafka {medians['kbroker'][case][key] / medians['kafka'][case][key]:.2f}"
            print(f"{case:<19} {key:<21} {cells}{ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": run_bench.machine(), "load": load, "rounds": rounds,
                                               "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
