"""The quorum states of KRaft and the one table of legal transitions between them.

Source: KIP-595 (the Raft protocol for the metadata quorum) and KIP-996 (pre-vote). A replica is in exactly one
of these states at a time; :data:`TRANSITIONS` lists, for each state, the states it may move to. Any other move
is a bug and raises :class:`IllegalStateTransition` (the table is checked pair by pair in the tests, as h2 checks
its connection state machine).

* ``UNATTACHED``: the epoch is known but not its leader. A voter may have granted its vote in this epoch
  (``voted_id``); after the election timeout a voter becomes ``PROSPECTIVE``.
* ``PROSPECTIVE``: a voter asking for pre-votes (KIP-996) in its current epoch, without bumping the epoch; a
  majority of pre-votes makes it ``CANDIDATE``.
* ``CANDIDATE``: the epoch was bumped, the replica voted for itself and asks for real votes.
* ``LEADER``: elected for its epoch; appends, replicates and advances the high watermark.
* ``FOLLOWER``: knows the leader of its epoch and fetches from it.
* ``RESIGNED``: a former leader that gave up its epoch (graceful shutdown, lost quorum, restart); it serves no
  writes and waits for the next leader or its election timeout.

The persistent part of a state (epoch, leader, vote) is an :class:`ElectionState`, stored as ``quorum-state``
in the shape of Kafka's ``QuorumStateData`` (JSON, ``data_version`` 0).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field


class QuorumStateName(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


S = QuorumStateName

TRANSITIONS: dict[QuorumStateName, frozenset[QuorumStateName]] = {
    # a higher epoch is learnt (-> Unattached, or Follower when its leader is known), the election timeout
    # of a voter (-> Prospective), a vote granted in a higher epoch (-> Unattached with voted_id)
    S.UNATTACHED: frozenset({S.UNATTACHED, S.PROSPECTIVE, S.FOLLOWER}),
    # a majority of pre-votes (-> Candidate), a lost pre-vote or its timeout (-> Unattached), a leader learnt
    S.PROSPECTIVE: frozenset({S.UNATTACHED, S.CANDIDATE, S.FOLLOWER}),
    # a majority of votes (-> Leader), the election timeout (-> Prospective, pre-vote again), a higher epoch
    S.CANDIDATE: frozenset({S.LEADER, S.PROSPECTIVE, S.UNATTACHED, S.FOLLOWER}),
    # graceful resignation or lost quorum (-> Resigned), a higher epoch with or without its leader
    S.LEADER: frozenset({S.RESIGNED, S.UNATTACHED, S.FOLLOWER}),
    # fetch timeout of a voter (-> Prospective), a higher epoch; an observer that loses its leader -> Unattached
    S.FOLLOWER: frozenset({S.PROSPECTIVE, S.UNATTACHED, S.FOLLOWER}),
    # the election timeout (-> Prospective), the next leader or a higher epoch
    S.RESIGNED: frozenset({S.PROSPECTIVE, S.UNATTACHED, S.FOLLOWER}),
}


class IllegalStateTransition(RuntimeError):
    """A transition that :data:`TRANSITIONS` does not allow (a bug in the caller, never a peer's input)."""


def check_transition(src: QuorumStateName, dst: QuorumStateName) -> None:
    if dst not in TRANSITIONS[src]:
        raise IllegalStateTransition(f"illegal quorum state transition {src.value} -> {dst.value}")


@dataclass(frozen=True)
class ElectionState:
    """What a replica must remember across restarts: epoch, the leader of that epoch if known, its vote.

    ``leader_id`` and ``voted_id`` are ``-1`` when unknown / not voted, as in ``QuorumStateData``.
    ``voters`` is the static voter set the state was written with (empty for dynamic quorums).
    """

    epoch: int = 0
    leader_id: int = -1
    voted_id: int = -1
    voters: tuple[int, ...] = field(default_factory=tuple)

    def to_json(self, cluster_id: str = "") -> str:
        """``quorum-state`` text: Kafka's ``QuorumStateData`` v0 field names."""
        return json.dumps({
            "clusterId": cluster_id,
            "leaderId": self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self.voters],
            "data_version": 0,
        })

    @staticmethod
    def cluster_id_of(text: str) -> str:
        """The ``clusterId`` field of ``quorum-state`` text ("" when absent); ``ValueError`` when not JSON."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        return str(obj.get("clusterId") or "") if isinstance(obj, dict) else ""

    @classmethod
    def from_json(cls, text: str) -> ElectionState:
        """Parse ``quorum-state`` text; raises ``ValueError`` with what is wrong when it is not a valid one."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        try:
            epoch = int(obj["leaderEpoch"])
            leader = int(obj.get("leaderId", -1))
            voted = int(obj.get("votedId", -1))
            voters = tuple(int(v["voterId"]) for v in obj.get("currentVoters") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"missing or invalid field: {exc}") from None
        if epoch < 0:
            raise ValueError(f"negative leaderEpoch {epoch}")
        return cls(epoch, leader, voted, voters)
