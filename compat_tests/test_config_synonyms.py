"""DescribeConfigs synonyms of a topic key seen by a real client (confluent-kafka), in Kafka's three cases:
retention.ms at its default (no synonyms), log.retention.ms set statically (it and log.retention.hours), and
only log.retention.hours set (no synonyms, DEFAULT_CONFIG, the value in ms). The full key matrix runs in
tests/server/test_describe_configs_synonyms.py."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

pytestmark = pytest.mark.kafka_reference  # CI runs this file against Apache Kafka too


def retention(kbroker_factory, overrides):
    broker = kbroker_factory(overrides=overrides)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"syn-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = admin.describe_configs([res])[res].result(20)["retention.ms"]
    return entry, [(s.name, s.value, ConfigSource(s.source).name) for s in entry.synonyms.values()]


@pytest.mark.parametrize("overrides,value,source,synonyms", [
    ({}, "604800000", "DEFAULT_CONFIG", []),
    ({"log.retention.ms": "120000"}, "120000", "STATIC_BROKER_CONFIG",
     [("log.retention.ms", "120000", "STATIC_BROKER_CONFIG"), ("log.retention.hours", "168", "DEFAULT_CONFIG")]),
    ({"log.retention.hours": "5"}, "18000000", "DEFAULT_CONFIG", []),
])
def test_retention_ms_synonyms(kbroker_factory, overrides, value, source, synonyms):
    entry, syns = retention(kbroker_factory, overrides)
    assert entry.value == value
    assert ConfigSource(entry.source).name == source
    assert syns == synonyms
