"""Consumer groups of the KIP-848 protocol (``ConsumerGroupHeartbeat``): members, epochs, reconciliation.

A consumer group has three epochs (Kafka's model, re-stated):

* the **group epoch** goes up whenever what the assignment depends on changes: a member joins or leaves or
  changes its subscription, or the subscribed topics' metadata changes (partitions added, a topic created or
  deleted that the group subscribes to);
* the **assignment epoch** is the group epoch the current *target assignment* was computed for (by the
  server-side assignor, :mod:`kbroker.coordinator.group.assignors`); a heartbeat that finds the group epoch
  ahead computes a new target assignment, but at most once per ``consumer.assignment.interval.ms`` (group config,
  else the broker's ``group.consumer.assignment.interval.ms``, 1000 ms; KIP-1263): within the interval after the
  last computation (:attr:`ConsumerGroup.assignment_timestamp_ms`) the heartbeat reconciles against the last
  target, so a member that joins then gets the current assignment epoch and an empty assignment;
* each member's **member epoch** is the assignment epoch it has reconciled to.

**Reconciliation** (:func:`reconcile`) moves one member towards its target, in Kafka's member states:

* ``STABLE``: the member owns exactly its target of its epoch. When a newer target exists, partitions the
  member keeps stay, partitions it must give up become *pending revocation* (-> ``UNREVOKED_PARTITIONS``,
  the epoch stays); otherwise it moves to the new epoch and gets the target partitions that nobody else holds;
* ``UNREVOKED_PARTITIONS``: the member is told to revoke; once a heartbeat's owned partitions no longer contain
  any of them, it moves on to the next epoch;
* ``UNRELEASED_PARTITIONS``: the member has the new epoch but some target partitions are still held by their
  previous owner (assigned to it or pending revocation); each heartbeat hands over those that were released.

So a partition never has two owners: it is given to a member only when no other member holds it.

As in Kafka, a group that has no records yet starts at group epoch 1 and assignment epoch 1 (never written), so
its first member's heartbeat bumps the group epoch to 2 and computes the first target assignment at once (no
earlier computation to wait for): that member answers with member epoch 2.

The group's state is derived, as in Kafka: ``Empty`` (no members), ``Assigning`` (group epoch > assignment
epoch), ``Reconciling`` (a member is not STABLE at the assignment epoch), ``Stable``; ``Dead`` once deleted.

Durable state is the records of types 3-8 and 16 in ``__consumer_offsets`` (protocol guide §5.2); this module
builds them (``*_record``) and applies them (:meth:`ConsumerGroup.replay`). Nothing else changes a group's
durable fields.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from kbroker.coordinator.runtime import CoordinatorRecord
from kbroker.protocol import coordinator_records as cr

CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

#: topic id -> partitions (immutable form, used in members and target assignments)
Partitions = Mapping[bytes, frozenset[int]]


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.IntEnum):
    """Kafka's member states and their int8 values in ``ConsumerGroupCurrentMemberAssignmentValue``."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class FencedMemberEpoch(Exception):
    """Reconciliation of a member in an unknown state that still claims partitions."""


