"""Where share partitions keep their state: the share coordinator (``__share_group_state``, KIP-932).

:class:`SharePersister` is the persister of :class:`~kbroker.server.share.manager.SharePartitionManager`. For
each share partition the state lives in the ``__share_group_state`` partition of its key
(``group:topicId:partition``); when this node leads that partition the share coordinator is called in-process,
otherwise its leader gets ReadShareGroupState / WriteShareGroupState over the inter-broker listener (Kafka's
``DefaultStatePersister`` does the same with FindCoordinator key type 2).

* ``load(group, topic id, partition)`` -> ``(SPSO, [(first, last, state, delivery count)])`` or None (no state
  yet: the share partition starts from ``share.auto.offset.reset``). Raises KafkaError
  COORDINATOR_LOAD_IN_PROGRESS while the state is not known yet: its partition is being replayed here, has no
  leader, or a remote read is under way (the share partition waits and its fetches ask again). The topic is
  created on first use.
* ``save(...)`` writes the state: in-process at once, or queued for the remote coordinator (one request in
  flight per share partition, the newest state only; retried every 200 ms while the coordinator is
  unavailable). Writes carry the partition's leader epoch: a stale leader is fenced (FENCED_LEADER_EPOCH).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

Key = tuple[str, bytes, int]
Batches = list[tuple[int, int, int, int]]
#: how long a remote state request may take, s
REQUEST_TIMEOUT_S = 5.0


@dataclass
class StateSummary:
    """What DescribeShareGroupOffsets shows of a share partition's state (ReadShareGroupStateSummary's fields):
    ``delivery_complete`` is the count of records at or after the start offset acknowledged or archived."""

    start_offset: int
    leader_epoch: int
    state_epoch: int
    delivery_complete: int

RETRY_S = 0.2
_RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
              ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT}


class SharePersister:
    """See the module docstring. ``broker`` gives ``node_id``, ``controller.image`` and
    ``inter_broker_channels``; ``share_coordinator`` is this node's
    :class:`~kbroker.coordinator.share.service.ShareCoordinator`."""

    def __init__(self, share_coordinator: Any, broker: Any = None) -> None:
        self.coordinator = share_coordinator
        self.broker = broker
        self._channels: Any = None
        self._reads: dict[Key, asyncio.Task[None]] = {}
        self._read_results: dict[Key, tuple[int, Batches] | None] = {}
        self._pending: dict[Key, tuple[int, Batches, int]] = {}
        self._writers: dict[Key, asyncio.Task[None]] = {}
        self._warned: set[int] = set()
        #: the state epoch of each state as last read (writes carry it: a state reset since then fences them)
        self._state_epochs: dict[Key, int] = {}
        #: ``on_fenced(key)``: a write was fenced (FENCED_STATE_EPOCH: the state was reset, AlterShareGroupOffsets),
        #: so the share partition must read its state again (set by the share partition manager)
        self.on_fenced: Any = None

    # ---- where the state lives
    def _state_leader(self, key: Key) -> int:
        """The node leading the state's ``__share_group_state`` partition (-1: none)."""
        sc = self.coordinator
        topic = sc.controller.image.topics_by_name.get(sc.topic)
        p = topic.partitions.get(sc.partition_for(*key)) if topic is not None else None
        return p.leader if p is not None else -1

    def _remote(self, key: Key) -> int | None:
        """The remote node to ask, or None to use the local coordinator."""
        if self.broker is None:
            return None
        leader = self._state_leader(key)
        return None if leader == self.coordinator.node_id else leader

    def _channel(self, node: int) -> Any:
        if self._channels is None:
            self._channels = self.broker.inter_broker_channels(f"kbroker-{self.broker.node_id}-share-persister")
        return self._channels.get(self.broker.controller.image, node)

    def ensure_topic(self) -> None:
        """Create ``__share_group_state``: through the controller here, or (a cluster node that is not the active
        controller) with a CreateTopics forwarded to it, as FindCoordinator does."""
        sc = self.coordinator
        quorum = getattr(self.broker, "metadata_quorum", None)
        if quorum is not None and not sc.controller.is_active:
            from kbroker.coordinator.service_support import internal_topic_replication

            name, partitions, replication, configs = sc.internal_topic_spec()
            quorum.create_topic_soon(name, partitions, internal_topic_replication(sc.controller, replication),
                                     configs)
        else:
            sc.ensure_topic()

    # ---- load
    def load(self, group_id: str, topic_id: bytes, partition: int) -> tuple[int, Batches] | None:
        sc = self.coordinator
        key = (group_id, topic_id, partition)
        if not sc.topic_exists():
            self.ensure_topic()
            return None
        remote = self._remote(key)
        if remote is None:
            return self._load_local(key)
        if key in self._read_results:
            return self._read_results.pop(key)
        if remote >= 0 and key not in self._reads:
            self._reads[key] = asyncio.get_running_loop().create_task(self._remote_read(key, remote))
        raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def _load_local(self, key: Key) -> tuple[int, Batches] | None:
        sc = self.coordinator
        if sc.is_loading(*key):
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        try:
            value = sc.read_state(*key)
        except KafkaError as exc:  # led here by the image, not loaded yet: wait for it
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, exc.message) from None
        if value is None:
            self._state_epochs.pop(key, None)
            return None
        self._state_epochs[key] = value.state_epoch
        return value.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                    for b in value.state_batches]

    async def _remote_read(self, key: Key, node: int) -> None:
        from kbroker.protocol.messages import ReadShareGroupStateRequest as Req

        group_id, topic_id, partition = key
        try:
            ch = self._channel(node)
            if ch is None:
                return
            resp = await ch.request(ApiKey.READ_SHARE_GROUP_STATE, 0, Req(group_id=group_id, topics=[
                Req.ReadStateData(topic_id=topic_id, partitions=[Req.PartitionData(partition=partition)])]),
                REQUEST_TIMEOUT_S)
            pr = resp.results[0].partitions[0]
            if pr.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._read_results[key] = None
            elif pr.error_code == ErrorCode.NONE:
                self._state_epochs[key] = pr.state_epoch
                self._read_results[key] = (pr.start_offset, [
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in pr.state_batches])
            else:
                log.info("reading share state %s from node %d: %s", key, node, ErrorCode(pr.error_code).name)
                await asyncio.sleep(RETRY_S)
        except Exception as exc:  # noqa: BLE001 - NodeRequestError, a malformed answer: asked again later
            log.info("reading share state %s from node %d failed: %s", key, node, exc)
            await asyncio.sleep(RETRY_S)
        finally:
            self._reads.pop(key, None)

    # ---- save
    def save(self, group_id: str, topic_id: bytes, partition: int, start_offset: int, batches: Batches,
             leader_epoch: int = 0) -> None:
        key = (group_id, topic_id, partition)
        if key not in self._writers and self._remote(key) is None:
            code = self._write_local(key, start_offset, batches, leader_epoch)
            if code not in _RETRIABLE:
                if code:
                    self._failed(key, code)
                return
        self._pending[key] = (start_offset, batches, leader_epoch)  # after the writes before it, newest only
        if key not in self._writers:
            self._writers[key] = asyncio.get_running_loop().create_task(self._drain(key))

    def _write_local(self, key: Key, start_offset: int, batches: Batches, leader_epoch: int) -> int:
        try:
            return self.coordinator.write_update(*key, self._state_epochs.get(key, 0), leader_epoch, start_offset,
                                                 batches)
        except KafkaError as exc:
            return exc.code

    async def _write_remote(self, key: Key, node: int, start: int, batches: Batches, leader_epoch: int) -> int:
        from kbroker.protocol.messages import WriteShareGroupStateRequest as Req

        group_id, topic_id, partition = key
        ch = self._channel(node) if node >= 0 else None
        if ch is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            resp = await ch.request(ApiKey.WRITE_SHARE_GROUP_STATE, 0, Req(group_id=group_id, topics=[
                Req.WriteStateData(topic_id=topic_id, partitions=[Req.PartitionData(
                    partition=partition, state_epoch=self._state_epochs.get(key, 0), leader_epoch=leader_epoch,
                    start_offset=start,
                    state_batches=[Req.StateBatch(first_offset=f, last_offset=la, delivery_state=st,
                                                  delivery_count=c) for f, la, st, c in batches])])]),
                REQUEST_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - NodeRequestError: the coordinator may have moved
            log.info("writing share state %s to node %d failed: %s", key, node, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return resp.results[0].partitions[0].error_code

    async def _drain(self, key: Key) -> None:
        """Write the newest pending state of ``key`` until none is left; retriable errors (the coordinator moving
        or loading) are retried every :data:`RETRY_S`."""
        try:
            while key in self._pending:
                start, batches, leader_epoch = self._pending.pop(key)
                node = self._remote(key)
                if node is None:
                    code = self._write_local(key, start, batches, leader_epoch)
                else:
                    code = await self._write_remote(key, node, start, batches, leader_epoch)
                if code in _RETRIABLE:
                    self._pending.setdefault(key, (start, batches, leader_epoch))  # unless a newer one waits
                    await asyncio.sleep(RETRY_S)
                elif code:
                    self._failed(key, code)
        finally:
            self._writers.pop(key, None)

    def _failed(self, key: Key, code: int) -> None:
        if code == ErrorCode.FENCED_STATE_EPOCH and self.on_fenced is not None:
            log.info("share state %s was reset: the share partition reads it again", key)
            self._pending.pop(key, None)
            self.on_fenced(key)
        else:
            self._warn(self.coordinator.partition_for(*key), code)

    # ---- delete
    def delete_group(self, group_id: str) -> None:
        """Delete every persisted share-partition state of ``group_id`` kept here (DeleteGroups)."""
        sc = self.coordinator
        if not sc.topic_exists():
            return
        for topic_id, partition, _ in sc.states_of_group(group_id):
            try:
                sc.delete_state(group_id, topic_id, partition)
            except KafkaError as exc:
                self._warn(sc.partition_for(group_id, topic_id, partition), exc.code)

    # ---- the admin APIs (Describe/Alter/DeleteShareGroupOffsets): the state wherever it is kept
    async def _ask(self, node: int, api_key: int, version: int, request: Any) -> Any:
        ch = self._channel(node) if node >= 0 else None
        if ch is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no channel to node {node}")
        try:
            return await ch.request(api_key, version, request, REQUEST_TIMEOUT_S)
        except KafkaError:
            raise
        except Exception as exc:  # NodeRequestError: the node went away or did not answer in time
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc

    async def latest_offset(self, topic: str, partition: int, leader: int) -> int:
        """The high watermark of ``topic``-``partition`` as its leader, another node, answers ListOffsets (v5,
        LATEST, read_uncommitted): DescribeShareGroupOffsets' lag when the group coordinator does not lead the
        partition. Raises KafkaError (the partition's error, or COORDINATOR_NOT_AVAILABLE: no answer)."""
        from kbroker.protocol.messages import ListOffsetsRequest as Req

        resp = await self._ask(leader, ApiKey.LIST_OFFSETS, 5, Req(replica_id=-1, isolation_level=0, topics=[
            Req.ListOffsetsTopic(name=topic, partitions=[Req.ListOffsetsPartition(partition_index=partition,
                                                                                   timestamp=-1)])]))
        pr = resp.topics[0].partitions[0]
        if pr.error_code:
            raise KafkaError(ErrorCode(pr.error_code), f"ListOffsets {topic}-{partition} on node {leader}")
        return pr.offset

    async def summary(self, group_id: str, topic_id: bytes, partition: int) -> StateSummary | None:
        """The state of one share partition for DescribeShareGroupOffsets: from this node's share coordinator, or
        with ReadShareGroupStateSummary (v1) from the node leading its ``__share_group_state`` partition. None:
        no state. Raises KafkaError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE)."""
        from kbroker.protocol.messages import ReadShareGroupStateSummaryRequest as Req

        key = (group_id, topic_id, partition)
        node = self._remote(key)
        if node is None:
            value = self.coordinator.read_state(*key)
            if value is None:
                return None
            done = sum(b.last_offset - b.first_offset + 1 for b in value.state_batches if b.delivery_state in (2, 4))
            return StateSummary(value.start_offset, value.leader_epoch, value.state_epoch, done)
        resp = await self._ask(node, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1, Req(group_id=group_id, topics=[
            Req.ReadStateSummaryData(topic_id=topic_id, partitions=[Req.PartitionData(partition=partition)])]))
        pr = resp.results[0].partitions[0]
        if pr.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        if pr.error_code:
            raise KafkaError(ErrorCode(pr.error_code), pr.error_message)
        return StateSummary(pr.start_offset, pr.leader_epoch, pr.state_epoch, pr.delivery_complete_count)

    async def reset(self, group_id: str, topic_id: bytes, partition: int, start_offset: int, leader_epoch: int,
                    now_ms: int) -> None:
        """AlterShareGroupOffsets: a fresh state at ``start_offset`` (nothing in flight), here or with
        InitializeShareGroupState (a state epoch above the current one) on the node keeping it. Raises KafkaError."""
        from kbroker.protocol import coordinator_records as cr
        from kbroker.protocol.messages import InitializeShareGroupStateRequest as Req

        key = (group_id, topic_id, partition)
        current = await self.summary(*key)
        epoch = current.state_epoch + 1 if current is not None else 0  # fences the writes of the old state
        node = self._remote(key)
        if node is None:
            self.coordinator.write_state(*key, cr.ShareSnapshotValue(
                state_epoch=epoch, leader_epoch=leader_epoch, start_offset=start_offset, write_timestamp=now_ms))
            return
        resp = await self._ask(node, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, Req(group_id=group_id, topics=[
            Req.InitializeStateData(topic_id=topic_id, partitions=[Req.PartitionData(
                partition=partition, state_epoch=epoch, start_offset=start_offset)])]))
        pr = resp.results[0].partitions[0]
        if pr.error_code:
            raise KafkaError(ErrorCode(pr.error_code), pr.error_message)

    async def initialize(self, group_id: str, topic_id: bytes, partition: int, timeout_s: float = 10.0) -> bool:
        """The group coordinator's InitializeShareGroupState for a partition its share group subscribes to: a state
        at start offset -1 (the partition leader applies ``share.auto.offset.reset`` on first use), state epoch 0,
        here or on the node keeping it, unless a state exists already. Creates ``__share_group_state`` when
        missing and retries the coordinator errors until ``timeout_s``; True once the partition has a state."""
        from kbroker.protocol.messages import InitializeShareGroupStateRequest as Req

        key = (group_id, topic_id, partition)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                if not self.coordinator.topic_exists():
                    self.ensure_topic()
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
                if await self.summary(*key) is not None:
                    return True
                node = self._remote(key)
                if node is None:
                    code = self.coordinator.initialize_state(*key, 0, -1)
                    if not code:
                        code = await self.coordinator.replicated(*key)
                else:
                    resp = await self._ask(node, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, Req(
                        group_id=group_id, topics=[Req.InitializeStateData(topic_id=topic_id, partitions=[
                            Req.PartitionData(partition=partition, state_epoch=0, start_offset=-1)])]))
                    code = resp.results[0].partitions[0].error_code
                if not code:
                    return True
                if code not in _RETRIABLE:
                    log.info("initializing share state %s: %s", key, ErrorCode(code).name)
                    return False
            except KafkaError as exc:
                if exc.code not in _RETRIABLE:
                    log.info("initializing share state %s: %s", key, ErrorCode(exc.code).name)
                    return False
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(RETRY_S)

    async def delete(self, group_id: str, topic_id: bytes, partition: int) -> None:
        """DeleteShareGroupOffsets: remove one share partition's state, here or with DeleteShareGroupState on the
        node keeping it. Raises KafkaError."""
        from kbroker.protocol.messages import DeleteShareGroupStateRequest as Req

        key = (group_id, topic_id, partition)
        node = self._remote(key)
        if node is None:
            self.coordinator.delete_state(*key)
            return
        resp = await self._ask(node, ApiKey.DELETE_SHARE_GROUP_STATE, 0, Req(group_id=group_id, topics=[
            Req.DeleteStateData(topic_id=topic_id, partitions=[Req.PartitionData(partition=partition)])]))
        pr = resp.results[0].partitions[0]
        if pr.error_code and pr.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise KafkaError(ErrorCode(pr.error_code), pr.error_message)

    async def close(self) -> None:
        for task in list(self._reads.values()) + list(self._writers.values()):
            task.cancel()
        if self._channels is not None:
            await self._channels.close()

    def _warn(self, state_partition: int, code: int) -> None:
        if state_partition not in self._warned:
            self._warned.add(state_partition)
            log.warning("share state in __share_group_state-%d not written (%s)", state_partition,
                        ErrorCode(code).name)
