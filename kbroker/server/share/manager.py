"""Share partitions and share sessions of this broker (KIP-932), for ShareFetch (78) and ShareAcknowledge (79).

* :class:`SharePartitionManager` keeps one :class:`~kbroker.server.share.share_partition.SharePartition` per
  (group, topic id, partition) this node leads, created on the first ShareFetch, and reads the log for it
  through a narrow interface (``get_partition(topic, partition)`` -> an object with ``is_leader``, ``log``,
  ``high_watermark``, ``last_stable_offset``, ``log_start_offset``).
* Share sessions (KIP-932 "Share sessions"): keyed by (group id, member id); ShareSessionEpoch 0 opens one (a
  previous one of the member is replaced), each later request must carry the next epoch
  (INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND), -1 closes it and releases the records the
  member holds on this broker. A session whose client connection closed ends the same way (found by
  :meth:`SharePartitionManager.sweep_disconnected` on the next share request, and every 100 ms while one
  waits). Incremental requests add partitions (``Topics``) and drop them
  (``ForgottenTopicsData``). At most ``group.share.max.share.sessions`` sessions (SHARE_SESSION_LIMIT_REACHED).
* :func:`share_settings` is the one place the share settings of a group are read: the group configs
  (``share.auto.offset.reset``, ``share.isolation.level``, ``share.record.lock.duration.ms``,
  ``share.delivery.count.limit``, ``share.partition.max.record.locks``) from ``broker.group_configs(group_id)``
  (the group's dynamic configs, ConfigResource GROUP), else the broker's ``group.share.*`` defaults.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.share.share_partition import AcquiredRange, BatchInfo, SharePartition, ShareSettings

log = logging.getLogger(__name__)

#: Kafka's defaults of the broker keys read here
BROKER_DEFAULTS: dict[str, int] = {
    "group.share.record.lock.duration.ms": 30_000,
    "group.share.delivery.count.limit": 5,
    "group.share.partition.max.record.locks": 2000,
    "group.share.max.share.sessions": 2000,
}
SHARE_VERSION_FEATURE = "share.version"
#: ShareFetch ``ShareAcquireMode`` values (KIP-1206); v1 requests are batch-optimized
ACQUIRE_BATCH_OPTIMIZED, ACQUIRE_RECORD_LIMIT = 0, 1

_HEADER = struct.Struct(">qi")  # base offset, batch length
_ATTRS = struct.Struct(">hi")  # attributes, last offset delta (at byte 21)
_PID = struct.Struct(">q")  # producer id (at byte 43)
_CONTROL = 0x20
#: bytes read from the log at a time for a share fetch
_READ_BYTES = 1 << 20
_TRANSACTIONAL = 0x10


def _broker_int(broker: Any, key: str) -> int:
    props = getattr(broker.config, "props", {})
    value = props.get(key)
    if value is None or str(value).strip() == "":
        return BROKER_DEFAULTS[key]
    return int(str(value).strip())


def share_groups_enabled(broker: Any) -> bool:
    """Kafka serves share groups when the ``share.version`` feature is finalized at level 1 or above."""
    return broker.controller.image.features.get(SHARE_VERSION_FEATURE, 0) >= 1


def share_settings(broker: Any, group_id: str) -> ShareSettings:
    """The share settings of ``group_id`` (see the module docstring): each group config, else its broker synonym,
    else Kafka's default; a group value outside the broker's current bounds (``group.share.min/max.*``) is kept
    within them, as Kafka's ``GroupConfig`` evaluation does."""
    from kbroker.controller.group_configs import effective_group_config

    lookup = getattr(broker, "group_configs", None)
    group: dict[str, str] = dict(lookup(group_id) or {}) if callable(lookup) else {}
    eff = effective_group_config(group, dict(getattr(broker.config, "props", {})))
    return ShareSettings(
        record_lock_duration_ms=int(eff["share.record.lock.duration.ms"]),  # type: ignore[call-overload]
        delivery_count_limit=int(eff["share.delivery.count.limit"]),  # type: ignore[call-overload]
        max_record_locks=int(eff["share.partition.max.record.locks"]),  # type: ignore[call-overload]
        auto_offset_reset=str(eff["share.auto.offset.reset"] or "latest").lower(),
        read_committed=str(eff["share.isolation.level"]).lower() == "read_committed",
    )


