"""Shared helpers for storage tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.protocol.records import build_batch
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

TOPIC_ID = bytes(range(1, 17))


def batch(n: int = 1, ts: int | list[int] = 1000, value_size: int = 10, codec: int = 0, tag: int = 0) -> bytes:
    """A producer-style batch (base offset 0) of ``n`` records; ``ts`` one timestamp or one per record."""
    stamps = ts if isinstance(ts, list) else [ts] * n
    return build_batch(
        [(b"k%d" % i, bytes([65 + (tag + i) % 26]) * value_size, [("h", b"x")], stamps[i]) for i in range(n)],
        compression=codec,
    )


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def open_log(log_dir: Path):
    """Factory: open (or reopen) ``<log_dir>/<name>`` (default ``t-0``); closes everything at the end."""
    opened: list[PartitionLog] = []

    def _open(config: LogConfig | None = None, name: str = "t-0", **kw) -> PartitionLog:
        kw.setdefault("clean_shutdown", True)
        kw.setdefault("topic_id", TOPIC_ID)
        kw.setdefault("now_ms", 0)
        plog = PartitionLog(log_dir / name, config or LogConfig(), **kw)
        opened.append(plog)
        return plog

    yield _open
    for p in opened:
        if not p.closed:
            p.close()
