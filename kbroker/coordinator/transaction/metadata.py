"""Transaction states, their valid predecessors, and the metadata of one transactional id.

The states and codes are Kafka's (``TransactionState``; the code is ``TransactionStatus`` in
``__transaction_state``, protocol guide §5.3). Each state lists the states it may be entered from; a
transition outside that table raises :class:`IllegalTransactionTransition` (a coordinator bug, never a
client's fault):

============================  ==========================================  ==============================================
state                         entered from                                meaning / what the coordinator does there
============================  ==========================================  ==============================================
Empty (0)                     Empty, CompleteCommit, CompleteAbort        InitProducerId gave out an id/epoch; no open
                                                                          transaction
Ongoing (1)                   Ongoing, Empty, CompleteCommit,             AddPartitionsToTxn / AddOffsetsToTxn added
                              CompleteAbort                               partitions; the timeout clock runs from the
                                                                          first one
PrepareCommit (2)             Ongoing                                     EndTxn(commit) is durable: COMMIT markers are
                                                                          being written; the transaction will commit
PrepareAbort (3)              Ongoing, PrepareEpochFence                  EndTxn(abort), a fencing InitProducerId or the
                                                                          timeout: ABORT markers are being written
CompleteCommit (4)            PrepareCommit                               every marker written; partitions cleared
CompleteAbort (5)             PrepareAbort                                every marker written; partitions cleared
Dead (6)                      Empty, CompleteCommit, CompleteAbort        the id expired (``transactional.id.expiration.ms``);
                                                                          a tombstone follows
PrepareEpochFence (7)         Ongoing                                     in memory only: the epoch was bumped to fence
                                                                          the producer, PrepareAbort follows in the same
                                                                          operation (Kafka never logs this state either)
============================  ==========================================  ==============================================

PrepareCommit/PrepareAbort persist the decision before any marker is written; after a crash the
coordinator reloads them and writes the markers again (markers are idempotent for the partitions), then
the Complete state. Only transactions version 1 (the classic protocol) is implemented: value version 0 is
written (``transaction.version`` is 0), and there is no epoch bump per transaction.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kbroker.coordinator.runtime import CoordinatorRecord
from kbroker.protocol.coordinator_records import TransactionLogKey, TransactionLogValue

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Epochs are int16; at 32766 a new producer id is handed out instead (Kafka's ``isEpochExhausted``).
MAX_PRODUCER_EPOCH = 32767
#: The value version written while ``transaction.version`` is 0 (Kafka writes v1 from level 1 on).
TRANSACTION_LOG_VALUE_VERSION = 0
#: Client transaction version of a transactions-version-2 transaction (epoch bump per transaction).
TV2 = 2


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka reports (DescribeTransactions, ListTransactions)."""
        return _NAMES[self]

    @classmethod
    def parse(cls, name: str) -> TransactionState | None:
        for state, text in _NAMES.items():
            if text == name:
                return state
        return None

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete_or_empty(self) -> bool:
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

S = TransactionState
#: state -> the states it may be entered from (see the module docstring).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # Empty/Complete*: a transactions-version-2 abort without partitions (KIP-890 part 2)
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransactionTransition(RuntimeError):
    """A transition the table does not allow."""


def check_transition(transactional_id: str, current: TransactionState, target: TransactionState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransactionTransition(
            f"transactional id {transactional_id}: {current.kafka_name} -> {target.kafka_name} is not a valid "
            "transition")


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(slots=True)
class TransactionMetadata:
    """What the coordinator knows about one transactional id. Everything but ``last_producer_epoch`` is in
    the ``TransactionLogValue`` record; ``last_producer_epoch`` (the epoch before a KIP-360 bump, so that a
    retried bump is recognised) lives in memory only, as with value version 0 in Kafka."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_id: int = NO_PRODUCER_ID
    #: PrepareX of a transactions-version-2 transaction whose epoch is exhausted: the producer id CompleteX takes
    next_producer_id: int = NO_PRODUCER_ID
    #: 2 when the transaction was begun or ended with the transactions-version-2 requests, else 0
    client_transaction_version: int = 0

    def copy(self) -> TransactionMetadata:
        return TransactionMetadata(self.transactional_id, self.producer_id, self.producer_epoch, self.txn_timeout_ms,
                                   self.state, set(self.partitions), self.txn_start_timestamp,
                                   self.txn_last_update_timestamp, self.last_producer_epoch, self.last_producer_id,
                                   self.next_producer_id, self.client_transaction_version)

    def transition(self, target: TransactionState, **changes: object) -> TransactionMetadata:
        """A copy in ``target`` with ``changes`` applied; raises IllegalTransactionTransition."""
        check_transition(self.transactional_id, self.state, target)
        new = self.copy()
        new.state = target
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def sorted_partitions(self) -> list[tuple[str, int]]:
        return sorted(self.partitions)

    def to_record(self, value_version: int = TRANSACTION_LOG_VALUE_VERSION) -> CoordinatorRecord:
        """The ``__transaction_state`` record; ``value_version`` 1 (finalized ``transaction.version`` >= 1) also
        carries the previous/next producer id and the client transaction version (tagged fields)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.sorted_partitions():
            by_topic.setdefault(topic, []).append(partition)
        value = TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms, transaction_status=int(self.state),
            # Kafka writes a null partition list for Empty
            transaction_partitions=None if self.state is S.EMPTY else [  # type: ignore[arg-type]
                TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
            previous_producer_id=self.last_producer_id, next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version)
        return CoordinatorRecord(TransactionLogKey(transactional_id=self.transactional_id), value, value_version)

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        partitions = {(p.topic, i) for p in (value.transaction_partitions or []) for i in p.partition_ids}
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   TransactionState(value.transaction_status), partitions, value.transaction_start_timestamp_ms,
                   value.transaction_last_update_timestamp_ms,
                   last_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id,
                   client_transaction_version=value.client_transaction_version)


def tombstone(transactional_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TransactionLogKey(transactional_id=transactional_id), None)
