"""The kbroker-* operator tools run as a user runs them (subprocesses), checked with a real client.

Each test drives one tool against the session broker and verifies the effect with confluent-kafka: topics
created/altered/deleted, configs changed, records produced and consumed, group offsets reset, the log start
offset moved by delete-records, DescribeQuorum answered. ``kbroker-dump-log`` reads the session broker's own
segment files (kbroker target only) and must show every batch; ``kbroker-storage format`` prepares the data
directory of a fresh broker, which then starts with that cluster id.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, OffsetSpec, ResourceType

from compat_tests.clients import admin_client, wait_topic_ready
from compat_tests.conftest import unique
from kbroker.testing.plugin import HARNESS_TARGETS

BIN = Path(sys.executable).parent
MODULES = {"kbroker-topics": "topics", "kbroker-configs": "configs", "kbroker-consumer-groups": "consumer_groups",
           "kbroker-console-producer": "console_producer", "kbroker-console-consumer": "console_consumer",
           "kbroker-producer-perf-test": "producer_perf", "kbroker-consumer-perf-test": "consumer_perf",
           "kbroker-delete-records": "delete_records", "kbroker-dump-log": "dump_log", "kbroker-storage": "storage",
           "kbroker-metadata-quorum": "metadata_quorum"}


def cli(tool: str, *args: Any, input: str | None = None, ok: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``tool`` (the installed console script, else ``python -m kbroker.cli.<module>``)."""
    script = BIN / tool
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", f"kbroker.cli.{MODULES[tool]}"]
    env = {**os.environ, "KBROKER_CLI_TIMEOUT_S": "10"}
    proc = subprocess.run(cmd + [str(a) for a in args], input=input, capture_output=True, text=True, timeout=timeout,
                          env=env)
    if ok:
        assert proc.returncode == 0, f"{tool} {' '.join(map(str, args))} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]], partition: int = 0,
            conf: dict[str, Any] | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(conf or {})})
    for k, v in records:
        p.produce(topic, key=k, value=v, partition=partition)
    assert p.flush(30) == 0


def offsets(bootstrap: str, topic: str, partitions: int, spec: Any) -> list[int]:
    admin = admin_client(bootstrap)
    fut = admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)}, request_timeout=10)
    return [fut[TopicPartition(topic, p)].result(10).offset for p in range(partitions)]


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = admin_client(bootstrap)
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def commit_offsets(bootstrap: str, group: str, topic: str, values: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in values.items()], asynchronous=False)
    finally:
        c.close()


# ------------------------------------------------------------------------------------------ kbroker-topics


def test_topics_create_describe_alter_list_delete(bootstrap_servers):
    topic = unique("cli-topics")
    out = cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--create", "--topic", topic,
              "--partitions", 2, "--replication-factor", 1, "--config", "retention.ms=123456",
              "--config", "cleanup.policy=compact").stdout
    assert out.strip() == f"Created topic {topic}."
    wait_topic_ready(bootstrap_servers, topic, 2)
    admin = admin_client(bootstrap_servers)
    cfg = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = next(iter(cfg.values())).result(10)
    assert entries["retention.ms"].value == "123456" and entries["cleanup.policy"].value == "compact"

    again = cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--create", "--topic", topic, ok=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--create", "--topic", topic, "--if-not-exists")

    desc = cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--describe", "--topic", topic).stdout
    lines = desc.splitlines()
    assert re.fullmatch(rf"Topic: {topic}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 2\tReplicationFactor: 1\t"
                        r"Configs: cleanup.policy=compact,min.insync.replicas=1,retention.ms=123456", lines[0]), desc
    assert len(lines) == 3
    for p, line in enumerate(lines[1:]):
        assert re.fullmatch(rf"\tTopic: {topic}\tPartition: {p}\tLeader: \d+\tReplicas: \d+\tIsr: \d+"
                            r"\tElr: (N/A)?\tLastKnownElr: (N/A)?", line), line

    cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--alter", "--topic", topic, "--partitions", 4)
    wait_topic_ready(bootstrap_servers, topic, 4)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4

    listed = cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--list").stdout.split()
    assert topic in listed and listed == sorted(listed)

    cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--delete", "--topic", topic)
    deadline = time.monotonic() + 15
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in admin.list_topics(timeout=10).topics
    gone = cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--delete", "--topic", topic, ok=False)
    assert gone.returncode == 1 and f"Topic '{topic}' does not exist as expected" in gone.stderr
    cli("kbroker-topics", "--bootstrap-server", bootstrap_servers, "--delete", "--topic", topic, "--if-exists")


