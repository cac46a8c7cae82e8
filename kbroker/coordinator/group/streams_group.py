"""Streams groups of the streams rebalance protocol (KIP-1071: ``StreamsGroupHeartbeat``, ``StreamsGroupDescribe``).

A streams group is the KIP-848 group model with tasks in place of partitions. A task is ``(subtopology id,
partition)``; each member (one Kafka Streams consumer, i.e. one stream thread) owns *active*, *standby* and
*warm-up* tasks. The coordinator keeps, as for consumer groups (:mod:`kbroker.coordinator.group.consumer_group`):

* the **group epoch**, bumped when a member joins or leaves, when the topology is first set or replaced by a newer
  one, or when the metadata of the topology's topics changes (a hash over their names and partition counts,
  ``metadata_hash`` in record 17; creating the missing internal topics changes it);
* the **assignment epoch** of the *target assignment*, computed by the sticky task assignor (:func:`assign_tasks`)
  once the group epoch is ahead of it;
* each **member epoch**: the assignment epoch the member reconciled to. Reconciliation is consumer groups'
  :func:`~kbroker.coordinator.group.consumer_group.reconcile`, over keys ``(kind, subtopology id)`` (kind
  ``active``, ``standby``, ``warmup``): a member gives up what it loses first (``UNREVOKED_TASKS``), and an active
  task is handed over only once no other member holds it (``UNRELEASED_TASKS``).

**The topology** (``StreamsGroupTopology``, record 23) comes with a member's first heartbeat. It is *configured*
against the metadata image (:func:`configure_topology`): each subtopology gets as many tasks as its largest source
topic has partitions; repartition topics without a partition count take the largest count of the subtopologies
that write to them; changelog topics get their subtopology's task count. Missing source topics answer the status
MISSING_SOURCE_TOPICS; missing internal (repartition, changelog) topics answer MISSING_INTERNAL_TOPICS and the
broker creates them (:mod:`kbroker.server.handlers.streams_group_heartbeat`), as Kafka 4.3's group coordinator
does. Until the topology is configured the group is ``NotReady`` and its target assignment is empty.

Group states: ``Empty``, ``NotReady``, ``Assigning``, ``Reconciling``, ``Stable``, ``Dead`` (Kafka's
``StreamsGroupState``). Durable state is records 17-23 of ``__consumer_offsets`` (the StreamsGroup* coordinator
records); :meth:`StreamsGroup.replay` applies them and nothing else changes a group's durable fields.

Not implemented (yet): static membership (``InstanceId``), warm-up tasks and ``acceptable.recovery.lag``
(the task offsets a member reports are ignored),
IQ endpoints (``PartitionsByUserEndpoint`` is always null), source topic regexes, copartitioning checks.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from kbroker.coordinator.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    FencedMemberEpoch,
    MemberState,
    Partitions,
    freeze,
    is_subset,
    reconcile,
)
from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorResult
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    ListGroupsResponse,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)

log = logging.getLogger(__name__)

STREAMS_GROUP_TYPE = "streams"
STREAMS_PROTOCOL_TYPE = "streams"
#: the only assignor (Kafka's default ``group.streams.assignors``)
STICKY_ASSIGNOR = "sticky"
#: task kinds, the first element of a reconciliation key
ACTIVE, STANDBY, WARMUP = "active", "standby", "warmup"
KINDS = (ACTIVE, STANDBY, WARMUP)
#: ``AcceptableRecoveryLag`` and ``TaskOffsetIntervalMs`` sent to members (what Kafka 4.3 sends)
ACCEPTABLE_RECOVERY_LAG = 10_000
TASK_OFFSET_INTERVAL_MS = 0

# StreamsGroupHeartbeatResponse status codes (KIP-1071)
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5
ASSIGNMENT_DELAYED_DETAIL = "Assignment delayed due to the configured initial rebalance delay."

Resp = StreamsGroupHeartbeatResponse
Described = StreamsGroupDescribeResponse
#: (kind, subtopology id) -> partitions: a member's tasks in the form reconcile() works on
Tasks = Partitions


def session_key(group_id: str, member_id: str) -> str:
    return f"sg-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"sg-rebalance-{group_id}-{member_id}"


class StreamsHeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class StreamsGroupMember:
    """A member: its metadata (record 19) and its current assignment (record 22). ``classic`` is always None (the
    offset-commit validation of consumer groups is shared)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Tasks = field(default_factory=dict)
    pending_revocation: Tasks = field(default_factory=dict)
    classic: None = None

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    def metadata_key(self) -> tuple[Any, ...]:
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                self.topology_epoch, self.process_id, self.user_endpoint, self.client_tags)

    def assignment_key(self) -> tuple[Any, ...]:
        return (self.member_epoch, self.previous_member_epoch, self.state, dict(self.assigned),
                dict(self.pending_revocation))


@dataclass
class ConfiguredTopology:
    """A topology against the metadata image: ``tasks`` (subtopology id -> partition count) when every topic is
    there, else None and the statuses; ``missing_internal``: name -> (partitions, replication factor, configs) of
    the internal topics to create."""

    tasks: dict[str, int] | None
    statuses: list[tuple[int, str]]
    missing_internal: dict[str, tuple[int, int, dict[str, str]]]
    metadata_hash: int


