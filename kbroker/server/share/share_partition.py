"""One share partition: the delivery state of a share group's records of one topic partition (KIP-932).

Pure logic, no I/O: the caller passes what it read from the log (:class:`BatchInfo`) and the time.

Every offset between the share-partition start offset (SPSO, :attr:`SharePartition.start_offset`) and the
next offset never handed out (:attr:`SharePartition.next_offset`; KIP-932's end offset SPEO is the one before it)
has a state::

    Available --acquire--> Acquired --accept--> Acknowledged
        ^                     |  --reject / gap--> Archived
        +----release----------+  (release or lock expiry; delivery count >= limit -> Archived)

* **acquire** hands out Available offsets first (records released earlier), then new offsets from the log, up to
  ``max_records`` and while at most ``group.share.partition.max.record.locks`` offsets are in flight (both soft
  in batch-aligned mode: a new log batch started below them is taken whole); each
  acquisition counts a delivery and locks the record for ``group.share.record.lock.duration.ms``. Control
  batches (transaction markers) and, under read_committed, aborted transactions' batches are Archived at once
  and never handed out.
* **acknowledge** applies AcknowledgeType 0 (gap: Archived), 1 (accept), 2 (release), 3 (reject), 4 (renew: the
  lock starts again) to offsets the member holds; anything else is INVALID_RECORD_STATE for that batch.
* a lock that expires releases the record (lazily, on the next operation); a released record whose delivery
  count reached ``group.share.delivery.count.limit`` is Archived instead.
* the SPSO moves past every leading Acknowledged or Archived offset; offsets below it are forgotten.
* :meth:`SharePartition.snapshot` (what WriteShareGroupState persists) carries the SPSO as the previous snapshot
  left it, with the offsets ended since then, as Kafka's ``SharePartition`` writes: a write carries the start
  offset the partition has, and the start offset moves only once that write completed. So the persisted start
  offset (what DescribeShareGroupOffsets shows) lags one write behind: a member that accepts offsets 0-3 and
  releases 4 in one request persists start 0 with 0-3 Acknowledged (lag 1), and the next write (a release, an
  expired lock, another acknowledgement) carries start 4.
* the first operation initializes the SPSO from ``share.auto.offset.reset``: ``latest`` (Kafka's default) is
  the high watermark (read_committed: the last stable offset), ``earliest`` the log start offset.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from kbroker.protocol.errors import ErrorCode

#: AcknowledgeType values (ShareFetch/ShareAcknowledge ``AcknowledgeTypes``)
ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW = 0, 1, 2, 3, 4


class RecordState(enum.IntEnum):
    """Kafka's ``RecordState`` ids (also used in ``__share_group_state``)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True)
