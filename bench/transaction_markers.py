#!/usr/bin/env python3
"""Transaction completion on a 3-node cluster: how long a commit over 30 partitions stays in PrepareCommit.

Starts ``KbrokerCluster`` (three combined nodes on 127.0.0.1; ``--target kafka`` for Apache Kafka), creates a
topic of 30 partitions with replication factor 3 (leaders spread over the 3 brokers), then runs ``--rounds``
transactions per producer with the raw transactions-version-2 producer of
``compat_tests/test_transaction_markers.py`` (Produce v12 with one record per partition, EndTxn v5), with 1 and
with ``--producers`` concurrent producers (threads). Two phases each:

* complete: the time from the EndTxn answer to DescribeTransactions showing CompleteCommit (polled every 5 ms);
* next: the time from the EndTxn answer until every partition of the producer's next transaction is accepted
  (its Produce requests are answered CONCURRENT_TRANSACTIONS while the commit completes, and sent again
  after 20 ms); the complete phase also reports the produce alone (started after CompleteCommit), which
  this includes.

Reports p50 / p99 / max of each. Usage: ``python bench/transaction_markers.py [--rounds 40] [--producers 8]``.
Not a test: nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import machine  # noqa: E402

from compat_tests.test_transaction_markers import PARTITIONS, ClusterTxn, create_spread_topic  # noqa: E402
from kbroker.protocol.errors import ErrorCode as E  # noqa: E402
from kbroker.testing.cluster import KbrokerCluster  # noqa: E402


def one_producer(bootstrap: str, topic: str, rounds: int, phase: str, out: list[float],
                 produce: list[float]) -> None:
    t = ClusterTxn(bootstrap, topic, PARTITIONS, timeout=60)
    try:
        t.produce_all(b"warm-up")
        for i in range(rounds):
            assert t.end(commit=True)[0] == E.NONE
            t0 = time.monotonic()
            if phase == "complete":
                t.wait_state("CompleteCommit", timeout=60)
                t1 = time.monotonic()
                out.append(t1 - t0)
                t.produce_all(f"r{i}".encode())  # nothing pending: the time of the produce alone
                produce.append(time.monotonic() - t1)
            else:
                t.produce_all(f"r{i}".encode())
                out.append(time.monotonic() - t0)
        assert t.end(commit=True)[0] == E.NONE
    finally:
        t.close()


def run(bootstrap: str, topic: str, producers: int, rounds: int, phase: str) -> dict:
    out: list[float] = []
    produce: list[float] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            one_producer(bootstrap, topic, rounds, phase, out, produce)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=body) for _ in range(producers)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join(600)
    if errors:
        raise errors[0]
    out.sort()
    p99 = out[min(len(out) - 1, int(round(0.99 * (len(out) - 1))))]
    r = {"producers": producers, "phase": phase, "samples": len(out), "p50_ms": statistics.median(out) * 1000,
         "p99_ms": p99 * 1000, "max_ms": out[-1] * 1000, "seconds": time.monotonic() - t0}
    if produce:
        r["produce_alone_p50_ms"] = statistics.median(produce) * 1000
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40, help="transactions per producer and phase")
    ap.add_argument("--producers", type=int, default=8, help="concurrent producers of the second run")
    ap.add_argument("--target", default=None, help="kbroker (default) or kafka")
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="kbroker-markers-") as root, \
            KbrokerCluster(root, target=args.target) as cluster:
        topic = create_spread_topic(cluster.bootstrap)
        for producers in (1, args.producers):
            for phase in ("complete", "next"):
                r = run(cluster.bootstrap, topic, producers, args.rounds, phase)
                results.append(r)
                print(f"{producers} producer(s), EndTxn answer -> "
                      f"{'CompleteCommit' if phase == 'complete' else 'next transaction accepted'}: "
                      f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
                      f"({r['samples']} commits)"
                      + (f"; the next transaction's produce alone p50 {r['produce_alone_p50_ms']:.1f} ms"
                         if "produce_alone_p50_ms" in r else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
