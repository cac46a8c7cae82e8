#!/usr/bin/env python3
"""Metadata commit throughput and time to fence a dead broker, on a kbroker cluster (issue 9's benchmarks).

``--what commit``: a cluster of 3 controllers and 3 brokers (``KbrokerCluster(nodes=3, brokers=3)``; the
metadata log of every voter is fsynced before it counts for the commit) receives CreateTopics requests through
confluent-kafka's AdminClient, ``--topics-per-request`` topics of ``--partitions`` partitions each (replication
factor 1), ``--requests`` of them in flight at a time, until ``--total`` partitions exist; reported: partitions
whose creation was committed and answered per second (each also makes a partition log on a broker).

``--what fence``: a cluster of 3 combined nodes with Kafka's default ``broker.session.timeout.ms`` (9 s) and
``broker.heartbeat.interval.ms`` (2 s); ``--kills`` times: kill -9 a node that is not the active controller,
time until another node's Metadata no longer lists it, restart it and wait until it is back.

Usage: ``python bench/cluster_metadata.py --what commit`` or ``--what fence``. Not a test: nothing asserts on
speed. Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing.cluster import KbrokerCluster, metadata_brokers  # noqa: E402


def commit_throughput(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kbroker-meta-") as root, \
            KbrokerCluster(root, nodes=3, brokers=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        per_request = args.topics_per_request * args.partitions
        made = 0
        batch = 0
        t0 = time.monotonic()
        while made < args.total:
            futures = []
            for _ in range(args.requests):
                topics = [NewTopic(f"m{batch}-{i}", args.partitions, 1) for i in range(args.topics_per_request)]
                batch += 1
                futures.extend(admin.create_topics(topics, request_timeout=60).values())
            for f in futures:
                f.result(120)
            made += per_request * args.requests
        took = time.monotonic() - t0
        print(f"{made} partitions ({args.topics_per_request} topics x {args.partitions} partitions per request, "
              f"{args.requests} requests in flight) in {took:.2f} s: {made / took:,.0f} partitions/s")


def fence_time(args: argparse.Namespace) -> None:
    times = []
    with tempfile.TemporaryDirectory(prefix="kbroker-fence-") as root, KbrokerCluster(root, nodes=3) as cluster:
        for k in range(args.kills):
            leader = cluster.controller_id(timeout=60)
            candidates = [i for i in cluster.broker_ids if i != leader]
            victim = candidates[k % len(candidates)]
            witness = next(i for i in cluster.broker_ids if i != victim)
            t0 = time.monotonic()
            cluster.kill(victim)
            while victim in metadata_brokers(cluster.host, cluster.nodes[witness].port):
                if time.monotonic() - t0 > 60:
                    raise TimeoutError(f"broker {victim} was not fenced")
                time.sleep(0.05)
            took = time.monotonic() - t0
            times.append(took)
            print(f"kill {k + 1}: broker {victim} fenced after {took:.2f} s", flush=True)
            cluster.nodes[victim].start()
            cluster.wait_registered()
    times.sort()
    print(f"{len(times)} kills: min {times[0]:.2f} s, median {statistics.median(times):.2f} s, "
          f"max {times[-1]:.2f} s (broker.session.timeout.ms 9000, broker.heartbeat.interval.ms 2000)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=["commit", "fence"], required=True)
    ap.add_argument("--total", type=int, default=5000, help="partitions to create (commit)")
    ap.add_argument("--topics-per-request", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=10, help="partitions per topic (commit)")
    ap.add_argument("--requests", type=int, default=5, help="CreateTopics requests in flight (commit)")
    ap.add_argument("--kills", type=int, default=6, help="brokers to kill (fence)")
    args = ap.parse_args()
    commit_throughput(args) if args.what == "commit" else fence_time(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
