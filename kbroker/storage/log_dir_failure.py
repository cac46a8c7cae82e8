"""Log directories that failed: Kafka's ``LogDirFailureChannel``.

A write, fsync, truncate or read of a log directory that fails with an I/O error (ENOSPC, EIO, EROFS, …) takes
the whole directory offline: every partition in it answers ``KAFKA_STORAGE_ERROR`` from then on, nothing is
appended to it again in this process, and the broker keeps serving its other directories. The data that
was acknowledged before is on disk and comes back at the next start, once the cause is fixed; a partial
write is never acknowledged and is cut off by recovery (or at once, where the truncate still works).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class LogDirFailureChannel:
    """Which log directories are offline, and who wants to know when one goes."""

    def __init__(self) -> None:
        self.offline: dict[Path, str] = {}
        self._listeners: list[Callable[[Path, str], None]] = []

    @staticmethod
    def _key(d: Path | str) -> Path:
        return Path(os.path.abspath(d))

    def add_listener(self, fn: Callable[[Path, str], None]) -> None:
        self._listeners.append(fn)

    def is_offline(self, d: Path | str) -> bool:
        return bool(self.offline) and self._key(d) in self.offline

    def mark_offline(self, d: Path | str, reason: str) -> None:
        key = self._key(d)
        if key in self.offline:
            return
        self.offline[key] = reason
        log.error("Log directory %s is offline: %s. Its partitions answer KAFKA_STORAGE_ERROR until the broker "
                  "is restarted with the directory fixed.", key, reason)
        for fn in list(self._listeners):
            try:
                fn(key, reason)
            except Exception:  # a listener's failure must not hide the directory failure
                log.exception("log dir failure listener failed")

    def check(self, d: Path | str, what: str) -> None:
        """Raise ``KafkaError(KAFKA_STORAGE_ERROR)`` when ``d`` is offline."""
        if self.offline and self._key(d) in self.offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what}: log directory {d} is offline")

    def io_failed(self, d: Path | str, what: str, exc: OSError) -> KafkaError:
        """Take ``d`` offline for ``exc`` and return the error to raise instead of it."""
        self.mark_offline(d, f"{what} failed: {exc.strerror or exc}")
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed: {exc.strerror or exc}")
