"""The on-disk format, both ways (issue 31 item 6), with Apache Kafka 4.3.1 as the reference.

One workload (plain, compressed, idempotent and transactional records with a committed and an aborted
transaction, a consumer group's commit, a compacted topic, a topic rolled into several indexed segments) is
produced once to a kbroker node and once to a Kafka node, each then stopped cleanly. Then:

* Kafka's ``kafka-dump-log`` (``org.apache.kafka.tools.DumpLogSegments``) reads every kind of file each broker
  wrote: segments (deep, with payloads), offset and time indexes (also ``--verify-index-only`` and
  ``--index-sanity-check``), producer snapshots, transaction indexes, ``__consumer_offsets`` and
  ``__transaction_state`` with their decoders, and the ``__cluster_metadata`` log and snapshots with
  ``--cluster-metadata-decoder``: exit 0, no error / corrupt / mismatch line, the records, offsets and markers the
  workload wrote. Kafka's own files are the control; the batch layout of both is compared too.
* a node of the other kind started on a copy of those log directories serves them: every record, read_committed
  hiding the aborted transaction, the group's committed offset, and a new record appended.
* kbroker started on a metadata log holding a record it does not know refuses in one line.

Not marked ``kbroker_only``: every test here starts both brokers itself (``KbrokerProcess`` and ``KafkaProcess``)
and never touches the session broker, so it checks the same thing under either ``--kbroker-target``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.clients import create_topic
from kbroker.testing.kafka import KafkaProcess, run_kafka_tool
from kbroker.testing.plugin import BrokerStartError, KbrokerProcess

pytestmark = pytest.mark.timeout(600)

DUMP = "org.apache.kafka.tools.DumpLogSegments"
#: both brokers snapshot their metadata within the workload (KIP-630 ``.checkpoint`` files to dump and load)
OVERRIDES = {"metadata.log.max.record.bytes.between.snapshots": "4000"}
PLAIN = [f"plain-{i}" for i in range(20)]
CODECS = ("gzip", "snappy", "lz4", "zstd")
COMP = [f"{c}-{i}-" + "x" * 64 for c in CODECS for i in range(5)]
IDEM = [f"idem-{i}" for i in range(10)]
#: txn-0: committed-0..2 (0-2), COMMIT (3), aborted-0..1 (4-5), ABORT (6), committed-3 (7), COMMIT (8)
TXN_COMMITTED = [(0, "committed-0"), (1, "committed-1"), (2, "committed-2"), (7, "committed-3")]
TXN_ALL = TXN_COMMITTED[:3] + [(4, "aborted-0"), (5, "aborted-1"), (7, "committed-3")]
TXN_MARKERS = [(3, "COMMIT"), (6, "ABORT"), (8, "COMMIT")]
#: the transaction coordinator's states for tx-1 (Kafka's TransactionState ids): init; commit; abort; commit
TXN_STATES = [0, 1, 2, 4, 1, 3, 5, 1, 2, 4]
COMPACT = [(f"key{k}", f"v{r}") for r in range(3) for k in range(4)]
ROLLED_ROUNDS, ROLLED_PER_ROUND = 3, 12
ROLLED = [f"rolled-{r}-{i}-" + "y" * 40 for r in range(ROLLED_ROUNDS) for i in range(ROLLED_PER_ROUND)]
GROUP, GROUP_OFFSET = "g1", 15
TOPICS = {"plain": {}, "comp": {}, "idem": {}, "txn": {}, "compact": {"cleanup.policy": "compact"},
          # a new segment per round (segment.ms), an index entry every couple of batches
          "rolled": {"segment.ms": "400", "index.interval.bytes": "150"}}
EXPECTED = {"plain": PLAIN, "comp": COMP, "idem": IDEM, "compact": [v for _, v in COMPACT], "rolled": ROLLED}
BAD_LINE = re.compile(r"error|exception|corrupt|mismatch|fail|invalid|isvalid: false|not valid", re.I)
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
                   r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (-?\d+) isTransactional: (\w+) "
                   r"isControl: (\w+) .* compresscodec: (\w+) crc: \d+ isvalid: (\w+)$", re.M)


# ------------------------------------------------------------------------------------------------ the workload


def _quiet(conf: dict[str, Any]) -> dict[str, Any]:
    return {**conf, "log_level": 3}


def produce_workload(bootstrap: str) -> None:
    for name, configs in TOPICS.items():
        create_topic(bootstrap, name, 1, configs)
    # A long linger and an explicit flush make the batch layout the workload's, not the machine's: flush()
    # sends what is queued at once, and topics are known before the first record (librdkafka moves records
    # queued before metadata one by one, and past their linger each left alone would be a batch of its own).
    lingering = {"bootstrap.servers": bootstrap, "linger.ms": 5000}
    plain = Producer(_quiet({**lingering, "enable.idempotence": False, "acks": "all"}))
    plain.list_topics(timeout=10)
    for i, v in enumerate(PLAIN):
        plain.produce("plain", key=f"k{i}".encode(), value=v.encode(), headers=[("h", b"v")])
        if i % 5 == 4:
            plain.flush(10)
    for codec in CODECS:
        p = Producer(_quiet({**lingering, "compression.type": codec}))
        p.list_topics(timeout=10)
        for v in COMP:
            if v.startswith(codec):
                p.produce("comp", value=v.encode())
        assert p.flush(10) == 0
    idem = Producer(_quiet({**lingering, "enable.idempotence": True}))
    idem.list_topics(timeout=10)
    for v in IDEM:
        idem.produce("idem", value=v.encode())
    assert idem.flush(10) == 0
    txn = Producer(_quiet({**lingering, "transactional.id": "tx-1"}))
    txn.list_topics(timeout=10)
    txn.init_transactions(30)
    for values, commit in (([v for o, v in TXN_COMMITTED[:3]], True), (["aborted-0", "aborted-1"], False),
                           (["committed-3"], True)):
        txn.begin_transaction()
        for v in values:
            txn.produce("txn", value=v.encode())
        txn.flush(10)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    for k, v in COMPACT:
        plain.produce("compact", key=k.encode(), value=v.encode())
        plain.flush(10)
    for r in range(ROLLED_ROUNDS):
        if r:
            time.sleep(0.5)  # past segment.ms: the next batch starts a new segment
        for v in ROLLED[r * ROLLED_PER_ROUND:(r + 1) * ROLLED_PER_ROUND]:
            idem.produce("rolled", value=v.encode())
            idem.flush(10)  # one batch per record: several index entries per segment
    consumer = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                                "auto.offset.reset": "earliest"}))
    consumer.assign([TopicPartition("plain", 0, 0)])
    deadline = time.monotonic() + 30
    got = 0
    while got < GROUP_OFFSET and time.monotonic() < deadline:  # the group's consumer reads, then commits
        m = consumer.poll(0.5)
        got += m is not None and m.error() is None
    while True:  # a coordinator still loading __consumer_offsets answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        try:
            consumer.commit(offsets=[TopicPartition("plain", 0, GROUP_OFFSET)], asynchronous=False)
            break
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    consumer.close()


def read_partition(bootstrap: str, topic: str, isolation: str = "read_committed",
                   timeout: float = 30.0) -> list[tuple[int, str]]:
    """Every record of ``topic``-0 from offset 0 to the end offset the broker reports, as (offset, value)."""
    c = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False}))
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, str]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if c.position([TopicPartition(topic, 0)])[0].offset >= high:
                    break
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.value().decode()))
        return out
    finally:
        c.close()


def wait_served(bootstrap: str, timeout: float = 60.0) -> None:
    """Until every workload topic's partition answers ListOffsets (a leader that serves it)."""
    c = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": "probe"}))
    deadline = time.monotonic() + timeout
    try:
        for topic in TOPICS:
            while True:
                try:
                    c.get_watermark_offsets(TopicPartition(topic, 0), timeout=3)
                    break
                except Exception as exc:  # noqa: BLE001 - not led yet
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{topic}-0 not served after {timeout:.0f} s: {exc}") from None
                    time.sleep(0.2)
    finally:
        c.close()


