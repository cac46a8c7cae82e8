"""``TransactionCoordinator``: the broker-facing transaction coordinator (asyncio side of the runtime).

* Owns a :class:`~kbroker.coordinator.runtime.CoordinatorRuntime` whose shards are
  :class:`~kbroker.coordinator.transaction.shard.TransactionCoordinatorShard`, one per ``__transaction_state``
  partition this node leads; records reach the log through the group coordinator's ``ReplicaManagerWriter``.
* Creates ``__transaction_state`` on first use (FindCoordinator with the transaction key type):
  ``transaction.state.log.num.partitions`` partitions, compacted, uncompressed, replication factor capped at
  the number of live brokers.
* Follows the metadata image: partitions this node leads are loaded (replayed from the log start), the others
  unloaded. The coordinator epoch written into markers is the partition's leader epoch.
* **Markers.** Once a PrepareCommit/PrepareAbort record is durable (EndTxn, a fencing InitProducerId, a
  timeout, or a shard loaded with such a transaction), the coordinator hands a COMMIT/ABORT marker for every
  partition of the transaction to ``marker_writer`` at once (the broker appends those it leads directly and
  sends the others with one WriteTxnMarkers request per destination broker, see
  :mod:`kbroker.server.handlers.write_txn_markers`); each answer arrives through a callback, and once the last
  partition is answered the CompleteCommit/CompleteAbort record is written. No polling: a partition that fails
  with a retriable error is sent again after a backoff (:data:`MARKER_RETRY_BACKOFF_MS`, doubling up to
  :data:`MARKER_RETRY_BACKOFF_MAX_MS`), to the leader found then; a deleted topic counts as done, errors that
  retrying cannot fix are logged and the partition given up. A positive ``kbroker.transaction.marker.delay.ms``
  (tests only) writes the markers one at a time with that pause between them, to open a window for crash tests.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from kbroker.log_limit import LogLimiter
from kbroker.coordinator.group.service import AsyncioScheduler, ReplicaManagerWriter
from kbroker.coordinator.service_support import PartitionLoader, create_internal_topic
from kbroker.coordinator.runtime import (
    CoordinatorRecordSerde,
    CoordinatorRuntime,
    CoordinatorTimer,
    Scheduler,
    ShardState,
    partition_for,
)
from kbroker.coordinator.transaction.config import TRANSACTION_STATE_TOPIC, TransactionCoordinatorConfig
from kbroker.coordinator.transaction.metadata import TransactionState
from kbroker.coordinator.transaction.producer_id_manager import ProducerIdManager
from kbroker.coordinator.transaction.shard import (
    InitProducerIdResult,
    PendingCompletion,
    TransactionCoordinatorShard,
)
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DescribeTransactionsResponse, ListTransactionsResponse

log = logging.getLogger(__name__)

TRANSACTION_COORDINATOR_SERDE = CoordinatorRecordSerde((cr.TransactionLogKey, cr.TransactionLogValue))
#: retry of writing a CompleteCommit/CompleteAbort record that failed (ms)
MARKER_RETRY_MS = 200
#: first backoff before a marker that failed with a retriable error is sent again (ms; Kafka's retry.backoff.ms)
MARKER_RETRY_BACKOFF_MS = 100
#: the backoff doubles per attempt up to this (ms)
MARKER_RETRY_BACKOFF_MAX_MS = 1000
#: at most one INFO line per this many ms about markers being retried (the others are counted, and at DEBUG)
MARKER_RETRY_LOG_INTERVAL_MS = 10_000

#: marker_writer(topic, partition, producer_id, producer_epoch, coordinator_epoch, commit, transaction_version,
#: done) -> the error code when known at once, or None when ``done(error code)`` is called later (once).
#: transaction_version 2: the partition checks the marker with the version 2 epoch rule
MarkerWriter = Callable[[str, int, int, int, int, bool, int, Callable[[int], None]], "int | None"]

#: marker results after which the partition needs no marker any more
_MARKER_DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
#: marker results that retrying cannot fix (logged; the partition is given up)
_MARKER_FATAL = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                 ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                 ErrorCode.INVALID_TXN_STATE, ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


@dataclass(eq=False)
class _MarkerJob:
    """The markers of one transaction in PrepareX: ``remaining`` partitions not yet answered with a final
    result, of which ``in_flight`` are sent and awaiting their answer."""

    partition: int
    completion: PendingCompletion
    remaining: set[tuple[str, int]] = field(default_factory=set)
    in_flight: set[tuple[str, int]] = field(default_factory=set)
    #: partition -> retriable failures so far (the backoff doubles per failure)
    attempts: dict[tuple[str, int], int] = field(default_factory=dict)
    completing: bool = False


class TransactionCoordinator:
    """See the module docstring. ``controller`` needs ``image``, ``create_topics``, ``add_listener`` and
    ``allocate_producer_ids``."""

    def __init__(self, config: TransactionCoordinatorConfig, node_id: int, controller: Any, replica_manager: Any,
                 marker_writer: MarkerWriter, scheduler: Scheduler | None = None,
                 topic: str = TRANSACTION_STATE_TOPIC) -> None:
        self.config = config
        self.node_id = node_id
        self.controller = controller
        self.topic = topic
        self.marker_writer = marker_writer
        self.scheduler: Scheduler = scheduler or AsyncioScheduler()
        self.writer = ReplicaManagerWriter(replica_manager, topic)
        self.producer_id_manager = ProducerIdManager(controller)
        self.runtime: CoordinatorRuntime[TransactionCoordinatorShard] = CoordinatorRuntime(
            self.writer, self.scheduler, self._build_shard, TRANSACTION_COORDINATOR_SERDE,
            name="transaction-coordinator")
        self.loader = PartitionLoader(self.runtime, self.writer)
        self._started = False
        self._prepared: deque[tuple[int, PendingCompletion]] = deque()
        self._drain_scheduled = False
        self._jobs: dict[str, _MarkerJob] = {}
        #: (time in ms of the last INFO line about a retried marker, retries not logged at INFO since)
        #: marker retries: one INFO line per interval, the others at DEBUG (:meth:`_log_retry`)
        self._retry_log = LogLimiter(MARKER_RETRY_LOG_INTERVAL_MS)

    #: how long a write waits for the in-sync replicas before the answer is COORDINATOR_NOT_AVAILABLE
    commit_timeout_ms = 5000

    @classmethod
    def for_broker(cls, broker: Any, marker_writer: MarkerWriter) -> TransactionCoordinator:
        tc = cls(TransactionCoordinatorConfig.from_broker_config(broker.config), broker.node_id,
                 broker.controller, broker.replica_manager, marker_writer)
        tc.commit_timeout_ms = broker.config.get_int("offsets.commit.timeout.ms")
        return tc

    async def replicated(self, transactional_id: str) -> int:
        """After a write for ``transactional_id``: wait until the in-sync replicas of its ``__transaction_state``
        partition hold it; the error to answer with (NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        from kbroker.coordinator.group.service import _replicated

        return await _replicated(self.writer, self.partition_for(transactional_id), self.commit_timeout_ms)

    def _coordinator_epoch(self, partition: int) -> int:
        topic = self.controller.image.topics_by_name.get(self.topic)
        p = topic.partitions.get(partition) if topic is not None else None
        return max(p.leader_epoch, 0) if p is not None else 0

    def _build_shard(self, partition: int, timer: CoordinatorTimer) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(partition, self.config, timer, self.scheduler.now_ms,
                                           self.producer_id_manager.generate, self._coordinator_epoch(partition),
                                           self._on_prepared, self.transaction_version)

    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` feature level (0 when not finalized)."""
        features = getattr(self.controller.image, "features", None) or {}
        return int(features.get("transaction.version", 0))

    # ---- life cycle
    def startup(self) -> None:
        self._started = True
        self.controller.add_listener(self._on_metadata_update)
        add = getattr(self.writer.replica_manager, "add_partition_listener", None)
        if add is not None:  # logs of the topic made in the background: load the partitions led here
            add(lambda: self._started and self._sync_with_image(self.controller.image))
        self._sync_with_image(self.controller.image)

    def shutdown(self) -> None:
        self._started = False
        remove = getattr(self.controller, "remove_listener", None)
        if remove is not None:
            try:
                remove(self._on_metadata_update)
            except (KeyError, ValueError):
                pass
        self.loader.cancel_all()
        self._jobs.clear()
        self.runtime.close()

    def _on_metadata_update(self, old: Any, new: Any, *_: Any) -> None:
        if self._started:
            self._sync_with_image(new)

    def _sync_with_image(self, image: Any) -> None:
        topic = image.topics_by_name.get(self.topic)
        led = set()
        if topic is not None:
            led = {p.partition_id for p in topic.partitions.values() if p.leader == self.node_id}
        for partition in self.runtime.partitions():
            if partition not in led:
                log.info("transaction coordinator: no longer leading %s-%d; unloading", self.topic, partition)
                self.loader.cancel(partition)
                self.runtime.unload(partition)
                for txn_id in [k for k, job in self._jobs.items() if job.partition == partition]:
                    del self._jobs[txn_id]
        for partition in sorted(led):
            if self.runtime.state_of(partition) is None:
                self.loader.schedule(partition)

    async def wait_loaded(self) -> None:
        """Wait until no partition is loading (tests, start-up)."""
        await self.loader.wait_loaded()

    # ---- the topic
    def num_partitions(self) -> int:
        topic = self.controller.image.topics_by_name.get(self.topic)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.config.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    def internal_topic_spec(self) -> tuple[str, int, int, dict[str, str]]:
        """``(name, partitions, configured replication factor, configs)`` of the topic this coordinator keeps its
        state in, as it is created on first use."""
        return (self.topic, self.config.num_partitions,
                self.config.replication_factor,
                {"cleanup.policy": "compact", "compression.type": "uncompressed",
                 "segment.bytes": str(self.config.segment_bytes)})

    def ensure_topic(self) -> int:
        """Create ``__transaction_state`` if it does not exist; NONE, or COORDINATOR_NOT_AVAILABLE."""
        return create_internal_topic(self.controller, *self.internal_topic_spec())

    def coordinator_state(self, transactional_id: str) -> int:
        try:
            self.runtime.active_context(self.partition_for(transactional_id))
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE

    # ---- operations
    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                         expected: tuple[int, int] | None) -> InitProducerIdResult:
        try:
            result = self.runtime.write(self.partition_for(transactional_id),
                                        lambda shard: shard.init_producer_id(transactional_id, txn_timeout_ms,
                                                                             expected))
        except KafkaError as exc:
            return InitProducerIdResult(exc.code)
        self._drain()
        assert result is not None
        return result

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[tuple[str, int]], client_transaction_version: int = 0) -> int:
        """AddPartitionsToTxn; ``client_transaction_version`` 2 for the broker's implicit add (Produce v12,
        TxnOffsetCommit v5, AddPartitionsToTxn v4+ without VerifyOnly)."""
        try:
            result = self.runtime.write(self.partition_for(transactional_id),
                                        lambda shard: shard.add_partitions(transactional_id, producer_id,
                                                                           producer_epoch, partitions,
                                                                           client_transaction_version))
        except KafkaError as exc:
            return exc.code
        assert result is not None
        return result

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Per partition: NONE when it is part of the producer's open transaction (see the shard)."""
        try:
            return self.runtime.read(self.partition_for(transactional_id),
                                     lambda shard: shard.verify_partitions(transactional_id, producer_id,
                                                                           producer_epoch, partitions))
        except KafkaError as exc:
            return {tp: exc.code for tp in partitions}

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        client_transaction_version: int = 0) -> int:
        """EndTxn; ``client_transaction_version`` 2 (EndTxn v5) bumps the epoch (see the shard)."""
        try:
            result = self.runtime.write(self.partition_for(transactional_id),
                                        lambda shard: shard.end_transaction(transactional_id, producer_id,
                                                                            producer_epoch, commit,
                                                                            client_transaction_version=
                                                                            client_transaction_version))
        except KafkaError as exc:
            return exc.code
        self._drain()
        assert result is not None
        return result

    def producer_identity(self, transactional_id: str) -> tuple[int, int]:
        """``(producer id, epoch)`` an EndTxn v5 answers with (the shard's ``producer_identity``)."""
        try:
            return self.runtime.read(self.partition_for(transactional_id),
                                     lambda shard: shard.producer_identity(transactional_id))
        except KafkaError:
            return -1, -1

    async def settled(self, partition: int) -> int:
        """After a read of ``partition``'s shard: wait until its in-sync replicas hold every record written so
        far (see :meth:`GroupCoordinator.settled <kbroker.coordinator.group.service.GroupCoordinator.settled>`);
        the error to answer with instead (NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)."""
        from kbroker.coordinator.group.service import _replicated

        return await _replicated(self.writer, partition, self.commit_timeout_ms)

    async def describe(self, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
        """DescribeTransactions for one id, answered once what was read is replicated (:meth:`settled`)."""
        if not transactional_id:
            return DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id,
                                                                 error_code=ErrorCode.INVALID_REQUEST)
        partition = self.partition_for(transactional_id)
        try:
            described = self.runtime.read(partition, lambda shard: shard.describe(transactional_id))
        except KafkaError as exc:
            return DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id,
                                                                 error_code=exc.code)
        code = await self.settled(partition)
        if code:
            return DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id, error_code=code)
        return described

    async def list_transactions(self, state_filters: list[str], producer_ids: list[int], duration_ms: int,
                                pattern: str | None) -> ListTransactionsResponse:
        """ListTransactions over every loaded shard, answered once what was read is replicated (:meth:`settled`;
        the transactions of a shard whose wait fails are left out and its error is returned)."""
        resp = ListTransactionsResponse()
        states: set[TransactionState] = set()
        for name in state_filters:
            state = TransactionState.parse(name)
            if state is None:
                resp.unknown_state_filters.append(name)
            else:
                states.add(state)
        if state_filters and not states:
            return resp  # only unknown states: nothing can match
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            resp.error_code = ErrorCode.INVALID_REGULAR_EXPRESSION
            return resp
        now = self.scheduler.now_ms()
        by_partition = {}
        for partition in self.runtime.partitions():
            state = self.runtime.state_of(partition)
            if state is ShardState.LOADING:
                resp.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            if state is not ShardState.ACTIVE:
                continue
            by_partition[partition] = self.runtime.read(partition, lambda shard: shard.list_transactions(
                states, set(producer_ids), duration_ms, regex, now))
        for partition, listed in by_partition.items():
            code = await self.settled(partition)  # an empty shard too: an expiration may be pending
            if code:
                resp.error_code = code
            else:
                resp.transaction_states.extend(listed)
        return resp

    # ---- markers
    def _on_prepared(self, partition: int, completion: PendingCompletion) -> None:
        """A shard made a PrepareX record durable (or loaded one): its markers are due."""
        self._prepared.append((partition, completion))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.scheduler.call_later(0, self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        while self._prepared:
            partition, completion = self._prepared.popleft()
            job = _MarkerJob(partition, completion, set(completion.partitions))
            self._jobs[completion.transactional_id] = job
            self._send_markers(job)

    def _current(self, job: _MarkerJob) -> bool:
        return self._jobs.get(job.completion.transactional_id) is job

    def _send_markers(self, job: _MarkerJob, only: tuple[str, int] | None = None) -> None:
        """Hand every remaining partition not in flight (or just ``only``) to the marker writer; completes the
        transaction when none is left."""
        if not self._current(job):
            return  # unloaded, or superseded by a newer completion
        c = job.completion
        if only is not None:
            todo = [only] if only in job.remaining and only not in job.in_flight else []
        else:
            todo = sorted(job.remaining - job.in_flight)
            if self.config.marker_delay_ms > 0:  # tests: one at a time, paced by _on_marker
                todo = todo[:1] if not job.in_flight else []
        for tp in todo:
            job.in_flight.add(tp)
            try:
                error = self.marker_writer(tp[0], tp[1], c.producer_id, c.producer_epoch, c.coordinator_epoch,
                                           c.commit, c.transaction_version,
                                           lambda code, tp=tp: self._on_marker(job, tp, code))
            except Exception:
                log.exception("writing a marker to %s-%d failed", *tp)
                error = ErrorCode.UNKNOWN_SERVER_ERROR
            if error is not None:
                self._on_marker(job, tp, error, immediate=True)
        if not job.remaining:
            self._complete(job)

    def _on_marker(self, job: _MarkerJob, tp: tuple[str, int], error: int, immediate: bool = False) -> None:
        """The answer for one partition's marker."""
        job.in_flight.discard(tp)
        if not self._current(job) or tp not in job.remaining:
            return
        c = job.completion
        if error in _MARKER_DONE or error in _MARKER_FATAL:
            if error in _MARKER_FATAL:
                log.error("transactional id %s: %s marker for %s-%d refused with %s; giving up on it",
                          c.transactional_id, "COMMIT" if c.commit else "ABORT", tp[0], tp[1],
                          ErrorCode(error).name)
            job.remaining.discard(tp)
            if self.config.marker_delay_ms > 0 and job.remaining:
                self.scheduler.call_later(self.config.marker_delay_ms, lambda: self._send_markers(job))
            elif not job.remaining and not immediate:
                self._complete(job)
            return
        attempt = job.attempts[tp] = job.attempts.get(tp, 0) + 1
        delay = min(MARKER_RETRY_BACKOFF_MS << min(attempt - 1, 10), MARKER_RETRY_BACKOFF_MAX_MS)
        self._log_retry(c, tp, error, attempt, delay)
        self.scheduler.call_later(delay, lambda: self._send_markers(job, tp))

    def _log_retry(self, c: PendingCompletion, tp: tuple[str, int], error: int, attempt: int, delay: int) -> None:
        name = ErrorCode(error).name if error in ErrorCode._value2member_map_ else str(error)
        allowed = self._retry_log.allow("retry", self.scheduler.now_ms())
        if allowed is None:
            log.debug("transactional id %s: %s marker for %s-%d failed with %s (attempt %d); sending it again "
                      "in %d ms", c.transactional_id, "COMMIT" if c.commit else "ABORT", tp[0], tp[1], name,
                      attempt, delay)
            return
        quiet, since = allowed
        more = f" ({quiet} other marker retries in the last {int(since) // 1000} s)" if quiet else ""
        log.info("transactional id %s: %s marker for %s-%d failed with %s (attempt %d); sending it again in %d ms%s",
                 c.transactional_id, "COMMIT" if c.commit else "ABORT", tp[0], tp[1], name, attempt, delay, more)

    def _complete(self, job: _MarkerJob) -> None:
        """Every marker answered: write CompleteCommit/CompleteAbort."""
        if not self._current(job) or job.completing:
            return
        c = job.completion
        job.completing = True
        try:
            self.runtime.write(job.partition, lambda shard: shard.complete_transaction(c))
        except KafkaError as exc:
            job.completing = False
            if exc.code == ErrorCode.NOT_COORDINATOR:
                self._jobs.pop(c.transactional_id, None)
                return
            log.warning("transactional id %s: writing the completion failed with %s; retrying", c.transactional_id,
                        ErrorCode(exc.code).name)
            self.scheduler.call_later(MARKER_RETRY_MS, lambda: self._complete(job))
            return
        if self._current(job):
            del self._jobs[c.transactional_id]

    def pending_marker_jobs(self) -> int:
        return len(self._jobs)
