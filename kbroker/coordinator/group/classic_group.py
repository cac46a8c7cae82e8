"""Classic groups (JoinGroup/SyncGroup protocol): states, the transition table, members and the group.

States and what a group does in each (Kafka's ``ClassicGroupState``):

* **Empty**: no members; committed offsets may remain (and expire after ``offsets.retention.minutes``).
  JoinGroup starts a rebalance; a group created by a simple (generation -1) offset commit stays here.
* **PreparingRebalance**: the coordinator waits for every member to (re)join, at most the group's rebalance
  timeout (or ``group.initial.rebalance.delay.ms`` for the first join into an empty group). Heartbeats are
  answered REBALANCE_IN_PROGRESS, JoinGroup requests are parked.
* **CompletingRebalance**: every member got its JoinGroup response (the leader with the member list); the
  coordinator waits for the leader's SyncGroup with the assignment. Followers' SyncGroups are parked, offset
  commits are answered REBALANCE_IN_PROGRESS.
* **Stable**: the assignment is stored; members heartbeat, commit, and SyncGroup returns their assignment.
* **Dead**: the group was deleted (DeleteGroups, or expiry of an empty group's offsets); it is about to be
  removed from the shard.

Every transition is an entry of :data:`TRANSITIONS`, ``(state, event) -> state``; any other pair raises
:class:`IllegalStateTransition` (as h2's connection state table does). :data:`VALID_PREVIOUS_STATES` is derived
from it. The transitions to PreparingRebalance and CompletingRebalance happen in memory only (Kafka does not
persist a rebalance in progress; a reloaded group is Empty or Stable). The transitions to Empty, Stable and
Dead happen only when a ``GroupMetadata`` record (or its tombstone) is replayed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kbroker.protocol import codec
from kbroker.protocol.coordinator_records import GroupMetadataValue
from kbroker.protocol.messages import JoinGroupResponse, SyncGroupResponse
from kbroker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"
GROUP_TYPE_CLASSIC = "classic"


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, text: str) -> ClassicGroupState | None:
        """Case-insensitive lookup by the name Kafka reports (ListGroups states filter)."""
        low = text.lower()
        for s in cls:
            if s.value.lower() == low:
                return s
        return None


class ClassicGroupEvent(enum.Enum):
    #: a member joins, rejoins with new metadata, leaves or expires (also the first join into Empty)
    PREPARE_REBALANCE = "prepare-rebalance"
    #: every member rejoined (or the rebalance timed out) and at least one member remains
    COMPLETE_JOIN = "complete-join"
    #: replay of a GroupMetadata record without members (the rebalance ended with nobody; or loading)
    STORE_EMPTY = "store-empty"
    #: replay of a GroupMetadata record with members and their assignment (leader's SyncGroup; a static
    #: member replaced in a Stable group; or loading)
    STORE_ASSIGNMENT = "store-assignment"
    #: replay of a GroupMetadata tombstone (DeleteGroups, offsets expired)
    DELETE = "delete"


E, P, C, S, D = (ClassicGroupState.EMPTY, ClassicGroupState.PREPARING_REBALANCE,
                 ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.STABLE, ClassicGroupState.DEAD)
Ev = ClassicGroupEvent

#: The whole state machine: (state, event) -> next state.
TRANSITIONS: dict[tuple[ClassicGroupState, ClassicGroupEvent], ClassicGroupState] = {
    (E, Ev.PREPARE_REBALANCE): P,
    (S, Ev.PREPARE_REBALANCE): P,
    (C, Ev.PREPARE_REBALANCE): P,
    (P, Ev.COMPLETE_JOIN): C,
    (P, Ev.STORE_EMPTY): E,
    (E, Ev.STORE_EMPTY): E,
    (C, Ev.STORE_ASSIGNMENT): S,
    (S, Ev.STORE_ASSIGNMENT): S,
    (E, Ev.DELETE): D,
    (P, Ev.DELETE): D,
    (C, Ev.DELETE): D,
    (S, Ev.DELETE): D,
    (D, Ev.DELETE): D,
}
del E, P, C, S, D, Ev

#: For each state, the states a group may enter it from (Kafka documents its states this way).
VALID_PREVIOUS_STATES: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    target: frozenset(src for (src, _), dst in TRANSITIONS.items() if dst is target and src is not target)
    for target in ClassicGroupState
}


class IllegalStateTransition(RuntimeError):
    """A (state, event) pair missing from :data:`TRANSITIONS`: a coordinator bug, never a client error."""


def next_state(state: ClassicGroupState, event: ClassicGroupEvent) -> ClassicGroupState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalStateTransition(f"classic group cannot handle {event.value} in state {state.value}") from None


JoinResponder = Callable[[JoinGroupResponse], None]
SyncResponder = Callable[[SyncGroupResponse], None]


@dataclass(eq=False)
class ClassicGroupMember:
    """A member of a classic group. ``protocols`` is the member's (name, metadata) list in its order of
    preference; ``awaiting_join`` / ``awaiting_sync`` answer its parked JoinGroup / SyncGroup."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: JoinResponder | None = None
    awaiting_sync: SyncResponder | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def complete_join(self, response: JoinGroupResponse) -> None:
        responder, self.awaiting_join = self.awaiting_join, None
        if responder is not None:
            responder(response)

    def complete_sync(self, response: SyncGroupResponse) -> None:
        responder, self.awaiting_sync = self.awaiting_sync, None
        if responder is not None:
            responder(response)


