"""``GroupCoordinatorShard``: the groups and committed offsets of one ``__consumer_offsets`` partition.

Every public operation takes the parsed request and returns a :class:`CoordinatorResult`; the runtime appends
its records and replays them (:meth:`GroupCoordinatorShard.replay`). JoinGroup and SyncGroup answer through a
*responder* (a callable taking the response), because their answer may be parked until the rebalance moves
on; every other operation returns its response in the result.

Classic group protocol (the behaviour of Kafka's group coordinator, re-stated here):

* **JoinGroup** without a member id: a static member (``group.instance.id``) gets ``<instance id>-<uuid>`` and
  joins at once (replacing the previous member id of that instance, if any); a dynamic member gets
  ``<client id>-<uuid>`` and, from v4 on, is first answered MEMBER_ID_REQUIRED and kept as a *pending* member
  until it joins again with that id (or its session timeout passes). Joining (or rejoining with new metadata,
  or as the leader) starts a rebalance: the group goes to PreparingRebalance and JoinGroups are parked until
  every member rejoined or the rebalance timeout (the largest of the members') passed; then dynamic members
  that did not rejoin are removed, the generation goes up, the protocol is chosen by vote among those every
  member supports, and everybody is answered (the leader with the member list).
  The first rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` instead (never longer than
  the rebalance timeout), extended by the same delay while new members keep arriving in generation 0.
* **SyncGroup**: followers are parked until the leader's assignment is stored (a ``GroupMetadata`` record);
  then every parked SyncGroup gets its member's assignment and the group is Stable. Members that do not send
  SyncGroup within the rebalance timeout are removed.
* **Heartbeat** keeps a member alive for its session timeout; REBALANCE_IN_PROGRESS tells it to rejoin.
  Members with a parked JoinGroup or SyncGroup do not expire.
* **LeaveGroup** removes members (by member id or, for static members, by instance id) and starts a rebalance.
* Errors: unknown group or member -> UNKNOWN_MEMBER_ID; another member id for a known instance id ->
  FENCED_INSTANCE_ID; wrong generation -> ILLEGAL_GENERATION; no common protocol -> INCONSISTENT_GROUP_PROTOCOL.

Committed offsets: OffsetCommit validates the member like a heartbeat (a commit with generation -1 and no
member is accepted only while the group is Empty, and creates a "simple" group if none exists), rejects
metadata longer than ``offset.metadata.max.bytes`` with OFFSET_METADATA_TOO_LARGE, and answers
REBALANCE_IN_PROGRESS in CompletingRebalance. Offsets of an Empty group expire ``offsets.retention.minutes``
after the group became empty (or after the commit, for groups that never had members); offsets of topics a
``consumer`` group no longer subscribes to expire that long after their commit. An empty group without
offsets is deleted.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from kbroker.coordinator.group.classic_group import (
    CONSUMER_PROTOCOL_TYPE,
    GROUP_TYPE_CLASSIC,
    ClassicGroup,
    ClassicGroupEvent,
    ClassicGroupMember,
    ClassicGroupState,
    JoinResponder,
    SyncResponder,
)
from kbroker.coordinator.group.config import GroupCoordinatorConfig, group_config
from kbroker.coordinator.group.consumer_ops import ConsumerGroupOps
from kbroker.coordinator.group.migration import ClassicMigrationOps
from kbroker.coordinator.group.share_group import ShareGroupOps
from kbroker.coordinator.group.streams_group import StreamsGroupOps
from kbroker.coordinator.group.records import (
    group_metadata_record,
    group_metadata_tombstone,
    offset_commit_record,
    offset_commit_tombstone,
)
from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult, CoordinatorTimer
from kbroker.protocol.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    LegacyOffsetCommitKey,
    OffsetCommitKey,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kbroker.protocol.schema import ZERO_UUID

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
OFFSETS_EXPIRATION_KEY = "offsets-expiration"
#: Delay before retrying the end of a rebalance whose record could not be written.
RETRY_BACKOFF_MS = 500
#: Authorized operations of a group when asked for (no authorizer): READ(3), DELETE(6), DESCRIBE(8),
#: DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11) (Kafka's AclEntry.supportedOperations(GROUP)).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
NOT_REQUESTED_OPERATIONS = -2147483648


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def java_string_length(s: str) -> int:
    """``String.length()`` of Java (UTF-16 code units), which ``offset.metadata.max.bytes`` is checked against."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None
    topic_id: bytes = ZERO_UUID


