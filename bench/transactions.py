#!/usr/bin/env python3
"""kbroker idempotence/transactions benchmark with confluent-kafka (librdkafka) against a kbroker subprocess.

* idempotence overhead: N records of 1 KiB (incompressible, no compression, ``acks=all``, ``linger.ms=5``,
  ``batch.size=1 MiB``) to a fresh single-partition topic, timed from the first ``produce()`` to the end of
  ``flush()``, with ``enable.idempotence`` true and false. Runs alternate (ABBA order, after one untimed
  warm-up of each); reported: the median MB/s of each and the overhead
  ``1 - median(idempotent) / median(plain)`` (issue 4's target: at most 5 %). Each run's topic is deleted
  after it: with the data dir on disk, a few GB of dirty pages made later runs several times slower.
* transactions: a transactional producer (same settings) runs ``begin_transaction()``, 100 ``produce()``,
  ``commit_transaction()`` in a loop for ``--txn-seconds``; reported: transactions/s, records/s and the
  median / p99 time of one transaction (begin to the end of commit).

(``bench/run.py``'s ``bench_produce`` turns idempotence on whenever ``acks=all``, so the produce loop here
is its own.) Run: ``.venv/bin/python bench/transactions.py [--quick] [--json out.json]``. Not a test: nothing
asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import cpu_seconds, create_topic, machine  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402

BASE = {"acks": "all", "compression.type": "none", "linger.ms": 5, "batch.size": 1 << 20,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000}


def produce_run(bootstrap: str, pid: int, topic: str, count: int, size: int, idempotent: bool) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, **BASE, "enable.idempotence": idempotent})
    payload = os.urandom(size)
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    # connect (and, if idempotent, get a producer id) before timing
    producer.produce(topic, payload, on_delivery=on_delivery)
    producer.flush(30)
    produce = producer.produce
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        while True:
            try:
                produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
    left = producer.flush(120)
    elapsed, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    if errors or left:
        raise RuntimeError(f"{len(errors)} delivery errors, {left} undelivered; first: {errors[:1]}")
    return {"idempotent": idempotent, "records": count, "seconds": elapsed, "MB/s": count * size / elapsed / 1e6,
            "records/s": count / elapsed, "broker_cpu_s_per_GB": cpu / (count * size / 1e9)}


def delete_topic(bootstrap: str, name: str) -> None:
    """Delete a topic, so its data (and dirty page cache) does not slow the later runs down."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the result is in
    admin.delete_topics([name])[name].result(30)


def bench_transactions(bootstrap: str, topic: str, seconds: float, per_txn: int, size: int) -> dict:
    producer = Producer({"bootstrap.servers": bootstrap, **BASE, "transactional.id": "bench-txn"})
    payload = os.urandom(size)
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    producer.init_transactions(30)
    durations = []
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        s = time.perf_counter()
        producer.begin_transaction()
        for _ in range(per_txn):
            producer.produce(topic, payload, on_delivery=on_delivery)
        producer.commit_transaction(30)
        durations.append((time.perf_counter() - s) * 1000)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    n = len(durations)
    q = statistics.quantiles(durations, n=100) if n >= 2 else durations * 99
    return {"transactions": n, "records_per_txn": per_txn, "record_size": size, "seconds": elapsed,
            "txn/s": n / elapsed, "records/s": n * per_txn / elapsed, "txn_p50_ms": statistics.median(durations),
            "txn_p99_ms": q[98], "txn_max_ms": max(durations)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small runs (a smoke check of the benchmark itself)")
    ap.add_argument("--records", type=int, default=300_000, help="records per produce run (default 300000)")
    ap.add_argument("--pairs", type=int, default=4, help="timed runs of each mode (default 4)")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes (default 1024)")
    ap.add_argument("--txn-seconds", type=float, default=10.0)
    ap.add_argument("--txn-records", type=int, default=100, help="records per transaction (default 100)")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--overrides", action="append", default=[], help="broker property key=value")
    ap.add_argument("--data-dir", default=None, help="parent directory for the broker's data (e.g. /dev/shm)")
    ap.add_argument("--max-seconds", type=int, default=170, help="give up (and stop the broker) after this long")
    args = ap.parse_args()
    records = 10_000 if args.quick else args.records
    pairs = 1 if args.quick else args.pairs
    txn_seconds = 2.0 if args.quick else args.txn_seconds

    def on_alarm(*_):
        raise TimeoutError(f"benchmark exceeded --max-seconds={args.max_seconds}")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(args.max_seconds)

    overrides = dict(x.split("=", 1) for x in args.overrides)
    results: dict = {"machine": machine(), "settings": {**BASE, "record_size": args.size, "records": records},
                     "runs": []}
    try:
        with tempfile.TemporaryDirectory(prefix="kbroker-bench-txn-", dir=args.data_dir) as data_dir:
            broker = KbrokerProcess(data_dir, overrides=overrides).start()
            try:
                pid = broker.pid
                assert pid is not None
                n = 0

                def run(idem: bool, count: int) -> dict:
                    nonlocal n
                    n += 1
                    topic = f"bench-idem-{n}"
                    create_topic(broker.bootstrap, topic)
                    r = produce_run(broker.bootstrap, pid, topic, count, args.size, idem)
                    delete_topic(broker.bootstrap, topic)
                    time.sleep(0.5)
                    return r

                for idem in (True, False):  # warm-up, not counted
                    run(idem, max(records // 10, 1000))
                order = []
                for i in range(pairs):
                    order += [True, False] if i % 2 == 0 else [False, True]
                for idem in order:
                    r = run(idem, records)
                    results["runs"].append(r)
                    print(f"produce {'idempotent' if idem else 'plain':<10} {r['MB/s']:7.1f} MB/s "
                          f"{r['records/s']:9.0f} rec/s  broker cpu {r['broker_cpu_s_per_GB']:5.2f} s/GB", flush=True)
                idem_mbs = statistics.median(r["MB/s"] for r in results["runs"] if r["idempotent"])
                plain_mbs = statistics.median(r["MB/s"] for r in results["runs"] if not r["idempotent"])
                overhead = (1 - idem_mbs / plain_mbs) * 100
                results["idempotence"] = {"idempotent_median_MB/s": idem_mbs, "plain_median_MB/s": plain_mbs,
                                          "overhead_%": overhead, "target_%": 5}
                print(f"median: idempotent {idem_mbs:.1f} MB/s, plain {plain_mbs:.1f} MB/s, "
                      f"overhead {overhead:+.1f} % (target <= 5 %)", flush=True)

                create_topic(broker.bootstrap, "bench-txn")
                tx = bench_transactions(broker.bootstrap, "bench-txn", txn_seconds, args.txn_records, args.size)
                results["transactions"] = tx
                print(f"transactions ({tx['records_per_txn']} x {tx['record_size']} B): {tx['txn/s']:.1f} txn/s, "
                      f"{tx['records/s']:.0f} rec/s; per transaction p50 {tx['txn_p50_ms']:.1f} ms, "
                      f"p99 {tx['txn_p99_ms']:.1f} ms, max {tx['txn_max_ms']:.1f} ms "
                      f"({tx['transactions']} in {tx['seconds']:.1f} s)", flush=True)
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
