"""The calls Spark's Kafka connector makes, on the client it is built with (kafka-clients 3.9.2 for Spark 4.2.0).

compat_tests/java/SparkCallsDriver.java replays them (see its header for where each comes from in Spark's
connector): the driver's AdminClient plan (describeCluster, listTopics for subscribePattern,
describeTopics, listOffsets earliest/latest/forTimestamp with the isolation level), an executor consumer
per offset range (``auto.offset.reset=none``, ``enable.auto.commit=false``, ``<id>-executor`` group id;
assign, seekToBeginning/seekToEnd + position, seek + poll + position), and the sink's default (idempotent)
producer. Every offset, timestamp lookup and record must be exact: Spark plans each micro-batch from
these numbers, so one wrong offset silently changes a job's results.

read_committed: kbroker has no transactions yet, so the last stable offset is the high watermark and a
read_committed plan and read must return exactly what read_uncommitted returns. (Aborted transactions
are not covered here.)
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from compat_tests.clients import ProduceOptions
from compat_tests.logcheck import check_stored_batches
from compat_tests.spark import support
from compat_tests.spark.support import b64, of, spark_record

pytestmark = pytest.mark.timeout(240)

ISOLATIONS = ("read_uncommitted", "read_committed")
BASE_TS = 1_700_000_000_000
#: records stamped BASE_TS (2023) are past the default retention.ms (7 days): keep them (Kafka's retention
#: deletes such segments, the active one included, at its next check)
KEEP = {"retention.ms": "-1"}


@pytest.fixture(scope="session")
def spark_calls():
    return support.make_spark_calls()


def produce(calls, bootstrap, topic, count, *, partitions=3, compression="none", tag="spark", base_ts=BASE_TS,
            start=0, extra=()):
    args = ["produce", "--bootstrap", bootstrap, "--topic", topic, "--count", str(count), "--compression",
            compression, "--tag", tag, "--start-index", str(start), *extra]
    if partitions:
        args += ["--partitions", str(partitions)]
    if base_ts is not None:
        args += ["--base-ts", str(base_ts)]
    events = calls.run(args)
    done = of(events, "done")[0]
    assert done["acked"] == count and done["failed"] == 0 and done["idempotent"] is True, done
    return sorted(of(events, "ack"), key=lambda a: a["index"])


def plan(calls, bootstrap, *, topics=(), pattern=None, assign=None, isolation="read_uncommitted", timestamps=()):
    args = ["plan", "--bootstrap", bootstrap, "--isolation", isolation]
    for t in topics:
        args += ["--topic", t]
    if pattern:
        args += ["--pattern", pattern]
    if assign:
        args += ["--assign", assign]
    for ts in timestamps:
        args += ["--timestamp", str(ts)]
    events = calls.run(args)
    offsets = {e["spec"]: {k: v["offset"] for k, v in e["offsets"].items()} for e in of(events, "offsets")}
    lookups = {e["spec"]: e["offsets"] for e in of(events, "offsets")}
    return events, offsets, lookups


def read(calls, bootstrap, topic, ranges, *, isolation="read_uncommitted", check=True, extra=()):
    args = ["read", "--bootstrap", bootstrap, "--topic", topic, "--isolation", isolation, *extra]
    for p, lo, hi in ranges:
        args += ["--range", f"{p}:{lo}:{hi}"]
    return calls.run(args, check=check)


def check_record(e, tag, acks_by_pos):
    """A read record is the one the producer acknowledged at that (partition, offset), byte for byte."""
    ack = acks_by_pos[(e["partition"], e["offset"])]
    key, value, headers = spark_record(tag, ack["index"])
    assert b64(e["key"]) == key, e
    assert b64(e["value"]) == value, e
    assert [(k, b64(v)) for k, v in e["headers"]] == headers, e
    assert e["timestamp"] == ack["timestamp"] and e["timestamp_type"] == "CreateTime", e


def test_driver_is_kafka_clients_3_9(spark_calls):
    v = of(spark_calls.run(["version"]), "version")[0]
    assert v["client_version"] == "3.9.2"  # the pinned Spark connector's (support.CLIENT_JARS)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_plan_and_read_exact(codec, spark_calls, bootstrap_servers, topic_factory):
    """90 records with explicit timestamps to 3 partitions through the idempotent producer in
    multi-record batches (batch.size 4096, linger 50 ms) with ``codec``; then the driver's plan and the
    executors' reads, with both isolation levels, must give exact offsets and records: earliest 0,
    latest 30, a timestamp inside a batch maps to that record's offset, past the end to -1, and ranges
    that start and end inside batches return exactly [from, until)."""
    topic = topic_factory(3, configs=KEEP)
    n, parts = 90, 3
    acks = produce(spark_calls, bootstrap_servers, topic, n, partitions=parts, compression=codec)
    for a in acks:  # partition i % 3, dense offsets in send order
        assert (a["partition"], a["offset"], a["timestamp"]) == (a["index"] % parts, a["index"] // parts,
                                                                 BASE_TS + a["index"]), a
    check_stored_batches(bootstrap_servers, topic, parts, ProduceOptions(compression=codec, idempotence=True), n)
    by_pos = {(a["partition"], a["offset"]): a for a in acks}

    # record j of partition p has index 3j+p and timestamp BASE_TS+3j+p
    probe = [BASE_TS + 3 * 7 + 1, BASE_TS + 3 * 7 + 2, BASE_TS - 5, BASE_TS + n + 100]
    for iso in ISOLATIONS:
        events, offsets, lookups = plan(spark_calls, bootstrap_servers, topics=[topic], isolation=iso,
                                        timestamps=probe)
        cluster = of(events, "cluster")[0]
        assert len(cluster["nodes"]) == 1 and cluster["controller"] == cluster["nodes"][0]["id"]
        assert [(x["topic"], x["partition"]) for x in of(events, "partitions")[0]["partitions"]] == \
            [(topic, p) for p in range(parts)]
        tp = [f"{topic}-{p}" for p in range(parts)]
        assert offsets["earliest"] == dict.fromkeys(tp, 0), iso
        assert offsets["latest"] == dict.fromkeys(tp, n // parts), iso  # read_committed: LSO == HW
        # ts 3*7+1: partition 1 has it exactly at offset 7 (p0 and p2 have it next at offset 8 / 7)
        assert lookups[f"ts:{probe[0]}"] == {
            f"{topic}-0": {"offset": 8, "timestamp": BASE_TS + 24}, f"{topic}-1": {"offset": 7, "timestamp": probe[0]},
            f"{topic}-2": {"offset": 7, "timestamp": BASE_TS + 23}}
        assert offsets[f"ts:{probe[1]}"] == {f"{topic}-0": 8, f"{topic}-1": 8, f"{topic}-2": 7}
        assert offsets[f"ts:{probe[2]}"] == dict.fromkeys(tp, 0)
        assert offsets[f"ts:{probe[3]}"] == dict.fromkeys(tp, -1)  # no such record: -1, Spark then uses its strategy

        ranges = [(0, 0, 30), (1, 7, 23), (2, 29, 30)]
        events = read(spark_calls, bootstrap_servers, topic, ranges, isolation=iso)
        assert [(r["partition"], r["earliest"], r["latest"]) for r in of(events, "range")] == \
            [(p, 0, 30) for p, _, _ in ranges], iso
        recs = of(events, "record")
        assert [(r["partition"], r["offset"]) for r in recs] == \
            [(p, o) for p, lo, hi in ranges for o in range(lo, hi)], iso
        assert not of(events, "gap") and not of(events, "data_loss"), events
        for r in recs:
            check_record(r, "spark", by_pos)
        for d in of(events, "range_done"):
            assert d["next_offset"] == dict((p, hi) for p, _, hi in ranges)[d["partition"]]


def test_writer_defaults_and_partitioner(spark_calls, bootstrap_servers, topic_factory):
    """Spark's writer sends ProducerRecord(topic, null partition, null timestamp, ...): the client picks
    the partition from the key and stamps the time. Records with the same key share a partition; the
    broker's timestamps are the client's; a read of everything returns each acknowledged record."""
    topic = topic_factory(4, configs=KEEP)
    t0 = int(time.time() * 1000)
    acks = produce(spark_calls, bootstrap_servers, topic, 60, partitions=0, base_ts=None, compression="lz4")
    t1 = int(time.time() * 1000)
    assert all(t0 - 5_000 <= a["timestamp"] <= t1 + 5_000 for a in acks)
    ends = {}
    for a in acks:
        ends[a["partition"]] = max(ends.get(a["partition"], 0), a["offset"] + 1)
    _, offsets, _ = plan(spark_calls, bootstrap_servers, topics=[topic])
    assert offsets["latest"] == {f"{topic}-{p}": ends.get(p, 0) for p in range(4)}
    events = read(spark_calls, bootstrap_servers, topic, [(p, 0, ends.get(p, 0)) for p in range(4) if ends.get(p)])
    by_pos = {(a["partition"], a["offset"]): a for a in acks}
    recs = of(events, "record")
    assert sorted((r["partition"], r["offset"]) for r in recs) == sorted(by_pos)
    for r in recs:
        check_record(r, "spark", by_pos)


def test_subscribe_pattern_and_assign(spark_calls, bootstrap_servers, topic_factory):
    """subscribePattern lists topics (internal ones excluded) and matches the regex; assign takes exactly
    the given partitions; a partition that does not exist is an error, as Spark reports it."""
    prefix = f"sparkpat-{uuid.uuid4().hex[:6]}"
    from compat_tests.clients import create_topic

    create_topic(bootstrap_servers, f"{prefix}-a", 2)
    create_topic(bootstrap_servers, f"{prefix}-b", 1)
    create_topic(bootstrap_servers, f"{prefix}x-c", 1)
    produce(spark_calls, bootstrap_servers, f"{prefix}-a", 10, partitions=2)

    events, offsets, _ = plan(spark_calls, bootstrap_servers, pattern=re.escape(prefix) + "-.*")
    assert of(events, "pattern")[0]["matched"] == [f"{prefix}-a", f"{prefix}-b"]
    assert offsets["latest"] == {f"{prefix}-a-0": 5, f"{prefix}-a-1": 5, f"{prefix}-b-0": 0}
    events, _, _ = plan(spark_calls, bootstrap_servers, pattern="__.*")
    assert of(events, "pattern")[0]["matched"] == []  # internal topics are not listed

    events, offsets, _ = plan(spark_calls, bootstrap_servers, assign=f"{prefix}-a:1,{prefix}-b:0")
    assert [(x["topic"], x["partition"]) for x in of(events, "partitions")[0]["partitions"]] == \
        [(f"{prefix}-a", 1), (f"{prefix}-b", 0)]
    assert offsets["earliest"] == {f"{prefix}-a-1": 0, f"{prefix}-b-0": 0}
    assert offsets["latest"] == {f"{prefix}-a-1": 5, f"{prefix}-b-0": 0}

    events = spark_calls.run(["plan", "--bootstrap", bootstrap_servers, "--assign", f"{prefix}-b:3"], check=False)
    assert spark_calls.last_returncode == 1 and "does not exist" in of(events, "error")[0]["message"]


def test_empty_partition_and_reads_at_the_end(spark_calls, bootstrap_servers, topic_factory):
    """An empty partition: earliest = latest = 0 for both isolation levels; an executor's range read
    finds nothing to do. Reading [latest, latest+1) times out as Spark's does (no record appears)."""
    topic = topic_factory(2, configs=KEEP)
    produce(spark_calls, bootstrap_servers, topic, 3, partitions=1)  # only partition 0
    for iso in ISOLATIONS:
        _, offsets, _ = plan(spark_calls, bootstrap_servers, topics=[topic], isolation=iso)
        assert offsets["earliest"] == {f"{topic}-0": 0, f"{topic}-1": 0}
        assert offsets["latest"] == {f"{topic}-0": 3, f"{topic}-1": 0}
    events = read(spark_calls, bootstrap_servers, topic, [(1, 0, 0), (0, 2, 3)], isolation="read_committed")
    assert [(r["partition"], r["offset"]) for r in of(events, "record")] == [(0, 2)]
    events = read(spark_calls, bootstrap_servers, topic, [(0, 3, 4)], check=False,
                  extra=["--poll-timeout-ms", "300"])
    assert spark_calls.last_returncode == 1
    assert of(events, "error")[0]["error_class"] == "TimeoutException"
    assert not of(events, "record")


def test_data_loss_after_retention(spark_calls, kbroker_factory):
    """failOnDataLoss: retention deleted the oldest segments, so the log start moved past offsets a job
    still wanted. The plan's earliest is the new log start; an executor seeking below it gets
    OffsetOutOfRangeException (auto.offset.reset=none), which fails the read with failOnDataLoss=true and,
    with false, continues exactly from the log start."""
    broker = kbroker_factory({"log.retention.check.interval.ms": "300"})
    bootstrap = broker.bootstrap
    topic = f"spark-loss-{uuid.uuid4().hex[:6]}"
    from compat_tests.clients import create_topic

    # small segments; record timestamps from a day ago up to now, so the segments holding only the first ~190
    # records are past retention.ms at once and the newest (the active one) is not: as Kafka, retention deletes
    # a segment, the active one included, whose newest record is older than retention.ms
    create_topic(bootstrap, topic, 1, {"internal.segment.bytes": "8192", "retention.ms": "3600000"})
    old = int(time.time() * 1000) - 86_400_000
    produce(spark_calls, bootstrap, topic, 200, partitions=1, base_ts=old, extra=("--ts-step", "432000"))
    deadline = time.monotonic() + 30
    while True:
        _, offsets, _ = plan(spark_calls, bootstrap, topics=[topic])
        start = offsets["earliest"][f"{topic}-0"]
        if start > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert 0 < start < 200, f"retention did not delete the old segments (log start {start})"
    assert offsets["latest"] == {f"{topic}-0": 200}

    events = read(spark_calls, bootstrap, topic, [(0, 0, 200)], check=False)
    assert spark_calls.last_returncode == 1
    assert of(events, "data_loss")[0] == {"event": "data_loss", "partition": 0, "offset": 0, "earliest": start,
                                           "latest": 200, "reason": "OffsetOutOfRangeException"}
    assert of(events, "error")[0]["error_class"] == "OffsetOutOfRangeException"
    assert not of(events, "record")

    events = read(spark_calls, bootstrap, topic, [(0, 0, 200)], extra=["--fail-on-data-loss", "false"])
    assert len(of(events, "data_loss")) == 1
    assert [r["offset"] for r in of(events, "record")] == list(range(start, 200))
    for r in of(events, "record"):
        assert b64(r["value"]) == spark_record("spark", r["offset"])[1]

    # a range entirely above the log start is unaffected
    events = read(spark_calls, bootstrap, topic, [(0, start, start + 5)], isolation="read_committed")
    assert [r["offset"] for r in of(events, "record")] == list(range(start, start + 5))
    assert not of(events, "data_loss")
