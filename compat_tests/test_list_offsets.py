"""ListOffsets: earliest, latest, by timestamp and max timestamp give exact offsets.

One 2-partition topic is filled once per module with known CreateTime timestamps (T = a whole second,
10 minutes ago):

    partition 0: offsets 0..4 at T+0, T+1000, T+2000, T+3000, T+4000          (increasing)
    partition 1: offsets 0..4 at T+0, T+1000, T+5000, T+2000, T+3000          (not monotonic)

Kafka's answer for "offset for timestamp q" is the first offset whose timestamp is >= q (scanning in
offset order, so for partition 1 every q in (T+1000, T+5000] gives offset 2), or none when no record is
that late. maxTimestamp (KIP-734) gives the offset of the record with the largest timestamp. Every
client's answer is compared with these numbers.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from compat_tests.clients import admin_client, create_topic

pytestmark = [pytest.mark.timeout(120), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too

DELTAS = {0: [0, 1000, 2000, 3000, 4000], 1: [0, 1000, 5000, 2000, 3000]}
QUERY_DELTAS = [-1000, 0, 1, 1000, 1500, 2500, 4000, 4500, 5000, 6000]


def expected_for(ts_list: list[int], q: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= q, or None."""
    for off, ts in enumerate(ts_list):
        if ts >= q:
            return off, ts
    return None


def expected_max(ts_list: list[int]) -> tuple[int, int]:
    best = max(ts_list)
    return ts_list.index(best), best


@pytest.fixture(scope="module")
def ts_topic(bootstrap_servers):
    from confluent_kafka import Producer

    name = f"compat-list-offsets-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap_servers, name, 2)
    base = (int(time.time()) - 600) * 1000
    stamps = {p: [base + d for d in deltas] for p, deltas in DELTAS.items()}
    p = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all", "enable.idempotence": True, "linger.ms": 0})
    acks = []
    for part, tss in stamps.items():
        for j, ts in enumerate(tss):
            p.produce(name, key=f"{part}-{j}".encode(), value=f"ts-{ts}".encode(), partition=part, timestamp=ts,
                      on_delivery=lambda err, msg: acks.append((err, msg.partition(), msg.offset())))
            p.flush(30)  # one batch per record: timestamps are looked up across batches
    assert all(err is None for err, _, _ in acks), acks
    assert sorted((pa, off) for _, pa, off in acks) == [(pa, j) for pa in stamps for j in range(5)], acks
    return name, base, stamps


def queries(base: int) -> list[int]:
    return [base + d for d in QUERY_DELTAS]


def test_java_admin_and_consumer_list_offsets(java_driver, bootstrap_servers, ts_topic):
    topic, base, stamps = ts_topic
    args = ["list-offsets", "--bootstrap", bootstrap_servers, "--topic", topic]
    for q in queries(base):
        args += ["--timestamp", str(q)]
    res = java_driver.one(java_driver.run(args), "offsets")
    problems = []
    for part, tss in stamps.items():
        r = res["partitions"][str(part)]
        adm, con = r["admin"], r["consumer"]
        if adm["earliest"]["offset"] != 0:
            problems.append(f"p{part} admin earliest {adm['earliest']}")
        if adm["latest"]["offset"] != len(tss):
            problems.append(f"p{part} admin latest {adm['latest']}")
        mo, mts = expected_max(tss)
        if (adm["max_timestamp"]["offset"], adm["max_timestamp"]["timestamp"]) != (mo, mts):
            problems.append(f"p{part} admin maxTimestamp {adm['max_timestamp']}, expected offset {mo} ts {mts}")
        if con["beginning"] != 0 or con["end"] != len(tss):
            problems.append(f"p{part} consumer beginning/end {con['beginning']}/{con['end']}")
        for q in queries(base):
            want = expected_for(tss, q)
            got_a = adm["for_timestamp"][str(q)]
            got_c = con["for_times"][str(q)]
            want_a = {"offset": want[0], "timestamp": want[1]} if want else {"offset": -1, "timestamp": -1}
            if (got_a["offset"], got_a["timestamp"]) != (want_a["offset"], want_a["timestamp"]):
                problems.append(f"p{part} admin forTimestamp(T{q - base:+d}) = {got_a}, expected {want_a}")
            want_c = {"offset": want[0], "timestamp": want[1]} if want else None
            if got_c != want_c:
                problems.append(f"p{part} consumer offsetsForTimes(T{q - base:+d}) = {got_c}, expected {want_c}")
    assert not problems, "\n".join(problems)


