"""The transaction coordinator shard on a fake clock and an in-memory log."""

from __future__ import annotations

import itertools

import pytest

from kbroker.coordinator.runtime import CoordinatorRuntime, InMemoryPartitionWriter, ManualScheduler
from kbroker.coordinator.transaction.config import TransactionCoordinatorConfig
from kbroker.coordinator.transaction.metadata import (
    VALID_PREVIOUS_STATES,
    IllegalTransactionTransition,
    TransactionMetadata,
    TransactionState as S,
    check_transition,
)
from kbroker.coordinator.transaction.service import TRANSACTION_COORDINATOR_SERDE
from kbroker.coordinator.transaction.shard import PendingCompletion, TransactionCoordinatorShard
from kbroker.protocol.errors import ErrorCode as E

P = 0
TID = "txn-1"


class Harness:
    def __init__(self, writer: InMemoryPartitionWriter | None = None, scheduler: ManualScheduler | None = None,
                 **config: int) -> None:
        self.config = TransactionCoordinatorConfig(**config)
        self.scheduler = scheduler or ManualScheduler()
        self.writer = writer or InMemoryPartitionWriter()
        self.ids = itertools.count(1000)
        self.prepared: list[PendingCompletion] = []
        self.runtime: CoordinatorRuntime[TransactionCoordinatorShard] = CoordinatorRuntime(
            self.writer, self.scheduler, self._build, TRANSACTION_COORDINATOR_SERDE)
        self.runtime.load(P)

    def _build(self, partition: int, timer) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(partition, self.config, timer, self.scheduler.now_ms,
                                           lambda: next(self.ids), 3,
                                           lambda p, c: self.prepared.append(c))

    @property
    def shard(self) -> TransactionCoordinatorShard:
        return self.runtime.shard(P)

    def write(self, op):
        return self.runtime.write(P, op)

    def init(self, tid: str = TID, timeout: int = 60_000, expected=None):
        return self.write(lambda s: s.init_producer_id(tid, timeout, expected))

    def state(self, tid: str = TID) -> TransactionMetadata:
        return self.shard.transactions[tid]

    def complete_all(self) -> None:
        while self.prepared:
            c = self.prepared.pop(0)
            assert self.write(lambda s: s.complete_transaction(c)) == E.NONE

    def reloaded(self) -> dict[str, tuple]:
        other = Harness(self.writer, self.scheduler)
        return {k: (v.producer_id, v.producer_epoch, v.state, v.partitions, v.txn_timeout_ms, v.txn_start_timestamp)
                for k, v in other.shard.transactions.items()}


def snapshot(h: Harness) -> dict[str, tuple]:
    return {k: (v.producer_id, v.producer_epoch, v.state, v.partitions, v.txn_timeout_ms, v.txn_start_timestamp)
            for k, v in h.shard.transactions.items()}


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("current", list(S))
def test_transition_table(current: S, target: S) -> None:
    if current in VALID_PREVIOUS_STATES[target]:
        check_transition("t", current, target)
    else:
        with pytest.raises(IllegalTransactionTransition):
            check_transition("t", current, target)


def test_commit_cycle_and_replay() -> None:
    h = Harness()
    r = h.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, 1000, 0)
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0), ("b", 1)])) == E.NONE
    assert h.state().state is S.ONGOING and h.state().txn_start_timestamp == h.scheduler.now_ms()
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)])) == E.NONE  # already in: no record
    assert h.shard.verify_partitions(TID, 1000, 0, [("a", 0), ("c", 0)]) == {("a", 0): E.NONE,
                                                                           ("c", 0): E.TRANSACTION_ABORTABLE}
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.NONE
    assert h.state().state is S.PREPARE_COMMIT
    assert h.prepared == [PendingCompletion(TID, 1000, 0, True, (("a", 0), ("b", 1)), 3)]
    assert h.reloaded() == snapshot(h)  # PrepareCommit is durable
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.CONCURRENT_TRANSACTIONS
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)])) == E.CONCURRENT_TRANSACTIONS
    assert h.init().error_code == E.CONCURRENT_TRANSACTIONS
    h.complete_all()
    assert h.state().state is S.COMPLETE_COMMIT and h.state().partitions == set()
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.NONE  # a retry
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, False)) == E.INVALID_TXN_STATE
    assert h.reloaded() == snapshot(h)


def test_errors_of_add_partitions_and_end_txn() -> None:
    h = Harness()
    assert h.write(lambda s: s.add_partitions("nope", 1, 0, [("a", 0)])) == E.INVALID_PRODUCER_ID_MAPPING
    h.init()
    assert h.write(lambda s: s.add_partitions(TID, 999, 0, [("a", 0)])) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.write(lambda s: s.add_partitions(TID, 1000, 1, [("a", 0)])) == E.PRODUCER_FENCED
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.INVALID_TXN_STATE  # Empty
    assert h.init(timeout=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout=900_001).error_code == E.INVALID_TRANSACTION_TIMEOUT


