"""Coordinator runtime: shards of state derived from an internal topic, written through records.

A coordinator (the group coordinator now, the transaction coordinator later) keeps its state in a compacted
internal topic (``__consumer_offsets``). Every partition of that topic is one *shard*: the state of the keys
that hash to it (``partition_for``), owned by the node that leads the partition. The runtime moves a shard
through its life and runs every operation on it the same way:

* **write**: an operation is a function ``op(shard) -> CoordinatorResult(records, response)``. It reads the
  shard and decides; it does not change durable state itself. The runtime serialises the records
  (:class:`CoordinatorRecordSerde`), appends them to the shard's partition as **one batch** through the
  :class:`PartitionWriter`, then **replays** them into the shard, and finally calls the result's
  ``on_complete`` callback (error code ``NONE``, or the error the append failed with, after which nothing is
  replayed). Append and replay are synchronous: nothing else runs between the decision and the replay, so a
  state change never spans an ``await``.
* **read**: ``op(shard) -> value`` with no records.
* **load**: when the node becomes the partition's leader (at start-up, or when the topic is created), the shard
  is built by replaying the partition from its log start offset; the latest record per key wins and a null
  value (tombstone) deletes the key. Until loading ends, operations fail with COORDINATOR_LOAD_IN_PROGRESS;
  on a partition the node does not lead they fail with NOT_COORDINATOR.
* **transactional writes**: a result with a ``producer_id`` is appended as a *transactional* batch of that
  producer (TxnOffsetCommit); the shard keeps such records pending until the transaction's marker arrives.
  :meth:`CoordinatorRuntime.write_marker` appends a COMMIT/ABORT control batch to the shard's partition and
  replays it with ``replay_end_transaction``; loading does the same for every control batch it meets.
* **timers**: a shard schedules keyed timers (:class:`CoordinatorTimer`: session timeouts, rebalance
  timeouts, the periodic offset expiration). A timer's operation runs through the write path, so it can
  write records too. Re-scheduling a key replaces the previous timer.

The shard implements :class:`CoordinatorShard` (``replay``, ``on_loaded``, ``on_unloaded``). Time and
delayed calls come from a :class:`Scheduler`: :class:`ManualScheduler` (a fake clock driven by tests) or the
asyncio one in :mod:`kbroker.coordinator.group.service`. Nothing here imports asyncio, so the group logic can
be exercised deterministically.

Record framing in the topic (protocol guide §5.1): key = int16 record type + key message at version 0;
value = int16 value version + value message; a null value is a tombstone.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, Protocol, TypeVar

from kbroker.log_limit import LogLimiter
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import (
    ControlType,
    RecordBatch,
    build_batch,
    build_control_batch,
    iter_batches,
    set_base_offset,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S", bound="CoordinatorShard")

_I16 = struct.Struct(">h")

#: Bytes read per step while loading a shard (the loader yields to the event loop between steps).
LOAD_CHUNK_BYTES = 1 << 20
#: A failed append is logged (WARNING) at most once per this long for each partition and error; the failures in
#: between are counted and reported with the next line (e.g. ``__consumer_offsets`` below ``min.insync.replicas``
#: fails every write until the replicas return).
APPEND_FAILURE_LOG_INTERVAL_MS = 10_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def end_transaction_marker(batch: RecordBatch) -> int | None:
    """The control type (COMMIT/ABORT) of a transaction marker batch, else None."""
    if not batch.is_transactional:
        return None
    for rec in batch.records():
        if rec.key is not None and len(rec.key) >= 4:
            control_type = _I16.unpack_from(rec.key, 2)[0]
            if control_type in (ControlType.COMMIT, ControlType.ABORT):
                return control_type
        return None
    return None


# ---- partitioning ------------------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """``String.hashCode()`` of Java: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``abs`` except that ``Integer.MIN_VALUE`` maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id (protocol guide §5.1)."""
    return java_abs(java_string_hash(key)) % num_partitions


# ---- records ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record of a coordinator topic: a key message and a value message (None = tombstone)."""

    key: Any
    value: Any | None
    value_version: int = 0

    @property
    def record_type(self) -> int:
        return self.key.API_KEY


class UnknownRecordTypeError(ValueError):
    """A key whose record type this node does not know (written by a newer or other implementation)."""


