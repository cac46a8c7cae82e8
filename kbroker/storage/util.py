"""Small filesystem and naming helpers shared by the storage modules (no asyncio)."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"


def filename_prefix(offset: int) -> str:
    """Segment file name stem: the base offset as 20-digit zero-padded decimal."""
    return f"{offset:020d}"


def fsync_dir(path: Path) -> None:
    """fsync a directory so that creates/renames inside it are durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: write ``<path>.tmp``, fsync it, rename over ``path``,
    fsync the directory. Raises OSError."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def uuid_to_str(raw: bytes) -> str:
    """16 raw bytes -> Kafka's text form: URL-safe base64 without padding (22 chars)."""
    if len(raw) != 16:
        raise ValueError("a uuid is 16 bytes")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    """Kafka's 22-char URL-safe base64 text form -> 16 raw bytes. Raises ValueError."""
    text = text.strip()
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a uuid: {text!r}")
    return raw


def random_uuid() -> bytes:
    """A random v4 uuid (16 bytes) that avoids Kafka's reserved ids (all-zero, ``Uuid(0,1)``) and text forms
    starting with '-'."""
    while True:
        raw = uuid.uuid4().bytes
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue
        if uuid_to_str(raw).startswith("-"):
            continue
        return raw


def future_dir_name(topic: str, partition: int) -> str:
    """The directory of a replica being moved to another log dir (AlterReplicaLogDirs, as Kafka names it):
    ``<topic>-<partition>.<uuid hex>-future``."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """``"<topic>-<partition>"`` (or a future replica's ``"<topic>-<partition>.<uuid hex>-future"``) ->
    ``(topic, partition)``; the last '-' separates the partition. Raises ValueError for names that do not have
    that shape."""
    if dir_name.endswith(FUTURE_DIR_SUFFIX):
        stem, dot, hexid = dir_name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
        if dot and len(hexid) == 32 and all(c in "0123456789abcdef" for c in hexid):
            dir_name = stem
    topic, sep, part = dir_name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise ValueError(f"not a partition directory name: {dir_name!r}")
    return topic, int(part)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"
