"""``TransactionCoordinatorShard``: the transactional ids of one ``__transaction_state`` partition.

Each operation returns a :class:`CoordinatorResult`; its record (a ``TransactionLogValue``, or a tombstone)
is appended and then replayed into ``transactions``, so the in-memory state is exactly what the log says.
The rules are Apache Kafka's transaction coordinator for transactions version 1 (the classic protocol),
restated:

* **InitProducerId** (transactional id): a new id gets a fresh producer id and epoch 0. An existing one in
  Empty/CompleteCommit/CompleteAbort gets its epoch bumped (a new producer id once the epoch is exhausted);
  this fences every older producer with the same id. In Ongoing the open transaction of the fenced
  producer is aborted first (epoch + 1, PrepareEpochFence -> PrepareAbort) and the caller gets
  CONCURRENT_TRANSACTIONS so that it retries, and then gets a second bump. PrepareCommit/PrepareAbort:
  CONCURRENT_TRANSACTIONS. With a producer id and epoch (KIP-360, v3+) the request must name the current
  producer id (or the previous one with an exhausted epoch) and the current epoch - or the previous epoch,
  for a retried bump, which returns the current epoch unchanged - else PRODUCER_FENCED. The timeout must be
  in ``(0, transaction.max.timeout.ms]`` else INVALID_TRANSACTION_TIMEOUT.
* **AddPartitionsToTxn / AddOffsetsToTxn**: unknown id or another producer id -> INVALID_PRODUCER_ID_MAPPING,
  another epoch -> PRODUCER_FENCED, PrepareCommit/PrepareAbort -> CONCURRENT_TRANSACTIONS; partitions
  already in the Ongoing transaction are answered at once; otherwise the state becomes Ongoing (the
  transaction's start time is set when it leaves Empty/Complete*).
* **Verify** (AddPartitionsToTxn v4+ ``VerifyOnly``, and the produce path): the same id/epoch checks, then
  per partition NONE if it is in the transaction, else TRANSACTION_ABORTABLE.
* **Transactions version 2** (KIP-890 part 2): AddPartitions with client version 2 (the broker's implicit add of
  Produce v12 and TxnOffsetCommit v5) marks the transaction as version 2. EndTxn v5 (client version 2) bumps
  the epoch into PrepareX (markers carry it; an exhausted epoch takes ``next_producer_id``, the producer id of
  CompleteX with epoch 0); its retries are recognised by the epoch one below the current one (or the
  exhausted epoch of the previous producer id); an abort from Empty/CompleteCommit/CompleteAbort bumps the
  epoch with no partitions (Kafka's table in ``TransactionCoordinator.endTransaction``); any EndTxn v5 while
  the markers of the last one are written (PrepareX) is CONCURRENT_TRANSACTIONS before the epoch is checked. Fencing a
  version-2 transaction by InitProducerId bumps twice: once to fence, once for the abort; a timeout bumps once.
* **EndTxn**: from Ongoing to PrepareCommit/PrepareAbort (the decision is durable from here), answered NONE;
  the markers are written by the service (:meth:`on_prepared` hands it the work), then Complete*.
  A retry after completion with the same result is NONE; PrepareX with the same result is
  CONCURRENT_TRANSACTIONS; any other combination (Empty, the other result) INVALID_TXN_STATE. From clients
  the epoch must match exactly (PRODUCER_FENCED).
* **Timeouts**: an Ongoing transaction older than its ``transaction.timeout.ms`` is aborted with the epoch
  bumped (the producer is fenced), checked every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
* **Expiry**: ids in Empty/Complete* not updated for ``transactional.id.expiration.ms`` go Dead and are
  removed with a tombstone, checked every ``transaction.remove.expired.transaction.cleanup.interval.ms``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable, Iterable

from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult, CoordinatorTimer
from kbroker.coordinator.transaction.config import TransactionCoordinatorConfig
from kbroker.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV2,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
    tombstone,
)
from kbroker.protocol.coordinator_records import TransactionLogKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeTransactionsResponse, ListTransactionsResponse

log = logging.getLogger(__name__)

S = TransactionState
ABORT_TIMED_OUT_KEY = "abort-timed-out-transactions"
EXPIRE_IDS_KEY = "remove-expired-transactional-ids"


@dataclass(frozen=True, slots=True)
class PendingCompletion:
    """A transaction in PrepareCommit/PrepareAbort whose markers still have to be written."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    coordinator_epoch: int
    #: 2 for a transactions-version-2 transaction: its markers are checked with that version's epoch rule
    transaction_version: int = 0


