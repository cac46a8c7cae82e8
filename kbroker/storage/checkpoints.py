"""Text checkpoint files in a log directory root.

``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint`` (high watermarks) and
``log-start-offset-checkpoint`` share one format (Kafka's ``OffsetCheckpointFile``)::

    0                       <- version
    2                       <- number of entries
    my-topic 0 1234         <- topic, partition, offset (one per line, space separated)
    other 3 0

Writes go to ``<file>.tmp``, are fsynced and renamed over the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from kbroker.storage.util import write_atomically

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file exists but cannot be parsed."""


class OffsetCheckpointFile:
    """One ``topic partition offset`` checkpoint file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the file with ``{(topic, partition): offset}`` (sorted for stable output). Raises OSError."""
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            if " " in topic:
                raise ValueError(f"topic name with a space: {topic!r}")
            lines.append(f"{topic} {partition} {offset}")
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("utf-8"))

    def read(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): offset}``; empty if the file does not exist. Raises ``CheckpointError`` for
        a malformed file (wrong version, bad line, count mismatch)."""
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: not text (garbage bytes)") from None
        lines = text.splitlines()
        if len(lines) < 2:
            raise CheckpointError(f"{self.path}: truncated checkpoint")
        try:
            version = int(lines[0].strip())
            count = int(lines[1].strip())
        except ValueError:
            raise CheckpointError(f"{self.path}: malformed header") from None
        if version != CHECKPOINT_VERSION:
            raise CheckpointError(f"{self.path}: unsupported version {version}")
        entries = [ln for ln in lines[2:] if ln.strip()]
        if len(entries) != count:
            raise CheckpointError(f"{self.path}: expected {count} entries, found {len(entries)}")
        out: dict[tuple[str, int], int] = {}
        for ln in entries:
            parts = ln.split()
            if len(parts) != 3:
                raise CheckpointError(f"{self.path}: malformed line {ln!r}")
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CheckpointError(f"{self.path}: malformed line {ln!r}") from None
        return out
