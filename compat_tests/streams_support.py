"""Helpers for the Kafka Streams tests (compat_tests/test_streams.py, compat_tests/test_streams_cluster.py).

:class:`StreamsApp` runs one Kafka Streams instance (compat_tests/java/StreamsDriver.java, the ``streams_driver``
fixture's command) as its own process, so it can be killed with SIGKILL, and collects its JSON events.
:func:`produce` writes known input with confluent-kafka (idempotent, acks=all); :func:`read_committed` reads an
output topic from the start with ``isolation.level=read_committed``. Every wait is bounded.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from compat_tests.event_process import EventProcess


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class StreamsApp(EventProcess):
    """One Kafka Streams instance: ``StreamsDriver <app> --bootstrap ... --application-id ... --state-dir ...``.
    ``options`` become ``--key value`` arguments (a list value repeats the option, e.g. ``prop=[...]``)."""

    def __init__(self, driver: list[str], app: str, name: str, bootstrap: str, application_id: str,
                 state_dir: Path, **options: Any) -> None:
        self.state_dir = state_dir
        args = [app, "--bootstrap", bootstrap, "--application-id", application_id, "--state-dir", str(state_dir)]
        for key, value in options.items():
            for v in value if isinstance(value, (list, tuple)) else [value]:
                args += [f"--{key.replace('_', '-')}", str(v)]
        super().__init__(driver + args, name)

    def wait_until(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str,
                   stop_at_exit: bool = True) -> None:
        super().wait_until(pred, timeout, what, stop_at_exit)

    def tasks(self) -> dict[str, Any]:
        """The last ``tasks`` event: ``{"state":..., "active": [...], "standby": [...]}`` (empty before the first)."""
        last = [e for e in self.snapshot() if e["event"] == "tasks"]
        return last[-1] if last else {"state": None, "active": [], "standby": []}

    def wait_running(self, timeout: float = 60.0, active: int | None = None, standby: int | None = None) -> None:
        """Until the instance is RUNNING with tasks (``active`` / ``standby`` of them when given)."""
        def ok(events: list[dict[str, Any]]) -> bool:
            last = [e for e in events if e["event"] == "tasks"]
            if not last or last[-1]["state"] != "RUNNING":
                return False
            t = last[-1]
            return ((active is None and bool(t["active"]) or active is not None and len(t["active"]) == active)
                    and (standby is None or len(t["standby"]) == standby))
        self.wait_until(ok, timeout, f"RUNNING with active={active} standby={standby} tasks")

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "error"]

    def restored(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["event"] == "restored"]

    def kill(self) -> None:
        """kill -9: no close, the open transaction left to the coordinator, the local state not checkpointed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM: KafkaStreams.close (bounded at 20 s inside); killed when it takes longer than ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.name} did not stop within {timeout}s: {''.join(self.stderr[-30:])}")


def produce(bootstrap: str, topic: str, records: Iterable[tuple[str | None, str | None, int | None]],
            partition: int | None = None) -> None:
    """Write ``(key, value, timestamp ms or None)`` records in order, idempotent with acks=all; raises on any
    delivery error. A ``None`` value is a tombstone."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 60000})
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for key, value, ts in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": report}
        if ts is not None:
            kwargs["timestamp"] = ts
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    assert left == 0 and not failed, f"produce to {topic}: {left} undelivered, errors {failed[:5]}"


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60.0,
                   idle: float = 3.0) -> list[tuple[int, int, str | None, str | None]]:
    """``(partition, offset, key, value)`` of every committed record of ``topic``, read from the start with
    ``isolation.level=read_committed`` until ``expect`` records have come and then ``idle`` seconds more pass
    without another (so extra records show), or ``timeout``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("streams-reader"),
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    out: list[tuple[int, int, str | None, str | None]] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            if len(out) >= expect and time.monotonic() - last >= idle:
                break
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            last = time.monotonic()
            key, value = m.key(), m.value()
            out.append((m.partition(), m.offset(), key.decode() if key is not None else None,
                        value.decode() if value is not None else None))
        return out
    finally:
        c.close()


def by_key(records: list[tuple[int, int, str | None, str | None]]) -> dict[str | None, list[str | None]]:
    """Each key's values in log order (a key lives in one partition, so its order is its partition's)."""
    out: dict[str | None, list[str | None]] = {}
    for _, _, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        out.setdefault(key, []).append(value)
    return out
