#!/usr/bin/env python3
"""Controller failover time of a 3-node kbroker cluster (issue 9's benchmark).

Starts ``KbrokerCluster`` (three combined nodes on 127.0.0.1, Kafka's default Raft timeouts), then repeats:
kill -9 the active controller, time until a CreateTopics through the surviving nodes succeeds (confluent-kafka
AdminClient, a new topic each time), restart the killed node and wait until it serves the new topic. Reports
p50 / p99 / max of the failover times. Usage: ``python bench/cluster_failover.py [--kills 20]``. Not a test:
nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing.cluster import KbrokerCluster  # noqa: E402


def create_until_ok(bootstrap: str, name: str, deadline: float) -> None:
    """One AdminClient, attempts of 0.5 s: the survivors name themselves as the controller in Metadata and
    forward CreateTopics to the active controller once there is one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=0.5)[name].result(5)
            return
        except KafkaException as exc:  # no controller yet: try again
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # an earlier attempt was committed after the client gave up on it
            print(f"  {time.monotonic() - deadline + 60:.1f}", exc.args[0], flush=True) if "-v" in sys.argv else None
            time.sleep(0.05)
    raise TimeoutError(f"CreateTopics {name} did not succeed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("-v", action="store_true", help="print each failed attempt")
    args = ap.parse_args()
    times = []
    with tempfile.TemporaryDirectory(prefix="kbroker-failover-") as root, KbrokerCluster(root) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        while len(admin.list_topics(timeout=10).brokers) < 3:
            time.sleep(0.2)
        for k in range(args.kills):
            victim = cluster.controller_id(timeout=60)
            survivors = ",".join(n.bootstrap for i, n in cluster.nodes.items() if i != victim)
            t0 = time.monotonic()
            cluster.kill(victim)
            create_until_ok(survivors, f"failover-{k}", t0 + 60)
            took = time.monotonic() - t0
            times.append(took)
            print(f"kill {k + 1}: node {victim}, CreateTopics succeeded after {took:.2f} s", flush=True)
            cluster.nodes[victim].start()
            node = cluster.nodes[victim]
            deadline = time.monotonic() + 60
            while f"failover-{k}" not in AdminClient({"bootstrap.servers": node.bootstrap}).list_topics(
                    timeout=10).topics:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {victim} did not catch up")
                time.sleep(0.1)
    times.sort()
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    print(f"{len(times)} kills: p50 {statistics.median(times):.2f} s, p99 {p99:.2f} s, max {times[-1]:.2f} s, "
          f"min {times[0]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
