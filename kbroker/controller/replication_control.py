"""Partition-level admin operations planned against a metadata image: CreatePartitions, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments.

Like :mod:`kbroker.controller.config_control`, each ``plan_*`` function returns the metadata records to
commit and the per-item results; the :class:`~kbroker.controller.quorum_controller.QuorumController` commits.
Rules and messages follow Kafka's ``ReplicationControlManager`` (facts only):

* CreatePartitions: unknown topic UNKNOWN_TOPIC_OR_PARTITION; the same count INVALID_PARTITIONS "Topic
  already has N partition(s)."; fewer INVALID_PARTITIONS "The topic T currently has N partition(s); M would
  not be an increase."; a manual assignment must give one replica list per new partition, each with the
  topic's replication factor and registered, distinct brokers (INVALID_REPLICA_ASSIGNMENT); without one the
  new partitions are spread over the unfenced brokers. Each new partition is a PartitionRecord (leader = the
  first in-sync replica, epochs 0); brokers create the logs when they replay it.
* ElectLeaders: PREFERRED (0) makes the first replica the leader if it is in the ISR and unfenced
  (PREFERRED_LEADER_NOT_AVAILABLE otherwise); UNCLEAN (1) elects only leaderless partitions
  (ELIGIBLE_LEADERS_NOT_AVAILABLE if no replica is alive). A partition that already has the wanted leader
  gets ELECTION_NOT_NEEDED; with ``topic_partitions`` null every partition is tried and those results are
  left out.
* AlterPartitionReassignments (KIP-455): target replicas are checked as a manual assignment (non-empty,
  distinct, registered brokers: INVALID_REPLICA_ASSIGNMENT); with ``allow_replication_factor_change`` false a
  different length is INVALID_REPLICATION_FACTOR. A reassignment in progress is first reverted (its adding
  replicas dropped), then the partition's replicas become the target followed by the replicas being removed,
  with ``adding_replicas`` (target minus current) and ``removing_replicas`` (current minus target); the ISR
  keeps only replicas of that list. Brokers of adding replicas create the log and follow the leader; once
  the ISR holds every target replica (at once when nothing is added) the reassignment completes
  (:func:`complete_reassignment`): replicas = target, the ISR without the removed replicas, and a leader
  epoch bump (a new leader from the target if the old one was removed). A null target cancels
  (NO_REASSIGNMENT_IN_PROGRESS when there is none): the replicas lose the adding ones (the order of the
  reassignment stays, as in Kafka), the ISR keeps its members of them; where that would leave the ISR empty
  kbroker refuses with INVALID_REPLICA_ASSIGNMENT (Kafka makes it an unclean election).
* ListPartitionReassignments: partitions with adding or removing replicas (none, on a single node).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from kbroker.controller.image import MetadataImage, PartitionImage
from kbroker.controller.replica_placement import place_replicas
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import PartitionChangeRecord, PartitionRecord

__all__ = ["PREFERRED", "UNCLEAN", "complete_reassignment", "list_partition_reassignments",
           "plan_alter_partition_reassignments", "plan_create_partitions", "plan_elect_leaders"]

PREFERRED, UNCLEAN = 0, 1

Result = tuple[int, "str | None"]

# Kafka's default messages (Errors.java), used where Kafka builds an ApiError from the bare error.
_ELECTION_NOT_NEEDED = "Leader election not needed for topic partition."
_PREFERRED_NOT_AVAILABLE = "The preferred leader was not available."
_ELIGIBLE_NOT_AVAILABLE = "Eligible topic partition leaders are not available."


def _check_manual_assignment(replicas: Sequence[int], image: MetadataImage, replication_factor: int | None) -> None:
    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if not replicas:
        raise KafkaError(bad, "The manual partition assignment includes an empty replica list.")
    prev = None
    for b in sorted(replicas):
        if b not in image.brokers:
            raise KafkaError(bad, f"The manual partition assignment includes broker {b}, but no such broker is "
                                  "registered.")
        if b == prev:
            raise KafkaError(bad, f"The manual partition assignment includes the broker {b} more than once.")
        prev = b
    if replication_factor is not None and len(replicas) != replication_factor:
        raise KafkaError(bad, f"The manual partition assignment includes a partition with {len(replicas)} "
                              f"replica(s), but this is not consistent with previous partitions, which have "
                              f"{replication_factor} replica(s).")


def plan_create_partitions(image: MetadataImage, topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
                           default_dir: Callable[[int], bytes]) -> tuple[list[PartitionRecord], list[tuple[str, int, str | None]]]:
    """``topics``: (name, new total count, assignments for the new partitions or None). Returns the records
    and one ``(name, error_code, error_message)`` per distinct name, in request order."""
    counts: dict[str, int] = {}
    for name, _, _ in topics:
        counts[name] = counts.get(name, 0) + 1
    records: list[PartitionRecord] = []
    results: list[tuple[str, int, str | None]] = []
    seen: set[str] = set()
    unfenced = [b.node_id for b in image.live_brokers()]
    for name, count, assignments in topics:
        if name in seen:
            continue
        seen.add(name)
        try:
            if counts[name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            topic = image.topics_by_name.get(name)
            if topic is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            current = len(topic.partitions)
            if count == current:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
            if count < current:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"The topic {name} currently has {current} "
                                                               f"partition(s); {count} would not be an increase.")
            additional = count - current
            if assignments is not None and len(assignments) != additional:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Attempted to add {additional} additional partition(s), but only "
                                 f"{len(assignments)} assignment(s) were specified.")
            first = next(iter(topic.partitions.values()), None)
            if first is None:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Invalid state: topic {name} appears to have no "
                                                                 "partitions.")
            rf = len(first.replicas)
            new: list[PartitionRecord] = []
            for i in range(additional):
                pid = current + i
                if assignments is not None:
                    replicas = list(assignments[i])
                    _check_manual_assignment(replicas, image, rf)
                    isr = [b for b in replicas if b in unfenced]
                    if not isr:
                        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                         f"All brokers specified in the manual partition assignment for partition "
                                         f"{pid} are fenced or in controlled shutdown.")
                else:
                    if rf > len(unfenced):
                        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                         f"Unable to replicate the partition {rf} time(s): The target replication "
                                         f"factor of {rf} cannot be reached because only {len(unfenced)} broker(s) "
                                         "are registered.")
                    replicas = place_replicas([(b, image.brokers[b].rack) for b in unfenced], 1, rf, pid,
                                              start_index=pid, start_shift=pid // len(unfenced))[pid]
                    isr = list(replicas)
                new.append(PartitionRecord(partition_id=pid, topic_id=topic.topic_id, replicas=replicas, isr=isr,
                                           removing_replicas=[], adding_replicas=[], leader=isr[0], leader_epoch=0,
                                           partition_epoch=0, directories=[default_dir(b) for b in replicas]))
            records.extend(new)
            results.append((name, ErrorCode.NONE, None))
        except KafkaError as exc:
            results.append((name, exc.code, exc.message))
    return records, results


def _elect_one(image: MetadataImage, topic_name: str, partition_id: int, election_type: int,
               records: list[PartitionChangeRecord]) -> Result:
    topic = image.topics_by_name.get(topic_name)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
    part = topic.partitions.get(partition_id)
    if part is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition_id}"
    live = {b.node_id for b in image.live_brokers()}
    if election_type == PREFERRED:
        preferred = part.replicas[0] if part.replicas else -1
        if part.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_NOT_NEEDED
        if preferred not in part.isr or preferred not in live:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, _PREFERRED_NOT_AVAILABLE
        records.append(PartitionChangeRecord(partition_id=partition_id, topic_id=topic.topic_id, leader=preferred))
        return ErrorCode.NONE, None
    if part.leader >= 0:
        return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_NOT_NEEDED
    candidates = [b for b in part.isr if b in live] or [b for b in part.replicas if b in live]
    if not candidates:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, _ELIGIBLE_NOT_AVAILABLE
    leader = candidates[0]
    isr = list(part.isr) if leader in part.isr else [leader]
    records.append(PartitionChangeRecord(partition_id=partition_id, topic_id=topic.topic_id, leader=leader, isr=isr))
    return ErrorCode.NONE, None


def plan_elect_leaders(image: MetadataImage, election_type: int,
                       topic_partitions: Sequence[tuple[str, Sequence[int]]] | None
                       ) -> tuple[list[PartitionChangeRecord], list[tuple[str, list[tuple[int, int, str | None]]]]]:
    """Records and ``[(topic, [(partition, error_code, error_message)])]``. Raises INVALID_REQUEST for an
    unknown election type (the whole request fails, as in Kafka)."""
    if election_type not in (PREFERRED, UNCLEAN):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    records: list[PartitionChangeRecord] = []
    out: list[tuple[str, list[tuple[int, int, str | None]]]] = []
    if topic_partitions is None:
        for name in sorted(image.topics_by_name):
            results = []
            for pid in sorted(image.topics_by_name[name].partitions):
                code, msg = _elect_one(image, name, pid, election_type, records)
                if code != ErrorCode.ELECTION_NOT_NEEDED:
                    results.append((pid, code, msg))
            out.append((name, results))
        return records, out
    for name, partitions in topic_partitions:
        out.append((name, [(pid, *_elect_one(image, name, pid, election_type, records)) for pid in partitions]))
    return records, out


def _reassigning(p: PartitionImage) -> bool:
    return bool(p.adding_replicas or p.removing_replicas)


def _directories(p: PartitionImage, replicas: Sequence[int], default_dir: Callable[[int], bytes]) -> list[bytes]:
    """The log directory of each of ``replicas``: the one the partition had, or the broker's default."""
    known = dict(zip(p.replicas, p.directories))
    return [known.get(b) or default_dir(b) for b in replicas]


