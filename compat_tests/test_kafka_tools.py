"""Apache Kafka's own command-line tools (the 4.3.1 jars) against the broker under test, asserting what they print.

Each test runs the main class behind one ``bin/kafka-*.sh`` script (:func:`kbroker.testing.kafka.run_kafka_tool`,
``java -cp .cache/kafka-4.3.1/*``) against the session broker, a broker with an authorizer (kafka-acls) or a 3-node
cluster (kafka-metadata-quorum, kafka-reassign-partitions, kafka-leader-election), and checks the output lines that
Kafka 4.3.1 itself prints for the same commands. The expectations were taken from runs against Apache Kafka
(``--kbroker-target=kafka``) and hold for both targets; only what must differ between two brokers is normalised:
topic and cluster ids, ports, member ids, timestamps, throughputs and latencies. Tables are compared cell by cell
(their column padding follows the widest cell); kafka-acls prints its resources in hash order, so its blocks are
compared as sets. A JVM tool start costs 1-2 s: every test batches several commands on one setup.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_tests.clients import admin_client, wait_topic_ready
from compat_tests.conftest import unique
from kbroker.testing.cluster import KbrokerCluster
from kbroker.testing.kafka import run_kafka_tool
from kbroker.testing.plugin import current_target

TOOLS = "org.apache.kafka.tools."
TOPICS = TOOLS + "TopicCommand"
CONFIGS = "kafka.admin.ConfigCommand"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
SHARE_GROUPS = TOOLS + "consumer.group.ShareGroupCommand"
ACLS = TOOLS + "AclCommand"
REASSIGN = TOOLS + "reassign.ReassignPartitionsCommand"
ELECT = TOOLS + "LeaderElectionCommand"
QUORUM = TOOLS + "MetadataQuorumCommand"
FEATURES = TOOLS + "FeatureCommand"
TRANSACTIONS = TOOLS + "TransactionsCommand"
DELETE_RECORDS = TOOLS + "DeleteRecordsCommand"
LOG_DIRS = TOOLS + "LogDirsCommand"
GET_OFFSETS = TOOLS + "GetOffsetShell"
PRODUCER_PERF = TOOLS + "ProducerPerformance"
CONSUMER_PERF = TOOLS + "ConsumerPerformance"
VERIFIABLE_PRODUCER = TOOLS + "VerifiableProducer"
VERIFIABLE_CONSUMER = TOOLS + "VerifiableConsumer"

ON_KBROKER = current_target() == "kbroker"
COORDINATOR_NOT_READY = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                         KafkaError.COORDINATOR_NOT_AVAILABLE)
OPEN_AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                   "super.users": "User:ANONYMOUS"}


#: a line of log4j2's status logger (the tools run without a log4j2 configuration file), not the tool's output
LOG4J_STATUS = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \S+ (?:ERROR|WARN|INFO|DEBUG) .*\n?", re.MULTILINE)


def kt(main_class: str, *args: Any, rc: int = 0, timeout: float = 90,
       ) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools; assert its exit code. log4j2 status lines are dropped from its stdout."""
    r = run_kafka_tool(main_class, *map(str, args), timeout=timeout)
    r.stdout = LOG4J_STATUS.sub("", r.stdout)
    assert r.returncode == rc, (f"{main_class.rsplit('.', 1)[-1]} {' '.join(map(str, args))} -> exit {r.returncode}"
                                f"\n--- stdout:\n{r.stdout}\n--- stderr:\n{r.stderr[-3000:]}")
    return r


def kt_many(*commands: tuple[str, ...], rc: int = 0) -> list[subprocess.CompletedProcess[str]]:
    """Independent tool commands (main class and arguments each), two at a time; their results in order."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda command: kt(*command, rc=rc), commands))


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def table(text: str) -> list[list[str]]:
    """The rows of a table a tool prints (cells split on whitespace, blank lines dropped)."""
    return [line.split() for line in lines(text)]


def tsv(text: str) -> list[list[str]]:
    """A tab-separated table (kafka-transactions, kafka-metadata-quorum): stripped cells, no empty trailing cell."""
    return [[c.strip() for c in line.rstrip("\t").split("\t")] for line in lines(text)]


def no_topic_ids(text: str) -> str:
    return re.sub(r"TopicId: [A-Za-z0-9_-]{22}", "TopicId: <id>", text)


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    """``n`` records ``k<i>``/``v<i>`` on each partition, one batch per record (flushed one by one, so the
    log sizes kafka-log-dirs prints do not depend on batching)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, n in per_partition.items():
        for i in range(n):
            p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
            assert p.flush(30) == 0


# ------------------------------------------------------------------------------------------ kafka-topics


