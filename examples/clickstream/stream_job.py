"""Streaming job: page views per page per 1-minute event-time window, from Kafka to Kafka and Parquet.

    python examples/clickstream/stream_job.py --bootstrap localhost:9092 \\
        --checkpoint-dir /tmp/clickstream/checkpoints --parquet-dir /tmp/clickstream/counts \\
        [--jars spark-sql-kafka-0-10_2.13-4.2.0.jar,...] [--trigger availableNow]

Reads ``page-views`` with ``spark.readStream.format("kafka")``, parses the JSON events, applies an
event-time watermark and counts views per page per window; each window is emitted once, when the
watermark has passed it (append mode), to the topic ``page-view-counts`` (key = page, value = JSON, a
``window`` header) and to Parquet. Two streaming queries share the same plan and each keeps its own
checkpoint (``<checkpoint-dir>/kafka``, ``<checkpoint-dir>/parquet``): stopped and restarted with the
same checkpoint directory, the job continues where it left off, neither losing nor repeating a window.
Jars: see session.py (``--jars`` / ``KBROKER_SPARK_JARS``, else ``spark.jars.packages``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Mapping

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import session as spark_session  # noqa: E402
import transforms  # noqa: E402

INPUT_TOPIC = "page-views"
OUTPUT_TOPIC = "page-view-counts"


def parse_trigger(spec: str) -> dict[str, Any]:
    """``availableNow`` | ``once`` | ``processingTime=10 seconds`` | ``continuous=1 second`` -> the keyword
    argument of ``DataStreamWriter.trigger``."""
    if spec in ("availableNow", "available-now"):
        return {"availableNow": True}
    if spec == "once":
        return {"once": True}
    kind, sep, value = spec.partition("=")
    if sep and kind in ("processingTime", "continuous") and value.strip():
        return {kind: value.strip()}
    raise ValueError(f"bad trigger {spec!r}: availableNow, once, processingTime=<interval> or continuous=<interval>")


def kafka_options(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``kafka.``-prefixed client settings for a source or sink (``extra`` keys may omit the prefix)."""
    opts = {"kafka.bootstrap.servers": bootstrap}
    for k, v in (extra or {}).items():
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    return opts


def read_page_views(spark: Any, bootstrap: str, *, topic: str = INPUT_TOPIC, subscribe_pattern: str | None = None,
                    starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
                    min_partitions: int | None = None, fail_on_data_loss: bool = True,
                    extra_kafka: Mapping[str, str] | None = None) -> Any:
    """The streaming Kafka source (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
    ``timestampType``)."""
    reader = spark.readStream.format("kafka").options(**kafka_options(bootstrap, extra_kafka))
    if subscribe_pattern:
        reader = reader.option("subscribePattern", subscribe_pattern)
    else:
        reader = reader.option("subscribe", topic)
    reader = reader.option("startingOffsets", starting_offsets).option("failOnDataLoss", str(fail_on_data_loss).lower())
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    return reader.load()


def start_pipeline(kafka_rows: Any, *, checkpoint_dir: str, trigger: Mapping[str, Any],
                   kafka_sink: Mapping[str, str] | None = None, output_topic: str = OUTPUT_TOPIC,
                   parquet_dir: str | None = None, window: str = transforms.WINDOW_DURATION,
                   watermark: str = transforms.WATERMARK_DELAY, query_prefix: str = "clickstream") -> list[Any]:
    """Start the counting queries on a streaming DataFrame of Kafka-shaped rows and return them.
    ``kafka_sink`` are the sink's ``kafka.*`` options (None: no Kafka output); ``parquet_dir`` None: no
    Parquet output."""
    counts = transforms.count_views(transforms.parse_page_views(kafka_rows), window, watermark)
    queries = []
    if kafka_sink is not None:
        queries.append(transforms.to_kafka_records(counts).writeStream.format("kafka")
                       .options(**kafka_sink).option("topic", output_topic)
                       .option("checkpointLocation", os.path.join(checkpoint_dir, "kafka"))
                       .outputMode("append").trigger(**trigger).queryName(f"{query_prefix}-kafka").start())
    if parquet_dir is not None:
        queries.append(transforms.to_parquet_rows(counts).writeStream.format("parquet")
                       .option("path", parquet_dir)
                       .option("checkpointLocation", os.path.join(checkpoint_dir, "parquet"))
                       .outputMode("append").trigger(**trigger).queryName(f"{query_prefix}-parquet").start())
    if not queries:
        raise ValueError("no output: give kafka_sink and/or parquet_dir")
    return queries


