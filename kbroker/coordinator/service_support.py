"""Pieces the group and transaction coordinator services share: loading their internal topic's partitions
on the event loop, and creating that topic on first use.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class PartitionLoader:
    """Replays coordinator partitions as event-loop tasks that yield between steps.

    ``runtime.load_steps(partition)`` is a generator that replays a partition in slices; an empty partition
    (or a call outside a running loop, as in unit tests) is loaded at once.
    """

    def __init__(self, runtime: Any, writer: Any) -> None:
        self.runtime = runtime
        self.writer = writer
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def schedule(self, partition: int) -> None:
        try:
            empty = self.writer.log_end_offset(partition) <= self.writer.log_start_offset(partition)
        except KafkaError:
            return  # the replica manager has not created the log yet; a later image will
        steps = self.runtime.load_steps(partition)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if empty or loop is None:
            for _ in steps:
                pass
            return
        self.tasks[partition] = loop.create_task(self._load(partition, steps))

    async def _load(self, partition: int, steps: Any) -> None:
        try:
            for _ in steps:
                await asyncio.sleep(0)
        finally:
            self.tasks.pop(partition, None)

    def cancel(self, partition: int) -> None:
        task = self.tasks.pop(partition, None)
        if task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()

    async def wait_loaded(self) -> None:
        """Wait until no partition is loading (tests, start-up)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)


def internal_topic_replication(controller: Any, replication_factor: int) -> int:
    """The replication factor an internal topic is created with: the configured one capped at the number of live
    brokers (at least 1), so a single node or a small cluster can serve it."""
    image = controller.image
    live = len(image.live_brokers()) if hasattr(image, "live_brokers") else 1
    return max(1, min(replication_factor, live))


def create_internal_topic(controller: Any, name: str, num_partitions: int, replication_factor: int,
                          configs: dict[str, str]) -> int:
    """Create the internal topic ``name`` unless it exists; returns NONE or COORDINATOR_NOT_AVAILABLE.

    The replication factor is capped at the number of live brokers (:func:`internal_topic_replication`). In a
    cluster only the active controller creates topics here (NOT_CONTROLLER elsewhere: COORDINATOR_NOT_AVAILABLE);
    the server forwards the creation from other nodes (``MetadataQuorum.create_topic_soon``).
    """
    from kbroker.controller.quorum_controller import CreateTopicSpec

    image = controller.image
    if name in image.topics_by_name:
        return ErrorCode.NONE
    replication = internal_topic_replication(controller, replication_factor)
    spec = CreateTopicSpec(name=name, num_partitions=num_partitions, replication_factor=replication,
                           configs=configs)
    try:
        result = controller.create_topics([spec])[0]
    except KafkaError as exc:  # NOT_CONTROLLER: in a cluster, only the active controller creates topics
        log.info("cannot create %s here: %s", name, exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    except Exception:
        log.exception("creating %s failed", name)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        log.warning("creating %s failed: %s %s", name, ErrorCode(result.error_code).name, result.error_message)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    log.info("created %s with %d partitions (replication factor %d)", name, num_partitions, replication)
    return ErrorCode.NONE
