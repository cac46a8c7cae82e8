#!/usr/bin/env python3
"""Cost of the record structure check that Produce runs on every batch (kbroker/protocol/record_check.py).

For each record size, builds 1 MiB batches of records as librdkafka sends them (key-less, no headers) and
times the compiled check (``_recordcheck.c``) and the pure-Python fallback over them; reports CPU seconds
per GB of record data (``time.process_time``, one core). Usage: ``python bench/record_check.py``.
Not a test: nothing here asserts on speed.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.protocol.record_check import IMPLEMENTATION, check_records, check_records_py  # noqa: E402
from kbroker.protocol.records import _encode_record  # noqa: E402

BATCH_BYTES = 1 << 20


def batch_records(size: int) -> tuple[bytes, int]:
    value = os.urandom(size)
    recs = []
    total = 0
    i = 0
    while total < BATCH_BYTES:
        rec = _encode_record(i, 0, None, value, None)
        recs.append(rec)
        total += len(rec)
        i += 1
    return b"".join(recs), i


def seconds_per_gb(check, data: bytes, count: int, min_seconds: float = 1.0) -> float:
    done = 0
    start = time.process_time()
    while True:
        assert check(data, count) is None
        done += len(data)
        elapsed = time.process_time() - start
        if elapsed >= min_seconds:
            return elapsed / (done / 1e9)


def main() -> None:
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"check in use: {IMPLEMENTATION}")
    print("| record value | records per 1 MiB batch | compiled CPU s/GB | Python CPU s/GB |")
    print("|---:|---:|---:|---:|")
    for size in (10, 100, 1024, 10_240):
        data, count = batch_records(size)
        c = seconds_per_gb(check_records, data, count) if IMPLEMENTATION == "c" else float("nan")
        py = seconds_per_gb(check_records_py, data, count, min_seconds=2.0)
        print(f"| {size} B | {count:,} | {c:.3f} | {py:.2f} |")


if __name__ == "__main__":
    main()
