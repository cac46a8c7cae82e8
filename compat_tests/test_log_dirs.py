"""Several log.dirs (JBOD) and AlterReplicaLogDirs (KIP-113) through kafka-python's admin client: a partition
moves to the other directory while confluent-kafka produces to it, no acknowledged record is lost or duplicated,
DescribeLogDirs shows it in its new place (and the copy as a future replica while it moves), and the move
survives a restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient

from compat_tests.conftest import create_topic


def _dirs_of(admin: KafkaAdminClient, topic: str) -> dict[str, tuple[bool, int]]:
    """log dir -> (is future, offset lag) of ``topic``'s partition 0, from DescribeLogDirs."""
    out = {}
    for result in admin.describe_log_dirs():
        for entry in result["log_dirs"]:
            for t in entry["topics"]:
                if t["name"] != topic:
                    continue
                for p in t["partitions"]:
                    if p["partition_index"] == 0:
                        out[entry["log_dir"]] = (p["is_future_key"], p["offset_lag"])
    return out


def _read_all(bootstrap: str, topic: str, expected: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < expected and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            seen.append(int(m.value().split(b" ")[0]))
    consumer.close()
    return seen


def test_partition_moves_to_another_log_dir_while_written(kbroker_factory, tmp_path: Path) -> None:
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    broker = kbroker_factory(overrides={"log.dirs": ",".join(str(d) for d in dirs)})
    bootstrap = broker.bootstrap
    topic = "moving"
    create_topic(bootstrap, topic, 1, {"segment.bytes": "1048576"})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        where = _dirs_of(admin, topic)
        assert len(where) == 1, where
        source = next(iter(where))
        target = str(dirs[1]) if source == str(dirs[0]) else str(dirs[0])

        acked: list[int] = []
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                                 "enable.idempotence": True})

            def delivered(err, msg) -> None:  # noqa: ANN001
                if err is None:
                    acked.append(int(msg.value().split(b" ")[0]))
                else:
                    errors.append(str(err))

            i = 0
            while not stop.is_set() and i < 200_000:
                producer.produce(topic, str(i).encode() + b" " + b"x" * 1000, partition=0, on_delivery=delivered)
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    time.sleep(0.005)
            producer.flush(30)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while len(acked) < 5000 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(acked) >= 5000, f"only {len(acked)} records acknowledged"
            (error,) = admin.alter_replica_log_dirs({(topic, 0, broker.node_id): target}).values()
            assert error.__name__ == "NoError"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                where = _dirs_of(admin, topic)
                if list(where) == [target] and not where[target][0]:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"the partition did not move to {target}: {where}")
            moved_at = len(acked)
            deadline = time.monotonic() + 30
            while len(acked) < moved_at + 2000 and time.monotonic() < deadline:
                time.sleep(0.1)  # written in its new directory too
        finally:
            stop.set()
            thread.join(60)
        assert not errors, errors[:3]
        assert not (Path(source) / f"{topic}-0").exists()
        segments = list((Path(target) / f"{topic}-0").glob("*.log"))
        assert len(segments) > 3, segments  # the 1 MiB segments came along, not only the active one
        values = sorted(acked)
        assert values == list(range(len(values))), "the producer's acknowledged numbers have gaps"
        assert _read_all(bootstrap, topic, len(values)) == values

        broker.restart()
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)  # a fresh client: the old one's node is gone
        assert list(_dirs_of(admin, topic)) == [target]
        assert _read_all(bootstrap, topic, len(values)) == values
    finally:
        admin.close()


@pytest.mark.kafka_reference
def test_alter_replica_log_dirs_errors(kbroker_factory, tmp_path: Path) -> None:
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    broker = kbroker_factory(overrides={"log.dirs": ",".join(str(d) for d in dirs)})
    create_topic(broker.bootstrap, "stays", 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        def outcome(assignments) -> str:  # noqa: ANN001
            (error,) = admin.alter_replica_log_dirs(assignments).values()
            return error.__name__

        assert outcome({("stays", 0, broker.node_id): str(tmp_path / "elsewhere")}) == "LogDirNotFoundError"
        assert outcome({("absent", 0, broker.node_id): str(dirs[0])}) == "UnknownTopicOrPartitionError"
        where = _dirs_of(admin, "stays")
        assert outcome({("stays", 0, broker.node_id): next(iter(where))}) == "NoError"
        assert _dirs_of(admin, "stays") == where
    finally:
        admin.close()


def test_reassign_partitions_tool_moves_and_verifies_log_dirs(kbroker_factory, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    broker = kbroker_factory(overrides={"log.dirs": ",".join(str(d) for d in dirs)})
    create_topic(broker.bootstrap, "tool", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(500):
        producer.produce("tool", str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        where = _dirs_of(admin, "tool")  # partition 0's directory
        source = next(iter(where))
        target = str(dirs[1]) if source == str(dirs[0]) else str(dirs[0])
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tool", "partition": 0, "replicas": [broker.node_id], "log_dirs": [target]}]}))

        def tool(action: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "kbroker.cli.reassign_partitions", "--bootstrap-server",
                                   broker.bootstrap, action, "--reassignment-json-file", str(plan)],
                                  capture_output=True, text=True, timeout=60)

        out = tool("--execute")
        assert out.returncode == 0, out.stderr
        assert f"Successfully started log directory move for: tool-0-{broker.node_id}" in out.stdout
        deadline = time.monotonic() + 30
        while True:
            out = tool("--verify")
            assert out.returncode == 0, out.stderr
            if f"Reassignment of replica tool-0-{broker.node_id} completed successfully." in out.stdout:
                break
            assert time.monotonic() < deadline, out.stdout
            time.sleep(0.3)
        assert list(_dirs_of(admin, "tool")) == [target]
        assert sorted(int(v) for v in _read_values(broker.bootstrap, "tool", 0, 250)) == list(range(0, 500, 2))
    finally:
        admin.close()


def _read_values(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    consumer.close()
    return out