def await_queries(queries: list[Any], timeout_s: float | None = None) -> None:
    """Wait until every query has stopped (availableNow/once) or ``timeout_s`` passed, then stop them.
    A query that failed re-raises its error."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        for q in queries:
            if deadline is None:
                q.awaitTermination()
                continue
            left = deadline - time.monotonic()
            if left <= 0:  # awaitTermination refuses a timeout of 0
                break
            q.awaitTermination(left)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--input-topic", default=INPUT_TOPIC)
    ap.add_argument("--subscribe-pattern", default=None, help="subscribePattern instead of subscribe")
    ap.add_argument("--output-topic", default=OUTPUT_TOPIC)
    ap.add_argument("--parquet-dir", default=None, help="Parquet output directory (default: none)")
    ap.add_argument("--no-kafka-output", action="store_true", help="write only Parquet")
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--starting-offsets", default="earliest", help="earliest, latest or per-partition JSON")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None)
    ap.add_argument("--min-partitions", type=int, default=None)
    ap.add_argument("--fail-on-data-loss", default="true", choices=("true", "false"))
    ap.add_argument("--trigger", default="processingTime=10 seconds",
                    help="availableNow, once, processingTime=<interval> (default: every 10 seconds)")
    ap.add_argument("--window", default=transforms.WINDOW_DURATION)
    ap.add_argument("--watermark", default=transforms.WATERMARK_DELAY)
    ap.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra client setting for source and sink, e.g. isolation.level=read_committed")
    ap.add_argument("--jars", default=None, help=f"comma-separated local jars (added to ${spark_session.JARS_ENV})")
    ap.add_argument("--packages", default=None, help="spark.jars.packages (default: the Kafka connector "
                    "of this Spark version, unless local jars are given; '' for none)")
    ap.add_argument("--master", default=None, help="default: $SPARK_MASTER or local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=None,
                    help="spark.sql.shuffle.partitions = state store partitions of the counts (default: Spark's "
                    "200; fixed by the first run of a checkpoint)")
    args = ap.parse_args(argv)

    extra = dict(kv.split("=", 1) for kv in args.kafka_option)
    spark = spark_session.build_session("clickstream-stream", jars=spark_session.local_jars(args.jars),
                                        packages=args.packages, master=args.master,
                                        shuffle_partitions=args.shuffle_partitions)
    rows = read_page_views(spark, args.bootstrap, topic=args.input_topic, subscribe_pattern=args.subscribe_pattern,
                           starting_offsets=args.starting_offsets,
                           max_offsets_per_trigger=args.max_offsets_per_trigger, min_partitions=args.min_partitions,
                           fail_on_data_loss=args.fail_on_data_loss == "true", extra_kafka=extra)
    queries = start_pipeline(rows, checkpoint_dir=args.checkpoint_dir, trigger=parse_trigger(args.trigger),
                             kafka_sink=None if args.no_kafka_output else kafka_options(args.bootstrap, extra),
                             output_topic=args.output_topic, parquet_dir=args.parquet_dir, window=args.window,
                             watermark=args.watermark)
    try:
        await_queries(queries, args.timeout)
    except KeyboardInterrupt:
        for q in queries:
            q.stop()
    for q in queries:
        p = q.lastProgress
        if p:
            print(f"{q.name}: last batch {p['batchId']}, {p['numInputRows']} input rows, "
                  f"sink {p['sink']['description']}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
