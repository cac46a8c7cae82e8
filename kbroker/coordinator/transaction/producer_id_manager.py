"""``ProducerIdManager``: producer ids handed out from blocks the controller records (``ProducerIdsRecord``)."""

from __future__ import annotations

from typing import Any


class ProducerIdManager:
    """Hands out producer ids from blocks allocated by the controller (``allocate_producer_ids``)."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.next_id = 0
        self.end = 0

    @property
    def exhausted(self) -> bool:
        """No id left in the current block (the next ``generate`` would allocate one)."""
        return self.next_id >= self.end

    def add_block(self, first: int, size: int) -> None:
        """Use a block allocated elsewhere (a cluster node asks the active controller and waits for the commit:
        kbroker/server/metadata_quorum.py)."""
        self.next_id, self.end = first, first + size

    def generate(self) -> int:
        """The next producer id. Raises KafkaError when the controller cannot allocate a block."""
        if self.next_id >= self.end:
            first, size = self.controller.allocate_producer_ids()
            self.next_id, self.end = first, first + size
        pid = self.next_id
        self.next_id += 1
        return pid
