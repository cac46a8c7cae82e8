"""Transaction verification across brokers (KIP-890 part 1): before the first batch of a transaction lands in a
partition (Produce) or a transactional offset commit reaches a group (TxnOffsetCommit), the leader asks the
transaction coordinator whether that partition was added to the producer's ongoing transaction; with
transactions version 2 (Produce v12, TxnOffsetCommit v5, KIP-890 part 2) it asks the coordinator to add it. When the
coordinator for the transactional id is this broker the question is answered in-process
(``TransactionCoordinator.verify_partitions``); when it is another broker of the cluster,
:class:`RemoteTxnVerifier` asks it with AddPartitionsToTxn v4 (``verify_only``), on ``inter.broker.listener.name``.

Answers are the coordinator's error codes (NONE, INVALID_TXN_STATE when the partition is not in the transaction,
PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS, ...);
COORDINATOR_NOT_AVAILABLE when the coordinator is unknown or unreachable (the caller reports a retriable error).
"""

from __future__ import annotations

import logging
from typing import Any

from kbroker.coordinator.runtime import partition_for
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages.add_partitions_to_txn_request import AddPartitionsToTxnRequest
from kbroker.server.inter_node import NodeRequestError

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
VERIFY_VERSION = 4
"""AddPartitionsToTxn v4: the broker-to-broker batch form with ``verify_only`` (KIP-890)."""


class RemoteTxnVerifier:
    """Asks the transaction coordinator on another broker (the leader of the transactional id's partition of
    ``__transaction_state``) whether partitions are in a producer's ongoing transaction."""

    def __init__(self, broker: Any, timeout_s: float = 5.0) -> None:
        self.broker = broker
        self.timeout_s = timeout_s
        self._channels = broker.inter_broker_channels(f"kbroker-{broker.node_id}")

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker that coordinates ``transactional_id`` now (-1: unknown)."""
        topic = self.broker.controller.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return -1
        part = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
        return part.leader if part is not None else -1

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     tp: tuple[str, int], add: bool = False) -> int:
        """The coordinator's answer for partition ``tp`` -> an error code (see the module docstring). With
        ``add`` (transactions version 2: Produce v12, TxnOffsetCommit v5) the coordinator adds the partition to
        the transaction (``verify_only`` false) instead of only checking it."""
        leader = self.coordinator_of(transactional_id)
        if leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if leader == self.broker.node_id:
            # this broker leads the partition but its coordinator has not loaded it yet
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        ch = self._channels.get(self.broker.controller.image, leader)
        if ch is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        req = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=tp[0],
                                                                                       partitions=[tp[1]])])])
        try:
            resp = await ch.request(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, req, self.timeout_s)
        except NodeRequestError as exc:
            log.info("transaction verification with the coordinator on node %d: %s", leader, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if resp.error_code:
            return resp.error_code
        try:
            return resp.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code
        except (IndexError, AttributeError):
            return ErrorCode.UNKNOWN_SERVER_ERROR

    async def close(self) -> None:
        await self._channels.close()