@dataclass(eq=False)
class ClassicGroup:
    """A classic group's state. Durable fields (generation, protocol, leader, members' subscriptions and
    assignments) change only in :meth:`apply_metadata_record` (replay); the rebalance in progress lives in
    memory, as in Kafka."""

    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    previous_state: ClassicGroupState | None = None
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    pending_join_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    #: for the initial rebalance delay: how much of the rebalance timeout is left for further extensions
    initial_delay_remaining_ms: int = 0

    # ---- state machine
    def transition(self, event: ClassicGroupEvent, now_ms: int) -> ClassicGroupState:
        new = next_state(self.state, event)
        if new is not self.state:
            self.previous_state = self.state
            self.state = new
            self.state_timestamp_ms = now_ms
        return new

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    # ---- members
    @property
    def is_empty(self) -> bool:
        return not self.members

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def add_member(self, member: ClassicGroupMember) -> None:
        """Add a member (in memory). The first member fixes the protocol type and becomes the leader."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_join_members.discard(member.member_id)

    def remove_member(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str,
                              fenced_join: JoinGroupResponse, fenced_sync: SyncGroupResponse) -> ClassicGroupMember:
        """Give a static member a new member id (in memory). The old member's parked requests are
        answered FENCED_INSTANCE_ID (responses passed in, with the error set)."""
        member = self.members.pop(old_member_id)
        member.complete_join(fenced_join)
        member.complete_sync(fenced_sync)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_join_members

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def maybe_elect_new_joined_leader(self) -> bool:
        """Make sure the leader is a member that rejoined (it must get the member list); False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ---- protocols
    def candidate_protocols(self, exclude_member: str | None = None) -> set[str] | None:
        """Protocols every member (but ``exclude_member``) supports; None when there is no such member."""
        result: set[str] | None = None
        for member in self.members.values():
            if member.member_id == exclude_member:
                continue
            names = set(member.protocol_names())
            result = names if result is None else result & names
        return result

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str], member_id: str | None = None) -> bool:
        names = set(protocols)
        if self.is_in(ClassicGroupState.EMPTY) and not any(m for m in self.members if m != member_id):
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        candidates = self.candidate_protocols(exclude_member=member_id)
        return candidates is None or bool(candidates & names)

    def select_protocol(self) -> str:
        """The protocol for the next generation: among those every member supports, the one most members
        prefer; ties go to the protocol the earliest member prefers most."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError("no protocol is supported by every member")
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        for member in self.members.values():
            choice = member.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (``consumer`` protocol type only); None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            sub = decode_subscription(member.metadata(self.protocol_name))
            if sub is None:
                return None
            topics.update(sub.topics)
        return topics

    # ---- records
    def to_metadata_value(self, now_ms: int, assignments: dict[str, bytes] | None = None,
                          members: Iterable[ClassicGroupMember] | None = None,
                          generation_id: int | None = None) -> GroupMetadataValue:
        """The GroupMetadata value describing this group (optionally with new assignments / members)."""
        value = GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id if generation_id is None else generation_id,
            protocol=self.protocol_name, leader=self.leader_id, current_state_timestamp=now_ms)
        for m in (self.members.values() if members is None else members):
            value.members.append(GroupMetadataValue.MemberMetadata(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(self.protocol_name),
                assignment=(assignments.get(m.member_id, b"") if assignments is not None else m.assignment)))
        return value

    @classmethod
    def from_metadata_value(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """A group as loaded from its latest GroupMetadata record: Empty without members, else Stable."""
        group = cls(group_id)
        group.apply_metadata_record(value, loading=True)
        return group

    def apply_metadata_record(self, value: GroupMetadataValue, loading: bool = False) -> None:
        """Replay of a GroupMetadata record: generation, protocol, leader, members and their assignments.

        Members of the record that are in memory keep their parked requests and protocols; members in memory
        but not in the record are dropped (a static member's old id); members only in the record are added
        with the record's subscription as their only protocol.
        """
        target = ClassicGroupEvent.STORE_ASSIGNMENT if value.members else ClassicGroupEvent.STORE_EMPTY
        if loading:
            self.state = ClassicGroupState.STABLE if value.members else ClassicGroupState.EMPTY
            self.previous_state = None
        else:
            self.transition(target, value.current_state_timestamp)
        self.state_timestamp_ms = value.current_state_timestamp
        self.generation_id = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        old = self.members
        self.members = {}
        self.static_members = {}
        for mm in value.members:
            member = old.pop(mm.member_id, None)
            if member is None:
                member = ClassicGroupMember(
                    member_id=mm.member_id, group_instance_id=mm.group_instance_id, client_id=mm.client_id,
                    client_host=mm.client_host, rebalance_timeout_ms=mm.rebalance_timeout,
                    session_timeout_ms=mm.session_timeout, protocol_type=value.protocol_type,
                    protocols=[(value.protocol or "", mm.subscription)])
            else:
                member.group_instance_id = mm.group_instance_id
                member.rebalance_timeout_ms = mm.rebalance_timeout
                member.session_timeout_ms = mm.session_timeout
            member.assignment = mm.assignment
            self.members[member.member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = member.member_id
        self.pending_sync_members &= set(self.members)
        if self.leader_id is not None and self.leader_id not in self.members:
            self.leader_id = next(iter(self.members), None)
        if not self.members:
            self.leader_id = None


def decode_subscription(metadata: bytes) -> ConsumerProtocolSubscription | None:
    """A ``ConsumerProtocolSubscription`` (int16 version + struct); None if the bytes do not parse."""
    if len(metadata) < 2:
        return None
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        sub, _ = codec.decode(ConsumerProtocolSubscription, metadata, min(version, 3), 2)
    except (codec.DecodeError, ValueError, IndexError):
        return None
    return sub