class ShareSettings:
    """The settings a share partition follows (group configs, or the broker's defaults)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    auto_offset_reset: str = "latest"  # or "earliest"
    read_committed: bool = False


class BatchInfo(NamedTuple):
    """A record batch read from the log: its offsets and whether it is to be skipped (control batch, or an
    aborted transaction's under read_committed)."""

    base_offset: int
    last_offset: int
    skip: bool


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int = 0


class AcquiredRange(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class SharePartition:
    """See the module docstring. ``settings`` may be replaced between operations (group config changes)."""

    def __init__(self, settings: ShareSettings) -> None:
        self.settings = settings
        self.start_offset: int | None = None
        self.next_offset = 0
        self._records: dict[int, _InFlight] = {}
        #: a state change not yet persisted (acknowledgement, release, expiry, start offset move)
        self.dirty = False
        #: the leader epoch of the partition when this state was loaded (written with the state: fencing)
        self.leader_epoch = 0
        #: the SPSO when the last operation began (the one :meth:`snapshot` carries)
        self._persist_start: int | None = None
        #: Acknowledged/Archived offsets at or above ``_persist_start`` that the last operation moved the SPSO past
        self._retired: dict[int, _InFlight] = {}

    # ---- life cycle
    @property
    def initialized(self) -> bool:
        return self.start_offset is not None

    def initialize(self, log_start_offset: int, latest_offset: int) -> None:
        """Set the SPSO (once) from ``share.auto.offset.reset``."""
        if self.start_offset is None:
            start = log_start_offset if self.settings.auto_offset_reset == "earliest" else latest_offset
            self.start_offset = self.next_offset = self._persist_start = start

    def load(self, start_offset: int, batches: Iterable[tuple[int, int, int, int]]) -> None:
        """Restore a persisted state: the SPSO and ``(first, last, state, delivery count)`` batches (Acquired
        records come back Available, as after a lock expiry)."""
        self.start_offset = self.next_offset = start_offset
        self._records = {}
        for first, last, state, count in batches:
            if last < start_offset:
                continue
            st = RecordState(state) if state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED) \
                else RecordState.AVAILABLE
            for off in range(max(first, start_offset), last + 1):
                self._records[off] = _InFlight(st, count)
            self.next_offset = max(self.next_offset, last + 1)
        self._advance()
        self._persist_start = self.start_offset
        self._retired.clear()

    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """``(SPSO, [(first, last, state, delivery count)])`` to write (Acquired written as Available): the SPSO as
        the previous snapshot left it and the states from it on (module docstring). The SPSO moved since then is
        the one the next snapshot carries."""
        assert self.start_offset is not None
        start = self.start_offset if self._persist_start is None else min(self._persist_start, self.start_offset)
        records = {o: r for o, r in self._retired.items() if o >= start}
        records.update(self._records)
        self._persist_start = self.start_offset
        self._retired.clear()
        out: list[list[int]] = []
        for off in sorted(records):
            r = records[off]
            st = int(RecordState.AVAILABLE if r.state is RecordState.ACQUIRED else r.state)
            if out and out[-1][1] == off - 1 and out[-1][2] == st and out[-1][3] == r.delivery_count:
                out[-1][1] = off
            else:
                out.append([off, off, st, r.delivery_count])
        return start, [tuple(b) for b in out]  # type: ignore[misc]

    def on_log_start(self, log_start_offset: int) -> None:
        """Records below the log start offset are gone (retention, DeleteRecords): forget them."""
        if self.start_offset is not None and log_start_offset > self.start_offset:
            for off in range(self.start_offset, min(log_start_offset, self.next_offset)):
                self._records.pop(off, None)
            self.start_offset = self._persist_start = log_start_offset
            self.next_offset = max(self.next_offset, log_start_offset)
            self._retired.clear()
            self.dirty = True

    # ---- queries
    def state_of(self, offset: int) -> RecordState | None:
        """The state of ``offset`` while in flight (None below the SPSO or not yet handed out)."""
        r = self._records.get(offset)
        return r.state if r is not None else None

    def delivery_count(self, offset: int) -> int:
        r = self._records.get(offset)
        return r.delivery_count if r is not None else 0

    def in_flight(self) -> int:
        assert self.start_offset is not None
        return self.next_offset - self.start_offset

    def has_available(self, now_ms: int) -> bool:
        self.expire_locks(now_ms)
        return any(r.state is RecordState.AVAILABLE for r in self._records.values())

    # ---- transitions
    def expire_locks(self, now_ms: int) -> None:
        for r in self._records.values():
            if r.state is RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms:
                self._release(r)
                self.dirty = True
        self._advance()

    def acquire(self, member_id: str, now_ms: int, max_records: int, batches: Iterable[BatchInfo],
                upper_offset: int, batch_aligned: bool = False) -> list[AcquiredRange]:
        """Acquire up to ``max_records`` offsets for ``member_id``: released ones first, then new ones from
        ``batches`` (the log read from :attr:`next_offset`, below ``upper_offset``). Returns the acquired ranges
        (contiguous offsets with one delivery count each).

        ``batch_aligned`` (Kafka's default ``ShareAcquireMode`` 0, batch-optimized, KIP-1206): a new batch is
        started while fewer than ``max_records`` offsets were acquired and fewer than
        ``max_record_locks`` are in flight, and then acquired whole, so both limits are soft. Otherwise
        (record-limit mode) they are exact and a batch may be split."""
        assert self.start_offset is not None, "initialize first"
        self.expire_locks(now_ms)
        deadline = now_ms + self.settings.record_lock_duration_ms
        got: list[tuple[int, int]] = []
        for off in sorted(o for o, r in self._records.items() if r.state is RecordState.AVAILABLE):
            if len(got) >= max_records:
                break
            r = self._records[off]
            self._take(r, member_id, deadline)
            got.append((off, r.delivery_count))
        for batch in batches:
            if len(got) >= max_records or self.next_offset >= upper_offset:
                break
            if batch.last_offset < self.next_offset:
                continue
            first = max(batch.base_offset, self.next_offset)
            if batch.skip:
                for off in range(first, batch.last_offset + 1):
                    self._records[off] = _InFlight(RecordState.ARCHIVED)
                self.next_offset = batch.last_offset + 1
                continue
            for off in range(first, min(batch.last_offset, upper_offset - 1) + 1):
                if not (batch_aligned and off > first) and (
                        len(got) >= max_records or self.in_flight() >= self.settings.max_record_locks):
                    break
                r = _InFlight(RecordState.AVAILABLE)
                self._records[off] = r
                self._take(r, member_id, deadline)
                got.append((off, r.delivery_count))
                self.next_offset = off + 1
            if self.in_flight() >= self.settings.max_record_locks:
                break
        self._advance()
        return _ranges(sorted(got))

    @staticmethod
    def _take(r: _InFlight, member_id: str, deadline: int) -> None:
        r.state = RecordState.ACQUIRED
        r.member_id = member_id
        r.delivery_count += 1
        r.lock_deadline_ms = deadline

    def _release(self, r: _InFlight) -> None:
        r.member_id = None
        r.state = (RecordState.ARCHIVED if r.delivery_count >= self.settings.delivery_count_limit
                   else RecordState.AVAILABLE)

    def acknowledge(self, member_id: str, first_offset: int, last_offset: int, types: list[int],
                    now_ms: int) -> int:
        """Apply one acknowledgement batch; NONE, INVALID_REQUEST (bad range or types) or INVALID_RECORD_STATE
        (an offset the member does not hold): then nothing of the batch is applied."""
        if last_offset < first_offset or not types or (len(types) != 1
                                                       and len(types) != last_offset - first_offset + 1):
            return ErrorCode.INVALID_REQUEST
        if any(t not in (ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW) for t in types):
            return ErrorCode.INVALID_REQUEST
        self.expire_locks(now_ms)
        for off in range(first_offset, last_offset + 1):
            r = self._records.get(off)
            if r is None or r.state is not RecordState.ACQUIRED or r.member_id != member_id:
                return ErrorCode.INVALID_RECORD_STATE
        for i, off in enumerate(range(first_offset, last_offset + 1)):
            t = types[0] if len(types) == 1 else types[i]
            r = self._records[off]
            if t == ACK_ACCEPT:
                r.state, r.member_id = RecordState.ACKNOWLEDGED, None
            elif t in (ACK_REJECT, ACK_GAP):
                r.state, r.member_id = RecordState.ARCHIVED, None
            elif t == ACK_RELEASE:
                self._release(r)
            else:  # renew
                r.lock_deadline_ms = now_ms + self.settings.record_lock_duration_ms
        self.dirty = True
        self._advance()
        return ErrorCode.NONE

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (its share session closed); how many."""
        n = 0
        for r in self._records.values():
            if r.state is RecordState.ACQUIRED and r.member_id == member_id:
                self._release(r)
                n += 1
        if n:
            self.dirty = True
        self._advance()
        return n

    def _advance(self) -> None:
        if self.start_offset is None:
            return
        off = self.start_offset
        while off < self.next_offset:
            r = self._records.get(off)
            if r is not None and r.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            self._records.pop(off, None)
            if r is not None and self._persist_start is not None and off >= self._persist_start:
                self._retired[off] = r
            off += 1
        self.start_offset = off


def _ranges(got: list[tuple[int, int]]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for off, count in got:
        if out and out[-1].last_offset == off - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRange(out[-1].first_offset, off, count)
        else:
            out.append(AcquiredRange(off, off, count))
    return out
