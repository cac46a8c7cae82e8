"""Spark's own Kafka connector (spark-sql-kafka-0-10, Spark 4.2; 4.0.x with bench/spark_versions.sh) against kbroker.

The connector jars (spark-sql-kafka-0-10_2.13 and spark-token-provider-kafka-0-10_2.13 of the installed
pyspark, with the kafka-clients and commons-pool2 they name) come from Maven Central by coordinates:
``scripts/fetch_jars.sh spark`` (java/pom.xml) puts them in .cache/spark-<pyspark version>/, and runs here when
they are missing. ``KBROKER_SPARK_JARS`` (comma-separated jars or directories) overrides them. The project
never builds or ships the connector.

Covered: the clickstream pipeline end to end (generator -> streaming job -> page-view-counts + Parquet ->
batch recount over an exact offset range) with a restart from the checkpoint and exact row counts; the
connector options subscribe, subscribePattern, assign, startingOffsets/endingOffsets (earliest, latest,
JSON), startingTimestamp/startingOffsetsByTimestamp/endingOffsetsByTimestamp, includeHeaders,
maxOffsetsPerTrigger, minPartitions, kafka.isolation.level=read_committed (over non-transactional data and over
committed, aborted and open transactions), failOnDataLoss after
retention, writes with topic/partition/headers columns, trigger(availableNow=True), processingTime
micro-batches and the continuous trigger; kafka.security.protocol=SASL_SSL with SCRAM-SHA-512, and the Admin-based
offset fetching of Spark 4 next to the deprecated consumer-based one. On a 3-node cluster through a leader
kill: test_spark_cluster.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections import Counter

import pytest

from compat_tests.clients import create_topic
from compat_tests.spark import support
from compat_tests.spark.support import of, spark_record

pytestmark = pytest.mark.timeout(600)

BASE_TS = 1_700_000_000_000
#: records stamped BASE_TS (2023) are past the default retention.ms (7 days): keep them, or the broker's next
#: retention check (every 5 minutes; Kafka's deletes such segments, the active one included) empties the topic
#: under a test that has not read it yet
KEEP = {"retention.ms": "-1"}
WINDOW_MS = 60_000
#: Spark's Ivy cache for ``spark-submit --packages`` (spark.jars.ivy): filled from Maven Central once, then reused
IVY_DIR = support.REPO_ROOT / ".cache" / "ivy"
DELAY_MS = 30_000


@pytest.fixture(scope="module")
def spark():
    return support.spark_session()


@pytest.fixture(scope="module")
def calls():
    return support.make_spark_calls()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafka_reader(spark, bootstrap, **options):
    r = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r


def positions(df) -> list[tuple[str, int, int]]:
    return sorted((r["topic"], r["partition"], r["offset"]) for r in df.select("topic", "partition", "offset").collect())


def utc_ms(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.astimezone()
    return int(ts.timestamp() * 1000)


def produce(calls, bootstrap, topic, count, *, partitions=3, tag="spark", base_ts=BASE_TS, compression="lz4",
            extra=()):
    """The Spark-calls driver's idempotent producer (kafka-clients 3.9.2): record i -> partition i % P,
    timestamp base_ts + i (``extra`` more driver options, e.g. ``--ts-step``), content spark_record(tag, i).
    Returns {(partition, offset): index}."""
    args = ["produce", "--bootstrap", bootstrap, "--topic", topic, "--count", str(count), "--tag", tag,
            "--compression", compression, "--partitions", str(partitions), "--base-ts", str(base_ts), *extra]
    acks = of(calls.run(args), "ack")
    assert len(acks) == count and all("error" not in a for a in acks)
    return {(a["partition"], a["offset"]): a["index"] for a in acks}


# ============================================================================================ the jars


def test_connector_jars_are_the_installed_sparks():
    """The connector in use is the installed pyspark's (connector_jars() fails otherwise), and the
    kafka-clients it brings is the one SparkCallsDriver runs on (compat_tests/test_spark_calls.py replays
    the connector's client calls with it): a Spark upgrade that changes it must change both. On another
    release (KBROKER_SPARK_VERSION, bench/spark_versions.sh) the connector brings its own kafka-clients,
    one jar of it."""
    import pyspark

    names = sorted(os.path.basename(j) for j in support.connector_jars())
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert f"spark-token-provider-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    clients = [n for n in names if n.startswith("kafka-clients-")]
    if pyspark.__version__ != support.pinned_spark_version():
        assert len(clients) == 1, clients
        return
    assert clients == [support.CLIENT_JARS[0]], f"connector brings {clients}, SparkCallsDriver uses " \
        f"{support.CLIENT_JARS[0]} (java/pom.xml clients39)"


# ============================================================================================ the pipeline


def emitted_windows(events) -> Counter:
    import generator

    watermark = max(e["ts"] for e in events) - DELAY_MS
    return Counter({k: v for k, v in generator.expected_counts(events).items() if k[0] + WINDOW_MS <= watermark})


def test_pipeline_end_to_end_with_restart(spark, bootstrap_servers, tmp_path):
    """generator -> stream_job (availableNow, maxOffsetsPerTrigger) -> page-view-counts and Parquet; stop;
    more events; restart from the checkpoint. Every input record is read exactly once per query, every
    closed window is written exactly once to both outputs with the exact count, the topic's records carry
    key = page and the window header, and batch_job over the exact offset range recomputes the counts."""
    import batch_job
    import generator
    import stream_job
    import transforms

    views, counts_topic = unique("page-views"), unique("page-view-counts")
    create_topic(bootstrap_servers, views, 3, KEEP)
    generator.ensure_topic(bootstrap_servers, counts_topic, 2)
    events = generator.make_events(1500, step_ms=300, jitter_ms=4000, seed=21)  # 7.5 minutes of event time
    first, second = events[:900], events[900:]
    out, ckpt = str(tmp_path / "counts"), str(tmp_path / "ckpt")

    def run(expected_rows: int) -> None:
        rows = stream_job.read_page_views(spark, bootstrap_servers, topic=views, max_offsets_per_trigger=250)
        queries = stream_job.start_pipeline(rows, checkpoint_dir=ckpt, trigger={"availableNow": True},
                                            kafka_sink=stream_job.kafka_options(bootstrap_servers),
                                            output_topic=counts_topic, parquet_dir=out,
                                            query_prefix=unique("e2e"))
        stream_job.await_queries(queries, 300)
        for q in queries:
            batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
            assert sum(p["numInputRows"] for p in q.recentProgress) == expected_rows, q.name
            assert all(p["numInputRows"] <= 250 for p in batches) and len(batches) >= expected_rows // 250

    def kafka_output():
        df = kafka_reader(spark, bootstrap_servers, subscribe=counts_topic, includeHeaders="true").load()
        return transforms.parse_count_records(df).collect()

    def as_counter(rows) -> Counter:
        return Counter({(int(dt.datetime.strptime(r["window_start"], "%Y-%m-%dT%H:%M:%SZ")
                             .replace(tzinfo=dt.timezone.utc).timestamp() * 1000), r["page"]): r["views"]
                        for r in rows})

    acks1 = generator.publish(bootstrap_servers, first, topic=views)
    run(len(first))
    parquet1 = spark.read.parquet(out).collect()
    kafka1 = kafka_output()
    want1 = emitted_windows(first)
    assert Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in parquet1}) == want1
    assert len(parquet1) == len(want1) == len(kafka1)
    assert as_counter(kafka1) == want1
    assert all(r["key"] == r["page"] and r["window_header"] == f"{r['window_start']}/{r['window_end']}"
               for r in kafka1)

    acks2 = generator.publish(bootstrap_servers, second, topic=views)
    run(len(second))  # restart: only the new records are read
    parquet2 = spark.read.parquet(out).collect()
    kafka2 = kafka_output()
    want2 = emitted_windows(events)
    assert len(parquet2) == len(want2) == len(kafka2), "a window was lost or written twice"
    assert Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in parquet2}) == want2
    assert as_counter(kafka2) == want2

    # batch_job over the exact offset range the stream consumed
    ends: dict[int, int] = {}
    for p, o in acks1 + acks2:
        ends[p] = max(ends.get(p, 0), o + 1)
    rows = batch_job.read_range(spark, bootstrap_servers, topic=views,
                                starting_offsets=batch_job.offsets_json(views, dict.fromkeys(ends, 0)),
                                ending_offsets=batch_job.offsets_json(views, ends))
    assert rows.count() == len(events)
    recount = batch_job.recount(rows).collect()
    assert Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in recount}) == \
        generator.expected_counts(events)
    # and only the first run's range recomputes the first run's windows
    ends1: dict[int, int] = {}
    for p, o in acks1:
        ends1[p] = max(ends1.get(p, 0), o + 1)
    rows1 = batch_job.read_range(spark, bootstrap_servers, topic=views, starting_offsets="earliest",
                                 ending_offsets=batch_job.offsets_json(views, ends1))
    assert rows1.count() == len(first)
    got1 = Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in batch_job.recount(rows1).collect()})
    assert Counter({k: got1[k] for k in want1}) == want1


def test_stream_job_command_line(bootstrap_servers, tmp_path):
    """The example's own entry points as a user runs them, in the README's two forms: generator.py; then
    ``spark-submit --jars <the cached jars, comma-separated>`` stream_job.py --trigger availableNow (offline);
    then ``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>`` batch_job.py,
    Spark's own Ivy resolution from Maven Central (into .cache/ivy: ``spark.jars.ivy``, so later runs find
    it there without the network). spark-submit is the pyspark wheel's, run with the venv first on PATH as
    after ``. .venv/bin/activate``."""
    import subprocess
    import sys

    import pyspark

    jars = ",".join(support.connector_jars())
    views, counts_topic = unique("page-views"), unique("page-view-counts")
    py = sys.executable
    bindir = os.path.dirname(py)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
           "PYSPARK_PYTHON": py}
    env.pop(support.JARS_ENV, None)  # only what spark-submit is given
    env.pop("SPARK_HOME", None)  # the wheel's Spark (find-spark-home)
    submit = [os.path.join(bindir, "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    ex = support.EXAMPLE_DIR
    create_topic(bootstrap_servers, views, 3, KEEP)  # generator.py keeps an existing topic
    r = subprocess.run([py, str(ex / "generator.py"), "--bootstrap", bootstrap_servers, "--topic", views,
                        "--count", "600", "--start-ms", str(BASE_TS), "--step-ms", "500"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    published = json.loads(r.stdout.strip().splitlines()[-1])
    assert published["published"] == 600
    r = subprocess.run([*submit, "--jars", jars, str(ex / "stream_job.py"), "--bootstrap", bootstrap_servers,
                        "--input-topic", views, "--output-topic", counts_topic, "--checkpoint-dir", str(tmp_path / "ck"),
                        "--parquet-dir", str(tmp_path / "out"), "--trigger", "availableNow"],
                       capture_output=True, text=True, timeout=400, env=env)
    assert r.returncode == 0, r.stderr[-5000:]
    ends = {int(p): o for p, o in published["end_offsets"].items()}
    package = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    r = subprocess.run([*submit, "--packages", package, "--conf", f"spark.jars.ivy={IVY_DIR}",
                        str(ex / "batch_job.py"), "--bootstrap", bootstrap_servers, "--topic", views,
                        "--starting-offsets", "earliest",
                        "--ending-offsets", json.dumps({views: {str(p): o for p, o in ends.items()}})],
                       capture_output=True, text=True, timeout=400, env=env)
    assert r.returncode == 0, r.stderr[-5000:]
    # Spark's Ivy put the connector of this pyspark in the cache (resolved from Maven Central on first use)
    assert (IVY_DIR / "jars" / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar").is_file()
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert sum(x["views"] for x in lines) == 600
    import generator

    assert len(lines) == len(generator.expected_counts(generator.make_events(600, start_ms=BASE_TS, step_ms=500)))


# ============================================================================================ source options


@pytest.mark.kafka_reference  # the two together, with the Spark session start: ~2 min of the Kafka slice
def test_offsets_options_batch(spark, calls, bootstrap_servers):
    """startingOffsets/endingOffsets as earliest, latest and per-partition JSON (-2/-1 included),
    startingTimestamp, startingOffsetsByTimestamp and endingOffsetsByTimestamp: exactly the records in
    the requested ranges, with the right content."""
    topic = unique("spark-offsets")
    create_topic(bootstrap_servers, topic, 3, KEEP)
    by_pos = produce(calls, bootstrap_servers, topic, 90)  # 30 per partition; p/offset j has ts BASE_TS+3j+p
    everything = [(topic, p, o) for p in range(3) for o in range(30)]

    df = kafka_reader(spark, bootstrap_servers, subscribe=topic).load()
    assert positions(df) == everything
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    for r in df.collect():
        key, value, _ = spark_record("spark", by_pos[(r["partition"], r["offset"])])
        assert (None if r["key"] is None else bytes(r["key"])) == key and bytes(r["value"]) == value
        assert utc_ms(r["timestamp"]) == BASE_TS + by_pos[(r["partition"], r["offset"])] and r["timestampType"] == 0

    df = kafka_reader(spark, bootstrap_servers, subscribe=topic, startingOffsets={topic: {"0": 5, "1": -2, "2": 29}},
                      endingOffsets={topic: {"0": 9, "1": 3, "2": -1}}).load()
    assert positions(df) == [(topic, 0, o) for o in range(5, 9)] + [(topic, 1, o) for o in range(0, 3)] + \
        [(topic, 2, 29)]
    # (a batch query may not start at "latest" or end at "earliest": the connector refuses those options)
    assert positions(kafka_reader(spark, bootstrap_servers, subscribe=topic,
                                  startingOffsets={topic: {"0": 30, "1": 30, "2": 30}}).load()) == []

    ts = BASE_TS + 3 * 7 + 1  # partition 1 has it at offset 7; partitions 0 and 2 next at 8 and 7
    df = kafka_reader(spark, bootstrap_servers, subscribe=topic, startingTimestamp=str(ts)).load()
    assert positions(df) == [(topic, 0, o) for o in range(8, 30)] + [(topic, 1, o) for o in range(7, 30)] + \
        [(topic, 2, o) for o in range(7, 30)]
    df = kafka_reader(spark, bootstrap_servers, subscribe=topic,
                      startingOffsetsByTimestamp={topic: {"0": BASE_TS, "1": ts, "2": BASE_TS + 3 * 20 + 2}},
                      endingOffsetsByTimestamp={topic: {"0": BASE_TS + 3, "1": BASE_TS + 3 * 9 + 1,
                                                        "2": BASE_TS + 3 * 25 + 2}}).load()
    assert positions(df) == [(topic, 0, 0)] + [(topic, 1, o) for o in (7, 8)] + [(topic, 2, o) for o in range(20, 25)]
    # a timestamp after every record: the default strategy fails, "latest" starts at the end
    with pytest.raises(Exception):  # noqa: B017 - a Py4J/Spark exception whose class depends on the version
        kafka_reader(spark, bootstrap_servers, subscribe=topic, startingTimestamp=str(BASE_TS + 10_000)).load().count()
    df = kafka_reader(spark, bootstrap_servers, subscribe=topic, startingTimestamp=str(BASE_TS + 10_000),
                      startingOffsetsByTimestampStrategy="latest").load()
    assert df.count() == 0


def test_subscribe_pattern_assign_headers_min_partitions(spark, calls, bootstrap_servers):
    """subscribePattern, assign (JSON), includeHeaders (order and content of every header) and minPartitions
    (more Spark partitions than Kafka partitions, same records)."""
    prefix = unique("spark-pat")
    for name, parts in ((f"{prefix}-a", 2), (f"{prefix}-b", 3), (f"{prefix}x", 1)):
        create_topic(bootstrap_servers, name, parts, KEEP)
    pos_a = produce(calls, bootstrap_servers, f"{prefix}-a", 20, partitions=2, tag="a")
    pos_b = produce(calls, bootstrap_servers, f"{prefix}-b", 30, partitions=3, tag="b")
    produce(calls, bootstrap_servers, f"{prefix}x", 5, partitions=1, tag="x")

    df = kafka_reader(spark, bootstrap_servers, subscribePattern=f"{prefix}-.*", includeHeaders="true").load()
    rows = df.collect()
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == sorted(
        [(f"{prefix}-a", p, o) for p, o in pos_a] + [(f"{prefix}-b", p, o) for p, o in pos_b])
    for r in rows:
        tag, pos = ("a", pos_a) if r["topic"].endswith("-a") else ("b", pos_b)
        _, _, headers = spark_record(tag, pos[(r["partition"], r["offset"])])
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == headers

    df = kafka_reader(spark, bootstrap_servers, assign={f"{prefix}-b": [0, 2], f"{prefix}-a": [1]}).load()
    assert positions(df) == sorted([(f"{prefix}-a", 1, o) for o in range(10)] +
                                   [(f"{prefix}-b", p, o) for p in (0, 2) for o in range(10)])

    # minPartitions splits each offset range into round(size / total * minPartitions) Spark partitions
    # (KafkaOffsetRangeCalculator), so 3 ranges of 10 records and minPartitions=9 give exactly 9
    df = kafka_reader(spark, bootstrap_servers, subscribe=f"{prefix}-b", minPartitions="9").load()
    assert df.rdd.getNumPartitions() == 9
    assert positions(df) == sorted((f"{prefix}-b", p, o) for p, o in pos_b)


def test_read_committed_over_non_transactional_data(spark, calls, bootstrap_servers, tmp_path):
    """kafka.isolation.level=read_committed: without transactions the last stable offset is the high
    watermark, so batch and streaming reads return every record (transactions: the next test)."""
    topic = unique("spark-rc")
    create_topic(bootstrap_servers, topic, 3, KEEP)
    by_pos = produce(calls, bootstrap_servers, topic, 60, compression="zstd")
    df = kafka_reader(spark, bootstrap_servers, subscribe=topic, **{"kafka.isolation.level": "read_committed"}).load()
    assert positions(df) == sorted((topic, p, o) for p, o in by_pos)
    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").load())
    name = unique("rc").replace("-", "_")
    q = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    q.awaitTermination(240)
    assert q.exception() is None
    assert positions(spark.table(name)) == sorted((topic, p, o) for p, o in by_pos)


@pytest.mark.kafka_reference  # the two together, with the Spark session start: ~2 min of the Kafka slice
def test_read_committed_over_aborted_and_open_transactions(spark, bootstrap_servers, tmp_path):
    """kafka.isolation.level=read_committed over a topic written by a transactional producer (confluent-kafka):
    committed, aborted, committed, then a transaction left open, with non-transactional records after it.
    Batch and streaming reads return exactly the committed records below the last stable offset (aborted
    records and control markers skipped, the open transaction and everything after it not yet visible);
    read_uncommitted returns every data record; once the open transaction commits, read_committed sees it
    and the records behind it."""
    from confluent_kafka import Producer

    topic = unique("spark-txn")
    create_topic(bootstrap_servers, topic, 2, KEEP)
    produced: list[tuple[str, int, int]] = []  # (value, partition, offset)

    def report(err, msg):
        assert err is None, err
        produced.append((msg.value().decode(), msg.partition(), msg.offset()))

    txn = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": unique("spark-txn"), "linger.ms": 5})
    txn.init_transactions(30)
    for label, n, commit in (("c1", 6, True), ("a", 4, False), ("c2", 6, True), ("open", 4, None)):
        txn.begin_transaction()
        for i in range(n):
            txn.produce(topic, value=f"{label}-{i}".encode(), partition=i % 2, on_delivery=report)
        txn.flush(30)
        if commit is True:
            txn.commit_transaction(30)
        elif commit is False:
            txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for i in range(4):  # behind the open transaction: above the last stable offset until it ends
        plain.produce(topic, value=f"n-{i}".encode(), partition=i % 2, on_delivery=report)
    assert plain.flush(30) == 0
    assert len(produced) == 24

    def rows(values):
        return sorted((topic, p, o) for v, p, o in produced if v.split("-")[0] in values)

    def read(isolation):
        return kafka_reader(spark, bootstrap_servers, subscribe=topic,
                            **{"kafka.isolation.level": isolation}).load()

    committed = rows({"c1", "c2"})
    df = read("read_committed")
    assert positions(df) == committed
    assert sorted(bytes(r["value"]).decode() for r in df.collect()) == sorted(
        v for v, _, _ in produced if v.split("-")[0] in ("c1", "c2"))
    assert positions(read("read_uncommitted")) == rows({"c1", "a", "c2", "open", "n"})

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed").load())
    name = unique("txn").replace("-", "_")
    q = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    q.awaitTermination(240)
    assert q.exception() is None
    assert positions(spark.table(name)) == committed

    txn.commit_transaction(30)
    assert positions(read("read_committed")) == rows({"c1", "c2", "open", "n"})


def test_fail_on_data_loss_after_retention(spark, calls, kbroker_factory, tmp_path):
    """Retention deleted the oldest segments: a batch read from offset 0 fails with failOnDataLoss=true
    (the default) and, with false, returns exactly the records from the new log start; a streaming query
    starting below the log start behaves the same way."""
    broker = kbroker_factory({"log.retention.check.interval.ms": "300"})
    bootstrap = broker.bootstrap
    topic = unique("spark-loss")
    create_topic(bootstrap, topic, 1, {"internal.segment.bytes": "8192", "retention.ms": "3600000"})
    # uncompressed, so the 200 records (~16 KB) fill more than one 8 KiB segment (lz4 packs them into one);
    # timestamps from a day ago up to now, so the segments holding only the first ~190 records are past
    # retention.ms at once and the newest (the active one) is not: as Kafka, retention deletes a segment, the
    # active one included, whose newest record is older than retention.ms
    produce(calls, bootstrap, topic, 200, partitions=1, base_ts=int(time.time() * 1000) - 86_400_000,
            compression="none", extra=("--ts-step", "432000"))
    deadline = time.monotonic() + 30
    start = 0
    while start == 0 and time.monotonic() < deadline:
        events = calls.run(["plan", "--bootstrap", bootstrap, "--topic", topic])
        start = next(e for e in of(events, "offsets") if e["spec"] == "earliest")["offsets"][f"{topic}-0"]["offset"]
        time.sleep(0.3)
    assert 0 < start < 200

    from_zero = {"startingOffsets": {topic: {"0": 0}}, "endingOffsets": {topic: {"0": 200}}}
    with pytest.raises(Exception, match="(?i)lost|out of range|OffsetOutOfRange"):
        kafka_reader(spark, bootstrap, subscribe=topic, **from_zero).load().collect()
    df = kafka_reader(spark, bootstrap, subscribe=topic, failOnDataLoss="false", **from_zero).load()
    assert positions(df) == [(topic, 0, o) for o in range(start, 200)]

    def stream(fail: str, ck: str):
        s = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": 0}}))
             .option("failOnDataLoss", fail).load())
        name = unique("loss").replace("-", "_")
        q = s.writeStream.format("memory").queryName(name).trigger(availableNow=True) \
            .option("checkpointLocation", str(tmp_path / ck)).start()
        try:
            q.awaitTermination(240)
        except Exception:  # noqa: BLE001 - the failed query re-raises here; checked below
            pass
        return q, name

    q, _ = stream("true", "ck1")
    assert q.exception() is not None
    q, name = stream("false", "ck2")
    assert q.exception() is None
    assert positions(spark.table(name)) == [(topic, 0, o) for o in range(start, 200)]


# ============================================================================================ sink and triggers


def test_write_with_topic_partition_and_headers_columns(spark, calls, bootstrap_servers):
    """A batch write whose rows carry ``topic``, ``partition`` and ``headers`` columns (no topic option):
    each row lands in its topic and partition with its headers, in order, duplicates kept."""
    from pyspark.sql import types as T

    t1, t2 = unique("spark-w1"), unique("spark-w2")
    create_topic(bootstrap_servers, t1, 3, KEEP)
    create_topic(bootstrap_servers, t2, 2, KEEP)
    schema = T.StructType([T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                           T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType()),
                           T.StructField("headers", T.ArrayType(T.StructType([
                               T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])))])
    rows = []
    for i in range(40):
        topic, parts = (t1, 3) if i % 2 == 0 else (t2, 2)
        rows.append((topic, i % parts, f"k{i}", f"v{i}".encode(),
                     [("i", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("bin", bytes([0, 255, i]))]))
    spark.createDataFrame(rows, schema).coalesce(1).write.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap_servers).save()

    got = kafka_reader(spark, bootstrap_servers, subscribe=f"{t1},{t2}", includeHeaders="true").load().collect()
    assert len(got) == 40
    for r in got:
        i = int(bytes(r["value"]).decode()[1:])
        topic, partition, key, _, headers = rows[i]
        assert (r["topic"], r["partition"], bytes(r["key"]).decode()) == (topic, partition, key)
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == headers
    for t in (t1, t2):  # dense offsets per partition, in write order
        by_part: dict = {}
        for r in sorted((r for r in got if r["topic"] == t), key=lambda r: r["offset"]):
            by_part.setdefault(r["partition"], []).append(r["offset"])
        assert all(offs == list(range(len(offs))) for offs in by_part.values())


def test_triggers_available_now_processing_time_and_continuous(spark, calls, bootstrap_servers, tmp_path):
    """maxOffsetsPerTrigger splits an availableNow run into micro-batches of at most that many records;
    a processingTime query picks up records produced while it runs; a continuous query copies records
    from one topic to another with the Kafka sink."""
    topic, copy = unique("spark-trig"), unique("spark-trig-copy")
    create_topic(bootstrap_servers, topic, 2, KEEP)
    create_topic(bootstrap_servers, copy, 2, KEEP)
    by_pos = produce(calls, bootstrap_servers, topic, 50, partitions=2)

    def source(**opts):
        r = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers) \
            .option("subscribe", topic).option("startingOffsets", "earliest")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    name = unique("avail").replace("-", "_")
    q = source(maxOffsetsPerTrigger="12").writeStream.format("memory").queryName(name) \
        .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "ck1")).start()
    q.awaitTermination(240)
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 50 and max(sizes) <= 12 and len(sizes) >= 5, sizes
    assert positions(spark.table(name)) == sorted((topic, p, o) for p, o in by_pos)

    name = unique("ptime").replace("-", "_")
    q = source().writeStream.format("memory").queryName(name).trigger(processingTime="500 milliseconds") \
        .option("checkpointLocation", str(tmp_path / "ck2")).start()
    try:
        _wait_rows(spark, name, 50, q)
        more = produce(calls, bootstrap_servers, topic, 20, partitions=2, tag="more", base_ts=BASE_TS + 1000)
        _wait_rows(spark, name, 70, q)
    finally:
        q.stop()
    assert positions(spark.table(name)) == sorted([(topic, p, o) for p, o in by_pos] + [(topic, p, o) for p, o in more])

    cq = source().selectExpr("key", "value", "partition").writeStream.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap_servers).option("topic", copy) \
        .option("checkpointLocation", str(tmp_path / "ck3")).trigger(continuous="1 second").start()
    try:
        # the continuous query's long-running tasks hold both local cores, so watch the copy's end offsets
        # with the driver instead of a Spark batch job (which would wait for a free core)
        deadline = time.monotonic() + 120
        n = 0
        while time.monotonic() < deadline and n < 70:
            time.sleep(1)
            assert cq.exception() is None, cq.exception()
            latest = next(e for e in of(calls.run(["plan", "--bootstrap", bootstrap_servers, "--topic", copy]),
                                        "offsets") if e["spec"] == "latest")
            n = sum(v["offset"] for v in latest["offsets"].values())
    finally:
        cq.stop()
    copied = kafka_reader(spark, bootstrap_servers, subscribe=copy).load().collect()
    assert len(copied) == 70
    src = {(r["partition"], bytes(r["value"])) for r in kafka_reader(spark, bootstrap_servers, subscribe=topic).load().collect()}
    assert {(r["partition"], bytes(r["value"])) for r in copied} == src


def _wait_rows(spark, table: str, n: int, q, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if q.exception() is not None:
            raise AssertionError(f"query failed: {q.exception()}")
        if spark.table(table).count() >= n:
            return
        time.sleep(0.5)
    raise AssertionError(f"{table}: fewer than {n} rows after {timeout}s ({spark.table(table).count()})")


# ============================================================================================ security, offset fetching


@pytest.mark.kafka_reference  # ~25 s with the Kafka start-up
def test_sasl_ssl_scram_sha_512_read_and_write(spark, kbroker_factory, tmp_path):
    """``kafka.security.protocol=SASL_SSL`` with ``kafka.sasl.mechanism=SCRAM-SHA-512``: a broker with a SASL_SSL
    listener (TLS certificate from a test CA, SCRAM credentials created with AlterUserScramCredentials on its
    PLAINTEXT listener); Spark writes rows through the SASL_SSL listener and reads them back, batch and
    streaming, with the CA as a PEM truststore; a wrong password fails the read."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from pyspark.sql import types as T

    from kbroker.testing.certs import CertificateAuthority
    from kbroker.testing.plugin import free_port

    ca = CertificateAuthority(tmp_path / "ca")
    broker = kbroker_factory(start=False)
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SASL://127.0.0.1:{port}"
    broker.overrides.update({
        "listeners": listeners, "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        **ca.issue("broker").pem_properties()})
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "spark", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"spark-secret")]).values():
        f.result(20)
    topic = unique("spark-sasl")
    create_topic(broker.bootstrap, topic, 2, KEEP)

    def secured(password: str) -> dict[str, str]:
        return {"kafka.bootstrap.servers": f"127.0.0.1:{port}", "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                          f'username="spark" password="{password}";',
                "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca.pem_path)}

    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.StringType())])
    rows = [(f"k{i}", f"sasl-ssl-{i}") for i in range(200)]
    spark.createDataFrame(rows, schema).write.format("kafka").options(**secured("spark-secret")) \
        .option("topic", topic).save()

    df = spark.read.format("kafka").options(**secured("spark-secret")).option("subscribe", topic).load()
    got = df.selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").collect()
    assert sorted((r["k"], r["v"]) for r in got) == sorted(rows)

    stream = spark.readStream.format("kafka").options(**secured("spark-secret")).option("subscribe", topic) \
        .option("startingOffsets", "earliest").load()
    name = unique("sasl").replace("-", "_")
    q = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True) \
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    q.awaitTermination(240)
    assert q.exception() is None
    assert spark.table(name).count() == len(rows)

    with pytest.raises(Exception, match="(?i)authentication"):
        spark.read.format("kafka").options(**secured("wrong")).option("subscribe", topic).load().count()


