"""Share groups (KIP-932, as Kafka 4.3 runs them): membership on the group coordinator.

:class:`ShareGroupOps` is a mixin of :class:`~kbroker.coordinator.group.shard.GroupCoordinatorShard` serving
ShareGroupHeartbeat (API 76) and ShareGroupDescribe (API 77), and the share side of ListGroups, DescribeGroups
and DeleteGroups.

Behaviour (Kafka's ``GroupMetadataManager.shareGroupHeartbeat``, re-stated):

* **Validation** -> INVALID_REQUEST: empty group id or member id; empty rack id; joining (epoch 0) without
  subscribed topic names; an epoch below -1.
* **Group**: epoch 0 creates the group; a classic or consumer group of that id -> GROUP_ID_NOT_FOUND ("not a
  share group"). A new member beyond ``group.share.max.size`` -> GROUP_MAX_SIZE_REACHED. Any other epoch for
  an unknown group or member -> UNKNOWN_MEMBER_ID.
* **Member epoch**: share members never revoke partitions, so the member's epoch must equal the coordinator's
  (else FENCED_MEMBER_EPOCH). A subscription change, a member joining or leaving or a change of the subscribed
  topics' partition counts bumps the group epoch; the target assignment is computed again (the simple assignor
  below) and every member moves to the new epoch on its next heartbeat, with its new assignment. As in Kafka, a
  new group starts at group and assignment epoch 1, so its first member gets epoch 2; and the target is computed
  at most once per ``share.assignment.interval.ms`` (group config, else the broker's
  ``group.share.assignment.interval.ms``, 1000 ms; KIP-1263): until then heartbeats answer the last target's
  epoch and partitions (a member that joins meanwhile: that epoch and nothing), and the heartbeat after the
  interval computes the target for the current group epoch.
* **Assignment** (Kafka's share ``SimpleAssignor``, homogeneous case re-stated): every partition of the
  subscribed topics gets at least one member and the members are spread evenly: with at least as many members
  as partitions, member *i* (members sorted by id) gets partition *i mod P*, so a partition is shared by
  several members; with more partitions than members, partition *j* goes to member *j mod M*. A member only
  gets partitions of topics it subscribes to.
* **Response**: member id, epoch, ``group.share.heartbeat.interval.ms`` and the assignment when the member
  joined or its assignment or epoch changed (else null). A member that does not heartbeat within
  ``group.share.session.timeout.ms`` is removed; so is one that leaves with epoch -1. Removing a member calls
  the ``on_share_member_removed`` hook. Its acquired records are not released here: as in Kafka, that happens on
  the partition leaders when its share sessions end or the record locks expire.

State lives in ``__consumer_offsets`` as Kafka's coordinator writes it: ``ShareGroupMemberMetadata`` (type 10),
``ShareGroupMetadata`` (11, the group epoch), ``ShareGroupTargetAssignmentMetadata`` (12),
``ShareGroupTargetAssignmentMember`` (13) and ``ShareGroupCurrentMemberAssignment`` (14); operations return
records and the state changes only when they are replayed, so a coordinator that loads the partition has the
same groups (members get a fresh session timer).

``ShareGroupStatePartitionMetadata`` (type 15, Kafka's record of which partitions of the group have share state):
after a heartbeat the coordinator lists the subscribed partitions not yet initialized (nor initializing since less
than :data:`INITIALIZE_RETRY_INTERVAL_MS`) as *initializing* (:meth:`ShareGroupOps.share_group_initialize_pending`);
the service asks the share coordinators to initialize their state (InitializeShareGroupState, start offset -1:
the partition leader applies ``share.auto.offset.reset`` on first use) and then records them *initialized*
(:meth:`ShareGroupOps.share_group_state_initialized`). AlterShareGroupOffsets records the partitions it set as
initialized, DeleteShareGroupOffsets removes the topics it deleted, DeleteGroups removes the record and passes the
initialized partitions to ``on_share_group_deleted`` (their state is deleted wherever it is kept).
DescribeShareGroupOffsets without topics lists the initialized partitions
(:meth:`ShareGroupOps.share_group_initialized_partitions`), from any node. With ``share_state_gated`` (a broker's
coordinator) the target assignment holds only initialized partitions, as Kafka's: a new member's first assignment
is empty and the partitions come on the heartbeat after their initialization (it bumps the group epoch).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from kbroker.coordinator.group.consumer_group import can_compute_next_assignment
from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    ListGroupsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

log = logging.getLogger(__name__)

SHARE_GROUP_TYPE = "share"
#: ListGroups ``ProtocolType`` of a share group (Kafka's ``ShareGroup.PROTOCOL_TYPE``)
SHARE_PROTOCOL_TYPE = "share"
SHARE_ASSIGNOR_NAME = "simple"
LEAVE_GROUP_MEMBER_EPOCH = -1

Resp = ShareGroupHeartbeatResponse
Described = ShareGroupDescribeResponse
#: topic id -> partitions
Partitions = dict[bytes, frozenset[int]]
#: Kafka's ``group.share.initialize.retry.interval.ms`` default: a partition still *initializing* after this long is
#: initialized again
INITIALIZE_RETRY_INTERVAL_MS = 30_000
#: the share group record keys of ``__consumer_offsets`` (types 10-15)
SHARE_GROUP_KEYS = (cr.ShareGroupMemberMetadataKey, cr.ShareGroupMetadataKey, cr.ShareGroupTargetAssignmentMetadataKey,
                    cr.ShareGroupTargetAssignmentMemberKey, cr.ShareGroupCurrentMemberAssignmentKey,
                    cr.ShareGroupStatePartitionMetadataKey)


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Partitions = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    #: a group without records is at epoch 1 (Kafka's initial group and assignment epoch)
    group_epoch: int = 1
    assignment_epoch: int = 1
    #: when the target was last computed (ms since the epoch; 0: never), record 12's ``AssignmentTimestamp``
    assignment_timestamp_ms: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    #: member id -> target partitions (at ``assignment_epoch``)
    target: dict[str, Partitions] = field(default_factory=dict)
    #: topic name -> (topic id, partition count) the target was computed from
    topics_seen: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


@dataclass
class ShareStatePartitions:
    """A share group's ``ShareGroupStatePartitionMetadata`` (type 15): topic id -> (name, partitions[, since ms])."""

    initializing: dict[bytes, tuple[str, frozenset[int], int]] = field(default_factory=dict)
    initialized: dict[bytes, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: dict[bytes, str] = field(default_factory=dict)

    def record(self, group_id: str) -> CoordinatorRecord:
        V = cr.ShareGroupStatePartitionMetadataValue

        def info(items: Any) -> list[Any]:
            return [V.TopicPartitionsInfo(topic_id=tid, topic_name=v[0], partitions=sorted(v[1]))
                    for tid, v in sorted(items)]

        return CoordinatorRecord(cr.ShareGroupStatePartitionMetadataKey(group_id=group_id), V(
            initializing_topics=info(self.initializing.items()), initialized_topics=info(self.initialized.items()),
            deleting_topics=[V.TopicInfo(topic_id=tid, topic_name=n) for tid, n in sorted(self.deleting.items())]), 0)

    def copy(self) -> ShareStatePartitions:
        return ShareStatePartitions(dict(self.initializing), dict(self.initialized), dict(self.deleting))


def simple_assignment(members: dict[str, ShareGroupMember], topics: dict[str, tuple[bytes, int]],
                      assignable: Partitions | None = None) -> dict[str, Partitions]:
    """The share ``SimpleAssignor`` as described in the module docstring: member id -> topic id -> partitions.
    ``assignable``: only these partitions are assigned (those with initialized share state), else all."""
    out: dict[str, dict[bytes, set[int]]] = {mid: {} for mid in members}
    for name, (tid, count) in sorted(topics.items()):
        subscribers = sorted(mid for mid, m in members.items() if name in m.subscribed_topic_names)
        partitions = list(range(count)) if assignable is None else sorted(
            p for p in assignable.get(tid, ()) if p < count)
        if not subscribers or not partitions:
            continue
        if len(subscribers) >= len(partitions):
            for i, mid in enumerate(subscribers):
                out[mid].setdefault(tid, set()).add(partitions[i % len(partitions)])
        else:
            for i, p in enumerate(partitions):
                out[subscribers[i % len(subscribers)]].setdefault(tid, set()).add(p)
    return {mid: {tid: frozenset(ps) for tid, ps in parts.items()} for mid, parts in out.items()}


def session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


class _HeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _assignment(partitions: Partitions) -> Resp.Assignment:
    return Resp.Assignment(topic_partitions=[Resp.TopicPartitions(topic_id=tid, partitions=sorted(ps))
                                             for tid, ps in sorted(partitions.items())])


class ShareGroupOps:
    """Mixin: the share-group side of the shard. The host provides ``config`` (``share_*`` fields),
    ``timer``, ``loaded``, ``groups`` (classic), ``consumer_groups`` and ``image_provider``. Operations return
    records; state changes only in :meth:`replay_share_group_record`."""

    share_groups: dict[str, ShareGroup]
    #: assign only partitions with initialized share state (record 15), as Kafka does; set when the group
    #: coordinator initializes share state (a broker), off for a coordinator without share coordinators
    share_state_gated: bool = False
    #: called with (group id, member id) when a member leaves or is fenced (set by the broker)
    on_share_member_removed: Callable[[str, str], None] | None = None
    #: called with the group id and its initialized partitions when a share group is deleted (the broker deletes
    #: their share state)
    on_share_group_deleted: Callable[[str, Partitions], None] | None = None

    def _init_share_groups(self) -> None:
        self.share_groups = {}
        #: group id -> its ``ShareGroupStatePartitionMetadata``
        self.share_state_partitions: dict[str, ShareStatePartitions] = {}
        #: the record 15 of a group whose tombstone was replayed before its ``ShareGroupMetadata`` tombstone
        self._share_state_removed: dict[str, ShareStatePartitions] = {}

    def _share_topics(self, names: set[str]) -> dict[str, tuple[bytes, int]]:
        image = self.image_provider() if self.image_provider is not None else None  # type: ignore[attr-defined]
        out = {}
        for name in names:
            t = image.topics_by_name.get(name) if image is not None else None
            if t is not None:
                out[name] = (t.topic_id, len(t.partitions))
        return out

    # ==================================================================================== replay
    def replay_share_group_record(self, record: CoordinatorRecord) -> bool:
        """Apply a share-group record (types 10-15); False if ``record`` is not one."""
        key, value = record.key, record.value
        if not isinstance(key, SHARE_GROUP_KEYS):
            return False
        gid = key.group_id
        if isinstance(key, cr.ShareGroupStatePartitionMetadataKey):
            if value is None:
                removed = self.share_state_partitions.pop(gid, None)
                if removed is not None:
                    self._share_state_removed[gid] = removed
            else:
                now = self.now_ms()  # type: ignore[attr-defined]
                self.share_state_partitions[gid] = ShareStatePartitions(
                    {t.topic_id: (t.topic_name, frozenset(t.partitions), now) for t in value.initializing_topics},
                    {t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initialized_topics},
                    {t.topic_id: t.topic_name for t in value.deleting_topics})
            return True
        group = self.share_groups.get(gid)
        if group is None:
            if value is None:
                return True
            group = self.share_groups[gid] = ShareGroup(gid)
            self.groups.pop(gid, None)  # type: ignore[attr-defined]  # an empty classic group gave way
        if isinstance(key, cr.ShareGroupMetadataKey):
            if value is None:
                for mid in list(group.members):
                    self.timer.cancel(session_key(gid, mid))  # type: ignore[attr-defined]
                del self.share_groups[gid]
                removed = self._share_state_removed.pop(gid, None) or self.share_state_partitions.pop(gid, None)
                if self.on_share_group_deleted is not None and self.loaded:  # type: ignore[attr-defined]
                    self.on_share_group_deleted(gid, {tid: ps for tid, (_, ps) in removed.initialized.items()}
                                                if removed is not None else {})
            else:
                group.group_epoch = value.epoch
        elif isinstance(key, cr.ShareGroupMemberMetadataKey):
            if value is None:
                if group.members.pop(key.member_id, None) is not None:
                    group.target.pop(key.member_id, None)
                    self.timer.cancel(session_key(gid, key.member_id))  # type: ignore[attr-defined]
                    self._share_member_gone(gid, key.member_id)
            else:
                m = group.members.get(key.member_id) or ShareGroupMember(key.member_id)
                m.rack_id = value.rack_id or None
                m.client_id, m.client_host = value.client_id, value.client_host
                m.subscribed_topic_names = tuple(value.subscribed_topic_names)
                group.members[key.member_id] = m
        elif isinstance(key, cr.ShareGroupTargetAssignmentMetadataKey):
            if value is not None:
                group.assignment_epoch = value.assignment_epoch
                group.assignment_timestamp_ms = value.assignment_timestamp
                # what the target was computed from (in memory only; Kafka keeps a hash in ShareGroupMetadata)
                group.topics_seen = self._share_topics(group.subscribed_topics())
        elif isinstance(key, cr.ShareGroupTargetAssignmentMemberKey):
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = _partitions_of(value.topic_partitions)
        elif isinstance(key, cr.ShareGroupCurrentMemberAssignmentKey):
            m = group.members.get(key.member_id)
            if value is not None:
                if m is None:
                    m = group.members[key.member_id] = ShareGroupMember(key.member_id)
                m.member_epoch = value.member_epoch
                m.assigned = _partitions_of(value.assigned_partitions)
        return True

    def _share_member_gone(self, group_id: str, member_id: str) -> None:
        hook = self.on_share_member_removed
        if hook is not None and self.loaded:  # type: ignore[attr-defined]
            try:
                hook(group_id, member_id)
            except Exception:  # noqa: BLE001 - the hook must not break the coordinator
                log.exception("share group %s: member removal hook failed", group_id)

    def _share_groups_loaded(self) -> None:
        """After loading: every member gets a session timer; the topics the targets were computed from are
        taken from the current image (a change while the group was not served shows on the next heartbeat)."""
        for group in self.share_groups.values():
            group.topics_seen = self._share_topics(group.subscribed_topics())
            for mid in group.members:
                self._schedule_share_session_timeout(group.group_id, mid)

    # ==================================================================================== heartbeat
    def share_group_heartbeat(self, meta: Any, request: ShareGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        try:
            return self._share_group_heartbeat(meta, request)
        except _HeartbeatError as exc:
            return CoordinatorResult(response=Resp(error_code=exc.code, error_message=exc.message))

    def _share_group_heartbeat(self, meta: Any, r: ShareGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        config = self.config  # type: ignore[attr-defined]
        if not r.group_id:
            raise _HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if not r.member_id:
            raise _HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if r.rack_id == "":
            raise _HeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        epoch = r.member_epoch
        if epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise _HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
        if epoch == 0 and not r.subscribed_topic_names:
            raise _HeartbeatError(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        gid = r.group_id
        records: list[CoordinatorRecord] = []
        if gid in self.consumer_groups or gid in getattr(self, "streams_groups", {}):  # type: ignore[attr-defined]
            raise _HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        classic = self.groups.get(gid)  # type: ignore[attr-defined]
        if classic is not None:
            if classic.members or epoch != 0:
                raise _HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
            from kbroker.coordinator.group.records import group_metadata_tombstone
            records.append(group_metadata_tombstone(gid))  # an empty classic group makes way
        group = self.share_groups.get(gid)
        if epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or r.member_id not in group.members:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                      f"Member {r.member_id} is not a member of group {gid}.")
            return CoordinatorResult(
                self._remove_share_member_records(group, r.member_id),
                Resp(member_id=r.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                     heartbeat_interval_ms=config.share_group_heartbeat_interval_ms))
        if group is None:
            if epoch != 0:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {gid} not found.")
            group = ShareGroup(gid)  # created by the replay of the records below
        old = group.members.get(r.member_id)
        if old is None:
            if epoch != 0:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                      f"Member {r.member_id} is not a member of group {gid}.")
            if len(group.members) >= config.share_group_max_size:
                raise _HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                      f"The share group has reached its maximum capacity of "
                                      f"{config.share_group_max_size} members.")
        elif epoch != old.member_epoch and epoch != 0:
            raise _HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The share group member has a different member epoch ({epoch}) than the one "
                                  f"known by the group coordinator ({old.member_epoch}).")
        member = replace(old) if old is not None else ShareGroupMember(
            r.member_id, client_id=meta.client_id, client_host=meta.client_host)
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(r.subscribed_topic_names)))
        bump = old is None or member.subscribed_topic_names != old.subscribed_topic_names
        if old is None or (member.rack_id, member.subscribed_topic_names) != (old.rack_id,
                                                                               old.subscribed_topic_names):
            records.append(_member_record(gid, member))
        members = dict(group.members)
        members[member.member_id] = member
        topics = self._share_topics({t for m in members.values() for t in m.subscribed_topic_names})
        # changed topics or newly initialized partitions bump the epoch, unless a new target is already due
        pending = group.group_epoch > group.assignment_epoch
        if topics != group.topics_seen and not pending:
            bump = True
        assignable = None
        if self.share_state_gated:  # only partitions with share state are assigned (Kafka)
            assignable = self.share_group_initialized_partitions(gid)
            bump = bump or (not pending and self._initialized_assignment_pending(group, topics, assignable))
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        if bump:
            records.append(CoordinatorRecord(cr.ShareGroupMetadataKey(group_id=gid),
                                             cr.ShareGroupMetadataValue(epoch=group_epoch), 0))
        target = group.target
        assignment_epoch = group.assignment_epoch
        # at most once per share.assignment.interval.ms (KIP-1263); until then the last target stands
        interval_ms = int(self.group_config(gid)["share.assignment.interval.ms"])  # type: ignore[attr-defined, call-overload]
        now = self.now_ms()  # type: ignore[attr-defined]
        if assignment_epoch < group_epoch and can_compute_next_assignment(group.assignment_timestamp_ms,
                                                                          interval_ms, now):
            target = simple_assignment(members, topics, assignable)
            for mid, parts in sorted(target.items()):
                if group.target.get(mid) != parts:
                    records.append(CoordinatorRecord(
                        cr.ShareGroupTargetAssignmentMemberKey(group_id=gid, member_id=mid),
                        cr.ShareGroupTargetAssignmentMemberValue(topic_partitions=[
                            cr.ShareGroupTargetAssignmentMemberValue.TopicPartition(topic_id=t, partitions=sorted(ps))
                            for t, ps in sorted(parts.items())]), 0))
            assignment_epoch = group_epoch
            records.append(CoordinatorRecord(
                cr.ShareGroupTargetAssignmentMetadataKey(group_id=gid),
                cr.ShareGroupTargetAssignmentMetadataValue(assignment_epoch=assignment_epoch,
                                                           assignment_timestamp=now), 0))
        changed = epoch == 0 or r.subscribed_topic_names is not None  # Kafka: a full request gets the assignment
        new_assigned = target.get(member.member_id, {})
        if member.member_epoch != assignment_epoch or member.assigned != new_assigned or old is None:
            previous = member.member_epoch
            member.member_epoch = assignment_epoch
            member.assigned = new_assigned
            records.append(CoordinatorRecord(
                cr.ShareGroupCurrentMemberAssignmentKey(group_id=gid, member_id=member.member_id),
                cr.ShareGroupCurrentMemberAssignmentValue(
                    member_epoch=member.member_epoch, previous_member_epoch=previous, state=0,
                    assigned_partitions=[cr.ShareGroupCurrentMemberAssignmentValue.TopicPartitions(
                        topic_id=t, partitions=sorted(ps)) for t, ps in sorted(new_assigned.items())]), 0))
            changed = True
        self._schedule_share_session_timeout(gid, member.member_id)
        return CoordinatorResult(records, Resp(
            member_id=member.member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=config.share_group_heartbeat_interval_ms,
            assignment=_assignment(member.assigned) if changed else None))

    @staticmethod
    def _initialized_assignment_pending(group: ShareGroup, topics: dict[str, tuple[bytes, int]],
                                        assignable: Partitions) -> bool:
        """Whether partitions of the subscribed topics got share state since the target was computed (Kafka's
        ``initializedAssignmentPending``): the group epoch is bumped so that they are assigned."""
        if not group.members or not assignable:
            return False
        assigned: dict[bytes, set[int]] = {}
        for parts in group.target.values():
            for tid, ps in parts.items():
                assigned.setdefault(tid, set()).update(ps)
        return any(tid in assignable and assigned.get(tid, set()) != set(assignable[tid])
                   for tid, _ in topics.values())

    def _remove_share_member_records(self, group: ShareGroup, member_id: str) -> list[CoordinatorRecord]:
        """Tombstones of the member's records (current assignment, target, metadata) and the next group epoch."""
        gid = group.group_id
        self.timer.cancel(session_key(gid, member_id))  # type: ignore[attr-defined]
        return [CoordinatorRecord(cr.ShareGroupCurrentMemberAssignmentKey(group_id=gid, member_id=member_id), None),
                CoordinatorRecord(cr.ShareGroupTargetAssignmentMemberKey(group_id=gid, member_id=member_id), None),
                CoordinatorRecord(cr.ShareGroupMemberMetadataKey(group_id=gid, member_id=member_id), None),
                CoordinatorRecord(cr.ShareGroupMetadataKey(group_id=gid),
                                  cr.ShareGroupMetadataValue(epoch=group.group_epoch + 1), 0)]

    def _schedule_share_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timer.schedule(session_key(group_id, member_id),  # type: ignore[attr-defined]
                            self.config.share_group_session_timeout_ms,  # type: ignore[attr-defined]
                            lambda: self._on_share_session_timeout(group_id, member_id))

    def _on_share_session_timeout(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.share_groups.get(group_id)
        if group is None or member_id not in group.members:
            return CoordinatorResult()
        log.info("share group %s: member %s removed: no heartbeat within %d ms", group_id, member_id,
                 self.config.share_group_session_timeout_ms)  # type: ignore[attr-defined]
        return CoordinatorResult(self._remove_share_member_records(group, member_id))

    def share_groups_unloaded(self) -> None:
        for group in self.share_groups.values():
            for mid in group.members:
                self.timer.cancel(session_key(group.group_id, mid))  # type: ignore[attr-defined]

    # ==================================================================================== describe, list
    def share_group_describe(self, group_id: str, include_authorized_operations: bool,
                             authorized_operations: int) -> Described.DescribedGroup:
        group = self.share_groups.get(group_id)
        if group is None:
            known = group_id in self.groups or group_id in self.consumer_groups  # type: ignore[attr-defined]
            message = f"Group {group_id} is not a share group." if known else f"Group {group_id} not found."
            return Described.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message,
                                            group_id=group_id)
        image = self.image_provider() if self.image_provider is not None else None  # type: ignore[attr-defined]

        def tps(partitions: Partitions) -> Described.Assignment:
            out = []
            for tid, ps in sorted(partitions.items()):
                t = image.topics_by_id.get(tid) if image is not None else None
                if t is not None:
                    out.append(Described.TopicPartitions(topic_id=tid, topic_name=t.name, partitions=sorted(ps)))
            return Described.Assignment(topic_partitions=out)

        members = [Described.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                                    client_id=m.client_id, client_host=m.client_host,
                                    subscribed_topic_names=list(m.subscribed_topic_names), assignment=tps(m.assigned))
                   for m in group.members.values()]
        return Described.DescribedGroup(
            group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=SHARE_ASSIGNOR_NAME, members=members,
            authorized_operations=authorized_operations if include_authorized_operations else -2147483648)

    def list_share_groups(self, states: set[str] | None,
                          types: set[str] | None) -> list[ListGroupsResponse.ListedGroup]:
        if types and SHARE_GROUP_TYPE not in types:
            return []
        out = []
        for group in self.share_groups.values():
            state = group.state.value
            if states and state.lower() not in states:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=group.group_id, protocol_type=SHARE_PROTOCOL_TYPE,
                                                      group_state=state, group_type=SHARE_GROUP_TYPE))
        return out

    def share_group_admin_check(self, group_id: str, need_empty: bool) -> tuple[int, str | None]:
        """For the share-group offset APIs: (NONE, None), or GROUP_ID_NOT_FOUND (no share group of that id),
        NON_EMPTY_GROUP (``need_empty`` and the group has members), with a message."""
        group = self.share_groups.get(group_id)
        if group is None:
            known = group_id in self.groups or group_id in self.consumer_groups  # type: ignore[attr-defined]
            return ErrorCode.GROUP_ID_NOT_FOUND, (f"Group {group_id} is not a share group." if known
                                                  else f"Group {group_id} not found.")
        if need_empty and group.members:
            return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
        return ErrorCode.NONE, None

    def share_group_create_for_offsets(self, group_id: str) -> CoordinatorResult[tuple[int, str | None]]:
        """AlterShareGroupOffsets of a group id nobody uses: an empty share group is created (its
        ``ShareGroupMetadata`` record at epoch 0), as Kafka's coordinator does; then the admin check."""
        known = group_id in self.groups or group_id in self.consumer_groups  # type: ignore[attr-defined]
        if group_id in self.share_groups or known:
            return CoordinatorResult(response=self.share_group_admin_check(group_id, need_empty=True))
        return CoordinatorResult(records=[CoordinatorRecord(cr.ShareGroupMetadataKey(group_id=group_id),
                                                            cr.ShareGroupMetadataValue(epoch=0), 0)],
                                 response=(ErrorCode.NONE, None))

    # ==================================================================================== share state (record 15)
    def share_group_initialize_pending(self, group_id: str) -> CoordinatorResult[Partitions]:
        """The partitions of the topics the group's members subscribe to whose share state is neither initialized
        nor being initialized (for less than :data:`INITIALIZE_RETRY_INTERVAL_MS`): recorded as *initializing*, and
        returned for the service to initialize (Kafka's ``subscribedTopicsChangeMap``)."""
        group = self.share_groups.get(group_id)
        if group is None or not group.members:
            return CoordinatorResult(response={})
        now = self.now_ms()  # type: ignore[attr-defined]
        current = self.share_state_partitions.get(group_id) or ShareStatePartitions()
        change: dict[bytes, tuple[str, frozenset[int], int]] = {}
        for name, (tid, count) in self._share_topics(group.subscribed_topics()).items():
            done = set(current.initialized.get(tid, ("", frozenset()))[1])
            pending = current.initializing.get(tid)
            if pending is not None and now - pending[2] < INITIALIZE_RETRY_INTERVAL_MS:
                done |= pending[1]
            missing = frozenset(range(count)) - done
            if missing:
                change[tid] = (name, missing, now)
        if not change:
            return CoordinatorResult(response={})
        st = current.copy()
        for tid, (name, ps, ts) in change.items():
            old = st.initializing.get(tid)
            st.initializing[tid] = (name, ps | (old[1] if old is not None else frozenset()), ts)
            st.deleting.pop(tid, None)
        return CoordinatorResult([st.record(group_id)], {tid: ps for tid, (_, ps, _) in change.items()})

    def share_group_initialize_failed(self, group_id: str, partitions: Partitions) -> CoordinatorResult[None]:
        """Initializing ``partitions`` failed (a share coordinator loading or moving, say): they are no longer
        *initializing*, so the group's next heartbeat asks for them again at once rather than after
        :data:`INITIALIZE_RETRY_INTERVAL_MS`, which remains for an initialization that never answers."""
        current = self.share_state_partitions.get(group_id)
        if group_id not in self.share_groups or current is None or not partitions:
            return CoordinatorResult()
        st = current.copy()
        changed = False
        for tid, ps in partitions.items():
            pending = st.initializing.get(tid)
            if pending is None or not pending[1] & frozenset(ps):
                continue
            changed = True
            left = pending[1] - frozenset(ps)
            if left:
                st.initializing[tid] = (pending[0], left, pending[2])
            else:
                del st.initializing[tid]
        return CoordinatorResult([st.record(group_id)]) if changed else CoordinatorResult()

    def share_group_state_initialized(self, group_id: str, partitions: Partitions) -> CoordinatorResult[None]:
        """``partitions`` have share state now (initialized by the share coordinators, or set by
        AlterShareGroupOffsets): recorded as *initialized* (Kafka's ``initializeShareGroupState``)."""
        if group_id not in self.share_groups or not partitions:
            return CoordinatorResult()
        image = self.image_provider() if self.image_provider is not None else None  # type: ignore[attr-defined]
        st = (self.share_state_partitions.get(group_id) or ShareStatePartitions()).copy()
        for tid, ps in partitions.items():
            t = image.topics_by_id.get(tid) if image is not None else None
            name = t.name if t is not None else st.initialized.get(tid, (st.deleting.get(tid, ""),))[0]
            st.initialized[tid] = (name, frozenset(ps) | st.initialized.get(tid, ("", frozenset()))[1])
            pending = st.initializing.pop(tid, None)
            if pending is not None and pending[1] - frozenset(ps):
                st.initializing[tid] = (pending[0], pending[1] - frozenset(ps), pending[2])
            st.deleting.pop(tid, None)
        return CoordinatorResult([st.record(group_id)])

    def share_group_state_deleted(self, group_id: str, topic_ids: list[bytes]) -> CoordinatorResult[None]:
        """DeleteShareGroupOffsets deleted the share state of these topics: they leave record 15."""
        current = self.share_state_partitions.get(group_id)
        if current is None or not any(t in current.initialized or t in current.initializing or t in current.deleting
                                      for t in topic_ids):
            return CoordinatorResult()
        st = current.copy()
        for tid in topic_ids:
            st.initialized.pop(tid, None)
            st.initializing.pop(tid, None)
            st.deleting.pop(tid, None)
        return CoordinatorResult([st.record(group_id)])

    def share_group_initialized_partitions(self, group_id: str) -> Partitions:
        """The group's partitions with initialized share state (record 15)."""
        st = self.share_state_partitions.get(group_id)
        return {tid: ps for tid, (_, ps) in st.initialized.items()} if st is not None else {}

    def share_group_tombstones(self, group_id: str) -> tuple[int, list[CoordinatorRecord]]:
        """DeleteGroups of a share group: (NONE and the group's tombstones) or (NON_EMPTY_GROUP, [])."""
        group = self.share_groups[group_id]
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP, []
        return ErrorCode.NONE, [
            CoordinatorRecord(cr.ShareGroupStatePartitionMetadataKey(group_id=group_id), None),
            CoordinatorRecord(cr.ShareGroupTargetAssignmentMetadataKey(group_id=group_id), None),
            CoordinatorRecord(cr.ShareGroupMetadataKey(group_id=group_id), None)]


def _member_record(group_id: str, m: ShareGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(cr.ShareGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id),
                             cr.ShareGroupMemberMetadataValue(rack_id=m.rack_id, client_id=m.client_id,
                                                              client_host=m.client_host,
                                                              subscribed_topic_names=list(m.subscribed_topic_names)),
                             0)


def _partitions_of(items: Any) -> Partitions:
    out: dict[bytes, frozenset[int]] = {}
    for tp in items:
        out[tp.topic_id] = frozenset(tp.partitions)
    return out
