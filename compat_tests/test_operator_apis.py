"""Operator APIs and topic configs from real clients: CreatePartitions, (Incremental)AlterConfigs and
DescribeConfigs with sources, DeleteRecords, ElectLeaders, DescribeLogDirs, partition reassignments;
retention and compaction really happening in the log; the Prometheus endpoint.

Tests on the session broker run against any target (they also pass against Apache Kafka in
testcontainers); those needing broker settings (fast retention checks, a fast log cleaner, the metrics port)
start their own kbroker with ``kbroker_factory`` and are skipped on other targets. Tiny segments come from
Kafka's internal topic key ``internal.segment.bytes`` (``segment.bytes`` has a 1 MiB minimum in 4.x).
"""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest

from compat_tests.clients import admin_client, create_topic, wait_topic_ready
from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(120)


def _name(what: str) -> str:
    return f"compat-op-{what}-{uuid.uuid4().hex[:8]}"


def _eventually(check, timeout: float = 30.0, interval: float = 0.2):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while True:
        ok, detail = check()
        if ok or time.monotonic() > deadline:
            return ok, detail
        time.sleep(interval)


def _producer(bootstrap: str, **extra):  # noqa: ANN202
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **extra})


def _produce(bootstrap: str, topic: str, records, partition: int | None = None, **extra) -> list:  # noqa: ANN001
    """Produce ``(key, value)`` pairs one batch each; returns the delivered messages in order."""
    p = _producer(bootstrap, **extra)
    delivered = []

    def on_delivery(err, msg):  # noqa: ANN001, ANN202
        assert err is None, err
        delivered.append(msg)

    for key, value in records:
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, value, key, on_delivery=on_delivery, **kw)
        p.flush(30)
    assert len(delivered) == len(records)
    return delivered


def _consume_all(bootstrap: str, topic: str, partitions: list[int], expect: int | None = None,
                 timeout: float = 20) -> list:
    """Everything from the beginning of ``partitions`` up to their end offsets (or ``expect`` records)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": _name("g"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out = []
        done = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if expect is not None and len(out) >= expect:
                break
            if expect is None and all(p in done or ends[p] == 0 for p in partitions):
                break
            msg = c.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append(msg)
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return out
    finally:
        c.close()


def _describe(bootstrap: str, rtype, name: str) -> dict:  # noqa: ANN001
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(rtype, name)
    admin = admin_client(bootstrap)  # kept alive until the result is in
    return admin.describe_configs([res])[res].result(30)


# ---- CreatePartitions -------------------------------------------------------------------------------

def test_create_partitions_then_produce_and_consume_on_new_partitions(bootstrap_servers, java_driver):
    from confluent_kafka.admin import NewPartitions

    topic = _name("grow")
    create_topic(bootstrap_servers, topic, 1)
    admin = admin_client(bootstrap_servers)
    admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic].result(30)
    wait_topic_ready(bootstrap_servers, topic, 3)
    with pytest.raises(Exception) as ei:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    assert "would not be an increase" in str(ei.value)

    for p in (1, 2):
        _produce(bootstrap_servers, topic, [(b"py-%d" % p, b"confluent")], partition=p)
    java_driver.run(["produce", "--bootstrap", bootstrap_servers, "--topic", topic, "--count", "9",
                     "--partitions", "3", "--tag", "java"])
    got = _consume_all(bootstrap_servers, topic, [0, 1, 2], expect=11)
    by_partition = {}
    for m in got:
        by_partition.setdefault(m.partition(), []).append(m.offset())
    assert sorted(by_partition) == [0, 1, 2], by_partition
    assert sum(len(v) for v in by_partition.values()) == 11
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))


# ---- configs ----------------------------------------------------------------------------------------

def test_alter_and_incremental_alter_configs_described_with_sources(bootstrap_servers, java_driver, broker_node_id):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

    topic = _name("cfg")
    create_topic(bootstrap_servers, topic, 1)
    admin = admin_client(bootstrap_servers)

    def incremental(rtype, name, *ops, validate_only=False):  # noqa: ANN001, ANN202
        res = ConfigResource(rtype, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
        return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)

    incremental(ResourceType.TOPIC, topic, ("retention.ms", "7200000", AlterConfigOpType.SET),
                ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
                ("max.message.bytes", "200000", AlterConfigOpType.SET))
    cfg = _describe(bootstrap_servers, ResourceType.TOPIC, topic)
    assert cfg["retention.ms"].value == "7200000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [s.name for s in cfg["retention.ms"].synonyms.values()][0] == "retention.ms"
    assert set(cfg["cleanup.policy"].value.split(",")) == {"delete", "compact"}
    assert cfg["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value and not cfg["segment.ms"].is_read_only

    incremental(ResourceType.TOPIC, topic, ("max.message.bytes", None, AlterConfigOpType.DELETE),
                ("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    incremental(ResourceType.TOPIC, topic, ("retention.ms", "1", AlterConfigOpType.SET), validate_only=True)
    java = java_driver.one(java_driver.run(["admin", "describe-configs", "--bootstrap", bootstrap_servers,
                                            "--topic", topic]), "configs")["configs"]
    assert java["retention.ms"] == {"value": "7200000", "source": "DYNAMIC_TOPIC_CONFIG", "read_only": False,
                                    "sensitive": False}
    assert java["max.message.bytes"]["source"] != "DYNAMIC_TOPIC_CONFIG"
    assert java["cleanup.policy"]["value"] == "delete"

    with pytest.raises(Exception) as ei:
        incremental(ResourceType.TOPIC, topic, ("retention.ms", "forever", AlterConfigOpType.SET))
    assert "INVALID_CONFIG" in str(ei.value) or "Invalid value" in str(ei.value)
    with pytest.raises(Exception):
        incremental(ResourceType.TOPIC, topic, ("no.such.config", "1", AlterConfigOpType.SET))

    # the legacy AlterConfigs replaces the whole set
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1048576"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka deprecates the legacy API; brokers still serve it
        admin.alter_configs([legacy])[legacy].result(30)
    cfg = _describe(bootstrap_servers, ResourceType.TOPIC, topic)
    assert cfg["retention.bytes"].value == "1048576"
    assert cfg["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # a dynamic config of this broker (the cluster-wide default, resource name "", is in the Java test below:
    # confluent-kafka refuses an empty broker name)
    node = str(broker_node_id)
    try:
        incremental(ResourceType.BROKER, node, ("log.cleaner.backoff.ms", "14000", AlterConfigOpType.SET))
        # Kafka's broker applies a dynamic config once the metadata reaches it: DescribeConfigs may lag a moment
        bcfg = _describe_until(bootstrap_servers, ResourceType.BROKER, node,
                               lambda c: c["log.cleaner.backoff.ms"].value == "14000")
        assert bcfg["log.cleaner.backoff.ms"].value == "14000"
        assert bcfg["log.cleaner.backoff.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert not bcfg["log.cleaner.backoff.ms"].is_read_only
        with pytest.raises(Exception):  # not a dynamic broker config
            incremental(ResourceType.BROKER, node, ("num.partitions", "5", AlterConfigOpType.SET))
    finally:
        incremental(ResourceType.BROKER, node, ("log.cleaner.backoff.ms", None, AlterConfigOpType.DELETE))
    after = _describe_until(bootstrap_servers, ResourceType.BROKER, node,
                            lambda c: c["log.cleaner.backoff.ms"].source != ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert after["log.cleaner.backoff.ms"].source != ConfigSource.DYNAMIC_BROKER_CONFIG.value


def _describe_until(bootstrap, rtype, name, ok, timeout=10.0):  # noqa: ANN001, ANN202
    """DescribeConfigs until ``ok(configs)`` holds or ``timeout`` passes; the last answer."""
    deadline = time.monotonic() + timeout
    cfg = _describe(bootstrap, rtype, name)
    while not ok(cfg) and time.monotonic() < deadline:
        time.sleep(0.2)
        cfg = _describe(bootstrap, rtype, name)
    return cfg


# ---- DeleteRecords, ElectLeaders, log dirs, reassignments ---------------------------------------------

@pytest.mark.kafka_reference
def test_delete_records_moves_log_start_offset(bootstrap_servers, java_driver):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = _name("delrec")
    create_topic(bootstrap_servers, topic, 1)
    _produce(bootstrap_servers, topic, [(b"k%d" % i, b"v%d" % i) for i in range(20)], partition=0)
    admin = admin_client(bootstrap_servers)
    res = admin.delete_records([TopicPartition(topic, 0, 7)])
    (deleted,) = res.values()
    assert deleted.result(30).low_watermark == 7
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result(30).offset == 7
    java = java_driver.one(java_driver.run(["list-offsets", "--bootstrap", bootstrap_servers, "--topic", topic]),
                           "offsets")["partitions"]["0"]
    assert java["admin"]["earliest"]["offset"] == 7 and java["consumer"]["beginning"] == 7
    got = _consume_all(bootstrap_servers, topic, [0])
    assert [m.offset() for m in got] == list(range(7, 20))
    with pytest.raises(Exception) as ei:  # beyond the high watermark
        next(iter(admin.delete_records([TopicPartition(topic, 0, 21)]).values())).result(30)
    assert "OFFSET_OUT_OF_RANGE" in str(ei.value) or "out of range" in str(ei.value).lower()
    (to_end,) = admin.delete_records([TopicPartition(topic, 0, -1)]).values()  # -1: the high watermark
    assert to_end.result(30).low_watermark == 20


@pytest.mark.kafka_reference
def test_elect_leaders_log_dirs_and_reassignments_on_one_node(bootstrap_servers, broker_node_id):
    from confluent_kafka import ElectionType, TopicPartition
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError

    topic = _name("lead")
    create_topic(bootstrap_servers, topic, 2)
    _produce(bootstrap_servers, topic, [(b"k", b"x" * 200)], partition=1)
    admin = admin_client(bootstrap_servers)
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert [str(e.code()) for e in results.values()] == ["ELECTION_NOT_NEEDED"] or all(
        "ELECTION_NOT_NEEDED" in str(e) for e in results.values()), results

    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30000)
    try:
        dirs = kadmin.describe_log_dirs()
        parts = {(t["name"], p["partition_index"]): p["partition_size"]
                 for b in dirs for d in b["log_dirs"] for t in d["topics"] if t["name"] == topic
                 for p in t["partitions"]}
        assert parts[(topic, 0)] == 0 and parts[(topic, 1)] > 200, parts
        assert kadmin.list_partition_reassignments([KTopicPartition(topic, 0)]) == {}
        missing_broker = broker_node_id + 1000
        res = kadmin.alter_partition_reassignments({KTopicPartition(topic, 0): [missing_broker],
                                                    KTopicPartition(topic, 1): [broker_node_id]})
        assert res[KTopicPartition(topic, 0)] is InvalidReplicationAssignmentError
        assert res[KTopicPartition(topic, 1)] is None
    finally:
        kadmin.close()


JAVA_TOUR = """
// Admin calls the foundation driver does not make, run with `java -cp 'jars/*' OperatorTour.java` (JEP 330).
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;

public class OperatorTour {
    static String q(Object o) { return o == null ? "null" : "\\"" + o.toString().replace("\\"", "'") + "\\""; }
    static String err(Throwable t) {
        while (t.getCause() != null && !(t instanceof org.apache.kafka.common.errors.ApiException)) t = t.getCause();
        return t.getClass().getSimpleName();
    }
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        int node = Integer.parseInt(a[2]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("default.api.timeout.ms", "30000");
        try (Admin admin = Admin.create(p)) {
            ConfigResource def = new ConfigResource(ConfigResource.Type.BROKER, "");
            ConfigResource me = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node));
            String key = "log.cleaner.io.buffer.load.factor";
            admin.incrementalAlterConfigs(Map.of(def, List.of(new AlterConfigOp(new ConfigEntry(key, "0.8"),
                AlterConfigOp.OpType.SET)))).all().get();
            ConfigEntry d = admin.describeConfigs(List.of(def)).all().get().get(def).get(key);
            ConfigEntry m = admin.describeConfigs(List.of(me)).all().get().get(me).get(key);
            System.out.println("{\\"event\\":\\"default_config\\",\\"value\\":" + q(d.value()) + ",\\"source\\":" + q(d.source())
                + ",\\"broker_value\\":" + q(m.value()) + ",\\"broker_source\\":" + q(m.source()) + "}");
            admin.incrementalAlterConfigs(Map.of(def, List.of(new AlterConfigOp(new ConfigEntry(key, null),
                AlterConfigOp.OpType.DELETE)))).all().get();
            ConfigEntry after = admin.describeConfigs(List.of(me)).all().get().get(me).get(key);
            System.out.println("{\\"event\\":\\"default_deleted\\",\\"broker_source\\":" + q(after.source()) + "}");

            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(node)).allDescriptions().get();
            StringBuilder sb = new StringBuilder();
            for (LogDirDescription dd : dirs.get(node).values())
                for (Map.Entry<TopicPartition, ReplicaInfo> e : dd.replicaInfos().entrySet())
                    if (e.getKey().topic().equals(topic))
                        sb.append(sb.length() == 0 ? "" : ",").append(q(e.getKey().partition())).append(":").append(e.getValue().size());
            System.out.println("{\\"event\\":\\"log_dirs\\",\\"sizes\\":{" + sb + "}}");

            String elect;
            try {
                admin.electLeaders(ElectionType.PREFERRED, Set.of(new TopicPartition(topic, 0))).all().get();
                elect = "none";
            } catch (Exception e) { elect = err(e); }
            System.out.println("{\\"event\\":\\"elect\\",\\"error\\":" + q(elect) + "}");

            int ongoing = admin.listPartitionReassignments().reassignments().get().size();
            String reassign;
            try {
                admin.alterPartitionReassignments(Map.of(new TopicPartition(topic, 0),
                    Optional.of(new NewPartitionReassignment(List.of(node + 1000))))).all().get();
                reassign = "none";
            } catch (Exception e) { reassign = err(e); }
            System.out.println("{\\"event\\":\\"reassign\\",\\"ongoing\\":" + ongoing + ",\\"error\\":" + q(reassign) + "}");
        }
    }
}
"""


def _java_tour(java_driver, tmp_path, bootstrap: str, topic: str, node: int) -> dict[str, dict]:  # noqa: ANN001
    """Run the embedded Java Admin program (single-file source launch) and index its JSON events."""
    import json
    import subprocess

    from compat_tests.clients import JARS_DIR

    src = tmp_path / "OperatorTour.java"
    src.write_text(JAVA_TOUR)
    r = subprocess.run([java_driver.java, "-cp", str(JARS_DIR / "*"), str(src), bootstrap, topic, str(node)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"OperatorTour exited {r.returncode}: {r.stderr[-3000:]}"
    return {e["event"]: e for e in (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))}


def test_java_admin_broker_defaults_log_dirs_elections_and_reassignments(bootstrap_servers, java_driver,
                                                                        broker_node_id, tmp_path):
    topic = _name("javaop")
    create_topic(bootstrap_servers, topic, 2)
    _produce(bootstrap_servers, topic, [(b"k", b"x" * 300)], partition=1)
    ev = _java_tour(java_driver, tmp_path, bootstrap_servers, topic, broker_node_id)
    assert ev["default_config"] == {"event": "default_config", "value": "0.8",
                                    "source": "DYNAMIC_DEFAULT_BROKER_CONFIG", "broker_value": "0.8",
                                    "broker_source": "DYNAMIC_DEFAULT_BROKER_CONFIG"}
    assert ev["default_deleted"]["broker_source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
    sizes = ev["log_dirs"]["sizes"]
    assert sizes["0"] == 0 and sizes["1"] > 300, sizes
    assert ev["elect"]["error"] == "ElectionNotNeededException"
    assert ev["reassign"] == {"event": "reassign", "ongoing": 0, "error": "InvalidReplicaAssignmentException"}


# ---- retention and compaction in the log (own broker) ------------------------------------------------

def test_retention_by_time_and_size(kbroker_factory):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    broker = kbroker_factory({"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"})
    bs = broker.bootstrap
    by_time, by_size = _name("rtime"), _name("rsize")
    create_topic(bs, by_time, 1, {"retention.ms": "1000", "internal.segment.bytes": "1024"})
    create_topic(bs, by_size, 1, {"retention.bytes": "3000", "internal.segment.bytes": "1024"})
    for topic in (by_time, by_size):
        _produce(bs, topic, [(b"k%d" % i, b"x" * 150) for i in range(30)], partition=0)
    admin = admin_client(bs)

    def earliest(topic: str) -> int:
        res = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
        return next(iter(res.values())).result(30).offset

    # size: old segments go as soon as the log is over 3000 bytes; the active segment always stays
    ok, first = _eventually(lambda: ((e := earliest(by_size)) > 0, e))
    assert ok and first < 30
    kept = _consume_all(bs, by_size, [0])
    assert [m.offset() for m in kept] == list(range(first, 30))
    assert sum(len(m.value()) + 70 for m in kept) < 3000 + 1500

    # time: once retention.ms has passed every closed segment goes
    time.sleep(1.2)
    _produce(bs, by_time, [(b"late", b"y")], partition=0)
    ok, first = _eventually(lambda: ((e := earliest(by_time)) >= 28, e))
    assert ok, f"earliest offset still {first}"
    assert [m.offset() for m in _consume_all(bs, by_time, [0])][-1] == 30


def test_compacted_topic_keeps_latest_value_per_key_at_original_offsets(kbroker_factory, java_driver):
    broker = kbroker_factory({"log.cleaner.backoff.ms": "100"})
    bs = broker.bootstrap
    topic = _name("compact")
    create_topic(bs, topic, 1, {"cleanup.policy": "compact", "internal.segment.bytes": "2048",
                                "min.cleanable.dirty.ratio": "0.01", "segment.ms": "500",
                                "delete.retention.ms": "300"})
    records = [(b"key-%02d" % (i % 15), b"value-%03d" % i) for i in range(150)]
    records += [(b"key-%02d" % k, None) for k in (3, 7)]  # tombstones
    records.append((b"key-00", b"last-from-the-idempotent-producer"))
    delivered = _produce(bs, topic, records, partition=0, **{"enable.idempotence": True})
    # another producer supersedes the idempotent producer's last record: the cleaner keeps that batch,
    # empty, for the producer's sequence numbers, and consumers must step over it
    delivered += _produce(bs, topic, [(b"key-00", b"final")], partition=0)
    latest = {m.key(): (m.offset(), m.value()) for m in delivered}
    time.sleep(0.6)  # past segment.ms: the next append rolls, so every test record sits in closed segments
    sentinel = _produce(bs, topic, [(b"sentinel", b"1")], partition=0)[0].offset()

    def compacted() -> tuple[bool, object]:
        got = [(m.key(), m.offset(), m.value()) for m in _consume_all(bs, topic, [0])]
        return sum(1 for k, _, _ in got if k != b"sentinel") == len(latest), got

    ok, got = _eventually(compacted, timeout=30)
    assert ok, f"not compacted: {len(got)} records"
    kept = {k: (o, v) for k, o, v in got if k != b"sentinel"}
    assert kept == latest  # one record per key: the latest value, at the offset it was written to
    assert [o for _, o, _ in got] == sorted(o for _, o, _ in got)
    assert (b"sentinel", sentinel, b"1") in got
    from compat_tests import wire

    batches, _ = wire.read_log(bs, topic, 0)
    idem_last = delivered[-2].offset()
    assert [(b.count, b.crc_ok) for b in batches if b.base_offset <= idem_last <= b.last_offset] == [(0, True)]

    java = java_driver.run(["consume", "--bootstrap", bs, "--topic", topic, "--expect", str(len(got)),
                            "--timeout-ms", "20000"])
    java_offsets = sorted(e["offset"] for e in java if e.get("event") == "record")
    assert java_offsets == sorted(o for _, o, _ in got)

    # after delete.retention.ms a later cleaning drops the tombstones
    time.sleep(0.4)
    _produce(bs, topic, [(b"more", b"1")], partition=0)
    time.sleep(0.6)
    _produce(bs, topic, [(b"sentinel", b"2")], partition=0)

    def tombstones_gone() -> tuple[bool, object]:
        keys = [m.key() for m in _consume_all(bs, topic, [0])]
        return b"key-03" not in keys and b"key-07" not in keys, keys

    ok, keys = _eventually(tombstones_gone, timeout=30)
    assert ok, keys
    assert b"key-05" in keys


# ---- metrics ----------------------------------------------------------------------------------------

def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.kbroker_only("kbroker's metrics.port Prometheus endpoint")
def test_metrics_counters_move_with_produce_and_consume(kbroker_factory):
    port = free_port()
    broker = kbroker_factory({"metrics.port": str(port), "metrics.host": "127.0.0.1"})
    topic = _name("metrics")
    create_topic(broker.bootstrap, topic, 1)
    label = (("topic", topic),)
    before = _scrape(port)
    assert before.get(("kafka_server_brokertopicmetrics_messagesin_total", label), 0) == 0
    _produce(broker.bootstrap, topic, [(b"k%d" % i, b"v" * 100) for i in range(10)], partition=0)
    mid = _scrape(port)
    assert mid[("kafka_server_brokertopicmetrics_messagesin_total", label)] == 10
    assert mid[("kafka_server_brokertopicmetrics_bytesin_total", label)] > 1000
    assert mid[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", topic)))] == 10
    assert len(_consume_all(broker.bootstrap, topic, [0])) == 10
    after = _scrape(port)
    assert after[("kafka_server_brokertopicmetrics_bytesout_total", label)] > 1000
    produce = [v for (n, lab), v in after.items()
               if n == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in lab]
    fetch = [v for (n, lab), v in after.items()
             if n == "kafka_network_requestmetrics_requests_total" and ("request", "Fetch") in lab]
    assert sum(produce) >= 10 and sum(fetch) >= 1
    assert after[("kafka_server_replicamanager_partitioncount", ())] >= 1
    assert after[("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))] >= 0
