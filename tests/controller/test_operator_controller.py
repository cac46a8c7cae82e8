"""QuorumController operator operations: CreatePartitions, (Incremental)AlterConfigs, ElectLeaders and
partition reassignments, including durability of what they write."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.config import BrokerConfig
from kbroker.controller.config_control import APPEND, DELETE, SET, SUBTRACT
from kbroker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE
from kbroker.controller.quorum_controller import CreateTopicSpec, QuorumController
from kbroker.protocol.errors import ErrorCode, KafkaError

E = ErrorCode


@pytest.fixture
def qc(tmp_path: Path):
    cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "num.partitions": "1",
                        "listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"})
    started = [QuorumController(cfg)]
    started[0].startup()
    started[0].create_topics([CreateTopicSpec("t", 2), CreateTopicSpec("c", 1, configs={"cleanup.policy": "compact"})])
    yield started
    for q in started:
        q.shutdown()


def _restart(holder: list[QuorumController]) -> QuorumController:
    holder[-1].shutdown()
    new = QuorumController(holder[-1].config)
    new.startup()
    holder.append(new)
    return new


# ---- CreatePartitions -------------------------------------------------------------------------------

def test_create_partitions_adds_partition_records(qc):
    c = qc[0]
    seen = []
    c.add_listener(lambda old, new, changes: seen.append(changes))
    assert c.create_partitions([("t", 5, None)]) == [("t", E.NONE, None)]
    parts = c.image.topics_by_name["t"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4]
    assert all((p.replicas, p.isr, p.leader, p.leader_epoch) == ((1,), (1,), 1, 0) for p in parts.values())
    tid = c.image.topics_by_name["t"].topic_id
    assert seen[-1].changed_partitions == {(tid, 2), (tid, 3), (tid, 4)}
    assert sorted(_restart(qc).image.topics_by_name["t"].partitions) == [0, 1, 2, 3, 4]


def test_create_partitions_errors(qc):
    c = qc[0]
    got = c.create_partitions([("t", 2, None), ("t2", 1, None), ("c", 0, None), ("x", 3, None),
                               ("d", 3, None), ("d", 4, None)])
    assert got == [
        ("t", E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
        ("t2", E.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("c", E.INVALID_PARTITIONS, "The topic c currently has 1 partition(s); 0 would not be an increase."),
        ("x", E.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("d", E.INVALID_REQUEST, "Duplicate topic name."),
    ]
    assert c.create_partitions([("t", 4, [[1]])])[0][1:] == (
        E.INVALID_REPLICA_ASSIGNMENT, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    assert c.create_partitions([("t", 3, [[2]])])[0][1] == E.INVALID_REPLICA_ASSIGNMENT
    assert c.create_partitions([("t", 3, [[1, 1]])])[0][1] == E.INVALID_REPLICA_ASSIGNMENT
    assert c.create_partitions([("t", 3, [[1]])], validate_only=True) == [("t", E.NONE, None)]
    assert len(c.image.topics_by_name["t"].partitions) == 2
    assert c.create_partitions([("t", 3, [[1]])]) == [("t", E.NONE, None)]
    assert len(c.image.topics_by_name["t"].partitions) == 3


# ---- configs ----------------------------------------------------------------------------------------

def test_incremental_alter_topic_configs(qc):
    c = qc[0]
    res = c.incremental_alter_configs([(TOPIC_RESOURCE, "t", [("retention.ms", SET, "1000"),
                                                              ("cleanup.policy", APPEND, "compact")])])
    assert res == [(E.NONE, None)]
    assert dict(c.image.topic_configs("t")) == {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    c.incremental_alter_configs([(TOPIC_RESOURCE, "t", [("cleanup.policy", SUBTRACT, "delete"),
                                                        ("retention.ms", DELETE, None)])])
    assert dict(c.image.topic_configs("t")) == {"cleanup.policy": "compact"}
    assert dict(_restart(qc).image.topic_configs("t")) == {"cleanup.policy": "compact"}


def test_incremental_alter_errors(qc):
    c = qc[0]
    T = TOPIC_RESOURCE
    cases = [
        ([(T, "t", [("retention.ms", SET, "abc")])], E.INVALID_CONFIG),
        ([(T, "t", [("no.such.key", SET, "1")])], E.INVALID_CONFIG),
        ([(T, "t", [("segment.bytes", SET, "1000")])], E.INVALID_CONFIG),  # 1 MiB minimum
        ([(T, "t", [("retention.ms", APPEND, "1")])], E.INVALID_CONFIG),
        ([(T, "nope", [("retention.ms", SET, "1")])], E.UNKNOWN_TOPIC_OR_PARTITION),
        ([(T, "t", [("retention.ms", SET, "1"), ("retention.ms", SET, "2")])], E.INVALID_REQUEST),
        ([(T, "t", [("retention.ms", SET, None)])], E.INVALID_REQUEST),
        ([(T, "t", [("retention.ms", 9, "1")])], E.INVALID_REQUEST),
        ([(99, "t", [("retention.ms", SET, "1")])], E.INVALID_REQUEST),
        ([(T, "t", [("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")])], E.INVALID_CONFIG),
    ]
    for resources, code in cases:
        assert c.incremental_alter_configs(resources)[0][0] == code, resources
    assert dict(c.image.topic_configs("t")) == {}
    assert c.incremental_alter_configs([(T, "t", [("retention.ms", SET, "1")]), (T, "t", [])]) == [
        (E.INVALID_REQUEST, "Each resource must appear at most once.")] * 2
    # one bad resource does not stop a good one; validate_only writes nothing
    res = c.incremental_alter_configs([(T, "t", [("retention.ms", SET, "5")]), (T, "c", [("x", SET, "1")])])
    assert [r[0] for r in res] == [E.NONE, E.INVALID_CONFIG]
    assert c.incremental_alter_configs([(T, "c", [("retention.ms", SET, "5")])], validate_only=True) == [(E.NONE, None)]
    assert dict(c.image.topic_configs("c")) == {"cleanup.policy": "compact"}
    # the internal test-only segment size has no minimum
    assert c.incremental_alter_configs([(T, "t", [("internal.segment.bytes", SET, "2000")])]) == [(E.NONE, None)]


def test_legacy_alter_configs_replaces_the_set(qc):
    c = qc[0]
    c.incremental_alter_configs([(TOPIC_RESOURCE, "t", [("retention.ms", SET, "1000"), ("flush.ms", SET, "7")])])
    assert c.alter_configs([(TOPIC_RESOURCE, "t", [("retention.bytes", "99")])]) == [(E.NONE, None)]
    assert dict(c.image.topic_configs("t")) == {"retention.bytes": "99"}
    assert c.alter_configs([(TOPIC_RESOURCE, "t", [("retention.bytes", None)])])[0][0] == E.INVALID_REQUEST
    assert c.alter_configs([(TOPIC_RESOURCE, "t", [("retention.bytes", "x")])])[0][0] == E.INVALID_CONFIG
    assert c.alter_configs([(TOPIC_RESOURCE, "t", [])]) == [(E.NONE, None)]
    assert dict(c.image.topic_configs("t")) == {}


def test_dynamic_broker_configs(qc):
    c = qc[0]
    B = BROKER_RESOURCE
    assert c.incremental_alter_configs([(B, "", [("log.retention.ms", SET, "5000")]),
                                        (B, "1", [("log.cleaner.backoff.ms", SET, "100")])]) == [(E.NONE, None)] * 2
    # with the cluster-level min.insync.replicas every new cluster is bootstrapped with (as Kafka 4.1+)
    assert dict(c.image.broker_configs()) == {"log.retention.ms": "5000", "min.insync.replicas": "1"}
    assert dict(c.image.broker_configs(1)) == {"log.cleaner.backoff.ms": "100"}
    errors = [
        (B, "2", [("log.retention.ms", SET, "1")]),
        (B, "x", [("log.retention.ms", SET, "1")]),
        (B, "", [("num.partitions", SET, "3")]),
        (B, "", [("log.retention.ms", SET, "soon")]),
        (B, "", [("log.retention.ms", APPEND, "1")]),
    ]
    for res in errors:
        code, msg = c.incremental_alter_configs([res])[0]
        assert code == E.INVALID_REQUEST, (res, code, msg)
    assert c.incremental_alter_configs([(B, "", [("num.partitions", SET, "3")])])[0][1] == \
        "Cannot update these configs dynamically: [num.partitions]"
    assert c.incremental_alter_configs([(B, "", [("log.cleanup.policy", APPEND, "compact")])]) == [(E.NONE, None)]
    assert c.image.broker_configs()["log.cleanup.policy"] == "delete,compact"
    assert c.incremental_alter_configs([(B, "", [("my.custom.key", SET, "x")])]) == [(E.NONE, None)]
    c2 = _restart(qc)
    assert c2.image.broker_configs()["log.retention.ms"] == "5000"


# ---- leaders and reassignments ----------------------------------------------------------------------

def test_elect_leaders_single_node(qc):
    c = qc[0]
    assert c.elect_leaders(0, [("t", [0, 1, 7]), ("nope", [0])]) == [
        ("t", [(0, E.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
               (1, E.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
               (7, E.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7")]),
        ("nope", [(0, E.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")]),
    ]
    assert c.elect_leaders(1, [("t", [0])])[0][1][0][1] == E.ELECTION_NOT_NEEDED
    assert c.elect_leaders(0, None) == [("c", []), ("t", [])]
    with pytest.raises(KafkaError) as ei:
        c.elect_leaders(5, None)
    assert ei.value.code == E.INVALID_REQUEST


def test_partition_reassignments_single_node(qc):
    c = qc[0]
    assert c.list_partition_reassignments() == []
    assert c.list_partition_reassignments([("t", [0, 1]), ("nope", [0])]) == []
    got = c.alter_partition_reassignments([("t", [(0, [1]), (1, [1, 2]), (2, [1]), (0, None)]), ("nope", [(0, [1])])])
    assert got == [
        ("t", [(0, E.NONE, None),
               (1, E.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes broker 2, but no such broker is registered."),
               (2, E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:2."),
               (0, E.NO_REASSIGNMENT_IN_PROGRESS, None)]),
        ("nope", [(0, E.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")]),
    ]
    assert c.alter_partition_reassignments([("t", [(0, [])])])[0][1][0][1] == E.INVALID_REPLICA_ASSIGNMENT
    assert c.alter_partition_reassignments([("t", [(0, [1, 1])])])[0][1][0][1] == E.INVALID_REPLICA_ASSIGNMENT
    with_rf = c.alter_partition_reassignments([("t", [(0, [1, 1])])], allow_replication_factor_change=False)
    assert with_rf[0][1][0][1] == E.INVALID_REPLICA_ASSIGNMENT


# ---- reassignments that move replicas (KIP-455) -----------------------------------------------------

@pytest.fixture
def four_brokers(qc):
    """The controller of ``qc`` (node 1) with brokers 2, 3 and 4 registered, and topic ``m``: partition 0 on
    [1, 2, 3] (led by 1), partition 1 on [2, 3, 1] (led by 2)."""
    from kbroker.controller.image import Endpoint  # noqa: PLC0415

    c = qc[0]
    for node_id in (2, 3, 4):
        c.register_broker([Endpoint("PLAINTEXT", f"host{node_id}", 9092 + node_id, 0)], broker_id=node_id,
                          incarnation_id=bytes([node_id]) * 16, log_dirs=[bytes([node_id, 9]) * 8], now_ms=0)
    assert c.create_topics([CreateTopicSpec("m", assignments={0: [1, 2, 3], 1: [2, 3, 1]})])[0].error_code == 0
    return c


def _part(c, partition=0):
    return c.latest_image.topics_by_name["m"].partitions[partition]


def _epoch(c):
    return c.latest_image.brokers[1].broker_epoch


def test_reassignment_adds_then_completes_when_the_isr_has_the_target(four_brokers):
    c = four_brokers
    before = _part(c)
    assert c.alter_partition_reassignments([("m", [(0, [2, 3, 4])])]) == [("m", [(0, E.NONE, None)])]
    p = _part(c)
    # target first, then the replica being removed; the leader (1) keeps leading meanwhile
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((2, 3, 4, 1), (4,), (1,))
    assert (p.isr, p.leader, p.leader_epoch) == ((1, 2, 3), 1, before.leader_epoch)
    assert len(p.directories) == 4 and p.directories[3] == before.directories[0]
    listed = c.list_partition_reassignments()
    assert [(n, [x.partition_id for x in ps]) for n, ps in listed] == [("m", [0])]
    # the new replica caught up: the leader adds it to the ISR, which completes the reassignment; the leader
    # was removed, so the first target replica in the ISR leads, in a new epoch
    topic_id = c.latest_image.topics_by_name["m"].topic_id
    [(code, after)] = c.alter_partition(1, _epoch(c), [(topic_id, 0, p.leader_epoch, p.partition_epoch, [1, 2, 3, 4])])
    assert code == E.NONE
    assert (after.replicas, after.isr, after.adding_replicas, after.removing_replicas) == ((2, 3, 4), (2, 3, 4), (), ())
    assert (after.leader, after.leader_epoch) == (2, p.leader_epoch + 1)
    assert after.directories[2] == c._default_dir(4)
    assert c.list_partition_reassignments() == []


def test_reassignment_that_only_removes_completes_at_once_and_bumps_the_epoch(four_brokers):
    c = four_brokers
    before = _part(c, 1)
    assert c.alter_partition_reassignments([("m", [(1, [2, 3])])]) == [("m", [(1, E.NONE, None)])]
    p = _part(c, 1)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ((2, 3), (2, 3), (), ())
    assert (p.leader, p.leader_epoch) == (2, before.leader_epoch + 1)  # the removed replica's fetches are fenced


def test_reassignment_cancelled_and_replaced(four_brokers):
    c = four_brokers
    c.alter_partition_reassignments([("m", [(0, [2, 3, 4])])])
    # cancel: the adding replica goes; the order the reassignment gave stays (Kafka's revert does the same)
    assert c.alter_partition_reassignments([("m", [(0, None)])]) == [("m", [(0, E.NONE, None)])]
    p = _part(c)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader) == ((2, 3, 1), (1, 2, 3), (), (), 1)
    assert c.alter_partition_reassignments([("m", [(0, None)])])[0][1][0][1] == E.NO_REASSIGNMENT_IN_PROGRESS
    # a new target while one is in progress replaces it, computed from the replicas without the adding ones
    c.alter_partition_reassignments([("m", [(0, [1, 4, 2])])])
    assert _part(c).replicas == (1, 4, 2, 3)
    c.alter_partition_reassignments([("m", [(0, [4, 3, 1])])])
    p = _part(c)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ((4, 3, 1, 2), (4,), (2,), (1, 2, 3))
    # the replication factor may not change when the request says so
    got = c.alter_partition_reassignments([("m", [(0, [1, 2, 3, 4])])], allow_replication_factor_change=False)
    assert got[0][1][0][1] == E.INVALID_REPLICATION_FACTOR


def test_reassignment_waits_for_every_target_replica(four_brokers):
    c = four_brokers
    # [1, 2, 3] -> [2, 3, 4]: when 3 (a target replica) leaves the ISR, 4 joining it does not complete the
    # reassignment; 3 coming back does, and 2 leads (1 was removed)
    c.alter_partition_reassignments([("m", [(0, [2, 3, 4])])])
    p = _part(c)
    topic_id = c.latest_image.topics_by_name["m"].topic_id
    [(code, _)] = c.alter_partition(1, _epoch(c), [(topic_id, 0, p.leader_epoch, p.partition_epoch, [1, 2, 3])])
    assert code == E.NONE and _part(c).adding_replicas == (4,)  # no change of ISR: still in progress
    c._commit_partition_changes([], c._leaders_without(3))  # 3 leaves: the reassignment waits for 3 and 4
    p = _part(c)
    assert (p.isr, p.adding_replicas, p.leader) == ((1, 2), (4,), 1)
    [(code, after)] = c.alter_partition(1, _epoch(c), [(topic_id, 0, p.leader_epoch, p.partition_epoch, [1, 2, 4])])
    assert code == E.NONE and after.adding_replicas == (4,)  # 3 is a target replica out of the ISR
    [(code, after)] = c.alter_partition(1, _epoch(c), [(topic_id, 0, after.leader_epoch, after.partition_epoch,
                                                       [1, 2, 4, 3])])
    assert (code, after.replicas, after.isr, after.leader) == (E.NONE, (2, 3, 4), (2, 4, 3), 2)


def test_preferred_leaders_balanced(four_brokers):
    c = four_brokers
    # reordering the replicas makes 3 the preferred replica of partition 1 while 2 still leads it
    assert c.alter_partition_reassignments([("m", [(1, [3, 2, 1])])]) == [("m", [(1, E.NONE, None)])]
    assert _part(c, 1).leader == 2
    assert c.balance_partition_leaders() == 1
    p = _part(c, 1)
    assert p.leader == 3 and p.replicas == (3, 2, 1)
    assert c.balance_partition_leaders() == 0
