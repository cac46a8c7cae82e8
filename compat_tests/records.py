"""Deterministic record content and the round-trip checks shared by every client.

``RecordSpec`` must agree byte for byte with ``RecordSpec`` in compat_tests/java/KafkaDriver.java: the
Java driver produces records from the same (tag, index) -> content function, so Python can verify what
the Java producer wrote and vice versa.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace

PATTERN = "the quick brown fox jumps over the lazy dog;"


@dataclass(frozen=True)
class RecordSpec:
    """Record ``i`` of a test run.

    * key ``key-<i>`` (null when ``nulls`` and ``i % 7 == 6``)
    * value ``<tag>:value-<i>|`` + PATTERN * (1 + i % 4) [+ 5 binary bytes when ``binary``] + "." * pad
      (null when ``nulls`` and ``i % 11 == 10``); repetitive so that every codec really compresses
    * headers ``idx=<i>``, ``dup=a``, ``dup=b`` [+ ``bin=00 ff <i>`` when ``binary``]; with
      ``per_record_headers=False`` (kcat can only set the same headers on every record):
      ``client=<tag>``, ``dup=a``, ``dup=b``
    * timestamp ``base_ts + i * ts_step`` (CreateTime) when ``explicit_timestamps``
    * partition ``i % partitions`` (``partitions == 0``: the client's partitioner decides)
    """

    tag: str
    count: int
    partitions: int = 3
    base_ts: int = 0
    ts_step: int = 1
    binary: bool = True
    nulls: bool = True
    per_record_headers: bool = True
    explicit_timestamps: bool = True
    pad: int = 0

    @classmethod
    def new(cls, tag: str, count: int, **kw: object) -> RecordSpec:
        kw.setdefault("base_ts", (int(time.time() * 1000) // 1000) * 1000 - 600_000)  # 10 min ago, whole second
        return cls(tag=tag, count=count, **kw)  # type: ignore[arg-type]

    def restrict(self, other_caps: "Caps") -> RecordSpec:
        """Narrow the content to what a client (its Caps) can produce or show faithfully."""
        return replace(
            self,
            binary=self.binary and other_caps.binary,
            nulls=self.nulls and other_caps.nulls,
            per_record_headers=self.per_record_headers and other_caps.per_record_headers,
            explicit_timestamps=self.explicit_timestamps and other_caps.explicit_timestamps,
        )

    def key(self, i: int) -> bytes | None:
        if self.nulls and i % 7 == 6:
            return None
        return f"key-{i}".encode()

    def value(self, i: int) -> bytes | None:
        if self.nulls and i % 11 == 10:
            return None
        v = f"{self.tag}:value-{i}|{PATTERN * (1 + i % 4)}".encode()
        if self.binary:
            v += bytes([i & 0xFF, 0x00, 0xFF, 0x80, 0x0A])
        if self.pad:
            v += b"." * self.pad
        return v

    def headers(self, i: int) -> list[tuple[str, bytes]]:
        if not self.per_record_headers:
            return [("client", self.tag.encode()), ("dup", b"a"), ("dup", b"b")]
        h = [("idx", str(i).encode()), ("dup", b"a"), ("dup", b"b")]
        if self.binary:
            h.append(("bin", bytes([0x00, 0xFF, i & 0xFF])))
        return h

    def timestamp(self, i: int) -> int | None:
        return self.base_ts + i * self.ts_step if self.explicit_timestamps else None

    def partition(self, i: int) -> int | None:
        return i % self.partitions if self.partitions > 0 else None

    def java_args(self) -> list[str]:
        """The KafkaDriver ``produce`` options that select this content."""
        if not self.per_record_headers or not self.explicit_timestamps:
            raise ValueError("the Java driver always writes per-record headers and explicit timestamps")
        return ["--tag", self.tag, "--partitions", str(self.partitions), "--base-ts", str(self.base_ts),
                "--ts-step", str(self.ts_step), "--binary", str(self.binary).lower(),
                "--nulls", str(self.nulls).lower(), "--pad", str(self.pad)]


@dataclass(frozen=True)
class Caps:
    """What a client can do when producing/consuming (used to narrow a RecordSpec)."""

    binary: bool = True  # arbitrary bytes in keys/values/headers
    nulls: bool = True  # null keys / null values
    per_record_headers: bool = True
    explicit_timestamps: bool = True
    reports_offsets: bool = True  # producer reports partition/offset per record


@dataclass
class Ack:
    """What a producer reported for record ``index``; ``offset``/``timestamp`` None when not reported."""

    index: int
    partition: int | None
    offset: int | None
    timestamp: int | None
    error: str | None = None
    ack_ms: float | None = None


@dataclass
class Consumed:
    partition: int
    offset: int
    timestamp: int
    timestamp_type: str  # "create" | "log_append" | other
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    recv_ms: float | None = None


def normalize_ts_type(t: object) -> str:
    s = str(t).lower().replace("_", "").replace(" ", "")
    if s in ("1", "0", "createtime", "create", "timestamptype.createtime"):
        return "create"
    if s in ("2", "logappendtime", "logappend", "timestamptype.logappendtime"):
        return "log_append"
    return s


class RoundTripError(AssertionError):
    pass


def verify_round_trip(spec: RecordSpec, acks: list[Ack], consumed: list[Consumed], *,
                      produced_window: tuple[float, float] | None = None, acks_report_offsets: bool = True,
                      max_problems: int = 15) -> None:
    """Check that ``consumed`` is exactly what was produced:

    * every record was acknowledged, each at the partition the spec chose (or the client reported);
    * the consumer saw each record exactly once, offsets dense 0..n-1 per partition (fresh topic), in
      send order within a partition;
    * key, value, headers (order and duplicates included), timestamp and timestamp type match, and the
      offset/timestamp the producer reported equal what the consumer saw.
    ``produced_window`` (epoch seconds) bounds broker/client-assigned timestamps when the spec has no
    explicit ones.
    """
    problems: list[str] = []
    failed = [a for a in acks if a.error]
    if failed:
        problems.append(f"{len(failed)} records not acknowledged, e.g. #{failed[0].index}: {failed[0].error}")
    indexes = sorted(a.index for a in acks)
    if indexes != list(range(spec.count)):
        missing = sorted(set(range(spec.count)) - set(indexes))
        problems.append(f"acks for {len(indexes)} records, missing {missing[:10]}")
    by_index = {a.index: a for a in acks}

    def part_of(i: int) -> int | None:
        p = spec.partition(i)
        if p is None and i in by_index:
            p = by_index[i].partition
        return p

    for a in acks:
        want = spec.partition(a.index)
        if want is not None and a.partition is not None and a.partition != want:
            problems.append(f"record #{a.index}: producer reported partition {a.partition}, sent to {want}")

    seen = defaultdict(list)
    for c in consumed:
        seen[(c.partition, c.offset)].append(c)
    dups = [k for k, v in seen.items() if len(v) > 1]
    if dups:
        problems.append(f"consumer returned duplicates at (partition, offset) {dups[:10]}")
    if len(consumed) != spec.count:
        problems.append(f"consumed {len(consumed)} records, produced {spec.count}")

    expected: dict[int | None, list[int]] = defaultdict(list)
    for i in range(spec.count):
        expected[part_of(i)].append(i)
    got: dict[int, list[Consumed]] = defaultdict(list)
    for c in sorted(consumed, key=lambda c: (c.partition, c.offset)):
        got[c.partition].append(c)
    if set(got) - set(expected):
        problems.append(f"records in unexpected partitions {sorted(set(got) - set(expected))}")

    lo_ms = hi_ms = None
    if produced_window:
        lo_ms, hi_ms = produced_window[0] * 1000 - 2000, produced_window[1] * 1000 + 2000

    for p, idxs in sorted(expected.items(), key=lambda kv: (kv[0] is None, kv[0])):
        recs = got.get(p, []) if p is not None else []
        offsets = [c.offset for c in recs]
        if offsets != list(range(len(recs))):
            problems.append(f"partition {p}: offsets not dense from 0: {offsets[:20]}")
        if len(recs) != len(idxs):
            problems.append(f"partition {p}: consumed {len(recs)} records, expected {len(idxs)}")
        for c, i in zip(recs, idxs, strict=False):
            where = f"partition {p} offset {c.offset} (record #{i})"
            if c.key != spec.key(i):
                problems.append(f"{where}: key {c.key!r} != {spec.key(i)!r}")
            if c.value != spec.value(i):
                problems.append(f"{where}: value {_short(c.value)} != {_short(spec.value(i))}")
            if list(c.headers) != spec.headers(i):
                problems.append(f"{where}: headers {c.headers!r} != {spec.headers(i)!r}")
            if c.timestamp_type != "create":
                problems.append(f"{where}: timestamp type {c.timestamp_type!r}, expected CreateTime")
            want_ts = spec.timestamp(i)
            if want_ts is not None and c.timestamp != want_ts:
                problems.append(f"{where}: timestamp {c.timestamp} != {want_ts}")
            if want_ts is None and lo_ms is not None and not (lo_ms <= c.timestamp <= hi_ms):
                problems.append(f"{where}: timestamp {c.timestamp} outside the produce window [{lo_ms}, {hi_ms}]")
            a = by_index.get(i)
            if a is not None and acks_report_offsets and a.offset is not None and a.offset >= 0 \
                    and a.offset != c.offset:
                problems.append(f"{where}: producer reported offset {a.offset}")
            if a is not None and a.timestamp is not None and a.timestamp >= 0 and a.timestamp != c.timestamp:
                problems.append(f"{where}: producer reported timestamp {a.timestamp}, consumer saw {c.timestamp}")
        if len(problems) > max_problems * 3:
            break
    if problems:
        more = f"\n... and {len(problems) - max_problems} more" if len(problems) > max_problems else ""
        raise RoundTripError(f"round trip of {spec.count} records ({spec.tag}) failed:\n  "
                             + "\n  ".join(problems[:max_problems]) + more)


def _short(b: bytes | None) -> str:
    if b is None:
        return "None"
    return repr(b if len(b) <= 48 else b[:40] + b"..." + b[-6:])
