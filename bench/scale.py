#!/usr/bin/env python3
"""Many partitions and many connections on one kbroker node (issue 13, item 2).

* ``partitions``: ``--partitions`` partitions (default 10,000, as ``--topics`` topics of equal size) with a few
  records each; then the broker is stopped cleanly and started again, and killed with -9 and started again:
  seconds from the process start to serving clients each time (clean and after kill -9), the broker's RSS and
  its idle CPU (fraction of a core over ``--idle-seconds`` with nobody connected);
* ``connections``: ``--connections`` idle TCP connections (default 10,000), each of which sent one ApiVersions
  request: the broker's RSS before and after, and a normal confluent-kafka producer's ack latency (p50/p99 of
  ``--records`` records sent one by one) with and without the idle connections.

Usage: ``python bench/scale.py [--case partitions|connections|both] [--partitions N] [--connections N]``.
Not a test: nothing asserts on speed. Needs ``ulimit -n`` above ``--connections`` (raised to the hard limit).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing import KbrokerProcess  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_start(broker: KbrokerProcess) -> float:
    t0 = time.monotonic()
    broker.start(timeout=600)
    return time.monotonic() - t0


def case_partitions(root: str, partitions: int, topics: int, idle_seconds: float) -> dict[str, float]:
    broker = KbrokerProcess(root, log_level="WARNING", overrides={"num.partitions": "1"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        per = partitions // topics
        t0 = time.monotonic()
        for i in range(topics):
            admin.create_topics([NewTopic(f"scale-{i}", per, 1)], request_timeout=600)[f"scale-{i}"].result(600)
        create_s = time.monotonic() - t0
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        for i in range(topics):
            for p in range(0, per, max(1, per // 100)):  # a record in every 1% of the partitions
                producer.produce(f"scale-{i}", b"x" * 100, partition=p)
        producer.flush(120)
        del producer
        broker.stop(timeout=600)
        clean_s = timed_start(broker)
        time.sleep(2.0)
        rss = rss_mib(broker.pid)
        cpu0 = cpu_seconds(broker.pid)
        time.sleep(idle_seconds)
        idle = (cpu_seconds(broker.pid) - cpu0) / idle_seconds
        broker.kill()
        unclean_s = timed_start(broker)
        rss_after_kill = rss_mib(broker.pid)
    finally:
        broker.stop(timeout=600)
    return {"partitions": per * topics, "create_s": create_s, "start_clean_s": clean_s,
            "start_after_kill9_s": unclean_s, "rss_MiB": rss, "rss_after_kill9_MiB": rss_after_kill,
            "idle_cores": idle}


def _api_versions_frame() -> bytes:
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import ApiVersionsRequest

    body = encode_request_header(ApiKey.API_VERSIONS, 3, 1, "idle") + codec.encode(
        ApiVersionsRequest(client_software_name="idle", client_software_version="1"), 3)
    return struct.pack(">i", len(body)) + body


def ack_latencies(bootstrap: str, records: int) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    lat: list[float] = []
    producer.produce("scale-latency", b"w", partition=0)
    producer.flush(30)
    for _ in range(records):
        t0 = time.perf_counter()
        producer.produce("scale-latency", b"x" * 100, partition=0)
        producer.flush(30)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return statistics.median(lat), lat[int(0.99 * (len(lat) - 1))]


def case_connections(root: str, connections: int, records: int) -> dict[str, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < connections + 100:
        raise SystemExit(f"ulimit -Hn is {hard}: too low for {connections} connections")
    broker = KbrokerProcess(root, log_level="WARNING",
                            overrides={"max.connections": str(connections + 1000),
                                       "max.connections.per.ip": str(connections + 1000)})
    broker.start()
    socks: list[socket.socket] = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # referenced until the answer is in
        admin.create_topics([NewTopic("scale-latency", 1, 1)])["scale-latency"].result(30)
        time.sleep(0.5)
        base_p50, base_p99 = ack_latencies(broker.bootstrap, records)
        rss0 = rss_mib(broker.pid)
        frame = _api_versions_frame()
        t0 = time.monotonic()
        for _ in range(connections):
            s = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
            s.sendall(frame)
            socks.append(s)
        for s in socks:  # every one answered: the broker holds them all
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
        open_s = time.monotonic() - t0
        time.sleep(2.0)
        rss1 = rss_mib(broker.pid)
        cpu0 = cpu_seconds(broker.pid)
        time.sleep(5.0)
        idle = (cpu_seconds(broker.pid) - cpu0) / 5.0
        p50, p99 = ack_latencies(broker.bootstrap, records)
    finally:
        for s in socks:
            s.close()
        broker.stop(timeout=120)
    return {"connections": len(socks), "open_s": open_s, "rss_before_MiB": rss0, "rss_MiB": rss1,
            "idle_cores": idle, "ack_p50_ms_alone": base_p50, "ack_p99_ms_alone": base_p99,
            "ack_p50_ms_with_idle": p50, "ack_p99_ms_with_idle": p99}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["partitions", "connections", "both"], default="both")
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=1000, help="records of the ack-latency probe")
    args = ap.parse_args()
    if args.case in ("partitions", "both"):
        with tempfile.TemporaryDirectory(prefix="kbroker-scale-") as root:
            got = case_partitions(root, args.partitions, args.topics, args.idle_seconds)
            print("partitions:", {k: round(v, 3) for k, v in got.items()}, flush=True)
    if args.case in ("connections", "both"):
        with tempfile.TemporaryDirectory(prefix="kbroker-scale-") as root:
            got = case_connections(root, args.connections, args.records)
            print("connections:", {k: round(v, 3) for k, v in got.items()}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
