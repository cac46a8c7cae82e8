"""Crash and restart: what a producer saw acknowledged is there afterwards, at the same offsets.

These tests start their own kbroker (``kbroker_factory``) because they kill it; on other targets they are
skipped. ``log.flush.interval.messages=1`` makes kbroker fsync before acknowledging, as the brief asks;
one test also checks the page-cache guarantee Kafka gives without fsync (a killed *process* loses
nothing it acknowledged, since the data was already written to the OS).
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid

import pytest

from compat_tests import wire
from compat_tests.clients import ConfluentClient, ProduceOptions, create_topic
from compat_tests.records import Ack, Consumed, RecordSpec, verify_round_trip

pytestmark = pytest.mark.timeout(300)

DURABLE = {"log.flush.interval.messages": "1"}
PARTITIONS = 3


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    out = {}
    with wire.KafkaConnection.to(bootstrap) as conn:
        for p in range(partitions):
            res = wire.fetch_v4(conn, topic, p, 0, max_bytes=1, partition_max_bytes=1)
            assert res.error_code == wire.NONE, f"{topic}-{p}: fetch error {res.error_code}"
            out[p] = res.high_watermark
    return out


def consume_all(bootstrap: str, topic: str, partitions: int) -> tuple[list[Consumed], dict[int, int]]:
    hw = watermarks(bootstrap, topic, partitions)
    recs = ConfluentClient().consume(bootstrap, topic, sum(hw.values()), timeout=60)
    return recs, hw


def check_acked_survived(spec: RecordSpec, acked: dict[int, Ack], consumed: list[Consumed],
                         hw: dict[int, int], bootstrap: str, topic: str) -> None:
    problems = []
    at = {(c.partition, c.offset): c for c in consumed}
    if len(at) != len(consumed):
        problems.append("consumer returned duplicate offsets")
    for p, n in hw.items():
        offs = sorted(c.offset for c in consumed if c.partition == p)
        if offs != list(range(n)):
            problems.append(f"partition {p}: high watermark {n}, consumed offsets {offs[:10]}...{offs[-10:]}")
    for i, a in sorted(acked.items()):
        c = at.get((a.partition, a.offset))
        if c is None:
            problems.append(f"acked record #{i} (partition {a.partition} offset {a.offset}) is gone")
            continue
        want = (spec.key(i), spec.value(i), spec.headers(i), spec.timestamp(i))
        got = (c.key, c.value, c.headers, c.timestamp)
        if got != want:
            problems.append(f"partition {a.partition} offset {a.offset} holds {got[0]!r}/{got[3]}, "
                            f"acked record #{i} was {want[0]!r}/{want[3]}")
    # every stored record is one we sent (nothing torn or invented), identified by its idx header
    for c in consumed:
        idx = dict(c.headers).get("idx")
        i = int(idx) if idx is not None else -1
        if not (0 <= i < spec.count) or (c.key, c.value) != (spec.key(i), spec.value(i)):
            problems.append(f"partition {c.partition} offset {c.offset}: a record that was never produced")
    for p in range(PARTITIONS):
        batches, _ = wire.read_log(bootstrap, topic, p)
        bad = [b.base_offset for b in batches if not b.crc_ok or b.magic != 2]
        if bad:
            problems.append(f"partition {p}: invalid batches after recovery at {bad}")
    assert not problems, f"{len(acked)} acked records; after kill -9 + restart:\n  " + "\n  ".join(problems[:20])


def produce_after_restart(bootstrap: str, topic: str, hw: dict[int, int]) -> None:
    """New records go right after the recovered log end."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    got = []
    for part in range(PARTITIONS):
        p.produce(topic, key=b"after", value=b"restart", partition=part,
                  on_delivery=lambda err, msg: got.append((err, msg.partition(), msg.offset())))
    assert p.flush(30) == 0
    assert all(err is None for err, _, _ in got), got
    assert sorted((pa, off) for _, pa, off in got) == sorted(hw.items()), \
        f"first offsets after restart {sorted((pa, off) for _, pa, off in got)}, log ends were {sorted(hw.items())}"


