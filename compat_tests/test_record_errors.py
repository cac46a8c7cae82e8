"""Per-record produce errors (KIP-467): a batch that breaks a per-record rule is rejected whole, and Produce v8+
names every bad record (``record_errors``) so the client fails only those with the rule's error and the others
with a retriable "different record" error. Checked with confluent-kafka (librdkafka) and the Java client for
each kind Kafka reports this way: a keyless record on a compacted topic (INVALID_RECORD) and a timestamp
outside message.timestamp.before/after.max.ms (INVALID_TIMESTAMP)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.clients import ProduceOptions
from compat_tests.records import RecordSpec

pytestmark = [pytest.mark.timeout(180), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too
N = 100


def new_topic(bootstrap: str, config: dict[str, str]) -> str:
    topic = f"rec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    return topic


def produce_one_batch(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, int | None]]):
    """Send ``records`` (key, value, timestamp) in one batch; returns the delivery report per record."""
    reports: list[tuple[int, object]] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2000, "batch.num.messages": 10000,
                  "enable.idempotence": False, "retries": 0, "message.timeout.ms": 20000})
    for i, (key, value, ts) in enumerate(records):
        kw = {"timestamp": ts} if ts is not None else {}
        p.produce(topic, value, key=key, partition=0,
                  on_delivery=lambda err, msg, i=i: reports.append((i, err)), **kw)
    p.flush(30)
    return sorted(reports, key=lambda r: r[0])


def count_records(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    return hi - lo


def test_keyless_records_on_a_compacted_topic_confluent(kafka_broker, bootstrap_servers):
    topic = new_topic(bootstrap_servers, {"cleanup.policy": "compact"})
    bad = set(range(5, N, 10))  # 10 keyless records
    records = [(None if i in bad else f"k{i}".encode(), f"v{i}".encode(), None) for i in range(N)]
    reports = produce_one_batch(bootstrap_servers, topic, records)
    assert len(reports) == N
    errors = {i: err.name() if err else None for i, err in reports}
    assert {i for i, e in errors.items() if e == "INVALID_RECORD"} == bad
    assert {i for i, e in errors.items() if e == "_INVALID_DIFFERENT_RECORD"} == set(range(N)) - bad
    assert count_records(bootstrap_servers, topic) == 0, "the batch must be rejected whole"
    # sending the 90 good ones again succeeds
    again = produce_one_batch(bootstrap_servers, topic, [r for i, r in enumerate(records) if i not in bad])
    assert [err for _, err in again] == [None] * (N - len(bad))
    assert count_records(bootstrap_servers, topic) == N - len(bad)


def test_timestamps_out_of_range_confluent(kafka_broker, bootstrap_servers):
    topic = new_topic(bootstrap_servers, {"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    bad = set(range(3, N, 10))
    records = [(f"k{i}".encode(), f"v{i}".encode(), now - 86_400_000 if i in bad else now) for i in range(N)]
    reports = produce_one_batch(bootstrap_servers, topic, records)
    errors = {i: err.name() if err else None for i, err in reports}
    # the partition's code is INVALID_TIMESTAMP (tests/server/test_record_errors_response.py); librdkafka reports
    # every record named in record_errors as INVALID_RECORD, the others as _INVALID_DIFFERENT_RECORD
    assert {i for i, e in errors.items() if e == "INVALID_RECORD"} == bad
    assert {i for i, e in errors.items() if e == "_INVALID_DIFFERENT_RECORD"} == set(range(N)) - bad
    assert count_records(bootstrap_servers, topic) == 0


def test_future_timestamps_confluent(kafka_broker, bootstrap_servers):
    topic = new_topic(bootstrap_servers, {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    bad = {0, 50, 99}
    records = [(f"k{i}".encode(), b"v", now + 3_600_000 if i in bad else now) for i in range(N)]
    errors = {i: err.name() if err else None for i, err in produce_one_batch(bootstrap_servers, topic, records)}
    assert {i for i, e in errors.items() if e == "INVALID_RECORD"} == bad


def test_keyless_records_on_a_compacted_topic_java(kafka_broker, bootstrap_servers, get_client):
    java = get_client("java")
    topic = new_topic(bootstrap_servers, {"cleanup.policy": "compact"})
    # the driver's content: key null when i % 7 == 6 (nulls=True) -> 14 keyless records of 100
    spec = RecordSpec.new("kip467", N, partitions=1, nulls=True)
    res = java.produce(bootstrap_servers, topic, spec, ProduceOptions(acks="all", idempotence=False, linger_ms=2000,
                                                                        batch_size=1 << 20))
    bad = {i for i in range(N) if spec.key(i) is None}
    assert len(bad) == 14
    by_index = {a.index: a.error for a in res.acks}
    invalid = {i for i, e in by_index.items() if e and e.startswith("InvalidRecordException")}
    others = {i for i, e in by_index.items() if e and e.startswith("KafkaException")}
    assert invalid == bad, sorted(by_index.items())[:5]
    assert others == set(range(N)) - bad
    assert all("invalid records" in by_index[i] or "invalid record" in by_index[i] for i in others), \
        by_index[min(others)]
    assert count_records(bootstrap_servers, topic) == 0
    # the same content without null keys goes through
    ok = java.produce(bootstrap_servers, topic, RecordSpec.new("kip467b", N, partitions=1, nulls=False),
                      ProduceOptions(acks="all", idempotence=False, linger_ms=2000, batch_size=1 << 20))
    assert all(a.error is None for a in ok.acks)
    assert count_records(bootstrap_servers, topic) == N


def test_timestamps_out_of_range_java(kafka_broker, bootstrap_servers, get_client):
    java = get_client("java")
    topic = new_topic(bootstrap_servers, {"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    # timestamps from 2 h ago to now: the older half is outside message.timestamp.before.max.ms (1 h)
    spec = RecordSpec.new("kip467ts", N, partitions=1, nulls=False, base_ts=now - 7_200_000, ts_step=72_000)
    res = java.produce(bootstrap_servers, topic, spec, ProduceOptions(acks="all", idempotence=False, linger_ms=2000,
                                                                        batch_size=1 << 20))
    by_index = {a.index: a.error for a in res.acks}
    bad = {i for i in range(N) if spec.timestamp(i) < now - 3_600_000 - 60_000}
    edge = {i for i in range(N) if abs(spec.timestamp(i) - (now - 3_600_000)) <= 60_000}  # the clock moved on
    # the Java client, like librdkafka, fails each record named in record_errors with InvalidRecordException,
    # carrying the broker's message for that record
    invalid = {i for i, e in by_index.items() if e and e.startswith("InvalidRecordException") and "Timestamp" in e}
    others = {i for i, e in by_index.items() if e and e.startswith("KafkaException")}
    assert bad <= invalid <= bad | edge, sorted(by_index.items())[:3]
    assert invalid | others == set(range(N))
    assert count_records(bootstrap_servers, topic) == 0
