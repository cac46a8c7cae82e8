#!/usr/bin/env python3
"""How long a topic created through one node of a 3-node cluster stays missing from the nodes' Metadata (issue 33).

Starts ``KbrokerCluster`` (three combined broker+controller nodes on 127.0.0.1, Kafka's defaults:
``metadata.max.idle.interval.ms=500``; with ``--brokers N`` three controllers and N brokers, which follow the
metadata log as observers), or the same cluster of Apache Kafka nodes with ``--target kafka``. Then
``--topics`` times: create a topic of one partition (replication factor 1) through one node with confluent-kafka's
AdminClient bootstrapped with that node only (the entry node goes round the three nodes, so it is the active
controller a third of the time and forwards the request otherwise); from the moment the CreateTopics answer
arrives (the topic is committed), ask every node directly for the topic (Metadata v4,
``allow_auto_topic_creation=false``, one kept connection per node, the nodes still missing it asked in turn) until
each lists it: that node's create-to-visible time (0 when it already listed the topic at the first ask).

Reported: p50 / p99 / max per node (marking the active controller), and over all nodes; and the same for the
nodes other than the entry node. Usage: ``python bench/metadata_visibility.py [--topics 40] [--target
{kbroker,kafka,both}] [--brokers N]``. Not a test: nothing here asserts on speed
(compat_tests/test_cluster_metadata_visibility.py checks lax bounds). Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.protocol import codec  # noqa: E402
from kbroker.protocol.api_keys import ApiKey  # noqa: E402
from kbroker.protocol.headers import encode_request_header  # noqa: E402
from kbroker.protocol.messages import MetadataRequest, MetadataResponse  # noqa: E402
from kbroker.testing.cluster import KbrokerCluster  # noqa: E402

METADATA_VERSION = 4  # the first with allow_auto_topic_creation; a non-flexible response header


class MetadataProbe:
    """One kept connection to a node: does its Metadata list a topic (no auto-creation)?"""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def lists(self, topic: str) -> bool:
        self.corr += 1
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
        body = (encode_request_header(ApiKey.METADATA, METADATA_VERSION, self.corr, "bench-visibility")
                + codec.encode(req, METADATA_VERSION))
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        frame = self._recv(struct.unpack(">i", self._recv(4))[0])
        resp, _ = codec.decode(MetadataResponse, frame, METADATA_VERSION, 4)
        return any(t.name == topic and t.error_code == 0 and t.partitions
                   and all(p.leader_id >= 0 for p in t.partitions) for t in resp.topics)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise OSError("connection closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def summary(values: list[float]) -> str:
    return (f"p50 {pct(values, 0.5) * 1000:7.1f} ms  p99 {pct(values, 0.99) * 1000:7.1f} ms  "
            f"max {max(values) * 1000:7.1f} ms  (n={len(values)})")


def run(target: str, topics: int, brokers: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kbroker-visibility-") as root, \
            KbrokerCluster(root, nodes=3, brokers=brokers, target=target) as cluster:
        ids = list(cluster.broker_ids)
        controller = cluster.controller_id(timeout=60)
        admins = {i: AdminClient({"bootstrap.servers": cluster.nodes[i].bootstrap}) for i in ids}
        probes = {i: MetadataProbe(cluster.host, cluster.nodes[i].port) for i in ids}
        for i in ids:  # warm up: every AdminClient knows its controller, every probe its connection
            name = f"warmup-{i}"
            admins[i].create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(60)
            deadline = time.monotonic() + 30
            while not all(p.lists(name) for p in probes.values()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} never listed by every node")
                time.sleep(0.01)
        per_node: dict[int, list[float]] = {i: [] for i in ids}
        others: list[float] = []
        for k in range(topics):
            entry = ids[k % len(ids)]
            name = f"visible-{k}"
            admins[entry].create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(60)
            t0 = time.monotonic()
            missing = set(ids)
            while missing:
                for i in sorted(missing):
                    if probes[i].lists(name):
                        took = time.monotonic() - t0
                        missing.discard(i)
                        per_node[i].append(took)
                        if i != entry:
                            others.append(took)
                if time.monotonic() - t0 > 30:
                    raise TimeoutError(f"{name} not listed by nodes {sorted(missing)} after 30 s")
        for p in probes.values():
            p.close()
        del admins  # before the nodes stop: no reconnection noise from the clients
        roles = f"3 controllers and {brokers} brokers" if brokers else "3 combined nodes"
        print(f"{target}, {roles}: {topics} topics, created through each of the nodes {ids} in turn", flush=True)
        for i in ids:
            print(f"  node {i}{' (active controller)' if i == controller else ''}: {summary(per_node[i])}")
        print(f"  every node:            {summary([v for vs in per_node.values() for v in vs])}")
        print(f"  nodes but the entry:   {summary(others)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=40)
    ap.add_argument("--target", choices=["kbroker", "kafka", "both"], default="kbroker")
    ap.add_argument("--brokers", type=int, default=0,
                    help="separate roles: 3 controllers and this many brokers (observers of the quorum), asked and "
                         "created through in turn; 0 (default): 3 combined nodes")
    args = ap.parse_args()
    for target in (["kbroker", "kafka"] if args.target == "both" else [args.target]):
        run(target, args.topics, args.brokers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
