#!/usr/bin/env python3
"""Record the Kafka frames real clients exchange with a broker: golden files for the codec tests.

A loopback TCP proxy (asyncio) sits between a client and the broker. It forwards every byte unchanged,
splits both directions into size-prefixed frames, pairs each response with its request by correlation id
(responses on a connection come in request order; a Produce with acks=0 gets none) and, when it stops,
writes a small selection of the frames to ``<out>/<client>/<api_snake>_<request|response>_v<N>_<nnn>.bin``:
the raw frame bytes without the 4-byte size prefix. A request and its response share ``nnn``.

The proxy rewrites nothing. For the client to keep talking through it after the bootstrap Metadata, the
broker itself must advertise the proxy's address: start it with
``advertised.listeners=PLAINTEXT://127.0.0.1:<proxy port>``.

Selection (kept small on purpose): per (client, API, version) at most ``--max-per-key`` request/response
pairs (default 2). The first pair is always kept; the second is the first later pair that adds something
(a new compression codec in a Produce request, records in a Fetch response, another Metadata or
ListOffsets shape, ...), else the first pair whose bytes differ from the first (correlation ids aside).
Pairs with a frame larger than ``--max-frame-bytes`` (64 KiB) are dropped.

Usage:
    # everything: start a kbroker and the proxy, drive every client through it, write tests/golden/
    .venv/bin/python scripts/capture_frames.py run [--clients java,confluent,kcat,kafka-python,aiokafka]

    # just the proxy, in front of a broker you started (advertising the proxy port), for one client:
    .venv/bin/python scripts/capture_frames.py proxy --listen 127.0.0.1:31002 --upstream 127.0.0.1:31001 \\
        --client myclient          # Ctrl-C (or SIGTERM) stops it and writes tests/golden/myclient/

``run`` needs Java 11+ (javac) and the jars from ``scripts/fetch_jars.sh`` for the Java client, kcat on
PATH, and confluent-kafka, kafka-python and aiokafka in this interpreter; a missing client is an error
unless ``--skip-missing``. It rewrites only the directories of the clients it captures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kbroker.protocol.api_keys import ApiKey  # noqa: E402

DEFAULT_OUT = REPO / "tests" / "golden"
MAX_FRAME_BYTES = 64 * 1024
MAX_PER_KEY = 2
CLIENTS = ("java", "confluent", "kcat", "kafka-python", "aiokafka")
JARS_DIR = Path(os.environ.get("KBROKER_JARS_DIR", REPO / ".cache" / "jars"))
JAVA_DRIVER = REPO / "compat_tests" / "java" / "KafkaDriver.java"


def api_snake(api_key: int) -> str:
    try:
        return ApiKey(api_key).name.lower()
    except ValueError:
        return f"api{api_key}"


# ============================================================================================ recording


@dataclass
class Exchange:
    """One request and (unless none came) its response, as raw frames without the size prefix."""

    client: str
    conn: int
    seq: int
    api_key: int
    api_version: int
    correlation_id: int
    request: bytes
    response: bytes | None = None
    at: float = 0.0  # time.monotonic() when the request passed the proxy


@dataclass
class Recorder:
    exchanges: list[Exchange] = field(default_factory=list)
    unmatched_responses: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ex: Exchange) -> None:
        with self.lock:
            self.exchanges.append(ex)


class _Conn:
    """Request/response pairing state of one proxied connection."""

    def __init__(self, client: str | None, conn_id: int, recorder: Recorder) -> None:
        self.client = client
        self.conn_id = conn_id
        self.recorder = recorder
        self.pending: list[Exchange] = []  # requests in send order still waiting for a response
        self.seq = 0

    def on_request(self, frame: bytes) -> None:
        if self.client is None or len(frame) < 8:
            return
        api_key, api_version, corr = struct.unpack_from(">hhi", frame, 0)
        ex = Exchange(self.client, self.conn_id, self.seq, api_key, api_version, corr, frame, at=time.monotonic())
        self.seq += 1
        self.pending.append(ex)
        self.recorder.add(ex)

    def on_response(self, frame: bytes) -> None:
        if self.client is None or len(frame) < 4:
            return
        (corr,) = struct.unpack_from(">i", frame, 0)
        # Responses come in request order; requests skipped over got none (Produce with acks=0).
        for i, ex in enumerate(self.pending):
            if ex.correlation_id == corr:
                ex.response = frame
                del self.pending[: i + 1]
                return
        self.recorder.unmatched_responses += 1
        print(f"capture: response with unknown correlation id {corr} on connection {self.conn_id}",
              file=sys.stderr)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_frame: Callable[[bytes], None]) -> None:
    """Forward size-prefixed frames from reader to writer unchanged, reporting each frame."""
    try:
        while True:
            try:
                head = await reader.readexactly(4)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    writer.write(exc.partial)
                return
            (size,) = struct.unpack(">i", head)
            if size < 0:  # not Kafka framing: pass the rest through untouched
                writer.write(head)
                while data := await reader.read(65536):
                    writer.write(data)
                return
            try:
                frame = await reader.readexactly(size)
            except asyncio.IncompleteReadError as exc:
                writer.write(head + exc.partial)
                return
            on_frame(frame)  # before forwarding: a response must never be seen before its request
            writer.write(head + frame)
            await writer.drain()
    except (ConnectionError, OSError):
        return
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError, RuntimeError):
            pass


class Proxy:
    """The recording proxy. ``client`` is the label given to connections accepted from now on (None: forward
    without recording, for setup traffic)."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], recorder: Recorder,
                 client: str | None = None) -> None:
        self.listen = listen
        self.upstream = upstream
        self.recorder = recorder
        self.client = client
        self.conn_count = 0
        self.server: asyncio.base_events.Server | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, self.listen[0], self.listen[1], reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.conn_count += 1
        state = _Conn(self.client, self.conn_count, self.recorder)
        try:
            try:
                breader, bwriter = await asyncio.open_connection(*self.upstream)
            except OSError as exc:
                print(f"capture: cannot reach the broker at {self.upstream}: {exc}", file=sys.stderr)
                cwriter.close()
                return
            await asyncio.gather(_pump(creader, bwriter, state.on_request),
                                 _pump(breader, cwriter, state.on_response))
            for w in (bwriter, cwriter):
                w.close()
        finally:
            self.tasks.discard(task)