def test_kafka_topics(bootstrap_servers):
    b = bootstrap_servers
    topic = unique("kt-topics")
    assert kt(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", 2,
              "--replication-factor", 1, "--config", "retention.ms=123456").stdout == f"Created topic {topic}.\n"
    wait_topic_ready(b, topic, 2)
    again = kt(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, rc=1)
    assert lines(again.stdout) == [f"Error while executing topic command : Topic '{topic}' already exists."]
    kt(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--if-not-exists")

    described = kt(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).stdout
    assert no_topic_ids(described).splitlines() == [
        f"Topic: {topic}\tTopicId: <id>\tPartitionCount: 2\tReplicationFactor: 1\t"
        "Configs: min.insync.replicas=1,retention.ms=123456",
        f"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: ",
        f"\tTopic: {topic}\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "]

    assert kt(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", 3).stdout == ""
    wait_topic_ready(b, topic, 3)
    overrides, unavailable, listed = kt_many(
        (TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic, "--topics-with-overrides"),
        (TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic, "--unavailable-partitions"),
        (TOPICS, "--bootstrap-server", b, "--list"))
    assert no_topic_ids(overrides.stdout).splitlines() == [
        f"Topic: {topic}\tTopicId: <id>\tPartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: min.insync.replicas=1,retention.ms=123456"]
    assert unavailable.stdout == ""
    listed = listed.stdout.split()
    assert topic in listed and listed == sorted(listed)

    assert kt(TOPICS, "--bootstrap-server", b, "--delete", "--topic", topic).stdout == ""
    admin = admin_client(b)
    deadline = time.monotonic() + 15
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    gone = kt(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic, rc=1)
    assert lines(gone.stdout)[0] == f"Error while executing topic command : Topic '{topic}' does not exist as expected"


# ------------------------------------------------------------------------------------------ kafka-configs


def test_kafka_configs(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=1)
    group, user, subscription = unique("kt-cfg-group"), unique("kt-user"), unique("kt-metrics")

    def configs(*args: Any) -> tuple[str, ...]:
        return (CONFIGS, "--bootstrap-server", b, *map(str, args))

    # every kind of entity altered, then described, then cleaned up: each step's commands run side by side
    altered = kt_many(
        configs("--entity-type", "topics", "--entity-name", topic, "--alter", "--add-config",
                "retention.ms=1000,segment.bytes=1048576,max.message.bytes=2000000"),
        configs("--entity-type", "brokers", "--entity-name", 1, "--alter", "--add-config", "log.cleaner.threads=2"),
        configs("--entity-type", "users", "--entity-name", user, "--alter", "--add-config",
                "producer_byte_rate=1024,consumer_byte_rate=2048"),
        configs("--entity-type", "groups", "--entity-name", group, "--alter", "--add-config",
                "consumer.session.timeout.ms=50000,share.auto.offset.reset=earliest"),
        configs("--entity-type", "client-metrics", "--entity-name", subscription, "--alter", "--add-config",
                "metrics=org.apache.kafka.producer.,interval.ms=60000"))
    try:
        assert [lines(r.stdout) for r in altered] == [
            [f"Completed updating config for topic {topic}."], ["Completed updating config for broker 1."],
            [f"Completed updating config for user {user}."], [f"Completed updating config for group {group}."],
            [f"Completed updating config for client-metric {subscription}."]]
        assert lines(kt(*configs("--entity-type", "topics", "--entity-name", topic, "--alter", "--delete-config",
                                 "max.message.bytes")).stdout) == [f"Completed updating config for topic {topic}."]
        described = kt_many(
            configs("--entity-type", "topics", "--entity-name", topic, "--describe"),
            configs("--entity-type", "brokers", "--entity-name", 1, "--describe"),
            configs("--entity-type", "brokers", "--entity-default", "--describe"),
            configs("--entity-type", "users", "--entity-name", user, "--describe"),
            configs("--entity-type", "groups", "--entity-name", group, "--describe"),
            configs("--entity-type", "client-metrics", "--entity-name", subscription, "--describe", "--all"),
            configs("--entity-type", "topics", "--entity-name", "kt-no-such-topic", "--describe"))
        assert [lines(r.stdout) for r in described] == [
            [f"Dynamic configs for topic {topic} are:",
             "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
             "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
             "DEFAULT_CONFIG:log.segment.bytes=1073741824}"],
            ["Dynamic configs for broker 1 are:",
             "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, "
             "DEFAULT_CONFIG:log.cleaner.threads=1}"],
            ["Default configs for brokers in the cluster are:",
             "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=1}"],
            [f"Quota configs for user-principal '{user}' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"],
            [f"Dynamic configs for group {group} are:",
             "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
             "consumer.session.timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
             "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:"
             "share.auto.offset.reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}"],
            [f"All configs for client-metric {subscription} are:",
             "  interval.ms=60000 sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:interval.ms=60000}",
             "  match= sensitive=false synonyms={}",
             "  metrics=org.apache.kafka.producer. sensitive=false synonyms={DYNAMIC_CLIENT_METRICS_CONFIG:"
             "metrics=org.apache.kafka.producer.}"],
            ["The topic 'kt-no-such-topic' doesn't exist and doesn't have dynamic config."]]
    finally:  # the session broker is shared: its own config and the subscription go back
        kt_many(configs("--entity-type", "brokers", "--entity-name", 1, "--alter", "--delete-config",
                        "log.cleaner.threads"),
                configs("--entity-type", "client-metrics", "--entity-name", subscription, "--alter",
                        "--delete-config", "metrics,interval.ms"))


# ------------------------------------------------------------------------------------------ kafka-consumer-groups


@pytest.mark.kafka_reference
def test_kafka_configs_broker_loggers(bootstrap_servers):
    """kafka-configs on the broker's loggers (KIP-412): a level is set and described, a bad level and removing the
    root logger's level are refused as Kafka refuses them. The logger names themselves are each broker's own."""
    b = bootstrap_servers

    def configs(*args: Any, rc: int = 0) -> subprocess.CompletedProcess[str]:
        return kt(CONFIGS, "--bootstrap-server", b, "--entity-type", "broker-loggers", "--entity-name", "1",
                  *args, rc=rc)

    assert lines(configs("--alter", "--add-config", "root=INFO").stdout) == [
        "Completed updating config for broker-logger 1."]
    described = lines(configs("--describe").stdout)
    assert described[0] == "Dynamic configs for broker-logger 1 are:"
    assert "  root=INFO sensitive=false synonyms={}" in described[1:]
    assert len(described) > 10  # every logger of the broker, each with its level
    bad_level = configs("--alter", "--add-config", "root=LOUD", rc=1)
    assert "InvalidConfigurationException" in bad_level.stdout + bad_level.stderr
    no_root = configs("--alter", "--delete-config", "root", rc=1)
    assert "InvalidRequestException" in no_root.stdout + no_root.stderr


def test_kafka_consumer_groups(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=2)
    group = unique("kt-group")
    produce(b, topic, {0: 4, 1: 3})
    c = Consumer({"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False})
    try:
        for attempt in range(30):  # the first group of a fresh broker waits for __consumer_offsets (NOT_COORDINATOR)
            try:
                c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False)
                break
            except KafkaException as exc:
                if attempt == 29 or exc.args[0].code() not in COORDINATOR_NOT_READY:
                    raise
                time.sleep(0.5)
    finally:
        c.close()

    def groups(*args: Any) -> subprocess.CompletedProcess[str]:
        return kt(GROUPS, "--bootstrap-server", b, *args)

    def cmd(*args: Any) -> tuple[str, ...]:
        return (GROUPS, "--bootstrap-server", b, *map(str, args))

    listed, described, state, members, dry = kt_many(
        cmd("--list"), cmd("--describe", "--group", group), cmd("--describe", "--group", group, "--state"),
        cmd("--describe", "--group", group, "--members"),
        cmd("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--dry-run"))
    assert group in listed.stdout.split()
    assert table(described.stdout) == [
        "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID".split(),
        [group, topic, "0", "2", "4", "2", "-", "-", "-"],
        [group, topic, "1", "3", "3", "0", "-", "-", "-"]]
    assert lines(described.stderr) == [f"Consumer group '{group}' has no active members."]
    assert [re.sub(r"127\.0\.0\.1:\d+", "<host>:<port>", " ".join(row)) for row in table(state.stdout)] == [
        "GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS", f"{group} <host>:<port> (1) - Empty 0"]
    assert table(members.stdout) == ["GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS".split()]

    dry = dry.stdout
    assert sorted(table(dry)[1:]) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert table(dry)[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert table(groups("--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", 1,
                        "--execute").stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "1", "1"]]
    shifted = groups("--reset-offsets", "--group", group, "--all-topics", "--shift-by", 2, "--execute")
    assert sorted(table(shifted.stdout)[1:]) == [[group, topic, "0", "4"], [group, topic, "1", "3"]]
    deleted = lines(groups("--delete-offsets", "--group", group, "--topic", f"{topic}:0").stdout)
    assert deleted[0] == f"Request succeeded for deleting offsets from group {group}."
    assert table("\n".join(deleted[1:])) == [["TOPIC", "PARTITION", "STATUS"], [topic, "0", "Successful"]]

    # one live member (librdkafka, classic protocol)
    live = Consumer({"bootstrap.servers": b, "group.id": group, "client.id": "kt-client",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        live.subscribe([topic])
        deadline = time.monotonic() + 30
        while not live.assignment() and time.monotonic() < deadline:
            live.poll(0.2)
        assert len(live.assignment()) == 2
        members_out, state_out, busy = kt_many(cmd("--describe", "--group", group, "--members"),
                                               cmd("--describe", "--group", group, "--state"),
                                               cmd("--delete", "--group", group))
        members = table(members_out.stdout)
        assert members[0] == "GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS".split()
        assert len(members) == 2 and members[1][0] == group and members[1][2:] == ["/127.0.0.1", "kt-client", "2"]
        assert members[1][1].startswith("kt-client-")
        state = table(state_out.stdout)
        assert [row[3:] for row in state] == [["ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], ["range", "Stable", "1"]]
        assert lines(busy.stdout) == ["Error: Deletion of some consumer groups failed:",
                                      f"* Group '{group}' could not be deleted due to: "
                                      "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."]
    finally:
        live.close()
    assert lines(groups("--delete", "--group", group).stdout) == [
        f"Deletion of requested consumer groups ('{group}') was successful."]
    missing = groups("--describe", "--group", group)
    assert lines(missing.stdout) == [f"Error: Executing consumer group command failed due to "
                                     f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group {group} not found."]


# ------------------------------------------------------------------------------------------ kafka-share-groups


def test_kafka_share_groups(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=1)
    group = unique("kt-share")
    produce(b, topic, {0: 5})

    def share(*args: Any) -> subprocess.CompletedProcess[str]:
        return kt(SHARE_GROUPS, "--bootstrap-server", b, *args)

    # --reset-offsets of an unknown group creates it, empty (as Kafka's coordinator does)
    assert table(share("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute").stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "0"]]
    def cmd(*args: Any) -> tuple[str, ...]:
        return (SHARE_GROUPS, "--bootstrap-server", b, *map(str, args))

    listed, described, state, members, dry = kt_many(
        cmd("--list"), cmd("--describe", "--group", group), cmd("--describe", "--group", group, "--state"),
        cmd("--describe", "--group", group, "--members"),
        cmd("--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--dry-run"))
    assert group in listed.stdout.split()
    assert table(described.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], [group, topic, "0", "0", "5"]]
    assert [re.sub(r"127\.0\.0\.1:\d+", "<host>:<port>", " ".join(row)) for row in table(state.stdout)] == [
        "GROUP COORDINATOR (ID) STATE #MEMBERS", f"{group} <host>:<port> (1) Empty 0"]
    assert lines(state.stderr) == [f"Share group '{group}' has no active members."]
    assert members.stdout.strip() == "" and lines(members.stderr) == [f"Share group '{group}' has no active members."]
    assert table(dry.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, topic, "0", "5"]]
    assert table(share("--delete-offsets", "--group", group, "--topic", topic).stdout) == [
        ["TOPIC", "STATUS"], [topic, "Successful"]]
    assert lines(share("--delete", "--group", group).stdout) == [
        f"Deletion of requested share groups ('{group}') was successful."]
    assert lines(share("--describe", "--group", group).stdout) == [
        f"Error: Executing share group command failed due to "
        f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group {group} not found."]


# ------------------------------------------------------------------------------------------ kafka-acls


def acl_blocks(text: str) -> set[tuple[str, frozenset[str]]]:
    """kafka-acls' resource blocks (the header line and its ACL lines), as a set: the tool prints resources, and
    the ACLs of each, in hash order (it differs between two runs against the same Kafka)."""
    out: set[tuple[str, frozenset[str]]] = set()
    for block in re.split(r"\n\s*\n", text.strip()):
        rows = [row.strip() for row in block.splitlines() if row.strip()]
        if rows:
            out.add((rows[0], frozenset(rows[1:])))
    return out


def test_kafka_acls(kbroker_factory):
    broker = kbroker_factory(OPEN_AUTHORIZER)
    b = broker.bootstrap

    def acls(*args: Any) -> str:
        return kt(ACLS, "--bootstrap-server", b, *args).stdout

    def resource(kind: str, name: str, pattern: str = "LITERAL") -> str:
        return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"

    def acl(principal: str, op: str, perm: str = "ALLOW") -> str:
        return f"(principal={principal}, host=*, operation={op}, permissionType={perm})"

    alice_t1 = frozenset({acl("User:alice", "READ"), acl("User:alice", "WRITE")})
    bob_t2 = frozenset({acl("User:bob", "DESCRIBE"), acl("User:bob", "READ")})
    bob_g2 = frozenset({acl("User:bob", "READ")})
    eve_pre = frozenset({acl("User:eve", "DESCRIBE", "DENY")})
    def cmd(*args: Any) -> tuple[str, ...]:
        return (ACLS, "--bootstrap-server", b, *args)

    added = kt_many(
        cmd("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write", "--topic", "t1"),
        cmd("--add", "--allow-principal", "User:bob", "--consumer", "--topic", "t2", "--group", "g2"),
        cmd("--add", "--deny-principal", "User:eve", "--operation", "Describe", "--topic", "pre",
            "--resource-pattern-type", "prefixed"))
    assert [acl_blocks(r.stdout) for r in added] == [
        {(f"Adding ACLs for resource `{resource('TOPIC', 't1')}`:", alice_t1)},
        {(f"Adding ACLs for resource `{resource('TOPIC', 't2')}`:", bob_t2),
         (f"Adding ACLs for resource `{resource('GROUP', 'g2')}`:", bob_g2)},
        {(f"Adding ACLs for resource `{resource('TOPIC', 'pre', 'PREFIXED')}`:", eve_pre)}]
    listed, by_bob, matching = (r.stdout for r in kt_many(
        cmd("--list"), cmd("--list", "--principal", "User:bob"),
        cmd("--list", "--resource-pattern-type", "match", "--topic", "prefix-x")))
    assert acl_blocks(listed) == {
        (f"Current ACLs for resource `{resource('TOPIC', 't1')}`:", alice_t1),
        (f"Current ACLs for resource `{resource('TOPIC', 't2')}`:", bob_t2),
        (f"Current ACLs for resource `{resource('GROUP', 'g2')}`:", bob_g2),
        (f"Current ACLs for resource `{resource('TOPIC', 'pre', 'PREFIXED')}`:", eve_pre)}
    assert by_bob.splitlines()[0] == "ACLs for principal `User:bob`"
    assert acl_blocks("\n".join(by_bob.splitlines()[1:])) == {
        (f"Current ACLs for resource `{resource('TOPIC', 't2')}`:", bob_t2),
        (f"Current ACLs for resource `{resource('GROUP', 'g2')}`:", bob_g2)}
    assert acl_blocks(matching) == {(f"Current ACLs for resource `{resource('TOPIC', 'pre', 'PREFIXED')}`:", eve_pre)}
    assert acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "t1") == ""
    assert acl_blocks(acls("--list", "--topic", "t1")) == {
        (f"Current ACLs for resource `{resource('TOPIC', 't1')}`:", frozenset({acl("User:alice", "READ")}))}


def test_kafka_acls_delegation_token_and_user_resources_as_kbroker_acls(kbroker_factory):
    """``--delegation-token`` (DESCRIBE on a token id) and ``--user-principal`` (CreateTokens / DescribeTokens on a
    user, KIP-48): kafka-acls adds and lists them, and kbroker-acls prints the same blocks for the same ACLs,
    removes them, and reports a broker without an authorizer as kafka-acls does."""
    broker = kbroker_factory(OPEN_AUTHORIZER)
    b = broker.bootstrap

    def kbroker_acls(*args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        r = subprocess.run([sys.executable, "-m", "kbroker.cli.acls", "--bootstrap-server", b, *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == rc, (args, r.stdout, r.stderr)
        return r

    token = ("--delegation-token", "tok-1", "--allow-principal", "User:bob", "--operation", "Describe")
    user = ("--user-principal", "User:alice", "--allow-principal", "User:carol", "--operation", "CreateTokens",
            "--operation", "DescribeTokens")
    pattern = "ResourcePattern(resourceType={}, name={}, patternType=LITERAL)"
    token_block = (f"Current ACLs for resource `{pattern.format('DELEGATION_TOKEN', 'tok-1')}`:",
                   frozenset({"(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)"}))
    user_block = (f"Current ACLs for resource `{pattern.format('USER', 'User:alice')}`:",
                  frozenset({"(principal=User:carol, host=*, operation=CREATE_TOKENS, permissionType=ALLOW)",
                             "(principal=User:carol, host=*, operation=DESCRIBE_TOKENS, permissionType=ALLOW)"}))
    kafka_added = kt(ACLS, "--bootstrap-server", b, "--add", *token).stdout
    assert (token_block[0].replace("Current", "Adding"), token_block[1]) in acl_blocks(kafka_added), kafka_added
    ours_added = kbroker_acls("--add", *user).stdout
    assert acl_blocks(ours_added) == {(user_block[0].replace("Current", "Adding"), user_block[1]), user_block}
    kafka_listed = kt(ACLS, "--bootstrap-server", b, "--list").stdout
    ours_listed = kbroker_acls("--list").stdout
    assert acl_blocks(kafka_listed) == acl_blocks(ours_listed) == {token_block, user_block}, (kafka_listed, ours_listed)
    for args in (("--delegation-token", "tok-1"), ("--user-principal", "User:alice")):
        assert acl_blocks(kt(ACLS, "--bootstrap-server", b, "--list", *args).stdout) == \
            acl_blocks(kbroker_acls("--list", *args).stdout)
    refused = kbroker_acls("--add", "--user-principal", "User:alice", "--allow-principal", "User:x",
                           "--operation", "Read", rc=1).stderr
    assert "ResourceType USER only supports operations" in refused, refused
    kbroker_acls("--remove", "--force", "--delegation-token", "tok-1")
    kbroker_acls("--remove", "--force", "--user-principal", "User:alice")
    assert kt(ACLS, "--bootstrap-server", b, "--list").stdout.strip() == ""

    plain = kbroker_factory()
    no_authorizer = subprocess.run([sys.executable, "-m", "kbroker.cli.acls", "--bootstrap-server", plain.bootstrap,
                                    "--list"], capture_output=True, text=True, timeout=60)
    assert no_authorizer.returncode == 1
    assert ("Error while executing ACL command: org.apache.kafka.common.errors.SecurityDisabledException: "
            "No Authorizer is configured on the broker") in no_authorizer.stderr, no_authorizer.stderr


def test_kafka_acls_without_an_authorizer(bootstrap_servers):
    r = kt(ACLS, "--bootstrap-server", bootstrap_servers, "--list", rc=1)
    assert r.stdout.splitlines()[0] == ("Error while executing ACL command: org.apache.kafka.common.errors."
                                        "SecurityDisabledException: No Authorizer is configured on the broker")


# ------------------------------------------------------------------------------------------ kafka-features


def test_kafka_features_updates(bootstrap_servers):
    b = bootstrap_servers
    upgrade, downgrade = kt_many((FEATURES, "--bootstrap-server", b, "upgrade", "--feature", "transaction.version=2",
                                  "--dry-run"),
                                 (FEATURES, "--bootstrap-server", b, "downgrade", "--feature", "group.version=0",
                                  "--dry-run"))
    assert upgrade.stdout == "transaction.version can be upgraded to 2.\n"
    assert downgrade.stdout == "group.version can be downgraded to 0.\n"
    bad = kt(FEATURES, "--bootstrap-server", b, "upgrade", "--feature", "share.version=3", rc=1)
    assert bad.stdout == ("Could not upgrade share.version to 3. The update failed for all features since the "
                          "following feature had an error: Invalid update version 3 for feature share.version. "
                          "Local controller 1 only supports versions 0-1\n")
    assert lines(bad.stderr) == ["1 out of 1 operation(s) failed."]


@pytest.mark.xfail(ON_KBROKER, strict=True,
                   reason="kbroker: does not support eligible.leader.replicas.version (ELR) and does not report "
                          "kraft.version in ApiVersions")
def test_kafka_features_describe(bootstrap_servers):
    b = bootstrap_servers
    assert lines(kt(FEATURES, "--bootstrap-server", b, "upgrade", "--release-version", "4.3", "--dry-run").stdout) == [
        "eligible.leader.replicas.version can be upgraded to 1.", "group.version can be upgraded to 1.",
        "kraft.version can be upgraded to 1.", "metadata.version can be upgraded to 30.",
        "share.version can be upgraded to 1.", "streams.version can be upgraded to 1.",
        "transaction.version can be upgraded to 2."]
    out = kt(FEATURES, "--bootstrap-server", b, "describe").stdout
    assert [re.sub(r"Epoch: \d+", "Epoch: <offset>", " ".join(line.split())) for line in lines(out)] == [
        "Feature: eligible.leader.replicas.version SupportedMinVersion: 0 SupportedMaxVersion: 1 "
        "FinalizedVersionLevel: 1 Epoch: <offset>",
        "Feature: group.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1 Epoch: <offset>",
        "Feature: kraft.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 0 Epoch: <offset>",
        "Feature: metadata.version SupportedMinVersion: 3.3-IV3 SupportedMaxVersion: 4.3-IV0 "
        "FinalizedVersionLevel: 4.3-IV0 Epoch: <offset>",
        "Feature: share.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1 Epoch: <offset>",
        "Feature: streams.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1 "
        "Epoch: <offset>",
        "Feature: transaction.version SupportedMinVersion: 0 SupportedMaxVersion: 2 FinalizedVersionLevel: 2 "
        "Epoch: <offset>"]


# ------------------------------------------------------------------------------------------ kafka-transactions


def test_kafka_transactions(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=2)
    done_id, open_id = unique("kt-txn-done"), unique("kt-txn-open")
    done = Producer({"bootstrap.servers": b, "transactional.id": done_id})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(topic, b"x", partition=0)
    done.commit_transaction(30)
    pending = Producer({"bootstrap.servers": b, "transactional.id": open_id, "transaction.timeout.ms": 600000})
    pending.init_transactions(30)
    pending.begin_transaction()
    pending.produce(topic, b"y", partition=1)
    assert pending.flush(30) == 0

    def txns(*args: Any, rc: int = 0) -> subprocess.CompletedProcess[str]:
        return kt(TRANSACTIONS, "--bootstrap-server", b, *args, rc=rc)

    def cmd(*args: Any) -> tuple[str, ...]:
        return (TRANSACTIONS, "--bootstrap-server", b, *map(str, args))

    listed, by_pattern, described, committed, producers, hanging = kt_many(
        cmd("list"), cmd("list", "--transactional-id-pattern", "kt-txn-open-.*"),
        cmd("describe", "--transactional-id", open_id), cmd("describe", "--transactional-id", done_id),
        cmd("describe-producers", "--topic", topic, "--partition", 1),
        cmd("find-hanging", "--broker-id", 1, "--max-transaction-timeout", 0))
    listed = tsv(listed.stdout)
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    ours = {row[0]: row for row in listed[1:] if row[0] in (done_id, open_id)}
    assert ours[done_id][1] == "1" and ours[done_id][3] == "CompleteCommit"
    assert ours[open_id][1] == "1" and ours[open_id][3] == "Ongoing"
    open_pid = ours[open_id][2]
    assert tsv(by_pattern.stdout)[1:] == [ours[open_id]]

    described = tsv(described.stdout)
    assert described[0] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                            "TopicPartitions"]
    row = described[1]
    assert row[:6] == ["1", open_id, open_pid, "0", "Ongoing", "600000"] and row[8] == f"{topic}-1"
    assert row[6].isdigit() and row[7].isdigit()
    committed = tsv(committed.stdout)[1]
    assert committed[1] == done_id and committed[4:6] == ["CompleteCommit", "60000"] and committed[8:] in ([], [""])

    producers = tsv(producers.stdout)
    assert producers[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                            "CurrentTransactionStartOffset"]
    assert len(producers) == 2 and producers[1][:4] == [open_pid, "0", "-1", "0"] and producers[1][5] == "0"
    hanging = tsv(hanging.stdout)
    assert hanging == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]]
    missing = txns("describe", "--transactional-id", "kt-no-such-txn", rc=1)
    assert lines(missing.stderr) == ["Failed to describe transaction state of transactional-id `kt-no-such-txn`: "
                                     "DescribeTransactions request for transactionalId `kt-no-such-txn` failed "
                                     "because the ID could not be found. Enable debug logging for additional detail."]

    # abort the open transaction from the partition's side (its producer never comes back)
    assert txns("abort", "--topic", topic, "--partition", 1, "--start-offset", 0).stdout == ""
    after = tsv(txns("describe-producers", "--topic", topic, "--partition", 1).stdout)
    assert after[1][:4] == [open_pid, "0", "0", "0"] and after[1][5] == "None"
    del pending  # never committed: its transaction was aborted above


# ------------------------------------------------------------------------------------------ records and offsets


def test_kafka_get_offsets_delete_records_log_dirs(bootstrap_servers, topic_factory, tmp_path):
    b = bootstrap_servers
    topic = topic_factory(partitions=3)
    produce(b, topic, {0: 4, 1: 3})

    def offsets(*args: Any) -> list[str]:
        return lines(kt(GET_OFFSETS, "--bootstrap-server", b, *args).stdout)

    latest, earliest, local = kt_many((GET_OFFSETS, "--bootstrap-server", b, "--topic", topic),
                                      (GET_OFFSETS, "--bootstrap-server", b, "--topic", topic, "--time", "-2"),
                                      (GET_OFFSETS, "--bootstrap-server", b, "--topic-partitions",
                                       f"{topic}:0,{topic}:1", "--time", "-4"))
    assert lines(latest.stdout) == [f"{topic}:0:4", f"{topic}:1:3", f"{topic}:2:0"]
    assert lines(earliest.stdout) == [f"{topic}:0:0", f"{topic}:1:0", f"{topic}:2:0"]
    assert lines(local.stdout) == [f"{topic}:0:0", f"{topic}:1:0"]

    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 2}]}))
    assert kt(DELETE_RECORDS, "--bootstrap-server", b, "--offset-json-file", spec).stdout.splitlines() == [
        "Executing records delete operation", "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 2"]
    assert offsets("--topic", topic, "--time", -2) == [f"{topic}:0:2", f"{topic}:1:0", f"{topic}:2:0"]

    out = kt(LOG_DIRS, "--bootstrap-server", b, "--describe", "--topic-list", topic).stdout.splitlines()
    assert out[:2] == ["Querying brokers for log directories information",
                       "Received log directory information from brokers 1"]
    described = json.loads(out[2])
    assert described["version"] == 1 and len(described["brokers"]) == 1
    (log_dir,) = described["brokers"][0]["logDirs"]
    assert described["brokers"][0]["broker"] == 1 and log_dir["error"] is None
    record = 72  # one batch of one record k<i>/v<i>: 61 bytes of batch header, 11 of record
    assert sorted(log_dir["partitions"], key=lambda p: p["partition"]) == [
        {"partition": f"{topic}-0", "size": 4 * record, "offsetLag": 0, "isFuture": False},
        {"partition": f"{topic}-1", "size": 3 * record, "offsetLag": 0, "isFuture": False},
        {"partition": f"{topic}-2", "size": 0, "offsetLag": 0, "isFuture": False}]


