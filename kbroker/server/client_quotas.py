"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599): byte rates, request time and partition mutations per
user and client id, as Apache Kafka's ``ClientQuotaManager`` family enforces them (facts from Kafka 4.x; no code
copied).

Where a quota comes from. The quotas are ``MetadataImage.client_quotas`` (ClientQuotaRecords, set with
AlterClientQuotas / ``kbroker-configs``), so a change takes effect as soon as this broker applies the record. For a
request from user U (the connection's principal name, ``User:`` left out) with client id C, each quota key is
looked up in Kafka's order, the first entity that sets the key winning:

1. user U + client C, 2. user U + default client, 3. user U, 4. default user + client C, 5. default user + default
client, 6. default user, 7. client C, 8. default client.

No entity sets it: no quota. The rate is measured per matched entity, as Kafka's quota sensors are tagged: the
user and client id of the request for the types the entity has (so every client of user U shares U's quota, and
each client id has its own rate under a default client-id quota).

What is measured, over ``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's ``Rate``,
:class:`kbroker.server.sampled_rate.SampledRate`):

* ``producer_byte_rate``: the size of each Produce request;
* ``consumer_byte_rate``: the size of each Fetch response to a consumer (follower fetches are not counted). A fetch
  over the quota is answered without records (its bytes are taken back out of the rate), as Kafka does;
* ``request_percentage``: the time the event loop spent handling the request (decoding, the handler's own steps,
  encoding; not the time it waited, so a long-polling fetch counts only its work), as a percentage of one thread;
* ``controller_mutation_rate``: partitions created (CreateTopics, CreatePartitions) or deleted (DeleteTopics),
  in a token bucket as Kafka's ``ControllerMutationQuotaManager`` keeps it (KIP-599: at most ``controller_mutation_
  rate`` x ``controller.quota.window.num`` x ``controller.quota.window.size.seconds`` tokens, refilled at the
  rate; a request may take the bucket below 0, and the throttle time is how long it takes to come back to 0).
  CreateTopics v6+, CreatePartitions v3+ and DeleteTopics v5+ (strict): a topic met while the bucket is below 0
  gets THROTTLING_QUOTA_EXCEEDED (CreateTopics with a null message, as Kafka 4.3 answers) and a throttle time; a
  strict request let through is not throttled even if it takes the bucket below 0; older versions are let through
  and throttled. ``validate_only`` requests are not counted.

Throttling (KIP-219): when a rate is above its quota the throttle time is (rate - quota) / quota x the rate's
window (Kafka's ``QuotaUtils.throttleTime``), at most ``quota.window.num`` x ``quota.window.size.seconds`` (for
``request_percentage`` at most ``quota.window.size.seconds``, as Kafka bounds it); the response goes out at once
with ``throttle_time_ms`` (the largest
of the quotas' throttle times) and the broker stops reading from the connection for that long (the channel is
muted), so the client cannot send more meanwhile. For a version older than KIP-219 (Produce < v6, Fetch < v8 and
the like: :func:`client_throttles`) the client does not throttle itself, so the broker holds the response back
for the throttle time instead.

Exempt, as in Kafka: requests forwarded by another node, follower fetches, the controller quorum's own APIs and
the SASL handshake.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from kbroker.protocol.api_keys import ApiKey
from kbroker.server.sampled_rate import SampledRate

if TYPE_CHECKING:
    from kbroker.controller.image import MetadataImage

log = logging.getLogger(__name__)

__all__ = ["ClientQuotas", "QuotaManager", "client_throttles", "lookup_quota", "throttle_time_ms"]

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
CONTROLLER_MUTATION = "controller_mutation_rate"

#: the first version of each API whose client throttles itself (KIP-219, Kafka's ``shouldClientThrottle``); an API
#: missing here has done so from its first version
_CLIENT_THROTTLES_FROM: Mapping[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6, ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1, ApiKey.OFFSET_FOR_LEADER_EPOCH: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1, ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.ALTER_CONFIGS: 1,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 1, ApiKey.DESCRIBE_LOG_DIRS: 1, ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.SASL_AUTHENTICATE: 1,
}

#: APIs never counted against a client's quotas (inter-node and authentication)
_EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

#: the lookup order of KIP-55: which of (user, client id) an entity names, and whether by name (True) or as the
#: default (False)
_PRECEDENCE: tuple[tuple[bool | None, bool | None], ...] = (
    (True, True), (True, False), (True, None), (False, True), (False, False), (False, None), (None, True),
    (None, False))


def client_throttles(api_key: int, api_version: int) -> bool:
    """Does a client at this API version throttle itself on ``throttle_time_ms`` (KIP-219)?"""
    return api_version >= _CLIENT_THROTTLES_FROM.get(api_key, 0)


