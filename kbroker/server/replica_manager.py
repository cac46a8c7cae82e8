"""Partitions hosted by this broker: appends, reads, the high watermark and delayed fetches.

``Partition`` holds the replication state that the metadata image assigns (leader, leader epoch, replicas,
ISR) next to the :class:`~kbroker.storage.log.PartitionLog`. The high watermark rule is written where it is
applied, in :meth:`Partition.maybe_increment_high_watermark`: it is the smallest log end offset among the
in-sync replicas, and only moves forward. With one node the ISR is just this broker, so it follows the log
end offset (= last offset + 1) right after each append.

Delayed fetches (long polling) wait on :attr:`Partition.waiters`; every high watermark change wakes them.
All state belongs to the event loop; nothing here awaits while changing state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.gc_policy import freeze_long_lived, thaw
from kbroker.storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from kbroker.controller.image import MetadataImage
    from kbroker.server.broker import Broker
    from kbroker.storage.log import PartitionLog

log = logging.getLogger(__name__)

SYNC_CREATE_LIMIT = 50
"""New partitions up to this many in one metadata change get their logs at once, on the event loop (a node
that is its own quorum; in a cluster they are always made in the background)."""
CREATE_CHUNK = 100
"""Logs a worker thread creates before the loop registers them (the loop serves other requests between)."""


@dataclass(eq=False)
class Partition:
    """One partition replica on this broker."""

    topic: str
    partition_index: int
    topic_id: bytes
    log: PartitionLog
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, capped at the high watermark (the log's rule)."""
        return self.log.last_stable_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """FENCED_LEADER_EPOCH if the client's epoch is older, UNKNOWN_LEADER_EPOCH if newer; -1 skips."""
        if current_leader_epoch == -1:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def maybe_increment_high_watermark(self, follower_log_end_offsets: dict[int, int] | None = None) -> bool:
        """Advance the high watermark to the smallest log end offset in the ISR; True if it moved.

        ``follower_log_end_offsets`` maps follower node id -> its last fetched log end offset (replication
        will supply it; a single node has no followers).
        """
        leos = [self.log.log_end_offset]
        for node in self.isr:
            if node != self.leader:
                leos.append((follower_log_end_offsets or {}).get(node, self.log.high_watermark))
        new_hw = min(leos)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            self.wake_waiters()
            return True
        return False

    def wake_waiters(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()


class ReplicaManager:
    """Owns every :class:`Partition` on this broker and applies metadata changes to them."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.partitions: dict[tuple[str, int], Partition] = {}
        #: partitions whose logs a worker thread is creating (they answer NOT_LEADER_OR_FOLLOWER meanwhile)
        self.creating: set[tuple[str, int]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._partition_listeners: list[Any] = []
        self._create_lock = asyncio.Lock()

    # ---- metadata ----
    def apply_image(self, image: MetadataImage) -> None:
        """Create logs for partitions this node leads or replicates and drop those of removed topics.

        A few new partitions get their logs at once. Many (a CreateTopics of thousands of partitions) are
        created in a worker thread, :data:`CREATE_CHUNK` at a time, so that other clients' requests are not held
        up; until its log exists a partition answers NOT_LEADER_OR_FOLLOWER, which clients retry. An I/O error
        while creating a log takes its directory offline (``KAFKA_STORAGE_ERROR`` for its partitions)."""
        node_id = self.broker.node_id
        wanted: set[tuple[str, int]] = set()
        missing: list[tuple[Any, Any]] = []
        for topic in image.topics_by_name.values():
            for p in topic.partitions.values():
                if node_id not in p.replicas:
                    continue
                key = (topic.name, p.partition_id)
                wanted.add(key)
                part = self.partitions.get(key)
                if part is not None and part.topic_id != topic.topic_id:
                    # deleted and re-created under the same name: new topic id, new log
                    self._remove(key)
                    part = None
                if part is None:
                    if key not in self.creating:
                        missing.append((topic, p))
                    continue
                became_leader_epoch = p.leader_epoch != part.leader_epoch
                part.leader, part.leader_epoch = p.leader, p.leader_epoch
                part.partition_epoch, part.replicas, part.isr = p.partition_epoch, list(p.replicas), list(p.isr)
                if became_leader_epoch and p.leader == node_id:
                    part.log.leader_epoch_cache.assign(p.leader_epoch, part.log.log_end_offset)
                if part.leader == node_id:
                    part.maybe_increment_high_watermark()
        removed = [key for key in self.partitions if key not in wanted]
        for key in removed:
            self._remove(key)
        if removed:
            thaw()  # their cyclic garbage may be frozen: let the collector see it again
        # In a cluster a topic's creation is answered once committed, not once brokers made its logs: they are
        # always made in the background there, so that fsyncs of new logs never hold up this broker's requests.
        limit = 0 if self.broker.metadata_quorum is not None else SYNC_CREATE_LIMIT
        if len(missing) <= limit or not self._loop_running():
            for topic, p in missing:
                try:
                    plog = self.broker.log_manager.get_or_create_log(
                        topic.name, p.partition_id, topic.topic_id, self.broker.log_config_for(topic.name, image))
                except KafkaError as exc:
                    log.error("cannot create the log of %s-%d: %s", topic.name, p.partition_id, exc)
                    continue
                self._add(topic, p, plog)
        else:
            self._create_in_background(missing, image)

    @staticmethod
    def _loop_running() -> bool:
        try:
            asyncio.get_running_loop()
            return True
        except RuntimeError:
            return False

    def _add(self, topic: Any, p: Any, plog: Any) -> None:
        part = Partition(topic.name, p.partition_id, topic.topic_id, plog, p.leader, p.leader_epoch,
                         p.partition_epoch, list(p.replicas), list(p.isr))
        self.partitions[(topic.name, p.partition_id)] = part
        if p.leader == self.broker.node_id:
            plog.leader_epoch_cache.assign(p.leader_epoch, plog.log_end_offset)
            part.maybe_increment_high_watermark()

    def _create_in_background(self, missing: list[tuple[Any, Any]], image: MetadataImage) -> None:
        lm = self.broker.log_manager
        try:
            plan = lm.plan_log_dirs([(t.name, p.partition_id) for t, p in missing])
        except KafkaError as exc:
            log.error("cannot create %d partition logs: %s", len(missing), exc)
            return
        configs = {name: self.broker.log_config_for(name, image) for name in {t.name for t, _ in missing}}
        self.creating.update(plan)

        def build(chunk: list[tuple[Any, Any]]) -> list[tuple[Any, Any, Any]]:
            out = []
            for t, p in chunk:
                key = (t.name, p.partition_id)
                try:
                    plog = lm.new_log(plan[key], t.name, p.partition_id, t.topic_id, configs[t.name])
                    if p.leader == self.broker.node_id:  # its checkpoint file is written here, not on the loop
                        plog.leader_epoch_cache.assign(p.leader_epoch, plog.log_end_offset)
                    out.append((t, p, plog))
                except KafkaError as exc:
                    out.append((t, p, exc))
            return out

        async def run() -> None:
            started = time.monotonic()
            for i in range(0, len(missing), CREATE_CHUNK):
                chunk = missing[i:i + CREATE_CHUNK]
                try:
                    async with self._create_lock:  # one creating thread at a time: the loop keeps the GIL often
                        built = await asyncio.to_thread(build, chunk)
                except BaseException:
                    for t, p in chunk:
                        self.creating.discard((t.name, p.partition_id))
                    raise
                latest = self.broker.controller.image
                for t, p, plog in built:
                    key = (t.name, p.partition_id)
                    self.creating.discard(key)
                    if isinstance(plog, KafkaError):
                        log.error("cannot create the log of %s-%d: %s", t.name, p.partition_id, plog)
                        continue
                    now_topic = latest.topics_by_name.get(t.name)
                    now_part = now_topic.partitions.get(p.partition_id) if now_topic is not None else None
                    if now_part is None or now_topic.topic_id != t.topic_id or key in self.partitions:
                        plog.delete()  # deleted meanwhile
                        continue
                    lm.register(plan[key], plog)
                    self._add(now_topic, now_part, plog)
                freeze_long_lived("partitions created")  # keeps full collections from growing with them
                for callback in list(self._partition_listeners):
                    try:
                        callback()
                    except Exception:
                        log.exception("partition listener failed")
            log.info("created %d partition logs in %.1f s", len(missing), time.monotonic() - started)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def add_partition_listener(self, callback: Any) -> None:
        """Call ``callback()`` whenever logs made in the background were added (no metadata change tells: the
        coordinators load their partitions of the internal topics then)."""
        self._partition_listeners.append(callback)

    def on_metadata_update(self, old: MetadataImage | None, new: MetadataImage, *_: object) -> None:
        self.apply_image(new)

    def _remove(self, key: tuple[str, int]) -> None:
        part = self.partitions.pop(key)
        part.wake_waiters()
        self.broker.log_manager.delete_log(key[0], key[1])

    # ---- lookups ----
    def get_partition(self, topic: str, partition: int) -> Partition:
        """The partition, or KafkaError UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER."""
        part = self.partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self.creating:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the replica is being created")
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return part

    def get_leader_partition(self, topic: str, partition: int) -> Partition:
        part = self.get_partition(topic, partition)
        if part.leader != self.broker.node_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    # ---- append ----
    def append_records(self, part: Partition, records: memoryview, required_acks: int,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> object:
        """Append validated batches as leader and advance the high watermark. Returns the AppendInfo.

        ``min.insync.replicas`` is checked for acks=-1 (NOT_ENOUGH_REPLICAS), as Kafka does before
        appending. ``origin`` COORDINATOR is for the coordinators' own writes (transaction markers,
        transactional offset commits): producer epochs are checked, sequences are not.
        """
        if required_acks == -1:
            min_isr = self.broker.topic_config_int(part.topic, "min.insync.replicas")
            if len(part.isr) < min_isr:
                raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)
        info = part.log.append_as_leader(records, part.leader_epoch, int(time.time() * 1000), origin)
        part.maybe_increment_high_watermark()
        return info

    # ---- delayed fetch ----
    async def wait_for_data(self, parts: list[Partition], timeout_s: float) -> None:
        """Wait until any of ``parts`` changes its high watermark, or ``timeout_s`` passes."""
        if timeout_s <= 0 or not parts:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        for p in parts:
            p.waiters.add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for p in parts:
                p.waiters.discard(fut)
