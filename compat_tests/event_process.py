"""A test driver running as its own process that reports what happens as JSON lines on stdout (one object per
line with an ``event`` key; other lines are ignored): the group members of compat_tests/test_groups.py and the
Kafka Streams instances of compat_tests/streams_support.py. A reader thread collects the events (and ends them
with ``{"event": "exited"}``), another keeps the tail of stderr; :meth:`EventProcess.wait_until` is bounded."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any, Callable

from compat_tests.clients import REPO_ROOT


class EventProcess:
    #: how many stderr lines are kept (for failure messages)
    STDERR_LINES = 300

    def __init__(self, cmd: list[str], name: str, stdin: int = subprocess.DEVNULL,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     bufsize=1, cwd=str(REPO_ROOT), env=env)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"event": "exited"})
            self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            del self.stderr[:-self.STDERR_LINES]

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.events)

    def wait_until(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str,
                   stop_at_exit: bool = False) -> None:
        """Until ``pred(events)`` holds; AssertionError after ``timeout`` seconds (at once when ``stop_at_exit``
        and the process has exited), with the last events and stderr lines."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or (stop_at_exit and self.events and self.events[-1]["event"] == "exited"):
                    raise AssertionError(f"{self.name}: no {what} after {timeout}s; last events "
                                         f"{self.events[-8:]}\nstderr: {''.join(self.stderr[-40:])}")
                self._cond.wait(min(left, 0.5))
