"""Disk full on one log directory, with real clients (issue: reliability of one node).

A small tmpfs is the second log directory (the first, and the metadata directory, are ordinary ones). A
producer fills it until writes fail. Checked: no acknowledged record is ever lost; the full directory goes
offline (its partition answers KAFKA_STORAGE_ERROR, DescribeLogDirs reports it) while the other directory
keeps serving; once space is freed, a restart brings every acknowledged record back, each exactly once, at the
offset the producer was given. Needs root (it mounts a tmpfs).
"""

from __future__ import annotations

import os
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.cli._wire import Connection, split_hostport
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeLogDirsRequest, FetchRequest

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")]

TMPFS_MB = 12
FILLER_MB = 3
VALUE = 1000


@pytest.fixture
def small_dir(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mnt)], check=True)
    filler = mnt / "filler"
    filler.write_bytes(os.urandom(FILLER_MB * 1024 * 1024))
    try:
        yield mnt, filler
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def partition_dirs(root: Path, topic: str) -> set[int]:
    """The partitions of ``topic`` with a directory in ``root`` (a future copy, ``<topic>-<p>.<id>-future``, is not
    one yet)."""
    prefix = topic + "-"
    return {int(p.name[len(prefix):]) for p in root.iterdir()
            if p.is_dir() and p.name.startswith(prefix) and p.name[len(prefix):].isdigit()}


def one_partition_on(broker, small: Path, big: Path, topic: str) -> int:  # noqa: ANN001
    """The partition of the 2-partition ``topic`` that lives on ``small``. Kafka may place both on one directory
    (it picks directories its own way): then partition 0 is moved to ``small`` or 1 to ``big`` with
    AlterReplicaLogDirs."""
    deadline = time.monotonic() + 30  # Kafka creates the logs a moment after CreateTopics has answered
    while time.monotonic() < deadline and len(partition_dirs(small, topic) | partition_dirs(big, topic)) < 2:
        time.sleep(0.2)
    here = partition_dirs(small, topic)
    if len(here) != 1:
        from kafka.admin import KafkaAdminClient

        move = (topic, 0, broker.node_id), small
        if here:
            move = (topic, 1, broker.node_id), big
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            errors = admin.alter_replica_log_dirs({move[0]: str(move[1])})
        finally:
            admin.close()
        assert [e.__name__ for e in errors.values()] == ["NoError"], errors
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(partition_dirs(small, topic)) != 1:
            time.sleep(0.2)
    on_small = partition_dirs(small, topic)
    assert len(on_small) == 1, "one partition on each log directory"
    return on_small.pop()


def describe_log_dirs(bootstrap: str) -> dict[str, int]:
    host, port = split_hostport(bootstrap)
    conn = Connection(host, port, 10.0, "disk-full-test")
    try:
        resp = conn.send(DescribeLogDirsRequest(topics=None))
    finally:
        conn.close()
    return {r.log_dir: r.error_code for r in resp.results}


def fetch_error(bootstrap: str, topic_id: bytes, partition: int) -> int:
    host, port = split_hostport(bootstrap)
    conn = Connection(host, port, 10.0, "disk-full-test")
    try:
        req = FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchRequest.FetchTopic(
            topic_id=topic_id, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=0,
                                                                       partition_max_bytes=1024)])])
        resp = conn.send(req, 13)
    finally:
        conn.close()
    return resp.responses[0].partitions[0].error_code


def read_partition(bootstrap: str, topic: str, partition: int, until: int) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False,
                  "fetch.max.bytes": 4 * 1024 * 1024})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.time() + 60
    while time.time() < deadline and (not out or out[-1][0] < until - 1):
        m = c.poll(0.5)
        if m is None:
            continue
        assert not m.error() or m.error().code() == KafkaError._PARTITION_EOF, m.error()
        if not m.error():
            out.append((m.offset(), m.value()))
    c.close()
    return out