def test_fencing_aborts_the_open_transaction_with_a_bumped_epoch() -> None:
    h = Harness()
    h.init()
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)]))
    r = h.init()
    assert r.error_code == E.CONCURRENT_TRANSACTIONS
    assert h.state().state is S.PREPARE_ABORT and h.state().producer_epoch == 1
    assert h.prepared == [PendingCompletion(TID, 1000, 1, False, (("a", 0),), 3)]
    h.complete_all()
    r = h.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, 1000, 2)
    # the zombie (epoch 0) is fenced everywhere
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)])) == E.PRODUCER_FENCED
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.PRODUCER_FENCED


def test_kip360_bump_retry_and_fencing() -> None:
    h = Harness()
    h.init()
    r = h.init(expected=(1000, 0))
    assert (r.producer_id, r.producer_epoch) == (1000, 1)
    r = h.init(expected=(1000, 0))  # the retry of that bump: same answer
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, 1000, 1)
    h.init()  # another producer: epoch 2, last epoch forgotten
    assert h.init(expected=(1000, 1)).error_code == E.PRODUCER_FENCED
    assert h.init(expected=(5, 2)).error_code == E.PRODUCER_FENCED


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    h = Harness()
    h.init()
    meta = h.state()
    meta.producer_epoch = 32766
    r = h.init()
    assert (r.producer_id, r.producer_epoch) == (1001, 0)


def test_timed_out_transaction_is_aborted_and_fenced() -> None:
    h = Harness(abort_timed_out_transactions_interval_ms=1000)
    h.init(timeout=5000)
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)]))
    h.scheduler.advance(4000)
    assert h.state().state is S.ONGOING
    h.scheduler.advance(2000)
    assert h.state().state is S.PREPARE_ABORT and h.state().producer_epoch == 1
    h.complete_all()
    assert h.state().state is S.COMPLETE_ABORT
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.PRODUCER_FENCED


def test_idle_transactional_ids_expire() -> None:
    h = Harness(transactional_id_expiration_ms=10_000, remove_expired_transactional_ids_interval_ms=1000)
    h.init()
    h.init("busy")
    h.write(lambda s: s.add_partitions("busy", 1001, 0, [("a", 0)]))
    h.scheduler.advance(11_000)
    assert TID not in h.shard.transactions and "busy" in h.shard.transactions
    assert h.reloaded().keys() == {"busy"}
    assert h.shard.describe(TID).error_code == E.TRANSACTIONAL_ID_NOT_FOUND


def test_loaded_prepared_transaction_is_handed_to_the_marker_writer() -> None:
    h = Harness()
    h.init()
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)]))
    h.write(lambda s: s.end_transaction(TID, 1000, 0, False))
    other = Harness(h.writer, h.scheduler)
    assert other.prepared == [PendingCompletion(TID, 1000, 0, False, (("a", 0),), 3)]


def test_describe_and_list() -> None:
    h = Harness()
    h.init()
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 1), ("a", 0)]))
    d = h.shard.describe(TID)
    assert (d.transaction_state, d.producer_id, d.topics[0].topic, d.topics[0].partitions) == ("Ongoing", 1000, "a",
                                                                                              [0, 1])
    now = h.scheduler.now_ms()
    assert [t.transactional_id for t in h.shard.list_transactions({S.ONGOING}, None, -1, None, now)] == [TID]
    assert h.shard.list_transactions({S.EMPTY}, None, -1, None, now) == []
    assert h.shard.list_transactions(None, {7}, -1, None, now) == []
    assert h.shard.list_transactions(None, None, 1, None, now) == []


# ----------------------------------------------------------------------- transactions version 2 (KIP-890 part 2)
TV2 = 2


def end2(h: Harness, pid: int, epoch: int, commit: bool) -> int:
    return h.write(lambda s: s.end_transaction(TID, pid, epoch, commit, client_transaction_version=TV2))