# ------------------------------------------------------------------------------------------------ fixtures


@dataclass
class Written:
    """Log directories one broker wrote (the workload), the broker stopped cleanly."""

    writer: str
    logs: Path
    facts: dict[str, Any] = field(default_factory=dict)

    def part(self, topic: str, partition: int = 0) -> Path:
        return self.logs / f"{topic}-{partition}"

    def files(self, topic: str, suffix: str, partition: int = 0) -> list[Path]:
        return sorted(self.part(topic, partition).glob(f"*{suffix}"))

    def data_partition(self, topic: str) -> Path:
        """The partition of an internal topic that holds the workload's records."""
        full = [d for d in sorted(self.logs.glob(f"{topic}-*")) if any(f.stat().st_size for f in d.glob("*.log"))]
        assert len(full) == 1, f"{topic}: records in {full}"
        return full[0]


def _broker_class(kind: str) -> type[KbrokerProcess]:
    return KafkaProcess if kind == "kafka" else KbrokerProcess


class Runs:
    """Each broker's run of the workload, made on first use and kept for the module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[str, Written] = {}
        self.failed: dict[str, str] = {}

    def __call__(self, writer: str) -> Written:
        if writer in self.failed:
            pytest.fail(f"the {writer} workload failed in an earlier test: {self.failed[writer]}", pytrace=False)
        if writer not in self.done:
            node = _broker_class(writer)(self.root / f"written-by-{writer}", overrides=OVERRIDES)
            try:
                node.start()
                produce_workload(node.bootstrap)
            except BaseException as exc:
                self.failed[writer] = repr(exc)
                raise
            finally:
                code = node.stop()
            assert code in (0, 143), f"{writer} exit code {code}\n{node.log_tail(40)}"  # 143: the JVM on SIGTERM
            self.done[writer] = Written(writer, node.log_dirs)
        return self.done[writer]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("disk-format"))


def dump(*files: Path, flags: tuple[str, ...] = ()) -> str:
    """kafka-dump-log over ``files``; asserts exit 0 and no error line, returns stdout."""
    r = run_kafka_tool(DUMP, *flags, "--files", ",".join(map(str, files)), timeout=120)
    assert r.returncode == 0, \
        f"kafka-dump-log {' '.join(flags)} exit {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    bad = [line for line in (r.stdout + r.stderr).splitlines() if BAD_LINE.search(line)]
    assert not bad, f"kafka-dump-log {' '.join(flags)} on {[f.name for f in files]}:\n" + "\n".join(bad[:20])
    return r.stdout


def sections(out: str) -> dict[str, str]:
    """kafka-dump-log's output split per file (``Dumping <path>``), keyed by ``<partition dir>/<file name>``."""
    parts: dict[str, str] = {}
    for chunk in re.split(r"^Dumping ", out, flags=re.M)[1:]:
        head, _, body = chunk.partition("\n")
        p = Path(head.strip())
        parts[f"{p.parent.name}/{p.name}"] = body
    return parts


def batches(text: str) -> list[tuple]:
    """(base, last, count, base seq, last seq, transactional, control, codec) per batch line; every batch valid."""
    found = BATCH.findall(text)
    assert all(b[11] == "true" for b in found)
    return [(int(b[0]), int(b[1]), int(b[2]), int(b[3]), int(b[4]), b[8], b[9], b[10]) for b in found]


WRITERS = pytest.mark.parametrize("writer", ["kbroker", "kafka"])


# ------------------------------------------------------------------------------------------------ kafka-dump-log


@WRITERS
def test_dump_log_reads_segments_records_and_markers(runs: Runs, writer: str) -> None:
    w = runs(writer)
    logs = {t: w.files(t, ".log") for t in EXPECTED | {"txn": 0}}
    out = sections(dump(*[f for fs in logs.values() for f in fs], flags=("--print-data-log",)))
    for topic, want in EXPECTED.items():
        text = "".join(out[f"{topic}-0/{f.name}"] for f in logs[topic])
        records = re.findall(r"^\| offset: (\d+) .* payload: (.*)$", text, re.M)
        assert records == [(str(i), v) for i, v in enumerate(want)], topic
        offsets = [(b[0], b[1]) for b in batches(text)]
        assert offsets[0][0] == 0 and all(b[0] == a[1] + 1 for a, b in zip(offsets, offsets[1:])), offsets
    assert "headerKeys: [h] key: k0 payload: plain-0" in out["plain-0/00000000000000000000.log"]
    comp = out["comp-0/00000000000000000000.log"]
    assert {b[7] for b in batches(comp)} == set(CODECS)
    idem = batches(out["idem-0/00000000000000000000.log"])
    assert idem[0][3] == 0 and idem[-1][4] == len(IDEM) - 1  # sequences: an idempotent producer's batches
    txn = out["txn-0/00000000000000000000.log"]
    assert [(int(o), m) for o, m in re.findall(r"^\| offset: (\d+) .* endTxnMarker: (\w+)", txn, re.M)] == TXN_MARKERS
    assert re.findall(r"^\| offset: (\d+) .* payload: (.*)$", txn, re.M) == [(str(o), v) for o, v in TXN_ALL]
    assert all(b[5] == "true" for b in batches(txn))
    assert len(logs["rolled"]) >= 2, f"{writer} did not roll 'rolled': {logs['rolled']}"


@WRITERS
def test_dump_log_reads_and_verifies_offset_and_time_indexes(runs: Runs, writer: str) -> None:
    w = runs(writer)
    indexes = [f for t in EXPECTED for f in w.files(t, ".index") + w.files(t, ".timeindex")]
    out = sections(dump(*indexes))
    rolled = w.files("rolled", ".index")
    entries = [re.findall(r"^offset: (\d+) position: (\d+)$", out[f"rolled-0/{f.name}"], re.M) for f in rolled]
    assert sum(map(len, entries)) >= 3, entries
    times = [re.findall(r"^timestamp: (\d+) offset: (\d+)$", out[f"rolled-0/{f.with_suffix('.timeindex').name}"],
                        re.M) for f in rolled]
    assert all(times[:-1]), times  # every rolled segment keeps its largest timestamp
    for flags in (("--verify-index-only",), ("--index-sanity-check",)):
        text = dump(*indexes, flags=flags)
        assert text.count("Dumping ") == len(indexes)
    sanity = dump(*indexes, flags=("--index-sanity-check",))
    verdicts = re.findall(r"^(\S+) (passed sanity check|is empty)\.$", sanity, re.M)
    assert sorted(Path(f) for f, _ in verdicts) == sorted(indexes), sanity
    assert all(v == "passed sanity check" for f, v in verdicts if "rolled-0" in f), sanity


@WRITERS
def test_dump_log_reads_producer_snapshots_and_transaction_index(runs: Runs, writer: str) -> None:
    w = runs(writer)
    snaps = {t: w.files(t, ".snapshot") for t in ("idem", "txn", "rolled")}
    txnindex = w.files("txn", ".txnindex")
    out = sections(dump(*[f for fs in snaps.values() for f in fs], *txnindex))
    assert snaps["txn"][-1].name == f"{TXN_MARKERS[-1][0] + 1:020d}.snapshot"
    assert re.search(r"^producerId: \d+ producerEpoch: \d+ coordinatorEpoch: \d+ currentTxnFirstOffset: "
                     r"OptionalLong.empty .* firstSequence: 5 lastSequence: 5 lastOffset: 7 ",
                     out[f"txn-0/{snaps['txn'][-1].name}"], re.M)
    assert re.search(rf"^producerId: \d+ .* lastSequence: {len(IDEM) - 1} lastOffset: {len(IDEM) - 1} ",
                     out[f"idem-0/{snaps['idem'][-1].name}"], re.M)
    # a snapshot at every roll of 'rolled' and at shutdown
    assert len(snaps["rolled"]) >= 2 and snaps["rolled"][-1].name == f"{len(ROLLED):020d}.snapshot"
    assert [m for m in re.findall(r"^version: 0 producerId: \d+ firstOffset: (\d+) lastOffset: (\d+) "
                                  r"lastStableOffset: (\d+)$", out[f"txn-0/{txnindex[0].name}"], re.M)] == \
        [("4", "6", "7")]


@WRITERS
def test_dump_log_decodes_consumer_offsets_and_transaction_log(runs: Runs, writer: str) -> None:
    w = runs(writer)
    offsets = dump(*sorted(w.data_partition("__consumer_offsets").glob("*.log")), flags=("--offsets-decoder",))
    commits = [(json.loads(k), json.loads(v)) for k, v in
               re.findall(r"^\| offset: \d+ .* key: (\{.*\}) payload: (\{.*\})$", offsets, re.M)]
    assert [(k["data"], v["data"]["offset"]) for k, v in commits if k["type"] == "1"] == \
        [({"group": GROUP, "topic": "plain", "partition": 0}, GROUP_OFFSET)]
    txn_log = dump(*sorted(w.data_partition("__transaction_state").glob("*.log")), flags=("--transaction-log-decoder",))
    states = [(json.loads(k)["data"]["transactionalId"], json.loads(v)["data"]["transactionStatus"]) for k, v in
              re.findall(r"^\| offset: \d+ .* key: (\{.*\}) payload: (\{.*\})$", txn_log, re.M)]
    assert states == [("tx-1", s) for s in TXN_STATES]


@WRITERS
def test_dump_log_decodes_cluster_metadata_log_and_snapshots(runs: Runs, writer: str) -> None:
    w = runs(writer)
    meta = w.logs / "__cluster_metadata-0"
    checkpoints = sorted(meta.glob("*.checkpoint"))
    assert checkpoints, f"{writer} wrote no metadata snapshot: {sorted(p.name for p in meta.iterdir())}"
    out = sections(dump(*sorted(meta.glob("*.log")), *checkpoints, flags=("--cluster-metadata-decoder",)))
    log_text = "".join(v for k, v in out.items() if k.endswith(".log"))
    names = {json.loads(p)["data"]["name"] for p in
             re.findall(r'payload: (\{"type":"TOPIC_RECORD".*\})$', log_text, re.M)}
    assert set(TOPICS) | {"__consumer_offsets", "__transaction_state"} <= names
    assert re.search(r'"type":"FEATURE_LEVEL_RECORD","version":\d+,"data":\{"name":"metadata.version"', log_text)
    assert "LeaderChange" in log_text
    for cp in checkpoints:
        text = out[f"{meta.name}/{cp.name}"]
        end, epoch = (int(x) for x in cp.stem.split("-"))
        assert text.startswith(f"Snapshot end offset: {end}, epoch: {epoch}"), text[:200]
        assert "SnapshotHeader" in text and "SnapshotFooter" in text
        assert '"type":"FEATURE_LEVEL_RECORD"' in text and '"type":"TOPIC_RECORD"' in text
        assert all(int(b[7]) == epoch for b in BATCH.findall(text))  # partitionLeaderEpoch: the snapshot's


def test_kbroker_and_kafka_lay_out_the_same_batches(runs: Runs) -> None:
    """The same workload gives the same batches in both brokers' segments (offsets, counts, sequences,
    transaction and control flags, codecs) and the same transaction index."""
    def layout(w: Written) -> dict[str, list[tuple]]:
        files = [f for t in ("plain", "comp", "idem", "txn", "compact") for f in w.files(t, ".log")]
        out = sections(dump(*files))
        return {k: batches(v) for k, v in out.items()}

    ours, theirs = layout(runs("kbroker")), layout(runs("kafka"))
    assert ours == theirs
    tx = [dump(*runs(w).files("txn", ".txnindex")).splitlines()[1:] for w in ("kbroker", "kafka")]
    norm = [[re.sub(r"producerId: \d+", "producerId: P", line) for line in t] for t in tx]
    assert norm[0] == norm[1]


# ------------------------------------------------------------------------------------------------ adoption


def _verify_served(bootstrap: str) -> None:
    wait_served(bootstrap)
    for topic, want in EXPECTED.items():
        assert read_partition(bootstrap, topic) == list(enumerate(want)), topic
    assert read_partition(bootstrap, "txn") == TXN_COMMITTED
    assert read_partition(bootstrap, "txn", "read_uncommitted") == TXN_ALL
    admin = AdminClient(_quiet({"bootstrap.servers": bootstrap}))
    [fut] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)]).values()
    assert [(tp.topic, tp.partition, tp.offset) for tp in fut.result(30).topic_partitions] == \
        [("plain", 0, GROUP_OFFSET)]
    p = Producer(_quiet({"bootstrap.servers": bootstrap, "enable.idempotence": True}))
    p.produce("plain", value=b"after-adoption")
    assert p.flush(30) == 0
    assert read_partition(bootstrap, "plain")[-1] == (len(PLAIN), "after-adoption")


@pytest.mark.parametrize("writer,reader", [("kafka", "kbroker"), ("kbroker", "kafka")])
def test_a_node_of_the_other_kind_serves_the_log_directories(runs: Runs, tmp_path: Path, writer: str,
                                                             reader: str) -> None:
    w = runs(writer)
    node = _broker_class(reader)(tmp_path / f"{reader}-on-{writer}")
    shutil.copytree(w.logs, node.log_dirs, symlinks=True)
    served_log_end = 0
    try:
        node.start()
        _verify_served(node.bootstrap)
        served_log_end = node.log_size()
    finally:
        code = node.stop()
    assert code in (0, 143), f"{reader} exit code {code}\n{node.log_tail(40)}"
    log = node.log_text()
    # nothing it met in the other broker's files was worth a warning (until the stop: Kafka warns about its own
    # network clients while it shuts down)
    problems = [line for line in log.encode()[:served_log_end].decode("utf-8", "replace").splitlines()
                if re.search(r"\bWARN(ING)?\b", line) and "Performing controller activation" not in line]
    problems += [line for line in log.splitlines() if re.search(r"\bERROR\b|Traceback", line)]
    assert not problems, "\n".join(problems[:20])


def test_kbroker_refuses_in_one_line_a_metadata_record_it_does_not_know(runs: Runs, tmp_path: Path) -> None:
    from kbroker.protocol.records import build_batch, iter_batches  # noqa: PLC0415

    w = runs("kbroker")
    node = KbrokerProcess(tmp_path / "unknown-record", start_timeout=30)
    shutil.copytree(w.logs, node.log_dirs, symlinks=True)
    seg = sorted((node.log_dirs / "__cluster_metadata-0").glob("*.log"))[-1]
    data = seg.read_bytes()
    last = list(iter_batches(data))[-1]
    value = bytes([1, 99, 0, 0])  # frame 1, record type 99 (none in Kafka 4.3.1), version 0, no tagged fields
    seg.write_bytes(data + build_batch([(None, value)], base_offset=last.last_offset + 1,
                                       partition_leader_epoch=last.partition_leader_epoch))
    with pytest.raises(BrokerStartError):
        node.start()
    node.stop()
    assert node.last_exit_code == 1
    log = node.log_text()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Traceback" not in log, log[-3000:]
    assert f"at offset {last.last_offset + 1}: unknown metadata record type 99" in errors[0]
    assert "__cluster_metadata-0" in errors[0]