def _pick_leader(candidates: Sequence[int], isr: Sequence[int], live: set[int]) -> int:
    return next((b for b in candidates if b in isr and b in live), -1)


def complete_reassignment(p: PartitionImage, rec: PartitionChangeRecord, live: set[int],
                          default_dir: Callable[[int], bytes]) -> PartitionChangeRecord:
    """Complete ``p``'s reassignment in ``rec`` (a change of ``p`` about to be committed) if, after ``rec``, every
    target replica is in the ISR: the replicas become the target, the removed replicas leave the ISR and the
    leader epoch is bumped (the removed replicas' fetches are fenced); a leader that was removed is replaced by
    the first target replica in the ISR that is alive (-1 if none). Returns ``rec``, changed in place."""
    replicas = list(p.replicas) if rec.replicas is None else list(rec.replicas)
    adding = list(p.adding_replicas) if rec.adding_replicas is None else list(rec.adding_replicas)
    removing = list(p.removing_replicas) if rec.removing_replicas is None else list(rec.removing_replicas)
    if not adding and not removing:
        return rec
    isr = list(p.isr) if rec.isr is None else list(rec.isr)
    target = [b for b in replicas if b not in removing]
    if any(b not in isr for b in target):
        return rec
    leader = p.leader if rec.leader == -2 else rec.leader
    new_isr = [b for b in isr if b in target]
    rec.replicas, rec.isr, rec.adding_replicas, rec.removing_replicas = target, new_isr, [], []
    rec.directories = _directories(p, target, default_dir)
    rec.leader = leader if leader in target else _pick_leader(target, new_isr, live)
    return rec