class ProxyThread:
    """The proxy on its own event loop in a background thread (for ``run``, which drives blocking clients)."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="capture-proxy", daemon=True)

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# ============================================================================================ selection


def _batch_codecs(records: Any) -> set[int]:
    """Compression codecs (attributes & 7) of the record batches / message sets in ``records``."""
    buf = bytes(records or b"")
    codecs: set[int] = set()
    pos = 0
    while pos + 17 <= len(buf):
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        magic = buf[pos + 16]
        if magic == 2 and pos + 23 <= len(buf):
            codecs.add(struct.unpack_from(">h", buf, pos + 21)[0] & 7)
        elif magic in (0, 1) and pos + 18 <= len(buf):
            codecs.add(buf[pos + 17] & 7)
        pos += 12 + size
    return codecs


def signature(ex: Exchange) -> Any:
    """What makes a pair worth keeping next to another one of the same API and version (a hint only: the
    saved bytes never depend on it). Uses kbroker's decoder; anything it cannot read gets no signature."""
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import REQUESTS, RESPONSES
    from kbroker.protocol.headers import decode_request_header, response_header_version

    try:
        hdr = decode_request_header(ex.request)
        req, _ = codec.decode(REQUESTS[ex.api_key], ex.request, ex.api_version, hdr.body_offset)
        resp = None
        if ex.response is not None:
            pos = 4
            if response_header_version(ex.api_key, ex.api_version) == 1:
                pos = codec._skip_tagged(ex.response, pos)  # noqa: SLF001
            resp, _ = codec.decode(RESPONSES[ex.api_key], ex.response, ex.api_version, pos)
    except Exception:  # noqa: BLE001 - a hint only
        return None
    has_response = ex.response is not None
    if ex.api_key == ApiKey.PRODUCE:
        codecs: set[int] = set()
        for t in req.topic_data:
            for p in t.partition_data:
                codecs |= _batch_codecs(p.records)
        return ("produce", tuple(sorted(codecs)), req.acks, has_response)
    if ex.api_key == ApiKey.FETCH and resp is not None:
        codecs = set()
        for t in resp.responses:
            for p in t.partitions:
                codecs |= _batch_codecs(p.records)
        return ("fetch", tuple(sorted(codecs)))
    if ex.api_key == ApiKey.METADATA:
        return ("metadata", None if req.topics is None else bool(req.topics))
    if ex.api_key == ApiKey.LIST_OFFSETS:
        ts = {min(p.timestamp, 0) for t in req.topics for p in t.partitions}
        return ("list_offsets", tuple(sorted(ts)))
    return None


