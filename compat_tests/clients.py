"""One adapter per real Kafka client, all driven the same way over TCP.

Each ``Client`` can ``produce`` a ``RecordSpec`` (reporting per-record acks), ``consume`` a topic from the
beginning with assign() (no consumer group offsets), and open a ``LongPollConsumer`` for latency
measurements. Clients: confluent-kafka (librdkafka), kcat (librdkafka CLI), kafka-python, aiokafka and
the Apache Kafka Java client (compat_tests/java/KafkaDriver.java).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from compat_tests.records import Ack, Caps, Consumed, RecordSpec, normalize_ts_type

ALL_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
REQUEST_TIMEOUT_MS = 10_000


class ClientUnavailable(Exception):
    """The client (or one of its features) is not installed here; the message says why."""


@dataclass(frozen=True)
class ProduceOptions:
    acks: str = "all"  # "all" | "1" | "0"
    compression: str = "none"
    idempotence: bool = True
    linger_ms: int = 20
    batch_size: int = 16384

    def label(self) -> str:
        return f"{self.compression}-acks{self.acks}-{'idem' if self.idempotence else 'noidem'}"


@dataclass
class ProduceResult:
    acks: list[Ack]
    started: float  # epoch seconds
    finished: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def window(self) -> tuple[float, float]:
        return self.started, self.finished


def now_ms() -> float:
    return time.time() * 1000.0


class LongPollConsumer:
    """A consumer of one partition running in the background; records arrive in ``records`` with
    ``recv_ms`` (epoch ms) set when the client handed them over."""

    def __init__(self) -> None:
        self.records: list[Consumed] = []
        self.errors: list[str] = []
        self.ready = threading.Event()
        self._cond = threading.Condition()
        self._stop = threading.Event()

    def _deliver(self, c: Consumed) -> None:
        with self._cond:
            self.records.append(c)
            self._cond.notify_all()

    def _fail(self, msg: str) -> None:
        with self._cond:
            self.errors.append(msg)
            self._cond.notify_all()
        self.ready.set()

    def wait_ready(self, timeout: float) -> None:
        if not self.ready.wait(timeout):
            raise AssertionError(f"long-poll consumer not ready after {timeout}s")
        if self.errors:
            raise AssertionError(f"long-poll consumer failed: {self.errors}")

    def wait_for(self, n: int, timeout: float) -> list[Consumed]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.records) < n and not self.errors:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self.errors:
                raise AssertionError(f"long-poll consumer failed: {self.errors}")
            return list(self.records)

    def start(self) -> LongPollConsumer:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()

    def __enter__(self) -> LongPollConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    name = "?"
    caps = Caps()  # what it can produce
    consume_caps = Caps()  # what it can show faithfully when consuming
    codecs: tuple[str, ...] = ALL_CODECS

    def check_available(self) -> None:
        """Raise ClientUnavailable with the reason when this client cannot run here."""

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        raise NotImplementedError

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        raise NotImplementedError

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name} client>"


# ============================================================================================ confluent-kafka


class _QuietLogger:
    def log(self, *a: Any, **k: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., None]:
        return self.log


class ConfluentClient(Client):
    name = "confluent"

    def check_available(self) -> None:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            raise ClientUnavailable(f"confluent-kafka is not installed: {exc}") from exc

    def producer_config(self, bootstrap: str, opts: ProduceOptions) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap,
            "client.id": "kbroker-compat-confluent",
            "acks": opts.acks,
            "compression.type": opts.compression,
            "enable.idempotence": opts.idempotence,
            "linger.ms": opts.linger_ms,
            "batch.size": opts.batch_size,
            "message.timeout.ms": 30_000,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
        }

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        from confluent_kafka import Producer

        acks: list[Ack] = []

        def on_delivery(i: int, err: Any, msg: Any) -> None:
            if err is not None:
                acks.append(Ack(i, msg.partition(), None, None, error=str(err), ack_ms=now_ms()))
                return
            ts_type, ts = msg.timestamp()
            off = msg.offset()
            acks.append(Ack(i, msg.partition(), off if off is not None and off >= 0 else None,
                            ts if ts_type != 0 else None, ack_ms=now_ms()))

        started = time.time()
        p = Producer(self.producer_config(bootstrap, opts))
        for i in range(spec.count):
            kw: dict[str, Any] = {"key": spec.key(i), "value": spec.value(i), "headers": spec.headers(i)}
            if spec.timestamp(i) is not None:
                kw["timestamp"] = spec.timestamp(i)
            if spec.partition(i) is not None:
                kw["partition"] = spec.partition(i)
            while True:
                try:
                    p.produce(topic, on_delivery=functools.partial(on_delivery, i), **kw)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        left = p.flush(60)
        if left:
            raise AssertionError(f"confluent producer: {left} records still undelivered after 60 s")
        if str(opts.acks) == "0":
            # With acks=0 librdkafka reports delivery before its broker thread has written every request;
            # destroying the handle right away can drop requests that never left the client (seen: the
            # broker received only some partitions' requests). Give the client time to write them.
            time.sleep(1.0)
        return ProduceResult(sorted(acks, key=lambda a: a.index), started, time.time())

    def consumer_config(self, bootstrap: str, isolation: str, fetch_wait_ms: int = 100) -> dict[str, Any]:
        return {
            "bootstrap.servers": bootstrap,
            "client.id": "kbroker-compat-confluent",
            # librdkafka insists on a group.id even for assign(); nothing is committed with it.
            "group.id": f"kbroker-compat-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "fetch.wait.max.ms": fetch_wait_ms,
            "check.crcs": True,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "enable.partition.eof": False,
        }

    @staticmethod
    def to_consumed(msg: Any, recv_ms: float | None = None) -> Consumed:
        ts_type, ts = msg.timestamp()
        return Consumed(msg.partition(), msg.offset(), ts, normalize_ts_type(ts_type), msg.key(), msg.value(),
                        list(msg.headers() or []), recv_ms)

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer(self.consumer_config(bootstrap, isolation))
        out: list[Consumed] = []
        try:
            md = c.list_topics(topic, timeout=10)
            parts = sorted(md.topics[topic].partitions)
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
            deadline = time.monotonic() + timeout
            while len(out) < expect and time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().fatal():
                        raise AssertionError(f"confluent consumer fatal error: {msg.error()}")
                    continue
                out.append(self.to_consumed(msg))
        finally:
            c.close()
        return out

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        client = self

        class Tail(LongPollConsumer):
            def start(self) -> LongPollConsumer:
                self.thread = threading.Thread(target=self.run, daemon=True, name="confluent-tail")
                self.thread.start()
                return self

            def run(self) -> None:
                from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

                try:
                    c = Consumer(client.consumer_config(bootstrap, "read_uncommitted", fetch_wait_ms))
                    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
                    started = time.monotonic()
                    while not self._stop.is_set():
                        msg = c.poll(0.05)
                        if not self.ready.is_set() and time.monotonic() - started > 1.5:
                            self.ready.set()  # offset resolved and a long-poll fetch in flight by now
                        if msg is None or msg.error():
                            continue
                        self._deliver(client.to_consumed(msg, now_ms()))
                    c.close()
                except Exception as exc:  # noqa: BLE001
                    self._fail(f"{type(exc).__name__}: {exc}")

            def close(self) -> None:
                super().close()
                self.thread.join(15)

        return Tail()


# ============================================================================================ kcat


class KcatClient(Client):
    """kcat (librdkafka CLI). It can only send text lines, one header set for all records, no explicit
    timestamps, and it does not print delivery reports, so its records are checked by content and order."""

    name = "kcat"
    caps = Caps(binary=False, nulls=True, per_record_headers=False, explicit_timestamps=False,
                reports_offsets=False)
    consume_caps = Caps(binary=False)  # -J prints keys/values/headers as JSON strings

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get("KCAT") or shutil.which("kcat") or shutil.which("kafkacat")

    def check_available(self) -> None:
        if not self.path:
            raise ClientUnavailable("kcat is not installed (apt-get install kcat): needed for the kcat client tests")

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        if spec.partitions <= 0:
            raise ValueError("kcat produces per partition (-p); give the spec explicit partitions")
        started = time.time()
        acks: list[Ack] = []
        for p in range(spec.partitions):
            idxs = [i for i in range(spec.count) if spec.partition(i) == p]
            lines = []
            for i in idxs:
                k, v = spec.key(i), spec.value(i)
                for part in (k, v):
                    if part is not None and (b"\t" in part or b"\n" in part or part == b""):
                        raise ValueError(f"record #{i} cannot be expressed as a kcat line")
                # -K<TAB> -Z: an empty key or value part is sent as NULL
                lines.append((k or b"") + b"\t" + (v or b""))
            cmd = [self.path, "-P", "-b", bootstrap, "-t", topic, "-p", str(p), "-K", "\t", "-Z", "-q",
                   "-X", f"acks={opts.acks}", "-X", f"enable.idempotence={str(opts.idempotence).lower()}",
                   "-X", f"linger.ms={opts.linger_ms}", "-X", f"batch.size={opts.batch_size}",
                   "-X", "message.timeout.ms=30000", "-X", f"socket.timeout.ms={REQUEST_TIMEOUT_MS}"]
            if opts.compression != "none":
                cmd += ["-z", opts.compression]
            for hk, hv in spec.headers(0):
                cmd += ["-H", f"{hk}={hv.decode()}"]
            r = subprocess.run(cmd, input=b"\n".join(lines) + b"\n", capture_output=True, timeout=90)
            if r.returncode != 0:
                raise AssertionError(f"kcat -P exited {r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
            acks += [Ack(i, p, None, None, ack_ms=now_ms()) for i in idxs]
        return ProduceResult(sorted(acks, key=lambda a: a.index), started, time.time())

    @staticmethod
    def parse_json(line: str, recv_ms: float | None = None) -> Consumed:
        o = json.loads(line)
        raw_h = o.get("headers") or []
        headers: list[tuple[str, bytes | None]] = []
        if isinstance(raw_h, dict):
            headers = [(k, None if v is None else v.encode()) for k, v in raw_h.items()]
        elif raw_h and isinstance(raw_h[0], (list, tuple)):
            headers = [(k, None if v is None else v.encode()) for k, v in raw_h]
        else:  # kcat: ["name1", "value1", "name2", "value2", ...]
            headers = [(raw_h[j], None if raw_h[j + 1] is None else raw_h[j + 1].encode())
                       for j in range(0, len(raw_h) - 1, 2)]
        key = o.get("key")
        payload = o.get("payload")
        return Consumed(o["partition"], o["offset"], o.get("ts", -1), normalize_ts_type(o.get("tstype", "")),
                        None if key is None else key.encode(), None if payload is None else payload.encode(),
                        headers, recv_ms)

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        cmd = [self.path, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-c", str(expect), "-J", "-q",
               "-X", f"isolation.level={isolation}", "-X", "fetch.wait.max.ms=100", "-X", "check.crcs=true"]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=timeout)
            out, err = r.stdout, r.stderr
        except subprocess.TimeoutExpired as exc:  # fewer records than expected: report what came
            out, err = exc.stdout or b"", exc.stderr or b""
        recs = []
        for line in out.decode().splitlines():
            if line.strip().startswith("{"):
                recs.append(self.parse_json(line))
        if not recs and err.strip():
            raise AssertionError(f"kcat -C printed nothing; stderr: {err.decode(errors='replace')[-2000:]}")
        return recs

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        cmd = [self.path, "-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning", "-J", "-u",
               "-q", "-X", f"fetch.wait.max.ms={fetch_wait_ms}"]
        return _SubprocessTail(cmd, parse=lambda line, t: KcatClient.parse_json(line, t), ready_after=2.0)


class _SubprocessTail(LongPollConsumer):
    """Runs a consumer process and timestamps each JSON line as it arrives on stdout."""

    def __init__(self, cmd: list[str], parse: Callable[[str, float], Consumed | None],
                 ready_after: float | None = None, ready_event: str | None = None) -> None:
        super().__init__()
        self.cmd = cmd
        self.parse = parse
        self.ready_after = ready_after
        self.ready_event = ready_event
        self.stderr_lines: list[str] = []

    def start(self) -> LongPollConsumer:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.thread = threading.Thread(target=self.run, daemon=True, name="tail-reader")
        self.thread.start()
        self.err_thread = threading.Thread(target=self.drain_stderr, daemon=True, name="tail-stderr")
        self.err_thread.start()
        if self.ready_after is not None:
            def mark_ready() -> None:
                if not self._stop.wait(self.ready_after):
                    if self.proc.poll() is None:
                        self.ready.set()
                    else:
                        self._fail(f"{self.cmd[0]} exited {self.proc.returncode}: {''.join(self.stderr_lines)[-2000:]}")
            threading.Thread(target=mark_ready, daemon=True).start()
        return self

    def drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t = now_ms()
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                if self.ready_event:
                    o = json.loads(line)
                    if o.get("event") == self.ready_event:
                        self.ready.set()
                        continue
                    if o.get("event") == "error":
                        self._fail(f"{o.get('error_class')}: {o.get('message')}")
                        continue
                c = self.parse(line, t)
                if c is not None:
                    self._deliver(c)
            except Exception as exc:  # noqa: BLE001
                self._fail(f"cannot parse {line[:200]!r}: {exc}")
        if not self._stop.is_set() and self.proc.wait() not in (0, None):
            self._fail(f"{self.cmd[0]} exited {self.proc.returncode}: {''.join(self.stderr_lines)[-2000:]}")

    def close(self) -> None:
        super().close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.thread.join(5)


# ============================================================================================ kafka-python


class KafkaPythonClient(Client):
    name = "kafka-python"

    def check_available(self) -> None:
        try:
            import kafka  # noqa: F401
        except ImportError as exc:
            raise ClientUnavailable(f"kafka-python is not installed: {exc}") from exc

    @property
    def codecs(self) -> tuple[str, ...]:  # type: ignore[override]
        try:
            from kafka import codec
        except ImportError:
            return ()
        have = {"gzip": codec.has_gzip(), "snappy": codec.has_snappy(), "lz4": codec.has_lz4(),
                "zstd": codec.has_zstd()}
        return ("none",) + tuple(c for c in ALL_CODECS[1:] if have[c])

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        from kafka import KafkaProducer

        started = time.time()
        p = KafkaProducer(bootstrap_servers=bootstrap, client_id="kbroker-compat-kafka-python",
                          acks="all" if opts.acks == "all" else int(opts.acks),
                          compression_type=None if opts.compression == "none" else opts.compression,
                          enable_idempotence=opts.idempotence, linger_ms=opts.linger_ms,
                          batch_size=opts.batch_size, request_timeout_ms=REQUEST_TIMEOUT_MS, max_block_ms=30_000,
                          **({} if opts.idempotence else {"max_in_flight_requests_per_connection": 1}))
        futures = []
        try:
            for i in range(spec.count):
                futures.append((i, p.send(topic, value=spec.value(i), key=spec.key(i), headers=spec.headers(i),
                                          partition=spec.partition(i), timestamp_ms=spec.timestamp(i))))
            p.flush(60)
            acks = []
            for i, f in futures:
                try:
                    md = f.get(timeout=30)
                    acks.append(Ack(i, md.partition, md.offset if md.offset >= 0 else None,
                                    md.timestamp if md.timestamp is not None and md.timestamp >= 0 else None,
                                    ack_ms=now_ms()))
                except Exception as exc:  # noqa: BLE001
                    acks.append(Ack(i, spec.partition(i), None, None, error=f"{type(exc).__name__}: {exc}"))
        finally:
            p.close(timeout=10)
        return ProduceResult(acks, started, time.time())

    @staticmethod
    def to_consumed(r: Any, recv_ms: float | None = None) -> Consumed:
        return Consumed(r.partition, r.offset, r.timestamp, normalize_ts_type(r.timestamp_type), r.key, r.value,
                        [(k, v) for k, v in (r.headers or [])], recv_ms)

    def _consumer(self, bootstrap: str, isolation: str, fetch_wait_ms: int) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=bootstrap, client_id="kbroker-compat-kafka-python", group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", isolation_level=isolation,
                             fetch_max_wait_ms=fetch_wait_ms, check_crcs=True,
                             request_timeout_ms=max(REQUEST_TIMEOUT_MS + fetch_wait_ms, 30_000))

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        from kafka import TopicPartition

        c = self._consumer(bootstrap, isolation, 100)
        out: list[Consumed] = []
        try:
            deadline = time.monotonic() + timeout
            parts = None
            while parts is None and time.monotonic() < deadline:
                parts = c.partitions_for_topic(topic)
                if parts is None:
                    time.sleep(0.1)
            if parts is None:
                raise AssertionError(f"kafka-python: no metadata for {topic}")
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            c.assign(tps)
            c.seek_to_beginning(*tps)
            while len(out) < expect and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=200).values():
                    out += [self.to_consumed(r) for r in recs]
        finally:
            c.close()
        return out

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        client = self

        class Tail(LongPollConsumer):
            def start(self) -> LongPollConsumer:
                self.thread = threading.Thread(target=self.run, daemon=True, name="kafka-python-tail")
                self.thread.start()
                return self

            def run(self) -> None:
                from kafka import TopicPartition

                try:
                    c = client._consumer(bootstrap, "read_uncommitted", fetch_wait_ms)
                    tp = TopicPartition(topic, partition)
                    c.assign([tp])
                    c.seek_to_beginning(tp)
                    c.position(tp)  # resolves the offset (ListOffsets) before we call ourselves ready
                    c.poll(timeout_ms=50)
                    started = time.monotonic()
                    while not self._stop.is_set():
                        batch = c.poll(timeout_ms=50)
                        if not self.ready.is_set() and time.monotonic() - started > 1.0:
                            self.ready.set()
                        t = now_ms()
                        for recs in batch.values():
                            for r in recs:
                                self._deliver(client.to_consumed(r, t))
                    c.close()
                except Exception as exc:  # noqa: BLE001
                    self._fail(f"{type(exc).__name__}: {exc}")

            def close(self) -> None:
                super().close()
                self.thread.join(15)

        return Tail()


# ============================================================================================ aiokafka


class AioKafkaClient(Client):
    name = "aiokafka"

    def check_available(self) -> None:
        try:
            import aiokafka  # noqa: F401
        except ImportError as exc:
            raise ClientUnavailable(f"aiokafka is not installed: {exc}") from exc

    @property
    def codecs(self) -> tuple[str, ...]:  # type: ignore[override]
        try:
            from aiokafka import codec
        except ImportError:
            return ()
        have = {"gzip": codec.has_gzip(), "snappy": codec.has_snappy(), "lz4": codec.has_lz4(),
                "zstd": codec.has_zstd()}
        return ("none",) + tuple(c for c in ALL_CODECS[1:] if have[c])

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        return asyncio.run(self._produce(bootstrap, topic, spec, opts))

    async def _produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        from aiokafka import AIOKafkaProducer

        started = time.time()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="kbroker-compat-aiokafka",
                             acks="all" if opts.acks == "all" else int(opts.acks),
                             compression_type=None if opts.compression == "none" else opts.compression,
                             enable_idempotence=opts.idempotence, linger_ms=opts.linger_ms,
                             max_batch_size=opts.batch_size, request_timeout_ms=REQUEST_TIMEOUT_MS)
        await p.start()
        acks: list[Ack] = []
        try:
            futs = []
            for i in range(spec.count):
                futs.append((i, await p.send(topic, value=spec.value(i), key=spec.key(i),
                                             partition=spec.partition(i), timestamp_ms=spec.timestamp(i),
                                             headers=spec.headers(i))))
            for i, f in futs:
                try:
                    md = await asyncio.wait_for(f, 60)
                    if md is None:  # acks=0: aiokafka resolves to None
                        acks.append(Ack(i, spec.partition(i), None, None, ack_ms=now_ms()))
                        continue
                    # md.timestamp is not used: for CreateTime, aiokafka's MessageBatch.done() hands every
                    # record of a batch the first record's timestamp (a client quirk, not the broker's).
                    acks.append(Ack(i, md.partition, md.offset if md.offset >= 0 else None, None,
                                    ack_ms=now_ms()))
                except Exception as exc:  # noqa: BLE001
                    acks.append(Ack(i, spec.partition(i), None, None, error=f"{type(exc).__name__}: {exc}"))
        finally:
            await p.stop()
        return ProduceResult(acks, started, time.time())

    @staticmethod
    def to_consumed(r: Any, recv_ms: float | None = None) -> Consumed:
        return Consumed(r.partition, r.offset, r.timestamp, normalize_ts_type(r.timestamp_type), r.key, r.value,
                        [(k, v) for k, v in (r.headers or [])], recv_ms)

    @staticmethod
    def _consumer(bootstrap: str, isolation: str, fetch_wait_ms: int) -> Any:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id="kbroker-compat-aiokafka", group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest", isolation_level=isolation,
                                fetch_max_wait_ms=fetch_wait_ms, check_crcs=True,
                                request_timeout_ms=max(REQUEST_TIMEOUT_MS + fetch_wait_ms, 30_000))

    @staticmethod
    async def _partitions(c: Any, topic: str, deadline: float) -> list[int]:
        while time.monotonic() < deadline:
            parts = c.partitions_for_topic(topic)
            if parts:
                return sorted(parts)
            await c._client.force_metadata_update()  # noqa: SLF001 - public API has no "fetch now"
            await asyncio.sleep(0.1)
        raise AssertionError(f"aiokafka: no metadata for {topic}")

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        return asyncio.run(self._consume(bootstrap, topic, expect, timeout, isolation))

    async def _consume(self, bootstrap: str, topic: str, expect: int, timeout: float, isolation: str) -> list[Consumed]:
        from aiokafka import TopicPartition

        c = self._consumer(bootstrap, isolation, 100)
        await c.start()
        out: list[Consumed] = []
        try:
            deadline = time.monotonic() + timeout
            tps = [TopicPartition(topic, p) for p in await self._partitions(c, topic, deadline)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            while len(out) < expect and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=200)
                for recs in batch.values():
                    out += [self.to_consumed(r) for r in recs]
        finally:
            await c.stop()
        return out

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        client = self

        class Tail(LongPollConsumer):
            def start(self) -> LongPollConsumer:
                self.thread = threading.Thread(target=lambda: asyncio.run(self.run()), daemon=True,
                                               name="aiokafka-tail")
                self.thread.start()
                return self

            async def run(self) -> None:
                from aiokafka import TopicPartition

                try:
                    c = client._consumer(bootstrap, "read_uncommitted", fetch_wait_ms)
                    await c.start()
                    try:
                        tp = TopicPartition(topic, partition)
                        c.assign([tp])
                        await c.seek_to_beginning(tp)
                        await c.position(tp)
                        started = time.monotonic()
                        while not self._stop.is_set():
                            batch = await c.getmany(timeout_ms=50)
                            if not self.ready.is_set() and time.monotonic() - started > 1.0:
                                self.ready.set()
                            t = now_ms()
                            for recs in batch.values():
                                for r in recs:
                                    self._deliver(client.to_consumed(r, t))
                    finally:
                        await c.stop()
                except Exception as exc:  # noqa: BLE001
                    self._fail(f"{type(exc).__name__}: {exc}")

            def close(self) -> None:
                super().close()
                self.thread.join(15)

        return Tail()


# ============================================================================================ Java


JAVA_DIR = Path(__file__).resolve().parent / "java"
DRIVER_SOURCE = JAVA_DIR / "KafkaDriver.java"
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The kafka-clients versions the Java drivers can run with: version -> (profile of java/pom.xml that
#: scripts/fetch_jars.sh resolves, its directory under .cache/). ``KBROKER_JAVA_CLIENT`` picks one for the whole
#: run (default 4.3.1, the reference release); e.g. ``KBROKER_JAVA_CLIENT=4.4.0 pytest compat_tests -k java``.
JAVA_CLIENTS = {"4.3.1": ("clients", "jars"), "4.4.0": ("clients44", "jars-4.4")}
JAVA_CLIENT_VERSION = os.environ.get("KBROKER_JAVA_CLIENT", "4.3.1")
if JAVA_CLIENT_VERSION not in JAVA_CLIENTS:
    raise ValueError(f"KBROKER_JAVA_CLIENT={JAVA_CLIENT_VERSION}: not one of {', '.join(JAVA_CLIENTS)}")
JAVA_CLIENT_PROFILE = JAVA_CLIENTS[JAVA_CLIENT_VERSION][0]
# the drivers compiled against each client version apart (the default's in classes/ itself)
CLASSES_DIR = JAVA_DIR / "classes" if JAVA_CLIENT_VERSION == "4.3.1" else \
    JAVA_DIR / "classes" / f"kafka-clients-{JAVA_CLIENT_VERSION}"
JARS_DIR = Path(os.environ.get("KBROKER_JARS_DIR", REPO_ROOT / ".cache" / JAVA_CLIENTS[JAVA_CLIENT_VERSION][1]))
# resolved by scripts/fetch_jars.sh (that profile of java/pom.xml); jackson is the client's OAUTHBEARER
# login (its unsecured tokens are JSON)
REQUIRED_JARS = (f"kafka-clients-{JAVA_CLIENT_VERSION}.jar", "jackson-databind-2.21.2.jar", ".resolved")


class JavaDriverError(AssertionError):
    pass


class JavaDriver:
    """Runs compat_tests/java/KafkaDriver.java (compiled) with kafka-clients 4.3.1 (or the version
    ``KBROKER_JAVA_CLIENT`` names, :data:`JAVA_CLIENTS`)."""

    def __init__(self, java: str, classpath: str) -> None:
        self.java = java
        self.classpath = classpath

    def command(self, args: list[str]) -> list[str]:
        return [self.java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.classpath,
                "KafkaDriver", *args]

    def run(self, args: list[str], *, timeout: float = 90.0, check: bool = True) -> list[dict[str, Any]]:
        """Run one command to completion; returns its JSON events. With ``check``, a non-zero exit
        raises JavaDriverError carrying the error event and stderr."""
        r = subprocess.run(self.command(args), capture_output=True, text=True, timeout=timeout)
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        self.last_returncode = r.returncode
        self.last_stderr = r.stderr
        if check and r.returncode != 0:
            errs = [e for e in events if e.get("event") == "error" or e.get("error")]
            raise JavaDriverError(f"KafkaDriver {' '.join(args[:2])} exited {r.returncode}: {errs[:3]}\n"
                                  f"stderr: {r.stderr[-3000:]}")
        return events

    def popen(self, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                bufsize=1)

    @staticmethod
    def one(events: list[dict[str, Any]], event: str) -> dict[str, Any]:
        found = [e for e in events if e.get("event") == event]
        if len(found) != 1:
            raise JavaDriverError(f"expected one {event!r} event, got {events[:5]}")
        return found[0]


def _b64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def java_consumed(e: dict[str, Any]) -> Consumed:
    return Consumed(e["partition"], e["offset"], e["timestamp"], normalize_ts_type(e["timestamp_type"]),
                    _b64(e["key"]), _b64(e["value"]), [(k, _b64(v)) for k, v in e["headers"]], e.get("recv_ms"))


class JavaClient(Client):
    name = "java"

    def __init__(self, driver: JavaDriver | None) -> None:
        self.driver = driver

    def check_available(self) -> None:
        if self.driver is None:
            raise ClientUnavailable("no JDK (java + javac) found: the Java-client tests need JDK 11+ "
                                    "(apt-get install openjdk-17-jdk-headless)")

    def produce(self, bootstrap: str, topic: str, spec: RecordSpec, opts: ProduceOptions) -> ProduceResult:
        assert self.driver is not None
        started = time.time()
        events = self.driver.run(["produce", "--bootstrap", bootstrap, "--topic", topic, "--count", str(spec.count),
                                  "--acks", opts.acks, "--compression", opts.compression,
                                  "--idempotence", str(opts.idempotence).lower(), "--linger-ms", str(opts.linger_ms),
                                  "--batch-size", str(opts.batch_size), *spec.java_args()], check=False)
        acks = []
        for e in events:
            if e.get("event") != "ack":
                continue
            if e.get("error"):
                acks.append(Ack(e["index"], None, None, None, error=f"{e.get('error_class')}: {e['error']}"))
            else:
                acks.append(Ack(e["index"], e["partition"], e["offset"] if e["offset"] >= 0 else None,
                                e["timestamp"] if e["timestamp"] >= 0 else None, ack_ms=e.get("ack_ms")))
        errors = [e for e in events if e.get("event") == "error"]
        if errors:
            raise JavaDriverError(f"Java producer failed: {errors}\nstderr: {self.driver.last_stderr[-3000:]}")
        return ProduceResult(sorted(acks, key=lambda a: a.index), started, time.time())

    def consume(self, bootstrap: str, topic: str, expect: int, *, timeout: float = 30.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
        assert self.driver is not None
        events = self.driver.run(["consume", "--bootstrap", bootstrap, "--topic", topic, "--expect", str(expect),
                                  "--isolation", isolation, "--timeout-ms", str(int(timeout * 1000)),
                                  "--fetch-max-wait-ms", "100"], timeout=timeout + 60)
        return [java_consumed(e) for e in events if e.get("event") == "record"]

    def long_poll_consumer(self, bootstrap: str, topic: str, partition: int = 0,
                           fetch_wait_ms: int = 5000) -> LongPollConsumer:
        assert self.driver is not None
        cmd = self.driver.command(["consume", "--bootstrap", bootstrap, "--topic", topic,
                                   "--partitions", str(partition),
                                   "--fetch-max-wait-ms", str(fetch_wait_ms), "--timeout-ms", "120000"])

        def parse(line: str, t: float) -> Consumed | None:
            e = json.loads(line)
            return java_consumed(e) if e.get("event") == "record" else None

        return _SubprocessTail(cmd, parse, ready_event="ready")


# ============================================================================================ registry


CLIENT_NAMES = ("confluent", "kcat", "kafka-python", "aiokafka", "java")


def make_client(name: str, java_driver: JavaDriver | None = None) -> Client:
    if name == "confluent":
        return ConfluentClient()
    if name == "kcat":
        return KcatClient()
    if name == "kafka-python":
        return KafkaPythonClient()
    if name == "aiokafka":
        return AioKafkaClient()
    if name == "java":
        return JavaClient(java_driver)
    raise ValueError(name)


# ============================================================================================ topics (admin)


def admin_client(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": REQUEST_TIMEOUT_MS})


def create_topic(bootstrap: str, name: str, partitions: int = 3, configs: dict[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """Create a topic with confluent-kafka's AdminClient and wait until every partition has a leader."""
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})],
                              operation_timeout=timeout, request_timeout=timeout)[name]
    fut.result(timeout)
    wait_topic_ready(bootstrap, name, partitions, timeout, admin=admin)


def wait_topic_ready(bootstrap: str, name: str, partitions: int, timeout: float = 30.0, admin: Any = None) -> None:
    admin = admin or admin_client(bootstrap)
    deadline = time.monotonic() + timeout
    last = "no metadata"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions \
                    and all(p.leader >= 0 for p in t.partitions.values()):
                return
            last = f"topic metadata {t.error if t else None}, partitions {sorted(t.partitions) if t else None}"
        except Exception as exc:  # noqa: BLE001
            last = str(exc)
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready after {timeout}s: {last}")


def delete_topic(bootstrap: str, name: str, timeout: float = 30.0) -> None:
    admin = admin_client(bootstrap)
    admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)[name].result(timeout)
