"""ISR changes from partition leaders to the active controller (AlterPartition, KIP-497).

A leader proposes a new ISR for a partition (:meth:`AlterPartitionManager.submit`): a follower that caught up
joins, followers that lagged more than ``replica.lag.time.max.ms`` leave. One change per partition is in flight
at a time (``Partition.pending_isr``); while an expansion is in flight the high watermark already waits for the
joining member (Kafka's "maximal ISR"). Proposals made in the same loop iteration go out as one request, with
the leader epoch and partition epoch the leader knows: the controller refuses a stale one
(INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH) and the leader tries again once the metadata log has brought it the
current state. An accepted change is applied at once from the answer (the metadata log brings the same state
later; a partition never goes back to an older partition epoch).

The manager takes what it uses: this broker's id and broker epoch, and ``send``, a coroutine that delivers an
AlterPartitionRequest to the active controller (over the controller listener, or in-process when this node is
the active controller).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AlterPartitionRequest, AlterPartitionResponse

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3


def apply_answer(part: Any, proposed: list[int], pd: Any) -> None:
    """The controller's answer (``pd``: an AlterPartitionResponse partition, None when none came) to the ISR
    change ``proposed`` for ``part``: the change is no longer in flight; an accepted one is applied at once if it
    is newer than what the partition knows (same leader epoch, higher partition epoch)."""
    if part.pending_isr != proposed:
        return  # the metadata moved the partition on meanwhile
    part.pending_isr = None
    if pd is not None and pd.error_code:
        log.info("AlterPartition of %s-%d to ISR %s: %s", part.topic, part.partition_index, proposed,
                 ErrorCode(pd.error_code).name)
    elif pd is not None and pd.leader_epoch == part.leader_epoch and pd.partition_epoch > part.partition_epoch:
        part.isr, part.partition_epoch = list(pd.isr), pd.partition_epoch
        log.info("ISR of %s-%d is now %s (partition epoch %d)", part.topic, part.partition_index, part.isr,
                 part.partition_epoch)
    part.maybe_increment_high_watermark()


class AlterPartitionManager:
    def __init__(self, node_id: int, broker_epoch: Callable[[], int],
                 send: Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]],
                 broker_epoch_of: Callable[[int], int]) -> None:
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.broker_epoch_of = broker_epoch_of
        self.send = send
        #: (topic id, partition) -> (partition, proposed ISR, leader epoch, partition epoch)
        self._queue: dict[tuple[bytes, int], tuple[Any, list[int], int, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, part: Any, new_isr: list[int]) -> bool:
        """Propose ``new_isr`` for ``part`` (whose leader this broker is); False when a change is in flight."""
        if part.pending_isr is not None or not part.is_leader:
            return False
        part.pending_isr = list(new_isr)
        part.maybe_increment_high_watermark()
        self._queue[(part.topic_id, part.partition_index)] = (part, list(new_isr), part.leader_epoch,
                                                               part.partition_epoch)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush())
        return True

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # every proposal of this loop iteration in one request
        self._task = None
        batch, self._queue = self._queue, {}
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: dict[tuple[bytes, int], tuple[Any, list[int], int, int]]) -> None:
        req = AlterPartitionRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch())
        topics: dict[bytes, AlterPartitionRequest.TopicData] = {}
        for (topic_id, partition), (part, isr, leader_epoch, partition_epoch) in batch.items():
            td = topics.get(topic_id)
            if td is None:
                td = topics[topic_id] = AlterPartitionRequest.TopicData(topic_id=topic_id)
                req.topics.append(td)
            td.partitions.append(AlterPartitionRequest.PartitionData(
                partition_index=partition, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=self.broker_epoch_of(b))
                                     for b in isr]))
        answered: dict[tuple[bytes, int], Any] = {}
        try:
            resp = await self.send(req)
            if resp.error_code:
                raise KafkaError(ErrorCode(resp.error_code))
            for t in resp.topics:
                for pd in t.partitions:
                    answered[(t.topic_id, pd.partition_index)] = pd
        except Exception as exc:  # the controller moved or is unreachable: the leader proposes again later
            log.info("AlterPartition for %d partitions not done: %s", len(batch), exc)
        for key, (part, isr, leader_epoch, partition_epoch) in batch.items():
            apply_answer(part, isr, answered.get(key))

    async def close(self) -> None:
        for t in list(self._tasks) + ([self._task] if self._task else []):
            t.cancel()
