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
  below) and every member moves to the new epoch on its next heartbeat, with its new assignment.
* **Assignment** (Kafka's share ``SimpleAssignor``, homogeneous case re-stated): every partition of the
  subscribed topics gets at least one member and the members are spread evenly: with at least as many members
  as partitions, member *i* (members sorted by id) gets partition *i mod P*, so a partition is shared by
  several members; with more partitions than members, partition *j* goes to member *j mod M*. A member only
  gets partitions of topics it subscribes to.
* **Response**: member id, epoch, ``group.share.heartbeat.interval.ms`` and the assignment when the member
  joined or its assignment or epoch changed (else null). A member that does not heartbeat within
  ``group.share.session.timeout.ms`` is removed; so is one that leaves with epoch -1. Removing a member calls
  the ``on_share_member_removed`` hook (the broker releases the records it had acquired here).

State is kept in memory: the share group records (``ShareGroupMetadata``, ``ShareGroupMemberMetadata``, ...)
are not written to ``__consumer_offsets``; after a coordinator move or restart the members rejoin (their
heartbeats get UNKNOWN_MEMBER_ID and they join again with epoch 0), as KIP-932 members do after fencing.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from kbroker.coordinator.runtime import CoordinatorResult
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
    group_epoch: int = 0
    assignment_epoch: int = 0
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


def simple_assignment(members: dict[str, ShareGroupMember],
                      topics: dict[str, tuple[bytes, int]]) -> dict[str, Partitions]:
    """The share ``SimpleAssignor`` as described in the module docstring: member id -> topic id -> partitions."""
    out: dict[str, dict[bytes, set[int]]] = {mid: {} for mid in members}
    for name, (tid, count) in sorted(topics.items()):
        subscribers = sorted(mid for mid, m in members.items() if name in m.subscribed_topic_names)
        if not subscribers or count <= 0:
            continue
        if len(subscribers) >= count:
            for i, mid in enumerate(subscribers):
                out[mid].setdefault(tid, set()).add(i % count)
        else:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(tid, set()).add(p)
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
    ``timer``, ``groups`` (classic), ``consumer_groups`` and ``image_provider``."""

    share_groups: dict[str, ShareGroup]
    #: called with (group id, member id) when a member leaves or is fenced (set by the broker)
    on_share_member_removed: Callable[[str, str], None] | None = None

    def _init_share_groups(self) -> None:
        self.share_groups = {}

    def _share_topics(self, names: set[str]) -> dict[str, tuple[bytes, int]]:
        image = self.image_provider() if self.image_provider is not None else None  # type: ignore[attr-defined]
        out = {}
        for name in names:
            t = image.topics_by_name.get(name) if image is not None else None
            if t is not None:
                out[name] = (t.topic_id, len(t.partitions))
        return out

    # ==================================================================================== heartbeat
    def share_group_heartbeat(self, meta: Any, request: ShareGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        try:
            return CoordinatorResult(response=self._share_group_heartbeat(meta, request))
        except _HeartbeatError as exc:
            return CoordinatorResult(response=Resp(error_code=exc.code, error_message=exc.message))

    def _share_group_heartbeat(self, meta: Any, r: ShareGroupHeartbeatRequest) -> Resp:
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
        if gid in self.consumer_groups or gid in self.groups:  # type: ignore[attr-defined]
            classic = self.groups.get(gid)  # type: ignore[attr-defined]
            if classic is None or classic.members or gid in self.consumer_groups:  # type: ignore[attr-defined]
                raise _HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        group = self.share_groups.get(gid)
        if epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if group is None or r.member_id not in group.members:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                      f"Member {r.member_id} is not a member of group {gid}.")
            self._remove_share_member(group, r.member_id)
            return Resp(member_id=r.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        heartbeat_interval_ms=config.share_group_heartbeat_interval_ms)
        if group is None:
            if epoch != 0:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {gid} not found.")
            group = ShareGroup(gid)
            self.share_groups[gid] = group
            self.groups.pop(gid, None)  # type: ignore[attr-defined]  # an empty classic group gives way
        member = group.members.get(r.member_id)
        bump = False
        if member is None:
            if epoch != 0:
                raise _HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                      f"Member {r.member_id} is not a member of group {gid}.")
            if len(group.members) >= config.share_group_max_size:
                raise _HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                      f"The share group has reached its maximum capacity of "
                                      f"{config.share_group_max_size} members.")
            member = ShareGroupMember(r.member_id, client_id=meta.client_id, client_host=meta.client_host)
            group.members[r.member_id] = member
            bump = True
        elif epoch != member.member_epoch and epoch != 0:
            raise _HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                  f"The share group member has a different member epoch ({epoch}) than the one "
                                  f"known by the group coordinator ({member.member_epoch}).")
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.subscribed_topic_names is not None:
            names = tuple(sorted(set(r.subscribed_topic_names)))
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                bump = True
        topics = self._share_topics(group.subscribed_topics())
        if topics != group.topics_seen:
            bump = True
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            group.topics_seen = topics
            group.target = simple_assignment(group.members, topics)
            group.assignment_epoch = group.group_epoch
        changed = epoch == 0
        target = group.target.get(member.member_id, {})
        if member.member_epoch != group.assignment_epoch or member.assigned != target:
            member.member_epoch = group.assignment_epoch
            member.assigned = target
            changed = True
        self._schedule_share_session_timeout(gid, member.member_id)
        return Resp(member_id=member.member_id, member_epoch=member.member_epoch,
                    heartbeat_interval_ms=config.share_group_heartbeat_interval_ms,
                    assignment=_assignment(member.assigned) if changed else None)

    def _remove_share_member(self, group: ShareGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        group.group_epoch += 1
        self.timer.cancel(session_key(group.group_id, member_id))  # type: ignore[attr-defined]
        hook = self.on_share_member_removed
        if hook is not None:
            try:
                hook(group.group_id, member_id)
            except Exception:  # noqa: BLE001 - the hook must not break the coordinator
                log.exception("share group %s: member removal hook failed", group.group_id)

    def _schedule_share_session_timeout(self, group_id: str, member_id: str) -> None:
        self.timer.schedule(session_key(group_id, member_id),  # type: ignore[attr-defined]
                            self.config.share_group_session_timeout_ms,  # type: ignore[attr-defined]
                            lambda: self._on_share_session_timeout(group_id, member_id))

    def _on_share_session_timeout(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.share_groups.get(group_id)
        if group is not None and member_id in group.members:
            log.info("share group %s: member %s removed: no heartbeat within %d ms", group_id, member_id,
                     self.config.share_group_session_timeout_ms)  # type: ignore[attr-defined]
            self._remove_share_member(group, member_id)
        return CoordinatorResult()

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

    def delete_share_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: NONE (deleted), NON_EMPTY_GROUP."""
        group = self.share_groups[group_id]
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.share_groups[group_id]
        return ErrorCode.NONE
