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
    """``quorum-state`` in ``directory``. With ``cluster_id``, a file written for another cluster is refused
    (the directory was formatted for, or copied from, another cluster)."""

    def __init__(self, directory: Path, cluster_id: str = "") -> None:
        self.path = Path(directory) / QUORUM_STATE_FILE
        self.cluster_id = cluster_id

    def read(self) -> ElectionState | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            text = raw.decode("utf-8")
            state = ElectionState.from_json(text)
            stored = ElectionState.cluster_id_of(text)
        except (UnicodeDecodeError, ValueError) as exc:
            raise QuorumStateError(f"{self.path} is damaged ({exc}); it holds this node's vote and epoch, so the "
                                   f"node cannot start safely: restore it, or remove the node from the quorum "
                                   f"and add it again with an empty metadata directory") from None
        if self.cluster_id and stored and stored != self.cluster_id:
            raise QuorumStateError(f"{self.path} belongs to cluster {stored}, this node is formatted for cluster "
                                   f"{self.cluster_id}: the metadata directory was copied from another cluster")
        return state

    def write(self, state: ElectionState) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(state.to_json(self.cluster_id).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
