"""The clickstream pipeline's transformations (examples/clickstream/) with PySpark on local DataFrames.

No broker and no Kafka connector: rows have exactly the Kafka source's schema (``KAFKA_SOURCE_SCHEMA``),
built from the generator's events, so parsing, the event-time windows, the watermark, the Kafka sink's
row shape and the streaming restart from a checkpoint are checked in CI. The same functions run on
``format("kafka")`` DataFrames in test_spark_connector.py when the connector jars are provided.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter

import pytest

from compat_tests.spark import support

pytestmark = pytest.mark.timeout(300)

WINDOW_MS = 60_000
DELAY_MS = 30_000


@pytest.fixture(scope="module")
def spark():
    return support.spark_session()


def kafka_rows(events, *, topic="page-views", partitions=3, start_offsets=None, extra=()):
    """Rows shaped like the Kafka source's output for generator events (partition by user, dense offsets)."""
    import generator

    offsets = dict(start_offsets or {})
    rows = []
    for e in list(events):
        key, value = generator.encode(e)
        p = int(e["user"][1:]) % partitions
        off = offsets.get(p, 0)
        offsets[p] = off + 1
        ts = dt.datetime.fromtimestamp(e["ts"] / 1000, tz=dt.timezone.utc)
        rows.append((key, value, topic, p, off, ts, 0, [("src", b"gen")]))
    rows += list(extra)
    return rows


def utc_ms(ts: dt.datetime) -> int:
    """A timestamp collected from Spark (naive, in the Python process's local time) -> epoch ms."""
    if ts.tzinfo is None:
        ts = ts.astimezone()  # naive datetimes from collect() are local time
    return int(ts.timestamp() * 1000)


def counts_of(rows) -> Counter:
    return Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in rows})


# ----------------------------------------------------------------------------------------- session/jars


def test_session_conf_jars_and_packages(tmp_path, monkeypatch):
    import session

    a, b = tmp_path / "a.jar", tmp_path / "d" / "b.jar"
    b.parent.mkdir()
    a.write_bytes(b"PK")
    b.write_bytes(b"PK")
    (b.parent / "notes.txt").write_text("not a jar")
    env = {session.JARS_ENV: f"{b.parent}, {a}"}
    assert session.local_jars(str(a), env) == [str(a.resolve()), str(b.resolve())]  # --jars first, no dupes
    assert session.local_jars(None, {}) == []
    with pytest.raises(FileNotFoundError, match="missing.jar"):
        session.local_jars(str(tmp_path / "missing.jar"), {})

    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    conf = session.session_conf("x", jars=[str(a)])
    assert conf["spark.jars"] == str(a) and "spark.jars.packages" not in conf
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    conf = session.session_conf("x")  # no local jars: the usual package coordinate of this Spark version
    import pyspark

    assert conf["spark.jars.packages"] == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    assert "spark.jars.packages" not in session.session_conf("x", packages="")
    assert "spark.driver.host" not in session.session_conf("x", master="spark://somewhere:7077")


def test_trigger_and_offsets_helpers():
    import batch_job
    import stream_job

    assert stream_job.parse_trigger("availableNow") == {"availableNow": True}
    assert stream_job.parse_trigger("processingTime=5 seconds") == {"processingTime": "5 seconds"}
    assert stream_job.parse_trigger("continuous=1 second") == {"continuous": "1 second"}
    with pytest.raises(ValueError):
        stream_job.parse_trigger("sometimes")
    assert stream_job.kafka_options("h:1", {"isolation.level": "read_committed"}) == {
        "kafka.bootstrap.servers": "h:1", "kafka.isolation.level": "read_committed"}
    assert json.loads(batch_job.offsets_json("page-views", {1: 7, 0: -2})) == {"page-views": {"0": -2, "1": 7}}


def test_await_queries_timeout_with_several_running_queries():
    """stream_job --timeout with two never-ending queries: the first wait uses up the deadline, the second
    query is not awaited with a timeout of 0 (pyspark refuses it: VALUE_NOT_POSITIVE), both are stopped."""
    import time

    import stream_job

    class Query:  # StreamingQuery's contract: awaitTermination(timeout) needs timeout > 0
        name, exception = "q", staticmethod(lambda: None)

        def __init__(self):
            self.isActive, self.waits = True, []

        def awaitTermination(self, timeout=None):
            if timeout is not None and timeout <= 0:
                raise ValueError(f"[VALUE_NOT_POSITIVE] timeout {timeout}")
            self.waits.append(timeout)
            time.sleep(timeout)
            return False

        def stop(self):
            self.isActive = False

    queries = [Query(), Query()]
    stream_job.await_queries(queries, 0.2)
    assert not any(q.isActive for q in queries)
    assert len(queries[0].waits) == 1 and all(w > 0 for q in queries for w in q.waits)


