"""Every file kbroker reads at start-up, damaged four ways (empty, garbage bytes, truncated, one flipped byte):
the broker either recovers safely with a WARN line naming the file and serves every record, or refuses to start
with one ERROR line naming the file and exit code 1 — never a traceback, never a topic re-created under a new
id. The table in docs/operations.md ("Damaged files at start-up") says which file gets which."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[1]
RECORDS = 200

DAMAGES = {
    "empty": lambda b: b"",
    "garbage": lambda b: bytes([0xFF, 0xFE, 0x80, 0x00]) * 20,
    "truncated": lambda b: b[: len(b) // 2],
    "flip": lambda b: b[: len(b) // 3] + bytes([b[len(b) // 3] ^ 0x55]) + b[len(b) // 3 + 1:] if b else b,
}

# file -> (path pattern in the data dir, {damage: "recover" | "refuse" | "recover-quiet" | "data-loss"})
R, Q, X = "recover", "recover-quiet", "refuse"
FILES = {
    "recovery-point-offset-checkpoint": ("recovery-point-offset-checkpoint", dict(empty=R, garbage=R, truncated=R, flip=Q)),
    "replication-offset-checkpoint": ("replication-offset-checkpoint", dict(empty=R, garbage=R, truncated=R, flip=Q)),
    "log-start-offset-checkpoint": ("log-start-offset-checkpoint", dict(empty=R, garbage=R, truncated=R, flip=Q)),
    "leader-epoch-checkpoint": ("t-0/leader-epoch-checkpoint", dict(empty=R, garbage=R, truncated=R, flip=R)),
    "partition.metadata": ("t-0/partition.metadata", dict(empty=R, garbage=R, truncated=R, flip=R)),
    "producer snapshot": ("t-0/*.snapshot", dict(empty=R, garbage=R, truncated=R, flip=R)),
    "offset index": ("t-0/00000000000000000000.index", dict(empty=Q, garbage=Q, truncated=Q, flip=Q)),
    "time index": ("t-0/00000000000000000000.timeindex", dict(empty=Q, garbage=Q, truncated=Q, flip=Q)),
    "clean-shutdown marker": (".kafka_cleanshutdown", dict(empty=Q, garbage=Q, truncated=Q, flip=Q)),
    "quorum-state": ("__cluster_metadata-0/quorum-state", dict(empty=R, garbage=R, truncated=R, flip=R)),
    "metadata leader-epoch-checkpoint": ("__cluster_metadata-0/leader-epoch-checkpoint",
                                         dict(empty=R, garbage=R, truncated=R, flip=R)),
    "metadata log": ("__cluster_metadata-0/00000000000000000000.log", dict(empty=X, garbage=X, truncated=R, flip=X)),
    "meta.properties": ("meta.properties", dict(empty=X, garbage=X, truncated=X, flip=X)),
}


def start(data: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [sys.executable, "-m", "kbroker.cli.main", "--override", f"log.dirs={data}",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=data.parent,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    return proc, port


def wait_started(proc: subprocess.Popen, timeout: float = 60) -> tuple[bool, str]:
    out = ""
    os.set_blocking(proc.stdout.fileno(), False)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line:
            out += line
            if "kbroker started" in line:
                return True, out
            continue
        if proc.poll() is not None:
            out += proc.stdout.read() or ""
            return False, out
        time.sleep(0.05)
    raise AssertionError(f"neither started nor exited in {timeout} s:\n{out}")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    return proc.stdout.read() or ""


def read_all(bootstrap: str) -> dict[int, list[bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    deadline = time.time() + 20
    while time.time() < deadline and sum(map(len, got.values())) < RECORDS:
        m = c.poll(0.3)
        if m is not None and not m.error():
            got[m.partition()].append(m.value())
    c.close()
    return got


@pytest.fixture(scope="module")
def base_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("damaged")
    data = root / "base"
    proc, port = start(data)
    ok, out = wait_started(proc)
    assert ok, out
    bootstrap = f"127.0.0.1:{port}"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 2, 1)])["t"].result(30)
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(RECORDS):
            p.produce("t", f"v{i}".encode(), partition=i % 2)
        p.flush(30)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committed", "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("t", 0, 0)])
        assert c.poll(10) is not None
        c.commit(asynchronous=False)
        c.close()
        ids = {tp.topic: tp for tp in admin.list_topics(timeout=10).topics.values()}
        assert "t" in ids
    finally:
        stop(proc)
    return data


CASES = [(f, d) for f in FILES for d in DAMAGES]


@pytest.mark.parametrize("fname,damage", CASES, ids=[f"{f}-{d}".replace(" ", "_") for f, d in CASES])
def test_damaged_file(base_data, tmp_path, fname, damage):
    pattern, expect = FILES[fname]
    expected = expect[damage]
    data = tmp_path / "data"
    shutil.copytree(base_data, data)
    matches = sorted(glob.glob(str(data / pattern)))
    assert matches, f"{pattern} not found in the data directory"
    target = Path(matches[-1])
    target.write_bytes(DAMAGES[damage](target.read_bytes()))
    topic_id_before = (base_data / "t-0" / "partition.metadata").read_text()
    proc, port = start(data)
    started, out = wait_started(proc)
    if started:
        got = read_all(f"127.0.0.1:{port}")
        out += stop(proc)
    assert "Traceback" not in out, out
    if expected == X:
        assert not started, f"started on a damaged {fname}:\n{out}"
        assert proc.returncode == 1
        errors = [ln for ln in out.splitlines() if " ERROR " in ln]
        assert len(errors) == 1, out
        assert target.name in errors[0] or str(target.parent) in errors[0], errors[0]
        return
    assert started, f"did not start with a damaged {fname} ({damage}):\n{out}"
    assert got[0] == [f"v{i}".encode() for i in range(0, RECORDS, 2)], (len(got[0]), out[-2000:])
    assert got[1] == [f"v{i}".encode() for i in range(1, RECORDS, 2)]
    assert (data / "t-0" / "partition.metadata").read_text() == topic_id_before, "topic re-created under a new id"
    if expected == R:
        warns = [ln for ln in out.splitlines() if " WARNING " in ln and
                 (target.name in ln or str(target.parent) in ln or target.name.split(".")[0] in ln)]
        assert warns, f"no WARN line names the damaged {target.name}:\n{out}"