def test_confluent_offsets_for_times_and_list_offsets(bootstrap_servers, ts_topic):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic, base, stamps = ts_topic
    problems = []
    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"compat-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        for part, tss in stamps.items():
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
            if (lo, hi) != (0, len(tss)):
                problems.append(f"p{part} watermarks ({lo}, {hi})")
            for q in queries(base):
                got = c.offsets_for_times([TopicPartition(topic, part, q)], timeout=10)[0]
                want = expected_for(tss, q)
                if got.error is not None or got.offset != (want[0] if want else -1):
                    problems.append(f"p{part} offsets_for_times(T{q - base:+d}) = {got.offset} "
                                    f"(error {got.error}), expected {want[0] if want else -1}")
    finally:
        c.close()

    admin = admin_client(bootstrap_servers)
    for part, tss in stamps.items():
        tp = TopicPartition(topic, part)
        specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
                 "max_timestamp": OffsetSpec.max_timestamp()}
        specs.update({f"T{q - base:+d}": OffsetSpec.for_timestamp(q) for q in queries(base)})
        mo, mts = expected_max(tss)
        for label, spec in specs.items():
            info = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(15)
            if label == "earliest":
                want = (0, None)
            elif label == "latest":
                want = (len(tss), None)
            elif label == "max_timestamp":
                want = (mo, mts)
            else:
                e = expected_for(tss, base + int(label[1:]))
                want = e if e else (-1, -1)
            got = (info.offset, info.timestamp if want[1] is not None else None)
            if got != want:
                problems.append(f"p{part} AdminClient.list_offsets {label}: (offset, ts) = {got}, expected {want}")
    assert not problems, "\n".join(problems)


def test_kafka_python_offsets_for_times(bootstrap_servers, ts_topic):
    from kafka import KafkaConsumer, TopicPartition

    topic, base, stamps = ts_topic
    problems = []
    c = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=30_000)
    try:
        tps = [TopicPartition(topic, p) for p in stamps]
        begin, end = c.beginning_offsets(tps), c.end_offsets(tps)
        for tp in tps:
            if begin[tp] != 0 or end[tp] != len(stamps[tp.partition]):
                problems.append(f"p{tp.partition} beginning/end {begin[tp]}/{end[tp]}")
        for q in queries(base):
            res = c.offsets_for_times({tp: q for tp in tps})
            for tp in tps:
                want = expected_for(stamps[tp.partition], q)
                got = res[tp]
                got_t = None if got is None else (got.offset, got.timestamp)
                if got_t != want:
                    problems.append(f"p{tp.partition} offsets_for_times(T{q - base:+d}) = {got_t}, expected {want}")
    finally:
        c.close()
    assert not problems, "\n".join(problems)


def test_aiokafka_offsets_for_times(bootstrap_servers, ts_topic):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic, base, stamps = ts_topic

    async def run() -> list[str]:
        problems = []
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in stamps]
            begin, end = await c.beginning_offsets(tps), await c.end_offsets(tps)
            for tp in tps:
                if begin[tp] != 0 or end[tp] != len(stamps[tp.partition]):
                    problems.append(f"p{tp.partition} beginning/end {begin[tp]}/{end[tp]}")
            for q in queries(base):
                res = await c.offsets_for_times({tp: q for tp in tps})
                for tp in tps:
                    want = expected_for(stamps[tp.partition], q)
                    got = res[tp]
                    got_t = None if got is None else (got.offset, got.timestamp)
                    if got_t != want:
                        problems.append(f"p{tp.partition} offsets_for_times(T{q - base:+d}) = {got_t}, "
                                        f"expected {want}")
        finally:
            await c.stop()
        return problems

    problems = asyncio.run(run())
    assert not problems, "\n".join(problems)