# ------------------------------------------------------------------------------------------ kbroker-configs


def test_configs_alter_and_describe_topic_and_broker_defaults(bootstrap_servers, topic_factory):
    topic = topic_factory(partitions=1)
    base = ("--bootstrap-server", bootstrap_servers, "--entity-type", "topics", "--entity-name", topic)
    out = cli("kbroker-configs", *base, "--alter", "--add-config",
              "retention.ms=60000,cleanup.policy=[compact,delete],max.message.bytes=200000").stdout
    assert out.strip() == f"Completed updating config for topic {topic}."
    admin = admin_client(bootstrap_servers)

    def topic_config() -> dict[str, Any]:
        return next(iter(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())).result(10)

    cfg = topic_config()
    assert cfg["retention.ms"].value == "60000" and cfg["cleanup.policy"].value == "compact,delete"
    desc = cli("kbroker-configs", *base, "--describe").stdout.splitlines()
    assert desc[0] == f"Dynamic configs for topic {topic} are:"
    assert "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=" \
           "compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}" in desc
    assert any(ln.startswith("  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000")
               for ln in desc)
    assert len(desc) == 4
    everything = cli("kbroker-configs", *base, "--describe", "--all").stdout.splitlines()
    assert everything[0] == f"All configs for topic {topic} are:" and len(everything) > 10

    cli("kbroker-configs", *base, "--alter", "--delete-config", "retention.ms,max.message.bytes")
    cfg = topic_config()
    assert cfg["retention.ms"].is_default and cfg["max.message.bytes"].is_default
    assert cfg["cleanup.policy"].value == "compact,delete"
    bad = cli("kbroker-configs", *base, "--alter", "--delete-config", "retention.ms", ok=False)
    assert bad.returncode == 1 and "Invalid config(s): retention.ms" in bad.stderr
    bad = cli("kbroker-configs", *base, "--alter", "--add-config", "retention.ms=abc", ok=False)
    assert bad.returncode == 1 and "Error while executing config command" in bad.stderr

    # cluster-wide broker default: set, see, remove (the session broker is shared: leave nothing behind)
    defaults = ("--bootstrap-server", bootstrap_servers, "--entity-type", "brokers", "--entity-default")
    out = cli("kbroker-configs", *defaults, "--alter", "--add-config", "log.cleaner.delete.retention.ms=3600001").stdout
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    try:
        desc = cli("kbroker-configs", *defaults, "--describe").stdout.splitlines()
        assert desc[0] == "Default configs for brokers in the cluster are:"
        assert ("  log.cleaner.delete.retention.ms=3600001 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
                "log.cleaner.delete.retention.ms=3600001}") in desc
    finally:
        cli("kbroker-configs", *defaults, "--alter", "--delete-config", "log.cleaner.delete.retention.ms")
    desc = cli("kbroker-configs", *defaults, "--describe").stdout
    assert "log.cleaner.delete.retention.ms" not in desc
    brokers = cli("kbroker-configs", "--bootstrap-server", bootstrap_servers, "--entity-type", "brokers",
                  "--describe").stdout
    assert re.search(r"^Dynamic configs for broker \d+ are:$", brokers, re.M)
    assert "Default configs for brokers in the cluster are:" in brokers


# ------------------------------------------------------------------------------------------ console tools