def _alter_one(image: MetadataImage, topic_name: str, partition_id: int, target: Sequence[int] | None,
               allow_rf_change: bool, records: list[PartitionChangeRecord],
               default_dir: Callable[[int], bytes]) -> Result:
    topic = image.topics_by_name.get(topic_name)
    if topic is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}."
    part = topic.partitions.get(partition_id)
    if part is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{partition_id}."
    live = {b.node_id for b in image.live_brokers()}
    original = [b for b in part.replicas if b not in part.adding_replicas]
    rec = PartitionChangeRecord(partition_id=partition_id, topic_id=topic.topic_id)
    try:
        if target is None:
            if not _reassigning(part):
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
            isr = [b for b in part.isr if b in original]
            if not isr:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unable to revert partition assignment for {topic_name}:{partition_id} because "
                                 "it would require changing the ISR to an empty set.")
            rec.replicas, rec.isr, rec.adding_replicas, rec.removing_replicas = original, isr, [], []
            rec.directories = _directories(part, original, default_dir)
            if part.leader not in original:
                rec.leader = _pick_leader(original, isr, live)
            records.append(rec)
            return ErrorCode.NONE, None
        _check_manual_assignment(target, image, None)
        if not allow_rf_change and len(target) != len(original):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"The replication factor is changed from {len(original)} to {len(target)}")
        if list(target) == list(part.replicas) and not _reassigning(part):
            return ErrorCode.NONE, None
        adding = sorted(b for b in target if b not in original)  # sorted, as Kafka keeps them
        removing = sorted(b for b in original if b not in target)
        replicas = [*target, *removing]
        isr = [b for b in part.isr if b in replicas]
        if not isr:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unable to reassign {topic_name}:{partition_id}: no in-sync replica would remain.")
        rec.replicas, rec.adding_replicas, rec.removing_replicas = replicas, adding, removing
        rec.directories = _directories(part, replicas, default_dir)
        if isr != list(part.isr):
            rec.isr = isr
        if part.leader not in replicas:
            rec.leader = _pick_leader(replicas, isr, live)
        records.append(complete_reassignment(part, rec, live, default_dir))
        return ErrorCode.NONE, None
    except KafkaError as exc:
        return exc.code, exc.message


def plan_alter_partition_reassignments(image: MetadataImage,
                                       topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]],
                                       allow_replication_factor_change: bool = True,
                                       default_dir: Callable[[int], bytes] = lambda b: bytes(16),
                                       ) -> tuple[list[PartitionChangeRecord], list[tuple[str, list[tuple[int, int, str | None]]]]]:
    """Records and ``[(topic, [(partition, error_code, error_message)])]`` for ``topics``: names with
    (partition, target replicas, or None to cancel). ``default_dir(broker)``: the log directory id given to a
    broker's new replica."""
    records: list[PartitionChangeRecord] = []
    out = []
    for name, partitions in topics:
        out.append((name, [(pid, *_alter_one(image, name, pid, target, allow_replication_factor_change, records,
                                             default_dir))
                           for pid, target in partitions]))
    return records, out


def list_partition_reassignments(image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None
                                 ) -> list[tuple[str, list[PartitionImage]]]:
    """Ongoing reassignments: all of them (``topics`` None) or those of the named partitions (unknown topics
    and partitions without a reassignment are left out)."""
    wanted: Mapping[str, Sequence[int] | None]
    wanted = {n: None for n in image.topics_by_name} if topics is None else dict(topics)
    out = []
    for name, pids in wanted.items():
        topic = image.topics_by_name.get(name)
        if topic is None:
            continue
        parts = [topic.partitions[p] for p in (sorted(topic.partitions) if pids is None else pids)
                 if p in topic.partitions and _reassigning(topic.partitions[p])]
        if parts:
            out.append((name, parts))
    return out
