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
        batches = [b for b in snap.state_batches if b.last_offset >= start]
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

    def delete_state(self, k: StateKey) -> CoordinatorResult[None]:
        if k not in self.states:
            return CoordinatorResult()
        return CoordinatorResult([CoordinatorRecord(cr.ShareSnapshotKey(group_id=k[0], topic_id=k[1],
                                                                        partition=k[2]), None)])