def test_admin_based_offset_fetching_is_the_default(spark, calls, bootstrap_servers):
    """Spark 4 plans batches with the Admin client (``KafkaOffsetReaderAdmin``: ListOffsets, no consumer group)
    unless ``spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true`` (a KafkaConsumer on the driver); every
    other test here runs with the default. Both return the same exact ranges, including per-partition JSON
    offsets and a timestamp."""
    topic = unique("spark-fetch")
    create_topic(bootstrap_servers, topic, 3, KEEP)
    by_pos = produce(calls, bootstrap_servers, topic, 45)
    key = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
    assert spark.conf.get(key) == "false"

    def ranges() -> list:
        return [positions(kafka_reader(spark, bootstrap_servers, subscribe=topic).load()),
                positions(kafka_reader(spark, bootstrap_servers, subscribe=topic,
                                       startingOffsets={topic: {"0": 3, "1": -2, "2": 10}},
                                       endingOffsets={topic: {"0": -1, "1": 4, "2": 12}}).load()),
                positions(kafka_reader(spark, bootstrap_servers, subscribe=topic,
                                       startingTimestamp=str(BASE_TS + 30)).load())]

    admin_based = ranges()
    assert admin_based[0] == sorted((topic, p, o) for p, o in by_pos)
    assert admin_based[1] == [(topic, 0, o) for o in range(3, 15)] + [(topic, 1, o) for o in range(4)] + \
        [(topic, 2, 10), (topic, 2, 11)]
    assert admin_based[2] == sorted((topic, p, o) for p, o in by_pos if by_pos[(p, o)] >= 30)
    spark.conf.set(key, "true")
    try:
        assert ranges() == admin_based
    finally:
        spark.conf.unset(key)
