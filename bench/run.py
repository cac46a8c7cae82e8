#!/usr/bin/env python3
"""kbroker benchmarks with a real client (confluent-kafka / librdkafka) against a kbroker subprocess.

Runs, for each case, on a fresh single-partition topic:

* produce: N records of S bytes (acks, compression, ``linger.ms=5``, ``batch.size=1 MiB``), timed from the
  first ``produce()`` to the end of ``flush()``;
* consume: the same records read back from the beginning with assign() (no group);
* end-to-end latency: records produced at a fixed rate (default 1000/s) and consumed by a consumer that
  is already polling; latency = receive time - the record's CreateTime (same clock).

For produce and consume it reports MB/s and records/s of payload (key-less values of S bytes) and the
broker's CPU seconds per GB of payload, read from /proc/<pid>/stat (utime + stime) before and after.
Usage: ``./dev.sh bench [--quick] [--json out.json]``. Not a test: nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing import KbrokerProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def create_topic(bootstrap: str, name: str, partitions: int = 1, conf: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def bench_produce(bootstrap: str, pid: int, topic: str, count: int, size: int, acks: str, compression: str,
                  conf: dict | None = None) -> dict:
    """``conf``: more client properties (e.g. TLS settings, bench/tls.py)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression, "linger.ms": 5,
        "batch.size": 1 << 20, "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000,
        "enable.idempotence": acks == "all", **(conf or {}),
    })
    payload = os.urandom(size // 2).hex().encode()[:size] if compression == "none" else (b"abcdefghij" * (size // 10 + 1))[:size]
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    produce = producer.produce
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    gb = count * size / 1e9
    return {"records": count, "seconds": elapsed, "MB/s": count * size / elapsed / 1e6,
            "records/s": count / elapsed, "broker_cpu_s": cpu, "broker_cpu_s_per_GB": cpu / gb}


def bench_consume(bootstrap: str, pid: int, topic: str, count: int, size: int, conf: dict | None = None) -> dict:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, "queued.max.messages.kbytes": 1048576,
        "fetch.wait.max.ms": 100, **(conf or {}),
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    # connect and wait for the first record, then time the rest (connection set-up is not throughput)
    first = None
    while first is None:
        first = consumer.poll(10.0)
        if first is not None and first.error() is not None:
            first = None
    got = 1
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        msgs = consumer.consume(10000, 1.0)
        for m in msgs:
            if m.error() is None:
                got += 1
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    consumer.close()
    if got != count:
        raise RuntimeError(f"consumed {got} of {count}")
    gb = count * size / 1e9
    return {"records": got, "seconds": elapsed, "MB/s": got * size / elapsed / 1e6, "records/s": got / elapsed,
            "broker_cpu_s": cpu, "broker_cpu_s_per_GB": cpu / gb}


def bench_latency(bootstrap: str, topic: str, rate: int, seconds: float, size: int = 100) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies: list[float] = []
    total = int(rate * seconds)
    done = threading.Event()

    def consume() -> None:
        while len(latencies) < total and not done.is_set():
            m = consumer.poll(0.5)
            if m is None or m.error() is not None:
                continue
            now_us = time.time() * 1e6
            sent_us = int.from_bytes(m.value()[:8], "big")
            latencies.append((now_us - sent_us) / 1000)

    th = threading.Thread(target=consume)
    th.start()
    time.sleep(1.0)  # let the consumer connect and start polling
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1"})
    pad = b"x" * (size - 8)
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(total):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, int(time.time() * 1e6).to_bytes(8, "big") + pad)
        producer.poll(0)
    producer.flush(30)
    th.join(30)
    done.set()
    consumer.close()
    latencies.sort()
    q = statistics.quantiles(latencies, n=1000)
    return {"records": len(latencies), "rate": rate, "p50_ms": q[499], "p99_ms": q[989], "p999_ms": q[998],
            "max_ms": latencies[-1]}


def machine() -> dict:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_GiB": round(int(mem) / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke check of the benchmark itself)")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--overrides", action="append", default=[], help="broker property key=value")
    ap.add_argument("--data-dir", default=None, help="parent directory for the broker's data (e.g. /dev/shm)")
    args = ap.parse_args()
    scale = 0.05 if args.quick else 1.0
    overrides = dict(x.split("=", 1) for x in args.overrides)
    results: dict = {"machine": machine(), "cases": []}
    results["data_dir_parent"] = args.data_dir or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-", dir=args.data_dir) as data_dir:
        broker = KbrokerProcess(data_dir, overrides=overrides).start()
        try:
            pid = broker.pid
            assert pid is not None
            n = 0
            for size, count in ((1024, 300_000), (100, 1_000_000)):
                for acks in ("1", "all"):
                    for compression in ("none", "lz4"):
                        n += 1
                        topic = f"bench-{n}"
                        create_topic(broker.bootstrap, topic)
                        c = int(count * scale)
                        prod = bench_produce(broker.bootstrap, pid, topic, c, size, acks, compression)
                        cons = bench_consume(broker.bootstrap, pid, topic, c, size)
                        case = {"size": size, "acks": acks, "compression": compression, "produce": prod,
                                "consume": cons}
                        results["cases"].append(case)
                        print(f"{size:>5} B acks={acks:<3} {compression:<4}  produce {prod['MB/s']:7.1f} MB/s "
                              f"{prod['records/s']:10.0f} rec/s cpu {prod['broker_cpu_s_per_GB']:5.2f} s/GB | "
                              f"consume {cons['MB/s']:7.1f} MB/s {cons['records/s']:10.0f} rec/s "
                              f"cpu {cons['broker_cpu_s_per_GB']:5.2f} s/GB", flush=True)
            create_topic(broker.bootstrap, "bench-latency")
            lat = bench_latency(broker.bootstrap, "bench-latency", 1000, 10 * scale if args.quick else 10)
            results["latency"] = lat
            print(f"end-to-end at {lat['rate']} msg/s: p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
                  f"max {lat['max_ms']:.2f} ms ({lat['records']} records)", flush=True)
        finally:
            broker.stop()
    print(json.dumps(results["machine"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
