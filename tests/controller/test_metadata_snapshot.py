"""KRaft metadata snapshots (kbroker.controller.snapshot): file names, the batch format, the snapshot directory,
and images rebuilt from snapshots, including one written from a real QuorumController's image."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig
from kbroker.controller.config_control import SET
from kbroker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, Endpoint, MetadataDelta, MetadataImage
from kbroker.controller.quorum_controller import CreateTopicSpec, QuorumController
from kbroker.controller.records import encode_metadata_record
from kbroker.controller.snapshot import (
    SnapshotError,
    SnapshotStore,
    decode_snapshot,
    encode_snapshot,
    image_records,
    load_image,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from kbroker.protocol import codec
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.messages import SnapshotFooterRecord, SnapshotHeaderRecord
from kbroker.protocol.records import ControlType, build_batch, build_control_batch, split_batches_strict

NOW = 1_700_000_000_000
LAST_TS = 1_699_999_999_000
TID = bytes(range(1, 17))


def _values(n: int) -> list[bytes]:
    return [encode_metadata_record(mr.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=f"t{i % 97}",
                                                   name=f"k{i}", value="v" * (i % 13))) for i in range(n)]


def _one_line(exc: pytest.ExceptionInfo[SnapshotError]) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg
    return msg


# ---- file names -------------------------------------------------------------------------------------

def test_file_name_round_trip():
    assert snapshot_file_name(1234, 5) == "00000000000000001234-0000000005.checkpoint"
    assert snapshot_file_name(0, 0) == "00000000000000000000-0000000000.checkpoint"
    for sid in [(0, 0), (1234, 5), (10**20 - 1, 10**10 - 1), (2**63 - 1, 2**31 - 1)]:
        assert parse_snapshot_file_name(snapshot_file_name(*sid)) == sid
    for other in ["00000000000000001234-0000000005.checkpoint.part",
                  "00000000000000001234-0000000005.checkpoint.deleted", "bootstrap.checkpoint",
                  "00000000000000001234.log", "0000000000000001234-0000000005.checkpoint",
                  "00000000000000001234-000000005.checkpoint", "00000000000000001234_0000000005.checkpoint",
                  "quorum-state", ""]:
        assert parse_snapshot_file_name(other) is None, other
    for bad in [(-1, 0), (0, -1), (10**20, 0), (0, 10**10)]:
        with pytest.raises(ValueError):
            snapshot_file_name(*bad)


# ---- encode / decode --------------------------------------------------------------------------------

def test_encode_decode_round_trip_over_several_batches():
    values = _values(23_000) + [encode_metadata_record(mr.ConfigRecord(resource_type=TOPIC_RESOURCE,
                                                                       resource_name="big", name="k",
                                                                       value="x" * 3_000_000))] * 3
    data = encode_snapshot(values, epoch=7, last_contained_log_timestamp_ms=LAST_TS, now_ms=NOW)
    assert decode_snapshot(data) == values

    batches = split_batches_strict(data)
    assert len(batches) >= 6  # header, 10k records per batch, large values split by size, footer
    expected = 0
    for b in batches:  # offsets from 0, consecutive; every batch in the snapshot epoch and valid
        b.validate_records()
        assert b.base_offset == expected and b.partition_leader_epoch == 7 and b.max_timestamp == NOW
        expected = b.next_offset
    assert expected == len(values) + 2
    header, *data_batches, footer = batches
    assert header.is_control and header.records_count == 1 and not header.is_transactional
    ctype, key_version, value = header.control_record()
    assert (ctype, key_version) == (ControlType.SNAPSHOT_HEADER, 0)
    assert codec.decode(SnapshotHeaderRecord, value, 0)[0] == SnapshotHeaderRecord(
        version=0, last_contained_log_timestamp=LAST_TS)
    assert footer.is_control and footer.control_record()[:2] == (ControlType.SNAPSHOT_FOOTER, 0)
    assert codec.decode(SnapshotFooterRecord, footer.control_record()[2], 0)[0] == SnapshotFooterRecord(version=0)
    assert not any(b.is_control for b in data_batches)
    assert all(r.key is None for b in data_batches for r in b.records())


def test_empty_snapshot_is_header_and_footer():
    data = encode_snapshot([], epoch=0, last_contained_log_timestamp_ms=-1, now_ms=NOW)
    assert [b.control_type() for b in split_batches_strict(data)] == [ControlType.SNAPSHOT_HEADER,
                                                                        ControlType.SNAPSHOT_FOOTER]
    assert decode_snapshot(data) == []
    with pytest.raises(ValueError):
        encode_snapshot([], epoch=-1, last_contained_log_timestamp_ms=0, now_ms=NOW)


def test_decode_rejects_torn_files():
    data = encode_snapshot(_values(50), epoch=2, last_contained_log_timestamp_ms=LAST_TS, now_ms=NOW)
    sizes = [len(b) for b in split_batches_strict(data)]
    for cut in [0, 1, 11, 12, 60, 61, sizes[0] + 30, len(data) - sizes[-1] + 5, len(data) - 1]:
        with pytest.raises(SnapshotError) as exc:
            decode_snapshot(data[:cut])
        _one_line(exc)
    # cut at a batch boundary: whole batches, but the footer is gone
    with pytest.raises(SnapshotError) as exc:
        decode_snapshot(data[:len(data) - sizes[-1]])
    assert "footer" in _one_line(exc)
    with pytest.raises(SnapshotError) as exc:
        decode_snapshot(data[:sizes[0]])
    assert "footer" in _one_line(exc)


def test_decode_rejects_a_flipped_byte():
    data = encode_snapshot(_values(300), epoch=2, last_contained_log_timestamp_ms=LAST_TS, now_ms=NOW)
    pos = 0
    for b in split_batches_strict(data):
        # a byte covered by the CRC (attributes .. end) in every batch: header, data and footer
        for at in (pos + 21, pos + len(b) // 2, pos + len(b) - 1):
            bad = bytearray(data)
            bad[at] ^= 0x40
            with pytest.raises(SnapshotError) as exc:
                decode_snapshot(bytes(bad))
            assert "CRC" in _one_line(exc)
        pos += len(b)


def test_decode_rejects_missing_or_misplaced_header_and_footer():
    values = _values(3)
    header = build_control_batch(ControlType.SNAPSHOT_HEADER, -1, -1, 0, NOW, base_offset=0, partition_leader_epoch=1,
                                 value=codec.encode(SnapshotHeaderRecord(last_contained_log_timestamp=LAST_TS), 0))

    def footer(offset):
        return build_control_batch(ControlType.SNAPSHOT_FOOTER, -1, -1, 0, NOW, base_offset=offset,
                                   partition_leader_epoch=1, value=codec.encode(SnapshotFooterRecord(), 0))

    def data_at(offset):
        return build_batch([(None, v, [], NOW) for v in values], base_offset=offset, partition_leader_epoch=1)

    assert decode_snapshot(header + data_at(1) + footer(4)) == values  # the well-formed file
    cases = {
        "no footer": header + data_at(1),
        "no header": data_at(0) + footer(3),
        "footer first": footer(0) + data_at(1) + footer(4),
        "header twice": header + data_at(1) + build_control_batch(
            ControlType.SNAPSHOT_HEADER, -1, -1, 0, NOW, base_offset=4, partition_leader_epoch=1,
            value=codec.encode(SnapshotHeaderRecord(), 0)) + footer(5),
        "footer not last": header + footer(1) + data_at(2),
        "leader change inside": header + build_control_batch(ControlType.LEADER_CHANGE, -1, -1, 0, NOW,
                                                             base_offset=1, value=b"\x00\x00") + footer(2),
        "gap before the footer": header + data_at(1) + footer(5),
        "overlapping offsets": header + data_at(1) + data_at(3) + footer(6),
        "not starting at 0": header.replace(b"\x00" * 8, b"\x00" * 7 + b"\x01", 1) + data_at(2) + footer(5),
        "control record without a key": header + build_batch([(None, b"\x00\x00", [], NOW)], base_offset=1,
                                                               is_control=True) + footer(2),
        "null value": header + build_batch([(None, None, [], NOW)], base_offset=1) + footer(2),
        "malformed header value": build_control_batch(ControlType.SNAPSHOT_HEADER, -1, -1, 0, NOW,
                                                      value=b"\x00") + footer(1),
    }
    for what, data in cases.items():
        with pytest.raises(SnapshotError) as exc:
            decode_snapshot(data)
        _one_line(exc)


def test_decode_skips_kraft_version_and_voters_control_batches():
    values = _values(2)
    header = build_control_batch(ControlType.SNAPSHOT_HEADER, -1, -1, 0, NOW, base_offset=0,
                                 value=codec.encode(SnapshotHeaderRecord(), 0))
    kraft_version = build_control_batch(ControlType.KRAFT_VERSION, -1, -1, 0, NOW, base_offset=1,
                                        value=b"\x00\x00\x00\x01")
    body = build_batch([(None, v, [], NOW) for v in values], base_offset=2)
    footer = build_control_batch(ControlType.SNAPSHOT_FOOTER, -1, -1, 0, NOW, base_offset=4,
                                 value=codec.encode(SnapshotFooterRecord(), 0))
    assert decode_snapshot(header + kraft_version + body + footer) == values


# ---- the snapshot directory -------------------------------------------------------------------------

def test_snapshot_store(tmp_path: Path):
    d = tmp_path / "__cluster_metadata-0"
    store = SnapshotStore(d)
    assert d.is_dir() and store.ids() == [] and store.latest() is None and store.earliest() is None
    blobs = {sid: encode_snapshot(_values(sid[0] % 50), sid[1], LAST_TS, NOW) for sid in [(120, 3), (40, 1), (300, 3)]}
    for sid, data in blobs.items():
        assert store.write(*sid, data) == sid
    (d / "00000000000000000000.log").write_bytes(b"")
    (d / "quorum-state").write_text("{}")
    (d / "bootstrap.checkpoint").write_bytes(b"x")
    assert store.ids() == [(40, 1), (120, 3), (300, 3)]
    assert store.latest() == (300, 3) and store.earliest() == (40, 1)
    assert sorted(os.listdir(d)) == sorted([snapshot_file_name(*s) for s in blobs]
                                           + ["00000000000000000000.log", "quorum-state", "bootstrap.checkpoint"])
    for sid, data in blobs.items():
        assert store.read(sid) == data and store.size(sid) == len(data)
        assert decode_snapshot(store.read(sid)) == _values(sid[0] % 50)

    # FetchSnapshot-style chunks reassemble the file
    sid = (120, 3)
    size = store.size(sid)
    chunks, pos = [], 0
    while pos < size:
        chunk = store.read_chunk(sid, pos, 100)
        assert 0 < len(chunk) <= 100
        chunks.append(chunk)
        pos += len(chunk)
    assert b"".join(chunks) == blobs[sid]
    assert store.read_chunk(sid, size, 100) == b""
    assert store.read_chunk(sid, 5, 0) == b""
    for position in (-1, size + 1):
        with pytest.raises(ValueError):
            store.read_chunk(sid, position, 10)

    # rewriting an id replaces it
    store.write(120, 3, blobs[(40, 1)])
    assert store.read((120, 3)) == blobs[(40, 1)]

    assert store.delete_before(120) == [(40, 1)]
    assert store.ids() == [(120, 3), (300, 3)]
    assert store.delete_before(120) == []
    assert store.delete_before(301) == [(120, 3), (300, 3)]
    assert store.ids() == [] and store.latest() is None
    with pytest.raises(FileNotFoundError):
        store.read((300, 3))
    with pytest.raises(FileNotFoundError):
        store.size((300, 3))
    with pytest.raises(FileNotFoundError):
        store.read_chunk((300, 3), 0, 10)
    assert sorted(os.listdir(d)) == ["00000000000000000000.log", "bootstrap.checkpoint", "quorum-state"]


def test_store_open_removes_part_and_deleted_leftovers(tmp_path: Path):
    d = tmp_path / "meta"
    store = SnapshotStore(d)
    kept = store.write(10, 1, encode_snapshot(_values(3), 1, LAST_TS, NOW))
    part = d / (snapshot_file_name(20, 1) + ".part")  # a write cut short by a crash
    part.write_bytes(encode_snapshot(_values(4), 1, LAST_TS, NOW)[:-10])
    deleted = d / (snapshot_file_name(5, 0) + ".deleted")  # a deletion cut short
    deleted.write_bytes(b"old")
    unrelated = d / "notes.part"
    unrelated.write_bytes(b"x")
    assert SnapshotStore(d).ids() == [kept]  # leftovers are never listed
    assert not part.exists() and not deleted.exists() and unrelated.exists()
    assert SnapshotStore(d).read(kept) == store.read(kept)


# ---- images -----------------------------------------------------------------------------------------

def _assert_same_image(rebuilt: MetadataImage, image: MetadataImage) -> None:
    """Field by field, then as a whole: everything but ``offset`` is equal."""
    for f in dataclasses.fields(MetadataImage):
        if f.name != "offset":
            assert getattr(rebuilt, f.name) == getattr(image, f.name), f.name
    assert rebuilt.topics_by_name.keys() == image.topics_by_name.keys()
    for name, topic in image.topics_by_name.items():
        assert rebuilt.topics_by_id[topic.topic_id] == topic
        for pid, p in topic.partitions.items():
            assert rebuilt.topics_by_name[name].partitions[pid] == p
    for node_id, b in image.brokers.items():
        assert rebuilt.brokers[node_id] == b
    assert dataclasses.replace(rebuilt, offset=image.offset) == image


def _snapshot_round_trip(image: MetadataImage, epoch: int) -> tuple[bytes, MetadataImage]:
    end_offset = image.offset + 1
    values = [encode_metadata_record(r) for r in image_records(image)]
    data = encode_snapshot(values, epoch, LAST_TS, NOW)
    rebuilt = load_image(image.cluster_id, decode_snapshot(data), end_offset)
    assert rebuilt.offset == image.offset
    return data, rebuilt


@pytest.fixture
def controller(tmp_path: Path):
    config = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "num.partitions": "1",
                           "broker.rack": "rack-a",
                           "listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"})
    qc = QuorumController(config)
    qc.startup()
    yield qc
    qc.shutdown()


def _busy_controller(qc: QuorumController) -> MetadataImage:
    """Brokers, topics with several partitions and replicas, configs, producer ids, a fenced broker."""
    for node_id in (2, 3, 4):
        qc.register_broker([Endpoint("PLAINTEXT", f"host{node_id}", 9092 + node_id, 0),
                            Endpoint("SSL", f"host{node_id}", 9192 + node_id, 1)],
                           broker_id=node_id, incarnation_id=bytes([node_id]) * 16,
                           rack=None if node_id == 4 else f"rack-{node_id}",
                           log_dirs=[bytes([node_id, 9]) * 8, bytes([node_id, 8]) * 8], now_ms=NOW)
    results = qc.create_topics([
        CreateTopicSpec("orders", 6, 3, configs={"cleanup.policy": "compact", "retention.ms": "60000"}),
        CreateTopicSpec("events", 4, 2),
        CreateTopicSpec("__consumer_offsets", 3, 1, configs={"segment.bytes": "104857600"}),
        CreateTopicSpec("gone", 2, 2),
    ])
    assert [r.error_code for r in results] == [0, 0, 0, 0]
    assert qc.delete_topics(["gone"])[0].error_code == 0
    assert qc.create_partitions([("events", 6, None)]) == [("events", 0, None)]
    assert qc.incremental_alter_configs([
        (TOPIC_RESOURCE, "events", [("retention.ms", SET, "3600000"), ("max.message.bytes", SET, "2000000")]),
        (BROKER_RESOURCE, "1", [("log.cleaner.threads", SET, "2")]),
        (BROKER_RESOURCE, "", [("log.retention.ms", SET, "86400000")]),
    ]) == [(0, None)] * 3
    assert qc.allocate_producer_ids() == (0, 1000)
    assert qc.allocate_producer_ids(block_size=10) == (1000, 10)
    reg = qc.image.brokers[3]
    assert qc.controlled_shutdown(3, reg.broker_epoch)  # fences 3 and moves its leaderships
    return qc.image


def test_image_round_trip_from_a_quorum_controller(controller: QuorumController):
    image = _busy_controller(controller)
    # the image under test really holds every kind of state
    assert set(image.brokers) == {1, 2, 3, 4} and image.brokers[3].fenced and image.brokers[4].rack is None
    assert image.brokers[1].rack == "rack-a" and image.brokers[2].log_dirs and image.brokers[1].supported_features
    orders = image.topics_by_name["orders"]
    assert len(orders.partitions) == 6 and all(len(p.replicas) == 3 for p in orders.partitions.values())
    assert any(p.leader_epoch > 0 and p.partition_epoch > 0 for p in orders.partitions.values())
    assert "gone" not in image.topics_by_name and len(image.topics_by_name["events"].partitions) == 6
    assert image.configs[(BROKER_RESOURCE, "")] == {"log.retention.ms": "86400000", "min.insync.replicas": "1"}
    assert image.producer_ids_next == 1010 and image.features["metadata.version"] > 0

    records = image_records(image)
    assert isinstance(records[0], mr.FeatureLevelRecord) and records[0].name == "metadata.version"
    assert sum(isinstance(r, mr.PartitionRecord) for r in records) == 6 + 6 + 3
    data, rebuilt = _snapshot_round_trip(image, controller.leader_epoch)
    _assert_same_image(rebuilt, image)

    # the same snapshot through the store, named by the log's end offset and the epoch of its last record
    end_offset = image.offset + 1
    epoch = controller._log.leader_epoch_cache.epoch_for_offset(image.offset)
    assert epoch == controller.leader_epoch
    store = SnapshotStore(controller.partition_dir)
    store.write(end_offset, epoch, data)
    assert store.latest() == (end_offset, epoch)
    again = load_image(image.cluster_id, decode_snapshot(store.read((end_offset, epoch))), end_offset)
    assert again == rebuilt


def test_image_round_trip_of_every_field():
    """Fields the single-node controller never sets: ELR, recovery state, reassignments, controlled shutdown."""
    delta = MetadataDelta(MetadataImage.empty("cluster-x"))
    records = [
        mr.FeatureLevelRecord(name="group.version", feature_level=1),
        mr.FeatureLevelRecord(name="metadata.version", feature_level=21),
        mr.RegisterBrokerRecord(broker_id=5, incarnation_id=b"\x05" * 16, broker_epoch=77,
                                end_points=[mr.RegisterBrokerRecord.BrokerEndpoint("EXTERNAL", "h", 65535, 3)],
                                features=[mr.RegisterBrokerRecord.BrokerFeature("metadata.version", 7, 30)],
                                rack=None, fenced=False, in_controlled_shutdown=True, log_dirs=[b"\x09" * 16]),
        mr.RegisterBrokerRecord(broker_id=6, incarnation_id=b"\x06" * 16, broker_epoch=78, end_points=[],
                                features=[], rack="r", fenced=True, log_dirs=[]),
        mr.TopicRecord(name="t", topic_id=TID),
        mr.PartitionRecord(partition_id=0, topic_id=TID, replicas=[5, 6, 7], isr=[5], removing_replicas=[7],
                           adding_replicas=[6], leader=5, leader_recovery_state=1, leader_epoch=9, partition_epoch=12,
                           directories=[b"\x09" * 16, bytes(16), b"\x01" * 16], eligible_leader_replicas=[6],
                           last_known_elr=[7]),
        mr.PartitionRecord(partition_id=3, topic_id=TID, replicas=[6], isr=[], leader=-1, leader_epoch=0,
                           partition_epoch=0, directories=[]),
        mr.TopicRecord(name="empty", topic_id=b"\x02" * 16),
        mr.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name="a", value=""),
        mr.ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="5", name="b", value="1"),
        mr.ProducerIdsRecord(broker_id=5, broker_epoch=77, next_producer_id=5000),
    ]
    for i, r in enumerate(records):
        delta.replay(r, i)
    image = delta.apply()
    _, rebuilt = _snapshot_round_trip(image, 4)
    _assert_same_image(rebuilt, image)
    assert image_records(rebuilt)[0] == mr.FeatureLevelRecord(name="metadata.version", feature_level=21)


def test_empty_image_round_trip():
    image = MetadataImage.empty("c")
    assert image_records(image) == []
    _, rebuilt = _snapshot_round_trip(image, 0)
    assert rebuilt == image  # offset -1: a snapshot ending at offset 0


def test_load_image_reports_bad_records():
    with pytest.raises(SnapshotError) as exc:
        load_image("c", [b"\x01\x02\x00garbage"], 10)
    assert "record 0" in _one_line(exc)
    orphan = encode_metadata_record(mr.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1], isr=[1], leader=1,
                                                       leader_epoch=0, partition_epoch=0))
    with pytest.raises(SnapshotError) as exc:
        load_image("c", [encode_metadata_record(mr.TopicRecord(name="x", topic_id=b"\x03" * 16)), orphan], 10)
    assert "record 1" in _one_line(exc)
    with pytest.raises(ValueError):
        load_image("c", [], -1)


# ---- kbroker-dump-log -------------------------------------------------------------------------------

def test_dump_log_prints_a_snapshot(controller: QuorumController, tmp_path: Path):
    image = _busy_controller(controller)
    records = image_records(image)
    end_offset, epoch = image.offset + 1, controller.leader_epoch
    store = SnapshotStore(controller.partition_dir)
    store.write(end_offset, epoch, encode_snapshot([encode_metadata_record(r) for r in records], epoch, LAST_TS, NOW))
    path = store.path((end_offset, epoch))
    proc = subprocess.run([sys.executable, "-m", "kbroker.cli.dump_log", "--cluster-metadata-decoder",
                           "--files", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"Snapshot end offset: {end_offset}, epoch: {epoch}" in out
    assert f' SnapshotHeader {{"version":0,"lastContainedLogTimestamp":{LAST_TS}}}' in out
    assert ' SnapshotFooter {"version":0}' in out
    assert "isvalid: false" not in out and "invalid bytes" not in out and "Error at" not in out
    assert "Non-consecutive" not in proc.stderr
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in out.splitlines() if " payload: " in line]
    assert len(payloads) == len(records)
    assert [p["type"] for p in payloads] == [
        re.sub(r"(?<!^)(?=[A-Z])", "_", type(r).__name__).upper() for r in records]
    topics = {p["data"]["name"] for p in payloads if p["type"] == "TOPIC_RECORD"}
    assert topics == {"orders", "events", "__consumer_offsets"}
    assert payloads[-1]["data"]["nextProducerId"] == 1010