# ------------------------------------------------------------------------------------------ perf and verifiable tools


def test_kafka_perf_tools(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=2)
    produced = kt(PRODUCER_PERF, "--bootstrap-server", b, "--topic", topic, "--num-records", 2000, "--record-size",
                  100, "--throughput", -1, "--command-property", "acks=all").stdout
    num = r"\d+(?:\.\d+)?"
    assert re.fullmatch(rf"2000 records sent, {num} records/sec \({num} MB/sec\), {num} ms avg latency, {num} ms max "
                        rf"latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.", lines(produced)[-1]), produced
    consumed = kt(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic, "--num-records", 2000, "--timeout",
                  30000).stdout
    header, row = lines(consumed)
    assert header == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                      "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    cells = row.split(", ")
    assert len(cells) == 10 and cells[2] == "0.1907" and cells[4] == "2000", row
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", c) for c in cells[:2]), row


def events(text: str) -> list[dict[str, Any]]:
    """The JSON lines of a verifiable tool, timestamps and throughputs dropped."""
    out = []
    for line in lines(text):
        event = json.loads(line)
        event.pop("timestamp", None)
        event.pop("avg_throughput", None)
        out.append(event)
    return out


def test_kafka_verifiable_producer_and_consumer(bootstrap_servers, topic_factory):
    b = bootstrap_servers
    topic = topic_factory(partitions=1)
    group = unique("kt-verifiable")
    sent = events(kt(VERIFIABLE_PRODUCER, "--bootstrap-server", b, "--topic", topic, "--max-messages", 5, "--acks", -1,
                     "--value-prefix", 7).stdout)
    assert sent == [{"name": "startup_complete"}] + [
        {"name": "producer_send_success", "key": None, "value": f"7.{i}", "offset": i, "topic": topic, "partition": 0}
        for i in range(5)] + [{"name": "shutdown_complete"},
                              {"name": "tool_data", "sent": 5, "acked": 5, "target_throughput": -1}]
    got = events(kt(VERIFIABLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group-id", group,
                    "--max-messages", 5, "--reset-policy", "earliest").stdout)
    assert got == [
        {"name": "startup_complete"},
        {"name": "partitions_assigned", "partitions": [{"topic": topic, "partition": 0}]},
        {"name": "records_consumed", "count": 5,
         "partitions": [{"topic": topic, "partition": 0, "count": 5, "minOffset": 0, "maxOffset": 4}]},
        {"name": "offsets_committed", "offsets": [{"topic": topic, "partition": 0, "offset": 5}], "success": True},
        {"name": "partitions_revoked", "partitions": [{"topic": topic, "partition": 0}]},
        {"name": "shutdown_complete"},
        {"name": "shutdown_requested"}]


