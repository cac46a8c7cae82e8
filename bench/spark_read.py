#!/usr/bin/env python3
"""Spark's batch read from kbroker next to the same read through confluent-kafka.

Starts a kbroker subprocess, produces N records of S bytes into a fresh single-partition topic with
confluent-kafka (``bench/run.py``'s producer: acks=1, no compression), reads them back once with
confluent-kafka (``bench/run.py``'s consumer: assign from offset 0) and then with Spark's Kafka connector:
``spark.read.format("kafka")`` over earliest..latest, forced to read every record by
``count(*), sum(length(value))``; once with one Spark task (one per Kafka partition, the default) and
once with ``minPartitions=2`` (the offset range split over both local cores). Each Spark read is timed
around the action only (the SparkSession is started before; the first, untimed read warms up the JVM).

Needs pyspark and the connector jars (``KBROKER_SPARK_JARS`` or ``--jars``, see docs/spark.md).
Usage: ``.venv/bin/python bench/spark_read.py [--count 1000000] [--size 1024] [--jars a.jar,b.jar]``.
Not a test: nothing here asserts on speed.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples" / "clickstream"))
import run as bench  # noqa: E402  (bench/run.py)
import session as spark_session  # noqa: E402  (examples/clickstream/session.py)

from kbroker.testing import KbrokerProcess  # noqa: E402


def spark_read(spark, bootstrap: str, topic: str, count: int, size: int, min_partitions: int | None) -> dict:
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    df = reader.load()
    t0 = time.perf_counter()
    n, total = df.selectExpr("count(*)", "sum(length(value))").collect()[0]
    elapsed = time.perf_counter() - t0
    if n != count or total != count * size:
        raise RuntimeError(f"Spark read {n} records / {total} bytes, expected {count} / {count * size}")
    return {"records": n, "seconds": elapsed, "MB/s": total / elapsed / 1e6, "records/s": n / elapsed,
            "tasks": df.rdd.getNumPartitions()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--jars", default=None, help="comma-separated connector jars (added to $KBROKER_SPARK_JARS)")
    ap.add_argument("--data-dir", default=None, help="parent directory for the broker's data")
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args()
    jars = spark_session.local_jars(args.jars)
    results: dict = {"machine": bench.machine(), "count": args.count, "size": args.size}
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-spark-", dir=args.data_dir) as data_dir:
        broker = KbrokerProcess(data_dir).start()
        try:
            bootstrap, pid, topic = broker.bootstrap, broker.pid, "bench-spark"
            bench.create_topic(bootstrap, topic)
            results["produce"] = bench.bench_produce(bootstrap, pid, topic, args.count, args.size, "1", "none")
            results["confluent_kafka"] = bench.bench_consume(bootstrap, pid, topic, args.count, args.size)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            spark = spark_session.build_session("kbroker-bench-spark", jars=jars, packages=None if not jars else "",
                                                master="local[2]", extra={"spark.driver.memory": "2g"})
            spark.sparkContext.setLogLevel("ERROR")
            try:
                spark_read(spark, bootstrap, topic, args.count, args.size, None)  # warm-up
                results["spark_1_task"] = spark_read(spark, bootstrap, topic, args.count, args.size, None)
                results["spark_min_partitions_2"] = spark_read(spark, bootstrap, topic, args.count, args.size, 2)
            finally:
                spark.stop()
        finally:
            broker.stop()
    for name in ("produce", "confluent_kafka", "spark_1_task", "spark_min_partitions_2"):
        r = results[name]
        print(f"{name:<24} {r['records']:>9} records {r['seconds']:7.2f} s {r['records/s']:10.0f} rec/s "
              f"{r['MB/s']:7.1f} MB/s", flush=True)
    print(json.dumps(results["machine"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