@pytest.mark.parametrize("acks", ["all", "1"])
def test_disk_full_loses_no_acknowledged_record(kbroker_factory, small_dir, tmp_path, acks):
    small, filler = small_dir
    big = tmp_path / "big"
    broker = kbroker_factory(overrides={"log.dirs": f"{big},{small}", "metadata.log.dir": str(big),
                                        "log.segment.bytes": str(2 * 1024 * 1024)})
    topic = f"full-{acks}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p_small = one_partition_on(broker, small, big, topic)
    p_big = 1 - p_small

    acked: dict[int, bytes] = {}
    failed: list[str] = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(err.name())

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                         "message.timeout.ms": 6000, "linger.ms": 5, "retries": 3 if acks == "1" else 2147483647})
    sent = 0
    limit = (TMPFS_MB + 2) * 1024 * 1024 // VALUE
    while sent < limit and not failed:
        producer.produce(topic, f"{sent:08d}".encode().ljust(VALUE, b"x"), partition=p_small, on_delivery=report)
        sent += 1
        if sent % 500 == 0:
            producer.poll(0)
    producer.flush(30)
    assert acked, "nothing was acknowledged before the directory filled up"
    assert failed, f"the {TMPFS_MB} MB directory never filled ({len(acked)} acknowledged)"

    # the broker still serves: the other directory takes writes and reads
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    ok: list[object] = []
    p2.produce(topic, b"still-here", partition=p_big, on_delivery=lambda err, msg: ok.append(err))
    p2.flush(20)
    assert ok == [None]
    assert read_partition(broker.bootstrap, topic, p_big, 1) == [(0, b"still-here")]
    dirs = describe_log_dirs(broker.bootstrap)
    assert dirs[os.path.abspath(small)] == ErrorCode.KAFKA_STORAGE_ERROR
    assert dirs[os.path.abspath(big)] == 0
    uid = admin.describe_topics(TopicCollection([topic]))[topic].result(10).topic_id
    topic_id = struct.pack(">qq", uid.get_most_significant_bits(), uid.get_least_significant_bits())
    assert fetch_error(broker.bootstrap, topic_id, p_small) == ErrorCode.KAFKA_STORAGE_ERROR
    log = broker.log_tail(2000)
    assert f"Log directory {os.path.abspath(small)} is offline" in log
    assert "Traceback" not in log

    # free space, restart: every acknowledged record is back, once, at its offset
    filler.unlink()
    assert broker.stop() == 0
    broker.start()
    got = read_partition(broker.bootstrap, topic, p_small, max(acked) + 1)
    got_map = dict(got)
    assert len(got_map) == len(got), "an offset was returned twice"
    missing = [o for o in acked if got_map.get(o) != acked[o]]
    assert missing == [], f"{len(missing)} acknowledged records lost, first {missing[:5]}"
    values = [v[:8] for _, v in got]
    assert len(values) == len(set(values)), "a record is stored twice"
    # and the directory takes writes again
    p3 = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    again: list[object] = []
    p3.produce(topic, b"after", partition=p_small, on_delivery=lambda err, msg: again.append((err, msg.offset())))
    p3.flush(20)
    assert again and again[0][0] is None and again[0][1] == (max(got_map) + 1)
    print(f"acks={acks}: {len(acked)} acknowledged before the directory filled, {len(failed)} failed "
          f"({sorted(set(failed))}), {len(got)} read back after the restart")


@pytest.mark.parametrize("acks", ["all", "1"])
def test_disk_full_java_client(kbroker_factory, small_dir, tmp_path, get_client, acks):
    from compat_tests.clients import ProduceOptions
    from compat_tests.records import RecordSpec

    java = get_client("java")
    small, filler = small_dir
    big = tmp_path / "big"
    broker = kbroker_factory(overrides={"log.dirs": f"{big},{small}", "metadata.log.dir": str(big),
                                        "log.segment.bytes": str(2 * 1024 * 1024)})
    topic = f"fullj-{acks}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p_small = one_partition_on(broker, small, big, topic)
    count = 2 * (TMPFS_MB + 1) * 1024 * 1024 // VALUE
    spec = RecordSpec.new(f"j{acks}", count, partitions=2, pad=VALUE, nulls=False)
    result = java.produce(broker.bootstrap, topic, spec, ProduceOptions(acks=acks, idempotence=acks == "all",
                                                                         linger_ms=5))
    on_small = [a for a in result.acks if spec.partition(a.index) == p_small]
    acked = {a.offset: a.index for a in on_small if a.error is None}
    failed = [a.error for a in on_small if a.error is not None]
    assert acked and failed, (len(acked), len(failed))
    assert all(a.error is None for a in result.acks if spec.partition(a.index) != p_small), \
        "the partition on the healthy directory failed too"
    assert describe_log_dirs(broker.bootstrap)[os.path.abspath(small)] == ErrorCode.KAFKA_STORAGE_ERROR

    filler.unlink()
    assert broker.stop() == 0
    broker.start()
    got = dict(read_partition(broker.bootstrap, topic, p_small, max(acked) + 1))
    lost = [o for o, i in acked.items() if got.get(o) != spec.value(i)]
    assert lost == [], f"{len(lost)} acknowledged records lost or changed, first offsets {lost[:5]}"
    print(f"java acks={acks}: {len(acked)} acknowledged on the full directory, {len(failed)} failed "
          f"({sorted(set(f.split(':')[0] for f in failed))}), all read back after the restart")