# ------------------------------------------------------------------------------------------ 3-node cluster


def test_kafka_cluster_tools(tmp_path):
    """kafka-metadata-quorum, kafka-reassign-partitions and kafka-leader-election against 3 combined nodes."""
    with KbrokerCluster(tmp_path, nodes=3) as cluster:
        b = cluster.bootstrap
        topic = unique("kt-reassign")
        status, replication, created = kt_many(
            (QUORUM, "--bootstrap-server", b, "describe", "--status"),
            (QUORUM, "--bootstrap-server", b, "describe", "--replication"),
            (TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--replica-assignment", "1:2,2:3"))
        status = lines(status.stdout)
        fields = dict(re.split(r":\s+", line, maxsplit=1) for line in status)
        assert list(fields) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                                "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
        assert fields["LeaderId"] in ("1", "2", "3") and fields["HighWatermark"].isdigit()
        voters = json.loads(fields["CurrentVoters"])
        assert voters == [{"id": i, "endpoints": [f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}"]}
                          for i in (1, 2, 3)]
        assert fields["CurrentObservers"] == "[]"
        leader = int(fields["LeaderId"])
        replication = tsv(replication.stdout)
        assert replication[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                  "LastCaughtUpTimestamp", "Status"]
        assert [(r[0], r[1], r[6]) for r in replication[1:]] == [
            (str(i), "AAAAAAAAAAAAAAAAAAAAAA", "Leader" if i == leader else "Follower")
            for i in [leader] + sorted({1, 2, 3} - {leader})]
        assert all(r[2].isdigit() and r[3].isdigit() for r in replication[1:])

        assert created.stdout == f"Created topic {topic}.\n"
        wait_topic_ready(b, topic, 2)
        move = tmp_path / "reassign.json"
        move.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [2, 3]},
            {"topic": topic, "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]}]}))
        log_dirs = {i: str(Path(cluster.nodes[i].log_dirs)) for i in (1, 2, 3)}
        current = {"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": [log_dirs[1], log_dirs[2]]},
            {"topic": topic, "partition": 1, "replicas": [2, 3], "log_dirs": [log_dirs[2], log_dirs[3]]}]}
        started = kt(REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file", move).stdout
        assert lines(started) == ["Current partition replica assignment", json.dumps(current, separators=(",", ":")),
                                  "Save this to use as the --reassignment-json-file option during rollback",
                                  f"Successfully started partition reassignments for {topic}-0,{topic}-1"]
        verified: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            verified = lines(kt(REASSIGN, "--bootstrap-server", b, "--verify", "--reassignment-json-file",
                                move).stdout)
            if all("is completed" in line for line in verified[1:3]):
                break
            time.sleep(1)
        assert verified == ["Status of partition reassignment:", f"Reassignment of partition {topic}-0 is completed.",
                            f"Reassignment of partition {topic}-1 is completed.",
                            "Clearing broker-level throttles on brokers 1,2,3",
                            f"Clearing topic-level throttles on topic {topic}"]

        # the preferred replica of partition 0 becomes 3 (same replicas, new order): the leader stays 2 until
        # a preferred election
        swap = tmp_path / "swap.json"
        swap.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 2]}]}))
        kt(REASSIGN, "--bootstrap-server", b, "--execute", "--reassignment-json-file", swap)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "is completed" in kt(REASSIGN, "--bootstrap-server", b, "--verify", "--reassignment-json-file",
                                    swap).stdout:
                break
            time.sleep(1)
        described = no_topic_ids(kt(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).stdout)
        assert described.splitlines() == [
            f"Topic: {topic}\tTopicId: <id>\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: min.insync.replicas=1",
            f"\tTopic: {topic}\tPartition: 0\tLeader: 2\tReplicas: 3,2\tIsr: 2,3\tElr: \tLastKnownElr: ",
            f"\tTopic: {topic}\tPartition: 1\tLeader: 3\tReplicas: 3,1\tIsr: 1,3\tElr: \tLastKnownElr: "]
        preferred, unclean = kt_many(
            (ELECT, "--bootstrap-server", b, "--election-type", "preferred", "--topic", topic, "--partition", "0"),
            (ELECT, "--bootstrap-server", b, "--election-type", "unclean", "--topic", topic, "--partition", "1"))
        assert preferred.stdout == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
        assert unclean.stdout == f"Valid replica already elected for partitions {topic}-1\n"
        assert kt(ELECT, "--bootstrap-server", b, "--election-type", "preferred", "--all-topic-partitions"
                  ).stdout == ""
        described = no_topic_ids(kt(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).stdout)
        assert described.splitlines()[1] == (f"\tTopic: {topic}\tPartition: 0\tLeader: 3\tReplicas: 3,2\tIsr: 2,3\t"
                                             "Elr: \tLastKnownElr: ")
