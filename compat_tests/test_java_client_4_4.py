"""The Java client kafka-clients 4.4.0 against kbroker, with the API versions Kafka 4.4.0 added.

The drivers of the suite (``compat_tests/java/TxnDriver.java``, ``GroupDriver.java``) compiled against
kafka-clients 4.4.0 (``scripts/fetch_jars.sh clients44`` -> ``.cache/jars-4.4``) run a transactional
produce, the consume-transform-produce loop (``sendOffsetsToTransaction``) and group deletions through a
recording TCP relay that kbroker advertises as its listener, so every request the client sends is seen. The
test checks the answers and that the client used what kbroker advertises: ApiVersions v5 carrying this
cluster's id and node id (KIP-1242), TxnOffsetCommit v6 (KIP-1319) and DeleteGroups v3. The whole suite runs
with this client too: ``KBROKER_JAVA_CLIENT=4.4.0`` (``compat_tests/clients.py``).
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import socket
import subprocess
import threading
from typing import Any, Iterator

import pytest

from compat_tests.clients import JAVA_DIR, REPO_ROOT
from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS, ApiKey
from kbroker.protocol.headers import decode_request_header
from kbroker.testing import free_port

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.kbroker_only("Apache Kafka 4.3.1, the reference, has none of the 4.4.0 versions")]

JARS_DIR = REPO_ROOT / ".cache" / "jars-4.4"
CLASSES_DIR = JAVA_DIR / "classes" / "kafka-clients-4.4.0"
SOURCES = [JAVA_DIR / "TxnDriver.java", JAVA_DIR / "GroupDriver.java"]


@pytest.fixture(scope="module")
def java44() -> list[str]:
    """The java command prefix with the drivers compiled against kafka-clients 4.4.0."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless")
    if not (JARS_DIR / "kafka-clients-4.4.0.jar").is_file() or not (JARS_DIR / ".resolved").is_file():
        r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "fetch_jars.sh"), "clients44"], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0 or not (JARS_DIR / "kafka-clients-4.4.0.jar").is_file():
            pytest.fail(f"scripts/fetch_jars.sh clients44 failed (exit {r.returncode}):\n{r.stderr[-3000:]}",
                        pytrace=False)
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    with open(CLASSES_DIR / ".compile-44.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        newest = max(s.stat().st_mtime for s in SOURCES)
        classes = [CLASSES_DIR / (s.stem + ".class") for s in SOURCES]
        if not all(c.exists() and c.stat().st_mtime >= newest for c in classes):
            r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                                str(JARS_DIR / "*"), *map(str, SOURCES)], capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                pytest.fail(f"javac against kafka-clients 4.4.0 failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
            os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")])]


class RecordingRelay:
    """Relays 127.0.0.1:``port`` to the broker and records, per client request frame, (api key, version) and
    ApiVersions v5's (ClusterId, NodeId). Bytes pass unchanged both ways."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.target: tuple[str, int] | None = None
        self.requests: collections.Counter[tuple[int, int]] = collections.Counter()
        self.api_versions_ids: list[tuple[str | None, int]] = []
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", port))
        self._sock.settimeout(0.5)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, target: tuple[str, int]) -> None:
        self.target = target
        self._spawn(self._accept)

    def _spawn(self, fn: Any, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
            client.settimeout(None)
            self._spawn(self._pump, client, upstream, True)
            self._spawn(self._pump, upstream, client, False)

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if record:
                    buf += data
                    while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                        n = int.from_bytes(buf[:4], "big")
                        self._record(buf[4:4 + n])
                        buf = buf[4 + n:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _record(self, frame: bytes) -> None:
        key, version = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
        ids = None
        if key == ApiKey.API_VERSIONS and version >= 5:
            request, _ = codec.decode(REQUESTS[key], frame, version, decode_request_header(frame).body_offset)
            ids = (request.cluster_id, request.node_id)
        with self._lock:
            self.requests[(key, version)] += 1
            if ids is not None:
                self.api_versions_ids.append(ids)

    def versions(self, key: int) -> set[int]:
        with self._lock:
            return {v for k, v in self.requests if k == key}

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(5)


@pytest.fixture
def relayed_broker(kbroker_factory) -> Iterator[tuple[Any, RecordingRelay]]:
    port = free_port()
    relay = RecordingRelay(port)
    try:
        broker = kbroker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        relay.start(("127.0.0.1", broker.port))
        yield broker, relay
    finally:
        relay.close()


def run(java: list[str], *args: str, timeout: float = 120) -> list[dict[str, Any]]:
    r = subprocess.run(java + list(args), capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0, f"{args[:2]} exited {r.returncode}: {events[-3:]}\n{r.stderr[-3000:]}"
    return events


def test_java_4_4_transactions_and_groups_use_the_new_versions(java44, relayed_broker) -> None:
    broker, relay = relayed_broker
    boot = f"127.0.0.1:{relay.port}"
    txns = [e for e in run(java44, "TxnDriver", "produce", "--bootstrap", boot, "--topic", "in44", "--txn-id", "p44",
                           "--transactions", "3", "--per-txn", "4") if e.get("event") == "txn"]
    assert [t["result"] for t in txns] == ["commit"] * 3
    events = run(java44, "TxnDriver", "transform", "--bootstrap", boot, "--input", "in44", "--output", "out44",
                 "--group", "g44", "--txn-id", "t44", "--idle-ms", "4000", timeout=180)
    assert events[-1] == {"event": "done", "total": 12}, events[-3:]
    deleted = run(java44, "GroupDriver", "delete-group", "--bootstrap", boot, "--group", "g44")
    assert deleted[-1] == {"event": "deleted-group", "error": None}
    missing = run(java44, "GroupDriver", "delete-group", "--bootstrap", boot, "--group", "no-such-group")
    assert missing[-1] == {"event": "deleted-group", "error": "GroupIdNotFoundException"}

    assert relay.versions(ApiKey.API_VERSIONS) <= {3, 5} and 5 in relay.versions(ApiKey.API_VERSIONS)
    # once it knows the cluster, the client names the cluster and node it means; kbroker accepted them
    meta = (broker.log_dirs / "meta.properties").read_text()
    cluster_id = next(line.split("=", 1)[1] for line in meta.splitlines() if line.startswith("cluster.id="))
    named = [ids for ids in relay.api_versions_ids if ids != (None, -1)]
    assert named and set(named) == {(cluster_id, 1)}, relay.api_versions_ids
    assert relay.versions(ApiKey.TXN_OFFSET_COMMIT) == {6}
    assert relay.versions(ApiKey.DELETE_GROUPS) == {3}
