"""``kbroker --processes N`` (issue 13, item 3): one node as N broker processes and a controller process, used by
confluent-kafka as the cluster it is. The supervisor spreads partitions over the processes, restarts one killed
with -9 (its records still there), and stops every process on SIGTERM with exit code 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.cli.node_processes import CONTROLLER_NODE_ID, node_properties
from kbroker.testing.plugin import free_port_run

HOST = "127.0.0.1"


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _wait(cond, timeout: float, what: str):
    """Poll ``cond`` until it is true; a client error (the node not listening yet: its brokers start once the
    controller leads, ~5 s on a busy machine) counts as not yet."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = cond()
        except KafkaException as exc:
            value, last = None, exc
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last client error: {last})")


def test_node_properties_layout() -> None:
    props = {"listeners": "PLAINTEXT://localhost:9092", "advertised.listeners": "PLAINTEXT://localhost:9092",
             "log.dirs": "./kbroker-data", "process.roles": "broker,controller", "node.id": "1"}
    nodes = node_properties(props, 3)
    assert [n["node.id"] for n in nodes] == [str(CONTROLLER_NODE_ID), "1", "2", "3"]
    assert nodes[0]["process.roles"] == "controller" and nodes[0]["listeners"] == "CONTROLLER://localhost:9093"
    assert [n["listeners"] for n in nodes[1:]] == ["PLAINTEXT://localhost:9092", "PLAINTEXT://localhost:9094",
                                                   "PLAINTEXT://localhost:9095"]
    assert {n["cluster.id"] for n in nodes} == {nodes[0]["cluster.id"]}
    assert len({n["log.dirs"] for n in nodes}) == 4
    assert all(n["controller.quorum.voters"] == f"{CONTROLLER_NODE_ID}@localhost:9093" for n in nodes)
    with pytest.raises(ValueError):
        node_properties(dict(props, listeners="PLAINTEXT://a:1,SSL://a:2"), 2)


@pytest.mark.kbroker_only("kbroker --processes: one node as several kbroker processes under kbroker's supervisor")
def test_two_processes_serve_one_cluster(tmp_path: Path) -> None:
    port = free_port_run(2)  # broker 1, the controller, broker 2
    bootstrap = f"{HOST}:{port}"
    log_file = open(tmp_path / "node.log", "w")
    sup = subprocess.Popen([sys.executable, "-m", "kbroker.cli.main", "--processes", "2",
                            "--override", f"listeners=PLAINTEXT://{bootstrap}",
                            "--override", f"log.dirs={tmp_path / 'data'}"],
                           stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: len(admin.list_topics(timeout=5).brokers) == 2, 60, "two brokers in Metadata")
        admin.create_topics([NewTopic("spread", 4, 1)])["spread"].result(30)
        leaders = _wait(lambda: {p.leader for p in admin.list_topics("spread", timeout=5)
                                 .topics["spread"].partitions.values()} or None, 30, "leaders")
        assert leaders == {1, 2}, f"the 4 partitions are led by {leaders}, not spread over both processes"

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(2000):
            producer.produce("spread", str(i).encode(), partition=i % 4)
        assert producer.flush(30) == 0

        # kill -9 the process of broker 2: the supervisor starts it again, its records are still there
        children = _wait(lambda: len(_children(sup.pid)) == 3 and _children(sup.pid), 10, "three child processes")
        broker2 = [c for c in children if "node.id=2" in open(f"/proc/{c}/cmdline").read().replace("\0", " ")]
        assert len(broker2) == 1
        os.kill(broker2[0], signal.SIGKILL)
        _wait(lambda: broker2[0] not in _children(sup.pid) and len(_children(sup.pid)) == 3, 30,
              "broker 2 restarted by the supervisor")

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spread-readers",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["spread"])
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 2000 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                seen.append(int(m.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("spread", p) for p in range(4)], timeout=30)
        consumer.close()
        assert sorted(seen) == list(range(2000)), f"{len(seen)} records read, {len(set(seen))} distinct"
        assert [tp.offset for tp in committed] == [500, 500, 500, 500]
    finally:
        running = _children(sup.pid)
        sup.send_signal(signal.SIGTERM)
        try:
            code = sup.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            raise
        finally:
            log_file.close()
    assert code == 0, (tmp_path / "node.log").read_text()[-3000:]
    assert running and not [pid for pid in running if os.path.exists(f"/proc/{pid}")], "a child outlived the node"
