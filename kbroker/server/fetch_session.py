"""Incremental fetch sessions (KIP-227): a consumer or follower that fetches many partitions sends them once, then
only the partitions whose fetch position changed, and gets back only the partitions with something new.

A session remembers, per partition in the order they were added, the last fetch parameters the client sent
(``FetchRequest.FetchPartition``) and what the last response told it (high watermark, last stable offset, log
start offset). Request kinds, by ``(SessionId, SessionEpoch)`` (the spec's FetchRequest "SessionId" notes):

* ``(0, -1)``: no session, a full request and a full response (``SessionId`` 0);
* ``(0, 0)`` or ``(id, 0)``: a new session (closing ``id``) holding the request's partitions; a full response
  with the new ``SessionId`` (0 when every slot of ``max.incremental.fetch.session.cache.slots`` is taken by a
  session used in the last ``EVICTION_MS``);
* ``(id, -1)``: close ``id``, then as ``(0, -1)``;
* ``(id, n > 0)``: incremental: ``n`` must be the epoch the session expects (else INVALID_FETCH_SESSION_EPOCH;
  an unknown ``id`` FETCH_SESSION_ID_NOT_FOUND); the request's partitions update or join the session,
  ``ForgottenTopicsData`` leave it, every partition of the session is read, and the response holds those with
  records, an error, a changed high watermark / last stable offset / log start offset, or a diverging epoch,
  preferred read replica or leader hint. Partitions that returned records move to the end of the session, so a
  ``MaxBytes`` budget reaches every partition in turn (as Kafka's sessions do).

A session keyed by topic ids (Fetch v13+) cannot be continued by a request with topic names or the other way
round (FETCH_SESSION_TOPIC_ID_ERROR). Nothing here touches the broker: the handler reads the partitions.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from kbroker.protocol.errors import ErrorCode

#: a session used within this many ms is not evicted for a new one (Kafka's
#: ``min.incremental.fetch.session.eviction.ms``, not a broker config there either)
EVICTION_MS = 120_000

#: (topic key, partition): the topic id (v13+) or the topic name
PartitionKey = tuple[Any, int]


@dataclass
class SessionPartition:
    """One partition of a session: the topic's name and id as the client sent them, its fetch parameters, and
    what the last response sent of it (None: not sent yet)."""

    topic: str
    topic_id: bytes
    fetch: Any  # FetchRequest.FetchPartition
    sent: tuple[int, int, int] | None = None  # (high watermark, last stable offset, log start offset)


@dataclass
class FetchSession:
    session_id: int
    uses_topic_ids: bool
    epoch: int = 1  # the epoch the next incremental request must carry
    partitions: dict[PartitionKey, SessionPartition] = field(default_factory=dict)
    last_used_ms: float = 0.0


class FetchSessionCache:
    """The sessions of one broker, at most ``max_slots`` (``max.incremental.fetch.session.cache.slots``)."""

    def __init__(self, max_slots: int = 1000) -> None:
        self.max_slots = max_slots
        self.sessions: dict[int, FetchSession] = {}
        #: counters for the metrics endpoint: sessions created, incremental requests answered, evictions
        self.created = 0
        self.incremental_requests = 0
        self.evictions = 0

    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def _new_id(self) -> int:
        while True:
            sid = random.randint(1, 2**31 - 1)
            if sid not in self.sessions:
                return sid

    def create(self, uses_topic_ids: bool, now_ms: float | None = None) -> FetchSession | None:
        """A new session, or None when the cache is full of sessions used within EVICTION_MS (the oldest
        idle one is evicted otherwise)."""
        now = time.monotonic() * 1000 if now_ms is None else now_ms
        if self.max_slots <= 0:
            return None
        if len(self.sessions) >= self.max_slots:
            oldest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
            if now - oldest.last_used_ms < EVICTION_MS:
                return None
            del self.sessions[oldest.session_id]
            self.evictions += 1
        session = FetchSession(self._new_id(), uses_topic_ids, last_used_ms=now)
        self.created += 1
        self.sessions[session.session_id] = session
        return session

    def close(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)

    def lookup(self, session_id: int, epoch: int, uses_topic_ids: bool, now_ms: float | None = None
               ) -> tuple[FetchSession | None, int]:
        """The session an incremental request continues, or (None, error code)."""
        session = self.sessions.get(session_id)
        if session is None:
            return None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if epoch != session.epoch:
            return None, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if uses_topic_ids != session.uses_topic_ids:
            return None, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        session.last_used_ms = time.monotonic() * 1000 if now_ms is None else now_ms
        self.incremental_requests += 1
        return session, ErrorCode.NONE


def key_of(topic: Any, uses_topic_ids: bool) -> Any:
    """The session's key of a request's FetchTopic or ForgottenTopic."""
    return topic.topic_id if uses_topic_ids else topic.topic


def update(session: FetchSession, request: Any) -> None:
    """Apply an incremental request: its partitions join or update the session, its forgotten ones leave."""
    ids = session.uses_topic_ids
    for ft in request.topics:
        k = key_of(ft, ids)
        for fp in ft.partitions:
            sp = session.partitions.get((k, fp.partition))
            if sp is None:
                session.partitions[(k, fp.partition)] = SessionPartition(ft.topic, ft.topic_id, fp)
            else:
                sp.fetch = fp
    for gone in request.forgotten_topics_data:
        k = key_of(gone, ids)
        for p in gone.partitions:
            session.partitions.pop((k, p), None)


def add_all(session: FetchSession, request: Any) -> None:
    """A new session: every partition of the (full) request, in order."""
    ids = session.uses_topic_ids
    for ft in request.topics:
        for fp in ft.partitions:
            session.partitions[(key_of(ft, ids), fp.partition)] = SessionPartition(ft.topic, ft.topic_id, fp)


def topics_of(session: FetchSession, request_cls: Any) -> list[Any]:
    """The session's partitions as FetchRequest topics (consecutive partitions of a topic grouped), in order."""
    topics: list[Any] = []
    last_key = object()
    for (k, _), sp in session.partitions.items():
        if k != last_key:
            topics.append(request_cls.FetchTopic(topic=sp.topic, topic_id=sp.topic_id, partitions=[]))
            last_key = k
        topics[-1].partitions.append(sp.fetch)
    return topics


