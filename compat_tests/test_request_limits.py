"""No single request can stall the broker: Kafka's limit of 10,000 partitions per CreateTopics/CreatePartitions
request (POLICY_VIOLATION, checked before anything is built), and creating 5,000 partitions in one request does
not hold up another client's produce (their logs are created off the event loop)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

pytestmark = pytest.mark.timeout(300)


def test_huge_partition_counts_are_refused_at_once(kbroker_factory):
    broker = kbroker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    t0 = time.monotonic()
    for count in (100_000, 10_001):  # confluent-kafka itself refuses more than 100,000
        name = f"huge-{uuid.uuid4().hex[:6]}"
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic(name, count, 1)])[name].result(30)
        assert e.value.args[0].name() == "POLICY_VIOLATION"
        assert e.value.args[0].str() == "Excessively large number of partitions per request."
    # INT32_MAX through the wire (what stalled the broker for 42-92 s and grew it to 5 GB)
    from kbroker.cli._wire import Connection, split_hostport
    from kbroker.protocol.messages import CreateTopicsRequest

    host, port = split_hostport(broker.bootstrap)
    conn = Connection(host, port, 10.0, "limits-test")
    try:
        resp = conn.send(CreateTopicsRequest(timeout_ms=5000, topics=[CreateTopicsRequest.CreatableTopic(
            name="max", num_partitions=2147483647, replication_factor=1)]), 7)
    finally:
        conn.close()
    assert resp.topics[0].error_code == 44  # POLICY_VIOLATION
    # the whole request counts: two topics that together pass the limit are both refused, nothing is created
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    fs = admin.create_topics([NewTopic(a, 6000, 1), NewTopic(b, 6000, 1)])
    for name in (a, b):
        with pytest.raises(KafkaException) as e:
            fs[name].result(30)
        assert e.value.args[0].name() == "POLICY_VIOLATION"
        assert e.value.args[0].str() == "Excessively large number of partitions per request."
    # within 10,000 partitions but over 10,000 metadata records (a TopicRecord per topic, a PartitionRecord each)
    fs = admin.create_topics([NewTopic(a, 5000, 1), NewTopic(b, 5000, 1)])
    for name in (a, b):
        with pytest.raises(KafkaException) as e:
            fs[name].result(30)
        assert e.value.args[0].name() == "POLICY_VIOLATION"
        assert e.value.args[0].str() == "Unable to perform excessively large batch operation."
    assert a not in admin.list_topics(timeout=10).topics
    # CreatePartitions too
    admin.create_topics([NewTopic(a, 6000, 1)])[a].result(60)
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions(a, 6000 + 10_001)])[a].result(30)
    if broker.target == "kbroker":  # Kafka 4.3.1 answers UNKNOWN_SERVER_ERROR here (its record limit, unmapped)
        assert e.value.args[0].name() == "POLICY_VIOLATION"
    assert time.monotonic() - t0 < 60
    assert broker.is_running()


def test_creating_5000_partitions_does_not_hold_up_other_clients(kbroker_factory):
    broker = kbroker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("busy", 1, 1)])["busy"].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 0})

    def round_trip() -> float:
        done: list[float] = []
        t = time.monotonic()
        p.produce("busy", b"x", on_delivery=lambda err, msg: done.append(time.monotonic()))
        p.flush(30)
        assert done
        return done[0] - t

    for _ in range(50):
        round_trip()
    baseline = sorted(round_trip() for _ in range(200))
    base_p99 = baseline[int(len(baseline) * 0.99)]

    during: list[float] = []
    stop = threading.Event()

    def measure() -> None:
        while not stop.is_set():
            during.append(round_trip())
            time.sleep(0.002)

    t = threading.Thread(target=measure)
    t.start()
    topics = [NewTopic(f"many-{i}-{uuid.uuid4().hex[:4]}", 100, 1) for i in range(50)]
    created_at = time.monotonic()
    for f in admin.create_topics(topics, request_timeout=120).values():
        f.result(120)
    # wait until every partition accepts data (the logs exist)
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1"})
    acks: list[object] = []
    for tp in topics[-1:]:
        for part in range(0, 100, 33):
            p2.produce(tp.topic, b"y", partition=part, on_delivery=lambda err, msg: acks.append(err))
    p2.flush(120)
    ready = time.monotonic() - created_at
    time.sleep(0.5)
    stop.set()
    t.join(30)
    assert acks and all(a is None for a in acks)
    worst = max(during)
    print(f"baseline p99 {base_p99 * 1000:.1f} ms; during the creation of 5,000 partitions ({ready:.1f} s): "
          f"{len(during)} round trips, max {worst * 1000:.1f} ms, "
          f"p99 {sorted(during)[int(len(during) * 0.99)] * 1000:.1f} ms")
    assert len(during) > 20
    # creating the 5,000 logs in one go on the event loop would hold a produce up for seconds; a bound of 0.5 s
    # catches that and not the scheduling noise of a loaded 2-core machine (a produce of 105 ms was seen in CI)
    assert worst - base_p99 <= 0.5, f"a produce waited {worst * 1000:.0f} ms while partitions were created"
