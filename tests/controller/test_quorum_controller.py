"""QuorumController: format on first start, topic creation/deletion rules, durability and replay."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig, parse_properties
from kbroker.controller import quorum_controller as qc_mod
from kbroker.controller.image import TOPIC_RESOURCE, Endpoint
from kbroker.controller.quorum_controller import (
    BOOTSTRAP_FEATURES,
    METADATA_PARTITION_DIR,
    CreateTopicSpec,
    MetadataStorageError,
    QuorumController,
)
from kbroker.controller.records import decode_metadata_record, encode_metadata_record
from kbroker.controller.uuids import ZERO_UUID, uuid_to_str
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import build_batch, iter_batches

E = ErrorCode


def _config(tmp_path: Path, **extra: str) -> BrokerConfig:
    props = {
        "node.id": "1",
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093",
        "num.partitions": "1",
    }
    props.update(extra)
    return BrokerConfig(props)


@pytest.fixture
def make(tmp_path):
    started: list[QuorumController] = []

    def factory(**extra: str) -> QuorumController:
        qc = QuorumController(_config(tmp_path, **extra))
        qc.startup()
        started.append(qc)
        return qc

    yield factory
    for qc in started:
        qc.shutdown()


def _restart(qc: QuorumController) -> QuorumController:
    qc.shutdown()
    new = QuorumController(qc.config)
    new.startup()
    return new


def _spec(name, partitions=-1, rf=-1, configs=None, assignments=None) -> CreateTopicSpec:
    return CreateTopicSpec(name=name, num_partitions=partitions, replication_factor=rf, assignments=assignments,
                           configs=configs or {})


def _create(qc, name, partitions=-1, rf=-1, configs=None, assignments=None, validate_only=False):
    [res] = qc.create_topics([_spec(name, partitions, rf, configs, assignments)], validate_only=validate_only)
    return res


def _log_records(qc: QuorumController):
    """(batch, [records]) of the metadata log, reading the segment files directly."""
    out = []
    for seg in sorted(qc.partition_dir.glob("*.log")):
        for batch in iter_batches(seg.read_bytes()):
            out.append((batch, list(batch.records())))
    return out


def _comparable(image):
    """Everything of an image that must survive a restart (registration details change per start)."""
    return (image.cluster_id, dict(image.features), dict(image.topics_by_name), dict(image.topics_by_id),
            {k: dict(v) for k, v in image.configs.items()}, image.producer_ids_next)


# ---- format / bootstrap ---------------------------------------------------------------------------

def test_first_start_formats_and_bootstraps(tmp_path, make):
    qc = make()
    data = tmp_path / "data"
    props = parse_properties((data / "meta.properties").read_text())
    assert props["version"] == "1" and props["node.id"] == "1"
    assert props["cluster.id"] == qc.cluster_id == qc.image.cluster_id and len(qc.cluster_id) == 22
    assert len(props["directory.id"]) == 22
    assert dict(qc.image.features) == BOOTSTRAP_FEATURES
    assert qc.image.features["metadata.version"] == 30
    broker = qc.image.brokers[1]
    assert not broker.fenced
    assert broker.endpoints == (Endpoint("PLAINTEXT", "localhost", 19092, 0),)  # controller listener not registered
    assert broker.log_dirs == (qc.directory_ids[data],)
    assert broker.supported_features["metadata.version"] == (7, 30)
    assert qc.image.producer_ids_next == 0 and not qc.image.topics_by_name
    state = json.loads((data / METADATA_PARTITION_DIR / "quorum-state").read_text())
    assert state["leaderId"] == 1 and state["leaderEpoch"] == qc.leader_epoch == 1
    assert state["clusterId"] == qc.cluster_id and state["votedId"] == -1
    assert state["currentVoters"] == [{"voterId": 1}]


def test_metadata_log_layout(tmp_path, make):
    qc = make()
    _create(qc, "a", 2)
    part = tmp_path / "data" / "__cluster_metadata-0"
    names = {p.name for p in part.iterdir()}
    assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
            "partition.metadata", "leader-epoch-checkpoint", "quorum-state"} <= names
    assert "topic_id: AAAAAAAAAAAAAAAAAAAAAQ" in (part / "partition.metadata").read_text()
    batches = _log_records(qc)
    first, recs = batches[0]
    assert first.is_control and first.base_offset == 0
    assert struct.unpack(">hh", recs[0].key) == (0, 2)  # LEADER_CHANGE control record
    expected_offset = 0
    for batch, recs in batches:
        assert batch.base_offset == expected_offset
        assert batch.partition_leader_epoch == 1 and not batch.is_transactional and batch.producer_id == -1
        expected_offset = batch.next_offset
        if not batch.is_control:
            for r in recs:
                assert r.key is None
                decode_metadata_record(r.value)
    types = [type(decode_metadata_record(r.value)).__name__ for b, rs in batches if not b.is_control for r in rs]
    assert types[:8] == ["FeatureLevelRecord"] * 5 + ["ConfigRecord", "RegisterBrokerRecord",
                                                      "BrokerRegistrationChangeRecord"]
    assert types[8:] == ["TopicRecord", "PartitionRecord", "PartitionRecord"]
    assert qc.image.offset == expected_offset - 1


def test_restart_bumps_epoch_and_reregisters(make):
    qc = make()
    epoch, cluster, broker_epoch = qc.leader_epoch, qc.cluster_id, qc.image.brokers[1].broker_epoch
    qc2 = _restart(qc)
    assert qc2.leader_epoch == epoch + 1 and qc2.cluster_id == cluster
    assert qc2.image.brokers[1].broker_epoch > broker_epoch
    assert qc2.image.brokers[1].incarnation_id != qc.image.brokers[1].incarnation_id
    assert dict(qc2.image.features) == BOOTSTRAP_FEATURES  # bootstrap records are written only once
    feature_records = [r for b, rs in _log_records(qc2) if not b.is_control for r in rs
                       if isinstance(decode_metadata_record(r.value), mr.FeatureLevelRecord)]
    assert len(feature_records) == len(BOOTSTRAP_FEATURES)
    qc2.shutdown()


def test_configured_cluster_id_and_mismatches(tmp_path, make):
    qc = make(**{"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk"})
    assert qc.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"
    qc.shutdown()
    with pytest.raises(MetadataStorageError):
        QuorumController(_config(tmp_path, **{"cluster.id": "other"})).startup()
    with pytest.raises(MetadataStorageError):
        QuorumController(_config(tmp_path, **{"node.id": "2"})).startup()


def test_extra_log_dirs_and_separate_metadata_dir(tmp_path):
    cfg = _config(tmp_path, **{"log.dirs": f"{tmp_path}/d1,{tmp_path}/d2", "metadata.log.dir": f"{tmp_path}/meta"})
    qc = QuorumController(cfg)
    qc.startup()
    ids = {}
    for d in ("d1", "d2", "meta"):
        props = parse_properties((tmp_path / d / "meta.properties").read_text())
        assert props["cluster.id"] == qc.cluster_id
        ids[d] = props["directory.id"]
    assert len(set(ids.values())) == 3
    assert (tmp_path / "meta" / METADATA_PARTITION_DIR).is_dir()
    assert not (tmp_path / "d1" / METADATA_PARTITION_DIR).exists()
    assert [uuid_to_str(x) for x in qc.image.brokers[1].log_dirs] == [ids["d1"], ids["d2"]]
    # several data dirs: new partitions are left unassigned to a directory
    _create(qc, "t")
    assert qc.image.partition("t", 0).directories == (ZERO_UUID,)
    qc.shutdown()
    qc = QuorumController(cfg)
    qc.startup()
    assert [uuid_to_str(x) for x in qc.image.brokers[1].log_dirs] == [ids["d1"], ids["d2"]]
    qc.shutdown()


# ---- create topics --------------------------------------------------------------------------------

def test_create_topic(make):
    qc = make()
    res = _create(qc, "orders", 3, 1, {"cleanup.policy": "compact", "retention.ms": "1000"})
    assert res.error_code == E.NONE and res.error_message is None
    assert res.topic_id != ZERO_UUID and (res.num_partitions, res.replication_factor) == (3, 1)
    assert res.configs == {"cleanup.policy": "compact", "retention.ms": "1000"}
    t = qc.image.topics_by_name["orders"]
    assert qc.image.topics_by_id[res.topic_id] is t and not t.is_internal
    assert sorted(t.partitions) == [0, 1, 2]
    for p in t.partitions.values():
        assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), (1,), 1, 0, 0)
        assert p.directories == (qc.image.brokers[1].log_dirs[0],)
    assert qc.image.topic_configs("orders") == {"cleanup.policy": "compact", "retention.ms": "1000"}


def test_defaults_come_from_broker_config(make):
    qc = make(**{"num.partitions": "4"})
    res = _create(qc, "d")
    assert (res.num_partitions, res.replication_factor) == (4, 1)
    assert len(qc.image.topics_by_name["d"].partitions) == 4


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "sl/ash", "ünïcode", "a:b"])
def test_invalid_topic_names(make, name):
    qc = make()
    res = _create(qc, name)
    assert res.error_code == E.INVALID_TOPIC_EXCEPTION and res.error_message
    assert name not in qc.image.topics_by_name


def test_longest_legal_name(make):
    qc = make()
    assert _create(qc, "a" * 249).error_code == E.NONE
    assert _create(qc, "A-z_0.9").error_code == E.NONE


def test_already_exists_and_collision(make):
    qc = make()
    assert _create(qc, "a.b").error_code == E.NONE
    res = _create(qc, "a.b")
    assert res.error_code == E.TOPIC_ALREADY_EXISTS and res.topic_id == ZERO_UUID
    assert _create(qc, "a_b").error_code == E.INVALID_TOPIC_EXCEPTION
    # collisions inside one request, too
    r1, r2 = qc.create_topics([_spec("x_y"), _spec("x.y")])
    assert (r1.error_code, r2.error_code) == (E.NONE, E.INVALID_TOPIC_EXCEPTION)


@pytest.mark.parametrize("partitions", [0, -2, -100])
def test_invalid_partitions(make, partitions):
    qc = make()
    assert _create(qc, "t", partitions).error_code == E.INVALID_PARTITIONS


@pytest.mark.parametrize("rf", [0, -2, 2, 3])
def test_invalid_replication_factor(make, rf):
    qc = make()
    res = _create(qc, "t", 1, rf)
    assert res.error_code == E.INVALID_REPLICATION_FACTOR and res.error_message
    assert "t" not in qc.image.topics_by_name


def test_default_replication_factor_too_large(make):
    qc = make(**{"default.replication.factor": "3"})
    assert _create(qc, "t").error_code == E.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("configs", [
    {"no.such.config": "1"},
    {"retention.ms": "abc"},
    {"retention.ms": "-5"},
    {"retention.ms": "99999999999999999999999"},
    {"segment.bytes": "1000"},
    {"segment.bytes": "4294967296"},
    {"cleanup.policy": "compact,bogus"},
    {"compression.type": "brotli"},
    {"message.timestamp.type": "createtime"},
    {"min.insync.replicas": "0"},
    {"min.cleanable.dirty.ratio": "1.5"},
    {"unclean.leader.election.enable": "yes"},
    {"compression.gzip.level": "0"},
    {"compression.zstd.level": "23"},
    {"retention.ms": None},
    {"remote.storage.enable": "true"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"leader.replication.throttled.replicas": "x"},
    {"message.format.version": "3.0"},
])
def test_invalid_configs(make, configs):
    qc = make()
    res = _create(qc, "t", 1, 1, configs)
    assert res.error_code == E.INVALID_CONFIG and res.error_message
    assert "t" not in qc.image.topics_by_name


def test_valid_configs_are_stored_verbatim(make):
    qc = make()
    configs = {
        "cleanup.policy": "compact,delete", "compression.type": "zstd", "compression.zstd.level": "-5",
        "delete.retention.ms": "0", "file.delete.delay.ms": "1", "flush.messages": "1", "flush.ms": "0",
        "index.interval.bytes": "0", "max.compaction.lag.ms": "1", "max.message.bytes": "2000000",
        "message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "0",
        "message.timestamp.after.max.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "min.insync.replicas": "2", "preallocate": "TRUE",
        "retention.bytes": "-1", "retention.ms": "-1", "segment.bytes": "1048576", "segment.index.bytes": "4",
        "segment.jitter.ms": "0", "segment.ms": "1", "unclean.leader.election.enable": "false",
        "local.retention.ms": "-2", "local.retention.bytes": "-2", "remote.storage.enable": "false",
        "message.downconversion.enable": "true", "leader.replication.throttled.replicas": "0:1,1:1",
        "follower.replication.throttled.replicas": "*", "internal.segment.bytes": "1024",
    }
    res = _create(qc, "t", 1, 1, configs)
    assert res.error_code == E.NONE, res.error_message
    assert qc.image.topic_configs("t") == configs
    assert _create(qc, "u", 1, 1, {"cleanup.policy": ""}).error_code == E.NONE


def test_duplicate_names_in_one_request(make):
    qc = make()
    results = qc.create_topics([_spec("dup"), _spec("ok"), _spec("dup")])
    assert [(r.name, r.error_code) for r in results] == [("dup", E.INVALID_REQUEST), ("ok", E.NONE)]
    assert "dup" not in qc.image.topics_by_name and "ok" in qc.image.topics_by_name


def test_mixed_request_creates_only_valid_topics_in_one_batch(make):
    qc = make()
    before = _log_records(qc)
    results = qc.create_topics([_spec("good1", 2), _spec("bad", 0), _spec("good2", 1, 1, {"retention.ms": "5"})])
    assert [r.error_code for r in results] == [E.NONE, E.INVALID_PARTITIONS, E.NONE]
    assert sorted(qc.image.topics_by_name) == ["good1", "good2"]
    assert len(_log_records(qc)) == len(before) + 1  # one batch for the whole request


def test_validate_only_writes_nothing(make):
    qc = make()
    image, leo = qc.image, qc._log.log_end_offset
    results = qc.create_topics([_spec("v", 3, 1, {"retention.ms": "10"}), _spec("w", 0)], validate_only=True)
    assert (results[0].error_code, results[0].num_partitions, results[0].replication_factor) == (E.NONE, 3, 1)
    assert results[0].topic_id == ZERO_UUID and results[0].configs == {"retention.ms": "10"}
    assert results[1].error_code == E.INVALID_PARTITIONS
    assert qc.image is image and qc._log.log_end_offset == leo


def test_manual_assignments(make):
    qc = make()
    res = _create(qc, "m", assignments={0: [1], 1: [1]})
    assert res.error_code == E.NONE and res.num_partitions == 2 and res.replication_factor == 1
    assert qc.image.partition("m", 1).replicas == (1,)
    bad = E.INVALID_REPLICA_ASSIGNMENT
    assert _create(qc, "m1", assignments={0: [2]}).error_code == bad  # unknown broker
    assert _create(qc, "m2", assignments={0: [1, 1]}).error_code == bad  # duplicate replica
    assert _create(qc, "m3", assignments={0: []}).error_code == bad  # empty
    assert _create(qc, "m4", assignments={1: [1]}).error_code == bad  # not 0-based
    assert _create(qc, "m5", partitions=1, assignments={0: [1]}).error_code == E.INVALID_REQUEST
    assert _create(qc, "m6", rf=1, assignments={0: [1]}).error_code == E.INVALID_REQUEST


def test_internal_topics_can_be_created(make):
    qc = make()
    res = _create(qc, "__consumer_offsets", 5, 1, {"cleanup.policy": "compact", "segment.bytes": "104857600"})
    assert res.error_code == E.NONE
    assert qc.image.topics_by_name["__consumer_offsets"].is_internal
    assert QuorumController.is_internal("__transaction_state") and not qc.is_internal("orders")


# ---- delete topics --------------------------------------------------------------------------------

def test_delete_topics(make):
    qc = make()
    a = _create(qc, "a", 2, 1, {"retention.ms": "7"})
    b = _create(qc, "b")
    results = qc.delete_topics(["a", b.topic_id, "nope", b"\x09" * 16])
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("a", a.topic_id, E.NONE), ("b", b.topic_id, E.NONE), ("nope", ZERO_UUID, E.UNKNOWN_TOPIC_OR_PARTITION),
        (None, b"\x09" * 16, E.UNKNOWN_TOPIC_ID)]
    assert not qc.image.topics_by_name and not qc.image.topics_by_id
    assert (TOPIC_RESOURCE, "a") not in qc.image.configs  # configs go with the topic
    removes = [decode_metadata_record(r.value) for bt, rs in _log_records(qc) if not bt.is_control for r in rs]
    assert [x.topic_id for x in removes if isinstance(x, mr.RemoveTopicRecord)] == [a.topic_id, b.topic_id]


def test_delete_errors(make):
    qc = make()
    t = _create(qc, "t")
    r = qc.delete_topics(["t", "t"])
    assert [x.error_code for x in r] == [E.INVALID_REQUEST, E.INVALID_REQUEST]
    r = qc.delete_topics(["t", t.topic_id])  # the same topic by name and by id
    assert [x.error_code for x in r] == [E.NONE, E.INVALID_REQUEST]
    assert qc.delete_topics([ZERO_UUID])[0].error_code == E.INVALID_REQUEST


def test_delete_disabled(make):
    qc = make(**{"delete.topic.enable": "false"})
    _create(qc, "t")
    assert qc.delete_topics(["t"])[0].error_code == E.TOPIC_DELETION_DISABLED
    assert "t" in qc.image.topics_by_name


def test_recreated_topic_gets_new_id_and_fresh_configs(make):
    qc = make()
    first = _create(qc, "t", 1, 1, {"retention.ms": "1"})
    qc.delete_topics(["t"])
    second = _create(qc, "t", 2)
    assert second.error_code == E.NONE and second.topic_id != first.topic_id
    assert qc.image.topic_configs("t") == {}
    qc2 = _restart(qc)
    t = qc2.image.topics_by_name["t"]
    assert t.topic_id == second.topic_id and len(t.partitions) == 2
    assert first.topic_id not in qc2.image.topics_by_id and qc2.image.topic_configs("t") == {}
    qc2.shutdown()


# ---- listeners ------------------------------------------------------------------------------------

def test_listeners_see_each_commit(make):
    qc = make()
    seen = []
    qc.add_listener(lambda old, new, changes: seen.append((old, new, changes)))
    res = _create(qc, "t", 2)
    (old, new, ch), = seen
    assert "t" not in old.topics_by_name and new is qc.image
    assert ch.created_topics == {res.topic_id} and ch.changed_partitions == {(res.topic_id, 0), (res.topic_id, 1)}
    qc.delete_topics(["t"])
    assert set(seen[-1][2].deleted_topics) == {res.topic_id}
    qc.create_topics([_spec("t", 0)])  # nothing committed, nothing published
    assert len(seen) == 2

    def broken(*_):
        raise RuntimeError("listener bug")

    qc.add_listener(broken)
    assert _create(qc, "u").error_code == E.NONE  # a failing listener does not undo the write
    assert "u" in qc.image.topics_by_name


# ---- producer ids ---------------------------------------------------------------------------------

def test_producer_id_blocks_are_monotonic_across_restarts(make):
    qc = make()
    assert qc.allocate_producer_ids() == (0, 1000)
    assert qc.allocate_producer_ids() == (1000, 1000)
    assert qc.allocate_producer_ids(block_size=10) == (2000, 10)
    qc2 = _restart(qc)
    assert qc2.image.producer_ids_next == 2010
    assert qc2.allocate_producer_ids() == (2010, 1000)
    qc3 = _restart(qc2)
    assert qc3.allocate_producer_ids()[0] == 3010
    qc3.shutdown()


# ---- durability / replay --------------------------------------------------------------------------

def test_restart_replays_identical_image(make):
    qc = make()
    _create(qc, "a", 3, 1, {"cleanup.policy": "compact"})
    _create(qc, "b", 1)
    _create(qc, "c", 2, 1, {"retention.ms": "60000"})
    qc.delete_topics(["b"])
    _create(qc, "b", 4)
    qc.allocate_producer_ids()
    before = _comparable(qc.image)
    qc2 = _restart(qc)
    assert _comparable(qc2.image) == before
    assert qc2.image.offset > qc.image.offset  # the restart itself appended records
    qc3 = _restart(qc2)
    assert _comparable(qc3.image) == before
    qc3.shutdown()


def test_torn_tail_is_dropped_on_restart(make):
    qc = make()
    _create(qc, "kept")
    qc.shutdown()
    seg = sorted(qc.partition_dir.glob("*.log"))[-1]
    with open(seg, "ab") as f:  # half a batch, as after a crash in the middle of a write
        f.write(build_batch([(None, encode_metadata_record(mr.TopicRecord(name="lost", topic_id=b"\x05" * 16)))])[:40])
    qc2 = QuorumController(qc.config)
    qc2.startup()
    assert "kept" in qc2.image.topics_by_name and "lost" not in qc2.image.topics_by_name
    assert _create(qc2, "after").error_code == E.NONE
    qc2.shutdown()


def test_unfinished_metadata_transaction_is_aborted(make):
    qc = make()
    tid = b"\x07" * 16
    values = [encode_metadata_record(r) for r in (
        mr.BeginTransactionRecord(name="x"), mr.TopicRecord(name="half", topic_id=tid),
        mr.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                           partition_epoch=0))]
    qc._log.append_as_leader(build_batch([(None, v) for v in values]), qc.leader_epoch, 0)
    qc2 = _restart(qc)
    assert "half" not in qc2.image.topics_by_name
    recs = [decode_metadata_record(r.value) for b, rs in _log_records(qc2) if not b.is_control for r in rs]
    assert any(isinstance(r, mr.AbortTransactionRecord) for r in recs)
    qc3 = _restart(qc2)  # the abort is durable: still no topic, and no second abort
    assert "half" not in qc3.image.topics_by_name
    recs = [decode_metadata_record(r.value) for b, rs in _log_records(qc3) if not b.is_control for r in rs]
    assert sum(isinstance(r, mr.AbortTransactionRecord) for r in recs) == 1
    assert _create(qc3, "half").error_code == E.NONE
    qc3.shutdown()


def test_large_writes_span_batches_inside_a_transaction(make, monkeypatch):
    monkeypatch.setattr(qc_mod, "MAX_RECORDS_PER_BATCH", 4)
    qc = make()
    n_before = len(_log_records(qc))
    res = _create(qc, "wide", 10)
    assert res.error_code == E.NONE
    batches = _log_records(qc)[n_before:]
    assert len(batches) == 4  # begin + topic + 10 partitions + end = 13 records, 4 per batch
    recs = [decode_metadata_record(r.value) for _, rs in batches for r in rs]
    assert isinstance(recs[0], mr.BeginTransactionRecord) and isinstance(recs[-1], mr.EndTransactionRecord)
    before = _comparable(qc.image)
    qc2 = _restart(qc)
    assert _comparable(qc2.image) == before and len(qc2.image.topics_by_name["wide"].partitions) == 10
    qc2.shutdown()


def test_replay_across_segments(make):
    qc = make(**{"metadata.log.segment.bytes": "2048"})
    for i in range(20):
        _create(qc, f"t{i}", 3, 1, {"retention.ms": str(i)})
    qc.allocate_producer_ids()
    assert len(list(qc.partition_dir.glob("*.log"))) > 3
    before = _comparable(qc.image)
    qc2 = _restart(qc)
    assert _comparable(qc2.image) == before
    qc2.shutdown()


def test_crash_during_first_start_bootstraps_again(tmp_path):
    cfg = _config(tmp_path)
    qc = QuorumController(cfg)
    qc._ensure_meta_properties()
    qc._open_log()
    qc._image, _, _ = qc._replay_log()
    qc._elect_self(-1)  # the LeaderChange batch is written, then the process dies
    qc._log.close()
    qc2 = QuorumController(cfg)
    qc2.startup()
    assert dict(qc2.image.features) == BOOTSTRAP_FEATURES and qc2.leader_epoch == 2
    qc2.shutdown()


def test_feature_updates(make):
    qc = make()
    qc.update_features({"group.version": 0})
    assert "group.version" not in qc.image.features
    for bad in ({"transaction.version": 3}, {"metadata.version": 7}, {"metadata.version": 0}, {"nope": 1}):
        with pytest.raises(KafkaError) as exc:
            qc.update_features(bad)
        assert exc.value.code == E.INVALID_UPDATE_VERSION
    assert _restart(qc).image.features == {"metadata.version": 30, "transaction.version": 2, "share.version": 1,
                                           "streams.version": 1}


def test_image_requires_startup(tmp_path):
    qc = QuorumController(_config(tmp_path))
    with pytest.raises(RuntimeError):
        qc.image


def test_eligible_leader_replicas_put_min_insync_replicas_at_the_cluster_level(make, monkeypatch):
    """Kafka 4.1+: a new cluster whose bootstrap features enable ELR gets a cluster-level min.insync.replicas record
    with the static value; enabling ELR later writes it (and drops broker-level values) with the feature record.
    kbroker does not support ELR yet, so the feature is added to this controller's ranges for the test."""
    import kbroker.controller.quorum_controller as qcm

    monkeypatch.setitem(qcm.SUPPORTED_FEATURES, "eligible.leader.replicas.version", (0, 1))
    monkeypatch.setattr(qcm, "BOOTSTRAP_FEATURES", {**qcm.BOOTSTRAP_FEATURES, "eligible.leader.replicas.version": 1})
    qc = make(**{"min.insync.replicas": "2"})
    assert qc.image.broker_configs() == {"min.insync.replicas": "2"}
    assert qc.image.features["eligible.leader.replicas.version"] == 1

    qc.update_features({"eligible.leader.replicas.version": 0})
    assert qc.incremental_alter_configs([(4, "1", [("min.insync.replicas", 0, "3")]),
                                         (4, "", [("min.insync.replicas", 1, None)])]) == [(0, None), (0, None)]
    assert qc.image.broker_configs() == {} and qc.image.broker_configs(1) == {"min.insync.replicas": "3"}
    qc.update_features({"eligible.leader.replicas.version": 1})
    assert qc.image.broker_configs() == {"min.insync.replicas": "2"} and qc.image.broker_configs(1) == {}


def test_brokers_register_their_feature_ranges_and_updates_respect_them(make):
    qc = make()
    ep = [Endpoint("PLAINTEXT", "h2", 9092, 0)]
    with pytest.raises(KafkaError) as exc:  # group.version 1 is finalized; this broker does not know it
        qc.register_broker(ep, broker_id=2, incarnation_id=b"\x02" * 16,
                           features={"metadata.version": (7, 30), "transaction.version": (0, 2),
                                     "share.version": (0, 1)})
    assert exc.value.code == E.UNSUPPORTED_VERSION
    assert "does not support finalized version 1 of group.version" in exc.value.message
    reg = qc.register_broker(ep, broker_id=2, incarnation_id=b"\x02" * 16,
                             features={"metadata.version": (7, 30), "group.version": (1, 1),
                                       "transaction.version": (0, 2), "share.version": (0, 1),
                                       "streams.version": (0, 1)})
    assert dict(reg.supported_features) == {"metadata.version": (7, 30), "group.version": (1, 1),
                                            "transaction.version": (0, 2), "share.version": (0, 1),
                                            "streams.version": (0, 1)}
    with pytest.raises(KafkaError) as exc:
        qc.update_features({"group.version": 0})
    assert exc.value.message == "Invalid update version 0 for feature group.version. Broker 2 only supports versions 1"
    assert _restart(qc).image.brokers[2].supported_features["group.version"] == (1, 1)