def _must_send(pd: Any, sp: SessionPartition) -> bool:
    return bool(pd.records) or pd.error_code != 0 or sp.sent != (
        pd.high_watermark, pd.last_stable_offset, pd.log_start_offset) or pd.preferred_read_replica >= 0 or \
        pd.diverging_epoch.epoch >= 0 or pd.current_leader.leader_id >= 0


def record_sent(session: FetchSession, response: Any, incremental: bool) -> None:
    """After a response of ``session``: remember what each partition was told; for an incremental response
    drop the partitions with nothing new; partitions that returned records move to the session's end."""
    ids = session.uses_topic_ids
    moved: list[PartitionKey] = []
    kept_topics = []
    for topic in response.responses:
        k = key_of(topic, ids)
        kept = []
        for pd in topic.partitions:
            key = (k, pd.partition_index)
            sp = session.partitions.get(key)
            if sp is None:
                if not incremental:
                    kept.append(pd)
                continue
            if not incremental or _must_send(pd, sp):
                kept.append(pd)
            sp.sent = (pd.high_watermark, pd.last_stable_offset, pd.log_start_offset)
            if pd.records:
                moved.append(key)
        if kept or not incremental:
            topic.partitions = kept
            kept_topics.append(topic)
    response.responses = kept_topics
    for key in moved:
        session.partitions[key] = session.partitions.pop(key)
    if incremental:  # a new session expects epoch 1 next; each incremental request the one after its own
        session.epoch = 1 if session.epoch >= 2**31 - 1 else session.epoch + 1