class CoordinatorRecordSerde:
    """Encodes and decodes coordinator records, with key/value classes looked up by record type."""

    def __init__(self, classes: Iterable[type]) -> None:
        """``classes``: the key and value message classes of one coordinator topic (record types are only
        unique within a topic: ``__transaction_state`` and ``__share_group_state`` reuse 0 and 1)."""
        self.keys: dict[int, type] = {}
        self.values: dict[int, type] = {}
        for cls in classes:
            kind = getattr(cls, "SPEC_TYPE", None)
            table = self.keys if kind == "coordinator-key" else self.values if kind == "coordinator-value" else None
            if table is None:
                raise ValueError(f"{cls.__name__} is not a coordinator record class")
            if cls.API_KEY in table and table[cls.API_KEY] is not cls:
                raise ValueError(f"record type {cls.API_KEY} used by {table[cls.API_KEY].__name__} and {cls.__name__}")
            table[cls.API_KEY] = cls

    def encode_key(self, record: CoordinatorRecord) -> bytes:
        return _I16.pack(record.record_type) + codec.encode(record.key, 0)

    def encode_value(self, record: CoordinatorRecord) -> bytes | None:
        if record.value is None:
            return None
        return _I16.pack(record.value_version) + codec.encode(record.value, record.value_version)

    def decode(self, key: bytes, value: bytes | None) -> CoordinatorRecord:
        """Raises UnknownRecordTypeError for unknown types, codec.DecodeError for malformed bytes."""
        if key is None or len(key) < 2:
            raise codec.DecodeError("coordinator record without a key")
        (record_type,) = _I16.unpack_from(key, 0)
        key_cls = self.keys.get(record_type)
        if key_cls is None:
            raise UnknownRecordTypeError(f"unknown coordinator record type {record_type}")
        key_msg, _ = codec.decode(key_cls, key, 0, 2)
        if value is None:
            return CoordinatorRecord(key_msg, None, 0)
        if len(value) < 2:
            raise codec.DecodeError("coordinator record value shorter than its version")
        (version,) = _I16.unpack_from(value, 0)
        value_cls = self.values[record_type]
        lo, hi = value_cls.VALID_VERSIONS
        if version < lo:
            raise codec.DecodeError(f"value version {version} of record type {record_type} is unknown")
        # A newer value version only adds fields (tagged ones since KIP-915): read what we know.
        value_msg, _ = codec.decode(value_cls, value, min(version, hi), 2)
        return CoordinatorRecord(key_msg, value_msg, version)


# ---- results, shards, writers, schedulers ------------------------------------------------------------

@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """What an operation decided: records to append (and then replay) and the response.

    ``on_complete(error)`` runs after the records were appended and replayed (``ErrorCode.NONE``), or after the
    append failed (the error, already mapped as in :func:`append_error_to_coordinator_error`); operations use it
    to answer parked requests and to touch in-memory-only state once the durable part is settled.
    """

    records: list[CoordinatorRecord] = field(default_factory=list)
    response: T | None = None
    on_complete: Callable[[int], None] | None = None
    #: >= 0: append the records as a transactional batch of this producer (and epoch)
    producer_id: int = -1
    producer_epoch: int = -1


class CoordinatorShard(Protocol):
    def replay(self, offset: int, producer_id: int, producer_epoch: int, record: CoordinatorRecord) -> None: ...

    # optional: ``replay_end_transaction(producer_id, producer_epoch, committed)`` for transaction markers

    def on_loaded(self) -> None: ...

    def on_unloaded(self) -> None: ...