def expects_response(ex: Exchange) -> bool:
    """False only for a Produce request with acks=0."""
    if ex.api_key != ApiKey.PRODUCE:
        return True
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import REQUESTS
    from kbroker.protocol.headers import decode_request_header

    try:
        hdr = decode_request_header(ex.request)
        req, _ = codec.decode(REQUESTS[ex.api_key], ex.request, ex.api_version, hdr.body_offset)
    except Exception:  # noqa: BLE001
        return True
    return req.acks != 0


def select(exchanges: list[Exchange], max_per_key: int = MAX_PER_KEY,
           max_frame: int = MAX_FRAME_BYTES) -> dict[tuple[str, int, int], list[Exchange]]:
    """Pick at most ``max_per_key`` pairs per (client, api_key, version), in capture order."""
    groups: dict[tuple[str, int, int], list[Exchange]] = {}
    for ex in sorted(exchanges, key=lambda e: (e.client, e.conn, e.seq)):
        if len(ex.request) > max_frame or (ex.response is not None and len(ex.response) > max_frame):
            continue
        if ex.response is None and expects_response(ex):
            continue  # cut short (the connection closed while a long poll was pending)
        groups.setdefault((ex.client, ex.api_key, ex.api_version), []).append(ex)
    chosen: dict[tuple[str, int, int], list[Exchange]] = {}
    for key, cands in groups.items():
        picked: list[Exchange] = []
        sigs = set()
        for ex in cands:  # first: one pair per signature
            if len(picked) >= max_per_key:
                break
            s = signature(ex)
            if not picked or (s is not None and s not in sigs):
                picked.append(ex)
                sigs.add(s)

        def body(e: Exchange) -> tuple[bytes, bytes | None]:
            return e.request[8:], None if e.response is None else e.response[4:]

        for ex in cands:  # then: anything whose bytes differ
            if len(picked) >= max_per_key:
                break
            if ex not in picked and body(ex) not in {body(p) for p in picked}:
                picked.append(ex)
        chosen[key] = sorted(picked, key=lambda e: (e.conn, e.seq))
    return chosen


def write_golden(chosen: dict[tuple[str, int, int], list[Exchange]], out: Path, clients: list[str]) -> dict[str, Any]:
    """Replace ``out/<client>/*.bin`` for each of ``clients`` with the chosen frames; returns a summary."""
    summary: dict[str, Any] = {}
    for client in clients:
        d = out / client
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.bin"):
            old.unlink()
    for (client, api_key, version), exs in sorted(chosen.items()):
        if client not in clients:
            continue
        d = out / client
        for n, ex in enumerate(exs):
            stem = f"{api_snake(api_key)}_%s_v{version}_{n:03d}.bin"
            (d / (stem % "request")).write_bytes(ex.request)
            if ex.response is not None:
                (d / (stem % "response")).write_bytes(ex.response)
        row = summary.setdefault(client, {}).setdefault(api_snake(api_key), {})
        row[f"v{version}"] = {"request": len(exs), "response": sum(e.response is not None for e in exs)}
    return summary


