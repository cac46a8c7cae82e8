"""Exclusive locks on data directories: one kbroker process per directory, as Kafka's ``FileLock``.

Every log directory and the metadata directory get a ``.lock`` file on which the process holds an exclusive,
non-blocking ``flock`` for its whole life. The operating system drops the lock when the process dies, also on
kill -9, so a crashed broker never leaves a stale lock. A second process that finds the lock held fails at once
with :class:`DirectoryLockedError`, before it writes anything into the directory.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Iterable

LOCK_FILE = ".lock"


class DirectoryLockedError(Exception):
    """Another process holds ``<dir>/.lock``. The message is Kafka's one line."""


class DirectoryLocks:
    """The locks this process holds; :meth:`release` (or process exit) gives them back."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def acquire(self, dirs: Iterable[Path]) -> None:
        """Lock every directory (creating it and its ``.lock`` file when missing); all or none.

        Raises :class:`DirectoryLockedError` when one is held by another process, ``OSError`` when a directory
        cannot be created or opened (for example no permission)."""
        taken: list[Path] = []
        try:
            for d in sorted({Path(os.path.abspath(x)) for x in dirs}):
                if d in self._fds:
                    continue
                d.mkdir(parents=True, exist_ok=True)
                fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise DirectoryLockedError(
                        f"Failed to acquire lock on file .lock in {d}. A Kafka instance in another process or "
                        f"thread is using this directory.") from None
                except OSError:
                    os.close(fd)
                    raise
                self._fds[d] = fd
                taken.append(d)
        except BaseException:
            for d in taken:
                self._unlock(d)
            raise

    def release(self) -> None:
        for d in list(self._fds):
            self._unlock(d)

    def _unlock(self, d: Path) -> None:
        fd = self._fds.pop(d, None)
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    @property
    def locked(self) -> list[Path]:
        return sorted(self._fds)