def lookup_quota(quotas: Mapping[Any, Mapping[str, float]], key: str, user: str, client_id: str
                 ) -> tuple[float, tuple[str, str]] | None:
    """The quota ``key`` of a request from ``user`` (principal name) with ``client_id``, in KIP-55's precedence
    order (module docstring): ``(bound, (user tag, client tag))`` of the first entity that sets it, the tags being
    the request's user / client id for the types that entity has ("" otherwise); None without a quota."""
    for by_user, by_client in _PRECEDENCE:
        parts = []
        if by_user is not None:
            parts.append(("user", user if by_user else None))
        if by_client is not None:
            parts.append(("client-id", client_id if by_client else None))
        parts.sort()
        values = quotas.get(tuple(parts))
        if values is not None and key in values:
            return values[key], (user if by_user is not None else "", client_id if by_client is not None else "")
    return None


def throttle_time_ms(rate: float, bound: float, window_ms: float) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: (rate - bound) / bound x the rate's window, in ms (0 when not above;
    a bound of 0 throttles for the whole window)."""
    if rate <= bound:
        return 0
    if bound <= 0:
        return int(window_ms)
    return int((rate - bound) / bound * window_ms)


class QuotaManager:
    """One quota type (``key``: a ClientQuotaRecord key): the rate per matched entity and the throttle time."""

    def __init__(self, key: str, window_num: int, window_ms: float, clock: Callable[[], float]) -> None:
        self.key = key
        self.window_num = window_num
        self.window_ms = window_ms
        self._clock = clock
        self._rates: dict[tuple[str, str], SampledRate] = {}
        self._last_used: dict[tuple[str, str], float] = {}
        #: token buckets (tokens, last update in s) of the controller mutation quota
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        #: total throttle time handed out, ms, by (user tag, client tag) (metrics)
        self.throttle_time_total: dict[tuple[str, str], float] = {}

    def _rate(self, tags: tuple[str, str]) -> SampledRate:
        rate = self._rates.get(tags)
        if rate is None:
            rate = self._rates[tags] = SampledRate(self.window_num, self.window_ms, kafka_rate=True)
        self._last_used[tags] = self._clock()
        return rate

    def record(self, bound: float, tags: tuple[str, str], value: float) -> int:
        """Count ``value`` for the entity ``tags``; the throttle time in ms (0: within ``bound``)."""
        now = self._clock() * 1000.0
        rate = self._rate(tags)
        rate.record(value, now)
        # request_percentage: at most one sample window (Kafka's ClientRequestQuotaManager.maxThrottleTimeMs); the
        # others at most the whole quota window, so a tiny quota does not mute a client for hours
        cap = self.window_ms if self.key == REQUEST else self.window_num * self.window_ms
        return min(throttle_time_ms(rate.measure(now), bound, rate.window_size_ms(now)), int(cap))

    def unrecord(self, tags: tuple[str, str], value: float) -> None:
        self._rate(tags).unrecord(value, self._clock() * 1000.0)

    def exceeded_ms(self, bound: float, tags: tuple[str, str]) -> int:
        """The throttle time if the entity's rate is above ``bound`` now, without recording anything."""
        now = self._clock() * 1000.0
        rate = self._rate(tags)
        return throttle_time_ms(rate.measure(now), bound, rate.window_size_ms(now))

    def take_tokens(self, bound: float, tags: tuple[str, str], value: float, strict: bool) -> tuple[bool, int]:
        """Kafka's ``TokenBucket`` (KIP-599, controller mutations): a bucket of at most ``bound`` x window_num x
        window seconds of tokens, refilled at ``bound`` per second; ``value`` tokens taken (it may go negative).
        Returns (taken, throttle ms = the time until the bucket is back at 0). ``strict``: nothing is taken while
        the bucket is below 0, and, as Kafka's strict quota, a request taken is not throttled (only a refused one
        is, for the time until the bucket is back at 0)."""
        now = self._clock()
        burst = bound * self.window_num * self.window_ms / 1000.0
        tokens, last = self._buckets.get(tags, (burst, now))
        tokens = min(burst, tokens + (now - last) * bound)
        self._last_used[tags] = now
        taken = not (strict and tokens < 0)
        if taken:
            tokens -= value
        self._buckets[tags] = (tokens, now)
        if tokens >= 0 or (strict and taken):
            return taken, 0
        return taken, int(-tokens / bound * 1000) if bound > 0 else int(self.window_num * self.window_ms)

    def measure(self, tags: tuple[str, str]) -> float:
        rate = self._rates.get(tags)
        return 0.0 if rate is None else rate.measure(self._clock() * 1000.0)

    def note_throttle(self, tags: tuple[str, str], ms: int) -> None:
        self.throttle_time_total[tags] = self.throttle_time_total.get(tags, 0.0) + ms

    def expire(self, idle_s: float) -> None:
        """Drop the rates of entities unused for ``idle_s`` (Kafka's sensors expire after an hour)."""
        cutoff = self._clock() - idle_s
        for tags in [t for t, at in self._last_used.items() if at < cutoff]:
            self._rates.pop(tags, None)
            self._buckets.pop(tags, None)
            self._last_used.pop(tags, None)