def test_v2_end_bumps_the_epoch_and_retries_carry_the_old_one() -> None:
    h = Harness()
    h.init()
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)], client_transaction_version=TV2)) == E.NONE
    assert end2(h, 1000, 0, True) == E.NONE
    assert h.state().state is S.PREPARE_COMMIT and h.state().producer_epoch == 1
    # the markers carry the bumped epoch, so a late batch of epoch 0 is older than the partition's producer
    assert h.prepared == [PendingCompletion(TID, 1000, 1, True, (("a", 0),), 3, transaction_version=2)]
    # while the markers are written every EndTxn waits (Kafka 4.3 checks the pending CompleteCommit before the
    # epoch): a retry, the other result, and the next transaction's abort with the bumped epoch (an empty abort
    # right after the commit: never PRODUCER_FENCED)
    assert end2(h, 1000, 0, True) == E.CONCURRENT_TRANSACTIONS
    assert end2(h, 1000, 0, False) == E.CONCURRENT_TRANSACTIONS
    assert end2(h, 1000, 1, False) == E.CONCURRENT_TRANSACTIONS
    assert end2(h, 1000, 1, True) == E.CONCURRENT_TRANSACTIONS
    assert h.state().state is S.PREPARE_COMMIT and h.state().producer_epoch == 1  # nothing changed
    h.complete_all()
    assert h.shard.producer_identity(TID) == (1000, 1)
    assert end2(h, 1000, 0, True) == E.NONE  # a retry after completion
    assert end2(h, 1000, 0, False) == E.INVALID_TXN_STATE
    assert end2(h, 1000, 1, True) == E.INVALID_TXN_STATE  # nothing to commit with the new epoch
    # the old epoch can neither add nor verify partitions: a late produce of the last transaction is fenced
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)], client_transaction_version=TV2)) \
        == E.PRODUCER_FENCED
    assert h.shard.verify_partitions(TID, 1000, 0, [("a", 0)]) == {("a", 0): E.PRODUCER_FENCED}
    # an abort without partitions bumps too (CompleteCommit -> PrepareAbort -> CompleteAbort)
    assert end2(h, 1000, 1, False) == E.NONE
    h.complete_all()
    assert (h.state().state, h.state().producer_epoch) == (S.COMPLETE_ABORT, 2)
    assert end2(h, 1000, 1, False) == E.NONE  # its retry
    assert end2(h, 1000, 5, False) == E.PRODUCER_FENCED
    # a reload keeps the version-2 fields (value version 1)
    assert h.reloaded()[TID][:3] == (1000, 2, S.COMPLETE_ABORT)
    assert Harness(h.writer, h.scheduler).state().client_transaction_version == TV2


def test_v2_epoch_overflow_takes_a_new_producer_id() -> None:
    h = Harness()
    h.init()
    h.state().producer_epoch = 32766
    assert h.write(lambda s: s.add_partitions(TID, 1000, 32766, [("a", 0)], client_transaction_version=TV2)) \
        == E.NONE
    assert end2(h, 1000, 32766, True) == E.NONE
    assert (h.state().producer_id, h.state().producer_epoch, h.state().next_producer_id) == (1000, 32767, 1001)
    assert h.shard.producer_identity(TID) == (1001, 0)  # what EndTxn v5 answers
    # the new producer id cannot start a transaction before the markers are written
    assert h.write(lambda s: s.add_partitions(TID, 1001, 0, [("a", 0)], client_transaction_version=TV2)) \
        == E.CONCURRENT_TRANSACTIONS
    h.complete_all()
    assert (h.state().producer_id, h.state().producer_epoch, h.state().last_producer_id) == (1001, 0, 1000)
    assert end2(h, 1000, 32766, True) == E.NONE  # a retry with the old identity
    assert h.shard.producer_identity(TID) == (1001, 0)
    assert h.reloaded()[TID][:3] == (1001, 0, S.COMPLETE_COMMIT)


def test_v2_fencing_bumps_for_the_fence_and_for_the_abort() -> None:
    h = Harness()
    h.init()
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)], client_transaction_version=TV2))
    assert h.init().error_code == E.CONCURRENT_TRANSACTIONS
    assert h.state().state is S.PREPARE_ABORT and h.state().producer_epoch == 2
    h.complete_all()
    r = h.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (E.NONE, 1000, 3)
    assert end2(h, 1000, 0, False) == E.PRODUCER_FENCED


def test_v1_transactions_keep_their_epoch() -> None:
    """A classic (version 1) client on the same coordinator: no bump, value version 0 records while the
    feature is not finalized."""
    h = Harness()
    h.init()
    h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)]))
    assert h.write(lambda s: s.end_transaction(TID, 1000, 0, True)) == E.NONE
    h.complete_all()
    assert (h.state().state, h.state().producer_epoch) == (S.COMPLETE_COMMIT, 0)
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)])) == E.NONE


def test_timed_out_v2_transaction_is_aborted_with_one_bump() -> None:
    """Kafka 4.3: a timed-out transactions-version-2 transaction is aborted with the fencing epoch alone; the
    producer's commit with the epoch below is then a retry of another result: INVALID_TXN_STATE."""
    h = Harness(abort_timed_out_transactions_interval_ms=1000)
    h.init(timeout=5000)
    assert h.write(lambda s: s.add_partitions(TID, 1000, 0, [("a", 0)], client_transaction_version=TV2)) == E.NONE
    h.scheduler.advance(6000)
    assert h.state().state is S.PREPARE_ABORT and h.state().producer_epoch == 1
    h.complete_all()
    assert h.state().state is S.COMPLETE_ABORT and h.state().producer_epoch == 1
    assert end2(h, 1000, 0, True) == E.INVALID_TXN_STATE
