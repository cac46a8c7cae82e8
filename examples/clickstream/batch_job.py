"""Batch job: recompute the page-view counts of an exact offset range of ``page-views``.

    python examples/clickstream/batch_job.py --bootstrap localhost:9092 \\
        --starting-offsets '{"page-views":{"0":0,"1":0,"2":0}}' \\
        --ending-offsets '{"page-views":{"0":120,"1":95,"2":101}}' [--parquet-dir /tmp/recount]

Reads the range with ``spark.read.format("kafka")`` (``startingOffsets`` inclusive, ``endingOffsets``
exclusive, per-partition JSON or ``earliest``/``latest``), applies the same transformations as the
streaming job and prints one JSON line per (window, page). Over the offsets the streaming job has
consumed, the counts of every window it emitted are the same.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Mapping

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import session as spark_session  # noqa: E402
import transforms  # noqa: E402
from stream_job import INPUT_TOPIC, kafka_options  # noqa: E402


def offsets_json(topic: str, offsets: Mapping[int, int]) -> str:
    """``{"<topic>": {"<partition>": offset, ...}}`` as the connector's offset options take it
    (-2 = earliest, -1 = latest)."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def read_range(spark: Any, bootstrap: str, *, topic: str = INPUT_TOPIC, starting_offsets: str = "earliest",
               ending_offsets: str = "latest", extra_kafka: Mapping[str, str] | None = None,
               fail_on_data_loss: bool = True) -> Any:
    return (spark.read.format("kafka").options(**kafka_options(bootstrap, extra_kafka))
            .option("subscribe", topic)
            .option("startingOffsets", starting_offsets).option("endingOffsets", ending_offsets)
            .option("failOnDataLoss", str(fail_on_data_loss).lower())
            .load())


def recount(kafka_rows: Any, window: str = transforms.WINDOW_DURATION) -> Any:
    """The streaming job's counts, on a batch of Kafka rows (no watermark: nothing is late in a batch)."""
    return transforms.count_views(transforms.parse_page_views(kafka_rows), window, None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--topic", default=INPUT_TOPIC)
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--ending-offsets", default="latest")
    ap.add_argument("--window", default=transforms.WINDOW_DURATION)
    ap.add_argument("--parquet-dir", default=None, help="also write the counts here (overwrite)")
    ap.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--jars", default=None, help=f"comma-separated local jars (added to ${spark_session.JARS_ENV})")
    ap.add_argument("--packages", default=None)
    ap.add_argument("--master", default=None)
    args = ap.parse_args(argv)

    spark = spark_session.build_session("clickstream-batch", jars=spark_session.local_jars(args.jars),
                                        packages=args.packages, master=args.master)
    extra = dict(kv.split("=", 1) for kv in args.kafka_option)
    counts = recount(read_range(spark, args.bootstrap, topic=args.topic, starting_offsets=args.starting_offsets,
                                ending_offsets=args.ending_offsets, extra_kafka=extra), args.window)
    if args.parquet_dir:
        transforms.to_parquet_rows(counts).write.mode("overwrite").parquet(args.parquet_dir)
    tz = spark.conf.get("spark.sql.session.timeZone")
    rows = counts.select(transforms.iso_utc(counts.window_start, tz).alias("window_start"),
                         transforms.iso_utc(counts.window_end, tz).alias("window_end"), "page", "views") \
        .orderBy("window_start", "page").collect()
    for r in rows:
        print(json.dumps(r.asDict()))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
