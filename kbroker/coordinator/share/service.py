"""``ShareCoordinator``: durable share-partition state (KIP-932 "share coordinator"), asyncio side of the runtime.

* Owns a :class:`~kbroker.coordinator.runtime.CoordinatorRuntime` whose shards are
  :class:`~kbroker.coordinator.share.shard.ShareCoordinatorShard`, one per ``__share_group_state`` partition led
  by this node; records reach the log through the group coordinator's ``ReplicaManagerWriter``.
* The topic is created on first use (:meth:`ensure_topic`): ``share.coordinator.state.topic.num.partitions``
  partitions (Kafka's default 50), compacted, ``share.coordinator.state.topic.segment.bytes`` segments,
  replication factor ``share.coordinator.state.topic.replication.factor`` capped at the number of live brokers,
  ``min.insync.replicas`` ``share.coordinator.state.topic.min.isr`` (Kafka's default 2) capped at that replication
  factor (a state write waits for that many in-sync replicas).
* A state's partition is Kafka's: ``abs(hashCode("<group>:<topic id>:<partition>")) % partitions`` (the share
  coordinator key, topic id in Kafka's base64 form).
* Follows the metadata image like the other coordinators: partitions led here are loaded, others unloaded.

Callers: the broker's share partitions (in-process when this node leads the state's partition, else through the
inter-broker APIs Initialize/Read/Write/DeleteShareGroupState and ReadShareGroupStateSummary that other brokers
send here), and the share-group offset APIs.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

from kbroker.coordinator.group.service import AsyncioScheduler, ReplicaManagerWriter
from kbroker.coordinator.runtime import (
    CoordinatorRecordSerde,
    CoordinatorRuntime,
    CoordinatorTimer,
    Scheduler,
    ShardState,
    partition_for,
)
from kbroker.coordinator.service_support import PartitionLoader, create_internal_topic, internal_topic_replication
from kbroker.coordinator.share.shard import ShareCoordinatorShard, StateKey
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_COORDINATOR_SERDE = CoordinatorRecordSerde((cr.ShareSnapshotKey, cr.ShareSnapshotValue,
                                                  cr.ShareUpdateKey, cr.ShareUpdateValue))

#: Kafka's defaults of the share coordinator's broker keys
DEFAULTS: dict[str, int] = {
    "share.coordinator.state.topic.num.partitions": 50,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.segment.bytes": 104857600,
    "share.coordinator.state.topic.min.isr": 2,
}


@dataclass(frozen=True)
class ShareCoordinatorConfig:
    num_partitions: int = DEFAULTS["share.coordinator.state.topic.num.partitions"]
    replication_factor: int = DEFAULTS["share.coordinator.state.topic.replication.factor"]
    segment_bytes: int = DEFAULTS["share.coordinator.state.topic.segment.bytes"]
    min_isr: int = DEFAULTS["share.coordinator.state.topic.min.isr"]

    @classmethod
    def from_broker_config(cls, config: Any) -> ShareCoordinatorConfig:
        def get(key: str) -> int:
            value = config.props.get(key) if hasattr(config, "props") else None
            return DEFAULTS[key] if value is None or str(value).strip() == "" else int(str(value).strip())

        return cls(get("share.coordinator.state.topic.num.partitions"),
                   get("share.coordinator.state.topic.replication.factor"),
                   get("share.coordinator.state.topic.segment.bytes"),
                   get("share.coordinator.state.topic.min.isr"))


def coordinator_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """Kafka's ``SharePartitionKey.asCoordinatorKey``: ``group:topicId:partition``, the id in URL-safe base64."""
    tid = base64.urlsafe_b64encode(topic_id).decode().rstrip("=")
    return f"{group_id}:{tid}:{partition}"


