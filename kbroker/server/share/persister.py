"""Where share partitions keep their state: the share coordinator (``__share_group_state``), called in-process.

:class:`LocalSharePersister` is the persister of :class:`~kbroker.server.share.manager.SharePartitionManager`:

* ``load(group, topic id, partition)`` -> ``(SPSO, [(first, last, state, delivery count)])`` or None (no state
  yet: the share partition starts from ``share.auto.offset.reset``). Raises KafkaError
  COORDINATOR_LOAD_IN_PROGRESS while the state's ``__share_group_state`` partition is still being replayed here
  (the share partition waits; it must not start over from the reset offset). The topic is created on first use.
* ``save(...)`` writes a ``ShareSnapshot`` record (best effort: when the state's partition is not served here
  the state stays in memory, and a warning is logged once per partition).

A state partition led by another node is not reached (the inter-broker Read/WriteShareGroupState calls are not
implemented): such share partitions keep their state in memory only.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class LocalSharePersister:
    def __init__(self, share_coordinator: Any) -> None:
        self.coordinator = share_coordinator
        self._warned: set[int] = set()

    def load(self, group_id: str, topic_id: bytes, partition: int) -> tuple[int, list[tuple[int, int, int, int]]] | None:
        sc = self.coordinator
        if not sc.topic_exists():
            sc.ensure_topic()
            return None
        if sc.is_loading(group_id, topic_id, partition):
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        try:
            value = sc.read_state(group_id, topic_id, partition)
        except KafkaError as exc:
            if exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise
            self._warn(sc.partition_for(group_id, topic_id, partition), exc.code)
            return None
        if value is None:
            return None
        return value.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                    for b in value.state_batches]

    def save(self, group_id: str, topic_id: bytes, partition: int, start_offset: int,
             batches: list[tuple[int, int, int, int]], leader_epoch: int = 0) -> None:
        now = int(time.time() * 1000)
        value = cr.ShareSnapshotValue(
            leader_epoch=leader_epoch, start_offset=start_offset, write_timestamp=now,
            state_batches=[cr.ShareSnapshotValue.StateBatch(first_offset=f, last_offset=la, delivery_state=st,
                                                            delivery_count=c) for f, la, st, c in batches])
        try:
            self.coordinator.write_state(group_id, topic_id, partition, value)
        except KafkaError as exc:
            self._warn(self.coordinator.partition_for(group_id, topic_id, partition), exc.code)

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

    def _warn(self, state_partition: int, code: int) -> None:
        if state_partition not in self._warned:
            self._warned.add(state_partition)
            log.warning("share state of __share_group_state-%d not persisted here (%s): kept in memory only",
                        state_partition, ErrorCode(code).name)