@dataclass(slots=True)
class InitProducerIdResult:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinatorShard:
    """Transactional ids of one partition (see the module docstring).

    ``generate_producer_id`` hands out new producer ids; ``coordinator_epoch`` is the leader epoch of this
    partition, written into every marker; ``on_prepared`` receives transactions whose markers are due (after
    the PrepareX record was written, and after loading).
    """

    def __init__(self, partition: int, config: TransactionCoordinatorConfig, timer: CoordinatorTimer,
                 now_ms: Callable[[], int], generate_producer_id: Callable[[], int],
                 coordinator_epoch: int = 0,
                 on_prepared: Callable[[int, PendingCompletion], None] | None = None,
                 transaction_version: Callable[[], int] = lambda: 0) -> None:
        self.partition = partition
        self.config = config
        self.timer = timer
        self.now_ms = now_ms
        self.generate_producer_id = generate_producer_id
        self.coordinator_epoch = coordinator_epoch
        self.on_prepared = on_prepared or (lambda partition, completion: None)
        self.transactions: dict[str, TransactionMetadata] = {}
        self.loaded = False
        #: the finalized ``transaction.version`` (chooses the record value version)
        self.transaction_version = transaction_version

    def _record(self, txn: TransactionMetadata) -> CoordinatorRecord:
        # value version 1 from transaction.version 1 on, and always for a version-2 transaction (its next
        # producer id and client version must survive a reload)
        v2 = txn.client_transaction_version >= TV2 or txn.next_producer_id != NO_PRODUCER_ID
        return txn.to_record(1 if v2 or self.transaction_version() >= 1 else 0)

    # ================================================================================== replay
    def replay(self, offset: int, producer_id: int, producer_epoch: int, record: CoordinatorRecord) -> None:
        key = record.key
        if not isinstance(key, TransactionLogKey):
            return
        txn_id = key.transactional_id
        if record.value is None:
            self.transactions.pop(txn_id, None)
            return
        new = TransactionMetadata.from_value(txn_id, record.value)
        old = self.transactions.get(txn_id)
        if old is not None and old.producer_id == new.producer_id:
            # in-memory only: the epoch before a KIP-360 bump (set by the operation's on_complete)
            new.last_producer_epoch = old.last_producer_epoch
        if old is not None and new.last_producer_id == NO_PRODUCER_ID and old.producer_id != new.producer_id:
            new.last_producer_id = old.producer_id
        self.transactions[txn_id] = new

    def on_loaded(self) -> None:
        self.loaded = True
        for txn in self.transactions.values():
            if txn.state.is_prepare:
                log.info("transactional id %s loaded in %s; writing its markers", txn.transactional_id,
                         txn.state.kafka_name)
                self.on_prepared(self.partition, self._completion(txn))
        self._schedule_abort_check()
        self._schedule_expiration()

    def on_unloaded(self) -> None:
        self.loaded = False

    def _completion(self, txn: TransactionMetadata) -> PendingCompletion:
        return PendingCompletion(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                 txn.state is S.PREPARE_COMMIT, tuple(txn.sorted_partitions()),
                                 self.coordinator_epoch, txn.client_transaction_version)

    def _prepared_callback(self, txns: list[TransactionMetadata]) -> Callable[[int], None]:
        def done(error: int) -> None:
            if error == ErrorCode.NONE:
                for txn in txns:
                    self.on_prepared(self.partition, self._completion(txn))
        return done

    # ================================================================================== InitProducerId
    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                         expected: tuple[int, int] | None) -> CoordinatorResult[InitProducerIdResult]:
        """``expected``: the (producer id, epoch) of a KIP-360 request, or None."""
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return CoordinatorResult(response=InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
        now = self.now_ms()
        txn = self.transactions.get(transactional_id)
        if txn is None:
            txn = TransactionMetadata(transactional_id, self.generate_producer_id(), NO_PRODUCER_EPOCH,
                                      txn_timeout_ms, S.EMPTY, txn_last_update_timestamp=now)
        if expected is not None and not (
                txn.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == txn.producer_id
                or (expected[0] == txn.last_producer_id and is_epoch_exhausted(expected[1]))):
            return CoordinatorResult(response=InitProducerIdResult(ErrorCode.PRODUCER_FENCED))
        if txn.state.is_prepare:
            return CoordinatorResult(response=InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        if txn.state is S.ONGOING:
            # Fence the producer: abort its transaction with a bumped epoch (never returned to anybody); the
            # caller retries and then gets a second bump.
            prepared = self._fence(txn, now)
            log.info("transactional id %s: fencing producer %d epoch %d and aborting its transaction",
                     transactional_id, txn.producer_id, txn.producer_epoch)
            return CoordinatorResult([self._record(prepared)],
                                     InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS),
                                     self._prepared_callback([prepared]))
        if txn.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise RuntimeError(f"transactional id {transactional_id} is in state {txn.state.kafka_name}")
        if is_epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            new = txn.transition(S.EMPTY, producer_id=self.generate_producer_id(), producer_epoch=0,
                                 last_producer_epoch=txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                                 last_producer_id=txn.producer_id, txn_timeout_ms=txn_timeout_ms,
                                 partitions=set(), txn_start_timestamp=-1, txn_last_update_timestamp=now)
        else:
            bumped = self._bump(txn.producer_epoch)
            if expected is None:
                epoch, last = bumped, NO_PRODUCER_EPOCH
            elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
                epoch, last = bumped, txn.producer_epoch
            elif expected[1] == txn.last_producer_epoch:
                epoch, last = txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump that succeeded
            else:
                return CoordinatorResult(response=InitProducerIdResult(ErrorCode.PRODUCER_FENCED))
            new = txn.transition(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                                 txn_timeout_ms=txn_timeout_ms, partitions=set(), txn_start_timestamp=-1,
                                 txn_last_update_timestamp=now)

        def done(error: int) -> None:
            if error == ErrorCode.NONE and transactional_id in self.transactions:
                self.transactions[transactional_id].last_producer_epoch = new.last_producer_epoch
                self.transactions[transactional_id].last_producer_id = new.last_producer_id

        return CoordinatorResult([self._record(new)], InitProducerIdResult(ErrorCode.NONE, new.producer_id,
                                                                        new.producer_epoch), done)

    @staticmethod
    def _bump(epoch: int) -> int:
        return epoch + 1 if epoch < 32767 else epoch

    def _fence(self, txn: TransactionMetadata, now: int, abort_bump: bool = True) -> TransactionMetadata:
        """PrepareAbort of an Ongoing transaction whose producer is fenced (InitProducerId, timeout): the epoch is
        bumped (PrepareEpochFence, in memory); a transactions-version-2 transaction fenced by InitProducerId
        (``abort_bump``) bumps it once more for the abort itself, taking a new producer id for CompleteAbort when
        that exhausts the epoch. A timed-out one is aborted with the fencing epoch alone (Kafka 4.3: the
        producer's EndTxn of the epoch below is then answered as a retry, INVALID_TXN_STATE for a commit)."""
        fenced = txn.transition(S.PREPARE_EPOCH_FENCE, producer_epoch=self._bump(txn.producer_epoch),
                                last_producer_epoch=NO_PRODUCER_EPOCH)
        if txn.client_transaction_version < TV2 or not abort_bump:
            return fenced.transition(S.PREPARE_ABORT, txn_last_update_timestamp=now)
        next_id = self.generate_producer_id() if is_epoch_exhausted(fenced.producer_epoch) else NO_PRODUCER_ID
        return fenced.transition(S.PREPARE_ABORT, producer_epoch=self._bump(fenced.producer_epoch),
                                 next_producer_id=next_id, txn_last_update_timestamp=now)

    # ================================================================================== partitions
    def _check_producer(self, txn: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> int:
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.NONE

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]],
                       client_transaction_version: int = 0) -> CoordinatorResult[int]:
        """``client_transaction_version`` 2: the broker's implicit add (Produce v12, TxnOffsetCommit v5); the
        transaction is then ended and fenced with the version 2 rules."""
        txn = self.transactions.get(transactional_id)
        if txn is not None and txn.state.is_prepare and txn.next_producer_id == producer_id:
            # the producer already holds the new producer id of a completing epoch overflow
            return CoordinatorResult(response=ErrorCode.CONCURRENT_TRANSACTIONS)
        error = self._check_producer(txn, producer_id, producer_epoch)
        if error:
            return CoordinatorResult(response=error)
        assert txn is not None
        wanted = set(partitions)
        if txn.state is S.ONGOING and wanted <= txn.partitions:
            return CoordinatorResult(response=ErrorCode.NONE)
        now = self.now_ms()
        start = txn.txn_start_timestamp if txn.state is S.ONGOING else now
        new = txn.transition(S.ONGOING, partitions=txn.partitions | wanted, txn_start_timestamp=start,
                             txn_last_update_timestamp=now, client_transaction_version=client_transaction_version)
        return CoordinatorResult([self._record(new)], ErrorCode.NONE)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        txn = self.transactions.get(transactional_id)
        error = self._check_producer(txn, producer_id, producer_epoch)
        if error:
            return {tp: error for tp in partitions}
        assert txn is not None
        return {tp: ErrorCode.NONE if tp in txn.partitions else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    # ================================================================================== EndTxn
    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        from_client: bool = True, client_transaction_version: int = 0) -> CoordinatorResult[int]:
        """EndTxn; ``client_transaction_version`` 2 (EndTxn v5) follows :meth:`_end_transaction_v2`. The producer
        id and epoch to answer v5 with are :meth:`producer_identity` afterwards."""
        if client_transaction_version >= TV2:
            return self._end_transaction_v2(transactional_id, producer_id, producer_epoch, commit)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return CoordinatorResult(response=ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if (from_client and producer_epoch != txn.producer_epoch) or producer_epoch < txn.producer_epoch:
            return CoordinatorResult(response=ErrorCode.PRODUCER_FENCED)
        state = txn.state
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            new = txn.transition(target, producer_epoch=producer_epoch, txn_last_update_timestamp=self.now_ms())
            return CoordinatorResult([self._record(new)], ErrorCode.NONE, self._prepared_callback([new]))
        if (state is S.COMPLETE_COMMIT and commit) or (state is S.COMPLETE_ABORT and not commit):
            return CoordinatorResult(response=ErrorCode.NONE)
        if (state is S.PREPARE_COMMIT and commit) or (state is S.PREPARE_ABORT and not commit):
            return CoordinatorResult(response=ErrorCode.CONCURRENT_TRANSACTIONS)
        log.info("transactional id %s is %s: cannot %s", transactional_id, state.kafka_name,
                 "commit" if commit else "abort")
        return CoordinatorResult(response=ErrorCode.INVALID_TXN_STATE)

    def _end_transaction_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            commit: bool) -> CoordinatorResult[int]:
        """EndTxn with the transactions-version-2 rules (Kafka 4.3 ``TransactionCoordinator.endTransaction``).
        A retry carries the epoch one below the current one (``retry_on_bump``) or, after an overflow, the
        exhausted epoch of the previous producer id (``retry_on_overflow``):

        ==============  =======================  ========================
        state           abort (retry / current)  commit (retry / current)
        ==============  =======================  ========================
        Empty           FENCED / bump            FENCED / INVALID_TXN_STATE
        CompleteAbort   NONE / bump              INVALID_TXN_STATE / INVALID_TXN_STATE
        CompleteCommit  INVALID_TXN_STATE / bump NONE / INVALID_TXN_STATE
        ==============  =======================  ========================

        Ongoing with the current epoch -> PrepareCommit/PrepareAbort with the epoch bumped. PrepareCommit/
        PrepareAbort (the markers of the last EndTxn are being written) -> CONCURRENT_TRANSACTIONS whatever the
        epoch, checked before it (Kafka 4.3 checks the pending transition to CompleteX first, KAFKA-18464): the
        producer already holds the bumped epoch, and its abort of an empty transaction right after a commit
        must wait for the commit to complete, not be fenced."""
        txn = self.transactions.get(transactional_id)
        if txn is None:
            return CoordinatorResult(response=ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        state = txn.state
        if state.is_prepare and producer_id in (txn.producer_id, txn.next_producer_id, txn.last_producer_id):
            # the markers of the last EndTxn are being written: retriable, before the epoch is looked at
            return CoordinatorResult(response=ErrorCode.CONCURRENT_TRANSACTIONS)
        retry_on_overflow = (txn.last_producer_id == producer_id and producer_epoch == MAX_PRODUCER_EPOCH - 1
                             and txn.producer_epoch == 0)
        retry_on_bump = txn.producer_epoch == producer_epoch + 1
        if state.is_prepare:
            valid = retry_on_bump
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow or producer_epoch == txn.producer_epoch
        else:
            valid = producer_epoch == txn.producer_epoch
        is_retry = retry_on_bump or retry_on_overflow
        if txn.producer_id != producer_id and not retry_on_overflow:
            return CoordinatorResult(response=ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if not valid:
            return CoordinatorResult(response=ErrorCode.PRODUCER_FENCED)
        if state is S.ONGOING:
            return self._prepare_v2(txn, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False)
        if state is S.COMPLETE_COMMIT:
            if commit:
                return CoordinatorResult(response=ErrorCode.NONE if is_retry else ErrorCode.INVALID_TXN_STATE)
            if not is_retry:
                return self._prepare_v2(txn, S.PREPARE_ABORT, True)
        elif state is S.COMPLETE_ABORT:
            if not commit:
                return (CoordinatorResult(response=ErrorCode.NONE) if is_retry
                        else self._prepare_v2(txn, S.PREPARE_ABORT, True))
        elif state is S.EMPTY:
            if not commit:
                return self._prepare_v2(txn, S.PREPARE_ABORT, True)
        elif (state is S.PREPARE_COMMIT and commit) or (state is S.PREPARE_ABORT and not commit):
            return CoordinatorResult(response=ErrorCode.CONCURRENT_TRANSACTIONS)
        log.info("transactional id %s is %s: cannot %s", transactional_id, state.kafka_name,
                 "commit" if commit else "abort")
        return CoordinatorResult(response=ErrorCode.INVALID_TXN_STATE)

    def _prepare_v2(self, txn: TransactionMetadata, target: TransactionState,
                    no_partition_added: bool) -> CoordinatorResult[int]:
        """PrepareCommit/PrepareAbort with the epoch bumped (a new producer id for CompleteX when the epoch is
        exhausted). An abort without partitions starts its transaction now."""
        now = self.now_ms()
        next_id = self.generate_producer_id() if is_epoch_exhausted(txn.producer_epoch) else NO_PRODUCER_ID
        new = txn.transition(target, producer_epoch=txn.producer_epoch + 1, last_producer_epoch=txn.producer_epoch,
                             next_producer_id=next_id, client_transaction_version=TV2,
                             txn_start_timestamp=now if no_partition_added else txn.txn_start_timestamp,
                             txn_last_update_timestamp=now)
        last_epoch = txn.producer_epoch
        prepared = self._prepared_callback([new])

        def done(error: int) -> None:
            if error == ErrorCode.NONE and txn.transactional_id in self.transactions:
                self.transactions[txn.transactional_id].last_producer_epoch = last_epoch
            prepared(error)

        return CoordinatorResult([self._record(new)], ErrorCode.NONE, done)

    def producer_identity(self, transactional_id: str) -> tuple[int, int]:
        """``(producer id, epoch)`` the producer continues with after an EndTxn v5: the new producer id with
        epoch 0 while an epoch overflow completes, else the current ones; (-1, -1) for an unknown id."""
        txn = self.transactions.get(transactional_id)
        if txn is None:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if txn.next_producer_id != NO_PRODUCER_ID:
            return txn.next_producer_id, 0
        return txn.producer_id, txn.producer_epoch

    def complete_transaction(self, completion: PendingCompletion) -> CoordinatorResult[int]:
        """Every marker is written: PrepareX -> CompleteX (partitions cleared). NOT_COORDINATOR-like no-op
        (INVALID_TXN_STATE) when the transaction moved on meanwhile."""
        txn = self.transactions.get(completion.transactional_id)
        expected = S.PREPARE_COMMIT if completion.commit else S.PREPARE_ABORT
        if (txn is None or txn.state is not expected or txn.producer_id != completion.producer_id
                or txn.producer_epoch != completion.producer_epoch):
            return CoordinatorResult(response=ErrorCode.INVALID_TXN_STATE)
        target = S.COMPLETE_COMMIT if completion.commit else S.COMPLETE_ABORT
        if txn.next_producer_id != NO_PRODUCER_ID:
            # a transactions-version-2 epoch overflow: the producer continues with the new id at epoch 0
            new = txn.transition(target, partitions=set(), txn_last_update_timestamp=self.now_ms(),
                                 producer_id=txn.next_producer_id, producer_epoch=0,
                                 last_producer_id=txn.producer_id, next_producer_id=NO_PRODUCER_ID)
        else:
            new = txn.transition(target, partitions=set(), txn_last_update_timestamp=self.now_ms())
        return CoordinatorResult([self._record(new)], ErrorCode.NONE)

    # ================================================================================== timers
    def _schedule_abort_check(self) -> None:
        self.timer.schedule(ABORT_TIMED_OUT_KEY, self.config.abort_timed_out_transactions_interval_ms,
                            self._abort_timed_out)

    def _abort_timed_out(self) -> CoordinatorResult[None]:
        self._schedule_abort_check()
        return self.abort_timed_out_transactions(self.now_ms())

    def abort_timed_out_transactions(self, now: int) -> CoordinatorResult[None]:
        """PrepareAbort (epoch bumped: the producer is fenced) for every Ongoing transaction that has run
        longer than its timeout."""
        prepared = []
        for txn in self.transactions.values():
            if txn.state is S.ONGOING and txn.txn_start_timestamp + txn.txn_timeout_ms < now:
                log.info("transactional id %s: transaction of producer %d epoch %d timed out after %d ms; aborting",
                         txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.txn_timeout_ms)
                prepared.append(self._fence(txn, now, abort_bump=False))
        return CoordinatorResult([self._record(t) for t in prepared], None, self._prepared_callback(prepared))

    def _schedule_expiration(self) -> None:
        self.timer.schedule(EXPIRE_IDS_KEY, self.config.remove_expired_transactional_ids_interval_ms,
                            self._expire)

    def _expire(self) -> CoordinatorResult[None]:
        self._schedule_expiration()
        return self.expire_transactional_ids(self.now_ms())

    def expire_transactional_ids(self, now: int) -> CoordinatorResult[None]:
        """Dead + tombstone for ids without a transaction, idle for ``transactional.id.expiration.ms``."""
        records = []
        for txn in self.transactions.values():
            if (txn.state.is_complete_or_empty
                    and now - txn.txn_last_update_timestamp >= self.config.transactional_id_expiration_ms):
                txn.transition(S.DEAD)  # checks the table; the tombstone removes the id on replay
                log.info("transactional id %s expired", txn.transactional_id)
                records.append(tombstone(txn.transactional_id))
        return CoordinatorResult(records)

    # ================================================================================== admin
    def describe(self, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
        out = DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state is S.DEAD:
            out.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            return out
        by_topic: dict[str, list[int]] = {}
        for topic, partition in txn.sorted_partitions():
            by_topic.setdefault(topic, []).append(partition)
        out.producer_id = txn.producer_id
        out.producer_epoch = txn.producer_epoch
        out.transaction_state = txn.state.kafka_name
        out.transaction_timeout_ms = txn.txn_timeout_ms
        out.transaction_start_time_ms = txn.txn_start_timestamp
        out.topics = [DescribeTransactionsResponse.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
        return out

    def list_transactions(self, states: set[TransactionState] | None, producer_ids: set[int] | None,
                          duration_ms: int, pattern: re.Pattern[str] | None,
                          now: int) -> list[ListTransactionsResponse.TransactionState]:
        out = []
        for txn in self.transactions.values():
            if txn.state is S.DEAD:
                continue
            if states and txn.state not in states:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if duration_ms >= 0 and (txn.txn_start_timestamp < 0 or now - txn.txn_start_timestamp < duration_ms):
                continue
            if pattern is not None and not pattern.fullmatch(txn.transactional_id):
                continue
            out.append(ListTransactionsResponse.TransactionState(
                transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                transaction_state=txn.state.kafka_name))
        return out