@dataclass(frozen=True, slots=True)
class RequestMeta:
    """What an operation needs to know about the request besides its body."""

    api_version: int
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class CommitPartition:
    """One partition of an OffsetCommit (the service resolves topic ids / names before)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    topic_id: bytes = ZERO_UUID
    error_code: int = ErrorCode.NONE


@dataclass(slots=True)
class OffsetCommitInput:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int
    partitions: list[CommitPartition]


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    committed_offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error_code: int = ErrorCode.NONE


def _join_error(code: int, member_id: str = UNKNOWN_MEMBER_ID) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, generation_id=NO_GENERATION, protocol_type=None, protocol_name=None,
                             leader="", member_id=member_id, members=[])


def _sync_error(code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, protocol_type=None, protocol_name=None, assignment=b"")


result_counter = itertools.count().__next__


def _empty() -> CoordinatorResult[Any]:
    return CoordinatorResult()


class GroupCoordinatorShard(ConsumerGroupOps, ClassicMigrationOps, ShareGroupOps, StreamsGroupOps):
    """Groups and offsets of one partition (see the module docstring); consumer groups (KIP-848) come from
    :class:`~kbroker.coordinator.group.consumer_ops.ConsumerGroupOps`."""

    def __init__(self, partition: int, config: GroupCoordinatorConfig, timer: CoordinatorTimer,
                 now_ms: Callable[[], int], new_member_id: Callable[[str], str] | None = None,
                 image_provider: Callable[[], Any] | None = None) -> None:
        self.partition = partition
        self.config = config
        self.timer = timer
        self.now_ms = now_ms
        self.new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        #: producer id -> group id -> (topic, partition) -> OffsetCommitValue of an open transaction
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], Any]]] = {}
        self.groups: dict[str, ClassicGroup] = {}
        #: group id -> topic -> partition -> committed offset
        self.offsets: dict[str, dict[str, dict[int, OffsetAndMetadata]]] = {}
        self.loaded = False
        #: the current metadata image (topic names, ids and partition counts for consumer groups)
        self.image_provider = image_provider
        self._init_consumer_groups()
        self._init_share_groups()
        self._init_streams_groups()

    def group_config(self, group_id: str) -> dict[str, object]:
        """Effective group configs of ``group_id`` (:func:`kbroker.coordinator.group.config.group_config`): the
        group's dynamic configs from the current metadata image, else the broker's values."""
        image = self.image_provider() if self.image_provider is not None else None
        return group_config(image, self.config.group_config_defaults(), group_id)

    # ==================================================================================== replay
    def replay(self, offset: int, producer_id: int, producer_epoch: int, record: CoordinatorRecord) -> None:
        key = record.key
        if producer_id >= 0 and isinstance(key, OffsetCommitKey):
            # a TxnOffsetCommit: pending until the transaction's marker (replay_end_transaction)
            self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(key.group, {})[
                (key.topic, key.partition)] = record.value
            return
        if isinstance(key, (OffsetCommitKey, LegacyOffsetCommitKey)):
            self._replay_offset_commit(key.group, key.topic, key.partition, record.value)
        elif isinstance(key, GroupMetadataKey):
            self._replay_group_metadata(key.group, record.value)
        elif not self.replay_share_group_record(record) and not self.replay_streams_group_record(record):
            # (share groups: KIP-932 records 10-15; streams groups: KIP-1071 records 17-23)
            self.replay_consumer_group_record(record)  # KIP-848 consumer group records (types 3-8, 16)

    def _replay_offset_commit(self, group_id: str, topic: str, partition: int, value: Any) -> None:
        if value is None:
            topics = self.offsets.get(group_id)
            if topics is not None and topic in topics:
                topics[topic].pop(partition, None)
                if not topics[topic]:
                    del topics[topic]
                if not topics:
                    del self.offsets[group_id]
            return
        if group_id not in self.groups and group_id not in self.consumer_groups and group_id not in self.share_groups \
                and group_id not in self.streams_groups:
            # a commit outside group management creates a "simple" group (Empty, no protocol type)
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=-1)
        expire = getattr(value, "expire_timestamp", -1)
        self.offsets.setdefault(group_id, {}).setdefault(topic, {})[partition] = OffsetAndMetadata(
            committed_offset=value.offset, leader_epoch=getattr(value, "leader_epoch", -1),
            metadata=value.metadata or "", commit_timestamp_ms=value.commit_timestamp,
            expire_timestamp_ms=expire if expire is not None and expire >= 0 else None,
            topic_id=getattr(value, "topic_id", ZERO_UUID))

    def _replay_group_metadata(self, group_id: str, value: GroupMetadataValue | None) -> None:
        group = self.groups.get(group_id)
        if value is None:
            if group is None:
                return
            del self.groups[group_id]
            if self.loaded:
                group.transition(ClassicGroupEvent.DELETE, self.now_ms())
                self._drop_members(group, list(group.members.values()), ErrorCode.COORDINATOR_NOT_AVAILABLE)
                self._cancel_group_timers(group)
            return
        if group is None or not self.loaded:
            self.groups[group_id] = ClassicGroup.from_metadata_value(group_id, value)
            return
        before = dict(group.members)
        group.apply_metadata_record(value)
        dropped = [m for mid, m in before.items() if mid not in group.members]
        if dropped:
            self._drop_members(group, dropped, ErrorCode.UNKNOWN_MEMBER_ID)

    def _drop_members(self, group: ClassicGroup, members: list[ClassicGroupMember], code: int) -> None:
        for m in members:
            fenced = m.group_instance_id is not None and group.static_member_id(m.group_instance_id) not in (
                None, m.member_id)
            err = ErrorCode.FENCED_INSTANCE_ID if fenced else code
            m.complete_join(_join_error(err, m.member_id))
            m.complete_sync(_sync_error(err))
            self.timer.cancel(heartbeat_key(group.group_id, m.member_id))

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        self.timer.cancel(join_key(group.group_id))
        self.timer.cancel(sync_key(group.group_id))
        for mid in list(group.members) + list(group.pending_join_members):
            self.timer.cancel(heartbeat_key(group.group_id, mid))

    def on_loaded(self) -> None:
        self.loaded = True
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.config.group_max_size:
                self._apply_now(self._prepare_rebalance(group, "loaded group is over group.max.size"))
        self._consumer_groups_loaded()
        self._share_groups_loaded()
        self._streams_groups_loaded()
        self._schedule_offsets_expiration()

    def on_unloaded(self) -> None:
        self.loaded = False
        self.share_groups_unloaded()
        for group in self.groups.values():
            for member in group.members.values():
                member.complete_join(_join_error(ErrorCode.NOT_COORDINATOR, member.member_id))
                member.complete_sync(_sync_error(ErrorCode.NOT_COORDINATOR))

    def _apply_now(self, result: CoordinatorResult[Any]) -> None:
        """Run a result produced outside an operation: records go through the write path (a timer)."""
        if result.records:
            self.timer.schedule(f"deferred-{result_counter()}", 0, lambda: result)
        elif result.on_complete is not None:
            result.on_complete(ErrorCode.NONE)

    # ==================================================================================== JoinGroup
    def join_group(self, meta: RequestMeta, request: JoinGroupRequest, respond: JoinResponder) -> CoordinatorResult[None]:
        if request.group_id in self.share_groups or request.group_id in self.streams_groups:
            respond(_join_error(ErrorCode.GROUP_ID_NOT_FOUND, request.member_id or UNKNOWN_MEMBER_ID))
            return _empty()
        consumer = self.consumer_groups.get(request.group_id)
        if consumer is None:
            return self._classic_join_group(meta, request, respond)
        if consumer.members:
            # a classic member of a consumer group (online migration, kbroker.coordinator.group.migration)
            return self.classic_join_consumer_group(meta, request, respond)
        # an empty consumer group makes way for the classic group: its records are deleted with the join
        result = self._classic_join_group(meta, request, respond)
        if request.group_id not in self.groups:
            return result
        return CoordinatorResult(self.consumer_group_tombstones(request.group_id) + result.records, result.response,
                                 result.on_complete)

    def _classic_join_group(self, meta: RequestMeta, request: JoinGroupRequest,
                            respond: JoinResponder) -> CoordinatorResult[None]:
        cfg = self.config
        group_id = request.group_id
        member_id = request.member_id or UNKNOWN_MEMBER_ID
        if not group_id:
            respond(_join_error(ErrorCode.INVALID_GROUP_ID, member_id))
            return _empty()
        if not cfg.group_min_session_timeout_ms <= request.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            respond(_join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return _empty()
        rebalance_timeout = request.rebalance_timeout_ms if meta.api_version >= 1 else request.session_timeout_ms
        if rebalance_timeout < 0:
            rebalance_timeout = request.session_timeout_ms
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        names = [name for name, _ in protocols]
        instance_id = request.group_instance_id if meta.api_version >= 5 else None
        group = self.groups.get(group_id)

        if member_id == UNKNOWN_MEMBER_ID:
            if group is None:
                group = ClassicGroup(group_id)
                self.groups[group_id] = group
            if not group.supports_protocols(request.protocol_type, names):
                respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
                return _empty()
            known_id = group.static_member_id(instance_id)
            if known_id is None and len(group.members) + len(group.pending_join_members) >= cfg.group_max_size:
                respond(_join_error(ErrorCode.GROUP_MAX_SIZE_REACHED))
                return _empty()
            new_id = self.new_member_id(instance_id if instance_id is not None else meta.client_id)
            if instance_id is not None:
                if known_id is not None:
                    return self._update_static_member_and_rebalance(group, known_id, new_id, meta, request,
                                                                    rebalance_timeout, protocols, respond)
                return self._add_member_and_rebalance(group, new_id, instance_id, meta, request, rebalance_timeout,
                                                      protocols, respond)
            if meta.api_version >= 4:
                # KIP-394: hand out the member id first; the member joins again with it
                group.pending_join_members.add(new_id)
                self.timer.schedule(heartbeat_key(group_id, new_id), request.session_timeout_ms,
                                    lambda: self._on_heartbeat_expired(group_id, new_id))
                respond(_join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
                return _empty()
            return self._add_member_and_rebalance(group, new_id, None, meta, request, rebalance_timeout, protocols,
                                                  respond)

        # a known member id
        if group is None:
            respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return _empty()
        if group.is_in(ClassicGroupState.DEAD):
            respond(_join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return _empty()
        if not group.supports_protocols(request.protocol_type, names, member_id):
            respond(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return _empty()
        if member_id in group.pending_join_members:
            return self._add_member_and_rebalance(group, member_id, instance_id, meta, request, rebalance_timeout,
                                                  protocols, respond)
        error = self._validate_member(group, member_id, instance_id)
        if error:
            respond(_join_error(error, member_id))
            return _empty()
        member = group.members[member_id]
        state = group.state
        if state is ClassicGroupState.PREPARING_REBALANCE:
            self._update_member(group, member, meta, request, rebalance_timeout, protocols, respond)
            return self._maybe_complete_join(group)
        if state is ClassicGroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # the member lost its JoinGroup response: answer again for the current generation
                respond(self._join_response(group, member, with_members=group.is_leader(member_id)))
                return _empty()
            self._update_member(group, member, meta, request, rebalance_timeout, protocols, respond)
            return self._prepare_rebalance(group, f"member {member_id} rejoined with new metadata")
        if state is ClassicGroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                self._update_member(group, member, meta, request, rebalance_timeout, protocols, respond)
                return self._prepare_rebalance(group, f"member {member_id} (leader or new metadata) rejoined")
            respond(self._join_response(group, member, with_members=False))
            return _empty()
        respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        return _empty()

    def _validate_member(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        """FENCED_INSTANCE_ID if the instance id belongs to another member id, UNKNOWN_MEMBER_ID if the member
        is not in the group, else NONE."""
        if instance_id is not None:
            known = group.static_member_id(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if not group.has_member(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _join_response(self, group: ClassicGroup, member: ClassicGroupMember, with_members: bool,
                       skip_assignment: bool = False) -> JoinGroupResponse:
        members = []
        if with_members:
            members = [JoinGroupResponse.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata(group.protocol_name))
                for m in group.members.values()]
        return JoinGroupResponse(error_code=ErrorCode.NONE, generation_id=group.generation_id,
                                 protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                 leader=group.leader_id or "", skip_assignment=skip_assignment,
                                 member_id=member.member_id, members=members)

    def _update_member(self, group: ClassicGroup, member: ClassicGroupMember, meta: RequestMeta,
                       request: JoinGroupRequest, rebalance_timeout: int, protocols: list[tuple[str, bytes]],
                       respond: JoinResponder | None) -> None:
        if member.awaiting_join is not None and member.awaiting_join is not respond:
            # a second JoinGroup of the same member replaces the parked one
            member.complete_join(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.protocols = protocols
        member.protocol_type = request.protocol_type
        member.rebalance_timeout_ms = rebalance_timeout
        member.session_timeout_ms = request.session_timeout_ms
        member.client_id = meta.client_id
        member.client_host = meta.client_host
        member.awaiting_join = respond
        self._reschedule_heartbeat(group, member)

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                                  meta: RequestMeta, request: JoinGroupRequest, rebalance_timeout: int,
                                  protocols: list[tuple[str, bytes]], respond: JoinResponder) -> CoordinatorResult[None]:
        member = ClassicGroupMember(
            member_id=member_id, group_instance_id=instance_id, client_id=meta.client_id,
            client_host=meta.client_host, rebalance_timeout_ms=rebalance_timeout,
            session_timeout_ms=request.session_timeout_ms, protocol_type=request.protocol_type,
            protocols=protocols, awaiting_join=respond, is_new=True)
        group.add_member(member)
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        self._reschedule_heartbeat(group, member)
        return self._maybe_prepare_rebalance_or_complete_join(group, f"member {member_id} joined")

    def _update_static_member_and_rebalance(self, group: ClassicGroup, old_id: str, new_id: str, meta: RequestMeta,
                                            request: JoinGroupRequest, rebalance_timeout: int,
                                            protocols: list[tuple[str, bytes]],
                                            respond: JoinResponder) -> CoordinatorResult[None]:
        """A known static member joins again without its member id (it restarted): it gets a new member id and
        the old one is fenced. In a Stable group whose protocol does not change this needs no rebalance: the
        new id is stored and the member gets the current generation (KIP-345)."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        state = group.state
        if state is ClassicGroupState.STABLE and \
                self._selected_after_update(group, old_id, protocols) == group.protocol_name:
            return self._store_replaced_static_member(group, old_id, new_id, meta, request, rebalance_timeout,
                                                      protocols, respond)
        member = group.replace_static_member(instance_id, old_id, new_id,
                                             _join_error(ErrorCode.FENCED_INSTANCE_ID, old_id),
                                             _sync_error(ErrorCode.FENCED_INSTANCE_ID))
        self.timer.cancel(heartbeat_key(group.group_id, old_id))
        self._update_member(group, member, meta, request, rebalance_timeout, protocols, respond)
        if state is ClassicGroupState.PREPARING_REBALANCE:
            return self._maybe_complete_join(group)
        return self._prepare_rebalance(group, f"static member {instance_id} rejoined with a new member id")

    def _selected_after_update(self, group: ClassicGroup, member_id: str, protocols: list[tuple[str, bytes]]) -> str | None:
        member = group.members[member_id]
        saved = member.protocols
        member.protocols = protocols
        try:
            return group.select_protocol()
        except ValueError:
            return None
        finally:
            member.protocols = saved

    def _store_replaced_static_member(self, group: ClassicGroup, old_id: str, new_id: str, meta: RequestMeta,
                                      request: JoinGroupRequest, rebalance_timeout: int,
                                      protocols: list[tuple[str, bytes]],
                                      respond: JoinResponder) -> CoordinatorResult[None]:
        """Stable group: persist the static member's new member id, keep the assignment, no rebalance."""
        now = self.now_ms()
        old = group.members[old_id]
        replacement = ClassicGroupMember(
            member_id=new_id, group_instance_id=request.group_instance_id, client_id=meta.client_id,
            client_host=meta.client_host, rebalance_timeout_ms=rebalance_timeout,
            session_timeout_ms=request.session_timeout_ms, protocol_type=request.protocol_type,
            protocols=protocols, assignment=old.assignment)
        members = [replacement if m.member_id == old_id else m for m in group.members.values()]
        leader = new_id if group.leader_id == old_id else group.leader_id
        value = group.to_metadata_value(now, members=members)
        value.leader = leader
        group_id = group.group_id
        generation = group.generation_id
        version = meta.api_version

        def on_complete(error: int) -> None:
            current = self.groups.get(group_id)
            if error:
                respond(_join_error(error, UNKNOWN_MEMBER_ID))
                return
            member = current.members.get(new_id) if current is not None else None
            if current is None or member is None or current.generation_id != generation:
                respond(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, new_id))
                return
            member.protocols = protocols
            member.protocol_type = request.protocol_type
            member.client_id, member.client_host = meta.client_id, meta.client_host
            self._reschedule_heartbeat(current, member)
            is_leader = current.is_leader(new_id)
            if version >= 9:
                respond(self._join_response(current, member, with_members=is_leader, skip_assignment=is_leader))
            else:
                # the old leader id keeps a restarted leader from computing a new assignment that a Stable
                # group would never distribute
                resp = self._join_response(current, member, with_members=False)
                resp.leader = old_id if is_leader else resp.leader
                respond(resp)

        return CoordinatorResult([group_metadata_record(group_id, value)], None, on_complete)

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> CoordinatorResult[None]:
        if group.is_in(ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY):
            return self._prepare_rebalance(group, reason)
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return self._maybe_complete_join(group)
        return _empty()

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> CoordinatorResult[None]:
        now = self.now_ms()
        if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self.timer.cancel(sync_key(group.group_id))
        group.pending_sync_members.clear()
        initial = group.is_in(ClassicGroupState.EMPTY)
        group.transition(ClassicGroupEvent.PREPARE_REBALANCE, now)
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id, reason)
        group_id = group.group_id
        if initial:
            timeout = group.rebalance_timeout_ms()
            delay = min(self.config.group_initial_rebalance_delay_ms, timeout)
            group.initial_delay_remaining_ms = max(timeout - self.config.group_initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self.timer.schedule(join_key(group_id), delay, lambda: self._on_initial_delay_expired(group_id))
            return _empty()
        self.timer.schedule(join_key(group_id), group.rebalance_timeout_ms(),
                            lambda: self._on_join_timeout(group_id))
        return self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> CoordinatorResult[None]:
        if (group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.has_all_members_joined()
                and group.previous_state is not ClassicGroupState.EMPTY):
            return self._complete_join(group)
        return _empty()

    def _on_initial_delay_expired(self, group_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return _empty()
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(
                group.initial_delay_remaining_ms - self.config.group_initial_rebalance_delay_ms, 0)
            self.timer.schedule(join_key(group_id), delay, lambda: self._on_initial_delay_expired(group_id))
            return _empty()
        return self._complete_join(group)

    def _on_join_timeout(self, group_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return _empty()
        return self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> CoordinatorResult[None]:
        if not group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return _empty()
        group_id = group.group_id
        self.timer.cancel(join_key(group_id))
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info("group %s: removing member %s, which did not rejoin", group_id, member.member_id)
                self._remove_member(group, member)
        now = self.now_ms()
        if group.is_empty:
            # nobody is left: the next generation is stored as an empty group
            value = GroupMetadataValue(protocol_type=group.protocol_type or "", generation=group.generation_id + 1,
                                       protocol=None, leader=None, current_state_timestamp=now, members=[])

            def on_complete(error: int) -> None:
                if error:
                    current = self.groups.get(group_id)
                    if current is group and group.is_in(ClassicGroupState.PREPARING_REBALANCE):
                        self.timer.schedule(join_key(group_id), RETRY_BACKOFF_MS,
                                            lambda: self._on_join_timeout(group_id))

            return CoordinatorResult([group_metadata_record(group_id, value)], None, on_complete)
        if not group.maybe_elect_new_joined_leader():
            # only static members that did not rejoin remain: wait for them, or for their session timeouts
            self.timer.schedule(join_key(group_id), group.rebalance_timeout_ms(),
                                lambda: self._on_join_timeout(group_id))
            return _empty()
        group.generation_id += 1
        group.protocol_name = group.select_protocol()
        group.transition(ClassicGroupEvent.COMPLETE_JOIN, now)
        log.info("group %s: generation %d (protocol %s) with %d members", group_id, group.generation_id,
                 group.protocol_name, len(group.members))
        group.pending_sync_members = set(group.members)
        generation = group.generation_id
        self.timer.schedule(sync_key(group_id), group.rebalance_timeout_ms(),
                            lambda: self._on_sync_timeout(group_id, generation))
        for member in group.members.values():
            if member.is_awaiting_join:
                member.complete_join(self._join_response(group, member, with_members=group.is_leader(member.member_id)))
                member.is_new = False
                self._reschedule_heartbeat(group, member)
        return _empty()

    def _on_sync_timeout(self, group_id: str, generation: int) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation or not group.pending_sync_members:
            return _empty()
        if not group.is_in(ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.STABLE):
            return _empty()
        missing = [group.members[mid] for mid in list(group.pending_sync_members) if mid in group.members]
        log.info("group %s: removing members %s, which did not send SyncGroup in time", group_id,
                 [m.member_id for m in missing])
        for member in missing:
            self._remove_member(group, member)
        group.pending_sync_members.clear()
        return self._maybe_prepare_rebalance_or_complete_join(group, "members did not sync in time")

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(_sync_error(error))

    def _remove_member(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        member.complete_join(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, UNKNOWN_MEMBER_ID))
        member.complete_sync(_sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove_member(member.member_id)
        self.timer.cancel(heartbeat_key(group.group_id, member.member_id))

    def _remove_members_and_update_group(self, group: ClassicGroup, members: list[ClassicGroupMember],
                                         reason: str) -> CoordinatorResult[None]:
        for member in members:
            self._remove_member(group, member)
        if group.is_in(ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(group, reason)
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            return self._complete_join(group)
        return _empty()

    # ==================================================================================== liveness
    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.timer.schedule(heartbeat_key(group_id, member_id), member.session_timeout_ms,
                            lambda: self._on_heartbeat_expired(group_id, member_id))

    def _on_heartbeat_expired(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.groups.get(group_id)
        if group is None:
            return _empty()
        if member_id in group.pending_join_members:
            group.pending_join_members.discard(member_id)
            log.info("group %s: pending member %s expired", group_id, member_id)
            if group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                return self._complete_join(group)
            return _empty()
        member = group.members.get(member_id)
        if member is None:
            return _empty()
        if member.is_awaiting_join or member.is_awaiting_sync:
            self._reschedule_heartbeat(group, member)
            return _empty()
        log.info("group %s: member %s expired (session timeout %d ms)", group_id, member_id,
                 member.session_timeout_ms)
        return self._remove_members_and_update_group(group, [member], f"member {member_id} session expired")

    # ==================================================================================== SyncGroup
    def sync_group(self, meta: RequestMeta, request: SyncGroupRequest, respond: SyncResponder) -> CoordinatorResult[None]:
        group_id, member_id = request.group_id, request.member_id
        instance_id = request.group_instance_id if meta.api_version >= 3 else None
        if not group_id:
            respond(_sync_error(ErrorCode.INVALID_GROUP_ID))
            return _empty()
        if group_id in self.consumer_groups:
            return self.classic_sync_consumer_group(meta, request, respond)
        group = self.groups.get(group_id)
        if group is None:
            respond(_sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
            return _empty()
        if group.is_in(ClassicGroupState.DEAD):
            respond(_sync_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return _empty()
        error = self._validate_member(group, member_id, instance_id)
        if not error and request.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if not error and meta.api_version >= 5 and (
                (request.protocol_type is not None and request.protocol_type != group.protocol_type)
                or (request.protocol_name is not None and request.protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error:
            respond(_sync_error(error))
            return _empty()
        member = group.members[member_id]
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            respond(_sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
            return _empty()
        if group.is_in(ClassicGroupState.STABLE):
            self._sync_done(group, member_id)
            self._reschedule_heartbeat(group, member)
            respond(self._sync_response(group, member))
            return _empty()
        if not group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            respond(_sync_error(ErrorCode.UNKNOWN_MEMBER_ID))
            return _empty()
        if member.awaiting_sync is not None:
            member.complete_sync(_sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = respond
        self._sync_done(group, member_id)
        self._reschedule_heartbeat(group, member)
        if not group.is_leader(member_id):
            return _empty()
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
        value = group.to_metadata_value(self.now_ms(), assignments=assignments)
        generation = group.generation_id

        def on_complete(error: int) -> None:
            current = self.groups.get(group_id)
            if current is not group or group.generation_id != generation:
                return
            if error:
                if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
                    # as Kafka: every parked SyncGroup gets the (mapped) error and the group goes back to
                    # PreparingRebalance; the next generation needs every member's JoinGroup again (they were
                    # all just answered), so nothing happens until the members rejoin
                    self._reset_and_propagate_assignment_error(group, error)
                    self._apply_now(self._maybe_prepare_rebalance_or_complete_join(
                        group, f"storing the assignment failed with {ErrorCode(error).name}"))
                return
            for m in group.members.values():
                if m.is_awaiting_sync:
                    m.complete_sync(self._sync_response(group, m))

        return CoordinatorResult([group_metadata_record(group_id, value)], None, on_complete)

    def _sync_done(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timer.cancel(sync_key(group.group_id))

    @staticmethod
    def _sync_response(group: ClassicGroup, member: ClassicGroupMember) -> SyncGroupResponse:
        return SyncGroupResponse(error_code=ErrorCode.NONE, protocol_type=group.protocol_type,
                                 protocol_name=group.protocol_name, assignment=member.assignment)

    # ==================================================================================== Heartbeat
    def heartbeat(self, meta: RequestMeta, group_id: str, generation_id: int, member_id: str,
                  instance_id: str | None) -> CoordinatorResult[int]:
        if not group_id:
            return CoordinatorResult(response=ErrorCode.INVALID_GROUP_ID)
        if group_id in self.consumer_groups:
            return self.classic_heartbeat_consumer_group(group_id, generation_id, member_id, instance_id)
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult(response=ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(ClassicGroupState.DEAD):
            return CoordinatorResult(response=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return CoordinatorResult(response=error)
        if generation_id != group.generation_id:
            return CoordinatorResult(response=ErrorCode.ILLEGAL_GENERATION)
        if group.is_in(ClassicGroupState.EMPTY):
            return CoordinatorResult(response=ErrorCode.UNKNOWN_MEMBER_ID)
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(ClassicGroupState.PREPARING_REBALANCE):
            return CoordinatorResult(response=ErrorCode.REBALANCE_IN_PROGRESS)
        return CoordinatorResult(response=ErrorCode.NONE)

    # ==================================================================================== LeaveGroup
    def leave_group(self, meta: RequestMeta, group_id: str,
                    members: list[tuple[str, str | None, str | None]]) -> CoordinatorResult[tuple[int, list[int]]]:
        """``members``: (member id, group instance id, reason). Response: (top-level error, per-member errors)."""
        if not group_id:
            return CoordinatorResult(response=(ErrorCode.INVALID_GROUP_ID, []))
        if group_id in self.consumer_groups:
            return self.classic_leave_consumer_group(group_id, members)
        group = self.groups.get(group_id)
        if group is None:
            return CoordinatorResult(response=(ErrorCode.UNKNOWN_MEMBER_ID, []))
        if group.is_in(ClassicGroupState.DEAD):
            return CoordinatorResult(response=(ErrorCode.COORDINATOR_NOT_AVAILABLE, []))
        errors: list[int] = []
        leaving: list[ClassicGroupMember] = []
        removed_pending = False
        for member_id, instance_id, reason in members:
            if member_id == UNKNOWN_MEMBER_ID:
                known = group.static_member_id(instance_id)
                if known is not None:
                    leaving.append(group.members[known])
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in group.pending_join_members:
                group.pending_join_members.discard(member_id)
                self.timer.cancel(heartbeat_key(group_id, member_id))
                removed_pending = True
                errors.append(ErrorCode.NONE)
            else:
                error = self._validate_member(group, member_id, instance_id)
                errors.append(error)
                if not error and group.members[member_id] not in leaving:
                    leaving.append(group.members[member_id])
            log.info("group %s: member %s (instance %s) leaves: %s", group_id, member_id, instance_id,
                     reason or "no reason given")
        if leaving:
            result = self._remove_members_and_update_group(group, leaving, "members left the group")
        elif removed_pending and group.is_in(ClassicGroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            result = self._complete_join(group)
        else:
            result = _empty()
        return CoordinatorResult(result.records, (ErrorCode.NONE, errors), result.on_complete)

    # ==================================================================================== offsets
    def commit_offsets(self, meta: RequestMeta, commit: OffsetCommitInput) -> CoordinatorResult[list[CommitPartition]]:
        """Validate and write the commits; the response is ``commit.partitions`` with error codes set."""
        parts = commit.partitions
        error = self._validate_offset_commit(meta, commit)
        if error:
            for p in parts:
                if not p.error_code:
                    p.error_code = error
            return CoordinatorResult(response=parts)
        now = self.now_ms()
        expire = None if commit.retention_time_ms < 0 else now + commit.retention_time_ms
        records = []
        for p in parts:
            if p.error_code:
                continue
            if p.metadata is not None and java_string_length(p.metadata) > self.config.offset_metadata_max_bytes:
                p.error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            records.append(offset_commit_record(commit.group_id, p.topic, p.partition, p.offset, p.leader_epoch,
                                                p.metadata or "", now, expire, p.topic_id))
        return CoordinatorResult(records, parts)

    def _validate_offset_commit(self, meta: RequestMeta, commit: OffsetCommitInput) -> int:
        if not commit.group_id:
            return ErrorCode.INVALID_GROUP_ID
        consumer = self.consumer_groups.get(commit.group_id) or self.streams_groups.get(commit.group_id)
        if consumer is not None:
            return self.validate_consumer_group_commit(consumer, meta.api_version, commit.member_id,  # type: ignore[arg-type]
                                                       commit.generation_id)
        group = self.groups.get(commit.group_id)
        generation = commit.generation_id
        if group is None:
            if generation < 0:
                return ErrorCode.NONE  # a simple group: replaying the commit creates it
            return ErrorCode.GROUP_ID_NOT_FOUND if meta.api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if group.is_in(ClassicGroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(ClassicGroupState.EMPTY):
            return ErrorCode.NONE
        if generation >= 0 or commit.member_id or commit.group_instance_id is not None:
            error = self._validate_member(group, commit.member_id, commit.group_instance_id)
            if error:
                return error
            if generation != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_in(ClassicGroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(ClassicGroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> list[FetchedOffset]:
        """Committed offsets of ``topics`` ((name, partitions) pairs; None = every committed partition).
        Partitions without a committed offset get offset -1 and empty metadata."""
        committed = self.offsets.get(group_id, {})
        out: list[FetchedOffset] = []
        if topics is None:
            for topic in sorted(committed):
                for partition in sorted(committed[topic]):
                    o = committed[topic][partition]
                    out.append(FetchedOffset(topic, partition, o.committed_offset, o.leader_epoch, o.metadata))
            return out
        for topic, partitions in topics:
            by_partition = committed.get(topic, {})
            for partition in partitions:
                o = by_partition.get(partition)
                if o is None:
                    out.append(FetchedOffset(topic, partition))
                else:
                    out.append(FetchedOffset(topic, partition, o.committed_offset, o.leader_epoch, o.metadata))
        return out

    def delete_offsets(self, group_id: str,
                       topics: list[tuple[str, list[int]]]) -> CoordinatorResult[tuple[int, dict[tuple[str, int], int]]]:
        """OffsetDelete: (top-level error, {(topic, partition): error})."""
        group = self.groups.get(group_id)
        consumer = self.consumer_groups.get(group_id)
        if not group_id:
            return CoordinatorResult(response=(ErrorCode.INVALID_GROUP_ID, {}))
        subscribed: set[str] = set()
        if consumer is not None:
            subscribed = consumer.subscribed_topic_names()
        elif group is None or group.is_in(ClassicGroupState.DEAD):
            return CoordinatorResult(response=(ErrorCode.GROUP_ID_NOT_FOUND, {}))
        elif not group.is_in(ClassicGroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return CoordinatorResult(response=(ErrorCode.NON_EMPTY_GROUP, {}))
            subscribed = group.subscribed_topics() or set()
        committed = self.offsets.get(group_id, {})
        errors: dict[tuple[str, int], int] = {}
        records = []
        for topic, partitions in topics:
            for partition in partitions:
                if topic in subscribed:
                    errors[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                    continue
                errors[(topic, partition)] = ErrorCode.NONE
                if partition in committed.get(topic, {}):
                    records.append(offset_commit_tombstone(group_id, topic, partition))
        return CoordinatorResult(records, (ErrorCode.NONE, errors))

    # ==================================================================================== transactional offsets
    def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                          member_id: str, group_instance_id: str | None,
                          partitions: list[CommitPartition]) -> CoordinatorResult[list[CommitPartition]]:
        """TxnOffsetCommit: validate like an OffsetCommit (a commit with generation -1 and no member is
        accepted in any state, and so is one during CompletingRebalance) and write the offsets as a
        transactional batch of ``producer_id``; they stay pending until the transaction's COMMIT marker
        (ABORT drops them)."""
        error = self._validate_txn_offset_commit(group_id, generation_id, member_id, group_instance_id)
        if error:
            for p in partitions:
                if not p.error_code:
                    p.error_code = error
            return CoordinatorResult(response=partitions)
        now = self.now_ms()
        records = []
        for p in partitions:
            if p.error_code:
                continue
            if p.metadata is not None and java_string_length(p.metadata) > self.config.offset_metadata_max_bytes:
                p.error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            records.append(offset_commit_record(group_id, p.topic, p.partition, p.offset, p.leader_epoch,
                                                p.metadata or "", now, topic_id=p.topic_id))
        return CoordinatorResult(records, partitions, producer_id=producer_id, producer_epoch=producer_epoch)

    def _validate_txn_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                                    group_instance_id: str | None) -> int:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        consumer = self.consumer_groups.get(group_id) or self.streams_groups.get(group_id)
        if consumer is not None:  # KIP-848 / KIP-1071 group: the generation field is the member epoch
            return self.validate_consumer_group_commit(consumer, 9, member_id, generation_id,  # type: ignore[arg-type]
                                                       transactional=True)
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id and group_instance_id is None:
            if group is not None and group.is_in(ClassicGroupState.DEAD):
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return ErrorCode.NONE  # no group management: a simple group is created when the offsets commit
        # (an unknown group with a generation: GROUP_ID_NOT_FOUND, which the handler reports as
        # ILLEGAL_GENERATION below TxnOffsetCommit v6, KIP-1319)
        error = self._validate_offset_commit(
            RequestMeta(api_version=9),
            OffsetCommitInput(group_id, generation_id, member_id, group_instance_id, -1, []))
        return ErrorCode.NONE if error == ErrorCode.REBALANCE_IN_PROGRESS else error

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` in this partition: its pending offsets become committed
        offsets, or are dropped."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending or not committed:
            return
        for group_id, offsets in pending.items():
            for (topic, partition), value in offsets.items():
                self._replay_offset_commit(group_id, topic, partition, value)

    def has_pending_txn_offset(self, group_id: str, topic: str, partition: int) -> bool:
        return any((topic, partition) in groups.get(group_id, {}) for groups in self.pending_txn_offsets.values())

    def mark_unstable_offsets(self, group_id: str, offsets: list[FetchedOffset]) -> list[FetchedOffset]:
        """OffsetFetch with ``require_stable``: partitions with a pending transactional offset get
        UNSTABLE_OFFSET_COMMIT (offset -1); the client retries until the transaction is decided."""
        if not self.pending_txn_offsets:
            return offsets
        for o in offsets:
            if self.has_pending_txn_offset(group_id, o.topic, o.partition):
                o.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
                o.committed_offset, o.leader_epoch, o.metadata = -1, -1, ""
        return offsets

    # ==================================================================================== admin
    def list_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListGroupsResponse.ListedGroup]:
        out = []
        for group in self.groups.values():
            if states and group.state.value.lower() not in states:
                continue
            if types and GROUP_TYPE_CLASSIC not in types:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type or "",
                                                      group_state=group.state.value, group_type=GROUP_TYPE_CLASSIC))
        out.extend(self.list_consumer_groups(states, types))
        out.extend(self.list_share_groups(states, types))
        out.extend(self.list_streams_groups(states, types))
        return out

    def describe_group(self, group_id: str, api_version: int,
                       include_authorized_operations: bool) -> DescribeGroupsResponse.DescribedGroup:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations else NOT_REQUESTED_OPERATIONS
        if not group_id:
            return DescribeGroupsResponse.DescribedGroup(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id,
                                                         authorized_operations=ops)
        group = self.groups.get(group_id)
        if group is None:
            if api_version >= 6:
                message = (f"Group {group_id} is not a classic group."
                           if group_id in self.consumer_groups or group_id in self.share_groups
                           or group_id in self.streams_groups
                           else f"Group {group_id} not found.")
                return DescribeGroupsResponse.DescribedGroup(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message,
                    group_id=group_id, group_state=ClassicGroupState.DEAD.value, authorized_operations=ops)
            return DescribeGroupsResponse.DescribedGroup(group_id=group_id, group_state=ClassicGroupState.DEAD.value,
                                                         authorized_operations=ops)
        stable = group.is_in(ClassicGroupState.STABLE)
        members = [DescribeGroupsResponse.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, member_metadata=m.metadata(group.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"") for m in group.members.values()]
        return DescribeGroupsResponse.DescribedGroup(
            group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "", members=members,
            authorized_operations=ops)

    def delete_groups(self, group_ids: Iterable[str]) -> CoordinatorResult[list[DeleteGroupsResponse.DeletableGroupResult]]:
        results = []
        records = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                error = ErrorCode.INVALID_GROUP_ID
            elif group_id in self.share_groups:
                error, tombstones = self.share_group_tombstones(group_id)
                if error == ErrorCode.NONE:
                    records.extend(offset_commit_tombstone(group_id, topic, partition)
                                   for topic, partitions in sorted(self.offsets.get(group_id, {}).items())
                                   for partition in sorted(partitions))
                    records.extend(tombstones)
            elif group_id in self.streams_groups:
                if self.streams_group_is_empty(group_id):
                    error = ErrorCode.NONE
                    records.extend(offset_commit_tombstone(group_id, topic, partition)
                                   for topic, partitions in sorted(self.offsets.get(group_id, {}).items())
                                   for partition in sorted(partitions))
                    records.extend(self.streams_group_tombstones(group_id))
                else:
                    error = ErrorCode.NON_EMPTY_GROUP
            elif group_id in self.consumer_groups:
                if self.consumer_group_is_empty(group_id):
                    error = ErrorCode.NONE
                    records.extend(offset_commit_tombstone(group_id, topic, partition)
                                   for topic, partitions in sorted(self.offsets.get(group_id, {}).items())
                                   for partition in sorted(partitions))
                    records.extend(self.consumer_group_tombstones(group_id))
                else:
                    error = ErrorCode.NON_EMPTY_GROUP
            elif group is None or group.is_in(ClassicGroupState.DEAD):
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_in(ClassicGroupState.EMPTY):
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                error = ErrorCode.NONE
                records.extend(self._group_tombstones(group_id))
            results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error))
        return CoordinatorResult(records, results)

    def _group_tombstones(self, group_id: str) -> list[CoordinatorRecord]:
        records = [offset_commit_tombstone(group_id, topic, partition)
                   for topic, partitions in sorted(self.offsets.get(group_id, {}).items())
                   for partition in sorted(partitions)]
        records.append(group_metadata_tombstone(group_id))
        return records

    # ==================================================================================== retention
    def _schedule_offsets_expiration(self) -> None:
        self.timer.schedule(OFFSETS_EXPIRATION_KEY, self.config.offsets_retention_check_interval_ms,
                            self._expire_offsets)

    def _expire_offsets(self) -> CoordinatorResult[None]:
        """Tombstones for expired offsets, and for empty groups left without offsets (runs periodically)."""
        self._schedule_offsets_expiration()
        return CoordinatorResult(self.expired_offset_records(self.now_ms()))

    def expired_offset_records(self, now: int) -> list[CoordinatorRecord]:
        retention = self.config.offsets_retention_ms
        records: list[CoordinatorRecord] = []
        for group_id, consumer in list(self.consumer_groups.items()):
            # consumer groups: offsets of topics the group does not subscribe to expire `retention` after
            # their commit; an empty group left without offsets is deleted
            subscribed = consumer.subscribed_topic_names() if consumer.members else set()
            remaining = 0
            for topic, partitions in sorted(self.offsets.get(group_id, {}).items()):
                for partition, o in sorted(partitions.items()):
                    if topic in subscribed:
                        remaining += 1
                    elif (now >= o.expire_timestamp_ms if o.expire_timestamp_ms is not None
                          else now - o.commit_timestamp_ms >= retention):
                        records.append(offset_commit_tombstone(group_id, topic, partition))
                    else:
                        remaining += 1
            if remaining == 0 and self.consumer_group_is_empty(group_id):
                log.info("group %s: offsets expired, deleting the empty consumer group", group_id)
                records.extend(self.consumer_group_tombstones(group_id))
        for group_id, group in list(self.groups.items()):
            committed = self.offsets.get(group_id, {})
            if group.is_in(ClassicGroupState.EMPTY):
                def base(o: OffsetAndMetadata, g: ClassicGroup = group) -> int:
                    return g.state_timestamp_ms if g.state_timestamp_ms >= 0 else o.commit_timestamp_ms
                expiring_topics = None  # every topic
            elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.subscribed_topics() is not None:
                def base(o: OffsetAndMetadata, g: ClassicGroup = group) -> int:
                    return o.commit_timestamp_ms
                subscribed = group.subscribed_topics() or set()
                expiring_topics = {t for t in committed if t not in subscribed}
            else:
                continue
            remaining = 0
            for topic, partitions in sorted(committed.items()):
                for partition, o in sorted(partitions.items()):
                    if expiring_topics is not None and topic not in expiring_topics:
                        remaining += 1
                        continue
                    if o.expire_timestamp_ms is not None:
                        expired = now >= o.expire_timestamp_ms
                    else:
                        expired = now - base(o) >= retention
                    if expired:
                        records.append(offset_commit_tombstone(group_id, topic, partition))
                    else:
                        remaining += 1
            if remaining == 0 and group.is_in(ClassicGroupState.EMPTY):
                log.info("group %s: offsets expired, deleting the empty group", group_id)
                records.append(group_metadata_tombstone(group_id))
        return records
