"""``GroupCoordinator``: the broker-facing group coordinator service (asyncio side of the runtime).

* Owns a :class:`~kbroker.coordinator.runtime.CoordinatorRuntime` whose shards are
  :class:`~kbroker.coordinator.group.shard.GroupCoordinatorShard`, one per ``__consumer_offsets`` partition led
  by this node; the records go to the partition logs through :class:`ReplicaManagerWriter`.
* Creates ``__consumer_offsets`` on first use (:meth:`GroupCoordinator.ensure_offsets_topic`, called by
  FindCoordinator): ``offsets.topic.num.partitions`` partitions, ``cleanup.policy=compact``, replication factor
  ``offsets.topic.replication.factor`` capped at the number of live brokers (Kafka waits for enough brokers
  instead; a single node could then never serve groups).
* Follows the metadata image (a controller listener): partitions of the topic this node leads are loaded
  (replayed from the log start; a new, empty partition is ready at once, others load in a task that yields
  to the event loop between chunks), partitions it no longer leads are unloaded.
* Maps a group id to its partition with Kafka's function (``abs(hashCode) % partitions``, over the topic's
  actual partition count) and runs the shard operation; JoinGroup and SyncGroup await a future that the shard
  completes when the rebalance moves on. Timers run on the event loop (``loop.call_later``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from kbroker.coordinator.group.config import OFFSETS_TOPIC, GroupCoordinatorConfig
from kbroker.coordinator.group.records import GROUP_COORDINATOR_SERDE
from kbroker.coordinator.group.shard import (
    CommitPartition,
    FetchedOffset,
    GroupCoordinatorShard,
    OffsetCommitInput,
    RequestMeta,
)
from kbroker.coordinator.service_support import PartitionLoader, create_internal_topic
from kbroker.coordinator.runtime import (
    CoordinatorRuntime,
    CoordinatorTimer,
    CoordinatorWriteError,
    Scheduler,
    ShardState,
    partition_for,
)
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.storage.producer_state import AppendOrigin
from kbroker.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListGroupsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)


class AsyncioScheduler:
    """Wall clock and ``loop.call_later``."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(0, delay_ms) / 1000, callback)


class ReplicaManagerWriter:
    """:class:`~kbroker.coordinator.runtime.PartitionWriter` over the broker's replica manager (duck-typed:
    ``get_partition``, ``get_leader_partition``, ``append_records``)."""

    def __init__(self, replica_manager: Any, topic: str) -> None:
        self.replica_manager = replica_manager
        self.topic = topic

    def append(self, partition: int, records: bytes) -> int:
        rm = self.replica_manager
        part = rm.get_leader_partition(self.topic, partition)
        try:
            info = rm.append_records(part, memoryview(records), -1, AppendOrigin.COORDINATOR)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        return info.first_offset

    async def wait_replicated(self, partition: int, timeout_s: float) -> int:
        """Until every in-sync replica holds what this node appended to ``partition`` so far (its high watermark
        reaches the log end offset seen now), so that an answer never acknowledges coordinator state a leader
        change could lose (Kafka's coordinators append with acks=all). Returns NONE, NOT_COORDINATOR when the
        leadership moved, or REQUEST_TIMED_OUT (``offsets.commit.timeout.ms``)."""
        rm = self.replica_manager
        try:
            part = rm.get_leader_partition(self.topic, partition)
        except KafkaError:
            return ErrorCode.NOT_COORDINATOR
        code = await rm.wait_replicated(part, timeout_s)
        return ErrorCode.NOT_COORDINATOR if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else code

    def read(self, partition: int, offset: int, max_bytes: int) -> bytes:
        plog = self.replica_manager.get_partition(self.topic, partition).log
        return plog.read(offset, max_bytes, None, True).read_bytes()

    def log_start_offset(self, partition: int) -> int:
        return self.replica_manager.get_partition(self.topic, partition).log.log_start_offset

    def log_end_offset(self, partition: int) -> int:
        return self.replica_manager.get_partition(self.topic, partition).log.log_end_offset


async def _replicated(writer: Any, partition: int, timeout_ms: int) -> int:
    wait = getattr(writer, "wait_replicated", None)
    if wait is None:
        return ErrorCode.NONE
    code = await wait(partition, timeout_ms / 1000)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if code == ErrorCode.REQUEST_TIMED_OUT else code


