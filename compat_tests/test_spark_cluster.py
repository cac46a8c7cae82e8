"""Spark's Kafka connector against a 3-node cluster (RF 3, ``min.insync.replicas=2``) while the leader of
the partitions it reads or writes is killed with SIGKILL and restarted (issue 32, item 3).

* The clickstream pipeline (examples/clickstream/: readStream from Kafka -> JSON -> event-time windows with a
  watermark -> writeStream to Kafka and to Parquet, each query checkpointed) runs with a processingTime trigger
  while generator.py publishes (idempotent, acks=all) and the node leading every input partition is killed -9,
  then restarted. Nobody restarts the queries: they ride through. Afterwards the Parquet output (Spark's
  exactly-once file sink, its commits in ``_spark_metadata`` with the offsets in the checkpoint) counts every
  acknowledged event exactly once, per (window, page); the topic ``page-view-counts`` holds every window with
  its count (the Kafka sink is at-least-once: duplicates are reported, losses fail); the batch job over
  earliest..latest finds every acknowledged event once in the log and recomputes the same counts.
* A batch ``df.write.format("kafka")`` with ``kafka.acks=all`` while the leader of its topic is killed -9: every
  row of the finished write is in the topic (zero loss); rows written twice (Spark's sink is at-least-once) are
  counted and reported apart.

The node killed leads the topic's partitions (a replica assignment with it first) and is not the active
controller, so what is measured is the partition leaders' failover, as in test_replication.py. Runs on the
``kafka`` target too (the harness starts Kafka nodes).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections import Counter

import pytest

from compat_tests.spark import support
from kbroker.testing.cluster import KbrokerCluster, wait_until
from kbroker.testing.fault_campaign import Admin

pytestmark = pytest.mark.timeout(600)

#: a killed broker is fenced after 3 s (heartbeats every 0.3 s): test_replication.py's settings
KILL_OVERRIDES = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 300,
                  "replica.lag.time.max.ms": 5000, "min.insync.replicas": 2, "default.replication.factor": 3,
                  "offsets.topic.replication.factor": 3, "transaction.state.log.replication.factor": 3}
TOPIC_CONFIG = {"min.insync.replicas": "2", "retention.ms": "-1"}
BASE_TS = 1_700_000_000_000
WINDOW_MS = 60_000
#: the watermark delay of this run: event time advances 5x faster than the wall clock here (100 events/s,
#: 50 ms apart), so 2 minutes of event time let the input partitions drift 24 s apart before a view is late
WATERMARK = "2 minutes"
WATERMARK_MS = 120_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def spark():
    return support.spark_session()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = KbrokerCluster(tmp_path_factory.mktemp("spark-cluster"), nodes=3, overrides=KILL_OVERRIDES)
    with c:
        yield c


def leader_topic(cluster: KbrokerCluster, admin: Admin, name: str, partitions: int) -> int:
    """Create ``name`` with RF 3 and every partition led by the same node, not the active controller; wait
    until every ISR has 3 members and return that node."""
    import generator

    controller = cluster.controller_id()
    lead = next(i for i in cluster.broker_ids if i != controller)
    others = [i for i in cluster.broker_ids if i != lead]
    assignment = [[lead, *(others if p % 2 == 0 else others[::-1])] for p in range(partitions)]
    generator.ensure_topic(cluster.bootstrap, name, partitions, replica_assignment=assignment, config=TOPIC_CONFIG)
    admin.wait_isr(3, 60, name)
    wait_until(lambda: all(leader == lead for leader, _ in admin.state(name).values()), 30,
               f"node {lead} leading every partition of {name}")
    return lead


def kill_and_restart(cluster: KbrokerCluster, admin: Admin, node: int, topic: str, ride_through) -> dict:
    """SIGKILL ``node``; wait until another node leads every partition of ``topic``, call ``ride_through()``
    (it returns once the clients have made progress without the node), restart the node and wait until it is
    back in every ISR. Returns the timings in seconds."""
    admin.down.add(node)
    cluster.kill(node)
    killed = time.monotonic()
    wait_until(lambda: all(leader not in (node, -1) for leader, _ in admin.state(topic).values()), 60,
               f"new leaders of {topic} after killing node {node}")
    failover = time.monotonic() - killed
    ride_through()
    down = time.monotonic() - killed
    cluster.restart(node)
    admin.down.discard(node)
    admin.wait_isr(3, 90, topic, what=f"node {node} back in every ISR of {topic}")
    return {"failover_s": round(failover, 1), "down_s": round(down, 1),
            "rejoined_s": round(time.monotonic() - killed, 1)}


def poll(cond, timeout: float, what: str, every: float = 1.0, state=None):  # noqa: ANN001, ANN201
    """``wait_until`` for conditions that run Spark jobs or py4j calls: asked every ``every`` seconds;
    ``state()`` describes where things stand when it times out."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r}"
                         + (f", {state()}" if state else "") + ")")


def utc_ms(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.astimezone()
    return int(ts.timestamp() * 1000)


def iso_ms(s: str) -> int:
    return int(dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def test_pipeline_rides_through_a_leader_kill(spark, cluster, tmp_path):
    """The streaming pipeline through a kill -9 and restart of the node leading every input partition: the
    queries keep running by themselves; Parquet counts every acknowledged event exactly once; the Kafka
    output has every window with its count (duplicates reported); the batch job agrees."""
    import batch_job
    import generator
    import stream_job
    import transforms

    admin = Admin(cluster)
    views, counts_topic = unique("page-views"), unique("page-view-counts")
    lead = leader_topic(cluster, admin, views, 3)
    generator.ensure_topic(cluster.bootstrap, counts_topic, 2, replication_factor=3, config=TOPIC_CONFIG)
    admin.wait_isr(3, 60, counts_topic)

    events = generator.make_events(3000, step_ms=50, seed=32, start_ms=BASE_TS)  # 150 s of event time
    out, ckpt = str(tmp_path / "counts"), str(tmp_path / "ckpt")
    rows = stream_job.read_page_views(spark, cluster.bootstrap, topic=views)
    queries = stream_job.start_pipeline(rows, checkpoint_dir=ckpt, trigger={"processingTime": "2 seconds"},
                                        kafka_sink=stream_job.kafka_options(cluster.bootstrap),
                                        output_topic=counts_topic, parquet_dir=out, watermark=WATERMARK,
                                        query_prefix=unique("kill"))
    acks: list[tuple[int, int]] = []
    failure: list[BaseException] = []
    phase1, phase2, phase3 = events[:1000], events[1000:2000], events[2000:]

    def publish(batch, rate: float = 0.0) -> None:
        try:
            acks.extend(generator.publish(cluster.bootstrap, batch, topic=views, rate=rate))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failure.append(exc)

    def read_rows() -> list[int]:
        for q in queries:
            if q.exception() is not None:
                raise AssertionError(f"query {q.name} failed: {q.exception()}")
        return [sum(p["numInputRows"] for p in q.recentProgress) for q in queries]

    publisher = threading.Thread(target=publish, args=(phase2, 100), name="generator", daemon=True)

    def state() -> str:
        return (f"rows read per query {read_rows()}, generator acks {len(acks)} alive {publisher.is_alive()}, "
                f"partitions {admin.state(views)}, last progress {[q.lastProgress for q in queries]}")

    started = time.monotonic()
    try:
        # phase 1 with every node up; phase 2 (10 s at 100 events/s) under way when the leader is killed and
        # read while it is down; phase 3 after it rejoined the ISRs, then the event that closes every window
        publish(phase1)
        poll(lambda: min(read_rows()) >= len(phase1), 120, "both queries reading phase 1", state=state)
        publisher.start()
        time.sleep(2)

        def ride_through() -> None:  # the generator's acks and both queries go on while the node is down
            publisher.join(120)
            assert not publisher.is_alive() and not failure, f"generator: {failure}"
            poll(lambda: min(read_rows()) >= len(phase1) + len(phase2), 120,
                 "the queries reading phase 2 without the node", state=state)

        timings = kill_and_restart(cluster, admin, lead, views, ride_through)
        publish(phase3, 100)
        closing = generator.closing_event(max(e["ts"] for e in events), watermark_delay_ms=WATERMARK_MS, seed=32)
        publish([closing])
        assert not failure, f"generator: {failure}"
        total = len(events) + 1
        poll(lambda: min(read_rows()) >= total, 180, f"both queries reading all {total} records", state=state)
        want = generator.expected_counts(events)

        def parquet_done() -> bool:
            read_rows()
            return spark.read.parquet(out).count() >= len(want)

        poll(parquet_done, 120, "every window in Parquet", every=2.0, state=state)
        reader = lambda: transforms.parse_count_records(  # noqa: E731
            spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", counts_topic).option("includeHeaders", "true").load())
        poll(lambda: read_rows() and reader().count() >= len(want), 120,
             "every window in page-view-counts", every=2.0, state=state)
        input_rows = read_rows()
        dropped = [sum(op.get("numRowsDroppedByWatermark", 0) for p in q.recentProgress
                       for op in p.get("stateOperators", [])) for q in queries]
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
    elapsed = time.monotonic() - started

    # every acknowledged event is in the log once (idempotent producer), and nothing else is
    log = batch_job.read_range(spark, cluster.bootstrap, topic=views, starting_offsets="earliest",
                               ending_offsets="latest")
    ids = Counter(r["event_id"] for r in transforms.parse_page_views(log).select("event_id").collect())
    assert len(acks) == len(events) + 1 == len(set(acks))
    assert ids == Counter({e["event_id"]: 1 for e in [*events, closing]}), "the log lost or repeated an event"
    # each query read every record exactly once (the counts of its micro-batches)
    assert input_rows == [len(events) + 1] * len(queries), input_rows

    # Parquet: exactly once per (window, page), every event counted (none late, none twice)
    parquet = spark.read.parquet(out).collect()
    got = Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in parquet})
    assert len(parquet) == len(got), "a (window, page) was written twice to Parquet"
    assert got == want, f"Parquet counts differ: missing {dict(want - got)}, extra {dict(got - want)}"
    assert sum(got.values()) == len(events) and dropped == [0, 0]

    # Kafka sink (at-least-once): every window with its exact count; copies of a window are duplicates
    kafka_rows = reader().collect()
    copies = Counter((iso_ms(r["window_start"]), r["page"]) for r in kafka_rows)
    assert set(copies) == set(want), f"windows missing from page-view-counts: {set(want) - set(copies)}"
    assert all(r["views"] == want[(iso_ms(r["window_start"]), r["page"])] for r in kafka_rows)
    assert all(r["key"] == r["page"] and r["window_header"] == f"{r['window_start']}/{r['window_end']}"
               for r in kafka_rows)
    duplicates = sum(c - 1 for c in copies.values())

    # the batch job over earliest..latest recomputes the same counts (plus the closing event's open window)
    recount = Counter({(utc_ms(r["window_start"]), r["page"]): r["views"] for r in batch_job.recount(log).collect()})
    assert recount == want + generator.expected_counts([closing])
    print(f"pipeline through a kill -9 of node {lead} ({timings}): {len(events)} events + 1 closing, "
          f"{len(want)} (window, page) counts exact in Parquet, {len(kafka_rows)} records in page-view-counts "
          f"({duplicates} duplicates), {elapsed:.0f} s")


def test_batch_write_acks_all_through_a_leader_kill(spark, cluster):
    """``df.write.format("kafka")`` with ``kafka.acks=all`` to an RF 3 topic while the node leading its
    partitions is killed -9 and restarted: the write finishes and every row is in the topic. Spark's sink is
    at-least-once: rows in the topic more than once are counted (and reported), rows missing fail the test."""
    from confluent_kafka import Consumer, TopicPartition
    from pyspark.sql import functions as F

    admin = Admin(cluster)
    topic = unique("spark-write")
    partitions, rows = 3, 300_000
    lead = leader_topic(cluster, admin, topic, partitions)
    watch = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique("watch")})

    def written() -> int:
        total = 0
        for p in range(partitions):
            try:
                total += watch.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
            except Exception:  # noqa: BLE001 - a partition without a reachable leader right now
                pass
        return total

    # value = the row's number, zero-padded to 100 digits; 4 tasks, 2 at a time (local[2])
    df = spark.range(rows, numPartitions=4).select(
        F.col("id").cast("string").alias("key"),
        F.lpad(F.col("id").cast("string"), 100, F.lit("0")).alias("value"))
    failure: list[BaseException] = []
    attempts = []

    def write() -> None:
        for _ in range(2):  # a failed write is retried as a whole, as a user would (more duplicates, no loss)
            attempts.append(time.monotonic())
            try:
                df.write.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap) \
                    .option("kafka.acks", "all").option("topic", topic).save()
                failure.clear()
                return
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failure.append(exc)

    writer = threading.Thread(target=write, name="spark-write", daemon=True)
    started = time.monotonic()
    try:
        writer.start()
        poll(lambda: written() >= rows // 5 or not writer.is_alive(), 180, "the write under way", every=0.5)
        assert writer.is_alive(), "the write finished before the kill: make it longer"
        at_kill = written()

        def ride_through() -> None:
            poll(lambda: written() >= at_kill + rows // 5 or not writer.is_alive(), 120,
                 "the write going on without the node", every=0.5)

        timings = kill_and_restart(cluster, admin, lead, topic, ride_through)
        writer.join(300)
        assert not writer.is_alive(), "the write did not finish"
    finally:
        watch.close()
    elapsed = time.monotonic() - started
    assert not failure, f"the write failed twice: {failure}"

    back = spark.read.format("kafka").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", topic).load() \
        .select(F.col("value").cast("string").alias("v")) \
        .agg(F.count(F.lit(1)).alias("records"), F.countDistinct("v").alias("distinct"),
             F.sum(F.when(~F.col("v").rlike("^[0-9]{100}$"), 1).otherwise(0)).alias("foreign"),
             F.min(F.col("v").cast("long")).alias("lo"), F.max(F.col("v").cast("long")).alias("hi")).first()
    assert back["foreign"] == 0 and back["lo"] == 0 and back["hi"] == rows - 1
    lost = rows - back["distinct"]
    duplicates = back["records"] - back["distinct"]
    print(f"batch write of {rows} rows (acks=all) through a kill -9 of node {lead} ({timings}): "
          f"{len(attempts)} write attempt(s), {back['records']} records, {lost} lost, {duplicates} duplicates, "
          f"{elapsed:.0f} s")
    assert lost == 0, f"{lost} acknowledged rows lost"
