"""``quorum-state`` on disk: the :class:`~kbroker.controller.raft.client.ElectionStore` of a real node.

The file holds Kafka's ``QuorumStateData`` JSON (:meth:`ElectionState.to_json`); every write goes to a
temporary file that is fsynced and renamed over the old one, and the directory is fsynced, so a vote or an epoch
is durable before the message that depends on it is sent. A file that cannot be read raises
:class:`QuorumStateError` with the path and what is wrong: the node must not guess its vote.
"""

from __future__ import annotations

import os
from pathlib import Path

from kbroker.controller.raft.states import ElectionState
from kbroker.storage.util import fsync_dir

QUORUM_STATE_FILE = "quorum-state"


class QuorumStateError(Exception):
    """``quorum-state`` exists but is damaged (one-line message naming the file)."""


class FileElectionStore:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / QUORUM_STATE_FILE

    def read(self) -> ElectionState | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return ElectionState.from_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise QuorumStateError(f"{self.path} is damaged ({exc}); it holds this node's vote and epoch, so the "
                                   f"node cannot start safely: restore it, or remove the node from the quorum "
                                   f"and add it again with an empty metadata directory") from None

    def write(self, state: ElectionState) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(state.to_json().encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