class ShareCoordinator:
    """See the module docstring. ``controller`` needs ``image``, ``create_topics`` and ``add_listener``."""

    def __init__(self, config: ShareCoordinatorConfig, node_id: int, controller: Any, replica_manager: Any,
                 scheduler: Scheduler | None = None, topic: str = SHARE_STATE_TOPIC) -> None:
        self.config = config
        self.node_id = node_id
        self.controller = controller
        self.topic = topic
        self.scheduler: Scheduler = scheduler or AsyncioScheduler()
        self.writer = ReplicaManagerWriter(replica_manager, topic)
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] = CoordinatorRuntime(
            self.writer, self.scheduler, self._build_shard, SHARE_COORDINATOR_SERDE, name="share-coordinator")
        self.loader = PartitionLoader(self.runtime, self.writer)
        self._started = False

    @classmethod
    def for_broker(cls, broker: Any) -> ShareCoordinator:
        return cls(ShareCoordinatorConfig.from_broker_config(broker.config), broker.node_id, broker.controller,
                   broker.replica_manager)

    def _build_shard(self, partition: int, timer: CoordinatorTimer) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(partition)

    # ---- life cycle
    def startup(self) -> None:
        self._started = True
        self.controller.add_listener(self._on_metadata_update)
        add = getattr(self.writer.replica_manager, "add_partition_listener", None)
        if add is not None:
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
                log.info("share coordinator: no longer leading %s-%d; unloading", self.topic, partition)
                self.loader.cancel(partition)
                self.runtime.unload(partition)
        for partition in sorted(led):
            if self.runtime.state_of(partition) is None:
                self.loader.schedule(partition)

    async def wait_loaded(self) -> None:
        await self.loader.wait_loaded()

    # ---- the topic
    def topic_exists(self) -> bool:
        return self.topic in self.controller.image.topics_by_name

    def num_partitions(self) -> int:
        topic = self.controller.image.topics_by_name.get(self.topic)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.config.num_partitions

    def partition_for(self, group_id: str, topic_id: bytes, partition: int) -> int:
        return partition_for(coordinator_key(group_id, topic_id, partition), self.num_partitions())

    def internal_topic_spec(self) -> tuple[str, int, int, dict[str, str]]:
        replication = internal_topic_replication(self.controller, self.config.replication_factor)
        return (self.topic, self.config.num_partitions, self.config.replication_factor,
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(self.config.segment_bytes),
                 "min.insync.replicas": str(max(1, min(self.config.min_isr, replication)))})

    def ensure_topic(self) -> int:
        """Create ``__share_group_state`` if it does not exist; NONE, or COORDINATOR_NOT_AVAILABLE."""
        return create_internal_topic(self.controller, *self.internal_topic_spec())

    def is_loading(self, group_id: str, topic_id: bytes, partition: int) -> bool:
        """Whether the state's partition is led here but not loaded yet (the state must be waited for)."""
        p = self.partition_for(group_id, topic_id, partition)
        state = self.runtime.state_of(p)
        if state is ShardState.LOADING:
            return True
        if state is None:  # led here (the image says so) but the log or the load has not started yet
            topic = self.controller.image.topics_by_name.get(self.topic)
            pi = topic.partitions.get(p) if topic is not None else None
            return pi is not None and pi.leader == self.node_id
        return False

    # ---- operations (raise KafkaError: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...)
    def read_state(self, group_id: str, topic_id: bytes, partition: int) -> cr.ShareSnapshotValue | None:
        k: StateKey = (group_id, topic_id, partition)
        return self.runtime.read(self.partition_for(*k), lambda shard: shard.read_state(k))

    def write_state(self, group_id: str, topic_id: bytes, partition: int, value: cr.ShareSnapshotValue) -> None:
        k: StateKey = (group_id, topic_id, partition)
        self.runtime.write(self.partition_for(*k), lambda shard: shard.write_state(k, value))

    def initialize_state(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int,
                         start_offset: int) -> int:
        k: StateKey = (group_id, topic_id, partition)
        code = self.runtime.write(self.partition_for(*k), lambda shard: shard.initialize_state(
            k, state_epoch, start_offset, self.scheduler.now_ms()))
        return ErrorCode.NONE if code is None else code

    def write_update(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int, leader_epoch: int,
                     start_offset: int, batches: list[tuple[int, int, int, int]]) -> int:
        """WriteShareGroupState (see ``ShareCoordinatorShard.write_update``); the error code."""
        k: StateKey = (group_id, topic_id, partition)
        code = self.runtime.write(self.partition_for(*k), lambda shard: shard.write_update(
            k, state_epoch, leader_epoch, start_offset, batches, self.scheduler.now_ms()))
        return ErrorCode.NONE if code is None else code

    async def replicated(self, group_id: str, topic_id: bytes, partition: int, timeout_ms: int = 5000) -> int:
        """After a write: until the in-sync replicas of the state's partition hold it (NONE, NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE)."""
        from kbroker.coordinator.group.service import _replicated

        return await _replicated(self.writer, self.partition_for(group_id, topic_id, partition), timeout_ms)

    def delete_state(self, group_id: str, topic_id: bytes, partition: int) -> None:
        k: StateKey = (group_id, topic_id, partition)
        self.runtime.write(self.partition_for(*k), lambda shard: shard.delete_state(k))

    def states_of_group(self, group_id: str) -> list[tuple[bytes, int, cr.ShareSnapshotValue]]:
        """``(topic id, partition, state)`` of every share partition of ``group_id`` in the partitions served here."""
        out = []
        for p in self.runtime.partitions():
            if self.runtime.state_of(p) is not ShardState.ACTIVE:
                continue
            states = self.runtime.read(p, lambda shard: dict(shard.states))
            out.extend((tid, part, v) for (g, tid, part), v in states.items() if g == group_id)
        return sorted(out, key=lambda x: (x[0], x[1]))

    def coordinator_state(self, group_id: str, topic_id: bytes, partition: int) -> int:
        try:
            self.runtime.active_context(self.partition_for(group_id, topic_id, partition))
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE
