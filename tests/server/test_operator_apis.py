"""Operator APIs through the broker's dispatch: CreatePartitions, (Incremental)AlterConfigs + DescribeConfigs,
DeleteRecords, DescribeLogDirs, ElectLeaders, partition reassignments, and topic configs on Produce."""

from __future__ import annotations

import time

import pytest

from kbroker.controller.quorum_controller import CreateTopicSpec
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    ElectLeadersRequest,
    FetchRequest,
    IncrementalAlterConfigsRequest,
    ListOffsetsRequest,
    ListPartitionReassignmentsRequest,
    ProduceRequest,
)
from kbroker.protocol.records import build_batch, iter_batches

E = ErrorCode
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND = 0, 1, 2


def _create(node, name: str, partitions: int = 1, **configs: str) -> None:
    res = node.broker.controller.create_topics([CreateTopicSpec(name, partitions, configs=configs)])
    assert res[0].error_code == E.NONE, res


def _produce(node, topic: str, partition: int, records, version: int = 9, **kw):
    batch = build_batch(records, **kw)
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    return node.call(ApiKey.PRODUCE, version, req).responses[0].partition_responses[0]


def _fetch(node, topic: str, partition: int, offset: int):
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
        topic=topic, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                             partition_max_bytes=1 << 20)])])
    return node.call(ApiKey.FETCH, 12, req).responses[0].partitions[0]


def _describe(node, rtype: int, name: str, keys=None, version: int = 4):
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=keys)], include_synonyms=True)
    result = node.call(ApiKey.DESCRIBE_CONFIGS, version, req).results[0]
    return result, {c.name: c for c in result.configs}


def _incremental(node, rtype: int, name: str, ops, version: int = 1, validate_only: bool = False):
    R = IncrementalAlterConfigsRequest
    req = R(validate_only=validate_only, resources=[R.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
    return node.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, req).responses[0]


# ---- CreatePartitions -------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_create_partitions_then_produce_and_fetch(node, version):
    _create(node, "grow", 1)
    R = CreatePartitionsRequest
    resp = node.call(ApiKey.CREATE_PARTITIONS, version, R(timeout_ms=5000, topics=[
        R.CreatePartitionsTopic(name="grow", count=3, assignments=None),
        R.CreatePartitionsTopic(name="missing", count=2, assignments=None)]))
    got = {r.name: (r.error_code, r.error_message) for r in resp.results}
    assert got == {"grow": (E.NONE, None), "missing": (E.UNKNOWN_TOPIC_OR_PARTITION, None)}
    assert sorted(p for t, p in node.broker.replica_manager.partitions if t == "grow") == [0, 1, 2]
    pr = _produce(node, "grow", 2, [(b"k", b"on-new-partition")])
    assert (pr.error_code, pr.base_offset) == (E.NONE, 0)
    (batch,) = iter_batches(bytes(_fetch(node, "grow", 2, 0).records))
    assert [r.value for r in batch.records()] == [b"on-new-partition"]
    again = node.call(ApiKey.CREATE_PARTITIONS, version, R(topics=[R.CreatePartitionsTopic(name="grow", count=2)]))
    assert again.results[0].error_code == E.INVALID_PARTITIONS
    assert again.results[0].error_message == "The topic grow currently has 3 partition(s); 2 would not be an increase."
    dry = node.call(ApiKey.CREATE_PARTITIONS, version, R(validate_only=True, topics=[
        R.CreatePartitionsTopic(name="grow", count=5, assignments=[R.CreatePartitionsAssignment(broker_ids=[1])] * 2)]))
    assert dry.results[0].error_code == E.NONE
    assert len(node.broker.controller.image.topics_by_name["grow"].partitions) == 3


# ---- configs ----------------------------------------------------------------------------------------

def test_incremental_alter_then_describe_with_sources(node):
    _create(node, "cfg", 1)
    assert _incremental(node, TOPIC, "cfg", [("retention.ms", SET, "60000"),
                                              ("cleanup.policy", APPEND, "compact")]).error_code == E.NONE
    _, cfg = _describe(node, TOPIC, "cfg")
    assert (cfg["retention.ms"].value, cfg["retention.ms"].config_source) == ("60000", 1)
    # Kafka drops the broker synonyms ranked before log.retention.ms (here: the default log.retention.hours)
    assert [(s.name, s.value, s.source) for s in cfg["retention.ms"].synonyms] == [("retention.ms", "60000", 1)]
    assert cfg["cleanup.policy"].value == "delete,compact"
    assert cfg["segment.bytes"].config_source == 5 and cfg["segment.bytes"].value == "1073741824"
    assert "preallocate" in cfg and "min.cleanable.dirty.ratio" in cfg
    plog = node.broker.log_manager.get_log("cfg", 0)
    assert plog.config.retention_ms == 60000 and plog.config.compact  # the live log follows

    # a cluster-wide dynamic default, then this broker's own value on top
    assert _incremental(node, BROKER, "", [("log.retention.ms", SET, "120000")]).error_code == E.NONE
    assert _incremental(node, BROKER, "1", [("log.segment.bytes", SET, "2097152")]).error_code == E.NONE
    _, cfg = _describe(node, TOPIC, "cfg")
    assert [(s.name, s.source) for s in cfg["retention.ms"].synonyms] == [
        ("retention.ms", 1), ("log.retention.ms", 3), ("log.retention.hours", 5)]
    assert (cfg["segment.bytes"].value, cfg["segment.bytes"].config_source) == ("2097152", 2)
    assert plog.config.segment_bytes == 2097152
    _, bcfg = _describe(node, BROKER, "1")
    assert (bcfg["log.retention.ms"].value, bcfg["log.retention.ms"].config_source) == ("120000", 3)
    assert (bcfg["log.segment.bytes"].config_source, bcfg["log.segment.bytes"].read_only) == (2, False)
    assert bcfg["num.partitions"].read_only and bcfg["num.partitions"].config_source == 4
    hours = bcfg["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("168", 5)
    res, default_cfg = _describe(node, BROKER, "")
    # and the cluster-level min.insync.replicas every new cluster is bootstrapped with (as Kafka 4.1+)
    assert res.error_code == E.NONE and set(default_cfg) == {"log.retention.ms", "min.insync.replicas"}
    assert (default_cfg["min.insync.replicas"].value, default_cfg["min.insync.replicas"].config_source) == ("1", 3)
    assert default_cfg["log.retention.ms"].config_source == 3

    # deleting the topic override falls back to the dynamic default
    assert _incremental(node, TOPIC, "cfg", [("retention.ms", DELETE, None)]).error_code == E.NONE
    assert plog.config.retention_ms == 120000
    _, cfg = _describe(node, TOPIC, "cfg", ["retention.ms"])
    assert set(cfg) == {"retention.ms"} and cfg["retention.ms"].config_source == 3


def test_alter_configs_errors_and_validate_only(node):
    _create(node, "cfg2", 1)
    bad = _incremental(node, TOPIC, "cfg2", [("retention.ms", SET, "forever")], version=0)
    assert bad.error_code == E.INVALID_CONFIG and "retention.ms" in bad.error_message
    assert _incremental(node, TOPIC, "nope", [("retention.ms", SET, "1")]).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert _incremental(node, BROKER, "", [("broker.id", SET, "3")]).error_code == E.INVALID_REQUEST
    assert _incremental(node, TOPIC, "cfg2", [("retention.ms", SET, "5")], validate_only=True).error_code == E.NONE
    assert dict(node.broker.controller.image.topic_configs("cfg2")) == {}
    A = AlterConfigsRequest
    for version in (0, 1, 2):
        resp = node.call(ApiKey.ALTER_CONFIGS, version, A(resources=[
            A.AlterConfigsResource(resource_type=TOPIC, resource_name="cfg2",
                                   configs=[A.AlterableConfig(name="max.message.bytes", value=str(1000 + version))]),
            A.AlterConfigsResource(resource_type=BROKER, resource_name="7", configs=[])]))
        assert [(r.resource_name, r.error_code) for r in resp.responses] == [("cfg2", E.NONE), ("7", E.INVALID_REQUEST)]
    assert dict(node.broker.controller.image.topic_configs("cfg2")) == {"max.message.bytes": "1002"}
    assert node.broker.log_manager.get_log("cfg2", 0).config.max_message_bytes == 1002
    res, _ = _describe(node, BROKER, "2")
    assert res.error_code == E.INVALID_REQUEST


def test_broker_resources_must_name_the_receiving_broker(node):
    """Kafka's brokers check a BROKER resource against their own id before forwarding to the controller; the
    active controller takes a forwarded one for the forwarding broker (client id ``kbroker-forward-<id>``)."""
    from kbroker.protocol import codec
    from kbroker.protocol.headers import encode_request_header
    from kbroker.protocol.messages import IncrementalAlterConfigsResponse
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX
    from tests.server.conftest import _Connection

    R = IncrementalAlterConfigsRequest

    def alter(client_id: str, names: list[str]):
        req = R(resources=[R.AlterConfigsResource(resource_type=BROKER, resource_name=n, configs=[
            R.AlterableConfig(name="log.cleaner.backoff.ms", config_operation=SET, value="14000")]) for n in names])
        frame = encode_request_header(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, 7, client_id) + codec.encode(req, 1)
        data = b"".join(bytes(c) for c in node.run(node.broker.apis.handle_frame(_Connection(), frame)))
        resp, _ = codec.decode(IncrementalAlterConfigsResponse, data, 1, 5)  # correlation id, no tags
        return [(r.resource_name, r.error_code, r.error_message) for r in resp.responses]

    assert alter("tests", ["2", "1", ""]) == [
        ("2", E.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2"), ("1", E.NONE, None),
        ("", E.NONE, None)]
    # forwarded by node 2: "1" names another broker than the receiving one; "2" passes that check and then the
    # controller's (a registered broker's id; here there is none: refused)
    assert [c for _, c, _ in alter(f"{FORWARDED_PREFIX}2", ["1", "2"])] == [E.INVALID_REQUEST, E.INVALID_REQUEST]
    assert alter(f"{FORWARDED_PREFIX}1", ["1"]) == [("1", E.NONE, None)]


# ---- DeleteRecords and DescribeLogDirs --------------------------------------------------------------

def _delete_records(node, topic: str, offsets: dict[int, int], version: int = 2):
    R = DeleteRecordsRequest
    req = R(timeout_ms=5000, topics=[R.DeleteRecordsTopic(name=topic, partitions=[
        R.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()])])
    return {p.partition_index: (p.error_code, p.low_watermark)
            for p in node.call(ApiKey.DELETE_RECORDS, version, req).topics[0].partitions}


def _earliest(node, topic: str) -> int:
    R = ListOffsetsRequest
    req = R(replica_id=-1, topics=[R.ListOffsetsTopic(name=topic, partitions=[
        R.ListOffsetsPartition(partition_index=0, timestamp=-2)])])
    return node.call(ApiKey.LIST_OFFSETS, 7, req).topics[0].partitions[0].offset


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records(node, version):
    _create(node, "dr", 2)
    for i in range(10):
        _produce(node, "dr", 0, [(b"k%d" % i, b"v")])
    assert _delete_records(node, "dr", {0: 4, 1: 0}, version) == {0: (E.NONE, 4), 1: (E.NONE, 0)}
    assert _earliest(node, "dr") == 4
    assert _fetch(node, "dr", 0, 2).error_code == E.OFFSET_OUT_OF_RANGE
    assert _delete_records(node, "dr", {0: 2}, version) == {0: (E.NONE, 4)}  # never moves back
    assert _delete_records(node, "dr", {0: 11, 1: -7}, version) == {
        0: (E.OFFSET_OUT_OF_RANGE, -1), 1: (E.OFFSET_OUT_OF_RANGE, -1)}
    assert _delete_records(node, "dr", {0: -1, 5: 0}, version) == {0: (E.NONE, 10), 5: (E.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert _earliest(node, "dr") == 10
    starts = node.broker.log_manager.log_dirs[0] / "log-start-offset-checkpoint"
    assert "dr 0 10" in starts.read_text()
    _create(node, "dr-compact", 1, **{"cleanup.policy": "compact"})
    assert _delete_records(node, "dr-compact", {0: 0}, version) == {0: (E.POLICY_VIOLATION, -1)}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_describe_log_dirs(node, version):
    _create(node, "dirs", 2)
    _produce(node, "dirs", 1, [(b"k", b"x" * 100)])
    D = DescribeLogDirsRequest
    resp = node.call(ApiKey.DESCRIBE_LOG_DIRS, version, D(topics=None))
    (result,) = resp.results
    assert result.error_code == E.NONE and result.log_dir == str(node.broker.log_manager.log_dirs[0].resolve())
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    assert sizes[("dirs", 0)] == 0 and sizes[("dirs", 1)] > 100
    if version >= 4:
        assert result.total_bytes > 0 and result.usable_bytes > 0
    only = node.call(ApiKey.DESCRIBE_LOG_DIRS, version, D(topics=[D.DescribableLogDirTopic(topic="dirs", partitions=[1])]))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in only.results[0].topics] == [("dirs", [1])]


# ---- leaders and reassignments ----------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_not_needed(node, version):
    _create(node, "el", 2)
    R = ElectLeadersRequest
    resp = node.call(ApiKey.ELECT_LEADERS, version, R(election_type=0, timeout_ms=5000, topic_partitions=[
        R.TopicPartitions(topic="el", partitions=[0, 1, 9])]))
    assert [(p.partition_id, p.error_code) for p in resp.replica_election_results[0].partition_result] == [
        (0, E.ELECTION_NOT_NEEDED), (1, E.ELECTION_NOT_NEEDED), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]
    everything = node.call(ApiKey.ELECT_LEADERS, version, R(topic_partitions=None))
    assert all(not t.partition_result for t in everything.replica_election_results)
    if version >= 1:
        assert node.call(ApiKey.ELECT_LEADERS, version, R(election_type=3, topic_partitions=None)).error_code == \
            E.INVALID_REQUEST


@pytest.mark.parametrize("version", [0, 1])
def test_partition_reassignments(node, version):
    _create(node, "ra", 1)
    L = ListPartitionReassignmentsRequest
    listed = node.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, L(topics=None))
    assert (listed.error_code, listed.topics) == (E.NONE, [])
    A = AlterPartitionReassignmentsRequest
    resp = node.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, A(topics=[A.ReassignableTopic(name="ra", partitions=[
        A.ReassignablePartition(partition_index=0, replicas=[2]),
        A.ReassignablePartition(partition_index=0, replicas=None)])]))
    got = [(p.error_code, p.error_message) for p in resp.responses[0].partitions]
    assert got == [(E.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment includes broker 2, but no such broker is registered."),
                   (E.NO_REASSIGNMENT_IN_PROGRESS, None)]
    same = node.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, A(topics=[A.ReassignableTopic(
        name="ra", partitions=[A.ReassignablePartition(partition_index=0, replicas=[1])])]))
    assert same.responses[0].partitions[0].error_code == E.NONE


# ---- topic configs on Produce -----------------------------------------------------------------------

def test_produce_honours_topic_configs(node):
    now = int(time.time() * 1000)
    _create(node, "lat", 1, **{"message.timestamp.type": "LogAppendTime", "compression.type": "zstd"})
    pr = _produce(node, "lat", 0, [(b"k", b"v", None, 1)], compression=1)
    assert pr.error_code == E.NONE and pr.log_append_time_ms >= now
    (batch,) = iter_batches(bytes(_fetch(node, "lat", 0, 0).records))
    assert batch.compression == 4 and batch.timestamp_type == 1 and batch.max_timestamp == pr.log_append_time_ms
    assert batch.verify_crc()

    _create(node, "ts", 1, **{"message.timestamp.before.max.ms": "60000"})
    old = _produce(node, "ts", 0, [(b"k", b"v", None, now - 3_600_000)])
    assert old.error_code == E.INVALID_TIMESTAMP and "out of range" in old.error_message
    future = _produce(node, "ts", 0, [(b"k", b"v", None, now + 2 * 3_600_000)])
    assert future.error_code == E.INVALID_TIMESTAMP  # message.timestamp.after.max.ms defaults to one hour
    assert _produce(node, "ts", 0, [(b"k", b"v", None, now)]).error_code == E.NONE

    _create(node, "keys", 1, **{"cleanup.policy": "compact"})
    assert _produce(node, "keys", 0, [(None, b"v")]).error_code == E.INVALID_RECORD
    _create(node, "small", 1, **{"max.message.bytes": "200"})
    assert _produce(node, "small", 0, [(b"k", b"x" * 500)]).error_code == E.MESSAGE_TOO_LARGE