def test_restart_after_kafkas_controlled_shutdown_elects_the_eligible_leader_replica(make):
    """Kafka 4.1+ (eligible leader replicas on) ends a single node's metadata log, at its controlled shutdown, with
    the broker fenced and each partition it led leaderless with an empty ISR and the broker as its eligible leader
    replica. kbroker started on that log registers the node again and makes it the leader of those partitions (ISR
    = itself, ELR cleared), as Kafka's controller does when the broker comes back."""
    qc = make()
    assert _create(qc, "t", 2).error_code == E.NONE
    topic = qc.image.topics_by_name["t"]
    epoch = qc.image.brokers[1].broker_epoch
    qc._commit([mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=1)]
               + [mr.PartitionChangeRecord(topic_id=topic.topic_id, partition_id=p, isr=[], leader=-1,
                                           eligible_leader_replicas=[1], last_known_elr=[1]) for p in (0, 1)])
    assert qc.image.topics_by_name["t"].partitions[0].leader == -1
    qc = _restart(qc)
    try:
        assert not qc.image.brokers[1].fenced
        for p in qc.image.topics_by_name["t"].partitions.values():
            assert (p.leader, p.isr, p.eligible_leader_replicas, p.last_known_elr) == (1, (1,), (), ())
    finally:
        qc.shutdown()


def test_a_metadata_record_kbroker_does_not_know_stops_the_start_with_where_it_is(make):
    """A record type (or version) kbroker does not know, e.g. from a newer Kafka: start-up fails with one
    MetadataStorageError naming the log and the offset, before anything is appended."""
    qc = make()
    qc.shutdown()
    log_file = sorted((Path(qc.config.log_dirs[0]) / METADATA_PARTITION_DIR).glob("*.log"))[-1]
    data = log_file.read_bytes()
    last = list(iter_batches(data))[-1]
    value = bytes([1, 99, 0, 0])  # frame version 1, record type 99, version 0, an empty tagged-field section
    log_file.write_bytes(data + build_batch([(None, value)], base_offset=last.last_offset + 1,
                                            partition_leader_epoch=last.partition_leader_epoch))
    size = log_file.stat().st_size
    offset = last.last_offset + 1
    with pytest.raises(MetadataStorageError, match=rf"at offset {offset}: unknown metadata record type 99"):
        QuorumController(qc.config).startup()
    assert log_file.stat().st_size == size
