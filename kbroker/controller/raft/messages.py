"""The Raft messages as the state machine sees them: the fields of KRaft's Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch and FetchSnapshot requests and responses (API keys 52, 53, 54, 1 and 59) that the protocol
needs.

The wire adapter maps these to and from the generated messages (``VoteRequest`` etc.); the simulation passes
them as they are. Every message names its sender (``src``); responses repeat what they answer so that a late
or duplicated response can be recognised and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kbroker.controller.raft.log import LogEntry


@dataclass(frozen=True, slots=True)
class VoteRequest:
    src: int
    candidate_epoch: int
    """The epoch the candidate campaigns in. For a pre-vote: the prospective's epoch + 1 (KIP-996)."""
    last_offset_epoch: int
    last_offset: int
    """The candidate's log end offset."""
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    src: int
    epoch: int
    """The voter's current epoch."""
    leader_id: int
    vote_granted: bool
    candidate_epoch: int
    pre_vote: bool
    error: str = "NONE"


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    src: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    src: int
    epoch: int
    leader_id: int
    error: str = "NONE"


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    src: int
    epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchRequest:
    src: int
    epoch: int
    """The epoch the fetching replica believes current (``current_leader_epoch``)."""
    fetch_offset: int
    last_fetched_epoch: int
    max_entries: int = 100
    correlation_id: int = 0
    """Answered in the response; only the answer to the fetch in flight is taken (the wire's correlation id)."""
    directory_id: bytes = bytes(16)
    """The fetching replica's metadata directory id (KIP-853 ``ReplicaDirectoryId``; zeros when unknown)."""
    high_watermark: int | None = None
    """The high watermark the fetching replica knows (Fetch v18 ``HighWatermark``, KAFKA-14145): the leader answers
    at once, without long polling, when its own is higher. ``None`` when the fetcher's Fetch version does not carry
    it (the leader then answers a parked fetch at any move of its high watermark)."""


@dataclass(frozen=True, slots=True)
class FetchResponse:
    src: int
    epoch: int
    leader_id: int
    error: str
    """``NONE``, ``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH`` or ``NOT_LEADER_OR_FOLLOWER``."""
    fetch_offset: int
    high_watermark: int = -1
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    entries: tuple[LogEntry, ...] = field(default_factory=tuple)
    correlation_id: int = 0
    snapshot_end_offset: int = -1
    """With ``snapshot_epoch``: the fetch offset is below the leader's log start offset; fetch this snapshot
    (FetchSnapshot) and continue from its end offset (KIP-630). -1: no snapshot."""
    snapshot_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """Ask the leader for bytes ``position ..`` of snapshot ``(snapshot_end_offset, snapshot_epoch)`` (KIP-630)."""

    src: int
    epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    position: int
    max_bytes: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    src: int
    epoch: int
    leader_id: int
    error: str
    """``NONE``, ``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH``, ``NOT_LEADER_OR_FOLLOWER``,
    ``SNAPSHOT_NOT_FOUND`` or ``POSITION_OUT_OF_RANGE``."""
    snapshot_end_offset: int
    snapshot_epoch: int
    size: int = -1
    """The snapshot's whole size in bytes."""
    position: int = -1
    data: bytes = b""
    correlation_id: int = 0


RaftMessage = (VoteRequest | VoteResponse | BeginQuorumEpochRequest | BeginQuorumEpochResponse
               | EndQuorumEpochRequest | FetchRequest | FetchResponse | FetchSnapshotRequest | FetchSnapshotResponse)