# ============================================================================================ drivers


def free_port(lo: int = 30000, hi: int = 40000) -> int:
    for _ in range(200):
        port = random.randint(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def check(cond: bool, what: str) -> None:
    if not cond:
        raise RuntimeError(what)


def run_cmd(cmd: list[str], *, input: bytes | None = None, timeout: float = 120) -> str:
    r = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {r.returncode}:\n{r.stdout.decode(errors='replace')[-2000:]}"
                           f"\n{r.stderr.decode(errors='replace')[-3000:]}")
    return r.stdout.decode(errors="replace")


def setup_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic without recording (the proxy label is None while this runs)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=5).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            break
        time.sleep(0.1)
    del admin
    gc.collect()


def records(tag: str, n: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"key-{i}".encode(), f"{tag}:value-{i}|the quick brown fox jumps over the lazy dog".encode(),
             [("idx", str(i).encode()), ("src", tag.encode())]) for i in range(n)]


class JavaCapture:
    name = "java"

    def __init__(self, tmp: Path) -> None:
        self.classes = tmp / "java-classes"

    def available(self) -> str | None:
        if not shutil.which("java") or not shutil.which("javac"):
            return "no JDK (java, javac) on PATH"
        jars = list(JARS_DIR.glob("kafka-clients-*.jar"))
        if not jars:
            return f"no kafka-clients jar in {JARS_DIR} (run scripts/fetch_jars.sh)"
        return None

    def version(self) -> str:
        return ", ".join(sorted(p.name.removesuffix(".jar").replace("-clients-", "-clients ")
                                for p in JARS_DIR.glob("kafka-clients-*.jar")))

    def drive(self, bootstrap: str) -> None:
        self.classes.mkdir(parents=True, exist_ok=True)
        run_cmd(["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(self.classes), "-cp", str(JARS_DIR / "*"),
                 str(JAVA_DRIVER)], timeout=300)
        base = ["java", "-cp", f"{self.classes}{os.pathsep}{JARS_DIR / '*'}", "KafkaDriver"]
        t = "golden-java"
        b = ["--bootstrap", bootstrap]
        run_cmd(base + ["admin", "create-topic", *b, "--topic", t, "--partitions", "3",
                        "--config", "retention.ms=86400000"])
        run_cmd(base + ["admin", "describe-topic", *b, "--topic", t])
        run_cmd(base + ["admin", "describe-cluster", *b])
        run_cmd(base + ["admin", "describe-configs", *b, "--topic", t])
        base_ts = int(time.time() * 1000) - 60_000
        for i, codec in enumerate(("gzip", "lz4", "zstd")):
            run_cmd(base + ["produce", *b, "--topic", t, "--count", "12", "--partitions", "3", "--compression", codec,
                            "--tag", f"java-{codec}", "--start-index", str(12 * i), "--base-ts", str(base_ts)])
        out = run_cmd(base + ["consume", *b, "--topic", t, "--expect", "36", "--fetch-max-wait-ms", "100",
                              "--timeout-ms", "20000"])
        check('"complete":true' in out, f"java consume incomplete: {out[-500:]}")
        run_cmd(base + ["list-offsets", *b, "--topic", t, "--timestamp", str(base_ts + 5)])
        run_cmd(base + ["admin", "delete-topic", *b, "--topic", t])