def parse_batches(data: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """``(base offset, last offset, attributes, producer id, start, end)`` of each whole v2 batch in ``data``."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        attrs, delta = _ATTRS.unpack_from(data, pos + 21)
        (pid,) = _PID.unpack_from(data, pos + 43)
        out.append((base, base + delta, attrs, pid, pos, end))
        pos = end
    return out


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    #: the epoch the next request must carry
    next_epoch: int = 1
    #: (topic id, partition)
    partitions: dict[tuple[bytes, int], None] = field(default_factory=dict)
    #: the connection of the session's last request (``closed``: the client went away)
    connection: Any = None


@dataclass
class FetchedPartition:
    """What one share partition gave a ShareFetch: the acquired ranges and the batches holding them."""

    ranges: list[AcquiredRange]
    records: bytes


class SharePartitionManager:
    """See the module docstring."""

    def __init__(self, get_partition: Callable[[str, int], Any], settings_for: Callable[[str], ShareSettings],
                 max_sessions: int = BROKER_DEFAULTS["group.share.max.share.sessions"],
                 persister: Any = None) -> None:
        self._get_partition = get_partition
        self._settings_for = settings_for
        #: ``load(group, topic id, partition)`` / ``save(...)`` (:mod:`kbroker.server.share.persister`); None:
        #: state in memory only
        self.persister = persister
        self.max_sessions = max_sessions
        self.partitions: dict[tuple[str, bytes, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        if persister is not None and hasattr(persister, "on_fenced"):  # a reset state is read again
            persister.on_fenced = lambda key: self.partitions.pop(key, None)

    @classmethod
    def for_broker(cls, broker: Any, persister: Any = None) -> SharePartitionManager:
        return cls(broker.replica_manager.get_partition, lambda group_id: share_settings(broker, group_id),
                   max_sessions=_broker_int(broker, "group.share.max.share.sessions"), persister=persister)

    # ---- sessions
    def session_for(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request with ``epoch`` continues (0: a new one). Raises KafkaError."""
        key = (group_id, member_id)
        if epoch == 0:
            if key not in self.sessions and len(self.sessions) >= self.max_sessions:
                raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
            session = ShareSession(group_id, member_id, next_epoch=0)  # the request's epoch; advance() -> 1
            self.sessions[key] = session
            return session
        session = self.sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch != -1 and epoch != session.next_epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"expected share session epoch {session.next_epoch}, got {epoch}")
        return session

    def sweep_disconnected(self) -> None:
        """Sessions whose client connection closed end as with epoch -1: their members' records here are
        released at once (Kafka 4.1+ removes a share session when its connection drops, KAFKA-19015)."""
        for session in [s for s in self.sessions.values() if s.connection is not None
                        and getattr(s.connection, "closed", False)]:
            self.close_session(session)

    def advance(self, session: ShareSession) -> None:
        session.next_epoch = 1 if session.next_epoch >= 2**31 - 1 else session.next_epoch + 1

    def close_session(self, session: ShareSession) -> None:
        """Epoch -1: the session ends and the member's records on this broker go back to Available."""
        self.sessions.pop((session.group_id, session.member_id), None)
        self.release_member(session.group_id, session.member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        for key, sp in self.partitions.items():
            if key[0] == group_id:
                sp.release_member(member_id)
                self._persist(key, sp)

    def _persist(self, key: tuple[str, bytes, int], sp: SharePartition) -> None:
        if sp.dirty and sp.initialized:
            sp.dirty = False
            start, batches = sp.snapshot()  # also without a persister: a snapshot is where the start offset moves
            if self.persister is not None:
                self.persister.save(key[0], key[1], key[2], start, batches, sp.leader_epoch)

    def forget(self, group_id: str, topic_id: bytes, partition: int | None = None) -> None:
        """Drop the in-memory share partitions of ``group_id`` on this topic (one partition, or all): their state
        was altered or deleted (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) and is read again
        on the next fetch."""
        for key in [k for k in self.partitions if k[0] == group_id and k[1] == topic_id
                    and (partition is None or k[2] == partition)]:
            del self.partitions[key]

    def forget_group(self, group_id: str) -> None:
        """The group was deleted: its share partitions and sessions here go, and its persisted state."""
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]
        delete = getattr(self.persister, "delete_group", None)
        if delete is not None:
            delete(group_id)

    # ---- partitions
    def _leader(self, topic: str, partition: int) -> Any:
        part = self._get_partition(topic, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def share_partition(self, group_id: str, topic_id: bytes, topic: str, partition: int) -> tuple[SharePartition, Any]:
        """The share partition (initialized) and the log partition; raises KafkaError (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION)."""
        part = self._leader(topic, partition)
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        settings = self._settings_for(group_id)
        if sp is None or sp.leader_epoch != getattr(part, "leader_epoch", 0):
            # new here, or this node became leader again: the persisted state is the truth
            sp = SharePartition(settings)
            sp.leader_epoch = getattr(part, "leader_epoch", 0)
            loaded = self.persister.load(group_id, topic_id, partition) if self.persister is not None else None
            # a start offset of -1: initialized by the group coordinator without one, share.auto.offset.reset
            state = loaded if loaded is not None and loaded[0] >= 0 else None
            if state is not None:
                sp.load(*state)
            if loaded is not None:  # the state records this leader's epoch (Kafka's read with a leader epoch)
                self.persister.save(group_id, topic_id, partition, -1, [], sp.leader_epoch)
            log.info("share partition %s-%d of group %s starts at leader epoch %d from %s", topic, partition,
                     group_id, sp.leader_epoch, f"its state (start offset {sp.start_offset})" if state is not None
                     else "share.auto.offset.reset")
            self.partitions[key] = sp
        else:
            sp.settings = settings
        if not sp.initialized:
            # not written yet (as Kafka): the first acknowledgement, release or expired lock writes it, until then
            # the persisted start offset stays -1 (DescribeShareGroupOffsets shows none)
            sp.initialize(part.log_start_offset,
                          part.last_stable_offset if settings.read_committed else part.high_watermark)
        sp.on_log_start(part.log_start_offset)
        self._persist(key, sp)
        return sp, part

    def acknowledge(self, group_id: str, member_id: str, topic_id: bytes, topic: str, partition: int,
                    batches: list[tuple[int, int, list[int]]], now_ms: int) -> int:
        """Apply acknowledgement batches ``(first, last, types)``; the first error, or NONE."""
        try:
            sp, _ = self.share_partition(group_id, topic_id, topic, partition)
        except KafkaError as exc:
            return exc.code
        error = ErrorCode.NONE
        for first, last, types in batches:
            code = sp.acknowledge(member_id, first, last, types, now_ms)
            if code and not error:
                error = code
        self._persist((group_id, topic_id, partition), sp)
        return error

    def fetch(self, group_id: str, member_id: str, topic_id: bytes, topic: str, partition: int, now_ms: int,
              max_records: int, max_bytes: int, acquire_mode: int = ACQUIRE_BATCH_OPTIMIZED) -> FetchedPartition:
        """Acquire records for ``member_id`` and read the batches that hold them; ``acquire_mode`` is ShareFetch's
        ``ShareAcquireMode`` (0 batch-optimized: whole log batches, ``max_records`` soft; 1 record-limit: exactly
        up to ``max_records``). Raises KafkaError."""
        sp, part = self.share_partition(group_id, topic_id, topic, partition)
        settings = sp.settings
        upper = part.last_stable_offset if settings.read_committed else part.high_watermark
        log = part.log
        new_batches: list[BatchInfo] = []
        if sp.next_offset < upper and sp.in_flight() < settings.max_record_locks:
            data = log.read(sp.next_offset, min(max(max_bytes, 1), _READ_BYTES), upper, True).read_bytes()
            parsed = parse_batches(data)
            aborted = []
            if settings.read_committed and parsed:
                aborted = log.collect_aborted_transactions(parsed[0][0], parsed[-1][1] + 1)
            for base, last, attrs, pid, _, _ in parsed:
                skip = bool(attrs & _CONTROL) or (
                    bool(attrs & _TRANSACTIONAL)
                    and any(a.producer_id == pid and a.first_offset <= base <= a.last_offset for a in aborted))
                new_batches.append(BatchInfo(base, last, skip))
        ranges = sp.acquire(member_id, now_ms, max_records, new_batches, upper,
                            batch_aligned=acquire_mode != ACQUIRE_RECORD_LIMIT)
        self._persist((group_id, topic_id, partition), sp)  # locks that expired meanwhile
        if not ranges:
            return FetchedPartition([], b"")
        return FetchedPartition(ranges, self._batches_for(log, ranges, upper))

    @staticmethod
    def _batches_for(log: Any, ranges: list[AcquiredRange], upper: int) -> bytes:
        """The whole batches that hold the acquired offsets, in offset order, each once."""
        seen: dict[int, tuple[int, bytes]] = {}
        covered_to = -1
        for r in ranges:
            offset = max(r.first_offset, covered_to + 1)
            while offset <= r.last_offset:
                data = log.read(offset, _READ_BYTES, upper, True).read_bytes()
                parsed = parse_batches(data)
                if not parsed:
                    break
                for base, last, _, _, start, end in parsed:
                    seen.setdefault(base, (last, data[start:end]))
                    covered_to = max(covered_to, last)
                offset = covered_to + 1
        return b"".join(chunk for base, (last, chunk) in sorted(seen.items())
                        if any(last >= r.first_offset and base <= r.last_offset for r in ranges))

    def log_partitions(self, keys: list[tuple[bytes, str, int]]) -> list[Any]:
        out = []
        for _, topic, partition in keys:
            try:
                out.append(self._leader(topic, partition))
            except KafkaError:
                pass
        return out