def test_console_producer_and_consumer(bootstrap_servers, topic_factory):
    topic = topic_factory(partitions=1)
    lines = "".join(f"key{i}:value {i}\n" for i in range(5))
    cli("kbroker-console-producer", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--property",
        "parse.key=true", "--property", "key.separator=:", "--compression-codec", "lz4", input=lines)
    cli("kbroker-console-producer", "--bootstrap-server", bootstrap_servers, "--topic", topic,
        "--producer-property", "acks=1", input="plain\n")

    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": unique("check"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.key(), m.value()))
    c.close()
    assert got == [(f"key{i}".encode(), f"value {i}".encode()) for i in range(5)] + [(None, b"plain")]

    out = cli("kbroker-console-consumer", "--bootstrap-server", bootstrap_servers, "--topic", topic,
              "--from-beginning", "--max-messages", 6, "--property", "print.key=true", "--property",
              "print.offset=true", "--property", "print.partition=true", "--property", "key.separator=|",
              "--timeout-ms", 15000)
    assert out.stdout.splitlines() == [f"Partition:0|Offset:{i}|key{i}|value {i}" for i in range(5)] + [
        "Partition:0|Offset:5|null|plain"]
    assert "Processed a total of 6 messages" in out.stderr

    out = cli("kbroker-console-consumer", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--partition", 0,
              "--offset", 3, "--max-messages", 2, "--property", "print.timestamp=true", "--timeout-ms", 15000)
    assert re.fullmatch(r"CreateTime:\d+\tvalue 3\nCreateTime:\d+\tvalue 4\n", out.stdout), out.stdout

    group = unique("console-group")
    cli("kbroker-console-consumer", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--group", group,
        "--from-beginning", "--max-messages", 4, "--timeout-ms", 20000)
    assert committed(bootstrap_servers, group) == {(topic, 0): 4}

    empty = cli("kbroker-console-consumer", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--partition",
                0, "--timeout-ms", 1000)
    assert empty.stdout == "" and "Processed a total of 0 messages" in empty.stderr

    bad = cli("kbroker-console-producer", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--property",
              "parse.key=true", input="no separator here\n", ok=False)
    assert bad.returncode == 1 and "No key separator found on line number 1" in bad.stderr


# ------------------------------------------------------------------------------------------ consumer groups


def test_consumer_groups_describe_reset_delete(bootstrap_servers, topic_factory):
    topic = topic_factory(partitions=2)
    for p in range(2):
        produce(bootstrap_servers, topic, [(None, b"v%d" % i) for i in range(10)], partition=p)
    group = unique("cli-group")
    commit_offsets(bootstrap_servers, group, topic, {0: 3, 1: 10})
    base = ("--bootstrap-server", bootstrap_servers)

    assert group in cli("kbroker-consumer-groups", *base, "--list").stdout.split()
    state = cli("kbroker-consumer-groups", *base, "--list", "--state", "Empty").stdout.splitlines()
    assert state[0].split() == ["GROUP", "STATE"] and [group, "Empty"] in [ln.split() for ln in state]

    out = cli("kbroker-consumer-groups", *base, "--describe", "--group", group)
    lines = out.stdout.splitlines()
    assert lines[0] == "" and lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                                    "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[1].startswith("GROUP ") and lines[1].index("TOPIC") >= 16
    assert [ln.split() for ln in lines[2:]] == [[group, topic, "0", "3", "10", "7", "-", "-", "-"],
                                                [group, topic, "1", "10", "10", "0", "-", "-", "-"]]
    assert f"Consumer group '{group}' has no active members." in out.stderr

    # a live member: Stable, with its consumer id and client id in the rows
    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "client.id": "cli-test-client",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment()
        live = cli("kbroker-consumer-groups", *base, "--describe", "--group", group).stdout.splitlines()
        rows = [ln.split() for ln in live[2:]]
        assert {r[2] for r in rows} == {"0", "1"} and all(r[8] == "cli-test-client" and r[6] != "-" for r in rows)
        members = cli("kbroker-consumer-groups", *base, "--describe", "--group", group, "--members").stdout.splitlines()
        assert members[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert members[2].split()[-2:] == ["cli-test-client", "2"]
        st = cli("kbroker-consumer-groups", *base, "--describe", "--group", group, "--state").stdout.splitlines()
        assert st[1].split()[:3] == ["GROUP", "COORDINATOR", "(ID)"]
        assert st[2].split()[0] == group and st[2].split()[-2:] == ["Stable", "1"]
        refused = cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic,
                      "--to-earliest", "--execute", ok=False)
        assert "can only be reset if the group" in refused.stdout and refused.returncode == 1
    finally:
        c.close()
    deadline = time.monotonic() + 20
    while "Empty" not in cli("kbroker-consumer-groups", *base, "--describe", "--group", group, "--state").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.3)

    dry = cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic,
              "--to-earliest", "--dry-run").stdout.splitlines()
    assert dry[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [ln.split() for ln in dry[2:]] == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert committed(bootstrap_servers, group) == {(topic, 0): 3, (topic, 1): 10}  # dry run changed nothing

    cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
        "--execute")
    assert committed(bootstrap_servers, group) == {(topic, 0): 0, (topic, 1): 0}
    cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", 4,
        "--execute")
    assert committed(bootstrap_servers, group) == {(topic, 0): 4, (topic, 1): 4}
    cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset",
        99, "--execute")  # clamped to the log end
    assert committed(bootstrap_servers, group) == {(topic, 0): 4, (topic, 1): 10}
    cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest",
        "--execute")
    assert committed(bootstrap_servers, group) == {(topic, 0): 10, (topic, 1): 10}
    cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
        "2000-01-01T00:00:00.000", "--execute")
    assert committed(bootstrap_servers, group) == {(topic, 0): 0, (topic, 1): 0}
    export = cli("kbroker-consumer-groups", *base, "--reset-offsets", "--group", group, "--topic", topic,
                 "--by-duration", "PT1M", "--dry-run", "--export").stdout.split()
    assert export == [f"{topic},0,0", f"{topic},1,0"]

    out = cli("kbroker-consumer-groups", *base, "--delete-offsets", "--group", group, "--topic", f"{topic}:1").stdout
    assert f"Request succeeded for deleting offsets from group {group}." in out
    assert [topic, "1", "Successful"] in [ln.split() for ln in out.splitlines()]
    assert committed(bootstrap_servers, group) == {(topic, 0): 0}

    out = cli("kbroker-consumer-groups", *base, "--delete", "--group", group).stdout
    assert out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in cli("kbroker-consumer-groups", *base, "--list").stdout.split()
    missing = cli("kbroker-consumer-groups", *base, "--describe", "--group", group, ok=False)
    assert missing.returncode == 1 and "does not exist" in missing.stdout


