"""authorized_operations when asked (Metadata v8+, DescribeCluster, DescribeTopicPartitions), with the Java
AdminClient and confluent-kafka: with no authorizer the full set Kafka's ACL model defines (a topic: 8
operations, bitfield 0xDF8; the cluster: 7), and an authorizer that denies ALTER takes ALTER out of both."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from kbroker.cli._wire import Connection, split_hostport
from kbroker.protocol.messages import MetadataRequest

TOPIC_OPS = ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"]
CLUSTER_OPS = ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
               "IDEMPOTENT_WRITE"]


def broker_and_topic(kbroker_factory, overrides=None):
    broker = kbroker_factory(overrides=overrides or {})
    topic = f"ops-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return broker, admin, topic


def confluent_ops(admin, topic):
    td = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(20)
    cl = admin.describe_cluster(include_authorized_operations=True).result(20)
    return sorted(op.name for op in td.authorized_operations), sorted(op.name for op in cl.authorized_operations)


def java_ops(java_driver, bootstrap, topic):
    t = java_driver.one(java_driver.run(["admin", "describe-topic", "--bootstrap", bootstrap, "--topic", topic,
                                         "--authorized-operations", "true"]), "topic")
    c = java_driver.one(java_driver.run(["admin", "describe-cluster", "--bootstrap", bootstrap,
                                         "--authorized-operations", "true"]), "cluster")
    return t["authorized_operations"], c["authorized_operations"]


@pytest.mark.kafka_reference
def test_full_set_without_an_authorizer(kbroker_factory, java_driver):
    broker, admin, topic = broker_and_topic(kbroker_factory)
    assert confluent_ops(admin, topic) == (TOPIC_OPS, CLUSTER_OPS)
    assert java_ops(java_driver, broker.bootstrap, topic) == (TOPIC_OPS, CLUSTER_OPS)
    # the raw answer: Metadata v12 asked for topic operations -> 0xDF8; not asked -> INT32_MIN
    host, port = split_hostport(broker.bootstrap)
    conn = Connection(host, port, 10.0, "ops-test")
    try:
        asked = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                          include_topic_authorized_operations=True), 12)
        plain = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        v10 = conn.send(MetadataRequest(topics=[], include_cluster_authorized_operations=True), 10)
    finally:
        conn.close()
    assert asked.topics[0].topic_authorized_operations == 0xDF8
    assert plain.topics[0].topic_authorized_operations == -(2**31)
    assert v10.cluster_authorized_operations == 0x1FA0


@pytest.mark.kbroker_only("uses the Python authorizer plugin compat_tests/deny_alter_authorizer.py")
def test_an_authorizer_that_denies_alter(kbroker_factory, java_driver):
    broker, admin, topic = broker_and_topic(
        kbroker_factory, {"authorizer.class.name": "compat_tests.deny_alter_authorizer.DenyAlter"})
    topic_ops = [o for o in TOPIC_OPS if o != "ALTER"]
    cluster_ops = [o for o in CLUSTER_OPS if o != "ALTER"]
    assert confluent_ops(admin, topic) == (topic_ops, cluster_ops)
    assert java_ops(java_driver, broker.bootstrap, topic) == (topic_ops, cluster_ops)


def test_an_authorizer_that_cannot_be_loaded_refuses_to_start(kbroker_factory):
    broker = kbroker_factory(overrides={"authorizer.class.name": "no.such.Authorizer"}, start=False)
    with pytest.raises(Exception):
        broker.start(timeout=30)
    # kbroker names the key and the class, Kafka logs a ClassNotFoundException with the class
    assert "no.such.Authorizer" in broker.log_text(), broker.log_tail(50)
