"""Online migration between the classic and the consumer group protocols (KIP-848), as Kafka 4.x's
``GroupMetadataManager`` does, governed by ``group.consumer.migration.policy`` (``bidirectional`` by default,
``upgrade``, ``downgrade`` or ``disabled``).

**Upgrade.** A ConsumerGroupHeartbeat joining (epoch 0) a classic group that has members converts it into a
consumer group when the policy allows upgrades, the group's protocol type is ``consumer``, every member's
subscription parses as a ``ConsumerProtocolSubscription`` and the group is not larger than
``group.consumer.max.size`` (else GROUP_ID_NOT_FOUND "Group <id> is not a consumer group."). Parked JoinGroup and
SyncGroup requests are answered REBALANCE_IN_PROGRESS. The classic group is tombstoned (GroupMetadata) and each
member becomes a consumer-group member that keeps the classic protocol: member epoch = the classic generation,
STABLE, its last assignment (``ConsumerProtocolAssignment``) as both its current and its target assignment,
the group epoch and assignment epoch = the generation (records 3, 5, 6, 7, 8). The joining member then bumps the
group epoch and the server-side assignor computes the new target.

**Classic members inside a consumer group** keep using JoinGroup / SyncGroup / Heartbeat / LeaveGroup:

* JoinGroup (protocol type ``consumer``, a protocol every classic member of the group supports, else
  INCONSISTENT_GROUP_PROTOCOL): a dynamic member without a member id (v4+) gets MEMBER_ID_REQUIRED and a UUID;
  otherwise it is created or updated from its subscription (topics, rack, owned partitions) and reconciled like
  a ConsumerGroupHeartbeat (target assignment, revocation before reassignment). The response, once its records
  are written, carries generation = the member epoch, the member's first protocol and no leader (nobody runs a
  client-side assignor); the member then has its session timeout and must send SyncGroup within its rebalance
  timeout;
* SyncGroup (generation = member epoch, else ILLEGAL_GENERATION) answers the member's assigned partitions as a
  ``ConsumerProtocolAssignment`` of the version of its subscription; REBALANCE_IN_PROGRESS while the group epoch
  is ahead of the member epoch (unless the member is revoking);
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch is ahead of its epoch, it
  must revoke partitions, or partitions it waited for were released; it must then rejoin within its rebalance
  timeout, else it is removed. Its session timeout is the one of its JoinGroup;
* LeaveGroup removes the members (group epoch + 1).

OffsetCommit / OffsetFetch of a classic member: its generation is its member epoch (ILLEGAL_GENERATION on a
mismatch), any API version.

**Downgrade.** When a member leaves or is fenced and every remaining member uses the classic protocol (at least
one remains), the policy allows downgrades and they fit ``group.max.size``, the consumer group is tombstoned and
written as a classic group (GroupMetadata: generation = the group epoch, each member's target assignment as its
assignment, the leader the first member); the classic group then starts a rebalance, so every member rejoins.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from kbroker.coordinator.group.classic_group import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    decode_subscription,
)
from kbroker.coordinator.group.consumer_group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    current_assignment_record,
    freeze,
    group_epoch_record,
    group_tombstones,
    member_subscription_record,
    remove_member_records,
    subscription_metadata_record,
    target_assignment_epoch_record,
    target_assignment_record,
)
from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    ConsumerProtocolAssignment,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)

UPGRADE_POLICIES = ("bidirectional", "upgrade")
DOWNGRADE_POLICIES = ("bidirectional", "downgrade")


def join_timeout_key(group_id: str, member_id: str) -> str:
    return f"cg-join-{group_id}-{member_id}"


def sync_timeout_key(group_id: str, member_id: str) -> str:
    return f"cg-sync-{group_id}-{member_id}"


def protocol_version(metadata: bytes) -> int:
    """The ConsumerProtocol version a subscription was written in (the assignment is answered in it), 0..3."""
    if len(metadata) < 2:
        return 0
    return max(0, min(3, int.from_bytes(metadata[:2], "big", signed=True)))


def decode_assignment(data: bytes) -> ConsumerProtocolAssignment | None:
    """A ``ConsumerProtocolAssignment`` (int16 version + struct); None when empty or malformed."""
    if len(data) < 2:
        return None
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        return None
    try:
        value, _ = codec.decode(ConsumerProtocolAssignment, data, min(version, 3), 2)
    except (codec.DecodeError, ValueError, IndexError):
        return None
    return value


def encode_assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """``partitions`` (topic name -> partitions) as a ``ConsumerProtocolAssignment`` of ``version``."""
    value = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps))
        for t, ps in sorted(partitions.items()) if ps])
    return version.to_bytes(2, "big", signed=True) + codec.encode(value, version)


def _sync_error(code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, protocol_type=None, protocol_name=None, assignment=b"")


def _join_error(code: int, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, generation_id=-1, protocol_type=None, protocol_name=None, leader="",
                             member_id=member_id, members=[])


class ClassicMigrationOps:
    """Mixin of :class:`~kbroker.coordinator.group.shard.GroupCoordinatorShard` (see the module docstring); uses
    the consumer-group operations of :class:`~kbroker.coordinator.group.consumer_ops.ConsumerGroupOps`."""

    consumer_groups: dict[str, ConsumerGroup]

    # ---- helpers
    def _policy(self) -> str:
        return self.config.consumer_group_migration_policy  # type: ignore[attr-defined, no-any-return]

    def _names_by_id(self) -> dict[bytes, str]:
        image = self._image()  # type: ignore[attr-defined]
        return {} if image is None else {tid: t.name for tid, t in image.topics_by_id.items()}

    def _ids_by_name(self, pairs: Any) -> dict[bytes, frozenset[int]]:
        """``(topic name, partitions)`` pairs -> topic id -> partitions (unknown topics dropped)."""
        image = self._image()  # type: ignore[attr-defined]
        out: dict[bytes, set[int]] = {}
        for name, ps in pairs:
            t = image.topics_by_name.get(name) if image is not None else None
            if t is not None and ps:
                out.setdefault(t.topic_id, set()).update(ps)
        return freeze(out)

    def _assignment_bytes(self, partitions: Partitions, classic: ClassicMemberMetadata) -> bytes:
        names = self._names_by_id()
        by_name = {names[tid]: sorted(ps) for tid, ps in partitions.items() if tid in names}
        return encode_assignment(by_name, protocol_version(classic.protocols[0][1]) if classic.protocols else 0)

    # ==================================================================================== upgrade
    def _convert_classic_to_consumer(self, classic: ClassicGroup,
                                     records: list[CoordinatorRecord]) -> ConsumerGroup | None:
        """The consumer group ``classic`` becomes (records appended to ``records``), or None when the upgrade is
        not allowed (module docstring)."""
        gid = classic.group_id
        if self._policy() not in UPGRADE_POLICIES:
            log.info("group %s: cannot upgrade the classic group: group.consumer.migration.policy=%s", gid,
                     self._policy())
            return None
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or classic.protocol_name is None:
            log.info("group %s: cannot upgrade: the group does not use the consumer protocol", gid)
            return None
        if len(classic.members) > self.config.consumer_group_max_size:  # type: ignore[attr-defined]
            return None
        members: list[ConsumerGroupMember] = []
        generation = classic.generation_id
        for m in classic.members.values():
            sub = decode_subscription(m.metadata(classic.protocol_name))
            if sub is None:
                log.info("group %s: cannot upgrade: member %s has a malformed subscription", gid, m.member_id)
                return None
            decoded = decode_assignment(m.assignment) if m.assignment else None
            assigned = self._ids_by_name((tp.topic, tp.partitions) for tp in decoded.assigned_partitions) \
                if decoded is not None else {}
            members.append(ConsumerGroupMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
                client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, state=MemberState.STABLE, assigned=assigned,
                classic=ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols))))
        for m in classic.members.values():
            m.complete_join(_join_error(ErrorCode.REBALANCE_IN_PROGRESS, m.member_id))
            m.complete_sync(_sync_error(ErrorCode.REBALANCE_IN_PROGRESS))
        self._cancel_group_timers(classic)  # type: ignore[attr-defined]
        from kbroker.coordinator.group.records import group_metadata_tombstone

        records.append(group_metadata_tombstone(gid))
        created = [member_subscription_record(gid, m) for m in members]
        created.append(group_epoch_record(gid, generation))
        created += [target_assignment_record(gid, m.member_id, m.assigned) for m in members]
        # no assignment timestamp (Kafka's conversion): the next target assignment need not wait for the interval
        created.append(target_assignment_epoch_record(gid, generation, 0))
        created += [current_assignment_record(gid, m) for m in members]
        group = ConsumerGroup(gid)
        for r in created:
            group.replay(r.key, r.value)
        group.metadata_refresh = True
        records += created
        log.info("group %s: classic group of generation %d with %d members upgraded to a consumer group", gid,
                 generation, len(members))
        return group

    def _schedule_converted_sessions(self, group_id: str) -> None:
        group = self.consumer_groups.get(group_id)
        if group is not None:
            for mid in list(group.members):
                self._schedule_session_timeout(group_id, mid)  # type: ignore[attr-defined]

    # ==================================================================================== downgrade
    def _maybe_downgrade(self, group: ConsumerGroup, leaving_id: str) -> CoordinatorResult[None] | None:
        """The result converting ``group`` into a classic group when ``leaving_id`` goes and only classic members
        remain (module docstring), else None."""
        gid = group.group_id
        remaining = [m for mid, m in group.members.items() if mid != leaving_id]
        if not remaining or not group.all_classic_except(leaving_id):
            return None
        if self._policy() not in DOWNGRADE_POLICIES:
            log.info("group %s: cannot downgrade to a classic group: group.consumer.migration.policy=%s", gid,
                     self._policy())
            return None
        if len(remaining) > self.config.group_max_size:  # type: ignore[attr-defined]
            return None
        classic = ClassicGroup(gid, state=ClassicGroupState.STABLE, generation_id=group.group_epoch,
                               protocol_type=CONSUMER_PROTOCOL_TYPE)
        for m in remaining:
            assert m.classic is not None
            classic.add_member(ClassicGroupMember(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=list(m.classic.protocols)))
        try:
            classic.protocol_name = classic.select_protocol()
        except ValueError:
            log.info("group %s: cannot downgrade: the classic members share no protocol", gid)
            return None
        assignments = {m.member_id: self._assignment_bytes(group.target_assignment.get(m.member_id, {}),
                                                           m.classic)  # type: ignore[arg-type]
                       for m in remaining}
        from kbroker.coordinator.group.records import group_metadata_record

        records = group_tombstones(group)
        records.append(group_metadata_record(gid, classic.to_metadata_value(self.now_ms(),  # type: ignore[attr-defined]
                                                                            assignments=assignments)))
        for mid in group.members:
            self._cancel_consumer_member_timers(gid, mid)  # type: ignore[attr-defined]
        protocols = {m.member_id: list(m.classic.protocols) for m in remaining if m.classic is not None}
        log.info("group %s: consumer group downgraded to a classic group of generation %d (%d members)", gid,
                 group.group_epoch, len(remaining))

        def on_complete(error: int) -> None:
            converted = self.groups.get(gid)  # type: ignore[attr-defined]
            if error or converted is None:
                return
            for mid, m in converted.members.items():
                if mid in protocols:
                    m.protocols = protocols[mid]
                self._reschedule_heartbeat(converted, m)  # type: ignore[attr-defined]
            self._apply_now(self._prepare_rebalance(  # type: ignore[attr-defined]
                converted, f"Downgrade group {gid} from consumer to classic."))

        return CoordinatorResult(records, None, on_complete)

    # ==================================================================================== classic members
    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """The classic member a request names: UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's
        ``validateConsumerGroupMember``, and UNKNOWN_MEMBER_ID for a consumer-protocol member."""
        from kbroker.coordinator.group.consumer_ops import HeartbeatError

        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member with instance id {instance_id} is not a member of group "
                                     f"{group.group_id}.")
            if member.member_id != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {member_id} with instance id {instance_id} was fenced.")
        if member.classic is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic "
                                                              "protocol.")
        return member

    def _schedule_join_timeout_if_absent(self, group_id: str, member: ConsumerGroupMember) -> None:
        key = join_timeout_key(group_id, member.member_id)
        if not self.timer.is_scheduled(key):  # type: ignore[attr-defined]
            self._schedule_fence(key, group_id, member.member_id, member.rebalance_timeout_ms,
                                 "the classic member did not rejoin within its rebalance timeout")

    def _schedule_fence(self, key: str, group_id: str, member_id: str, timeout_ms: int, why: str) -> None:
        timeout = timeout_ms if timeout_ms > 0 else 300_000

        def fire() -> CoordinatorResult[None]:
            group = self.consumer_groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return CoordinatorResult()
            log.info("group %s: member %s fenced: %s", group_id, member_id, why)
            return self._fence_member(group, member, None)  # type: ignore[attr-defined, no-any-return]

        self.timer.schedule(key, timeout, fire)  # type: ignore[attr-defined]

    def classic_join_consumer_group(self, meta: Any, request: JoinGroupRequest,
                                    respond: Callable[[JoinGroupResponse], None]) -> CoordinatorResult[None]:
        """JoinGroup of a classic member into consumer group ``request.group_id`` (module docstring)."""
        import uuid

        from kbroker.coordinator.group.consumer_ops import HeartbeatError

        group = self.consumer_groups[request.group_id]
        gid = group.group_id
        instance_id = request.group_instance_id if meta.api_version >= 5 else None
        member_id = request.member_id or ""
        unknown = not member_id
        if unknown:
            member_id = str(uuid.uuid4())
        protocols = tuple((p.name, bytes(p.metadata)) for p in request.protocols)
        try:
            if member_id not in group.members and group.static_member(instance_id) is None and \
                    len(group.members) >= self.config.consumer_group_max_size:  # type: ignore[attr-defined]
                raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED)
            names = {n for n, _ in protocols}
            others = [m.classic.protocol_names() for mid, m in group.members.items()
                      if m.classic is not None and mid != member_id]
            if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not names or any(not (o & names) for o in others):
                raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            if unknown and instance_id is None and meta.api_version >= 4:
                respond(_join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id))
                return CoordinatorResult()
            sub = decode_subscription(protocols[0][1])
            if sub is None:
                raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            records: list[CoordinatorRecord] = []
            replaced: ConsumerGroupMember | None = None
            if instance_id is None:
                existing = group.members.get(member_id)
                if existing is not None and existing.classic is None:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
                member = existing or ConsumerGroupMember(member_id)
            else:
                static = group.static_member(instance_id)
                if static is None:
                    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                elif static.member_id == member_id:
                    member = static
                elif unknown:
                    # a static member restarting under a new member id takes the old one's place
                    replaced = static
                    member = ConsumerGroupMember(member_id, instance_id=instance_id,
                                                 member_epoch=0, previous_member_epoch=0, assigned=static.assigned)
                    records += remove_member_records(gid, static.member_id)
                    self._cancel_consumer_member_timers(gid, static.member_id)  # type: ignore[attr-defined]
                else:
                    raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID)
            is_new = replaced is None and member_id not in group.members
            if replaced is not None:
                records.append(target_assignment_record(gid, member_id, group.target_assignment.get(
                    replaced.member_id, {})))
            rebalance_timeout = request.rebalance_timeout_ms if meta.api_version >= 1 else request.session_timeout_ms
            updated = ConsumerGroupMember(
                member_id, instance_id=instance_id, rack_id=sub.rack_id or None, client_id=meta.client_id,
                client_host=meta.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
                rebalance_timeout_ms=rebalance_timeout if rebalance_timeout > 0 else member.rebalance_timeout_ms,
                server_assignor=None, member_epoch=member.member_epoch,
                previous_member_epoch=member.previous_member_epoch, state=member.state, assigned=member.assigned,
                pending_revocation=member.pending_revocation,
                classic=ClassicMemberMetadata(request.session_timeout_ms, protocols))
            owned = [(tid, sorted(ps)) for tid, ps in self._ids_by_name(
                (tp.topic, tp.partitions) for tp in sub.owned_partitions).items()]
            final, _ = self._update_and_reconcile(  # type: ignore[attr-defined]
                group, member, updated, replaced, is_new, owned, records)
        except HeartbeatError as exc:
            respond(_join_error(exc.code, request.member_id or ""))
            return CoordinatorResult()
        response = JoinGroupResponse(error_code=ErrorCode.NONE, generation_id=final.member_epoch,
                                     protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocols[0][0],
                                     leader="", member_id=member_id, members=[])
        session_ms = request.session_timeout_ms

        def on_complete(error: int) -> None:
            if error:
                respond(_join_error(error, member_id))
                return
            self.timer.cancel(join_timeout_key(gid, member_id))  # type: ignore[attr-defined]
            self._schedule_session_timeout(gid, member_id, session_ms)  # type: ignore[attr-defined]
            self._schedule_fence(sync_timeout_key(gid, member_id), gid, member_id, rebalance_timeout,
                                 "the classic member did not send SyncGroup within its rebalance timeout")
            respond(response)

        log.info("group %s: classic member %s joins the consumer group at epoch %d", gid, member_id,
                 final.member_epoch)
        return CoordinatorResult(records, None, on_complete)

    def classic_sync_consumer_group(self, meta: Any, request: SyncGroupRequest,
                                    respond: Callable[[SyncGroupResponse], None]) -> CoordinatorResult[None]:
        from kbroker.coordinator.group.consumer_ops import HeartbeatError

        group = self.consumer_groups[request.group_id]
        instance_id = request.group_instance_id if meta.api_version >= 3 else None
        try:
            member = self._classic_member(group, request.member_id, instance_id)
            if request.generation_id != member.member_epoch:
                raise HeartbeatError(ErrorCode.ILLEGAL_GENERATION)
            assert member.classic is not None
            if meta.api_version >= 5 and (
                    (request.protocol_type is not None and request.protocol_type != CONSUMER_PROTOCOL_TYPE)
                    or (request.protocol_name is not None
                        and request.protocol_name not in member.classic.protocol_names())):
                raise HeartbeatError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            # against the assignment epoch (Kafka): a bump whose target is not computed yet does not send the member
            # back to JoinGroup
            if group.assignment_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._schedule_join_timeout_if_absent(group.group_id, member)
                raise HeartbeatError(ErrorCode.REBALANCE_IN_PROGRESS)
        except HeartbeatError as exc:
            respond(_sync_error(exc.code))
            return CoordinatorResult()
        gid, mid = group.group_id, member.member_id
        self.timer.cancel(sync_timeout_key(gid, mid))  # type: ignore[attr-defined]
        self._schedule_session_timeout(gid, mid, member.classic.session_timeout_ms)  # type: ignore[attr-defined]
        respond(SyncGroupResponse(error_code=ErrorCode.NONE, protocol_type=CONSUMER_PROTOCOL_TYPE,
                                  protocol_name=request.protocol_name or member.classic.protocols[0][0],
                                  assignment=self._assignment_bytes(member.assigned, member.classic)))
        return CoordinatorResult()

    def classic_heartbeat_consumer_group(self, group_id: str, generation_id: int, member_id: str,
                                         instance_id: str | None) -> CoordinatorResult[int]:
        from kbroker.coordinator.group.consumer_ops import HeartbeatError

        group = self.consumer_groups[group_id]
        try:
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise HeartbeatError(ErrorCode.ILLEGAL_GENERATION)
        except HeartbeatError as exc:
            return CoordinatorResult(response=exc.code)
        assert member.classic is not None
        self._schedule_session_timeout(group_id, member.member_id, member.classic.session_timeout_ms)  # type: ignore[attr-defined]
        if member.member_epoch < group.assignment_epoch or member.state is MemberState.UNREVOKED_PARTITIONS or (
                member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased_partition(member)):
            self._schedule_join_timeout_if_absent(group_id, member)
            return CoordinatorResult(response=ErrorCode.REBALANCE_IN_PROGRESS)
        return CoordinatorResult(response=ErrorCode.NONE)

    def classic_leave_consumer_group(self, group_id: str, members: list[tuple[str, str | None, str | None]]
                                     ) -> CoordinatorResult[tuple[int, list[int]]]:
        from kbroker.coordinator.group.consumer_ops import HeartbeatError

        group = self.consumer_groups[group_id]
        errors: list[int] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for member_id, instance_id, reason in members:
            try:
                if instance_id is None:
                    member = self._classic_member(group, member_id, None)
                else:
                    static = group.static_member(instance_id)
                    if static is None:
                        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
                    member = self._classic_member(group, member_id or static.member_id, instance_id)
                leaving[member.member_id] = member
                errors.append(ErrorCode.NONE)
                log.info("group %s: classic member %s leaves: %s", group_id, member.member_id, reason or "no reason")
            except HeartbeatError as exc:
                errors.append(exc.code)
        records: list[CoordinatorRecord] = []
        for mid in leaving:
            records += remove_member_records(group_id, mid)
            self._cancel_consumer_member_timers(group_id, mid)  # type: ignore[attr-defined]
        if leaving:
            remaining = [m for mid, m in group.members.items() if mid not in leaving]
            metadata = self._topic_metadata(group.subscribed_topic_names(remaining))  # type: ignore[attr-defined]
            if metadata != group.subscription_metadata:
                records.append(subscription_metadata_record(group_id, metadata))
            records.append(group_epoch_record(group_id, group.group_epoch + 1))
        return CoordinatorResult(records, (ErrorCode.NONE, errors))