# ------------------------------------------------------------------------------------------ perf tests


def test_producer_and_consumer_perf_tests(bootstrap_servers, topic_factory):
    topic = topic_factory(partitions=2)
    out = cli("kbroker-producer-perf-test", "--topic", topic, "--num-records", 3000, "--record-size", 200,
              "--throughput", 2000, "--reporting-interval", 500, "--producer-props",
              f"bootstrap.servers={bootstrap_servers}", "acks=1", "linger.ms=5").stdout.splitlines()
    progress = r"\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, \d+\.\d ms max latency\."
    assert out[:-1] and all(re.fullmatch(progress, ln) for ln in out[:-1]), out
    assert re.fullmatch(r"3000 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
                        r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.", out[-1])
    assert sum(offsets(bootstrap_servers, topic, 2, OffsetSpec.latest())) == 3000

    out = cli("kbroker-consumer-perf-test", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--messages",
              3000, "--timeout", 20000).stdout.splitlines()
    assert out[0] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                      "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    fields = out[1].split(", ")
    assert len(fields) == 10 and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields[0])
    assert fields[4] == "3000" and abs(float(fields[2]) - 3000 * 200 / 1048576) < 1e-3

    # detailed stats: one row per reporting interval in which records arrived, times never negative
    out = cli("kbroker-consumer-perf-test", "--bootstrap-server", bootstrap_servers, "--topic", topic, "--messages",
              3000, "--timeout", 20000, "--show-detailed-stats", "--reporting-interval", 1, "--fetch-size", 20000,
              "--group", f"perf-detailed-{topic}").stdout.splitlines()
    assert out[0].startswith("time, threadId, data.consumed.in.MB")
    rows = [ln.split(", ") for ln in out[1:]]
    assert rows, out
    for row in rows:
        assert len(row) == 10 and row[1] == "0"
        assert int(row[4]) > 0 and float(row[6]) >= 0 and float(row[7]) >= 0, row
    assert sum(int(r[4]) for r in rows) <= 3000


# ------------------------------------------------------------------------------------------ delete-records


