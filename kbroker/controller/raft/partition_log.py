"""The Raft log on disk: :class:`~kbroker.controller.raft.log.RaftLog` over a
:class:`~kbroker.storage.log.PartitionLog` (``__cluster_metadata-0``, Kafka's on-disk layout).

Each :class:`~kbroker.controller.raft.log.LogEntry` is one record batch; its ``data`` is the batch's bytes as
stored, so followers copy what the leader wrote without re-encoding (Fetch carries the batches). Entries the
leader appends are encoded here: a ``None`` entry becomes a LeaderChange control batch (``LeaderChangeMessage``
v0, control type 2), a tuple of record values becomes one batch of those values (no keys, as KRaft's metadata
records). The epoch of every batch is its ``partition_leader_epoch``; the storage layer's leader-epoch cache
(``leader-epoch-checkpoint``) answers ``end_offset_for_epoch``. ``flushed_offset`` is the log's recovery point:
what is on disk after fsync.
"""

from __future__ import annotations

import struct
import time
from typing import Callable, Sequence

from kbroker.controller.raft.log import LogEntry
from kbroker.protocol import codec
from kbroker.protocol.messages.leader_change_message import LeaderChangeMessage
from kbroker.protocol.records import build_batch, iter_batches
from kbroker.storage.log import PartitionLog
from kbroker.storage.producer_state import AppendOrigin

LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)
"""The key of a LeaderChange control record: version 0, control type 2."""

DEFAULT_READ_MAX_BYTES = 8 * 1024 * 1024


def leader_change_batch(offset: int, epoch: int, leader_id: int, voters: Sequence[int], now_ms: int) -> bytes:
    """The control batch that opens a leader's epoch (KIP-595 ``LeaderChangeMessage``)."""
    msg = LeaderChangeMessage(version=0, leader_id=leader_id,
                              voters=[LeaderChangeMessage.Voter(voter_id=v) for v in voters],
                              granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in voters])
    return build_batch([(LEADER_CHANGE_KEY, codec.encode(msg, 0), [], now_ms)], base_offset=offset,
                       partition_leader_epoch=epoch, is_control=True)


class PartitionRaftLog:
    """A :class:`~kbroker.controller.raft.log.RaftLog` stored in a :class:`PartitionLog`.

    ``node_id`` and ``voters`` fill the LeaderChange batches this replica writes as leader; ``clock`` returns
    seconds (batch timestamps only).
    """

    def __init__(self, log: PartitionLog, node_id: int, voters: Sequence[int],
                 clock: Callable[[], float] = time.time, read_max_bytes: int = DEFAULT_READ_MAX_BYTES) -> None:
        self.partition_log = log
        self.node_id = node_id
        self.voters = tuple(sorted(voters))
        self.clock = clock
        self.read_max_bytes = read_max_bytes
        self.lowest_truncation: int | None = None

    @property
    def end_offset(self) -> int:
        return self.partition_log.log_end_offset

    @property
    def last_epoch(self) -> int:
        return max(0, self.partition_log.leader_epoch_cache.latest_epoch)

    @property
    def flushed_offset(self) -> int:
        return self.partition_log.recovery_point

    def epoch_at(self, offset: int) -> int:
        return self.partition_log.leader_epoch_cache.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        found, end = self.partition_log.leader_epoch_cache.end_offset_for(epoch, self.end_offset)
        if found < 0:
            return (0, 0)
        return (found, end)

    def append(self, entries: Sequence[LogEntry]) -> None:
        now = int(self.clock() * 1000)
        for e in entries:
            if e.offset != self.end_offset:
                raise ValueError(f"append at offset {e.offset}, log end offset is {self.end_offset}")
            if isinstance(e.data, (bytes, bytearray, memoryview)):
                info = self.partition_log.append_as_follower(e.data, now)
            else:
                if e.data is None:
                    batch = leader_change_batch(e.offset, e.epoch, self.node_id, self.voters, now)
                else:
                    batch = build_batch([(None, v, [], now) for v in e.data], base_offset=e.offset,  # type: ignore[attr-defined]
                                        partition_leader_epoch=e.epoch)
                info = self.partition_log.append_as_leader(batch, e.epoch, now, origin=AppendOrigin.REPLICATION)
            if info.last_offset + 1 != e.next_offset:
                raise ValueError(f"batch at {e.offset} holds offsets up to {info.last_offset}, expected "
                                 f"{e.next_offset - 1}")

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        self.partition_log.truncate_to(offset)
        end = self.end_offset
        if self.lowest_truncation is None or end < self.lowest_truncation:
            self.lowest_truncation = end

    def read(self, offset: int, max_entries: int) -> list[LogEntry]:
        if offset >= self.end_offset:
            return []
        info = self.partition_log.read(offset, self.read_max_bytes)
        out: list[LogEntry] = []
        for batch in iter_batches(info.read_bytes()):
            if len(out) >= max_entries:
                break
            out.append(LogEntry(batch.base_offset, batch.partition_leader_epoch, bytes(batch),
                                batch.last_offset_delta + 1))
        return out

    def flush(self) -> None:
        self.partition_log.flush()