class PartitionWriter(Protocol):
    """Where a runtime's records go: the partitions of one internal topic on this node."""

    def append(self, partition: int, records: bytes) -> int:
        """Append whole batches as leader; returns the first offset. Raises KafkaError."""
        ...

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset`` (at least one batch if any), up to the log end."""
        ...

    def log_start_offset(self, partition: int) -> int: ...

    def log_end_offset(self, partition: int) -> int: ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Wall-clock time and delayed calls (on the coordinator's thread)."""

    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class ManualScheduler:
    """A fake clock for deterministic tests: ``advance(ms)`` runs due callbacks in time order."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._queue: list[tuple[int, int, _ManualHandle]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> _ManualHandle:
        handle = _ManualHandle(callback)
        heapq.heappush(self._queue, (self._now + max(0, int(delay_ms)), next(self._seq), handle))
        return handle

    def advance(self, ms: int = 0) -> None:
        """Move the clock forward by ``ms``, running every callback that falls due (also those they add)."""
        target = self._now + ms
        while self._queue and self._queue[0][0] <= target:
            due, _, handle = heapq.heappop(self._queue)
            self._now = max(self._now, due)
            if not handle.cancelled:
                handle.callback()
        self._now = target

    def pending(self) -> int:
        return sum(1 for _, _, h in self._queue if not h.cancelled)


class _ManualHandle:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class InMemoryPartitionWriter:
    """A :class:`PartitionWriter` over in-memory logs (tests and simulations). ``fail_with`` makes the
    next appends fail with that error code."""

    def __init__(self) -> None:
        self.logs: dict[int, bytearray] = {}
        self.next_offsets: dict[int, int] = {}
        self.fail_with: int | None = None

    def append(self, partition: int, records: bytes) -> int:
        if self.fail_with is not None:
            raise KafkaError(ErrorCode(self.fail_with))
        buf = bytearray(records)
        first = offset = self.next_offsets.get(partition, 0)
        for batch in list(iter_batches(buf)):
            set_base_offset(buf, batch.position, offset)
            offset += batch.last_offset_delta + 1
        self.logs.setdefault(partition, bytearray()).extend(buf)
        self.next_offsets[partition] = offset
        return first

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes:
        data = self.logs.get(partition, bytearray())
        out = bytearray()
        for batch in iter_batches(data):
            if batch.next_offset <= offset:
                continue
            if out and len(out) + batch.size > max_bytes:
                break
            out += bytes(batch)
        return bytes(out)

    def log_start_offset(self, partition: int) -> int:
        return 0

    def log_end_offset(self, partition: int) -> int:
        return self.next_offsets.get(partition, 0)


def append_error_to_coordinator_error(code: int) -> int:
    """The error a coordinator reports when its append failed (what Kafka's coordinators return)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE,
                ErrorCode.CORRUPT_MESSAGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class CoordinatorWriteError(KafkaError):
    """The append of an operation's records failed. ``code`` is the coordinator error to report,
    ``append_error`` the error of the append itself."""

    def __init__(self, append_error: int, message: str | None = None) -> None:
        super().__init__(ErrorCode(append_error_to_coordinator_error(append_error)), message)
        self.append_error = append_error


# ---- timers ----------------------------------------------------------------------------------------

class CoordinatorTimer:
    """Keyed timers of one shard. The operation of a timer that fires runs through the runtime's write path;
    scheduling an existing key replaces its timer. All timers die with the shard (unload)."""

    def __init__(self, runtime: CoordinatorRuntime[Any], partition: int) -> None:
        self._runtime = runtime
        self._partition = partition
        self._handles: dict[str, Cancellable] = {}

    def schedule(self, key: str, delay_ms: int, op: Callable[[], CoordinatorResult[Any]]) -> None:
        self.cancel(key)
        handle: Cancellable | None = None

        def fire() -> None:
            if self._handles.get(key) is not handle:
                return
            del self._handles[key]
            self._runtime.run_timer(self._partition, key, op)

        handle = self._runtime.scheduler.call_later(delay_ms, fire)
        self._handles[key] = handle

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._handles

    def keys(self) -> list[str]:
        return list(self._handles)

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


# ---- the runtime -----------------------------------------------------------------------------------

class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(eq=False)
class ShardContext(Generic[S]):
    partition: int
    shard: S
    timer: CoordinatorTimer
    state: ShardState = ShardState.LOADING
    loaded_records: int = 0


class CoordinatorRuntime(Generic[S]):
    """Runs operations on the shards of one internal topic (see the module docstring)."""

    def __init__(self, writer: PartitionWriter, scheduler: Scheduler,
                 shard_builder: Callable[[int, CoordinatorTimer], S], serde: CoordinatorRecordSerde,
                 name: str = "coordinator") -> None:
        self.writer = writer
        self.scheduler = scheduler
        self.shard_builder = shard_builder
        self.serde = serde
        self.name = name
        self.contexts: dict[int, ShardContext[S]] = {}
        #: failed appends logged once per interval per (partition, error) (:meth:`_log_append_failure`)
        self._append_failures = LogLimiter(APPEND_FAILURE_LOG_INTERVAL_MS)

    # ---- shard life cycle
    def partitions(self) -> list[int]:
        return sorted(self.contexts)

    def state_of(self, partition: int) -> ShardState | None:
        ctx = self.contexts.get(partition)
        return ctx.state if ctx else None

    def load_steps(self, partition: int) -> Iterator[None]:
        """Start loading ``partition`` (replacing a previous shard) and replay it step by step: each ``next``
        replays about :data:`LOAD_CHUNK_BYTES`. When exhausted the shard is ACTIVE (or FAILED)."""
        self.unload(partition)
        ctx: ShardContext[S] = ShardContext(partition, None, None)  # type: ignore[arg-type]
        ctx.timer = CoordinatorTimer(self, partition)
        ctx.shard = self.shard_builder(partition, ctx.timer)
        self.contexts[partition] = ctx
        return self._load(ctx)

    def _load(self, ctx: ShardContext[S]) -> Iterator[None]:
        partition = ctx.partition
        try:
            offset = self.writer.log_start_offset(partition)
            end = self.writer.log_end_offset(partition)
            while offset < end:
                if self.contexts.get(partition) is not ctx:
                    return  # unloaded meanwhile
                data = self.writer.read(partition, offset, LOAD_CHUNK_BYTES)
                if not data:
                    break
                for batch in iter_batches(data):
                    if batch.next_offset <= offset:
                        continue
                    offset = batch.next_offset
                    if batch.is_control:
                        marker = end_transaction_marker(batch)
                        replay_end = getattr(ctx.shard, "replay_end_transaction", None)
                        if marker is not None and replay_end is not None:
                            replay_end(batch.producer_id, batch.producer_epoch, marker == ControlType.COMMIT)
                        continue
                    for rec in batch.records():
                        try:
                            record = self.serde.decode(rec.key, rec.value)
                        except UnknownRecordTypeError as exc:
                            log.debug("%s partition %d offset %d: %s (skipped)", self.name, partition, rec.offset, exc)
                            continue
                        except (codec.DecodeError, KeyError) as exc:
                            log.error("%s partition %d offset %d: undecodable record skipped: %s",
                                      self.name, partition, rec.offset, exc)
                            continue
                        ctx.shard.replay(rec.offset, batch.producer_id, batch.producer_epoch, record)
                        ctx.loaded_records += 1
                yield
        except Exception:
            log.exception("%s: loading partition %d failed", self.name, partition)
            if self.contexts.get(partition) is ctx:
                ctx.state = ShardState.FAILED
            return
        if self.contexts.get(partition) is not ctx:
            return
        ctx.state = ShardState.ACTIVE
        log.info("%s: loaded partition %d (%d records)", self.name, partition, ctx.loaded_records)
        try:
            ctx.shard.on_loaded()
        except Exception:
            log.exception("%s: on_loaded of partition %d failed", self.name, partition)

    def load(self, partition: int) -> None:
        """Load ``partition`` synchronously (tests; a freshly created, empty partition)."""
        for _ in self.load_steps(partition):
            pass

    def unload(self, partition: int) -> None:
        ctx = self.contexts.pop(partition, None)
        if ctx is None:
            return
        ctx.timer.cancel_all()
        prev, ctx.state = ctx.state, ShardState.CLOSED
        if prev is ShardState.ACTIVE:
            try:
                ctx.shard.on_unloaded()
            except Exception:
                log.exception("%s: on_unloaded of partition %d failed", self.name, partition)

    def close(self) -> None:
        for partition in list(self.contexts):
            self.unload(partition)

    # ---- operations
    def active_context(self, partition: int) -> ShardContext[S]:
        ctx = self.contexts.get(partition)
        if ctx is None or ctx.state in (ShardState.CLOSED, ShardState.FAILED):
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        if ctx.state is ShardState.LOADING:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return ctx

    def shard(self, partition: int) -> S:
        return self.active_context(partition).shard

    def read(self, partition: int, op: Callable[[S], T]) -> T:
        return op(self.active_context(partition).shard)

    def write(self, partition: int, op: Callable[[S], CoordinatorResult[T]]) -> T | None:
        """Run ``op`` on the shard, append its records as one batch, replay them, call ``on_complete``.

        Raises KafkaError NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS before running ``op``, and
        :class:`CoordinatorWriteError` when the append fails (after ``on_complete`` got the error).
        """
        ctx = self.active_context(partition)
        result = op(ctx.shard)
        self._apply(ctx, result)
        return result.response

    def _apply(self, ctx: ShardContext[S], result: CoordinatorResult[Any]) -> None:
        if result.records:
            serde = self.serde
            transactional = result.producer_id >= 0
            data = build_batch([(serde.encode_key(r), serde.encode_value(r)) for r in result.records],
                               timestamp_type=0, base_timestamp=None, producer_id=result.producer_id,
                               producer_epoch=result.producer_epoch if transactional else -1,
                               is_transactional=transactional)
            try:
                first = self.writer.append(ctx.partition, data)
            except KafkaError as exc:
                err = CoordinatorWriteError(exc.code, exc.message)
                self._log_append_failure(ctx.partition, exc.code)
                if result.on_complete is not None:
                    result.on_complete(err.code)
                raise err from None
            self._append_succeeded(ctx.partition)
            for i, record in enumerate(result.records):
                ctx.shard.replay(first + i, result.producer_id, result.producer_epoch if transactional else -1,
                                 record)
        if result.on_complete is not None:
            result.on_complete(ErrorCode.NONE)

    def _log_append_failure(self, partition: int, code: int) -> None:
        """WARNING for a failed append, at most once per :data:`APPEND_FAILURE_LOG_INTERVAL_MS` per partition and
        error; the failures in between are counted in the next line."""
        allowed = self._append_failures.allow((partition, code), self.scheduler.now_ms())
        if allowed is None:
            return
        suppressed = allowed[0]
        if suppressed:
            log.warning("%s: append to partition %d failed with %s (and %d more times in the last %d s)", self.name,
                        partition, ErrorCode(code).name, suppressed, APPEND_FAILURE_LOG_INTERVAL_MS // 1000)
        else:
            log.warning("%s: append to partition %d failed with %s", self.name, partition, ErrorCode(code).name)

    def _append_succeeded(self, partition: int) -> None:
        if not self._append_failures:
            return
        for key, suppressed in self._append_failures.forget(lambda k: k[0] == partition):
            if suppressed:
                log.info("%s: appends to partition %d succeed again (%d more failures with %s were not logged)",
                         self.name, partition, suppressed, ErrorCode(key[1]).name)

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     committed: bool) -> None:
        """Append a COMMIT/ABORT marker for ``producer_id`` to ``partition`` and replay it into the shard
        (``replay_end_transaction``). Raises KafkaError NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, or
        :class:`CoordinatorWriteError` when the append fails."""
        ctx = self.active_context(partition)
        data = build_control_batch(ControlType.COMMIT if committed else ControlType.ABORT, producer_id,
                                   producer_epoch, coordinator_epoch, _now_ms())
        try:
            self.writer.append(ctx.partition, data)
        except KafkaError as exc:
            raise CoordinatorWriteError(exc.code, exc.message) from None
        replay_end = getattr(ctx.shard, "replay_end_transaction", None)
        if replay_end is not None:
            replay_end(producer_id, producer_epoch, committed)

    def run_timer(self, partition: int, key: str, op: Callable[[], CoordinatorResult[Any]]) -> None:
        ctx = self.contexts.get(partition)
        if ctx is None or ctx.state is not ShardState.ACTIVE:
            return
        try:
            self._apply(ctx, op())
        except CoordinatorWriteError as exc:  # the append failure itself is logged (rate-limited) by _apply
            log.debug("%s: timer %s on partition %d failed: %s", self.name, key, partition, ErrorCode(exc.code).name)
        except KafkaError as exc:
            log.warning("%s: timer %s on partition %d failed: %s", self.name, key, partition,
                        ErrorCode(exc.code).name)
        except Exception:
            log.exception("%s: timer %s on partition %d failed", self.name, key, partition)
