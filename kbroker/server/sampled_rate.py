"""Rates measured over sampled windows, as Kafka's metrics measure quotas (``SampledStat``, ``Rate``,
``SimpleRate``; facts from Kafka 4.x, no code copied). Used by the replication throttles
(``kbroker.server.replication_quota``, ``SimpleRate``) and the client quotas (``kbroker.server.client_quotas``,
``Rate``).

A sample covers ``window_ms``; ``window_num`` samples are kept for ``Rate`` (``window_num`` + 1 for ``SimpleRate``,
the replication throttles'; the oldest is reused), and a sample that began (``Rate``; ``SimpleRate``: whose last
recording is) ``window_num`` x ``window_ms`` ago is dropped. The rate is the sum of the retained samples divided by
the time they cover:

* ``SimpleRate`` (``kafka_rate=False``): the time since the oldest retained sample began, at least one window;
* ``Rate`` (``kafka_rate=True``): the same time, but at least ``window_num - 1`` full windows (Kafka assumes the
  windows before the first recording were empty, so a burst right after a quiet period is spread over the whole
  quota window instead of counting in full), and at least 1 ms.

Times in ms, from the caller. No I/O, no locks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SampledRate"]


@dataclass
class _Sample:
    start_ms: float
    last_event_ms: float
    value: float = 0.0


class SampledRate:
    """A sum kept in ``window_num`` (+ 1) samples of ``window_ms`` each, measured as a rate per second: Kafka's
    ``SimpleRate`` over a ``WindowedSum``, or with ``kafka_rate`` Kafka's ``Rate`` (module docstring). Times in ms,
    from the caller."""

    def __init__(self, window_num: int = 11, window_ms: float = 1000.0, kafka_rate: bool = False) -> None:
        if window_num < 1 or window_ms <= 0:
            raise ValueError(f"window_num must be >= 1 and window_ms > 0 (got {window_num}, {window_ms})")
        self.window_num = window_num
        self.window_ms = window_ms
        #: Kafka's ``Rate`` (at least ``window_num - 1`` full windows) instead of ``SimpleRate``
        self.kafka_rate = kafka_rate
        #: samples kept: ``window_num`` (Kafka's ``MetricConfig.samples``) for ``Rate``; one more for the
        #: replication throttles' ``SimpleRate`` (kbroker.server.replication_quota)
        self._slots = window_num if kafka_rate else window_num + 1
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        """Add ``value`` to the current sample, first starting a new one when the current one is a window old
        (the oldest is reused once ``window_num`` + 1 exist)."""
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self._slots
            if self._current >= len(self._samples):
                sample = _Sample(now_ms, now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.start_ms = sample.last_event_ms = now_ms
                sample.value = 0.0
        sample.value += value
        sample.last_event_ms = now_ms

    def _purge(self, now_ms: float) -> None:
        expire_ms = self.window_num * self.window_ms
        for s in self._samples:
            # Kafka's Rate drops a sample that began that long ago; the replication throttles' SimpleRate one
            # whose last recording is that old
            if now_ms - (s.start_ms if self.kafka_rate else s.last_event_ms) >= expire_ms:
                s.start_ms = s.last_event_ms = now_ms
                s.value = 0.0

    def total(self, now_ms: float) -> float:
        """What the retained samples hold (after dropping the expired ones)."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def elapsed_ms(self, now_ms: float) -> float:
        """The time since the oldest retained sample began (0 without samples)."""
        self._purge(now_ms)
        return now_ms - min((s.start_ms for s in self._samples), default=now_ms)

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is measured over: :meth:`elapsed_ms`, at least one window (``SimpleRate``); with
        ``kafka_rate``, completed to ``window_num - 1`` full windows when fewer have passed, at least 1 ms."""
        elapsed = self.elapsed_ms(now_ms)
        if not self.kafka_rate:
            return max(elapsed, self.window_ms)
        full = int(elapsed // self.window_ms)
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def unrecord(self, value: float, now_ms: float) -> None:
        """Take ``value`` back out of the current sample (a throttled fetch whose records are not sent)."""
        if self._samples:
            self._samples[self._current].value -= value

    def measure(self, now_ms: float) -> float:
        """The rate per second at ``now_ms``."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)
