"""Moving a partition's log to another of the broker's log directories while it is written (AlterReplicaLogDirs,
KIP-113; Kafka's ReplicaAlterLogDirsManager).

A move copies the log into ``<target root>/<topic>-<partition>.<uuid>-future`` batch by batch on the event loop
(1 MiB per step, yielding between steps, so produce and fetch keep running), follows what is appended,
truncated or deleted meanwhile, and once the copy has every batch swaps it in without yielding
(:meth:`LogManager.complete_move` / :meth:`PartitionLog.adopt`): the partition keeps its ``PartitionLog``
object, now on files in the new directory; the old directory is renamed ``...-delete`` and removed in a worker
thread. A stop or crash before the swap leaves the source as it was (the copy is removed at the next start and
the move is not resumed, as the operator can ask again); one after it finds the copy complete
(``LogManager.startup``).

The interface is narrow: the :class:`~kbroker.storage.log_manager.LogManager` and nothing of the broker.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.storage.log import PartitionLog
from kbroker.storage.log_manager import LogManager

log = logging.getLogger(__name__)

#: bytes copied per step before the loop runs other work
CHUNK_BYTES = 1 << 20


@dataclass
class Move:
    """One move in progress: the partition's log, its copy-to-be and the log dir it goes to."""

    plog: PartitionLog
    future: PartitionLog
    root: Path
    task: asyncio.Task | None = None


class LogDirMover:
    """Moves in progress by (topic, partition); see the module docstring."""

    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager
        self.moves: dict[tuple[str, int], Move] = {}

    def request(self, plog: PartitionLog, root: Path) -> None:
        """Move ``plog`` to log dir ``root`` (one of ``log.dirs``, online: the caller checked). Nothing to do when
        it is there and not moving; a move elsewhere in progress is cancelled first (as Kafka: the newest
        destination wins). Raises ``KafkaError(KAFKA_STORAGE_ERROR)`` when the copy cannot be created."""
        tp = (plog.topic, plog.partition)
        current = self.moves.get(tp)
        if current is not None:
            if current.root == root and current.plog is plog:
                return
            self.cancel(tp)
        if self.log_manager.log_dir_of(*tp) == root:
            return
        future = self.log_manager.new_future_log(root, plog)
        move = Move(plog, future, root)
        self.moves[tp] = move
        move.task = asyncio.get_running_loop().create_task(self._run(tp, move), name=f"move {tp[0]}-{tp[1]}")
        log.info("moving %s-%d from %s to %s", tp[0], tp[1], self.log_manager.log_dir_of(*tp), root)

    def cancel(self, tp: tuple[str, int]) -> None:
        """Stop the move of ``tp`` (if any) and remove its copy."""
        move = self.moves.pop(tp, None)
        if move is None:
            return
        if move.task is not None:
            move.task.cancel()
        move.future.delete()

    def stop(self) -> None:
        """Broker shutdown: stop every move; the copies stay on disk for the next start to remove."""
        for move in list(self.moves.values()):
            if move.task is not None:
                move.task.cancel()
            move.future.close()
        self.moves.clear()

    async def _run(self, tp: tuple[str, int], move: Move) -> None:
        plog, future = move.plog, move.future
        try:
            while True:
                if plog.closed:  # the partition went away (topic deleted, replica removed)
                    self.cancel(tp)
                    return
                if self._step(plog, future):
                    del self.moves[tp]
                    retired = self.log_manager.complete_move(plog, future, move.root)
                    log.info("moved %s-%d to %s", tp[0], tp[1], move.root)
                    await asyncio.to_thread(shutil.rmtree, retired, True)
                    return
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an I/O error (the directory went offline) or a bug: the source stays
            log.error("moving %s-%d to %s failed: %s", tp[0], tp[1], move.root, exc)
            if self.moves.get(tp) is move:
                self.moves.pop(tp)
                try:
                    future.delete()
                except Exception:
                    log.exception("removing the copy %s failed", future.dir)

    @staticmethod
    def _step(plog: PartitionLog, future: PartitionLog) -> bool:
        """Copy up to CHUNK_BYTES of what ``future`` lacks; True when it holds exactly ``plog``'s batches
        (then the caller swaps without yielding)."""
        if future.log_end_offset > plog.log_end_offset:  # the source was truncated (a follower's divergence)
            future.truncate_to(plog.log_end_offset)
        start = plog.log_start_offset
        if future.log_end_offset < start:
            future.truncate_fully_and_start_at(start)
        if future.log_end_offset == plog.log_end_offset:
            future.high_watermark = future.log_end_offset  # a copy has no replicas to wait for
            if future.log_start_offset < start:
                future.advance_log_start_offset(start)
            return future.log_start_offset == start
        try:
            # at most half a segment per step, so that the copy rolls segments about where the source did
            step = min(CHUNK_BYTES, max(1, plog.config.segment_bytes // 2))
            data = plog.read(future.log_end_offset, step).read_bytes()
        except KafkaError as exc:
            if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                raise
            return False  # retention or DeleteRecords moved the start meanwhile: the next step starts over
        if data:
            base = int.from_bytes(data[:8], "big")
            if base < future.log_end_offset:
                # the start is inside this batch (DeleteRecords): the copy starts at the batch, as the source's
                # segments do, and its log start offset is raised once it has caught up
                future.truncate_fully_and_start_at(base)
            future.append_as_follower(data)
        return False