def freeze(assignment: Mapping[bytes, Iterable[int]]) -> dict[bytes, frozenset[int]]:
    return {tid: frozenset(ps) for tid, ps in assignment.items() if ps}


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member of the classic protocol inside a consumer group (KIP-848 online migration) sent in its
    JoinGroup: the session timeout (ms) and its protocols ``(name, ConsumerProtocolSubscription bytes)``, in
    preference order (record 5's ``ClassicMemberMetadata``)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}


@dataclass(frozen=True)
class ConsumerGroupMember:
    """A member: its subscription (record 5) and its current assignment (record 8). ``classic`` is set for a
    member that uses the classic protocol (JoinGroup / SyncGroup / Heartbeat) inside a consumer group."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    def subscription_key(self) -> tuple[Any, ...]:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)

    def assignment_key(self) -> tuple[Any, ...]:
        return (self.member_epoch, self.previous_member_epoch, self.state, dict(self.assigned),
                dict(self.pending_revocation))


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: bytes
    name: str
    num_partitions: int


@dataclass(frozen=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(eq=False)
class ConsumerGroup:
    """A consumer group's state; durable fields change only in :meth:`replay`."""

    group_id: str
    #: a group without records is at epoch 1 (Kafka's initial group and assignment epoch)
    group_epoch: int = 1
    assignment_epoch: int = 1
    #: when the target assignment was last computed (ms since the epoch; 0: never), from record 6's
    #: ``AssignmentTimestamp``: the next one waits for ``consumer.assignment.interval.ms`` after it
    assignment_timestamp_ms: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: group instance id -> member id
    static_members: dict[str, str] = field(default_factory=dict)
    target_assignment: dict[str, Partitions] = field(default_factory=dict)
    #: topic name -> metadata of the subscribed topics (record 4)
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    #: (topic id, partition) -> epoch of the member holding it (assigned or pending revocation)
    partition_epochs: dict[tuple[bytes, int], int] = field(default_factory=dict)
    #: in memory: the topic metadata may have changed; the next heartbeat recomputes it
    metadata_refresh: bool = False
    deleted: bool = False

    # ---- derived
    @property
    def state(self) -> ConsumerGroupState:
        if self.deleted:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def subscribed_topic_names(self, members: Iterable[ConsumerGroupMember] | None = None,
                               regexes: Mapping[str, ResolvedRegex] | None = None) -> set[str]:
        """Topic names the (given) members subscribe to, by name or through a resolved regex."""
        members = self.members.values() if members is None else members
        regexes = self.resolved_regexes if regexes is None else regexes
        names: set[str] = set()
        for m in members:
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex is not None and m.subscribed_topic_regex in regexes:
                names.update(regexes[m.subscribed_topic_regex].topics)
        return names

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether an UNRELEASED_PARTITIONS member still waits for a target partition another member holds."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for tid, ps in self.target_assignment.get(member.member_id, {}).items():
            have = member.assigned.get(tid, frozenset())
            if any(p not in have and self.current_partition_epoch(tid, p) != -1 for p in ps):
                return True
        return False

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but ``member_id`` uses the classic protocol."""
        return all(m.classic is not None for mid, m in self.members.items() if mid != member_id)

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topic_names()

    def preferred_assignor(self, members: Iterable[ConsumerGroupMember], default: str) -> str:
        """The server assignor most members ask for (ties: the first in name order), else ``default``."""
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])

    # ---- replay
    def replay(self, key: Any, value: Any | None) -> None:
        """Apply one consumer-group record (types 3-8, 16) to this group."""
        if isinstance(key, cr.ConsumerGroupMetadataKey):
            if value is None:
                self.deleted = True
            else:
                self.group_epoch = value.epoch
        elif isinstance(key, cr.ConsumerGroupPartitionMetadataKey):
            self.subscription_metadata = {} if value is None else {
                t.topic_name: TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in value.topics}
        elif isinstance(key, cr.ConsumerGroupMemberMetadataKey):
            self._replay_member_metadata(key.member_id, value)
        elif isinstance(key, cr.ConsumerGroupTargetAssignmentMetadataKey):
            self.assignment_epoch = -1 if value is None else value.assignment_epoch
            self.assignment_timestamp_ms = 0 if value is None else value.assignment_timestamp
        elif isinstance(key, cr.ConsumerGroupTargetAssignmentMemberKey):
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                self.target_assignment[key.member_id] = _partitions_of(value.topic_partitions)
        elif isinstance(key, cr.ConsumerGroupCurrentMemberAssignmentKey):
            self._replay_current_assignment(key.member_id, value)
        elif isinstance(key, cr.ConsumerGroupRegularExpressionKey):
            if value is None:
                self.resolved_regexes.pop(key.regular_expression, None)
            else:
                self.resolved_regexes[key.regular_expression] = ResolvedRegex(
                    frozenset(value.topics), value.version, value.timestamp)

    def _replay_member_metadata(self, member_id: str, value: Any | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._set_partition_epochs(old, None)
                del self.members[member_id]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        base = old or ConsumerGroupMember(member_id)
        cm = value.classic_member_metadata
        classic = ClassicMemberMetadata(cm.session_timeout_ms, tuple((p.name, bytes(p.metadata))
                                                                    for p in cm.supported_protocols)) \
            if cm is not None and cm.supported_protocols else None
        member = replace(base, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                         client_host=value.client_host,
                         subscribed_topic_names=tuple(sorted(value.subscribed_topic_names)),
                         subscribed_topic_regex=value.subscribed_topic_regex or None,
                         rebalance_timeout_ms=value.rebalance_timeout_ms,
                         server_assignor=value.server_assignor or None, classic=classic)
        self.members[member_id] = member
        if old is not None and old.instance_id is not None and old.instance_id != member.instance_id \
                and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _replay_current_assignment(self, member_id: str, value: Any | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._set_partition_epochs(old, None)
                self.members[member_id] = replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                  previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                  state=MemberState.STABLE, assigned={}, pending_revocation={})
            return
        base = old or ConsumerGroupMember(member_id)
        member = replace(base, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                         state=MemberState.of(value.state),
                         assigned=_partitions_of(value.assigned_partitions),
                         pending_revocation=_partitions_of(value.partitions_pending_revocation))
        self._set_partition_epochs(old, member)
        self.members[member_id] = member

    def _set_partition_epochs(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None) -> None:
        if old is not None:
            for tid, ps in list(old.assigned.items()) + list(old.pending_revocation.items()):
                for p in ps:
                    if self.partition_epochs.get((tid, p)) == old.member_epoch:
                        del self.partition_epochs[(tid, p)]
        if new is not None:
            for tid, ps in list(new.assigned.items()) + list(new.pending_revocation.items()):
                for p in ps:
                    self.partition_epochs[(tid, p)] = new.member_epoch


def _partitions_of(items: Iterable[Any]) -> dict[bytes, frozenset[int]]:
    out: dict[bytes, frozenset[int]] = {}
    for tp in items:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def can_compute_next_assignment(last_timestamp_ms: int, interval_ms: int, now_ms: int) -> bool:
    """Whether a new target assignment may be computed now (KIP-1263's assignment interval, consumer and share
    groups alike): never computed before (``last_timestamp_ms`` 0), no interval (``interval_ms`` 0), or at least
    ``interval_ms`` since the last computation."""
    return last_timestamp_ms == 0 or interval_ms == 0 or now_ms >= last_timestamp_ms + interval_ms


# ============================================================================================ reconciliation


def owns_any(owned: list[tuple[bytes, list[int]]] | None, partitions: Partitions) -> bool:
    """Whether the heartbeat's owned partitions contain any of ``partitions`` (unknown owned = yes)."""
    if owned is None:
        return True
    for tid, ps in owned:
        held = partitions.get(tid)
        if held and any(p in held for p in ps):
            return True
    return False


def is_subset(owned: list[tuple[bytes, list[int]]] | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    for tid, ps in owned:
        held = assigned.get(tid)
        if held is None or any(p not in held for p in ps):
            return False
    return True


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Partitions,
              partition_epoch: Callable[[bytes, int], int],
              owned: list[tuple[bytes, list[int]]] | None) -> ConsumerGroupMember:
    """The member's next current assignment towards ``target`` of ``target_epoch`` (see the module docstring).
    ``owned``: the heartbeat's owned partitions (None: not sent). Raises :class:`FencedMemberEpoch` for a
    member in an unknown state that still owns partitions."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or owned:
        raise FencedMemberEpoch("the member is in an unknown state; it must give up its partitions and rejoin")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _with_epoch(member: ConsumerGroupMember, epoch: int, **changes: Any) -> ConsumerGroupMember:
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch, **changes)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Partitions,
                     partition_epoch: Callable[[bytes, int], int],
                     owned: list[tuple[bytes, list[int]]] | None) -> ConsumerGroupMember:
    unreleased = False
    keep: dict[bytes, set[int]] = {}
    revoke: dict[bytes, set[int]] = {}
    add: dict[bytes, set[int]] = {}
    for tid in set(target) | set(member.assigned):
        want = target.get(tid, frozenset())
        have = member.assigned.get(tid, frozenset())
        kept = have & want
        if kept:
            keep[tid] = set(kept)
        if have - kept:
            revoke[tid] = set(have - kept)
        new = {p for p in want - kept if partition_epoch(tid, p) == -1}
        if len(new) < len(want - kept):
            unreleased = True
        if new:
            add[tid] = new
    if revoke and owns_any(owned, freeze(revoke)):
        # give up first: same epoch, wait for the member to confirm the revocation
        return _with_epoch(member, member_epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=freeze(keep),
                           pending_revocation=freeze(revoke))
    for tid, ps in add.items():
        keep.setdefault(tid, set()).update(ps)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state=state, assigned=freeze(keep), pending_revocation={})


# ============================================================================================ records


def _topic_partitions(cls: Any, partitions: Partitions) -> list[Any]:
    return [cls(topic_id=tid, partitions=sorted(ps)) for tid, ps in sorted(partitions.items()) if ps]


def group_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupMetadataKey(group_id=group_id),
                             cr.ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=0))


def group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupMetadataKey(group_id=group_id), None)


def subscription_metadata_record(group_id: str, metadata: Mapping[str, TopicMetadata]) -> CoordinatorRecord:
    V = cr.ConsumerGroupPartitionMetadataValue
    return CoordinatorRecord(cr.ConsumerGroupPartitionMetadataKey(group_id=group_id), V(topics=[
        V.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions)
        for _, t in sorted(metadata.items())]))


def subscription_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupPartitionMetadataKey(group_id=group_id), None)


def member_subscription_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    V = cr.ConsumerGroupMemberMetadataValue
    return CoordinatorRecord(cr.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id), V(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
        # an empty struct is the field's default: not written (null, as Kafka writes for consumer members)
        classic_member_metadata=V.ClassicMemberMetadata() if m.classic is None else V.ClassicMemberMetadata(
            session_timeout_ms=m.classic.session_timeout_ms,
            supported_protocols=[V.ClassicProtocol(name=n, metadata=md) for n, md in m.classic.protocols])))


def member_subscription_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)


def target_assignment_epoch_record(group_id: str, epoch: int, timestamp_ms: int = 0) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
                             cr.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch,
                                                                           assignment_timestamp=timestamp_ms))


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), None)


def target_assignment_record(group_id: str, member_id: str, partitions: Partitions) -> CoordinatorRecord:
    V = cr.ConsumerGroupTargetAssignmentMemberValue
    return CoordinatorRecord(cr.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
                             V(topic_partitions=_topic_partitions(V.TopicPartition, partitions)))


def target_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None)


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    V = cr.ConsumerGroupCurrentMemberAssignmentValue
    return CoordinatorRecord(
        cr.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id),
        V(member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=int(m.state),
          assigned_partitions=_topic_partitions(V.TopicPartitions, m.assigned),
          partitions_pending_revocation=_topic_partitions(V.TopicPartitions, m.pending_revocation)))


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None)


def regex_record(group_id: str, regex: str, resolved: ResolvedRegex) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=regex),
                             cr.ConsumerGroupRegularExpressionValue(topics=sorted(resolved.topics),
                                                                    version=resolved.version,
                                                                    timestamp=resolved.timestamp_ms))


def regex_tombstone(group_id: str, regex: str) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ConsumerGroupRegularExpressionKey(group_id=group_id, regular_expression=regex), None)


def remove_member_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [current_assignment_tombstone(group_id, member_id), target_assignment_tombstone(group_id, member_id),
            member_subscription_tombstone(group_id, member_id)]


def group_tombstones(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """Every record of the group, as tombstones (deletion of an empty group)."""
    gid = group.group_id
    records = [current_assignment_tombstone(gid, m) for m in sorted(group.members)]
    records += [target_assignment_tombstone(gid, m) for m in sorted(set(group.members) | set(group.target_assignment))]
    records += [member_subscription_tombstone(gid, m) for m in sorted(group.members)]
    records += [regex_tombstone(gid, r) for r in sorted(group.resolved_regexes)]
    records += [target_assignment_epoch_tombstone(gid), subscription_metadata_tombstone(gid),
                group_epoch_tombstone(gid)]
    return records


CONSUMER_GROUP_KEYS = (cr.ConsumerGroupMetadataKey, cr.ConsumerGroupPartitionMetadataKey,
                       cr.ConsumerGroupMemberMetadataKey, cr.ConsumerGroupTargetAssignmentMetadataKey,
                       cr.ConsumerGroupTargetAssignmentMemberKey, cr.ConsumerGroupCurrentMemberAssignmentKey,
                       cr.ConsumerGroupRegularExpressionKey)