def test_delete_records_moves_the_log_start_offset(bootstrap_servers, topic_factory, tmp_path):
    topic = topic_factory(partitions=2)
    for p in range(2):
        produce(bootstrap_servers, topic, [(None, b"r%d" % i) for i in range(10)], partition=p)
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 4},
                                               {"topic": topic, "partition": 1, "offset": -1}], "version": 1}))
    out = cli("kbroker-delete-records", "--bootstrap-server", bootstrap_servers, "--offset-json-file", plan).stdout
    assert out.splitlines()[:2] == ["Executing records delete operation", "Records delete operation completed:"]
    assert sorted(out.splitlines()[2:]) == [f"partition: {topic}-0\tlow_watermark: 4",
                                            f"partition: {topic}-1\tlow_watermark: 10"]
    assert offsets(bootstrap_servers, topic, 2, OffsetSpec.earliest()) == [4, 10]
    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": unique("dr"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    first = None
    deadline = time.monotonic() + 15
    while first is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            first = m.offset()
    c.close()
    assert first == 4

    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 99}], "version": 1}))
    bad = cli("kbroker-delete-records", "--bootstrap-server", bootstrap_servers, "--offset-json-file", plan, ok=False)
    assert bad.returncode == 1 and f"partition: {topic}-0\terror: " in bad.stdout


# ------------------------------------------------------------------------------------------ metadata quorum


def test_metadata_quorum_describe(bootstrap_servers, kafka_broker):
    out = cli("kbroker-metadata-quorum", "--bootstrap-server", bootstrap_servers, "describe", "--status").stdout
    lines = out.splitlines()
    names = [ln.split(":", 1)[0] for ln in lines]
    assert names == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                     "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    values = {ln.split(":", 1)[0]: ln[24:] for ln in lines}
    assert all(ln[:24].endswith(" ") for ln in lines)
    admin = admin_client(bootstrap_servers)  # kept alive until the future resolves
    cluster = admin.describe_cluster().result(10)
    assert values["ClusterId"] == cluster.cluster_id
    assert int(values["HighWatermark"]) > 0 and int(values["LeaderEpoch"]) >= 1
    assert values["MaxFollowerLag"] == "0"
    if kafka_broker.target in HARNESS_TARGETS:
        assert values["LeaderId"] == str(kafka_broker.node_id)
    if kafka_broker.target == "kbroker":  # a static voter: no directory id (Kafka's has a CONTROLLER endpoint)
        assert re.fullmatch(rf'\[\{{"id": {kafka_broker.node_id}, '
                            r'"endpoints": \[.*\]\}\]', values["CurrentVoters"]), values["CurrentVoters"]
        assert values["CurrentObservers"] == "[]" and values["MaxFollowerLagTimeMs"] == "0"
    rep = cli("kbroker-metadata-quorum", "--bootstrap-server", bootstrap_servers, "describe", "--replication").stdout
    assert rep.splitlines()[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                           "LastCaughtUpTimestamp", "Status"]
    assert rep.splitlines()[1].split()[-1] == "Leader"


@pytest.mark.kbroker_only("kbroker's single node names no CONTROLLER endpoint for its voter, Kafka's static voter "
                          "one (compat_tests/differential_allowed.json)")
@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_versions(bootstrap_servers, kafka_broker, version):
    """The DescribeQuorum handler at each version, straight through the codec."""
    from kbroker.cli._wire import WireClient
    from kbroker.protocol.messages import DescribeQuorumRequest as Req

    with WireClient(bootstrap_servers) as wire:
        req = Req(topics=[Req.TopicData(topic_name="__cluster_metadata", partitions=[Req.PartitionData(0)]),
                          Req.TopicData(topic_name="other", partitions=[Req.PartitionData(0)])])
        resp = wire.send(req, version)
    assert resp.error_code == 0
    meta, other = resp.topics
    p = meta.partitions[0]
    assert p.error_code == 0 and p.leader_id == kafka_broker.node_id and p.high_watermark > 0
    assert [v.replica_id for v in p.current_voters] == [kafka_broker.node_id] and p.observers == []
    assert p.current_voters[0].log_end_offset == p.high_watermark
    if version >= 1:
        assert p.current_voters[0].last_caught_up_timestamp > 0
    if version >= 2:
        assert p.current_voters[0].replica_directory_id == bytes(16)  # a static quorum's voter, as Kafka's
        assert [n.node_id for n in resp.nodes] == [kafka_broker.node_id]
    assert other.partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------------------------------------ offline tools


