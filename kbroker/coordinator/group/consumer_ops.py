"""Consumer-group (KIP-848) operations of a ``GroupCoordinatorShard``: ConsumerGroupHeartbeat,
ConsumerGroupDescribe, session and rebalance timeouts, metadata changes, and the consumer-group side of
offset commits, offset fetches, ListGroups, DeleteGroups and offset expiration.

:class:`ConsumerGroupOps` is a mixin of :class:`~kbroker.coordinator.group.shard.GroupCoordinatorShard`; like
the classic operations, each one returns a :class:`CoordinatorResult` whose records the runtime appends and
replays (:meth:`ConsumerGroupOps.replay_consumer_group_record`) - group state changes only there.

ConsumerGroupHeartbeat (the behaviour of Kafka's coordinator, re-stated):

1. **Validation** -> INVALID_REQUEST: empty group id; empty instance or rack id; v1+ without a member id
   (the client generates it; v0 members joining without one get a UUID); joining (epoch 0) without a rebalance
   timeout, with owned partitions, or without subscribed topic names or regex; epoch -2 without an instance
   id; any other negative epoch. Unknown server assignor -> UNSUPPORTED_ASSIGNOR; a regex Python's ``re``
   cannot compile -> INVALID_REGULAR_EXPRESSION.
2. **Group**: epoch 0 creates the group (an *empty* classic group of that id is deleted first; a classic group
   with members is upgraded online when ``group.consumer.migration.policy`` allows it, else GROUP_ID_NOT_FOUND
   "not a consumer group": :mod:`kbroker.coordinator.group.migration`); any other epoch for an unknown group ->
   GROUP_ID_NOT_FOUND. A new member beyond ``group.consumer.max.size`` ->
   GROUP_MAX_SIZE_REACHED.
3. **Member**: a dynamic member unknown to the group with epoch != 0 -> UNKNOWN_MEMBER_ID. An epoch above the
   member's -> FENCED_MEMBER_EPOCH; below it -> FENCED_MEMBER_EPOCH too, unless it is the member's previous
   epoch and the owned partitions are a subset of its assignment (the response with the new epoch was lost).
   Static members (``InstanceId``): joining with an instance id held by a member that did not leave with
   epoch -2 -> UNRELEASED_INSTANCE_ID; otherwise the new member id replaces the old one and inherits its
   assignment. A heartbeat for an unknown instance id -> UNKNOWN_MEMBER_ID; for another member id ->
   FENCED_INSTANCE_ID.
4. **Subscription**: changed fields are stored (record 5); new topic names or regex bump the group epoch.
   The subscribed topics' metadata (record 4) is recomputed when the subscription changed or the metadata
   image changed topics of the group; a change bumps the group epoch too (record 3). Regular expressions are
   resolved against the topic names (internal topics excluded) when first used and on metadata changes
   (record 16), and their topics count as subscribed.
5. **Target assignment**: when the group epoch is ahead of the assignment epoch, the assignor the most members
   ask for (else the first of ``group.consumer.assignors``) computes every member's target; changed targets
   (record 7) and the new assignment epoch (record 6) are stored.
6. **Reconciliation** of this member (``consumer_group.reconcile``; record 8). A member that must revoke gets a
   rebalance timer (its ``RebalanceTimeoutMs``): still in that epoch when it fires, it is fenced.
7. **Response**: member id, member epoch, ``group.consumer.heartbeat.interval.ms``, and the assignment when
   the request was a full one (joining, or every optional field set) or the assignment changed. The session
   timer (``group.consumer.session.timeout.ms``) restarts: a member that does not heartbeat in time is
   removed (records tombstoned, group epoch + 1) and learns it through UNKNOWN_MEMBER_ID.

Leaving: epoch -1 removes the member the same way (a consumer group left with classic members only is
downgraded to a classic group, :mod:`kbroker.coordinator.group.migration`); a static member's epoch -2 keeps it (and its partitions)
with epoch -2 until its session timeout, so that it can come back under a new member id.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import replace
from typing import Any, Callable

from kbroker.coordinator.group.assignors import ASSIGNORS, MemberSpec, PartitionAssignor
from kbroker.coordinator.group.consumer_group import (
    CONSUMER_GROUP_KEYS,
    CONSUMER_GROUP_TYPE,
    CONSUMER_PROTOCOL_TYPE,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    FencedMemberEpoch,
    MemberState,
    Partitions,
    ResolvedRegex,
    TopicMetadata,
    can_compute_next_assignment,
    current_assignment_record,
    freeze,
    group_epoch_record,
    group_tombstones,
    member_subscription_record,
    is_subset,
    reconcile,
    regex_record,
    regex_tombstone,
    remove_member_records,
    subscription_metadata_record,
    target_assignment_epoch_record,
    target_assignment_record,
)
from kbroker.coordinator.group.migration import join_timeout_key, sync_timeout_key
from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ListGroupsResponse,
)

log = logging.getLogger(__name__)

Resp = ConsumerGroupHeartbeatResponse
Described = ConsumerGroupDescribeResponse
#: ConsumerGroupHeartbeat v1 requires a member id generated by the client (KIP-1082)
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
#: ConsumerGroupDescribe v1 ``MemberType``: 1 = a member of the consumer protocol
MEMBER_TYPE_CONSUMER = 1
#: ... and 0 = a member of the classic protocol inside a consumer group (online migration)
MEMBER_TYPE_CLASSIC = 0

Owned = list[tuple[bytes, list[int]]] | None


def session_key(group_id: str, member_id: str) -> str:
    return f"cg-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"cg-rebalance-{group_id}-{member_id}"


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error_response(code: int, message: str | None) -> Resp:
    return Resp(error_code=code, error_message=message)


def _union(a: Partitions, b: Partitions) -> dict[bytes, frozenset[int]]:
    return {tid: a.get(tid, frozenset()) | b.get(tid, frozenset()) for tid in set(a) | set(b)}


def _assignment(partitions: Partitions) -> Resp.Assignment:
    return Resp.Assignment(topic_partitions=[Resp.TopicPartitions(topic_id=tid, partitions=sorted(ps))
                                             for tid, ps in sorted(partitions.items())])


def _log_when_stored(held: list[tuple[str, tuple[Any, ...]]],
                     then: Callable[[int], None] | None) -> Callable[[int], None]:
    def on_complete(error: int) -> None:
        if not error:
            for msg, args in held:
                log.info(msg, *args)
        if then is not None:
            then(error)
    return on_complete


class ConsumerGroupOps:
    """Mixin: the consumer-group side of the shard (see the module docstring). The host class provides
    ``config``, ``timer``, ``now_ms``, ``groups`` (classic), ``offsets``, ``loaded`` and ``image_provider``."""

    consumer_groups: dict[str, ConsumerGroup]
    image_provider: Callable[[], Any] | None

    def _init_consumer_groups(self) -> None:
        self.consumer_groups = {}
        self._assignors: dict[str, PartitionAssignor] = {name: cls() for name, cls in ASSIGNORS.items()}

    def _image(self) -> Any:
        return self.image_provider() if self.image_provider is not None else None

    # ==================================================================================== replay
    def replay_consumer_group_record(self, record: CoordinatorRecord) -> bool:
        """Apply a consumer-group record (types 3-8, 16); False if ``record`` is not one."""
        key = record.key
        if not isinstance(key, CONSUMER_GROUP_KEYS):
            return False
        group_id = key.group_id
        group = self.consumer_groups.get(group_id)
        if group is None:
            if record.value is None:
                return True  # a tombstone of a group that is gone already
            group = ConsumerGroup(group_id)
            self.consumer_groups[group_id] = group
            # a "simple" classic group held only committed offsets; the consumer group takes its place
            classic = self.groups.pop(group_id, None)  # type: ignore[attr-defined]
            if classic is not None and classic.members:
                log.warning("consumer group %s replaces a classic group with members", group_id)
        before = dict(group.members)
        group.replay(key, record.value)
        if group.deleted:
            del self.consumer_groups[group_id]
            for mid in before:
                self._cancel_consumer_member_timers(group_id, mid)
        elif self.loaded:  # type: ignore[attr-defined]
            for mid in before:
                if mid not in group.members:
                    self._cancel_consumer_member_timers(group_id, mid)
        return True

    def _cancel_consumer_member_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(session_key(group_id, member_id))  # type: ignore[attr-defined]
        self.timer.cancel(rebalance_key(group_id, member_id))  # type: ignore[attr-defined]
        self.timer.cancel(join_timeout_key(group_id, member_id))  # type: ignore[attr-defined]
        self.timer.cancel(sync_timeout_key(group_id, member_id))  # type: ignore[attr-defined]

    def _consumer_groups_loaded(self) -> None:
        """After loading: every member gets a session timer, members that must revoke a rebalance timer."""
        for group in self.consumer_groups.values():
            for member in group.members.values():
                self._schedule_session_timeout(group.group_id, member.member_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group.group_id, member)
            group.metadata_refresh = True  # the topics may have changed while the group was not served

    # ==================================================================================== heartbeat
    def consumer_group_heartbeat(self, meta: Any, request: ConsumerGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        self._held_logs: list[tuple[str, tuple[Any, ...]]] | None = []
        try:
            self._validate_heartbeat(meta.api_version, request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                result = self._consumer_group_leave(request)
            else:
                result = self._consumer_group_heartbeat(meta, request)
        except HeartbeatError as exc:
            return CoordinatorResult(response=_error_response(exc.code, exc.message))
        finally:
            held, self._held_logs = self._held_logs, None
        if held and result.records:
            result.on_complete = _log_when_stored(held, result.on_complete)
        return result

    def _info(self, msg: str, *args: Any) -> None:
        """INFO about what a heartbeat decided: logged once its records are stored. A heartbeat whose write fails
        (``__consumer_offsets`` below ``min.insync.replicas``: the client retries every few hundred ms) logs
        nothing, rather than the same join and group epoch again and again. Outside a heartbeat: at once."""
        held = getattr(self, "_held_logs", None)
        if held is None:
            log.info(msg, *args)
        else:
            held.append((msg, args))

    def _validate_heartbeat(self, version: int, r: ConsumerGroupHeartbeatRequest) -> None:
        def invalid(message: str) -> HeartbeatError:
            return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

        if not r.group_id:
            raise invalid("GroupId can't be empty.")
        if r.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if r.rack_id == "":
            raise invalid("RackId can't be empty.")
        if version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION and not r.member_id:
            raise invalid("MemberId can't be empty.")
        epoch = r.member_epoch
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not r.member_id:
                raise invalid("MemberId can't be empty.")
        elif epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.topic_partitions is None or r.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not r.subscribed_topic_names and not r.subscribed_topic_regex:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not r.member_id:
                raise invalid("MemberId can't be empty.")
            if r.instance_id is None:
                raise invalid("InstanceId can't be null.")
        else:
            raise invalid("MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.config.consumer_group_assignors:  # type: ignore[attr-defined]
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {r.server_assignor} is not supported. Supported assignors: "
                                 f"{', '.join(self.config.consumer_group_assignors)}.")  # type: ignore[attr-defined]
        if r.subscribed_topic_regex:
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as exc:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular "
                                     f"expression: {exc}.") from None

    @staticmethod
    def _check_member_epoch(member: ConsumerGroupMember, epoch: int, owned: Owned) -> None:
        if epoch > member.member_epoch:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a greater member epoch ({epoch}) than the one "
                                 f"known by the group coordinator ({member.member_epoch}). The member must "
                                 "abandon all its partitions and rejoin.")
        if epoch < member.member_epoch:
            if epoch != member.previous_member_epoch or not is_subset(owned, member.assigned):
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                     f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                                     f"known by the group coordinator ({member.member_epoch}). The member must "
                                     "abandon all its partitions and rejoin.")

    def _consumer_group_heartbeat(self, meta: Any, r: ConsumerGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        cfg = self.config  # type: ignore[attr-defined]
        group_id, epoch = r.group_id, r.member_epoch
        records: list[CoordinatorRecord] = []
        upgraded = False
        group = self.consumer_groups.get(group_id)
        if group is None and (group_id in getattr(self, "share_groups", {})
                              or group_id in getattr(self, "streams_groups", {})):
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if group is None:
            classic = self.groups.get(group_id)  # type: ignore[attr-defined]
            converted = None
            if classic is not None:
                if epoch != 0:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                if classic.members or classic.pending_join_members:
                    # online upgrade (kbroker.coordinator.group.migration)
                    converted = self._convert_classic_to_consumer(classic, records)  # type: ignore[attr-defined]
                    if converted is None:
                        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                             f"Group {group_id} is not a consumer group.")
                    upgraded = True
                else:
                    from kbroker.coordinator.group.records import group_metadata_tombstone
                    records.append(group_metadata_tombstone(group_id))  # an empty classic group makes way
            elif epoch != 0:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            group = converted or ConsumerGroup(group_id)  # exists once its records are replayed
        member_id = r.member_id or str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= cfg.consumer_group_max_size:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{cfg.consumer_group_max_size} members.")
        owned: Owned = None if r.topic_partitions is None else [
            (tp.topic_id, list(tp.partitions)) for tp in r.topic_partitions]

        # ---- the member
        replaced: ConsumerGroupMember | None = None
        if r.instance_id is None:
            existing = group.members.get(member_id)
            if existing is None:
                if epoch != 0:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                         f"Member {member_id} is not a member of group {group_id}.")
                member = ConsumerGroupMember(member_id)
                self._info("group %s: member %s joins (consumer protocol)", group_id, member_id)
            else:
                self._check_member_epoch(existing, epoch, owned)
                member = existing
        else:
            static = group.static_member(r.instance_id)
            if epoch == 0:
                if static is None:
                    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                    self._info("group %s: static member %s (instance %s) joins", group_id, member_id, r.instance_id)
                else:
                    if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                             f"Static member {static.member_id} with instance id {r.instance_id} "
                                             f"is not released yet; member {member_id} cannot join.")
                    replaced = static
                    member = replace(static, member_id=member_id, member_epoch=0, previous_member_epoch=0)
                    records += remove_member_records(group_id, static.member_id)
                    records.append(member_subscription_record(group_id, member))
                    records.append(target_assignment_record(group_id, member_id,
                                                            group.target_assignment.get(static.member_id, {})))
                    records.append(current_assignment_record(group_id, member))
                    self._info("group %s: static member %s rejoins as %s, replacing %s", group_id, r.instance_id,
                               member_id, static.member_id)
            else:
                if static is None:
                    raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
                if static.member_id != member_id:
                    raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                         f"Static member {member_id} with instance id {r.instance_id} was fenced "
                                         f"by member {static.member_id}.")
                self._check_member_epoch(static, epoch, owned)
                member = static
        is_new = replaced is None and member_id not in group.members

        # ---- 1. subscription, topic metadata, group epoch
        names = member.subscribed_topic_names
        if r.subscribed_topic_names is not None:
            names = tuple(sorted(set(r.subscribed_topic_names)))
        regex = member.subscribed_topic_regex
        if r.subscribed_topic_regex is not None:
            regex = r.subscribed_topic_regex or None
        updated = replace(
            member,
            instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=r.server_assignor if r.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=names, subscribed_topic_regex=regex,
            client_id=meta.client_id, client_host=meta.client_host)
        final, refreshed = self._update_and_reconcile(group, member, updated, replaced, is_new, owned, records)
        self._schedule_session_timeout(group_id, member_id)

        # ---- response
        resp = Resp(member_id=member_id, member_epoch=final.member_epoch,
                    heartbeat_interval_ms=self._consumer_timeouts(group_id)[1])
        full = epoch == 0 or (r.rebalance_timeout_ms != -1 and r.topic_partitions is not None and (
            r.subscribed_topic_names is not None or r.subscribed_topic_regex is not None))
        if full or dict(final.assigned) != dict(member.assigned):
            resp.assignment = _assignment(final.assigned)

        def on_complete(error: int) -> None:
            current = self.consumer_groups.get(group_id)
            if not error and refreshed and current is not None:
                current.metadata_refresh = False
            if not error and upgraded:
                self._schedule_converted_sessions(group_id)  # type: ignore[attr-defined]

        return CoordinatorResult(records, resp, on_complete)

    def _update_and_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember,
                              updated: ConsumerGroupMember, replaced: ConsumerGroupMember | None, is_new: bool,
                              owned: Owned, records: list[CoordinatorRecord]) -> tuple[ConsumerGroupMember, bool]:
        """Steps 4-6 of the module docstring for ``member`` becoming ``updated`` (a ConsumerGroupHeartbeat, or a
        JoinGroup of a classic member): subscription record, topic metadata and group epoch, target assignment,
        reconciliation. Records go to ``records``; returns (the reconciled member, whether the topic metadata
        was refreshed)."""
        group_id, member_id = group.group_id, updated.member_id
        bump = False
        if is_new or updated.subscription_key() != member.subscription_key():
            records.append(member_subscription_record(group_id, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names or \
                updated.subscribed_topic_regex != member.subscribed_topic_regex or is_new
        members_after = dict(group.members)
        if replaced is not None:
            del members_after[replaced.member_id]
        members_after[member_id] = updated

        group_epoch = group.group_epoch
        metadata = group.subscription_metadata
        regexes = group.resolved_regexes
        refreshed = group.metadata_refresh
        if bump or refreshed:
            regexes = self._resolve_regexes(group, members_after.values(), refreshed, records)
            metadata = self._topic_metadata(group.subscribed_topic_names(members_after.values(), regexes))
            if metadata != group.subscription_metadata:
                records.append(subscription_metadata_record(group_id, metadata))
                bump = True
            if bump:
                group_epoch += 1
                records.append(group_epoch_record(group_id, group_epoch))
                self._info("group %s: group epoch %d", group_id, group_epoch)

        # ---- 2. target assignment: at most once per consumer.assignment.interval.ms (KIP-1263); until then the
        # member reconciles against the last target (a new member: the assignment epoch, nothing assigned)
        interval_ms = int(self.group_config(group_id)["consumer.assignment.interval.ms"])  # type: ignore[attr-defined, call-overload]
        if group_epoch > group.assignment_epoch and can_compute_next_assignment(
                group.assignment_timestamp_ms, interval_ms, self.now_ms()):  # type: ignore[attr-defined]
            targets = self._compute_target_assignment(group, members_after, metadata, regexes, group_epoch,
                                                      replaced, records)
            target = targets.get(member_id, {})
            assignment_epoch = group_epoch
        else:
            assignment_epoch = group.assignment_epoch
            target = group.target_assignment.get(member_id)
            if target is None and replaced is not None:
                target = group.target_assignment.get(replaced.member_id)
            target = target or {}

        # ---- 3. reconciliation
        final = updated
        if not updated.is_reconciled_to(assignment_epoch):
            try:
                final = reconcile(updated, assignment_epoch, target, group.current_partition_epoch, owned)
            except FencedMemberEpoch as exc:
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from None
        if final.assignment_key() != updated.assignment_key() or (is_new and replaced is None):
            records.append(current_assignment_record(group_id, final))
            if final.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group_id, final)
            else:
                self.timer.cancel(rebalance_key(group_id, member_id))  # type: ignore[attr-defined]
        return final, refreshed

    def _resolve_regexes(self, group: ConsumerGroup, members: Any, refresh: bool,
                         records: list[CoordinatorRecord]) -> dict[str, ResolvedRegex]:
        """Resolutions of the regexes the members use: new ones (and all, on ``refresh``) resolved now;
        unused ones dropped. Changes go to ``records``."""
        used = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        out: dict[str, ResolvedRegex] = {}
        image = self._image()
        for regex in sorted(used):
            old = group.resolved_regexes.get(regex)
            if old is not None and not refresh:
                out[regex] = old
                continue
            topics = frozenset(self._match_topics(regex, image))
            if old is not None and old.topics == topics:
                out[regex] = old
                continue
            resolved = ResolvedRegex(topics, getattr(image, "offset", -1), self.now_ms())  # type: ignore[attr-defined]
            out[regex] = resolved
            records.append(regex_record(group.group_id, regex, resolved))
        for regex in sorted(set(group.resolved_regexes) - used):
            records.append(regex_tombstone(group.group_id, regex))
        return out

    @staticmethod
    def _match_topics(regex: str, image: Any) -> list[str]:
        if image is None:
            return []
        pattern = re.compile(regex)
        return sorted(name for name, t in image.topics_by_name.items()
                      if not t.is_internal and pattern.fullmatch(name))

    def _topic_metadata(self, names: set[str]) -> dict[str, TopicMetadata]:
        image = self._image()
        out: dict[str, TopicMetadata] = {}
        if image is None:
            return out
        for name in sorted(names):
            t = image.topics_by_name.get(name)
            if t is not None:
                out[name] = TopicMetadata(t.topic_id, name, len(t.partitions))
        return out

    def _compute_target_assignment(self, group: ConsumerGroup, members: dict[str, ConsumerGroupMember],
                                   metadata: dict[str, TopicMetadata], regexes: dict[str, ResolvedRegex],
                                   epoch: int, replaced: ConsumerGroupMember | None,
                                   records: list[CoordinatorRecord]) -> dict[str, Partitions]:
        topics = {t.topic_id: t.num_partitions for t in metadata.values()}
        specs: dict[str, MemberSpec] = {}
        for mid, m in members.items():
            names = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex is not None and m.subscribed_topic_regex in regexes:
                names |= regexes[m.subscribed_topic_regex].topics
            previous = group.target_assignment.get(mid)
            if previous is None and replaced is not None and m.instance_id == replaced.instance_id:
                previous = group.target_assignment.get(replaced.member_id)
            specs[mid] = MemberSpec(frozenset(metadata[n].topic_id for n in names if n in metadata),
                                    m.instance_id, m.rack_id, previous or {})
        name = group.preferred_assignor(members.values(), self.config.consumer_group_assignors[0])  # type: ignore[attr-defined]
        assignor = self._assignors.get(name) or self._assignors[self.config.consumer_group_assignors[0]]  # type: ignore[attr-defined]
        result = {mid: freeze(a) for mid, a in assignor.assign(specs, topics).items()}
        for mid in sorted(result):
            old = group.target_assignment.get(mid)
            if old is None or dict(old) != result[mid]:
                records.append(target_assignment_record(group.group_id, mid, result[mid]))
        records.append(target_assignment_epoch_record(group.group_id, epoch, self.now_ms()))  # type: ignore[attr-defined]
        self._info("group %s: target assignment for epoch %d computed with the %s assignor", group.group_id, epoch,
                   name)
        return result

    # ==================================================================================== leaving, fencing
    def _consumer_group_leave(self, r: ConsumerGroupHeartbeatRequest) -> CoordinatorResult[Resp]:
        group = self.consumer_groups.get(r.group_id)
        if group is None:
            if r.group_id in self.groups:  # type: ignore[attr-defined]
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {r.group_id} is not a consumer group.")
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {r.group_id} not found.")
        response = Resp(member_id=r.member_id, member_epoch=r.member_epoch)
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {r.member_id} is not a member of group {r.group_id}.")
            self._info("group %s: member %s left", r.group_id, r.member_id)
            return self._fence_member(group, member, response)
        static = group.static_member(r.instance_id)
        if static is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
        if static.member_id != r.member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {r.member_id} with instance id {r.instance_id} was fenced by "
                                 f"member {static.member_id}.")
        if r.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            self._info("group %s: static member %s (instance %s) left temporarily", r.group_id, r.member_id,
                       r.instance_id)
            leaving = replace(static, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            return CoordinatorResult([current_assignment_record(r.group_id, leaving)], response)
        self._info("group %s: static member %s (instance %s) left", r.group_id, r.member_id, r.instance_id)
        return self._fence_member(group, static, response)

    def _fence_member(self, group: ConsumerGroup, member: ConsumerGroupMember, response: Any) -> CoordinatorResult[Any]:
        """Remove ``member``: its records are tombstoned, the topic metadata recomputed, the group epoch bumped."""
        gid = group.group_id
        downgrade = self._maybe_downgrade(group, member.member_id)  # type: ignore[attr-defined]
        if downgrade is not None:
            return CoordinatorResult(downgrade.records, response, downgrade.on_complete)
        records = remove_member_records(gid, member.member_id)
        remaining = [m for mid, m in group.members.items() if mid != member.member_id]
        regexes = self._resolve_regexes(group, remaining, False, records)
        metadata = self._topic_metadata(group.subscribed_topic_names(remaining, regexes))
        if metadata != group.subscription_metadata:
            records.append(subscription_metadata_record(gid, metadata))
        records.append(group_epoch_record(gid, group.group_epoch + 1))
        self._cancel_consumer_member_timers(gid, member.member_id)
        return CoordinatorResult(records, response)

    def _consumer_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout ms, heartbeat interval ms) of consumer group ``group_id``: its group configs
        ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` when set, else the broker's."""
        cfg = self.group_config(group_id)  # type: ignore[attr-defined]
        return int(cfg["consumer.session.timeout.ms"]), int(cfg["consumer.heartbeat.interval.ms"])  # type: ignore[call-overload]

    def _schedule_session_timeout(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        """(Re)start the member's session timer: ``timeout_ms``, else a classic member's JoinGroup session
        timeout, else the group's ``consumer.session.timeout.ms``."""
        if timeout_ms is None:
            group = self.consumer_groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            timeout_ms = member.classic.session_timeout_ms if member is not None and member.classic is not None \
                else self._consumer_timeouts(group_id)[0]
        self.timer.schedule(session_key(group_id, member_id), timeout_ms,  # type: ignore[attr-defined]
                            lambda: self._on_session_timeout(group_id, member_id))

    def _on_session_timeout(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return CoordinatorResult()
        log.info("group %s: member %s fenced: no heartbeat within its session timeout", group_id, member_id)
        return self._fence_member(group, member, None)

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000
        self.timer.schedule(rebalance_key(group_id, member_id), timeout,  # type: ignore[attr-defined]
                            lambda: self._on_rebalance_timeout(group_id, member_id, epoch, timeout))

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int, timeout: int) -> CoordinatorResult[None]:
        group = self.consumer_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.member_epoch != epoch:
            return CoordinatorResult()
        log.info("group %s: member %s fenced: did not leave epoch %d within %d ms", group_id, member_id, epoch,
                 timeout)
        return self._fence_member(group, member, None)

    # ==================================================================================== metadata
    def on_topics_changed(self, names: set[str], topics_created_or_deleted: bool) -> None:
        """The metadata image changed these topics: their groups recompute topic metadata on the next
        heartbeat (groups with regexes do whenever topics come or go)."""
        for group in self.consumer_groups.values():
            if topics_created_or_deleted and group.resolved_regexes:
                group.metadata_refresh = True
            elif names & (set(group.subscription_metadata) | group.subscribed_topic_names()):
                group.metadata_refresh = True

    # ==================================================================================== describe, list
    def consumer_group_describe(self, group_id: str, include_authorized_operations: bool,
                                authorized_operations: int) -> Described.DescribedGroup:
        group = self.consumer_groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group."
                       if group_id in self.groups or group_id in getattr(self, "share_groups", {})  # type: ignore[attr-defined]
                       or group_id in getattr(self, "streams_groups", {})
                       else f"Group {group_id} not found.")
            return Described.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message,
                                            group_id=group_id)
        image = self._image()

        def tps(partitions: Partitions) -> Described.Assignment:
            out = []
            for tid, ps in sorted(partitions.items()):
                t = image.topics_by_id.get(tid) if image is not None else None
                if t is not None:
                    out.append(Described.TopicPartitions(topic_id=tid, topic_name=t.name, partitions=sorted(ps)))
            return Described.Assignment(topic_partitions=out)

        members = [Described.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            # Kafka: "" if no regex; the assignment still holds the partitions pending revocation
            subscribed_topic_regex=m.subscribed_topic_regex or "", assignment=tps(_union(m.assigned,
                                                                                      m.pending_revocation)),
            target_assignment=tps(group.target_assignment.get(m.member_id, {})),
            member_type=MEMBER_TYPE_CONSUMER if m.classic is None else MEMBER_TYPE_CLASSIC)
            for m in group.members.values()]
        return Described.DescribedGroup(
            group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(group.members.values(), self.config.consumer_group_assignors[0]),  # type: ignore[attr-defined]
            members=members,
            authorized_operations=authorized_operations if include_authorized_operations else -2147483648)

    def list_consumer_groups(self, states: set[str] | None, types: set[str] | None) -> list[ListGroupsResponse.ListedGroup]:
        if types and CONSUMER_GROUP_TYPE not in types:
            return []
        out = []
        for group in self.consumer_groups.values():
            state = group.state.value
            if states and state.lower() not in states:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=group.group_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
                                                      group_state=state, group_type=CONSUMER_GROUP_TYPE))
        return out

    # ==================================================================================== offsets
    def validate_consumer_group_commit(self, group: ConsumerGroup, api_version: int, member_id: str,
                                       member_epoch: int, transactional: bool = False) -> int:
        """OffsetCommit (and TxnOffsetCommit) of a consumer group: epoch -1 from a non-member (Admin client,
        manual assignment) is accepted only while the group is empty; a member must send OffsetCommit v9+
        and its current member epoch (STALE_MEMBER_EPOCH; the TxnOffsetCommit handler reports it as
        ILLEGAL_GENERATION below v6, KIP-1319)."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not transactional and member.classic is None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_offset_fetch_member(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """OffsetFetch v9+ of a consumer group: a member id / epoch, when given, must be the member's."""
        group = self.consumer_groups.get(group_id) or getattr(self, "streams_groups", {}).get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.NONE
        member = group.members.get(member_id) if member_id is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def consumer_group_is_empty(self, group_id: str) -> bool:
        group = self.consumer_groups.get(group_id)
        return group is not None and group.state is ConsumerGroupState.EMPTY

    def consumer_group_tombstones(self, group_id: str) -> list[CoordinatorRecord]:
        return group_tombstones(self.consumer_groups[group_id])

