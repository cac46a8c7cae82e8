"""kbroker-dump-log on segments, indexes and producer snapshots written by kbroker's own storage."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from kbroker.cli import dump_log
from kbroker.protocol.records import ControlType, RecordBatch, build_batch, iter_batches
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog

TOPIC_ID = bytes(range(1, 17))
T0 = 1_700_000_000_000
BATCH_LINE = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (-?\d+) isTransactional: (true|false) "
    r"isControl: (true|false) deleteHorizonMs: OptionalLong\.empty position: (\d+) CreateTime: (\d+) size: (\d+) "
    r"magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: true$")


@pytest.fixture
def segments(tmp_path: Path) -> tuple[PartitionLog, list[bytes]]:
    """A log of several segments: plain, gzip, idempotent (-> producer snapshots) and a COMMIT marker."""
    config = LogConfig(segment_bytes=700, index_interval_bytes=150)
    plog = PartitionLog(tmp_path / "t-0", config, topic_id=TOPIC_ID, now_ms=T0, clean_shutdown=True)
    appended = []
    seq = 0
    for i in range(12):
        n = 1 + i % 3
        if i % 4 == 0:
            b = build_batch([(b"k%d" % j, b"value-%d-%d" % (i, j), [("h", b"1")], T0 + i) for j in range(n)],
                            compression=1)
        elif i % 4 == 1:
            b = build_batch([(None, b"idem-%d" % j, [], T0 + i) for j in range(n)], producer_id=7,
                            producer_epoch=0, base_sequence=seq)
            seq += n
        else:
            b = build_batch([(b"k", b"x" * 60, [], T0 + i) for _ in range(n)])
        plog.append_as_leader(b, 3, T0 + i)
        appended.append(b)
    plog.append_as_follower(build_batch([(b"a", b"b", [], T0 + 50)], base_offset=plog.log_end_offset,
                                        partition_leader_epoch=3))
    marker = build_batch([(struct.pack(">hh", 0, ControlType.COMMIT), struct.pack(">hi", 0, 5), [], T0 + 99)],
                         base_offset=plog.log_end_offset, partition_leader_epoch=3, producer_id=9, producer_epoch=0,
                         is_transactional=True, is_control=True)
    plog.append_as_follower(marker)
    plog.flush()
    yield plog, appended
    plog.close()


def _set_base(batch: bytes, offset: int) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">q", buf, 0, offset)
    return bytes(buf)


def test_every_batch_of_every_segment_is_dumped(segments, run):
    plog, _ = segments
    assert plog.num_segments >= 3, "the fixture should roll segments"
    files = sorted(plog.dir.glob("*.log"))
    status, out, err = run(dump_log.main, "--files", ",".join(map(str, files)))
    assert status == 0, err
    dumped = [BATCH_LINE.match(line) for line in out.splitlines() if line.startswith("baseOffset:")]
    assert all(dumped), out
    expected = []
    for f in files:
        data = f.read_bytes()
        expected += [(b.base_offset, b.last_offset, b.records_count, b.position, b.size, b.crc)
                     for b in iter_batches(data)]
    got = [(int(m[1]), int(m[2]), int(m[3]), int(m[11]), int(m[13]), int(m[15])) for m in dumped]
    assert got == expected
    # offsets run without a gap from 0 to the log end
    assert [g[0] for g in got] == [0] + [g[1] + 1 for g in got[:-1]]
    assert got[-1][1] == plog.log_end_offset - 1
    for f in files:
        assert f"Dumping {f}" in out
        assert f"Log starting offset: {int(f.name.split('.')[0])}" in out
    assert "compresscodec: gzip" in out and "compresscodec: none" in out
    assert "producerId: 7 producerEpoch: 0" in out
    assert "Found" not in out and "invalid bytes" not in out


def test_deep_iteration_and_print_data_log(segments, run):
    plog, _ = segments
    files = sorted(plog.dir.glob("*.log"))
    status, out, err = run(dump_log.main, "--files", ",".join(map(str, files)), "--print-data-log")
    assert status == 0, err
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert len(records) == plog.log_end_offset  # one line per record, the marker included
    assert "| offset: 0 CreateTime: %d keySize: 2 valueSize: 9 sequence: -1 headerKeys: [h] key: k0 payload: value-0-0" % T0 in out
    assert re.search(r"keySize: -1 valueSize: 6 sequence: 0 headerKeys: \[\] payload: idem-0$", out, re.M)
    assert "isControl: true" in out
    assert re.search(r"\| offset: \d+ CreateTime: \d+ keySize: 4 valueSize: 6 sequence: -1 headerKeys: \[\] "
                     r"endTxnMarker: COMMIT coordinatorEpoch: 5$", out, re.M)
    assert "Non-consecutive" not in err
    # --deep-iteration alone prints record metadata but no payloads
    status, out, _ = run(dump_log.main, "--files", str(files[0]), "--deep-iteration")
    assert status == 0 and "| offset: 0" in out and "payload:" not in out


def test_indexes_match_the_log(segments, run):
    plog, _ = segments
    first = sorted(plog.dir.glob("*.log"))[0]
    index, timeindex = first.with_suffix(".index"), first.with_suffix(".timeindex")
    status, out, err = run(dump_log.main, "--files", f"{index},{timeindex}")
    assert status == 0, err
    data = first.read_bytes()
    lasts = {b.position: b.last_offset for b in iter_batches(data)}
    entries = [tuple(map(int, m)) for m in re.findall(r"^offset: (\d+) position: (\d+)$", out, re.M)]
    assert entries, out
    for offset, position in entries:
        assert lasts[position] == offset
    assert re.findall(r"^timestamp: \d+ offset: \d+$", out, re.M)
    assert "Mismatches" not in err and "mismatch" not in err
    status, out, _ = run(dump_log.main, "--files", str(index), "--index-sanity-check")
    assert status == 0 and "passed sanity check" in out
    status, out, _ = run(dump_log.main, "--files", str(index), "--verify-index-only")
    assert status == 0 and "offset:" not in out.replace(f"Dumping {index}", "")


def test_index_mismatch_is_reported(segments, run, tmp_path):
    plog, _ = segments
    first = sorted(plog.dir.glob("*.log"))[0]
    index = first.with_suffix(".index")
    raw = bytearray(index.read_bytes())
    assert raw
    struct.pack_into(">i", raw, 0, struct.unpack_from(">i", raw, 0)[0] + 1)  # wrong relative offset
    index.write_bytes(bytes(raw))
    status, out, err = run(dump_log.main, "--files", str(index))
    assert status == 0
    assert "Mismatches in :" in err and "Index offset:" in err


def test_producer_snapshot(segments, run):
    plog, _ = segments
    snaps = sorted(plog.dir.glob("*.snapshot"))
    assert snaps, "rolling a segment takes a producer snapshot"
    status, out, err = run(dump_log.main, "--files", str(snaps[-1]))
    assert status == 0, err
    assert re.search(r"^producerId: 7 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong\.empty "
                     r"lastTimestamp: \d+ firstSequence: \d+ lastSequence: \d+ lastOffset: \d+ offsetDelta: \d+ "
                     r"timestamp: \d+$", out, re.M), out


def test_trailing_garbage_and_corrupt_batch(tmp_path, run):
    f = tmp_path / "00000000000000000000.log"
    good = build_batch([(b"k", b"v", [], T0)])
    bad = bytearray(_set_base(build_batch([(b"k", b"w", [], T0)]), 1))
    bad[-1] ^= 0xFF  # CRC no longer matches
    f.write_bytes(good + bytes(bad) + b"\x00\x01\x02")
    status, out, _ = run(dump_log.main, "--files", str(f))
    assert status == 0
    assert out.count("baseOffset:") == 2
    assert "isvalid: false" in out and "isvalid: true" in out
    assert f"Found 3 invalid bytes at the end of {f.name}" in out
    assert RecordBatch(good).crc == int(re.search(r"crc: (\d+)", out)[1])


def test_metadata_log_with_the_cluster_metadata_decoder(tmp_path, run):
    from kbroker.config import BrokerConfig
    from kbroker.controller.quorum_controller import CreateTopicSpec, QuorumController

    config = BrokerConfig({"process.roles": "broker,controller", "node.id": "1", "log.dirs": str(tmp_path / "d"),
                           "listeners": "PLAINTEXT://127.0.0.1:9092"})
    ctl = QuorumController(config)
    ctl.startup()
    ctl.create_topics([CreateTopicSpec(name="orders", num_partitions=2, replication_factor=1, assignments=None,
                                       configs={})])
    ctl.shutdown()
    seg = tmp_path / "d" / "__cluster_metadata-0" / "00000000000000000000.log"
    status, out, err = run(dump_log.main, "--cluster-metadata-decoder", "--files", str(seg))
    assert status == 0, err
    assert ' LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}' in out
    assert 'payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"' in out
    assert out.count('"type":"PARTITION_RECORD"') == 2
    assert '"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":' in out


def test_unknown_and_missing_files(tmp_path, run):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    status, out, err = run(dump_log.main, "--files", str(other))
    assert status == 0 and f"Ignoring unknown file {other}" in err
    status, out, err = run(dump_log.main, "--files", str(tmp_path / "00000000000000000000.log"))
    assert status == 1 and "No such file or directory" in err
    status, out, err = run(dump_log.main)
    assert status == 1 and "--files" in err


def test_transaction_log_decoder(tmp_path, run):
    """``--transaction-log-decoder`` reads ``__transaction_state`` records as the coordinator writes them (their
    record types 0 and 1 are the offsets topic's legacy commit keys too: ``--offsets-decoder`` cannot)."""
    from kbroker.coordinator.transaction.metadata import TransactionMetadata, TransactionState
    from kbroker.coordinator.transaction.service import TRANSACTION_COORDINATOR_SERDE as serde

    meta = TransactionMetadata("eos-loop", 1000, 2, 60000, TransactionState.ONGOING,
                               {("out", 1), ("out", 0), ("__consumer_offsets", 3)}, T0, T0 + 5)
    rec = meta.to_record()
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(build_batch([(serde.encode_key(rec), serde.encode_value(rec), [], T0)]))
    status, out, err = run(dump_log.main, "--transaction-log-decoder", "--files", str(f))
    assert status == 0, err
    assert 'key: {"type":"0","data":{"transactionalId":"eos-loop"}}' in out
    assert ('"data":{"producerId":1000,"producerEpoch":2,"transactionTimeoutMs":60000,"transactionStatus":1,'
            '"transactionPartitions":[{"topic":"__consumer_offsets","partitionIds":[3]},'
            '{"topic":"out","partitionIds":[0,1]}]') in out
    status, _, err = run(dump_log.main, "--transaction-log-decoder", "--offsets-decoder", "--files", str(f))
    assert status != 0 and "only one of" in err
