"""The clickstream pipeline's transformations, as pure functions from DataFrame to DataFrame.

They use only Spark SQL's built-in functions (no Python UDFs), so they run unchanged on a streaming
DataFrame from ``format("kafka")``, on a batch read of an offset range, and on small local DataFrames in
tests. Input rows have the Kafka source's schema (``KAFKA_SOURCE_SCHEMA``); output rows have the columns
the Kafka sink takes (``key``, ``value``, ``headers``, optionally ``topic`` and ``partition``) or a flat
table for Parquet.

A page-view event (the JSON value of a record in ``page-views``, keyed by user)::

    {"event_id": "e-000042", "user": "u017", "page": "/pricing", "ts": 1700000000123, "referrer": "/"}

``ts`` is the event time in epoch milliseconds.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

WINDOW_DURATION = "1 minute"
WATERMARK_DELAY = "30 seconds"

EVENT_SCHEMA = T.StructType([
    T.StructField("event_id", T.StringType()),
    T.StructField("user", T.StringType()),
    T.StructField("page", T.StringType()),
    T.StructField("ts", T.LongType()),
    T.StructField("referrer", T.StringType()),
])

HEADERS_TYPE = T.ArrayType(T.StructType([
    T.StructField("key", T.StringType()),
    T.StructField("value", T.BinaryType()),
]))

# What spark.read(Stream).format("kafka") returns (with includeHeaders=true; without it there is no
# headers column).
KAFKA_SOURCE_SCHEMA = T.StructType([
    T.StructField("key", T.BinaryType()),
    T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
    T.StructField("headers", HEADERS_TYPE),
])

COUNT_COLUMNS = ["window_start", "window_end", "page", "views"]


def parse_page_views(kafka_rows: DataFrame) -> DataFrame:
    """Kafka records -> page views (``event_id``, ``user``, ``page``, ``event_time``, ``kafka_partition``,
    ``kafka_offset``). Records whose value is not a page-view JSON object (no page or no ts) are dropped;
    ``invalid_page_views`` returns them."""
    return _with_event(kafka_rows).where(_is_valid()).select(
        "e.event_id", "e.user", "e.page",
        F.timestamp_millis(F.col("e.ts")).alias("event_time"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    )


def invalid_page_views(kafka_rows: DataFrame) -> DataFrame:
    """The records ``parse_page_views`` drops, with their coordinates (for a dead-letter output)."""
    return _with_event(kafka_rows).where(~_is_valid()).select(
        F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
        F.col("value").cast("string").alias("raw_value"))


def _with_event(kafka_rows: DataFrame) -> DataFrame:
    return kafka_rows.withColumn("e", F.from_json(F.col("value").cast("string"), EVENT_SCHEMA))


def _is_valid() -> Column:
    return F.coalesce(F.col("e.page").isNotNull() & F.col("e.ts").isNotNull(), F.lit(False))


def count_views(page_views: DataFrame, window_duration: str = WINDOW_DURATION,
                watermark_delay: str | None = WATERMARK_DELAY) -> DataFrame:
    """Views per page per tumbling event-time window: ``window_start``, ``window_end``, ``page``, ``views``.

    On a streaming DataFrame the watermark (``watermark_delay`` behind the largest event time seen) lets
    append mode emit each window once, when it can no longer change, and drops views later than that.
    On a batch DataFrame the watermark has no effect, so a batch job over the same records computes the
    same counts for every window the stream has emitted."""
    if watermark_delay:
        page_views = page_views.withWatermark("event_time", watermark_delay)
    return (page_views
            .groupBy(F.window(F.col("event_time"), window_duration).alias("window"), F.col("page"))
            .agg(F.count(F.lit(1)).alias("views"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    F.col("page"), F.col("views")))


def iso_utc(ts: Column, session_time_zone: str) -> Column:
    """A timestamp column as ``2023-11-14T22:13:00Z`` whatever the session time zone is."""
    return F.date_format(F.to_utc_timestamp(ts, session_time_zone), "yyyy-MM-dd'T'HH:mm:ss'Z'")


def to_kafka_records(counts: DataFrame, topic: str | None = None, partitions: int | None = None) -> DataFrame:
    """Counts -> rows for the Kafka sink: key = page, value = JSON
    ``{"page", "window_start", "window_end", "views"}``, one header ``window`` = ``<start>/<end>`` (ISO-8601
    UTC). With ``topic`` the rows carry a ``topic`` column (the sink's ``topic`` option then is not needed);
    with ``partitions`` a ``partition`` column picks ``pmod(hash(page), partitions)``, so every window of a
    page lands in the same partition."""
    tz = counts.sparkSession.conf.get("spark.sql.session.timeZone")
    start, end = iso_utc(F.col("window_start"), tz), iso_utc(F.col("window_end"), tz)
    cols = [
        F.col("page").alias("key"),
        F.to_json(F.struct(F.col("page"), start.alias("window_start"), end.alias("window_end"),
                           F.col("views"))).alias("value"),
        F.array(F.struct(F.lit("window").alias("key"),
                         F.concat(start, F.lit("/"), end).cast("binary").alias("value"))).alias("headers"),
    ]
    if topic is not None:
        cols.append(F.lit(topic).alias("topic"))
    if partitions is not None:
        cols.append(F.pmod(F.hash(F.col("page")), F.lit(partitions)).cast("int").alias("partition"))
    return counts.select(*cols)


COUNT_VALUE_SCHEMA = T.StructType([
    T.StructField("page", T.StringType()),
    T.StructField("window_start", T.StringType()),
    T.StructField("window_end", T.StringType()),
    T.StructField("views", T.LongType()),
])


def parse_count_records(kafka_rows: DataFrame) -> DataFrame:
    """Records of ``page-view-counts`` (read with ``includeHeaders=true``) -> ``page``, ``window_start``,
    ``window_end`` (ISO strings), ``views``, ``window_header`` (the header's value) and the record key."""
    v = F.from_json(F.col("value").cast("string"), COUNT_VALUE_SCHEMA)
    header = F.filter(F.col("headers"), lambda h: h["key"] == F.lit("window"))
    return kafka_rows.select(
        F.col("key").cast("string").alias("key"),
        v["page"].alias("page"), v["window_start"].alias("window_start"), v["window_end"].alias("window_end"),
        v["views"].alias("views"),
        F.element_at(header, 1)["value"].cast("string").alias("window_header"),
        F.col("partition"), F.col("offset"))


def to_parquet_rows(counts: DataFrame) -> DataFrame:
    """Counts as stored in Parquet: ``window_start``, ``window_end`` (timestamps), ``page``, ``views``."""
    return counts.select(*COUNT_COLUMNS)