class ConfluentCapture:
    name = "confluent"

    def available(self) -> str | None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            return f"confluent-kafka not installed: {exc}"
        return None

    def version(self) -> str:
        import confluent_kafka

        return f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"

    def drive(self, bootstrap: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicCollection, TopicPartition
        from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

        t = "golden-confluent"
        cid = "kbroker-golden-confluent"
        admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": cid})
        admin.create_topics([NewTopic(t, 2, 1, config={"cleanup.policy": "delete"})])[t].result(30)
        time.sleep(0.5)
        md = admin.list_topics(timeout=10)
        check(t in md.topics, "confluent: topic missing from metadata")
        admin.describe_topics(TopicCollection([t])).get(t).result(30)
        admin.describe_cluster().result(30)
        for f in admin.describe_configs([ConfigResource("topic", t)]).values():
            f.result(30)
        n = 0
        for codec in ("zstd", "gzip"):
            p = Producer({"bootstrap.servers": bootstrap, "client.id": cid, "compression.type": codec,
                          "enable.idempotence": True, "linger.ms": 20, "acks": "all"})
            for i, (k, v, h) in enumerate(records(f"confluent-{codec}", 10)):
                p.produce(t, key=k, value=v, headers=h, partition=i % 2)
            check(p.flush(30) == 0, "confluent: undelivered records")
            n += 10
            del p
            gc.collect()
        c = Consumer({"bootstrap.servers": bootstrap, "client.id": cid, "group.id": "kbroker-golden",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in (0, 1)])
        got = 0
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += 1
        c.close()
        check(got == n, f"confluent consumed {got} of {n}")
        specs = {TopicPartition(t, 0): OffsetSpec.earliest(), TopicPartition(t, 1): OffsetSpec.latest()}
        for f in admin.list_offsets(specs).values():
            f.result(30)
        admin.delete_topics([t])[t].result(30)
        del admin
        gc.collect()


class KcatCapture:
    name = "kcat"

    def __init__(self) -> None:
        self.path = shutil.which("kcat") or shutil.which("kafkacat")

    def available(self) -> str | None:
        return None if self.path else "kcat not on PATH (apt-get install kcat)"

    def version(self) -> str:
        out = subprocess.run([self.path or "kcat", "-V"], capture_output=True, text=True).stdout
        m = re.search(r"Version (\S+) .*?(librdkafka \S+)", out)
        return f"kcat {m[1]} ({m[2]})" if m else "kcat (version unknown)"

    def setup(self, bootstrap: str) -> None:
        setup_topic(bootstrap, "golden-kcat", 2)

    def drive(self, bootstrap: str) -> None:
        assert self.path
        t = "golden-kcat"
        k = [self.path, "-b", bootstrap, "-X", "client.id=kbroker-golden-kcat"]
        run_cmd(k + ["-L"])
        run_cmd(k + ["-L", "-t", t])
        lines = b"".join(b"key-%d\tkcat:value-%d|the quick brown fox\n" % (i, i) for i in range(10))
        run_cmd(k + ["-P", "-t", t, "-p", "0", "-K", "\t", "-z", "gzip", "-H", "src=kcat"], input=lines)
        run_cmd(k + ["-P", "-t", t, "-p", "1", "-K", "\t", "-X", "acks=0", "-z", "lz4"], input=lines)
        run_cmd(k + ["-P", "-t", t, "-p", "1", "-K", "\t", "-z", "zstd"], input=lines)
        out = run_cmd(k + ["-C", "-t", t, "-o", "beginning", "-c", "30", "-e", "-J", "-q",
                           "-X", "fetch.wait.max.ms=100"], timeout=60)
        check(len(out.splitlines()) == 30, f"kcat consumed {len(out.splitlines())} of 30")
        run_cmd(k + ["-Q", "-t", f"{t}:0:{int(time.time() * 1000) - 3_600_000}"])


class KafkaPythonCapture:
    name = "kafka-python"

    def available(self) -> str | None:
        try:
            import kafka  # noqa: F401
        except ImportError as exc:
            return f"kafka-python not installed: {exc}"
        return None

    def version(self) -> str:
        import kafka

        return f"kafka-python {kafka.__version__}"

    def drive(self, bootstrap: str) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import KafkaAdminClient, NewTopic

        t = "golden-kafka-python"
        cid = "kbroker-golden-kafka-python"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=cid, request_timeout_ms=10_000)
        admin.create_topics([NewTopic(t, 2, 1, topic_configs={"retention.ms": "86400000"})])
        time.sleep(0.5)
        admin.describe_topics([t])
        admin.list_topics()
        n = 0
        for codec in ("gzip", "lz4"):
            p = KafkaProducer(bootstrap_servers=bootstrap, client_id=cid, compression_type=codec, acks="all",
                              linger_ms=20)
            for i, (k, v, h) in enumerate(records(f"kafka-python-{codec}", 10)):
                p.send(t, key=k, value=v, headers=h, partition=i % 2)
            p.flush(30)
            p.close(10)
            n += 10
        c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=cid, group_id=None, enable_auto_commit=False,
                          auto_offset_reset="earliest", fetch_max_wait_ms=100)
        tps = [TopicPartition(t, 0), TopicPartition(t, 1)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            got += sum(len(v) for v in c.poll(timeout_ms=200).values())
        check(got == n, f"kafka-python consumed {got} of {n}")
        c.end_offsets(tps)
        c.offsets_for_times({tp: int(time.time() * 1000) - 3_600_000 for tp in tps})
        c.close()
        admin.delete_topics([t])
        admin.close()


class AioKafkaCapture:
    name = "aiokafka"

    def available(self) -> str | None:
        try:
            import aiokafka  # noqa: F401
        except ImportError as exc:
            return f"aiokafka not installed: {exc}"
        return None

    def version(self) -> str:
        import aiokafka

        return f"aiokafka {aiokafka.__version__}"

    def setup(self, bootstrap: str) -> None:
        setup_topic(bootstrap, "golden-aiokafka", 2)

    def drive(self, bootstrap: str) -> None:
        asyncio.run(self._drive(bootstrap))

    async def _drive(self, bootstrap: str) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        t = "golden-aiokafka"
        cid = "kbroker-golden-aiokafka"
        n = 0
        for codec, idem in (("gzip", False), ("lz4", True)):
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=cid, compression_type=codec,
                                 enable_idempotence=idem, acks="all", linger_ms=20)
            await p.start()
            try:
                futs = [await p.send(t, key=k, value=v, headers=h, partition=i % 2)
                        for i, (k, v, h) in enumerate(records(f"aiokafka-{codec}", 10))]
                await asyncio.gather(*futs)
            finally:
                await p.stop()
            n += 10
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=cid, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await c.start()
        try:
            tps = [TopicPartition(t, 0), TopicPartition(t, 1)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            got = 0
            deadline = time.monotonic() + 30
            while got < n and time.monotonic() < deadline:
                got += sum(len(v) for v in (await c.getmany(timeout_ms=200)).values())
            check(got == n, f"aiokafka consumed {got} of {n}")
            await c.end_offsets(tps)
        finally:
            await c.stop()


# ============================================================================================ commands


def record(names: list[str], tmp: Path, skip_missing: bool = False) -> tuple[Recorder, dict[str, str]]:
    """Start a kbroker that advertises the recording proxy, drive each client of ``names`` through it (its own
    label; setup traffic unrecorded) and stop both: the recorder (every exchange, in order) and each client's
    version. A client that is not installed is an error unless ``skip_missing``."""
    drivers: dict[str, Any] = {"java": JavaCapture(tmp), "confluent": ConfluentCapture(), "kcat": KcatCapture(),
                               "kafka-python": KafkaPythonCapture(), "aiokafka": AioKafkaCapture()}
    todo = []
    for n in names:
        if n not in CLIENTS:
            raise SystemExit(f"unknown client {n!r}; choose from {', '.join(CLIENTS)}")
        why = drivers[n].available()
        if why:
            if not skip_missing:
                raise SystemExit(f"{n}: {why} (or pass --skip-missing)")
            print(f"capture: skipping {n}: {why}", file=sys.stderr)
            continue
        todo.append(n)

    broker_port, proxy_port = free_port(), free_port()
    while proxy_port == broker_port:
        proxy_port = free_port()
    recorder = Recorder()
    proxy = ProxyThread(Proxy(("127.0.0.1", proxy_port), ("127.0.0.1", broker_port), recorder, client=None))
    proxy.start()
    log_path = tmp / "broker.log"
    cmd = [sys.executable, "-m", "kbroker.cli.main",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{broker_port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}",
           "--override", f"log.dirs={tmp / 'data'}"]
    with open(log_path, "wb") as log:
        broker = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    versions: dict[str, str] = {}
    try:
        wait_port(broker_port)
        bootstrap = f"127.0.0.1:{proxy_port}"
        for n in todo:
            d = drivers[n]
            versions[n] = d.version()
            if hasattr(d, "setup"):
                proxy.proxy.client = None
                d.setup(bootstrap)
                time.sleep(0.3)
            print(f"capture: {n} ({versions[n]}) through {bootstrap}", file=sys.stderr)
            proxy.proxy.client = n
            try:
                d.drive(bootstrap)
            finally:
                gc.collect()
                time.sleep(0.5)
                proxy.proxy.client = None
    except BaseException:
        print(f"capture: failed; broker log: {log_path}", file=sys.stderr)
        raise
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        proxy.stop()
    return recorder, versions


def cmd_run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    names = [c.strip() for c in args.clients.split(",") if c.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="kbroker-capture-"))
    recorder, versions = record(names, tmp, args.skip_missing)
    chosen = select(recorder.exchanges, args.max_per_key, args.max_frame_bytes)
    summary = write_golden(chosen, out, list(versions))
    print(json.dumps({"versions": versions, "frames": summary,
                      "exchanges_seen": len(recorder.exchanges),
                      "unmatched_responses": recorder.unmatched_responses}, indent=1))
    if not args.keep_tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    def addr(s: str) -> tuple[str, int]:
        host, _, port = s.rpartition(":")
        return host or "127.0.0.1", int(port)

    recorder = Recorder()
    proxy = Proxy(addr(args.listen), addr(args.upstream), recorder, client=args.client)

    async def main() -> None:
        await proxy.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"capture: proxy {args.listen} -> {args.upstream} recording as {args.client!r}; "
              f"the broker must advertise PLAINTEXT://{args.listen}. Ctrl-C to stop and write.", file=sys.stderr)
        await stop.wait()
        await proxy.close()

    asyncio.run(main())
    summary = write_golden(select(recorder.exchanges, args.max_per_key, args.max_frame_bytes), Path(args.out),
                           [args.client])
    print(json.dumps({"frames": summary, "exchanges_seen": len(recorder.exchanges),
                      "unmatched_responses": recorder.unmatched_responses}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "proxy"):
        p = sub.add_parser(name)
        p.add_argument("--out", default=str(DEFAULT_OUT), help="golden directory (default tests/golden)")
        p.add_argument("--max-per-key", type=int, default=MAX_PER_KEY,
                       help="request/response pairs kept per (client, API, version)")
        p.add_argument("--max-frame-bytes", type=int, default=MAX_FRAME_BYTES, help="drop pairs with a bigger frame")
        if name == "run":
            p.add_argument("--clients", default=",".join(CLIENTS))
            p.add_argument("--skip-missing", action="store_true", help="skip clients not installed here")
            p.add_argument("--keep-tmp", action="store_true", help="keep the broker data dir and log")
        else:
            p.add_argument("--listen", required=True, help="HOST:PORT the client bootstraps from")
            p.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
            p.add_argument("--client", required=True, help="label: the subdirectory of --out")
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_proxy(args)


if __name__ == "__main__":
    sys.exit(main())
