"""Repeated log lines, at most one per key and interval: :class:`LogLimiter`.

Used where one cause can repeat many times a second (a coordinator append refused while a partition is below
``min.insync.replicas``, transaction markers retried, an ACL denial a client keeps asking for), so that the log says
what happened once, then how often it went on happening.
"""

from __future__ import annotations

from typing import Callable, Hashable

__all__ = ["LogLimiter"]


class LogLimiter:
    """One log line per key per ``interval`` (any time unit: the caller passes ``now`` in the same unit, from its
    own clock, so a simulated clock works too); the lines in between are counted. At most ``max_keys`` keys are
    remembered: past that, keys quiet for an interval are forgotten (and, if that is not enough, all of them)."""

    def __init__(self, interval: float, max_keys: int = 1000) -> None:
        self.interval = interval
        self.max_keys = max_keys
        #: key -> [time of the last line logged, lines left out since]
        self._seen: dict[Hashable, list[float]] = {}

    def allow(self, key: Hashable, now: float) -> tuple[int, float | None] | None:
        """None: stay quiet (the line is counted). Otherwise log now: ``(lines left out since the last one logged,
        time since that one, or None if there was none)``."""
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval:
            seen[1] += 1
            return None
        if seen is None and len(self._seen) >= self.max_keys:
            for k in [k for k, (at, _) in self._seen.items() if now - at >= self.interval]:
                del self._seen[k]
            if len(self._seen) >= self.max_keys:
                self._seen.clear()
        self._seen[key] = [now, 0]
        return (int(seen[1]), now - seen[0]) if seen is not None else (0, None)

    def forget(self, match: Callable[[Hashable], bool]) -> list[tuple[Hashable, int]]:
        """Forget the keys ``match`` accepts (their cause is over); ``(key, lines left out)`` for each."""
        gone = [k for k in self._seen if match(k)]
        return [(k, int(self._seen.pop(k)[1])) for k in gone]

    def __bool__(self) -> bool:
        return bool(self._seen)
