"""DescribeConfigs synonyms of topic keys, as Kafka lists them (ConfigHelper): the broker synonyms of the key's
broker name, highest precedence first, from the dynamic per-broker, dynamic default, static and default layers,
then everything before the first entry named exactly the broker name is dropped. Three cases for every topic
key that has broker synonyms: at the default, with the broker name set statically, and with only a
lower-precedence synonym set."""

from __future__ import annotations

import pytest

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import DescribeConfigsRequest
from kbroker.controller.quorum_controller import CreateTopicSpec

from .conftest import start_node, stop_node

DYNAMIC_DEFAULT_BROKER, STATIC, DEFAULT = 3, 4, 5
TOPIC = 2

# topic key -> (broker name, its Kafka default or None, a valid value to set statically)
KEYS = {
    "cleanup.policy": ("log.cleanup.policy", "delete", "compact"),
    "compression.gzip.level": ("compression.gzip.level", "-1", "5"),
    "compression.lz4.level": ("compression.lz4.level", "9", "4"),
    "compression.type": ("compression.type", "producer", "lz4"),
    "compression.zstd.level": ("compression.zstd.level", "3", "7"),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", "86400000", "1000"),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms", "60000", "1000"),
    "flush.messages": ("log.flush.interval.messages", "9223372036854775807", "5000"),
    "flush.ms": ("log.flush.interval.ms", None, "7000"),
    "index.interval.bytes": ("log.index.interval.bytes", "4096", "8192"),
    "local.retention.bytes": ("log.local.retention.bytes", "-2", "1000000"),
    "local.retention.ms": ("log.local.retention.ms", "-2", "1000000"),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms", "9223372036854775807", "900000"),
    "max.message.bytes": ("message.max.bytes", "1048588", "2000000"),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms", "3600000", "60000"),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms", "9223372036854775807", "60000"),
    "message.timestamp.type": ("log.message.timestamp.type", "CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", "0.5", "0.3"),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", "0", "1000"),
    "min.insync.replicas": ("min.insync.replicas", "1", "2"),
    "preallocate": ("log.preallocate", "false", "true"),
    "retention.bytes": ("log.retention.bytes", "-1", "1000000"),
    "retention.ms": ("log.retention.ms", None, "120000"),
    "segment.bytes": ("log.segment.bytes", "1073741824", "2097152"),
    "segment.index.bytes": ("log.index.size.max.bytes", "10485760", "4096"),
    "segment.jitter.ms": ("log.roll.jitter.ms", None, "1000"),
    "segment.ms": ("log.roll.ms", None, "3600000"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", "false", "true"),
}
# topic key -> (a lower-precedence synonym, value, the topic value Kafka derives from it)
LOWER = {
    "retention.ms": [("log.retention.hours", "5", str(5 * 3_600_000)), ("log.retention.minutes", "7", str(7 * 60_000))],
    "segment.ms": [("log.roll.hours", "3", str(3 * 3_600_000))],
    "flush.ms": [("log.flush.scheduler.interval.ms", "9000", None)],
    "segment.jitter.ms": [("log.roll.jitter.hours", "2", None)],
}


def describe(node):
    _ = node.broker.controller.create_topics([CreateTopicSpec("syn", 1)])
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name="syn")], include_synonyms=True)
    res = node.call(ApiKey.DESCRIBE_CONFIGS, 4, req).results[0]
    return {c.name: c for c in res.configs}


@pytest.fixture(scope="module")
def at_default(tmp_path_factory):
    node = start_node(tmp_path_factory.mktemp("default"))
    try:
        yield describe(node)
    finally:
        stop_node(node)


@pytest.fixture(scope="module")
def broker_names_set(tmp_path_factory):
    node = start_node(tmp_path_factory.mktemp("static"), **{b: v for b, _, v in KEYS.values()})
    try:
        yield describe(node)
    finally:
        stop_node(node)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_at_the_default(at_default, key):
    name, default, _ = KEYS[key]
    entry = at_default[key]
    syns = [(s.name, s.value, s.source) for s in entry.synonyms]
    if key == "min.insync.replicas":
        # the cluster-level value every new cluster is bootstrapped with (as Kafka 4.1+) ranks first
        assert syns == [(name, default, DYNAMIC_DEFAULT_BROKER), (name, default, DEFAULT)]
        assert entry.config_source == DYNAMIC_DEFAULT_BROKER
    elif default is None:
        # e.g. retention.ms: log.retention.hours=168 is the only set synonym and ranks before log.retention.ms
        assert syns == [] and entry.config_source == DEFAULT
    else:
        assert syns == [(name, default, DEFAULT)] and entry.config_source == DEFAULT


@pytest.mark.parametrize("key", sorted(KEYS))
def test_broker_name_set_statically(broker_names_set, key):
    name, default, value = KEYS[key]
    entry = broker_names_set[key]
    syns = [(s.name, s.value, s.source) for s in entry.synonyms]
    if key == "min.insync.replicas":  # bootstrapped as the cluster-level value from server.properties
        assert syns[0] == (name, value, DYNAMIC_DEFAULT_BROKER) and entry.config_source == DYNAMIC_DEFAULT_BROKER
        syns = syns[1:]
    assert syns[0] == (name, value, STATIC) and (key == "min.insync.replicas" or entry.config_source == STATIC)
    if default is not None:
        assert syns[1:] == [(name, default, DEFAULT)]


@pytest.mark.parametrize("key,lower,value,derived", [(k, *c) for k, cs in sorted(LOWER.items()) for c in cs])
def test_only_a_lower_precedence_synonym_set(tmp_path, key, lower, value, derived):
    node = start_node(tmp_path, **{lower: value})
    try:
        entry = describe(node)[key]
    finally:
        stop_node(node)
    # everything ranks before the key's broker name, so Kafka lists nothing and calls the source DEFAULT_CONFIG,
    # while the value follows the synonym
    assert [s.name for s in entry.synonyms] == [] and entry.config_source == DEFAULT
    if derived is not None:
        assert entry.value == derived