def _partition_dirs(kafka_broker: Any, topic: str) -> list[Path]:
    root = getattr(kafka_broker, "log_dirs", None)
    if kafka_broker.target not in HARNESS_TARGETS or root is None:
        pytest.skip("reads the session broker's data directory (kbroker's or the reference Kafka's)")
    return sorted(Path(root).glob(f"{topic}-*"))


def test_dump_log_shows_every_batch_of_kbrokers_segments(bootstrap_servers, kafka_broker, topic_factory):
    from kbroker.protocol.records import iter_batches

    topic = topic_factory(partitions=1, configs={"segment.bytes": "1048576"})
    value = b"x" * 1000
    produce(bootstrap_servers, topic, [(b"k%d" % i, value) for i in range(1300)],
            conf={"enable.idempotence": True, "linger.ms": 2, "batch.size": 20000})
    produce(bootstrap_servers, topic, [(b"g%d" % i, b"gz" * 10) for i in range(50)],
            conf={"compression.type": "gzip"})
    end = offsets(bootstrap_servers, topic, 1, OffsetSpec.latest())[0]
    assert end == 1350
    (pdir,) = _partition_dirs(kafka_broker, topic)
    logs = sorted(pdir.glob("*.log"))
    assert len(logs) >= 2, "1.3 MB with segment.bytes=1 MiB rolls a segment"
    out = cli("kbroker-dump-log", "--files", ",".join(map(str, logs))).stdout
    dumped = [tuple(map(int, m)) for m in re.findall(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* "
                                                    r"position: (\d+) CreateTime: \d+ size: (\d+) magic: 2 "
                                                    r"compresscodec: \w+ crc: \d+ isvalid: true$", out, re.M)]
    on_disk = [(b.base_offset, b.last_offset, b.records_count, b.position, b.size)
               for f in logs for b in iter_batches(f.read_bytes())]
    assert dumped == on_disk and dumped
    assert dumped[0][0] == 0 and dumped[-1][1] == end - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(dumped, dumped[1:]))
    assert "compresscodec: gzip" in out and "invalid bytes" not in out
    deep = cli("kbroker-dump-log", "--files", str(logs[-1]), "--print-data-log").stdout
    assert re.search(r"^\| offset: 1349 CreateTime: \d+ keySize: 3 valueSize: 20 sequence: -?\d+ headerKeys: \[\] "
                     r"key: g49 payload: (gz){10}$", deep, re.M), deep[-500:]
    idx = cli("kbroker-dump-log", "--files", f"{logs[0].with_suffix('.index')},{logs[0].with_suffix('.timeindex')}")
    assert re.search(r"^offset: \d+ position: \d+$", idx.stdout, re.M) and "Mismatches" not in idx.stderr
    snaps = sorted(pdir.glob("*.snapshot"))
    assert snaps, "a segment roll writes a producer snapshot"
    snap = cli("kbroker-dump-log", "--files", str(snaps[-1])).stdout
    assert re.search(r"^producerId: \d+ producerEpoch: \d+ coordinatorEpoch: -1 currentTxnFirstOffset: "
                     r"OptionalLong.empty lastTimestamp: \d+ firstSequence: \d+", snap, re.M), snap


def test_storage_format_then_broker_starts_with_that_cluster_id(kbroker_factory, tmp_path):
    broker = kbroker_factory(start=False)
    cluster_id = cli("kbroker-storage", "random-uuid").stdout.strip()
    props = tmp_path / "server.properties"
    props.write_text(f"process.roles=broker,controller\nnode.id={broker.node_id}\nlog.dirs={broker.log_dirs}\n"
                     f"listeners=PLAINTEXT://127.0.0.1:{broker.port}\n")
    out = cli("kbroker-storage", "format", "-t", cluster_id, "-c", props, "--standalone").stdout
    assert out.strip() == f"Formatting metadata directory {broker.log_dirs} with metadata.version 4.3-IV0."
    broker.start()
    admin = admin_client(broker.bootstrap)
    assert admin.describe_cluster().result(10).cluster_id == cluster_id
    info = cli("kbroker-storage", "info", "-c", props).stdout
    assert f"Found metadata: {{cluster.id={cluster_id}, directory.id=" in info
    quorum = cli("kbroker-metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe", "--status").stdout
    assert f"ClusterId:              {cluster_id}" in quorum
