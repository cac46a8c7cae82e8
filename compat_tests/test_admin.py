"""Topic administration from real admin clients: create, describe, configs, delete, recreate.

The Java AdminClient (kafka-clients 4.3.1) and confluent-kafka's AdminClient each run the whole life
cycle; kafka-python's admin client and kcat's metadata listing get lighter checks. A single broker is
expected: every partition led by it, replicas and ISR exactly [it].
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from compat_tests.clients import KcatClient, admin_client, create_topic
from kbroker.testing.plugin import HARNESS_TARGETS

pytestmark = [pytest.mark.timeout(120), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


def _name(what: str) -> str:
    return f"compat-admin-{what}-{uuid.uuid4().hex[:8]}"


def _eventually(check, timeout: float = 15.0, interval: float = 0.2):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while True:
        ok, detail = check()
        if ok or time.monotonic() > deadline:
            return ok, detail
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------- Java


def test_java_admin_topic_lifecycle(java_driver, bootstrap_servers, broker_node_id):
    topic = _name("java")
    drv = java_driver
    base = ["--bootstrap", bootstrap_servers]

    created = drv.one(drv.run(["admin", "create-topic", *base, "--topic", topic, "--partitions", "3",
                               "--replication-factor", "1", "--config", "retention.ms=3600000",
                               "--config", "cleanup.policy=delete"]), "created")
    assert created["partitions"] == 3 and created["replication_factor"] == 1, created
    first_id = created["topic_id"]
    assert first_id and first_id != ZERO_UUID, created

    desc = drv.one(drv.run(["admin", "describe-topic", *base, "--topic", topic]), "topic")
    assert desc["name"] == topic and desc["internal"] is False
    assert desc["topic_id"] == first_id, (desc["topic_id"], first_id)
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    for p in desc["partitions"]:
        assert (p["leader"], p["replicas"], p["isr"]) == (broker_node_id, [broker_node_id], [broker_node_id]), p

    listed = drv.one(drv.run(["admin", "list-topics", *base]), "topics")["topics"]
    assert topic in listed

    cfg = drv.one(drv.run(["admin", "describe-configs", *base, "--topic", topic]), "configs")["configs"]
    assert cfg.get("retention.ms", {}).get("value") == "3600000", cfg.get("retention.ms")
    assert cfg["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG", cfg["retention.ms"]
    assert cfg.get("cleanup.policy", {}).get("value") == "delete", cfg.get("cleanup.policy")

    again = drv.run(["admin", "create-topic", *base, "--topic", topic, "--partitions", "3"], check=False)
    err = drv.one(again, "error")
    assert err["error_class"] == "TopicExistsException", err

    drv.one(drv.run(["admin", "delete-topic", *base, "--topic", topic]), "deleted")
    ok, last = _eventually(lambda: ((t := drv.one(drv.run(["admin", "list-topics", *base]), "topics")["topics"]),
                                    topic not in t)[::-1])
    assert ok, f"{topic} still listed after delete: {last}"
    gone = drv.run(["admin", "describe-topic", *base, "--topic", topic], check=False)
    assert drv.one(gone, "error")["error_class"] == "UnknownTopicOrPartitionException", gone

    # recreate: a new topic with a new id
    def recreate():  # noqa: ANN202
        ev = drv.run(["admin", "create-topic", *base, "--topic", topic, "--partitions", "2"], check=False)
        return any(e.get("event") == "created" for e in ev), ev

    ok, ev = _eventually(recreate, timeout=20, interval=0.5)
    assert ok, f"recreating {topic} after delete failed: {ev}"
    created2 = drv.one(ev, "created")
    assert created2["topic_id"] not in (first_id, ZERO_UUID, None), (first_id, created2)
    desc2 = drv.one(drv.run(["admin", "describe-topic", *base, "--topic", topic]), "topic")
    assert desc2["topic_id"] == created2["topic_id"] and len(desc2["partitions"]) == 2, desc2


def test_java_admin_describe_cluster_and_broker_configs(java_driver, bootstrap_servers, broker_node_id,
                                                         kafka_broker):
    base = ["--bootstrap", bootstrap_servers]
    cl = java_driver.one(java_driver.run(["admin", "describe-cluster", *base]), "cluster")
    assert cl["cluster_id"], cl
    assert [n["id"] for n in cl["nodes"]] == [broker_node_id], cl
    assert cl["controller"] is not None and cl["controller"]["id"] == broker_node_id, cl
    if kafka_broker.target in HARNESS_TARGETS:
        host, port = bootstrap_servers.rsplit(":", 1)
        assert (cl["nodes"][0]["host"], cl["nodes"][0]["port"]) == (host, int(port)), cl

    cfg = java_driver.one(java_driver.run(["admin", "describe-configs", *base, "--broker", str(broker_node_id)]),
                          "configs")["configs"]
    assert cfg, "describe-configs for the broker returned no entries"
    if kafka_broker.target in HARNESS_TARGETS:
        assert cfg.get("num.partitions", {}).get("value") == "1", cfg.get("num.partitions")
        assert cfg.get("auto.create.topics.enable", {}).get("value") == "true", cfg.get("auto.create.topics.enable")


@pytest.mark.parametrize("partitions,rf,topic,error_class", [
    (0, 1, None, "InvalidPartitionsException"),
    (1, 3, None, "InvalidReplicationFactorException"),
    (1, 1, "bad/topic name", "InvalidTopicException"),
], ids=["zero-partitions", "replication-factor-3", "invalid-name"])
def test_java_admin_create_topic_errors(java_driver, bootstrap_servers, partitions, rf, topic, error_class):
    name = topic or _name("bad")
    ev = java_driver.run(["admin", "create-topic", "--bootstrap", bootstrap_servers, "--topic", name,
                          "--partitions", str(partitions), "--replication-factor", str(rf)], check=False)
    assert java_driver.one(ev, "error")["error_class"] == error_class, ev
    listed = java_driver.one(java_driver.run(["admin", "list-topics", "--bootstrap", bootstrap_servers]),
                             "topics")["topics"]
    assert name not in listed


# ---------------------------------------------------------------------------------------------- confluent


def test_confluent_admin_topic_lifecycle(bootstrap_servers, broker_node_id):
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

    admin = admin_client(bootstrap_servers)
    topic = _name("confluent")
    admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "7200000"})],
                        operation_timeout=20)[topic].result(30)

    def described():  # noqa: ANN202
        try:
            return True, admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result(15)
        except KafkaException as exc:
            return False, exc

    ok, desc = _eventually(described)
    assert ok, desc
    first_id = str(desc.topic_id)
    assert desc.name == topic and not desc.is_internal and first_id not in ("", ZERO_UUID), desc
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    for p in desc.partitions:
        assert p.leader is not None and p.leader.id == broker_node_id, p
        assert [n.id for n in p.replicas] == [broker_node_id] and [n.id for n in p.isr] == [broker_node_id], p

    md = admin.list_topics(timeout=10)
    assert topic in md.topics and len(md.topics[topic].partitions) == 3

    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=10)[res].result(15)
    assert entries["retention.ms"].value == "7200000", entries.get("retention.ms")
    source = entries["retention.ms"].source
    assert int(getattr(source, "value", source)) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, source

    with pytest.raises(KafkaException) as exc_info:
        admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=10)[topic].result(15)
    assert exc_info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, exc_info.value

    admin.delete_topics([topic], operation_timeout=20)[topic].result(30)
    ok, _ = _eventually(lambda: (topic not in admin.list_topics(timeout=10).topics, None))
    assert ok, f"{topic} still in metadata after delete"

    def recreate():  # noqa: ANN202
        try:
            admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(15)
            return True, None
        except KafkaException as exc:
            return False, exc

    ok, err = _eventually(recreate, timeout=20, interval=0.5)
    assert ok, f"recreate after delete: {err}"
    ok, desc2 = _eventually(described)
    assert ok, desc2
    assert str(desc2.topic_id) not in (first_id, ZERO_UUID) and len(desc2.partitions) == 1, desc2


def test_confluent_admin_describe_cluster_and_broker_configs(bootstrap_servers, broker_node_id, kafka_broker):
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = admin_client(bootstrap_servers)
    cl = admin.describe_cluster(request_timeout=10).result(15)
    assert cl.cluster_id, cl
    assert [n.id for n in cl.nodes] == [broker_node_id], cl
    assert cl.controller is not None and cl.controller.id == broker_node_id, cl

    res = ConfigResource(ResourceType.BROKER, str(broker_node_id))
    entries = admin.describe_configs([res], request_timeout=10)[res].result(15)
    assert entries, "no broker config entries"
    if kafka_broker.target in HARNESS_TARGETS:
        assert entries["num.partitions"].value == "1", entries.get("num.partitions")


def test_confluent_admin_create_topic_errors(bootstrap_servers):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap_servers)
    cases = [(NewTopic(_name("rf3"), 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
             (NewTopic("bad/topic name", 1, 1), KafkaError.TOPIC_EXCEPTION)]
    for new, code in cases:
        with pytest.raises(KafkaException) as exc_info:
            admin.create_topics([new], operation_timeout=10)[new.topic].result(15)
        assert exc_info.value.args[0].code() == code, (new.topic, exc_info.value)


# ---------------------------------------------------------------------------------------------- others


def test_kafka_python_admin_topic_lifecycle(bootstrap_servers, broker_node_id):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = _name("kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=15_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], timeout_ms=15_000)
        ok, desc = _eventually(lambda: ((d := admin.describe_topics([topic])) and d[0]["error_code"] == 0
                                        and len(d[0]["partitions"]) == 2, d))
        assert ok, desc
        for p in desc[0]["partitions"]:  # kafka-python 3.x: Metadata response field names
            leader = p.get("leader_id", p.get("leader"))
            replicas = p.get("replica_nodes", p.get("replicas"))
            assert leader == broker_node_id and list(replicas) == [broker_node_id], p
        assert topic in admin.list_topics()
        admin.delete_topics([topic], timeout_ms=15_000)
        ok, _ = _eventually(lambda: (topic not in admin.list_topics(), None))
        assert ok, f"{topic} still listed after delete"
    finally:
        admin.close()


def test_kcat_metadata_listing(get_client, bootstrap_servers, broker_node_id, topic_factory):
    kcat = get_client("kcat")
    assert isinstance(kcat, KcatClient)
    topic = topic_factory(3)
    r = subprocess.run([kcat.path, "-L", "-J", "-b", bootstrap_servers, "-t", topic], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    md = json.loads(r.stdout)
    assert [b["id"] for b in md["brokers"]] == [broker_node_id], md["brokers"]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2], t
    for p in t["partitions"]:
        assert p["leader"] == broker_node_id, p


def test_auto_create_topic_on_metadata(bootstrap_servers, kafka_broker):
    """auto.create.topics.enable=true (the session broker's setting, kbroker's or Kafka's): producing to an unknown topic
    creates it with num.partitions (1) partitions."""
    if kafka_broker.target not in HARNESS_TARGETS:
        pytest.skip("depends on the broker's auto.create.topics.enable/num.partitions, set only by the harness")
    from confluent_kafka import Producer

    topic = _name("auto")
    p = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all"})
    got = []
    p.produce(topic, value=b"auto", on_delivery=lambda err, msg: got.append((err, msg.partition(), msg.offset())))
    assert p.flush(30) == 0
    assert got == [(None, 0, 0)], got
    create_topic_md = admin_client(bootstrap_servers).list_topics(topic, timeout=10).topics[topic]
    assert len(create_topic_md.partitions) == 1


def test_create_topic_helper_is_ready(bootstrap_servers):
    """The suite's own topic helper (create + wait for leaders) works on this broker."""
    topic = _name("helper")
    create_topic(bootstrap_servers, topic, 4)
    md = admin_client(bootstrap_servers).list_topics(topic, timeout=10).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2, 3]