def test_closing_event_closes_every_window():
    """generator.closing_event: with it read, the watermark (max event time - delay) has passed the end of every
    window of the events before it, and its own window is after all of theirs."""
    import generator

    for delay in (DELAY_MS, 120_000):
        events = generator.make_events(500, step_ms=333, jitter_ms=2000, seed=9)
        last = max(e["ts"] for e in events)
        closing = generator.closing_event(last, watermark_delay_ms=delay)
        watermark = closing["ts"] - delay
        assert all(start + WINDOW_MS <= watermark for start, _ in generator.expected_counts(events))
        assert generator.window_start(closing["ts"]) > generator.window_start(last)
        assert closing["page"] in generator.PAGES and closing["event_id"] not in {e["event_id"] for e in events}


# ----------------------------------------------------------------------------------------- transformations


def test_parse_page_views_exact(spark):
    import generator
    import transforms

    events = generator.make_events(300, jitter_ms=2000)
    bad = [
        (b"u1", b"not json", "page-views", 0, 1000, dt.datetime(2024, 1, 1), 0, []),
        (b"u1", b'{"user":"u1","ts":1}', "page-views", 0, 1001, dt.datetime(2024, 1, 1), 0, []),  # no page
        (b"u1", b'{"user":"u1","page":"/x"}', "page-views", 1, 1002, dt.datetime(2024, 1, 1), 0, []),  # no ts
        (None, None, "page-views", 2, 1003, dt.datetime(2024, 1, 1), 0, None),  # tombstone
    ]
    df = spark.createDataFrame(kafka_rows(events, extra=bad), transforms.KAFKA_SOURCE_SCHEMA)
    parsed = transforms.parse_page_views(df)
    assert parsed.columns == ["event_id", "user", "page", "event_time", "kafka_partition", "kafka_offset"]
    got = {r["event_id"]: r for r in parsed.collect()}
    assert len(got) == len(events)
    for e in events:
        r = got[e["event_id"]]
        assert (r["user"], r["page"], utc_ms(r["event_time"])) == (e["user"], e["page"], e["ts"])
    invalid = transforms.invalid_page_views(df).orderBy("kafka_offset").collect()
    assert [r["kafka_offset"] for r in invalid] == [1000, 1001, 1002, 1003]
    assert invalid[0]["raw_value"] == "not json"


def test_count_views_matches_generator(spark):
    import generator
    import transforms

    events = generator.make_events(1000, step_ms=397, jitter_ms=5000, seed=11)
    df = spark.createDataFrame(kafka_rows(events), transforms.KAFKA_SOURCE_SCHEMA)
    counts = transforms.count_views(transforms.parse_page_views(df))
    assert counts.columns == transforms.COUNT_COLUMNS
    rows = counts.collect()
    assert counts_of(rows) == generator.expected_counts(events)
    assert all(utc_ms(r["window_end"]) - utc_ms(r["window_start"]) == WINDOW_MS for r in rows)
    assert sum(r["views"] for r in rows) == len(events)


def test_kafka_sink_rows(spark):
    """The rows written with format("kafka"): key = page, JSON value, a ``window`` header; with explicit
    topic and partition columns when asked. Read back through ``parse_count_records``."""
    import generator
    import transforms
    from pyspark.sql import functions as F

    events = generator.make_events(400, seed=3)
    df = spark.createDataFrame(kafka_rows(events), transforms.KAFKA_SOURCE_SCHEMA)
    counts = transforms.count_views(transforms.parse_page_views(df))
    out = transforms.to_kafka_records(counts, topic="page-view-counts", partitions=4)
    # the sink compares types ignoring nullability (DataType.sameType), as simpleString does
    fields = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert fields == {"key": "string", "value": "string", "headers": transforms.HEADERS_TYPE.simpleString(),
                      "topic": "string", "partition": "int"}
    assert transforms.HEADERS_TYPE.simpleString() == "array<struct<key:string,value:binary>>"
    rows = out.collect()
    expected = generator.expected_counts(events)
    assert len(rows) == len(expected)
    seen = Counter()
    part_of_page = {}
    for r in rows:
        v = json.loads(r["value"])
        start = int(dt.datetime.strptime(v["window_start"], "%Y-%m-%dT%H:%M:%SZ")
                    .replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        assert r["key"] == v["page"] and r["topic"] == "page-view-counts"
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == [
            ("window", f"{v['window_start']}/{v['window_end']}".encode())]
        assert 0 <= r["partition"] < 4
        assert part_of_page.setdefault(r["key"], r["partition"]) == r["partition"]
        seen[(start, v["page"])] = v["views"]
    assert seen == expected

    # what a consumer of page-view-counts sees (value/key as bytes, headers array), parsed back
    as_source = out.select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
                           "topic", "partition", F.monotonically_increasing_id().alias("offset"), "headers")
    back = transforms.parse_count_records(as_source).collect()
    assert {(r["page"], r["window_start"]): r["views"] for r in back} == {
        (json.loads(r["value"])["page"], json.loads(r["value"])["window_start"]): json.loads(r["value"])["views"]
        for r in rows}
    assert all(r["window_header"] == f"{r['window_start']}/{r['window_end']}" and r["key"] == r["page"] for r in back)


