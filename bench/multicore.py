#!/usr/bin/env python3
"""Produce and consume throughput of one kbroker node on 1 core and on N cores (issue 13, item 3).

``kbroker`` (one process) against ``kbroker --processes N`` (N broker processes and a controller,
kbroker.cli.node_processes), alternating, ``--rounds`` times each. Every run: a fresh data directory, a topic of
``--partitions`` partitions (default 8, spread over the broker processes), ``--records`` records of ``--size``
bytes (default 1,000,000 x 1 KiB) produced by ``--producers`` confluent-kafka producer processes (acks=1,
linger.ms=5, batch.size 1 MiB), then read back by one consumer assigned every partition. Reported: MB/s of
payload, the node's CPU seconds per GB and the cores it used (utime + stime of every process of the node, from
/proc), medians over the rounds. The clients run on the same machine and take their share of its cores.

Usage: ``python bench/multicore.py [--processes 2] [--rounds 3] [--records N] [--json out.json]``. Not a test:
nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.run import machine  # noqa: E402
from kbroker.testing.plugin import free_port_run  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"


def tree(pid: int) -> list[int]:
    """``pid`` and its children (the node's processes)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid] + [int(k) for k in kids]


def node_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


class Node:
    """``kbroker [--processes N]`` on free ports with a fresh data directory."""

    def __init__(self, processes: int, root: str) -> None:
        self.processes = processes
        self.port = free_port_run(processes + 1)
        self.bootstrap = f"{HOST}:{self.port}"
        cmd = [sys.executable, "-m", "kbroker.cli.main", "--log-level", "WARNING",
               "--override", f"listeners=PLAINTEXT://{self.bootstrap}",
               "--override", f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
               "--override", f"log.dirs={root}/data"]
        if processes > 1:
            cmd += ["--processes", str(processes)]
        self.log = open(f"{root}/node.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=root, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=2).brokers) == processes:
                    break
            except Exception:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError(f"the node of {processes} processes did not start")
        self.pids = tree(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def _produce(bootstrap: str, topic: str, count: int, size: int, out: multiprocessing.Queue) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    payload = os.urandom(size // 2).hex().encode()[:size]
    errors = []
    produce = producer.produce
    for _ in range(count):
        while True:
            try:
                produce(topic, payload, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(300)
    out.put(len(errors))



# ---- the raw client (``--client raw``): pre-encoded requests over plain sockets, so the broker is the limit ----

def _recv_frame(sock: socket.socket) -> bytearray:
    head = _recv_exact(sock, 4)
    return _recv_exact(sock, struct.unpack(">i", head)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the broker closed the connection")
        got += k
    return buf


def _raw_produce(address: tuple[str, int], topic: str, partition: int, count: int, size: int,
                 out: multiprocessing.Queue, ready: multiprocessing.Queue, go: Any) -> None:
    """``count`` records of ``size`` bytes to one partition in Produce v9 requests (acks=1) of one ~1 MiB batch
    each (900 KiB), 4 requests in flight on one connection; every response is decoded and its error code checked."""
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import ProduceRequest, ProduceResponse
    from kbroker.protocol.records import build_batch

    per_batch = max(1, (900 << 10) // size)  # under message.max.bytes (1 MiB) with the record overheads
    payload = os.urandom(size // 2).hex().encode()[:size]
    batch = build_batch([(None, payload)] * per_batch)
    body = codec.encode(ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])]), 9)
    requests = -(-count // per_batch)
    errors = sent = answered = 0
    with socket.create_connection(address) as sock:
        ready.put(None)
        go.wait()
        while answered < requests:
            while sent < requests and sent - answered < 4:
                header = encode_request_header(ApiKey.PRODUCE, 9, sent, "multicore-raw")
                sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
                sent += 1
            frame = _recv_frame(sock)
            resp, _ = codec.decode(ProduceResponse, frame, 9, 5)  # after correlation id + empty tagged fields
            errors += sum(p.error_code != 0 for t in resp.responses for p in t.partition_responses)
            answered += 1
    out.put((errors, requests * per_batch))


def _raw_consume(address: tuple[str, int], topic: str, partition: int, records: int,
                 out: multiprocessing.Queue, ready: multiprocessing.Queue, go: Any) -> None:
    """Fetch v12 (8 MiB per request) of one partition from offset 0 until ``records`` records are read; each
    response is decoded and the next offset taken from its last batch."""
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import FetchRequest, FetchResponse
    from kbroker.protocol.records import iter_batches

    offset = got = n = 0
    with socket.create_connection(address) as sock:
        ready.put(None)
        go.wait()
        while got < records:
            req = FetchRequest(max_wait_ms=100, min_bytes=1, max_bytes=64 << 20, isolation_level=0,
                               topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                   log_start_offset=-1, partition_max_bytes=8 << 20, last_fetched_epoch=-1)])])
            body = encode_request_header(ApiKey.FETCH, 12, n, "multicore-raw") + codec.encode(req, 12)
            sock.sendall(struct.pack(">i", len(body)) + body)
            n += 1
            resp, _ = codec.decode(FetchResponse, _recv_frame(sock), 12, 5)
            part = resp.responses[0].partitions[0]
            if part.error_code:
                raise RuntimeError(f"fetch error {part.error_code}")
            for batch in iter_batches(bytes(part.records or b"")):
                got += batch.last_offset_delta + 1
                offset = batch.base_offset + batch.last_offset_delta + 1
    out.put(got)


def run_raw(node: Node, topic: str, args: argparse.Namespace) -> tuple[int, float, float, float, float]:
    """One raw producer process per partition, then one raw consumer process per partition: (records, produce
    seconds, produce node CPU, consume seconds, consume node CPU)."""
    meta = AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(topic, timeout=10)
    address = {b.id: (b.host, b.port) for b in meta.brokers.values()}
    leaders = {p: address[m.leader] for p, m in meta.topics[topic].partitions.items()}
    per = args.records // args.partitions
    q: multiprocessing.Queue = multiprocessing.Queue()

    def timed(target: Any, extra: tuple[Any, ...]) -> tuple[list[Any], float, float]:
        """Start a process per partition, wait until each is connected, then time them from one signal."""
        ready: multiprocessing.Queue = multiprocessing.Queue()
        go = multiprocessing.Event()
        workers = [multiprocessing.Process(target=target, args=(leaders[p], topic, p, *extra, q, ready, go))
                   for p in leaders]
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=120)
        cpu0, t0 = node_cpu(node.pids), time.perf_counter()
        go.set()
        results = [q.get(timeout=600) for _ in workers]
        elapsed, cpu = time.perf_counter() - t0, node_cpu(node.pids) - cpu0
        for w in workers:
            w.join(60)
        return results, elapsed, cpu

    results, p_elapsed, p_cpu = timed(_raw_produce, (per, args.size))
    if sum(e for e, _ in results):
        raise RuntimeError(f"{sum(e for e, _ in results)} produce errors")
    total = sum(n for _, n in results)
    counts, c_elapsed, c_cpu = timed(_raw_consume, (total // len(leaders),))
    got = sum(counts)
    if got != total:
        raise RuntimeError(f"consumed {got} of {total}")
    return total, p_elapsed, p_cpu, c_elapsed, c_cpu


def run_once(processes: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="kb-multicore-") as root:
        node = Node(processes, root)
        try:
            topic = "multicore"
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            time.sleep(1.0)
            leaders = {p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
            if args.client == "raw":
                total, p_elapsed, p_cpu, c_elapsed, c_cpu = run_raw(node, topic, args)
                return _result(processes, leaders, total, args.size, p_elapsed, p_cpu, c_elapsed, c_cpu)
            per = args.records // args.producers
            total = per * args.producers
            q: multiprocessing.Queue = multiprocessing.Queue()
            workers = [multiprocessing.Process(target=_produce, args=(node.bootstrap, topic, per, args.size, q))
                       for _ in range(args.producers)]
            cpu0, t0 = node_cpu(node.pids), time.perf_counter()
            for w in workers:
                w.start()
            errors = sum(q.get(timeout=600) for _ in workers)
            for w in workers:
                w.join(60)
            p_elapsed, p_cpu = time.perf_counter() - t0, node_cpu(node.pids) - cpu0
            if errors:
                raise RuntimeError(f"{errors} delivery errors")

            consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                                 "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                                 "queued.max.messages.kbytes": 1048576, "fetch.wait.max.ms": 100})
            consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
            got = 0
            cpu0, t0 = node_cpu(node.pids), time.perf_counter()
            deadline = time.monotonic() + 600
            while got < total and time.monotonic() < deadline:
                for m in consumer.consume(10000, 1.0):
                    if m.error() is None:
                        got += 1
            c_elapsed, c_cpu = time.perf_counter() - t0, node_cpu(node.pids) - cpu0
            consumer.close()
            if got != total:
                raise RuntimeError(f"consumed {got} of {total}")
        finally:
            node.stop()
    return _result(processes, leaders, total, args.size, p_elapsed, p_cpu, c_elapsed, c_cpu)


def _result(processes: int, leaders: set[int], total: int, size: int, p_elapsed: float, p_cpu: float,
            c_elapsed: float, c_cpu: float) -> dict:
    gb = total * size / 1e9
    return {"processes": processes, "leaders": sorted(leaders),
            "produce_MB/s": total * size / p_elapsed / 1e6, "produce_cpu_s_per_GB": p_cpu / gb,
            "produce_cores": p_cpu / p_elapsed,
            "consume_MB/s": total * size / c_elapsed / 1e6, "consume_cpu_s_per_GB": c_cpu / gb,
            "consume_cores": c_cpu / c_elapsed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2, help="broker processes of the multi-core node (default 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    ap.add_argument("--client", choices=["confluent", "raw"], default="confluent",
                    help="raw: pre-encoded Produce/Fetch requests over plain sockets, a process per partition, so "
                         "that the broker rather than the Python client is the limit")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    runs: dict[int, list[dict]] = {1: [], args.processes: []}
    for r in range(args.rounds):
        for processes in (1, args.processes):
            res = run_once(processes, args)
            runs[processes].append(res)
            print(f"round {r + 1} processes {processes}: " + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()), flush=True)
    summary = {}
    for processes, results in runs.items():
        summary[processes] = {k: statistics.median(x[k] for x in results) for k in results[0]
                              if isinstance(results[0][k], float)}
        print(f"median, {processes} process(es): " + ", ".join(f"{k} {v:.2f}" for k, v in summary[processes].items()))
    one, many = summary[1], summary[args.processes]
    print(f"{args.processes} processes / 1: produce x{many['produce_MB/s'] / one['produce_MB/s']:.2f}, "
          f"consume x{many['consume_MB/s'] / one['consume_MB/s']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "args": vars(args), "runs": runs,
                                               "median": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