@dataclass(eq=False)
class StreamsGroup:
    """A streams group's state; durable fields change only in :meth:`replay`."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    topology: Any = None  # StreamsGroupTopologyValue
    members: dict[str, StreamsGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Tasks] = field(default_factory=dict)
    #: (subtopology id, partition) -> epoch of the member holding the active task (assigned or pending revocation)
    active_task_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    #: in memory: whether the configured topology had all its topics at the last heartbeat
    ready: bool = False
    deleted: bool = False

    @property
    def state(self) -> str:
        if self.deleted:
            return "Dead"
        if not self.members:
            return "Empty"
        if not self.ready:
            return "NotReady"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def task_epoch(self, key: Any, partition: int) -> int:
        """For reconcile(): the epoch of the member holding an active task, -1 when free; standby and warm-up
        tasks are never held back."""
        kind, subtopology = key
        if kind != ACTIVE:
            return -1
        return self.active_task_epochs.get((subtopology, partition), -1)

    # ---- replay
    def replay(self, key: Any, value: Any | None) -> None:
        """Apply one streams-group record (types 17-23)."""
        if isinstance(key, cr.StreamsGroupMetadataKey):
            if value is None:
                self.deleted = True
            else:
                self.group_epoch, self.metadata_hash = value.epoch, value.metadata_hash
        elif isinstance(key, cr.StreamsGroupTopologyKey):
            self.topology = value
        elif isinstance(key, cr.StreamsGroupMemberMetadataKey):
            self._replay_member_metadata(key.member_id, value)
        elif isinstance(key, cr.StreamsGroupTargetAssignmentMetadataKey):
            self.assignment_epoch = -1 if value is None else value.assignment_epoch
        elif isinstance(key, cr.StreamsGroupTargetAssignmentMemberKey):
            if value is None:
                self.target_assignment.pop(key.member_id, None)
            else:
                self.target_assignment[key.member_id] = _tasks_of(value.active_tasks, value.standby_tasks,
                                                                  value.warmup_tasks)
        elif isinstance(key, cr.StreamsGroupCurrentMemberAssignmentKey):
            self._replay_current_assignment(key.member_id, value)

    def _replay_member_metadata(self, member_id: str, value: Any | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._set_task_epochs(old, None)
                del self.members[member_id]
            return
        ep = value.user_endpoint
        self.members[member_id] = replace(
            old or StreamsGroupMember(member_id), instance_id=value.instance_id or None,
            rack_id=value.rack_id or None, client_id=value.client_id, client_host=value.client_host,
            rebalance_timeout_ms=value.rebalance_timeout_ms, topology_epoch=value.topology_epoch,
            process_id=value.process_id, user_endpoint=None if ep is None else (ep.host, ep.port),
            client_tags=tuple((kv.key, kv.value) for kv in value.client_tags))

    def _replay_current_assignment(self, member_id: str, value: Any | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._set_task_epochs(old, None)
                self.members[member_id] = replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                  previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                  state=MemberState.STABLE, assigned={}, pending_revocation={})
            return
        member = replace(old or StreamsGroupMember(member_id), member_epoch=value.member_epoch,
                         previous_member_epoch=value.previous_member_epoch, state=MemberState.of(value.state),
                         assigned=_tasks_of(value.active_tasks, value.standby_tasks, value.warmup_tasks),
                         pending_revocation=_tasks_of(value.active_tasks_pending_revocation,
                                                      value.standby_tasks_pending_revocation,
                                                      value.warmup_tasks_pending_revocation))
        self._set_task_epochs(old, member)
        self.members[member_id] = member

    def _set_task_epochs(self, old: StreamsGroupMember | None, new: StreamsGroupMember | None) -> None:
        if old is not None:
            for (kind, sub), ps in list(old.assigned.items()) + list(old.pending_revocation.items()):
                for p in ps if kind == ACTIVE else ():
                    if self.active_task_epochs.get((sub, p)) == old.member_epoch:
                        del self.active_task_epochs[(sub, p)]
        if new is not None:
            for (kind, sub), ps in list(new.assigned.items()) + list(new.pending_revocation.items()):
                for p in ps if kind == ACTIVE else ():
                    self.active_task_epochs[(sub, p)] = new.member_epoch


def _tasks_of(active: Iterable[Any], standby: Iterable[Any], warmup: Iterable[Any]) -> dict[Any, frozenset[int]]:
    out: dict[Any, frozenset[int]] = {}
    for kind, items in ((ACTIVE, active), (STANDBY, standby), (WARMUP, warmup)):
        for t in items or ():
            if t.partitions:
                out[(kind, t.subtopology_id)] = out.get((kind, t.subtopology_id), frozenset()) | frozenset(t.partitions)
    return out


def _task_ids(cls: Any, tasks: Tasks, kind: str) -> list[Any]:
    return [cls(subtopology_id=sub, partitions=sorted(ps))
            for (k, sub), ps in sorted(tasks.items()) if k == kind and ps]


# ============================================================================================ topology


def configure_topology(topology: Any, partitions_of: Callable[[str], int | None],
                       topic_names: Callable[[], Iterable[str]]) -> ConfiguredTopology:
    """Configure ``topology`` (StreamsGroupTopologyValue) against the metadata: ``partitions_of(name)`` is a topic's
    partition count (None: no such topic), ``topic_names()`` every non-internal topic (for source regexes)."""
    subs = list(topology.subtopologies) if topology is not None else []
    statuses: list[tuple[int, str]] = []
    sources: dict[str, list[str]] = {}
    missing_sources: list[str] = []
    for s in subs:
        names = list(s.source_topics)
        for regex in s.source_topic_regex:
            try:
                pattern = re.compile(regex)
            except re.error:
                continue
            names += sorted(n for n in topic_names() if pattern.fullmatch(n))
        sources[s.subtopology_id] = names
        missing_sources += [n for n in s.source_topics if partitions_of(n) is None]
    # repartition topics: the given count, else the largest source count of the subtopologies writing to them
    repartition: dict[str, int] = {}
    for s in subs:
        for t in s.repartition_source_topics:
            if t.partitions > 0:
                repartition[t.name] = t.partitions
    for _ in range(len(subs) + 1):
        changed = False
        for s in subs:
            counts = [partitions_of(n) or 0 for n in sources[s.subtopology_id]]
            counts += [repartition.get(t.name, 0) for t in s.repartition_source_topics]
            width = max(counts, default=0)
            for sink in s.repartition_sink_topics:
                if width > repartition.get(sink, 0) and not any(
                        t.name == sink and t.partitions > 0 for x in subs for t in x.repartition_source_topics):
                    repartition[sink] = width
                    changed = True
        if not changed:
            break
    tasks: dict[str, int] = {}
    for s in subs:
        counts = [partitions_of(n) or 0 for n in sources[s.subtopology_id]]
        counts += [repartition.get(t.name, 0) for t in s.repartition_source_topics]
        tasks[s.subtopology_id] = max(counts, default=0)
    missing_internal: dict[str, tuple[int, int, dict[str, str]]] = {}
    wrong: list[str] = []
    for s in subs:
        internal = [(t, repartition.get(t.name, 0)) for t in s.repartition_source_topics]
        internal += [(t, t.partitions if t.partitions > 0 else tasks[s.subtopology_id])
                     for t in s.state_changelog_topics]
        for t, want in internal:
            have = partitions_of(t.name)
            if have is None:
                if want > 0:
                    missing_internal[t.name] = (want, t.replication_factor if t.replication_factor > 0 else -1,
                                                {c.key: c.value for c in t.topic_configs})
            elif have != want and want > 0:
                wrong.append(t.name)
    if missing_sources:
        statuses.append((MISSING_SOURCE_TOPICS, f"Source topics {', '.join(sorted(set(missing_sources)))} are "
                                                f"missing."))
    if missing_internal:
        statuses.append((MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {sorted(missing_internal)}"))
    if wrong:
        statuses.append((INCORRECTLY_PARTITIONED_TOPICS,
                         f"Internal topics {', '.join(sorted(wrong))} have the wrong number of partitions."))
    every = sorted({n for names in sources.values() for n in names} | set(repartition)
                   | {t.name for s in subs for t in s.state_changelog_topics})
    digest = hashlib.sha256(repr([(n, partitions_of(n)) for n in every]).encode()).digest()
    return ConfiguredTopology(None if statuses else tasks, statuses, {} if missing_sources else missing_internal,
                              int.from_bytes(digest[:8], "big", signed=True))


# ============================================================================================ assignor


def assign_tasks(members: Mapping[str, StreamsGroupMember], tasks: Mapping[str, int],
                 previous: Mapping[str, Tasks], num_standby: int) -> dict[str, Tasks]:
    """The sticky task assignment (the behaviour of Kafka's default ``sticky`` streams assignor, re-stated): every
    active task goes to exactly one member, kept where it was when that member is not above its fair share
    (ceil(tasks / members)), else to the member with the fewest tasks; then ``num_standby`` standby replicas of each
    task go to members of *other processes* than the active one and each other (kept where they were when
    possible, else to the least loaded), as many as there are such processes."""
    ids = sorted(members)
    out: dict[str, dict[Any, set[int]]] = {m: {} for m in ids}
    if not ids:
        return {}
    all_tasks = [(sub, p) for sub in sorted(tasks, key=_sub_order) for p in range(tasks[sub])]
    cap = -(-len(all_tasks) // len(ids))
    load = {m: 0 for m in ids}
    owner: dict[tuple[str, int], str] = {}
    prev_active = {(sub, p): m for m, a in previous.items() if m in out for (k, sub), ps in a.items()
                   if k == ACTIVE for p in ps}
    rest = []
    for task in all_tasks:
        m = prev_active.get(task)
        if m is not None and load[m] < cap:
            owner[task] = m
            load[m] += 1
        else:
            rest.append(task)
    for task in rest:
        m = min(ids, key=lambda x: (load[x], x))
        owner[task] = m
        load[m] += 1
    for (sub, p), m in owner.items():
        out[m].setdefault((ACTIVE, sub), set()).add(p)
    if num_standby > 0:
        prev_standby: dict[tuple[str, int], set[str]] = {}
        for m, a in previous.items():
            for (k, sub), ps in a.items():
                if k == STANDBY and m in out:
                    for p in ps:
                        prev_standby.setdefault((sub, p), set()).add(m)
        for task in all_tasks:
            used = {members[owner[task]].process_id}
            for _ in range(num_standby):
                candidates = [m for m in ids if members[m].process_id not in used]
                if not candidates:
                    break
                kept = sorted(prev_standby.get(task, set()) & set(candidates))
                m = kept[0] if kept else min(candidates, key=lambda x: (load[x], x))
                out[m].setdefault((STANDBY, task[0]), set()).add(task[1])
                load[m] += 1
                used.add(members[m].process_id)
    return {m: freeze(a) for m, a in out.items()}


def _sub_order(sub: str) -> tuple[int, str]:
    return (int(sub), sub) if sub.isdigit() else (1 << 30, sub)


# ============================================================================================ records


def _rec(key: Any, value: Any) -> CoordinatorRecord:
    return CoordinatorRecord(key, value)


def group_metadata_record(group_id: str, epoch: int, metadata_hash: int, validated_topology_epoch: int,
                          num_standby: int) -> CoordinatorRecord:
    V = cr.StreamsGroupMetadataValue
    return _rec(cr.StreamsGroupMetadataKey(group_id=group_id), V(
        epoch=epoch, metadata_hash=metadata_hash, validated_topology_epoch=validated_topology_epoch,
        last_assignment_configs=[V.LastAssignmentConfig(key="num.standby.replicas", value=str(num_standby))]))


def topology_record(group_id: str, topology: Any) -> CoordinatorRecord:
    V = cr.StreamsGroupTopologyValue

    def info(t: Any) -> Any:
        return V.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                           topic_configs=[V.TopicConfig(key=c.key, value=c.value) for c in t.topic_configs])

    return _rec(cr.StreamsGroupTopologyKey(group_id=group_id), V(epoch=topology.epoch, subtopologies=[
        V.Subtopology(subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                      source_topic_regex=list(s.source_topic_regex),
                      state_changelog_topics=[info(t) for t in s.state_changelog_topics],
                      repartition_sink_topics=list(s.repartition_sink_topics),
                      repartition_source_topics=[info(t) for t in s.repartition_source_topics],
                      copartition_groups=[V.CopartitionGroup(
                          source_topics=list(c.source_topics), source_topic_regex=list(c.source_topic_regex),
                          repartition_source_topics=list(c.repartition_source_topics)) for c in s.copartition_groups])
        for s in topology.subtopologies]))


def member_metadata_record(group_id: str, m: StreamsGroupMember) -> CoordinatorRecord:
    V = cr.StreamsGroupMemberMetadataValue
    return _rec(cr.StreamsGroupMemberMetadataKey(group_id=group_id, member_id=m.member_id), V(
        instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
        rebalance_timeout_ms=m.rebalance_timeout_ms, topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=None if m.user_endpoint is None else V.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
        client_tags=[V.KeyValue(key=k, value=v) for k, v in m.client_tags]))


def target_assignment_record(group_id: str, member_id: str, tasks: Tasks) -> CoordinatorRecord:
    V = cr.StreamsGroupTargetAssignmentMemberValue
    return _rec(cr.StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), V(
        active_tasks=_task_ids(V.TaskIds, tasks, ACTIVE), standby_tasks=_task_ids(V.TaskIds, tasks, STANDBY),
        warmup_tasks=_task_ids(V.TaskIds, tasks, WARMUP)))


def target_assignment_epoch_record(group_id: str, epoch: int, timestamp_ms: int) -> CoordinatorRecord:
    return _rec(cr.StreamsGroupTargetAssignmentMetadataKey(group_id=group_id),
                cr.StreamsGroupTargetAssignmentMetadataValue(assignment_epoch=epoch, assignment_timestamp=timestamp_ms))


def current_assignment_record(group_id: str, m: StreamsGroupMember) -> CoordinatorRecord:
    V = cr.StreamsGroupCurrentMemberAssignmentValue

    def ids(tasks: Tasks, kind: str) -> list[Any]:
        return [V.TaskIds(subtopology_id=s, partitions=sorted(ps), assignment_epochs=None)
                for (k, s), ps in sorted(tasks.items()) if k == kind and ps]

    return _rec(cr.StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=m.member_id), V(
        member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=int(m.state),
        active_tasks=ids(m.assigned, ACTIVE), standby_tasks=ids(m.assigned, STANDBY),
        warmup_tasks=ids(m.assigned, WARMUP), active_tasks_pending_revocation=ids(m.pending_revocation, ACTIVE),
        standby_tasks_pending_revocation=ids(m.pending_revocation, STANDBY),
        warmup_tasks_pending_revocation=ids(m.pending_revocation, WARMUP)))


def remove_member_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [_rec(cr.StreamsGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None),
            _rec(cr.StreamsGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None),
            _rec(cr.StreamsGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)]


def group_tombstones(group: StreamsGroup) -> list[CoordinatorRecord]:
    gid = group.group_id
    records: list[CoordinatorRecord] = []
    for mid in sorted(set(group.members) | set(group.target_assignment)):
        records += remove_member_records(gid, mid)
    records += [_rec(cr.StreamsGroupTargetAssignmentMetadataKey(group_id=gid), None),
                _rec(cr.StreamsGroupTopologyKey(group_id=gid), None),
                _rec(cr.StreamsGroupMetadataKey(group_id=gid), None)]
    return records


STREAMS_GROUP_KEYS = (cr.StreamsGroupMetadataKey, cr.StreamsGroupTopologyKey, cr.StreamsGroupMemberMetadataKey,
                      cr.StreamsGroupTargetAssignmentMetadataKey, cr.StreamsGroupTargetAssignmentMemberKey,
                      cr.StreamsGroupCurrentMemberAssignmentKey)
STREAMS_GROUP_RECORD_CLASSES = (
    cr.StreamsGroupMetadataKey, cr.StreamsGroupMetadataValue,
    cr.StreamsGroupTopologyKey, cr.StreamsGroupTopologyValue,
    cr.StreamsGroupMemberMetadataKey, cr.StreamsGroupMemberMetadataValue,
    cr.StreamsGroupTargetAssignmentMetadataKey, cr.StreamsGroupTargetAssignmentMetadataValue,
    cr.StreamsGroupTargetAssignmentMemberKey, cr.StreamsGroupTargetAssignmentMemberValue,
    cr.StreamsGroupCurrentMemberAssignmentKey, cr.StreamsGroupCurrentMemberAssignmentValue,
)


# ============================================================================================ operations


class StreamsGroupOps:
    """Mixin of :class:`~kbroker.coordinator.group.shard.GroupCoordinatorShard`: StreamsGroupHeartbeat,
    StreamsGroupDescribe, session and rebalance timeouts, and the streams-group side of ListGroups, DeleteGroups
    and offset commits. The host provides ``config``, ``timer``, ``now_ms``, ``groups``, ``consumer_groups``,
    ``share_groups``, ``loaded``, ``group_config`` and ``image_provider``."""

    streams_groups: dict[str, StreamsGroup]

    def _init_streams_groups(self) -> None:
        self.streams_groups = {}
        #: group id -> when (ms) the initial rebalance delay of a new group ends (in memory, as in Kafka)
        self._streams_delay_until: dict[str, int] = {}

    # ---- replay
    def replay_streams_group_record(self, record: CoordinatorRecord) -> bool:
        key = record.key
        if not isinstance(key, STREAMS_GROUP_KEYS):
            return False
        group = self.streams_groups.get(key.group_id)
        if group is None:
            if record.value is None:
                return True
            group = self.streams_groups[key.group_id] = StreamsGroup(key.group_id)
            self.groups.pop(key.group_id, None)  # type: ignore[attr-defined]  # a simple group's place
        before = set(group.members)
        group.replay(key, record.value)
        if group.deleted:
            del self.streams_groups[key.group_id]
        for mid in before - set(group.members if not group.deleted else ()):
            self._cancel_streams_timers(key.group_id, mid)
        return True

    def _cancel_streams_timers(self, group_id: str, member_id: str) -> None:
        self.timer.cancel(session_key(group_id, member_id))  # type: ignore[attr-defined]
        self.timer.cancel(rebalance_key(group_id, member_id))  # type: ignore[attr-defined]

    def _streams_groups_loaded(self) -> None:
        for group in self.streams_groups.values():
            for member in group.members.values():
                self._schedule_streams_session(group.group_id, member.member_id)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_streams_rebalance(group.group_id, member)

    def _streams_config(self, group_id: str) -> tuple[int, int, int, int]:
        """(session timeout ms, heartbeat interval ms, standby replicas, initial rebalance delay ms) of the group
        (group configs, else the broker's ``group.streams.*``)."""
        cfg = self.group_config(group_id)  # type: ignore[attr-defined]
        return (int(cfg["streams.session.timeout.ms"]), int(cfg["streams.heartbeat.interval.ms"]),
                int(cfg["streams.num.standby.replicas"]), int(cfg["streams.initial.rebalance.delay.ms"]))

    def _configure(self, topology: Any) -> ConfiguredTopology:
        image = self.image_provider() if self.image_provider is not None else None  # type: ignore[attr-defined]

        def partitions_of(name: str) -> int | None:
            t = image.topics_by_name.get(name) if image is not None else None
            return None if t is None else len(t.partitions)

        def names() -> list[str]:
            return [] if image is None else [n for n, t in image.topics_by_name.items() if not t.is_internal]

        return configure_topology(topology, partitions_of, names)

    # ---- heartbeat
    def streams_group_heartbeat(self, meta: Any, request: StreamsGroupHeartbeatRequest
                                ) -> CoordinatorResult[tuple[Resp, dict[str, tuple[int, int, dict[str, str]]]]]:
        """-> (response, internal topics to create: name -> (partitions, replication factor, configs))."""
        try:
            _validate(request)
            if request.member_epoch < 0:
                return self._streams_leave(request)
            return self._streams_heartbeat(meta, request)
        except StreamsHeartbeatError as exc:
            return CoordinatorResult(response=(Resp(error_code=exc.code, error_message=exc.message), {}))

    def _streams_heartbeat(self, meta: Any, r: StreamsGroupHeartbeatRequest) -> CoordinatorResult[Any]:
        group_id, epoch = r.group_id, r.member_epoch
        records: list[CoordinatorRecord] = []
        group = self.streams_groups.get(group_id)
        if group is None:
            other = self.consumer_groups, getattr(self, "share_groups", {})  # type: ignore[attr-defined]
            if any(group_id in groups for groups in other):
                raise StreamsHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
            classic = self.groups.get(group_id)  # type: ignore[attr-defined]
            if classic is not None:
                if epoch != 0 or classic.members or classic.pending_join_members:
                    raise StreamsHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                                f"Group {group_id} is not a streams group.")
                from kbroker.coordinator.group.records import group_metadata_tombstone
                records.append(group_metadata_tombstone(group_id))  # an empty classic group makes way
            elif epoch != 0:
                raise StreamsHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
            group = StreamsGroup(group_id)
        session_ms, interval_ms, num_standby, initial_delay_ms = self._streams_config(group_id)
        new_group = group_id not in self.streams_groups
        member_id = r.member_id
        owned = _owned(r)
        existing = group.members.get(member_id)
        if existing is None:
            if epoch != 0:
                raise StreamsHeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                            f"Member {member_id} is not a member of group {group_id}.")
            if len(group.members) >= self.config.consumer_group_max_size:  # type: ignore[attr-defined]
                raise StreamsHeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                            "The streams group has reached its maximum capacity.")
            member = StreamsGroupMember(member_id)
            log.info("streams group %s: member %s joins", group_id, member_id)
        elif epoch == 0:
            # a member rejoining under its id (after FENCED_MEMBER_EPOCH): its old incarnation's tasks are released
            member = replace(existing, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                             assigned={}, pending_revocation={})
            log.info("streams group %s: member %s rejoins", group_id, member_id)
        else:
            if epoch > existing.member_epoch or (epoch < existing.member_epoch and (
                    epoch != existing.previous_member_epoch or not is_subset(owned, existing.assigned))):
                raise StreamsHeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The streams group member has a {'greater' if epoch > existing.member_epoch else 'smaller'} "
                    f"member epoch ({epoch}) than the one known by the group coordinator "
                    f"({existing.member_epoch}). The member must abandon all its tasks and rejoin.")
            member = existing
        is_new = existing is None
        bump = is_new

        # ---- topology
        topology = group.topology
        statuses: list[tuple[int, str]] = []
        if r.topology is not None and (topology is None or r.topology.epoch > topology.epoch):
            rec = topology_record(group_id, r.topology)
            records.append(rec)
            topology = rec.value
            bump = True
        elif r.topology is not None and topology is not None and r.topology.epoch < topology.epoch:
            statuses.append((STALE_TOPOLOGY, f"The member's topology epoch {r.topology.epoch} is behind the "
                                             f"group's topology epoch {topology.epoch}."))

        # ---- member metadata
        ep = r.user_endpoint
        updated = replace(
            member, instance_id=r.instance_id if r.instance_id is not None else member.instance_id,
            rack_id=r.rack_id if r.rack_id is not None else member.rack_id, client_id=meta.client_id,
            client_host=meta.client_host,
            rebalance_timeout_ms=(r.rebalance_timeout_ms if r.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            topology_epoch=r.topology.epoch if r.topology is not None else member.topology_epoch,
            process_id=r.process_id if r.process_id is not None else member.process_id,
            user_endpoint=(ep.host, ep.port) if ep is not None else member.user_endpoint,
            client_tags=tuple((kv.key, kv.value) for kv in r.client_tags) if r.client_tags is not None
            else member.client_tags)
        if is_new or updated.metadata_key() != member.metadata_key():
            records.append(member_metadata_record(group_id, updated))
            bump = bump or updated.process_id != member.process_id

        # ---- configured topology, metadata hash, group epoch
        configured = self._configure(topology)
        statuses += configured.statuses
        group.ready = configured.tasks is not None
        group_epoch = group.group_epoch
        members_after = dict(group.members)
        members_after[member_id] = updated
        delayed = False
        now = self.now_ms()  # type: ignore[attr-defined]
        if new_group and initial_delay_ms > 0:
            # Kafka's first heartbeat of a new group: epoch 1 has the member with an empty assignment, epoch 2 the
            # topology's metadata; its first real assignment waits for streams.initial.rebalance.delay.ms
            records.append(group_metadata_record(group_id, 1, 0, -1, num_standby))
            records.append(target_assignment_record(group_id, member_id, {}))
            records.append(target_assignment_epoch_record(group_id, 1, now))
            group = replace(group, assignment_epoch=1, target_assignment={member_id: {}})  # (the records' effect)
            group_epoch = 1
            self._streams_delay_until[group_id] = now + initial_delay_ms
        if bump or configured.metadata_hash != group.metadata_hash:
            group_epoch += 1
            records.append(group_metadata_record(group_id, group_epoch, configured.metadata_hash,
                                                 topology.epoch if topology is not None else -1, num_standby))
            log.info("streams group %s: group epoch %d", group_id, group_epoch)
        if group_epoch > group.assignment_epoch and now < self._streams_delay_until.get(group_id, 0):
            delayed = True
            statuses.append((ASSIGNMENT_DELAYED, ASSIGNMENT_DELAYED_DETAIL))
        else:
            self._streams_delay_until.pop(group_id, None)

        # ---- target assignment
        if group_epoch > group.assignment_epoch and not delayed:
            targets = assign_tasks(members_after, configured.tasks or {}, group.target_assignment, num_standby)
            for mid in sorted(targets):
                old = group.target_assignment.get(mid)
                if old is None or dict(old) != dict(targets[mid]):
                    records.append(target_assignment_record(group_id, mid, targets[mid]))
            records.append(target_assignment_epoch_record(group_id, group_epoch, now))
            target, assignment_epoch = targets.get(member_id, {}), group_epoch
        else:
            target, assignment_epoch = group.target_assignment.get(member_id, {}), group.assignment_epoch

        # ---- reconciliation
        final = updated
        if not updated.is_reconciled_to(assignment_epoch):
            try:
                released = {(k, p) for k, ps in list(existing.assigned.items()) + list(
                    existing.pending_revocation.items()) for p in ps} if existing is not None and epoch == 0 else set()

                def task_epoch(key: Any, partition: int) -> int:
                    return -1 if (key, partition) in released else group.task_epoch(key, partition)

                final = reconcile(updated, assignment_epoch, target, task_epoch, owned)  # type: ignore[arg-type]
            except FencedMemberEpoch as exc:
                raise StreamsHeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from None
        if final.assignment_key() != updated.assignment_key() or is_new or \
                (existing is not None and final.assignment_key() != existing.assignment_key()):
            records.append(current_assignment_record(group_id, final))
            if final.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_streams_rebalance(group_id, final)
            else:
                self.timer.cancel(rebalance_key(group_id, member_id))  # type: ignore[attr-defined]
        self._schedule_streams_session(group_id, member_id, session_ms)

        resp = Resp(member_id=member_id, member_epoch=final.member_epoch, heartbeat_interval_ms=interval_ms,
                    acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG, task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
                    status=[Resp.Status(status_code=c, status_detail=d) for c, d in statuses],
                    endpoint_information_epoch=0)
        if epoch == 0 or r.active_tasks is not None or dict(final.assigned) != dict(member.assigned):
            resp.active_tasks = _task_ids(Resp.TaskIds, final.assigned, ACTIVE)
            resp.standby_tasks = _task_ids(Resp.TaskIds, final.assigned, STANDBY)
            resp.warmup_tasks = _task_ids(Resp.TaskIds, final.assigned, WARMUP)
        ready = configured.tasks is not None

        def on_complete(error: int) -> None:
            current = self.streams_groups.get(group_id)
            if not error and current is not None:
                current.ready = ready

        return CoordinatorResult(records, (resp, configured.missing_internal), on_complete)

    def _streams_leave(self, r: StreamsGroupHeartbeatRequest) -> CoordinatorResult[Any]:
        group = self.streams_groups.get(r.group_id)
        if group is None:
            raise StreamsHeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {r.group_id} not found.")
        member = group.members.get(r.member_id)
        if member is None:
            raise StreamsHeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                        f"Member {r.member_id} is not a member of group {r.group_id}.")
        log.info("streams group %s: member %s left", r.group_id, r.member_id)
        result = self._fence_streams_member(group, member)
        return CoordinatorResult(result.records, (Resp(member_id=r.member_id, member_epoch=r.member_epoch), {}))

    def _fence_streams_member(self, group: StreamsGroup, member: StreamsGroupMember) -> CoordinatorResult[None]:
        gid = group.group_id
        records = remove_member_records(gid, member.member_id)
        num_standby = self._streams_config(gid)[2]
        if len(group.members) <= 1:
            self._streams_delay_until.pop(gid, None)
        records.append(group_metadata_record(gid, group.group_epoch + 1, group.metadata_hash,
                                             group.topology.epoch if group.topology is not None else -1, num_standby))
        self._cancel_streams_timers(gid, member.member_id)
        return CoordinatorResult(records)

    def _schedule_streams_session(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        if timeout_ms is None:
            timeout_ms = self._streams_config(group_id)[0]
        self.timer.schedule(session_key(group_id, member_id), timeout_ms,  # type: ignore[attr-defined]
                            lambda: self._on_streams_session_timeout(group_id, member_id))

    def _on_streams_session_timeout(self, group_id: str, member_id: str) -> CoordinatorResult[None]:
        group = self.streams_groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return CoordinatorResult()
        log.info("streams group %s: member %s fenced: no heartbeat within its session timeout", group_id, member_id)
        return self._fence_streams_member(group, member)

    def _schedule_streams_rebalance(self, group_id: str, member: StreamsGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000

        def fire() -> CoordinatorResult[None]:
            group = self.streams_groups.get(group_id)
            m = group.members.get(member_id) if group is not None else None
            if group is None or m is None or m.member_epoch != epoch or m.state is not MemberState.UNREVOKED_PARTITIONS:
                return CoordinatorResult()
            log.info("streams group %s: member %s fenced: did not revoke its tasks within %d ms", group_id,
                     member_id, timeout)
            return self._fence_streams_member(group, m)

        self.timer.schedule(rebalance_key(group_id, member_id), timeout, fire)  # type: ignore[attr-defined]

    # ---- describe, list, delete
    def streams_group_describe(self, group_id: str, include_authorized_operations: bool,
                               authorized_operations: int) -> Described.DescribedGroup:
        group = self.streams_groups.get(group_id)
        if group is None:
            known = group_id in self.groups or group_id in self.consumer_groups or \
                group_id in getattr(self, "share_groups", {})  # type: ignore[attr-defined]
            return Described.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id,
                error_message=f"Group {group_id} is not a streams group." if known else f"Group {group_id} not found.")

        def assignment(tasks: Tasks) -> Described.Assignment:
            return Described.Assignment(active_tasks=_task_ids(Described.TaskIds, tasks, ACTIVE),
                                        standby_tasks=_task_ids(Described.TaskIds, tasks, STANDBY),
                                        warmup_tasks=_task_ids(Described.TaskIds, tasks, WARMUP))

        def info(t: Any) -> Described.TopicInfo:
            return Described.TopicInfo(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor,
                                       topic_configs=[Described.KeyValue(key=c.key, value=c.value)
                                                      for c in t.topic_configs])

        topology = None
        if group.topology is not None:
            topology = Described.Topology(epoch=group.topology.epoch, subtopologies=[
                Described.Subtopology(subtopology_id=s.subtopology_id, source_topics=list(s.source_topics),
                                      repartition_sink_topics=list(s.repartition_sink_topics),
                                      state_changelog_topics=[info(t) for t in s.state_changelog_topics],
                                      repartition_source_topics=[info(t) for t in s.repartition_source_topics])
                for s in group.topology.subtopologies])
        members = [Described.Member(
            member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
            client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch,
            process_id=m.process_id,
            user_endpoint=None if m.user_endpoint is None else Described.Endpoint(host=m.user_endpoint[0],
                                                                                  port=m.user_endpoint[1]),
            client_tags=[Described.KeyValue(key=k, value=v) for k, v in m.client_tags],
            assignment=assignment(m.assigned),
            target_assignment=assignment(group.target_assignment.get(m.member_id, {})))
            for m in group.members.values()]
        return Described.DescribedGroup(
            group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, topology=topology, members=members,
            authorized_operations=authorized_operations if include_authorized_operations else -2147483648)

    def list_streams_groups(self, states: set[str] | None,
                            types: set[str] | None) -> list[ListGroupsResponse.ListedGroup]:
        if types and STREAMS_GROUP_TYPE not in types:
            return []
        return [ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=STREAMS_PROTOCOL_TYPE,
                                               group_state=g.state, group_type=STREAMS_GROUP_TYPE)
                for g in self.streams_groups.values() if not states or g.state.lower() in states]

    def streams_group_is_empty(self, group_id: str) -> bool:
        group = self.streams_groups.get(group_id)
        return group is not None and not group.members

    def streams_group_tombstones(self, group_id: str) -> list[CoordinatorRecord]:
        return group_tombstones(self.streams_groups[group_id])


