"""``ShareCoordinatorShard``: the share-partition states kept in one ``__share_group_state`` partition.

Each state is keyed by (group id, topic id, partition) and is the latest ``ShareSnapshot`` record (type 0)
written for it; a ``ShareUpdate`` record (type 1, Kafka's delta between snapshots) read from the log is merged
into the snapshot before it (its state batches replace the overlapping offsets, its start offset moves the
start), so logs Kafka wrote would replay too. kbroker itself writes a whole snapshot on every change, which the
compacted topic keeps as the one record per key. A tombstone (DeleteShareGroupState) removes the state.
"""

from __future__ import annotations

from typing import Any

from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode

#: (group id, topic id, partition)
StateKey = tuple[str, bytes, int]
SNAPSHOT_VALUE_VERSION = 0


class ShareCoordinatorShard:
    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.states: dict[StateKey, cr.ShareSnapshotValue] = {}
        self.loaded = False

    # ---- replay
    def replay(self, offset: int, producer_id: int, producer_epoch: int, record: CoordinatorRecord) -> None:
        key = record.key
        if not isinstance(key, (cr.ShareSnapshotKey, cr.ShareUpdateKey)):
            return
        k = (key.group_id, key.topic_id, key.partition)
        value = record.value
        if value is None:
            self.states.pop(k, None)
        elif isinstance(key, cr.ShareSnapshotKey):
            self.states[k] = value
        else:
            self._merge_update(k, value)

    def _merge_update(self, k: StateKey, update: Any) -> None:
        snap = self.states.get(k)
        if snap is None:
            return  # an update without a snapshot before it: nothing to apply it to
        start = update.start_offset if update.start_offset >= 0 else snap.start_offset
        batches = [cr.ShareSnapshotValue.StateBatch(max(b.first_offset, start), b.last_offset, b.delivery_state,
                                                    b.delivery_count)
                   for b in snap.state_batches if b.last_offset >= start]  # what lies below the start is gone
        for ub in update.state_batches:
            kept = []
            for b in batches:
                if b.last_offset < ub.first_offset or b.first_offset > ub.last_offset:
                    kept.append(b)
                    continue
                if b.first_offset < ub.first_offset:
                    kept.append(cr.ShareSnapshotValue.StateBatch(b.first_offset, ub.first_offset - 1,
                                                                 b.delivery_state, b.delivery_count))
                if b.last_offset > ub.last_offset:
                    kept.append(cr.ShareSnapshotValue.StateBatch(ub.last_offset + 1, b.last_offset,
                                                                 b.delivery_state, b.delivery_count))
            kept.append(cr.ShareSnapshotValue.StateBatch(ub.first_offset, ub.last_offset, ub.delivery_state,
                                                         ub.delivery_count))
            batches = sorted(kept, key=lambda b: b.first_offset)
        snap.start_offset = start
        snap.state_batches = batches
        snap.leader_epoch = update.leader_epoch

    def on_loaded(self) -> None:
        self.loaded = True

    def on_unloaded(self) -> None:
        self.loaded = False

    # ---- operations
    def read_state(self, k: StateKey) -> cr.ShareSnapshotValue | None:
        return self.states.get(k)

    def write_state(self, k: StateKey, value: cr.ShareSnapshotValue) -> CoordinatorResult[None]:
        old = self.states.get(k)
        value.snapshot_epoch = old.snapshot_epoch + 1 if old is not None else 0
        value.create_timestamp = old.create_timestamp if old is not None else value.write_timestamp
        return CoordinatorResult([CoordinatorRecord(cr.ShareSnapshotKey(group_id=k[0], topic_id=k[1],
                                                                        partition=k[2]),
                                                    value, SNAPSHOT_VALUE_VERSION)])

    def initialize_state(self, k: StateKey, state_epoch: int, start_offset: int,
                         now_ms: int) -> CoordinatorResult[int]:
        """InitializeShareGroupState: a fresh state (nothing in flight) at ``start_offset`` (-1: the leader
        decides on first use). FENCED_STATE_EPOCH for an epoch below the current one."""
        old = self.states.get(k)
        if old is not None and state_epoch < old.state_epoch:
            return CoordinatorResult(response=ErrorCode.FENCED_STATE_EPOCH)
        value = cr.ShareSnapshotValue(state_epoch=state_epoch, leader_epoch=-1, start_offset=start_offset,
                                      write_timestamp=now_ms)
        result = self.write_state(k, value)
        result.response = ErrorCode.NONE
        return result

    def write_update(self, k: StateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                     batches: list[tuple[int, int, int, int]], now_ms: int) -> CoordinatorResult[int]:
        """WriteShareGroupState: ``batches`` replace the offsets they cover, ``start_offset`` (-1: unchanged)
        moves the start; FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for epochs below the stored ones. A state
        that does not exist yet is created."""
        old = self.states.get(k)
        if old is not None:
            if leader_epoch < old.leader_epoch:
                return CoordinatorResult(response=ErrorCode.FENCED_LEADER_EPOCH)
            if state_epoch < old.state_epoch:
                return CoordinatorResult(response=ErrorCode.FENCED_STATE_EPOCH)
        base = old if old is not None else cr.ShareSnapshotValue(start_offset=max(start_offset, 0))
        merged = cr.ShareSnapshotValue(
            state_epoch=max(state_epoch, base.state_epoch), leader_epoch=base.leader_epoch,
            start_offset=base.start_offset, write_timestamp=now_ms,
            state_batches=[cr.ShareSnapshotValue.StateBatch(b.first_offset, b.last_offset, b.delivery_state,
                                                            b.delivery_count) for b in base.state_batches])
        update = cr.ShareUpdateValue(leader_epoch=leader_epoch, start_offset=start_offset, state_batches=[
            cr.ShareUpdateValue.StateBatch(first_offset=f, last_offset=la, delivery_state=st, delivery_count=c)
            for f, la, st, c in batches])
        tmp = {k: merged}
        saved, self.states = self.states, tmp
        try:
            self._merge_update(k, update)
        finally:
            self.states = saved
        result = self.write_state(k, tmp[k])
        result.response = ErrorCode.NONE
        return result

    def delete_state(self, k: StateKey) -> CoordinatorResult[None]:
        if k not in self.states:
            return CoordinatorResult()
        return CoordinatorResult([CoordinatorRecord(cr.ShareSnapshotKey(group_id=k[0], topic_id=k[1],
                                                                        partition=k[2]), None)])