def _join_error(code: int, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                             member_id=member_id, members=[])


#: OffsetCommit reports these append errors as INVALID_COMMIT_OFFSET_SIZE (the commit is too big to store).
_COMMIT_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE)


class GroupCoordinator:
    """See the module docstring. ``controller`` needs ``image``, ``create_topics`` and ``add_listener``."""

    def __init__(self, config: GroupCoordinatorConfig, node_id: int, controller: Any, replica_manager: Any,
                 scheduler: Scheduler | None = None, topic: str = OFFSETS_TOPIC) -> None:
        self.config = config
        self.node_id = node_id
        self.controller = controller
        self.topic = topic
        self.scheduler: Scheduler = scheduler or AsyncioScheduler()
        self.writer = ReplicaManagerWriter(replica_manager, topic)
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            self.writer, self.scheduler, self._build_shard, GROUP_COORDINATOR_SERDE,
            name="group-coordinator")
        self.loader = PartitionLoader(self.runtime, self.writer)
        self._started = False
        #: ``hook(group id, member id)``: a share group member left or was fenced here (the broker does not
        #: release its records then: its share sessions end on their own)
        self.share_member_removed_hook: Callable[[str, str], None] | None = None
        #: ``hook(group id, initialized partitions)``: a share group was deleted here (the broker deletes its share
        #: state)
        self.share_group_deleted_hook: Callable[[str, dict[bytes, frozenset[int]]], None] | None = None
        #: ``await initializer(group id, {topic id: partitions})`` -> the partitions whose share state exists now:
        #: the broker's InitializeShareGroupState to the share coordinators (None: share state is not initialized
        #: by the group coordinator)
        self.share_state_initializer: Callable[[str, dict[bytes, frozenset[int]]], Any] | None = None
        self._share_init_tasks: set[asyncio.Task[None]] = set()

    #: how long a write waits for the in-sync replicas before the answer is COORDINATOR_NOT_AVAILABLE
    commit_timeout_ms = 5000

    @classmethod
    def for_broker(cls, broker: Any) -> GroupCoordinator:
        gc = cls(GroupCoordinatorConfig.from_broker_config(broker.config), broker.node_id, broker.controller,
                 broker.replica_manager)
        gc.commit_timeout_ms = broker.config.get_int("offsets.commit.timeout.ms")
        return gc

    def _build_shard(self, partition: int, timer: CoordinatorTimer) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(partition, self.config, timer, self.scheduler.now_ms,
                                      image_provider=lambda: self.controller.image)
        shard.on_share_member_removed = self._share_member_removed
        shard.on_share_group_deleted = self._share_group_deleted
        shard.share_state_gated = self.share_state_initializer is not None
        return shard

    def _share_group_deleted(self, group_id: str, partitions: dict[bytes, frozenset[int]]) -> None:
        if self.share_group_deleted_hook is not None:
            self.share_group_deleted_hook(group_id, partitions)

    def _share_member_removed(self, group_id: str, member_id: str) -> None:
        if self.share_member_removed_hook is not None:
            self.share_member_removed_hook(group_id, member_id)

    # ---- life cycle
    def startup(self) -> None:
        """Load the partitions of ``__consumer_offsets`` this node leads; follow metadata changes."""
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
        self.runtime.close()

    def _on_metadata_update(self, old: Any, new: Any, *rest: Any) -> None:
        if self._started:
            self._sync_with_image(new)
            self._notify_topic_changes(old, new, rest[0] if rest else None)

    def _notify_topic_changes(self, old: Any, new: Any, changes: Any) -> None:
        """Consumer groups recompute their topic metadata when topics they use were created, deleted or
        changed partitions."""
        if changes is None:
            return
        names: set[str] = set()
        for tid in getattr(changes, "created_topics", ()):
            t = new.topics_by_id.get(tid)
            if t is not None:
                names.add(t.name)
        created_or_deleted = bool(names) or bool(getattr(changes, "deleted_topics", None))
        names.update(t.name for t in getattr(changes, "deleted_topics", {}).values())
        for tid, _ in getattr(changes, "changed_partitions", ()):
            t = new.topics_by_id.get(tid) or old.topics_by_id.get(tid)
            if t is not None and (old.topics_by_id.get(tid) is None
                                  or len(old.topics_by_id[tid].partitions) != len(t.partitions)):
                names.add(t.name)
        if not names:
            return
        for partition in self.runtime.partitions():
            if self.runtime.state_of(partition) is ShardState.ACTIVE:
                self.runtime.shard(partition).on_topics_changed(names, created_or_deleted)

    def _sync_with_image(self, image: Any) -> None:
        topic = image.topics_by_name.get(self.topic)
        led = set()
        if topic is not None:
            led = {p.partition_id for p in topic.partitions.values() if p.leader == self.node_id}
        for partition in self.runtime.partitions():
            if partition not in led:
                log.info("group coordinator: no longer leading %s-%d; unloading", self.topic, partition)
                self.loader.cancel(partition)
                self.runtime.unload(partition)
        for partition in sorted(led):
            if self.runtime.state_of(partition) is None:
                self.loader.schedule(partition)

    async def wait_loaded(self) -> None:
        """Wait until no partition is loading (tests, start-up)."""
        await self.loader.wait_loaded()

    # ---- the offsets topic
    def num_partitions(self) -> int:
        topic = self.controller.image.topics_by_name.get(self.topic)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def internal_topic_spec(self) -> tuple[str, int, int, dict[str, str]]:
        """``(name, partitions, configured replication factor, configs)`` of the topic this coordinator keeps its
        state in, as it is created on first use."""
        return (self.topic, self.config.offsets_topic_num_partitions,
                self.config.offsets_topic_replication_factor,
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(self.config.offsets_topic_segment_bytes)})

    def ensure_offsets_topic(self) -> int:
        """Create ``__consumer_offsets`` if it does not exist; NONE, or COORDINATOR_NOT_AVAILABLE."""
        return create_internal_topic(self.controller, *self.internal_topic_spec())

    def coordinator_state(self, group_id: str) -> int:
        """NONE when this node serves ``group_id`` now, else NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        try:
            self.runtime.active_context(self.partition_for(group_id))
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE

    # ---- classic group protocol
    async def join_group(self, meta: RequestMeta, request: JoinGroupRequest) -> JoinGroupResponse:
        fut: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()

        def respond(response: JoinGroupResponse) -> None:
            if not fut.done():
                fut.set_result(response)

        try:
            self.runtime.write(self.partition_for(request.group_id),
                               lambda shard: shard.join_group(meta, request, respond))
        except KafkaError as exc:
            respond(_join_error(exc.code, request.member_id))
        return await fut

    async def sync_group(self, meta: RequestMeta, request: SyncGroupRequest) -> SyncGroupResponse:
        fut: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()

        def respond(response: SyncGroupResponse) -> None:
            if not fut.done():
                fut.set_result(response)

        try:
            self.runtime.write(self.partition_for(request.group_id),
                               lambda shard: shard.sync_group(meta, request, respond))
        except KafkaError as exc:
            respond(SyncGroupResponse(error_code=exc.code, assignment=b""))
        return await fut

    def heartbeat(self, meta: RequestMeta, group_id: str, generation_id: int, member_id: str,
                  instance_id: str | None) -> int:
        """A heartbeat while the group's partition loads is answered NONE, as Kafka does: the member keeps
        its place and learns about anything else once the group is loaded."""
        try:
            return self.runtime.write(self.partition_for(group_id),
                                      lambda shard: shard.heartbeat(meta, group_id, generation_id, member_id,
                                                                    instance_id))
        except KafkaError as exc:
            return ErrorCode.NONE if exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else exc.code

    def leave_group(self, meta: RequestMeta, group_id: str,
                    members: list[tuple[str, str | None, str | None]]) -> tuple[int, list[int]]:
        try:
            result = self.runtime.write(self.partition_for(group_id),
                                        lambda shard: shard.leave_group(meta, group_id, members))
        except KafkaError as exc:
            return exc.code, []
        assert result is not None
        return result

    # ---- consumer groups (KIP-848)
    def consumer_group_heartbeat(self, meta: RequestMeta,
                                 request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        try:
            response = self.runtime.write(self.partition_for(request.group_id),
                                          lambda shard: shard.consumer_group_heartbeat(meta, request))
        except KafkaError as exc:
            return ConsumerGroupHeartbeatResponse(error_code=exc.code, error_message=exc.message)
        assert response is not None
        return response

    async def consumer_group_describe(
            self, group_ids: list[str],
            include_authorized_operations: bool) -> list[ConsumerGroupDescribeResponse.DescribedGroup]:
        """One description per group id, answered once what was read is replicated (:meth:`settled`)."""
        from kbroker.coordinator.group.shard import GROUP_AUTHORIZED_OPERATIONS

        out = []
        read: list[tuple[int, int]] = []  # (index in out, partition) of the groups read
        for group_id in group_ids:
            if not group_id:
                out.append(ConsumerGroupDescribeResponse.DescribedGroup(
                    error_code=ErrorCode.INVALID_GROUP_ID, error_message="Group id can't be empty.",
                    group_id=group_id))
                continue
            partition = self.partition_for(group_id)
            try:
                out.append(self.runtime.read(partition, lambda shard: shard.consumer_group_describe(
                    group_id, include_authorized_operations, GROUP_AUTHORIZED_OPERATIONS)))
                read.append((len(out) - 1, partition))
            except KafkaError as exc:
                out.append(ConsumerGroupDescribeResponse.DescribedGroup(error_code=exc.code, group_id=group_id))
        await self._settle_each(out, read, lambda code, group_id: ConsumerGroupDescribeResponse.DescribedGroup(
            error_code=code, group_id=group_id))
        return out

    # ---- streams groups (KIP-1071)
    def streams_group_heartbeat(self, meta: RequestMeta, request: Any) -> tuple[Any, dict[str, Any]]:
        """(StreamsGroupHeartbeatResponse, internal topics to create: name -> (partitions, replication factor,
        configs)); the coordinator errors are answered in the response."""
        from kbroker.protocol.messages import StreamsGroupHeartbeatResponse

        try:
            result = self.runtime.write(self.partition_for(request.group_id),
                                        lambda shard: shard.streams_group_heartbeat(meta, request))
        except KafkaError as exc:
            return StreamsGroupHeartbeatResponse(error_code=exc.code, error_message=exc.message), {}
        assert result is not None
        return result

    async def streams_group_describe(self, group_ids: list[str], include_authorized_operations: bool) -> list[Any]:
        """One description per group id, answered once what was read is replicated (:meth:`settled`)."""
        from kbroker.coordinator.group.shard import GROUP_AUTHORIZED_OPERATIONS
        from kbroker.protocol.messages import StreamsGroupDescribeResponse

        Described = StreamsGroupDescribeResponse.DescribedGroup
        out: list[Any] = []
        read: list[tuple[int, int]] = []
        for group_id in group_ids:
            if not group_id:
                out.append(Described(error_code=ErrorCode.INVALID_GROUP_ID, error_message="Group id can't be empty.",
                                     group_id=group_id))
                continue
            partition = self.partition_for(group_id)
            try:
                out.append(self.runtime.read(partition, lambda shard: shard.streams_group_describe(
                    group_id, include_authorized_operations, GROUP_AUTHORIZED_OPERATIONS)))
                read.append((len(out) - 1, partition))
            except KafkaError as exc:
                out.append(Described(error_code=exc.code, group_id=group_id))
        await self._settle_each(out, read, lambda code, group_id: Described(error_code=code, group_id=group_id))
        return out

    # ---- share groups (KIP-932)
    def share_group_heartbeat(self, meta: RequestMeta,
                              request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
        try:
            response = self.runtime.write(self.partition_for(request.group_id),
                                          lambda shard: shard.share_group_heartbeat(meta, request))
        except KafkaError as exc:
            return ShareGroupHeartbeatResponse(error_code=exc.code, error_message=exc.message)
        assert response is not None
        if response.error_code == ErrorCode.NONE and request.member_epoch != -1:
            self._maybe_initialize_share_state(request.group_id)
        return response

    # ---- share state of share groups (ShareGroupStatePartitionMetadata, record 15)
    def _maybe_initialize_share_state(self, group_id: str) -> None:
        """After a heartbeat: the subscribed partitions without share state are recorded as initializing and their
        state is initialized in the background (Kafka's group coordinator does the same after a heartbeat)."""
        if self.share_state_initializer is None:
            return
        try:
            pending = self.runtime.write(self.partition_for(group_id),
                                         lambda shard: shard.share_group_initialize_pending(group_id))
        except KafkaError:
            return
        if pending:
            task = asyncio.get_running_loop().create_task(self._initialize_share_state(group_id, pending))
            self._share_init_tasks.add(task)
            task.add_done_callback(self._share_init_tasks.discard)

    async def _initialize_share_state(self, group_id: str, partitions: dict[bytes, frozenset[int]]) -> None:
        assert self.share_state_initializer is not None
        try:
            done = await self.share_state_initializer(group_id, partitions)
        except Exception as exc:  # noqa: BLE001 - asked again by the group's next heartbeat
            log.info("share group %s: initializing share state failed: %s", group_id, exc)
            done = {}
        if done:
            self.share_group_state_initialized(group_id, done)
        failed = {tid: ps - done.get(tid, frozenset()) for tid, ps in partitions.items()}
        failed = {tid: ps for tid, ps in failed.items() if ps}
        if failed:  # no longer initializing: the next heartbeat asks for them again (as Kafka uninitializes them)
            try:
                self.runtime.write(self.partition_for(group_id),
                                   lambda shard: shard.share_group_initialize_failed(group_id, failed))
            except KafkaError as exc:
                log.info("share group %s: recording a failed share-state initialization failed: %s", group_id,
                         exc.code)

    def share_group_state_initialized(self, group_id: str, partitions: dict[bytes, frozenset[int]]) -> None:
        """Record ``partitions`` of share group ``group_id`` as having share state (record 15)."""
        try:
            self.runtime.write(self.partition_for(group_id),
                               lambda shard: shard.share_group_state_initialized(group_id, partitions))
        except KafkaError as exc:
            log.info("share group %s: recording initialized share state failed: %s", group_id, exc.code)

    def share_group_state_deleted(self, group_id: str, topic_ids: list[bytes]) -> None:
        """The share state of these topics was deleted (DeleteShareGroupOffsets): they leave record 15."""
        try:
            self.runtime.write(self.partition_for(group_id),
                               lambda shard: shard.share_group_state_deleted(group_id, topic_ids))
        except KafkaError as exc:
            log.info("share group %s: recording deleted share state failed: %s", group_id, exc.code)

    def share_group_initialized_partitions(self, group_id: str) -> dict[bytes, frozenset[int]]:
        """The partitions of share group ``group_id`` with initialized share state (record 15). Raises
        KafkaError (the coordinator errors)."""
        result = self.runtime.read(self.partition_for(group_id),
                                   lambda shard: shard.share_group_initialized_partitions(group_id))
        return result or {}

    def share_group_describe(self, group_ids: list[str],
                             include_authorized_operations: bool) -> list[ShareGroupDescribeResponse.DescribedGroup]:
        """One description per group id (share group membership is in memory: nothing to wait for)."""
        from kbroker.coordinator.group.shard import GROUP_AUTHORIZED_OPERATIONS

        out = []
        for group_id in group_ids:
            if not group_id:
                out.append(ShareGroupDescribeResponse.DescribedGroup(
                    error_code=ErrorCode.INVALID_GROUP_ID, error_message="Group id can't be empty.",
                    group_id=group_id))
                continue
            try:
                out.append(self.runtime.read(self.partition_for(group_id), lambda shard: shard.share_group_describe(
                    group_id, include_authorized_operations, GROUP_AUTHORIZED_OPERATIONS)))
            except KafkaError as exc:
                out.append(ShareGroupDescribeResponse.DescribedGroup(error_code=exc.code, group_id=group_id))
        return out

    def share_group_admin_check(self, group_id: str, need_empty: bool) -> tuple[int, str | None]:
        """(error, message) for the share-group offset APIs (see ``ShareGroupOps.share_group_admin_check``),
        or the coordinator error."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, None
        try:
            result = self.runtime.read(self.partition_for(group_id),
                                       lambda shard: shard.share_group_admin_check(group_id, need_empty))
        except KafkaError as exc:
            return exc.code, exc.message
        assert result is not None
        return result

    def share_group_create_for_offsets(self, group_id: str) -> tuple[int, str | None]:
        """AlterShareGroupOffsets' check: an unknown group id becomes an empty share group (as Kafka); (error,
        message) as :meth:`share_group_admin_check` with ``need_empty``."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, None
        try:
            result = self.runtime.write(self.partition_for(group_id),
                                        lambda shard: shard.share_group_create_for_offsets(group_id))
        except KafkaError as exc:
            return exc.code, exc.message
        assert result is not None
        return result

    def validate_offset_fetch_member(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+: the member id / epoch of a consumer group member (NONE for other groups)."""
        try:
            return self.runtime.read(self.partition_for(group_id),
                                     lambda shard: shard.validate_offset_fetch_member(group_id, member_id,
                                                                                      member_epoch))
        except KafkaError as exc:
            return exc.code

    # ---- offsets
    def commit_offsets(self, meta: RequestMeta, commit: OffsetCommitInput) -> list[CommitPartition]:
        try:
            result = self.runtime.write(self.partition_for(commit.group_id),
                                        lambda shard: shard.commit_offsets(meta, commit))
        except CoordinatorWriteError as exc:
            code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE if exc.append_error in _COMMIT_TOO_LARGE else exc.code
            for p in commit.partitions:
                if not p.error_code:
                    p.error_code = code
            return commit.partitions
        except KafkaError as exc:
            for p in commit.partitions:
                if not p.error_code:
                    p.error_code = exc.code
            return commit.partitions
        assert result is not None
        return result

    async def replicated(self, group_id: str) -> int:
        """After a write for ``group_id``: wait until the in-sync replicas of its ``__consumer_offsets`` partition
        hold it (see :meth:`ReplicaManagerWriter.wait_replicated`); the error to answer with (NONE,
        NOT_COORDINATOR, or COORDINATOR_NOT_AVAILABLE after ``offsets.commit.timeout.ms``, as Kafka maps a
        replication timeout)."""
        return await _replicated(self.writer, self.partition_for(group_id), self.commit_timeout_ms)

    async def settled(self, partition: int) -> int:
        """After a read of ``partition``'s shard: wait until the in-sync replicas hold every record written to it
        so far, so that the answer shows no state a leader change could still lose (Kafka's coordinators read
        the state as of the last committed offset; answering once the writes the read saw are committed
        gives clients the same view). No wait when nothing is pending. The error to answer with instead:
        NONE, NOT_COORDINATOR when the leadership moved, COORDINATOR_NOT_AVAILABLE after
        ``offsets.commit.timeout.ms``."""
        return await _replicated(self.writer, partition, self.commit_timeout_ms)

    async def _settle_each(self, out: list[Any], read: list[tuple[int, int]],
                           failed: Callable[[int, str], Any]) -> None:
        """:meth:`settled` for every partition in ``read`` (``(index in out, partition)`` of the groups read); a
        group whose partition's wait fails is replaced in ``out`` by ``failed(error code, group id)``."""
        codes = {p: await self.settled(p) for p in dict.fromkeys(p for _, p in read)}
        for i, partition in read:
            if codes[partition]:
                out[i] = failed(codes[partition], out[i].group_id)

    async def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                            require_stable: bool = False) -> tuple[int, list[FetchedOffset]]:
        """(group error, offsets), answered once they are replicated (:meth:`settled`). With
        ``require_stable`` a partition whose offset is pending in an open transaction gets
        UNSTABLE_OFFSET_COMMIT."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []

        def fetch(shard: GroupCoordinatorShard) -> list[FetchedOffset]:
            offsets = shard.fetch_offsets(group_id, topics)
            return shard.mark_unstable_offsets(group_id, offsets) if require_stable else offsets

        partition = self.partition_for(group_id)
        try:
            offsets = self.runtime.read(partition, fetch)
        except KafkaError as exc:
            return exc.code, []
        code = await self.settled(partition)
        if code:
            return code, []
        return ErrorCode.NONE, offsets

    # ---- transactions
    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                          member_id: str, group_instance_id: str | None,
                          partitions: list[CommitPartition]) -> list[CommitPartition]:
        """TxnOffsetCommit: the offsets are written as a transactional batch and stay pending until the
        transaction's marker reaches this partition (:meth:`complete_transaction`)."""
        try:
            result = self.runtime.write(self.partition_for(group_id), lambda shard: shard.txn_offset_commit(
                group_id, producer_id, producer_epoch, generation_id, member_id, group_instance_id, partitions))
        except CoordinatorWriteError as exc:
            code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE if exc.append_error in _COMMIT_TOO_LARGE else exc.code
            for p in partitions:
                if not p.error_code:
                    p.error_code = code
            return partitions
        except KafkaError as exc:
            for p in partitions:
                if not p.error_code:
                    p.error_code = exc.code
            return partitions
        assert result is not None
        return result

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                             committed: bool) -> int:
        """Write a transaction marker to ``__consumer_offsets-<partition>`` (WriteTxnMarkers): pending
        offsets of the producer are committed or dropped. Returns the error code."""
        try:
            self.runtime.write_marker(partition, producer_id, producer_epoch, coordinator_epoch, committed)
        except CoordinatorWriteError as exc:
            return exc.append_error
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE

    def delete_offsets(self, group_id: str,
                       topics: list[tuple[str, list[int]]]) -> tuple[int, dict[tuple[str, int], int]]:
        try:
            result = self.runtime.write(self.partition_for(group_id),
                                        lambda shard: shard.delete_offsets(group_id, topics))
        except KafkaError as exc:
            return exc.code, {}
        assert result is not None
        return result

    # ---- admin
    async def list_groups(self, states: set[str] | None,
                          types: set[str] | None) -> tuple[int, list[ListGroupsResponse.ListedGroup]]:
        """(error, groups) of every loaded shard, answered once what was read is replicated (:meth:`settled`);
        the groups of a shard whose wait fails are left out and its error is returned."""
        by_partition: dict[int, list[ListGroupsResponse.ListedGroup]] = {}
        error = ErrorCode.NONE
        for partition in self.runtime.partitions():
            state = self.runtime.state_of(partition)
            if state is ShardState.LOADING:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            if state is not ShardState.ACTIVE:
                continue
            by_partition[partition] = self.runtime.read(partition, lambda shard: shard.list_groups(states, types))
        groups: list[ListGroupsResponse.ListedGroup] = []
        for partition, listed in by_partition.items():
            code = await self.settled(partition)  # an empty shard too: a deletion may be pending
            if code:
                error = code
            else:
                groups.extend(listed)
        return error, groups

    async def describe_groups(self, group_ids: list[str], api_version: int,
                              include_authorized_operations: bool) -> list[DescribeGroupsResponse.DescribedGroup]:
        """One description per group id, answered once what was read is replicated (:meth:`settled`)."""
        out = []
        read: list[tuple[int, int]] = []  # (index in out, partition) of the groups read
        for group_id in group_ids:
            partition = self.partition_for(group_id)
            try:
                out.append(self.runtime.read(
                    partition,
                    lambda shard: shard.describe_group(group_id, api_version, include_authorized_operations)))
                read.append((len(out) - 1, partition))
            except KafkaError as exc:
                out.append(DescribeGroupsResponse.DescribedGroup(
                    error_code=exc.code, group_id=group_id,
                    authorized_operations=-2147483648))
        await self._settle_each(out, read, lambda code, group_id: DescribeGroupsResponse.DescribedGroup(
            error_code=code, group_id=group_id, authorized_operations=-2147483648))
        return out

    def delete_groups(self, group_ids: list[str]) -> list[DeleteGroupsResponse.DeletableGroupResult]:
        by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(group_ids):
            by_partition.setdefault(self.partition_for(group_id), []).append(group_id)
        results: dict[str, DeleteGroupsResponse.DeletableGroupResult] = {}
        for partition, ids in by_partition.items():
            try:
                res = self.runtime.write(partition, lambda shard: shard.delete_groups(ids))
                assert res is not None
                for r in res:
                    results[r.group_id] = r
            except KafkaError as exc:
                for group_id in ids:
                    results[group_id] = DeleteGroupsResponse.DeletableGroupResult(
                        group_id=group_id, error_code=exc.code, error_message=exc.message)
        return [results[g] for g in dict.fromkeys(group_ids)]
