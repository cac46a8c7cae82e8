"""Replication throttles (KIP-73): a byte-rate quota on replication traffic, one for this broker as a leader and
one as a follower, as Apache Kafka's ``ReplicationQuotaManager`` (facts from Kafka 4.x; no code copied).

What is throttled, and by what:

* the broker configs ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` (long,
  bytes/s, at least 0; default ``Long.MAX_VALUE``: unthrottled) are the two quotas' upper bounds. As in Kafka
  they can only be set dynamically (IncrementalAlterConfigs / AlterConfigs of a BROKER resource): this broker's
  own (resource name = its node id) wins over the cluster default (name ``""``); a value in
  ``server.properties`` has no effect;
* the topic configs ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
  name the throttled replicas: ``"partition:brokerId,..."`` (only the entries naming this broker count) or
  ``"*"`` (every partition of the topic); empty: none;
* a leader answers a follower's Fetch with no records for a throttled partition (``(partition, this leader's
  id)`` listed, or ``*``) while the leader quota is exceeded, unless that follower is in the ISR
  (:func:`kbroker.server.handlers.fetch._read_all`); the records it sends for throttled partitions are recorded;
* a follower leaves a throttled partition (``(partition, this follower's id)`` listed, or ``*``) out of its
  Fetch while the follower quota is exceeded, unless its replica is in the ISR
  (:mod:`kbroker.server.replica_fetcher`); the records it receives for throttled partitions are recorded.

Where kbroker differs: with a replica held back, Kafka's leader answers the follower's long poll after
``replica.fetch.wait.max.ms`` (or an append), and Kafka's follower, with nothing else to fetch, looks again after
``replica.fetch.backoff.ms``. Here both look again as soon as the quota's throttle time
(:meth:`ReplicationQuotaManager.throttle_time_s`) has passed, at most those two, so that a catch-up moves at the
configured rate even when a fetch (``replica.fetch.max.bytes``) carries less than a second of it: 195,700 B/s
measured for a 200,000 B/s throttle with 64 KiB fetches (``compat_tests/test_replication_throttle.py``), against
about 83,000 B/s with the follower waiting the whole backoff.

The rate is Kafka's ``SimpleRate`` over a ``WindowedSum`` (the stat Kafka's replication quotas use): the
bytes recorded in the retained samples divided by the time since the oldest of them began, at least one
window. A sample covers ``replication.quota.window.size.seconds`` (default 1); ``replication.quota.window.num``
(default 11) samples plus the current one are kept, and a sample whose last recording is
``window.num`` x ``window.size`` old is dropped. The quota is exceeded when the rate is above the bound (Kafka's
``Quota.upperBound``: a rate equal to it is acceptable). Unlike Kafka's ``Rate``, ``SimpleRate`` does not
assume ``window.num - 1`` empty windows before the first sample, so a burst right after a quiet period counts
in full: the first fetch of a throttled replica is sent whole, and the next ones wait until the average over
the windows has come back under the bound.

Everything here runs on the broker's event loop (no locks). Times come from a ``clock`` in seconds
(``time.monotonic`` by default; tests pass a fake one).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from kbroker.controller.topic_configs import LONG_MAX
from kbroker.server.sampled_rate import SampledRate

if TYPE_CHECKING:
    from kbroker.controller.image import MetadataImage

log = logging.getLogger(__name__)

__all__ = ["ALL_REPLICAS", "FOLLOWER_REPLICATION", "LEADER_REPLICATION", "ReplicationQuotaManager",
           "ReplicationQuotas", "SampledRate", "parse_throttled_replicas"]

LEADER_REPLICATION = "LeaderReplication"
FOLLOWER_REPLICATION = "FollowerReplication"
"""Kafka's quota types (``QuotaType``), the metric group of each quota's ``byte-rate``."""

LEADER_RATE_KEY = "leader.replication.throttled.rate"
FOLLOWER_RATE_KEY = "follower.replication.throttled.rate"
LEADER_REPLICAS_KEY = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS_KEY = "follower.replication.throttled.replicas"


class _All(frozenset):
    """Every partition of a topic (the ``*`` wildcard)."""

    def __contains__(self, item: object) -> bool:
        return True

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_REPLICAS"


ALL_REPLICAS: frozenset[int] = _All()
"""The throttled partitions of a topic whose replicas list is ``*``."""


class ReplicationQuotaManager:
    """One replication quota (``replication_type`` :data:`LEADER_REPLICATION` or :data:`FOLLOWER_REPLICATION`):
    the upper bound in bytes/s, the measured rate of throttled replication traffic, and which partitions are
    throttled on this broker. The narrow interface the fetch paths use is :meth:`record`,
    :meth:`is_quota_exceeded` and :meth:`is_throttled` (Kafka's ``ReplicaQuota``)."""

    def __init__(self, replication_type: str, window_num: int = 11, window_size_s: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.replication_type = replication_type
        self._clock = clock
        self._rate = SampledRate(window_num, window_size_s * 1000.0)
        #: the quota's upper bound, bytes/s (``Long.MAX_VALUE``: unthrottled)
        self.upper_bound: int = LONG_MAX
        #: topic -> throttled partition ids (:data:`ALL_REPLICAS` for ``*``)
        self._throttled: dict[str, frozenset[int]] = {}
        #: bytes recorded since start (a counter for metrics)
        self.recorded_bytes = 0

    def _now_ms(self) -> float:
        return self._clock() * 1000.0

    def update_quota(self, upper_bound: int) -> None:
        """Set the upper bound (bytes/s); the samples recorded so far are kept."""
        if upper_bound != self.upper_bound:
            log.info("%s quota: %s bytes/s", self.replication_type,
                     "unthrottled" if upper_bound >= LONG_MAX else upper_bound)
        self.upper_bound = upper_bound

    def record(self, nbytes: int) -> None:
        """Count ``nbytes`` of throttled replication traffic, whether or not the quota is exceeded."""
        if nbytes > 0:
            self._rate.record(nbytes, self._now_ms())
            self.recorded_bytes += nbytes

    def rate(self) -> float:
        """The measured rate of throttled replication traffic, bytes/s."""
        return self._rate.measure(self._now_ms())

    def is_quota_exceeded(self) -> bool:
        """True while the measured rate is above the upper bound (never without a bound)."""
        if self.upper_bound >= LONG_MAX:
            return False
        return self.rate() > self.upper_bound

    def throttle_time_s(self) -> float:
        """Seconds until the measured rate is back at the bound if nothing more is recorded (0 when it is not
        above it): the time at which total / bound seconds will have passed since the oldest sample began (the
        rate's window is at least one window, so never sooner than that while above). Kafka's client quotas
        compute a throttle time the same way ((rate - bound) / bound x window, ``QuotaUtils.throttleTime``);
        samples expiring meanwhile only shorten it."""
        if self.upper_bound >= LONG_MAX or not self.is_quota_exceeded():
            return 0.0
        now = self._now_ms()
        total = self._rate.total(now)
        if self.upper_bound <= 0:
            return self._rate.window_num * self._rate.window_ms / 1000.0  # until the samples expire
        return max(0.0, total / self.upper_bound - self._rate.elapsed_ms(now) / 1000.0)

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Is this broker's replica of ``topic``-``partition`` throttled by this quota?"""
        parts = self._throttled.get(topic)
        return parts is not None and partition in parts

    def should_throttle(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Hold back this replica's traffic now? A throttled replica outside the ISR while the quota is exceeded
        (Kafka's ``shouldLeaderThrottle`` / ``shouldFollowerThrottle``; ``in_sync``: the follower is in the ISR)."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_quota_exceeded()

    def mark_throttled(self, topic: str, partitions: frozenset[int]) -> None:
        """Replace the throttled partitions of ``topic`` (:data:`ALL_REPLICAS`: all of them)."""
        self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def throttled(self) -> Mapping[str, frozenset[int]]:
        """topic -> throttled partitions (read-only view, for tests and metrics)."""
        return dict(self._throttled)


def parse_throttled_replicas(value: str, broker_id: int) -> frozenset[int]:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on broker ``broker_id``:
    :data:`ALL_REPLICAS` for ``*``, else the partition ids of the ``partition:broker`` entries naming this broker
    (empty when none does, or the value is empty). Entries that are not ``int:int`` are skipped (the controller
    validated the value when it was set)."""
    text = value.strip()
    if text == "*":
        return ALL_REPLICAS
    out = set()
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not sep:
            continue
        try:
            if int(broker) == broker_id:
                out.add(int(partition))
        except ValueError:
            continue
    return frozenset(out)


def _rate_of(image: MetadataImage, node_id: int, key: str) -> int:
    """A throttle rate as Kafka's brokers resolve it: this broker's dynamic config, else the cluster default,
    else ``Long.MAX_VALUE`` (never ``server.properties``)."""
    for layer in (image.broker_configs(node_id), image.broker_configs()):
        raw = layer.get(key)
        if raw is not None and raw.strip():
            try:
                return max(0, int(raw.strip()))
            except ValueError:
                log.warning("ignoring %s=%r: not a long", key, raw)
    return LONG_MAX


class ReplicationQuotas:
    """This broker's leader and follower replication quotas, kept in step with the committed metadata image
    (:meth:`apply_image`, :meth:`on_metadata_update` as a metadata listener)."""

    def __init__(self, node_id: int, window_num: int = 11, window_size_s: int = 1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self.leader = ReplicationQuotaManager(LEADER_REPLICATION, window_num, window_size_s, clock)
        self.follower = ReplicationQuotaManager(FOLLOWER_REPLICATION, window_num, window_size_s, clock)

    @classmethod
    def from_config(cls, config: Any) -> ReplicationQuotas:
        """From ``node.id``, ``replication.quota.window.num`` and ``replication.quota.window.size.seconds``."""
        return cls(config.node_id, max(1, config.get_int("replication.quota.window.num")),
                   max(1, config.get_int("replication.quota.window.size.seconds")))

    def apply_image(self, image: MetadataImage) -> None:
        """Take the rates and the throttled replica lists from ``image``."""
        from kbroker.controller.image import TOPIC_RESOURCE

        self.leader.update_quota(_rate_of(image, self.node_id, LEADER_RATE_KEY))
        self.follower.update_quota(_rate_of(image, self.node_id, FOLLOWER_RATE_KEY))
        for quota, key in ((self.leader, LEADER_REPLICAS_KEY), (self.follower, FOLLOWER_REPLICAS_KEY)):
            wanted: dict[str, frozenset[int]] = {}
            for (rtype, topic), configs in image.configs.items():
                value = configs.get(key) if rtype == TOPIC_RESOURCE else None
                if value and value.strip():
                    wanted[topic] = parse_throttled_replicas(value, self.node_id)
            for topic in set(quota.throttled()) - set(wanted):
                quota.remove_throttle(topic)
            for topic, parts in wanted.items():
                quota.mark_throttled(topic, parts)

    def on_metadata_update(self, old: MetadataImage | None, new: MetadataImage, changes: Any = None) -> None:
        """Metadata listener: re-read the throttles when configs changed or topics went away."""
        if changes is None or getattr(changes, "changed_configs", None) or getattr(changes, "deleted_topics", None):
            self.apply_image(new)
