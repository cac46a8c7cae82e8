"""Group configs (ConfigResource GROUP = 32, KIP-848's ``consumer.session.timeout.ms`` ...) with real clients.

* confluent-kafka's AdminClient ``describe_configs`` / ``incremental_alter_configs`` / ``alter_configs`` on
  ``ResourceType.GROUP`` (and the Java Admin's ``describeConfigs`` through compat_tests/java/KafkaDriver.java): every group key with its broker default (DEFAULT_CONFIG), an override (GROUP_CONFIG),
  Kafka's INVALID_CONFIG messages for unknown keys, bad types, values outside the broker's bounds and a session
  timeout not above the heartbeat interval; the overrides survive a broker restart (ConfigRecords in the metadata
  log);
* a consumer group whose ``consumer.session.timeout.ms`` group config is far shorter than the broker's
  ``group.consumer.session.timeout.ms``: a member killed with -9 is expelled after the group's timeout;
* ``kbroker-configs --entity-type groups``: describe, add-config, delete-config.

Each test runs a broker of its own, whose bounds (``group.consumer.min.session.timeout.ms`` ...) allow short
timeouts.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from compat_tests.clients import admin_client
from compat_tests.test_cli_tools import cli
from compat_tests.test_groups import Member, new_topic, produce, unique, wait_assignment, wait_consumed

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
             "group.consumer.min.session.timeout.ms": "2000", "group.consumer.min.heartbeat.interval.ms": "200",
             "group.consumer.session.timeout.ms": "45000", "group.consumer.heartbeat.interval.ms": "1000"}
GROUP_KEYS = {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "consumer.assignment.interval.ms",
              "share.assignment.interval.ms", "streams.assignment.interval.ms", "share.session.timeout.ms",
              "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
              "share.partition.max.record.locks", "share.auto.offset.reset", "share.isolation.level",
              "share.renew.acknowledge.enable", "streams.session.timeout.ms", "streams.heartbeat.interval.ms",
              "streams.num.standby.replicas", "streams.initial.rebalance.delay.ms"}


def describe(admin, group: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([res], request_timeout=10)[res].result(10)


def alter(admin, group: str, **ops) -> None:
    """``key=(op, value)`` with ``_`` for ``.`` in keys; raises KafkaException on a refusal."""
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=op) for k, (op, v) in ops.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(10)


def refusal(admin, group: str, **ops) -> tuple[str, str]:
    with pytest.raises(KafkaException) as info:
        alter(admin, group, **ops)
    err = info.value.args[0]
    return err.name(), err.str()


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


@pytest.fixture
def cp_members() -> Iterator[Callable[..., Member]]:
    """``start(bootstrap, group, topics, name)``: a confluent-kafka member process with ``group.protocol=consumer``
    (compat_tests/test_groups_member.py); all killed at teardown."""
    started: list[Member] = []

    def start(bootstrap: str, group: str, topics: list[str], name: str) -> Member:
        cmd = [sys.executable, "-m", "compat_tests.test_groups_member", "--client", "confluent", "--bootstrap",
               bootstrap, "--group", group, "--topics", ",".join(topics), "--group-protocol", "consumer",
               "--assignor", "uniform", "--client-id", "compat-gc"]
        started.append(Member(cmd, name))
        return started[-1]

    yield start
    for m in started:
        m.close()


def test_describe_alter_validate_and_restart(kbroker_factory, request):
    broker = kbroker_factory(OVERRIDES)
    admin = admin_client(broker.bootstrap)
    group = unique("gc")  # group configs need no group
    before = describe(admin, group)
    assert set(before) == GROUP_KEYS
    assert before["consumer.session.timeout.ms"].value == "45000"  # the broker's group.consumer.session.timeout.ms
    assert before["consumer.heartbeat.interval.ms"].value == "1000"
    assert before["share.isolation.level"].value == "read_uncommitted"
    # the keys whose broker key is in server.properties come from there (STATIC_BROKER_CONFIG)
    static = {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"}
    assert {k for k, e in before.items() if e.source == ConfigSource.STATIC_BROKER_CONFIG.value} == static
    assert {e.source for k, e in before.items() if k not in static} == {ConfigSource.DEFAULT_CONFIG.value}

    alter(admin, group, consumer_session_timeout_ms=(SET, "3000"), consumer_heartbeat_interval_ms=(SET, "500"),
          share_auto_offset_reset=(SET, "earliest"))
    after = describe(admin, group)
    assert after["consumer.session.timeout.ms"].value == "3000"
    assert after["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert after["share.auto.offset.reset"].value == "earliest"
    assert after["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert describe(admin, unique("other"))["consumer.session.timeout.ms"].value == "45000"

    assert refusal(admin, group, foo_bar=(SET, "1")) == ("INVALID_CONFIG", "Unknown group config name: foo.bar")
    assert refusal(admin, group, consumer_session_timeout_ms=(SET, "abc")) == (
        "INVALID_CONFIG", "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT")
    assert refusal(admin, group, consumer_session_timeout_ms=(SET, "1000")) == (
        "INVALID_CONFIG", "consumer.session.timeout.ms must be greater than or equal to "
                          "group.consumer.min.session.timeout.ms")
    assert refusal(admin, group, consumer_heartbeat_interval_ms=(SET, "3000")) == (
        "INVALID_CONFIG", "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert refusal(admin, group, share_isolation_level=(SET, "serializable"))[0] == "INVALID_CONFIG"
    assert refusal(admin, group, share_delivery_count_limit=(SET, "1")) == (
        "INVALID_CONFIG", "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2")
    # nothing of the refused requests was written
    assert describe(admin, group)["consumer.session.timeout.ms"].value == "3000"

    broker.restart()
    admin = admin_client(broker.bootstrap)
    survived = describe(admin, group)
    assert (survived["consumer.session.timeout.ms"].value, survived["consumer.session.timeout.ms"].source) == (
        "3000", ConfigSource.GROUP_CONFIG.value)
    assert survived["consumer.heartbeat.interval.ms"].value == "500"

    java = request.getfixturevalue("java_driver")
    seen = java.one(java.run(["admin", "describe-configs", "--bootstrap", broker.bootstrap, "--group", group]),
                    "configs")
    assert seen["resource_type"] == "GROUP" and set(seen["configs"]) == GROUP_KEYS
    assert seen["configs"]["consumer.session.timeout.ms"] == {"value": "3000", "source": "DYNAMIC_GROUP_CONFIG",
                                                              "read_only": False, "sensitive": False}
    assert seen["configs"]["share.session.timeout.ms"]["source"] == "DEFAULT_CONFIG"

    alter(admin, group, share_auto_offset_reset=(DELETE, None))
    assert describe(admin, group)["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value

    # legacy AlterConfigs replaces the group's whole set
    res = ConfigResource(ResourceType.GROUP, group, set_config={"consumer.heartbeat.interval.ms": "700"})
    admin.alter_configs([res], request_timeout=10)[res].result(10)
    replaced = describe(admin, group)
    assert replaced["consumer.heartbeat.interval.ms"].value == "700"
    assert replaced["consumer.session.timeout.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_group_session_timeout_expels_a_killed_member(kbroker_factory, cp_members):
    broker = kbroker_factory(OVERRIDES)
    bootstrap = broker.bootstrap
    admin = admin_client(bootstrap)
    topic = new_topic(bootstrap)
    group = unique("gc-session")
    alter(admin, group, consumer_session_timeout_ms=(SET, "3000"), consumer_heartbeat_interval_ms=(SET, "500"))
    expected = produce(bootstrap, topic, 60)
    a, b = cp_members(bootstrap, group, [topic], "a"), cp_members(bootstrap, group, [topic], "b")
    wait_consumed([a, b], expected)
    wait_assignment([a, b], topic)
    assert a.assignment() and b.assignment(), "both members must own partitions before the kill"
    described = admin.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
    assert {"DESCRIBE_CONFIGS", "ALTER_CONFIGS"} <= {op.name for op in described.authorized_operations}
    killed = time.monotonic()
    b.kill()
    wait_assignment([a], topic, timeout=40)
    took = time.monotonic() - killed
    # the broker's own session timeout is 45 s: only the group's 3 s explains a quick takeover
    assert took < 15, f"the killed member was expelled only after {took:.1f}s"


def test_kbroker_configs_groups(kbroker_factory):
    broker = kbroker_factory(OVERRIDES)
    group = unique("gc-cli")
    base = ["--bootstrap-server", broker.bootstrap, "--entity-type", "groups", "--entity-name", group]
    assert cli("kbroker-configs", *base, "--describe").stdout.strip() == f"Dynamic configs for group {group} are:"
    out = cli("kbroker-configs", *base, "--alter", "--add-config", "consumer.session.timeout.ms=5000").stdout
    assert f"Completed updating config for group {group}." in out
    desc = cli("kbroker-configs", *base, "--describe").stdout.splitlines()
    assert any(line.strip().startswith("consumer.session.timeout.ms=5000 ") and "DYNAMIC_GROUP_CONFIG" in line
               for line in desc), desc
    everything = cli("kbroker-configs", *base, "--describe", "--all").stdout
    assert "consumer.heartbeat.interval.ms=1000" in everything and "share.isolation.level=read_uncommitted" in everything
    bad = cli("kbroker-configs", *base, "--alter", "--add-config", "consumer.session.timeout.ms=100", ok=False)
    assert bad.returncode != 0 and "must be greater than or equal to group.consumer.min.session.timeout.ms" in bad.stdout + bad.stderr
    cli("kbroker-configs", *base, "--alter", "--delete-config", "consumer.session.timeout.ms")
    assert cli("kbroker-configs", *base, "--describe").stdout.strip() == f"Dynamic configs for group {group} are:"


def test_group_configs_need_describe_and_alter_configs_on_the_group(kbroker_factory, tmp_path):
    from compat_tests.test_authorization import acl_broker, conf
    from confluent_kafka.admin import AdminClient

    rules = [{"principal": "User:alice", "operation": "DESCRIBE_CONFIGS", "resource_type": "GROUP", "name": "seen"},
             {"principal": "User:alice", "operation": "ALTER_CONFIGS", "resource_type": "GROUP", "name": "mine"}]
    broker, sasl = acl_broker(kbroker_factory, tmp_path, rules)
    alice = AdminClient(conf(sasl, "alice"))
    assert describe(alice, "seen")["consumer.session.timeout.ms"].value == "45000"
    assert describe(alice, "mine")["consumer.session.timeout.ms"].value == "45000"  # ALTER_CONFIGS implies DESCRIBE
    res = ConfigResource(ResourceType.GROUP, "hidden")
    with pytest.raises(KafkaException) as info:
        alice.describe_configs([res], request_timeout=10)[res].result(10)
    assert info.value.args[0].name() == "GROUP_AUTHORIZATION_FAILED"
    assert refusal(alice, "seen", consumer_session_timeout_ms=(SET, "50000"))[0] == "GROUP_AUTHORIZATION_FAILED"
    alter(alice, "mine", consumer_session_timeout_ms=(SET, "50000"))
    assert describe(alice, "mine")["consumer.session.timeout.ms"].value == "50000"