def _validate(r: StreamsGroupHeartbeatRequest) -> None:
    def invalid(message: str) -> StreamsHeartbeatError:
        return StreamsHeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not r.group_id:
        raise invalid("GroupId can't be empty.")
    if not r.member_id:
        raise invalid("MemberId can't be empty.")
    if r.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if r.rack_id == "":
        raise invalid("RackId can't be empty.")
    epoch = r.member_epoch
    if epoch == 0:
        if r.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if r.topology is None:
            raise invalid("Topology must be non-null in first request.")
        if not r.process_id:
            raise invalid("ProcessId must be non-empty in first request.")
        if any(tasks is None or tasks for tasks in (r.active_tasks, r.standby_tasks, r.warmup_tasks)):
            raise invalid("ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining.")
    elif epoch < 0 and epoch not in (-1, -2):
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    if r.process_id == "":
        raise invalid("ProcessId can't be empty.")


def _owned(r: StreamsGroupHeartbeatRequest) -> list[tuple[Any, list[int]]] | None:
    """The tasks the heartbeat says the member owns, as reconcile() keys (None: not sent, unchanged)."""
    if r.active_tasks is None and r.standby_tasks is None and r.warmup_tasks is None:
        return None
    out: list[tuple[Any, list[int]]] = []
    for kind, items in ((ACTIVE, r.active_tasks), (STANDBY, r.standby_tasks), (WARMUP, r.warmup_tasks)):
        for t in items or ():
            out.append(((kind, t.subtopology_id), list(t.partitions)))
    return out