def test_iso_utc_independent_of_session_time_zone(spark):
    import transforms
    from pyspark.sql import functions as F

    old = spark.conf.get("spark.sql.session.timeZone")
    try:
        spark.conf.set("spark.sql.session.timeZone", "America/New_York")
        df = spark.range(1).select(F.timestamp_millis(F.lit(1_700_000_000_000)).alias("t"))
        assert df.select(transforms.iso_utc(F.col("t"), "America/New_York")).first()[0] == "2023-11-14T22:13:20Z"
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)


# ----------------------------------------------------------------------------------------- streaming


def emitted_windows(events, window_ms=WINDOW_MS, delay_ms=DELAY_MS) -> Counter:
    """What append mode must have emitted once the watermark (max event time - delay) is final: the counts
    of every window that ends at or before the watermark."""
    import generator

    watermark = max(e["ts"] for e in events) - delay_ms
    return Counter({k: v for k, v in generator.expected_counts(events, window_ms).items()
                    if k[0] + window_ms <= watermark})


def test_streaming_restart_from_checkpoint_exact(spark, tmp_path):
    """The streaming job's plan (start_pipeline) on a file stream of Kafka-shaped rows, with availableNow
    and several micro-batches per run: after each run the Parquet output holds exactly the windows the
    watermark has closed, with exact counts; a restart from the checkpoint adds the newly closed windows
    and neither repeats nor loses one; a batch recount of the same rows (batch_job.recount) agrees."""
    import batch_job
    import generator
    import stream_job
    import transforms

    src, out, ckpt = str(tmp_path / "src"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    events = generator.make_events(900, step_ms=400, jitter_ms=4000, seed=5)  # 6 minutes of event time
    first, second = events[:500], events[500:]
    offsets: dict = {}

    def append(evs):
        rows = kafka_rows(evs, start_offsets=offsets)
        for r in rows:
            offsets[r[3]] = r[4] + 1
        spark.createDataFrame(rows, transforms.KAFKA_SOURCE_SCHEMA).coalesce(1).write.mode("append").parquet(src)

    def run():
        stream = spark.readStream.schema(transforms.KAFKA_SOURCE_SCHEMA).option("maxFilesPerTrigger", 1).parquet(src)
        queries = stream_job.start_pipeline(stream, checkpoint_dir=ckpt, trigger={"availableNow": True},
                                            parquet_dir=out, query_prefix="restart-test")
        stream_job.await_queries(queries, 240)
        return [q.lastProgress for q in queries]

    append(first[:250])
    append(first[250:])
    run()
    rows1 = spark.read.parquet(out).collect()
    assert len({r["window_start"] for r in rows1}) >= 2, "the first run should have closed a few windows"
    assert counts_of(rows1) == emitted_windows(first)
    assert len(rows1) == len(emitted_windows(first))  # each (window, page) once

    append(second)
    run()
    rows2 = spark.read.parquet(out).collect()
    assert len(rows2) == len({(r["window_start"], r["page"]) for r in rows2}), "a window was emitted twice"
    assert counts_of(rows2) == emitted_windows(events)
    assert set(counts_of(rows1).items()) < set(counts_of(rows2).items())

    recount = batch_job.recount(spark.read.parquet(src))
    closed = emitted_windows(events)
    assert Counter({k: v for k, v in counts_of(recount.collect()).items() if k in closed}) == closed
    assert os.path.isdir(os.path.join(ckpt, "parquet", "offsets"))