def test_kill9_mid_stream_confluent(kbroker_factory):
    broker = kbroker_factory(DURABLE)
    topic = f"compat-kill9-confluent-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    spec = RecordSpec.new("kill9", 1_000_000, partitions=PARTITIONS, pad=300)
    acked: dict[int, Ack] = {}
    failed: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def on_delivery(i: int, err: object, msg: object) -> None:
        if err is None:
            acked[i] = Ack(i, msg.partition(), msg.offset(), msg.timestamp()[1])  # type: ignore[attr-defined]
        else:
            failed.append(i)

    def run() -> None:
        from confluent_kafka import Producer

        try:
            p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False,
                          "linger.ms": 5, "message.timeout.ms": 5000, "socket.timeout.ms": 5000,
                          "compression.type": "lz4"})
            i = 0
            while not stop.is_set():
                try:
                    p.produce(topic, key=spec.key(i), value=spec.value(i), headers=spec.headers(i),
                              timestamp=spec.timestamp(i), partition=spec.partition(i),
                              on_delivery=functools.partial(on_delivery, i))
                    i += 1
                except BufferError:
                    p.poll(0.01)
                p.poll(0)
                if i % 20 == 0:
                    time.sleep(0.002)  # a steady stream rather than one giant burst
            p.flush(20)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 90
    while len(acked) < 400 and time.monotonic() < deadline and t.is_alive():
        time.sleep(0.02)
    assert len(acked) >= 400, f"only {len(acked)} acks before the kill (errors {errors})"
    broker.kill()  # SIGKILL while records are in flight
    time.sleep(0.3)
    stop.set()
    t.join(60)
    assert not errors, errors
    snapshot = dict(acked)
    print(f"kill -9 after {len(snapshot)} acked records ({len(failed)} failed in flight)")

    broker.start()
    consumed, hw = consume_all(broker.bootstrap, topic, PARTITIONS)
    check_acked_survived(spec, snapshot, consumed, hw, broker.bootstrap, topic)
    produce_after_restart(broker.bootstrap, topic, hw)


def test_kill9_mid_stream_java(kbroker_factory, java_driver):
    broker = kbroker_factory(DURABLE)
    topic = f"compat-kill9-java-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    spec = RecordSpec.new("kill9-java", 1_000_000, partitions=PARTITIONS, pad=300)
    proc = java_driver.popen(["produce", "--bootstrap", broker.bootstrap, "--topic", topic,
                              "--count", str(spec.count), "--acks", "all", "--compression", "zstd",
                              "--idempotence", "false", "--linger-ms", "5", "--delay-ms", "1", *spec.java_args()])
    acked: dict[int, Ack] = {}
    lock = threading.Lock()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            if e.get("event") == "ack" and not e.get("error"):
                with lock:
                    acked[e["index"]] = Ack(e["index"], e["partition"], e["offset"], e["timestamp"])

    stderr: list[str] = []
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 120
        while len(acked) < 400 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert len(acked) >= 400, f"only {len(acked)} Java acks before the kill; stderr {''.join(stderr)[-2000:]}"
        broker.kill()
        time.sleep(0.5)  # acks that were already on the wire still count
    finally:
        proc.kill()
        proc.wait(10)
        t.join(10)
    with lock:
        snapshot = dict(acked)
    print(f"kill -9 after {len(snapshot)} acked records from the Java producer")

    broker.start()
    consumed, hw = consume_all(broker.bootstrap, topic, PARTITIONS)
    check_acked_survived(spec, snapshot, consumed, hw, broker.bootstrap, topic)
    produce_after_restart(broker.bootstrap, topic, hw)


def test_kill9_after_acks_without_fsync(kbroker_factory):
    """Default flush settings (no fsync per message): a killed process still keeps what it acknowledged,
    because Kafka writes to the OS before it acks. Only an OS crash may lose un-fsynced data."""
    broker = kbroker_factory()
    topic = f"compat-kill9-nofsync-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    spec = RecordSpec.new("nofsync", 300, partitions=PARTITIONS)
    produced = ConfluentClient().produce(broker.bootstrap, topic, spec, ProduceOptions(compression="gzip"))
    broker.kill()
    broker.start()
    consumed = ConfluentClient().consume(broker.bootstrap, topic, spec.count)
    verify_round_trip(spec, produced.acks, consumed)


def test_sigterm_clean_shutdown_and_restart(kbroker_factory):
    broker = kbroker_factory()
    topic = f"compat-sigterm-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    spec = RecordSpec.new("sigterm", 200, partitions=PARTITIONS)
    produced = ConfluentClient().produce(broker.bootstrap, topic, spec, ProduceOptions(compression="zstd"))
    t0 = time.monotonic()
    rc = broker.stop(timeout=30)
    took = time.monotonic() - t0
    assert rc == 0, f"SIGTERM: broker exited with {rc} after {took:.1f}s (expected a clean exit 0)\n" \
                    f"{broker.log_tail(40)}"
    broker.start()
    consumed = ConfluentClient().consume(broker.bootstrap, topic, spec.count)
    verify_round_trip(spec, produced.acks, consumed)
    hw = watermarks(broker.bootstrap, topic, PARTITIONS)
    assert hw == {p: sum(1 for i in range(spec.count) if spec.partition(i) == p) for p in range(PARTITIONS)}
    # the time index survived too: lookup by timestamp after the restart
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"compat-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        i = 100  # partition 1, offset 33
        tp = c.offsets_for_times([TopicPartition(topic, spec.partition(i), spec.timestamp(i))], timeout=10)[0]
        assert tp.offset == i // PARTITIONS, f"offsets_for_times after restart: {tp}"
    finally:
        c.close()
    produce_after_restart(broker.bootstrap, topic, hw)