class ClientQuotas:
    """This broker's client quotas, following the committed metadata image (:meth:`apply_image`,
    :meth:`on_metadata_update`)."""

    def __init__(self, window_num: int = 11, window_size_s: float = 1.0,
                 mutation_window_num: int = 11, mutation_window_size_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.managers = {key: QuotaManager(key, window_num, window_size_s * 1000.0, clock)
                         for key in (PRODUCE, FETCH, REQUEST)}
        self.managers[CONTROLLER_MUTATION] = QuotaManager(CONTROLLER_MUTATION, mutation_window_num,
                                                          mutation_window_size_s * 1000.0, clock)
        self._quotas: Mapping[Any, Mapping[str, float]] = {}
        #: the keys any user / client-id entity sets (nothing to do for the others)
        self._keys: frozenset[str] = frozenset()
        self._cache: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}

    @classmethod
    def from_config(cls, config: Any) -> ClientQuotas:
        """From ``quota.window.num``, ``quota.window.size.seconds``, ``controller.quota.window.num`` and
        ``controller.quota.window.size.seconds``."""
        return cls(max(1, config.get_int("quota.window.num")), max(1, config.get_int("quota.window.size.seconds")),
                   max(1, config.get_int("controller.quota.window.num")),
                   max(1, config.get_int("controller.quota.window.size.seconds")))

    @property
    def active(self) -> bool:
        """Is any user or client-id quota set?"""
        return bool(self._keys)

    def has(self, key: str) -> bool:
        return key in self._keys

    def apply_image(self, image: MetadataImage) -> None:
        quotas = {entity: values for entity, values in image.client_quotas.items()
                  if all(t in ("user", "client-id") for t, _ in entity)}
        self._quotas = quotas
        self._keys = frozenset(k for values in quotas.values() for k in values)
        self._cache = {}

    def on_metadata_update(self, old: Any, new: MetadataImage, changes: Any = None) -> None:
        if changes is None or getattr(changes, "changed_client_quotas", None):
            self.apply_image(new)

    def quota(self, key: str, principal: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """:func:`lookup_quota` for a connection's ``principal`` (``User:alice``), cached per image."""
        user = principal.split(":", 1)[1] if ":" in principal else principal
        ck = (key, user, client_id)
        if ck not in self._cache:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[ck] = lookup_quota(self._quotas, key, user, client_id)
        return self._cache[ck]

    def record(self, key: str, principal: str, client_id: str, value: float) -> int:
        """Count ``value`` against quota ``key`` of this client; the throttle time in ms (0: none or within)."""
        found = self.quota(key, principal, client_id) if key in self._keys else None
        if found is None:
            return 0
        bound, tags = found
        ms = self.managers[key].record(bound, tags, value)
        if ms:
            self.managers[key].note_throttle(tags, ms)
        return ms

    def unrecord(self, key: str, principal: str, client_id: str, value: float) -> None:
        found = self.quota(key, principal, client_id) if key in self._keys else None
        if found is not None:
            self.managers[key].unrecord(found[1], value)

    def record_mutations(self, principal: str, client_id: str, partitions: int, strict: bool) -> tuple[bool, int]:
        """KIP-599: count ``partitions`` created or deleted against this client's ``controller_mutation_rate``.
        Returns (accepted, throttle ms). ``strict`` (the versions that know THROTTLING_QUOTA_EXCEEDED): refused,
        and nothing counted, while the quota is already exceeded; else always accepted and counted."""
        found = self.quota(CONTROLLER_MUTATION, principal, client_id) if CONTROLLER_MUTATION in self._keys else None
        if found is None:
            return True, 0
        bound, tags = found
        manager = self.managers[CONTROLLER_MUTATION]
        accepted, ms = manager.take_tokens(bound, tags, partitions, strict)
        if ms:
            manager.note_throttle(tags, ms)
        return accepted, ms

    def expire(self, idle_s: float) -> None:
        """Drop the rates of quota entities unused for ``idle_s``."""
        for manager in self.managers.values():
            manager.expire(idle_s)

    def throttle_totals(self) -> Iterable[tuple[str, str, str, float]]:
        """(quota key, user tag, client tag, total throttle ms) for metrics."""
        for key, manager in self.managers.items():
            for (user, client), ms in manager.throttle_time_total.items():
                yield key, user, client, ms

    @staticmethod
    def exempt(ctx: Any, api_key: int) -> bool:
        """Requests never counted: forwarded by another node, the SASL handshake, the quorum's own APIs."""
        from kbroker.server.metadata_quorum import FORWARDED_PREFIX

        return api_key in _EXEMPT or ctx.client_id.startswith(FORWARDED_PREFIX)
