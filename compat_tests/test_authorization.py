"""Authorization (issue 11, item 3): every handler asks the authorizer what Apache Kafka's broker asks and answers
Kafka's error. A principal with only READ on one topic and its group (SASL PLAIN user alice) consumes it with
confluent-kafka, kafka-python and the Java client, but cannot write it (TOPIC_AUTHORIZATION_FAILED in the
delivery report), read or see other topics, join another group, delete or create topics, or touch broker
configs; a transactional producer without WRITE on its transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
A cluster whose nodes authenticate as a principal with CLUSTER_ACTION replicates and forwards admin requests.

The single-broker tests run kbroker's own ACL authorizer (``authorizer.class.name`` =
``org.apache.kafka.metadata.authorizer.StandardAuthorizer``) with the ACLs added by ``kbroker-acls --add``, one per
rule. The cluster test uses compat_tests/rules_authorizer.py (allow rules from a JSON file) instead: its nodes'
principal has nothing but CLUSTER_ACTION, which must hold before the quorum forms, i.e. before any ACL record can
be committed (with ACLs in the metadata log, Kafka's nodes are super users for the same reason).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from compat_tests.security_support import Wire, consume, produce
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeGroupsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListGroupsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(300)

AUTHORIZER = "compat_tests.rules_authorizer.RulesAuthorizer"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')

#: alice: READ on the topic ``readable`` and the group ``alice-group``; bob: a producer of ``bob-out`` allowed the
#: transactional id ``bob-ok`` and only allowed to describe ``bob-denied``. User:ANONYMOUS (the PLAINTEXT
#: listener: the test's own admin client and the harness) and User:admin are super users.
RULES = [
    {"principal": "User:alice", "operation": "READ", "resource_type": "TOPIC", "name": "readable"},
    {"principal": "User:alice", "operation": "READ", "resource_type": "GROUP", "name": "alice-group"},
    {"principal": "User:bob", "operation": "WRITE", "resource_type": "TOPIC", "name": "bob-out"},
    {"principal": "User:bob", "operation": "WRITE", "resource_type": "TRANSACTIONAL_ID", "name": "bob-ok"},
    {"principal": "User:bob", "operation": "DESCRIBE", "resource_type": "TRANSACTIONAL_ID", "name": "bob-denied"},
]


#: rule resource type -> kbroker-acls' resource flag
_RESOURCE_FLAGS = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}


def add_acls(bootstrap: str, rules: list[dict]) -> None:
    """Each rule as one ALLOW ACL (literal name, any host), added with ``kbroker-acls --add`` as a super user."""
    for r in rules:
        resource = (["--cluster"] if r["resource_type"] == "CLUSTER"
                    else [_RESOURCE_FLAGS[r["resource_type"]], r["name"]])
        done = subprocess.run([sys.executable, "-m", "kbroker.cli.acls", "--bootstrap-server", bootstrap, "--add",
                               "--allow-principal", r["principal"], "--operation", r["operation"].title(),
                               *resource], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done


def acl_broker(kbroker_factory, tmp_path, rules: list[dict]):  # noqa: ANN201
    """A broker with a PLAINTEXT listener (User:ANONYMOUS, a super user) and a SASL_PLAINTEXT one (PLAIN users
    admin, alice, bob), kbroker's ACL authorizer and ``rules`` as ACLs; returns (broker, SASL bootstrap)."""
    broker = kbroker_factory(start=False)
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SASL://127.0.0.1:{port}"
    broker.overrides.update({
        "listeners": listeners, "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS;User:admin"})
    broker.start()
    add_acls(broker.bootstrap, rules)
    return broker, f"127.0.0.1:{port}"


def conf(bootstrap: str, user: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


def first_error(c: Consumer, timeout: float = 20) -> KafkaError | None:
    """The first error a consumer reports (None if it reports none, or only records, within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            return m.error()
    return None


def wire_as(bootstrap: str, user: str) -> Wire:
    w = Wire(bootstrap)
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
    assert w.send(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-secret".encode()), 2).error_code == 0
    return w


def test_a_principal_with_read_on_one_topic(kbroker_factory, tmp_path, java_driver):
    broker, bootstrap = acl_broker(kbroker_factory, tmp_path, RULES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("readable", 2, 1), NewTopic("secret", 1, 1), NewTopic("bob-out", 1, 1)],
                                 operation_timeout=20).values():
        f.result(20)
    values = [f"r-{i}".encode() for i in range(40)]
    produce({"bootstrap.servers": broker.bootstrap}, "readable", values)
    produce({"bootstrap.servers": broker.bootstrap}, "secret", [b"classified"])
    alice = conf(bootstrap, "alice")

    # consumes its topic in its group, and commits there
    c = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["readable"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for m in c.consume(100, 0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    assert sorted(got) == sorted(values)
    c.commit(asynchronous=False)
    # (a partition the sticky partitioner left empty has no commit: -1001)
    assert sum(max(tp.offset, 0) for tp in c.committed([TopicPartition("readable", 0), TopicPartition("readable", 1)],
                                                       timeout=10)) == len(values)
    c.close()

    # cannot write it: the delivery report says TOPIC_AUTHORIZATION_FAILED
    reports: list = []
    p = Producer({**alice, "message.timeout.ms": 10000})
    p.produce("readable", b"nope", on_delivery=lambda err, msg: reports.append(err))
    p.produce("ghost", b"nope", on_delivery=lambda err, msg: reports.append(err))  # existence is not told either
    p.flush(20)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 2, reports

    # does not see the other topics; named, they are TOPIC_AUTHORIZATION_FAILED, and nothing is auto-created
    a = AdminClient(alice)
    assert set(a.list_topics(timeout=10).topics) == {"readable"}
    md = a.list_topics(topic="secret", timeout=10)
    assert md.topics["secret"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    w = wire_as(bootstrap, "alice")
    resp = w.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fresh")],
                                  allow_auto_topic_creation=True), 12)
    assert [(t.name, t.error_code) for t in resp.topics] == [("fresh", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert "fresh" not in admin.list_topics(timeout=10).topics

    # cannot read them either
    c = Consumer({**alice, "group.id": "alice-group", "auto.offset.reset": "earliest"})
    c.subscribe(["secret"])
    err = first_error(c)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    c.close()

    # cannot join another group, nor find, describe or list it
    c = Consumer({**alice, "group.id": "other-group", "auto.offset.reset": "earliest"})
    c.subscribe(["readable"])
    err = first_error(c)
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    c.close()
    found = w.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["other-group", "alice-group"]), 4)
    assert [(x.key, x.error_code) for x in found.coordinators] == [
        ("other-group", ErrorCode.GROUP_AUTHORIZATION_FAILED), ("alice-group", ErrorCode.NONE)]
    described = w.send(DescribeGroupsRequest(groups=["other-group"]), 5)
    assert described.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    listed = w.send(ListGroupsRequest(), 4)
    assert {g.group_id for g in listed.groups} == {"alice-group"}

    # a follower's Fetch needs CLUSTER_ACTION: alice's READ lets her fetch only as a consumer
    for replica_id, want in ((-1, ErrorCode.NONE), (1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)):
        fetched = w.send(FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                      topics=[FetchRequest.FetchTopic(topic="readable", partitions=[
                                          FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                      current_leader_epoch=-1, last_fetched_epoch=-1,
                                                                      partition_max_bytes=1 << 20)])]), 12)
        assert fetched.responses[0].partitions[0].error_code == want, (replica_id, fetched)

    # an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)
    assert w.send(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                        producer_epoch=-1), 4).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    w.close()

    # cannot create or delete topics, nor describe or alter broker configs
    fs = a.delete_topics(["readable", "secret", "missing"], operation_timeout=10)  # "missing": not describable
    for name, f in fs.items():
        with pytest.raises(Exception) as exc:
            f.result(20)
        assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (name, exc.value)
    with pytest.raises(Exception) as exc:
        a.create_topics([NewTopic("alices", 1, 1)])["alices"].result(20)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "1")
    alter = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[_set("log.cleaner.threads", "2")])
    for fut in (a.describe_configs([broker_res])[broker_res], a.incremental_alter_configs([alter])[alter]):
        with pytest.raises(KafkaException) as exc:
            fut.result(20)
        assert exc.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, exc.value
    assert set(admin.list_topics(timeout=10).topics) >= {"readable", "secret", "bob-out"}

    # kafka-python sees the same
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    kp_sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
               "sasl_plain_password": "alice-secret"}
    kc = KafkaConsumer("readable", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10000, **kp_sasl)
    assert sorted(m.value for m in kc) == sorted(values)
    kc.close()
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, **kp_sasl)
    with pytest.raises(TopicAuthorizationFailedError):
        kp.send("readable", b"nope").get(timeout=20)
    kp.close()

    # and the Java client
    java_sasl = ["--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=PLAIN", "--prop",
                 'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                 'username="alice" password="alice-secret";']
    done = java_driver.one(java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "readable", "--expect",
                                            str(len(values)), *java_sasl]), "done")
    assert done["count"] == len(values), done
    events = java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "secret", "--expect", "1",
                              "--timeout-ms", "10000", *java_sasl], check=False)
    assert java_driver.one(events, "error")["error_class"] == "TopicAuthorizationException", events
    events = java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "readable", "--count", "1",
                              "--idempotence", "false", *java_sasl], check=False)
    assert java_driver.one(events, "ack")["error_class"] == "TopicAuthorizationException", events
    assert java_driver.one(events, "done")["failed"] == 1

    # nothing alice tried reached the topics
    assert sorted(consume({"bootstrap.servers": broker.bootstrap}, "readable", len(values) + 1, timeout=10)) == \
        sorted(values)


def _set(name: str, value: str):  # noqa: ANN202
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def test_transactional_ids(kbroker_factory, tmp_path):
    """bob may use the transactional id ``bob-ok`` (a committed transaction reads back) but not ``bob-denied``
    (describe only): init_transactions fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    broker, bootstrap = acl_broker(kbroker_factory, tmp_path, RULES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("bob-out", 1, 1)])["bob-out"].result(20)
    bob = conf(bootstrap, "bob")
    p = Producer({**bob, "transactional.id": "bob-ok"})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce("bob-out", f"t-{i}".encode())
    p.commit_transaction(20)
    got = consume({"bootstrap.servers": broker.bootstrap, "isolation.level": "read_committed"}, "bob-out", 5)
    assert sorted(got) == [f"t-{i}".encode() for i in range(5)]

    p = Producer({**bob, "transactional.id": "bob-denied"})
    with pytest.raises(Exception) as exc:
        p.init_transactions(20)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, exc.value
    p = Producer({**bob, "transactional.id": "nobody-knows"})  # not even DESCRIBE: FindCoordinator refuses it
    with pytest.raises(Exception) as exc:
        p.init_transactions(20)
    assert exc.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, exc.value


@pytest.mark.kbroker_only("uses the Python authorizer plugin compat_tests/rules_authorizer.py: the nodes' principal "
                          "has CLUSTER_ACTION before any ACL can be committed, which StandardAuthorizer cannot express "
                          "without making it a super user")
def test_a_cluster_whose_nodes_have_cluster_action(tmp_path):
    """Three combined nodes whose controller and INTERNAL listeners authenticate the nodes as User:node, which has
    CLUSTER_ACTION on the cluster and nothing else: the quorum forms, an RF-3 topic replicates, and a CreateTopics
    sent to each node (a standby forwards it to the active controller, which lets it through for the forwarding
    node's CLUSTER_ACTION) creates the topic the client may create and refuses the other on the node it reached."""
    from compat_tests.security_support import add_internal_listener, replicate_and_read_back
    from kbroker.testing.cluster import KbrokerCluster, ask

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="node" '
            'password="node-secret" user_node="node-secret";')
    rules_file = tmp_path / "acl-rules.json"
    rules_file.write_text(json.dumps([
        {"principal": "User:node", "operation": "CLUSTER_ACTION", "resource_type": "CLUSTER", "name": "kafka-cluster"},
        {"principal": "User:ANONYMOUS", "operation": "ALL", "resource_type": "TOPIC", "name": "rep"},
        {"principal": "User:ANONYMOUS", "operation": "READ", "resource_type": "GROUP", "name": "*"},
        {"principal": "User:ANONYMOUS", "operation": "DESCRIBE", "resource_type": "CLUSTER", "name": "kafka-cluster"},
        *({"principal": "User:ANONYMOUS", "operation": "CREATE", "resource_type": "TOPIC", "name": f"ok-{i}"}
          for i in (1, 2, 3))]))
    cluster = KbrokerCluster(tmp_path / "cluster", nodes=3, overrides={
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas, "listener.name.controller.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": AUTHORIZER, "kbroker.test.acl.rules.file": str(rules_file)})
    add_internal_listener(cluster)
    with cluster:
        replicate_and_read_back(cluster, 500)
        for node_id in (1, 2, 3):
            host, port = cluster.nodes[node_id].bootstrap.rsplit(":", 1)
            req = CreateTopicsRequest(timeout_ms=20000, topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=3)
                for name in (f"ok-{node_id}", f"no-{node_id}")])
            resp = ask(host, int(port), 19, 7, req, CreateTopicsResponse, timeout=30)
            assert [(t.name, t.error_code) for t in resp.topics] == [
                (f"ok-{node_id}", ErrorCode.NONE), (f"no-{node_id}", ErrorCode.TOPIC_AUTHORIZATION_FAILED)], resp


def test_each_api_answers_kafkas_error(kbroker_factory, tmp_path):
    """The requests alice's clients did not send above, on the wire: each answers what Kafka's broker answers a
    principal with READ on ``readable`` and ``alice-group`` only (the authorized parts are still served)."""
    from kbroker.protocol import messages as m

    broker, bootstrap = acl_broker(kbroker_factory, tmp_path, RULES)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("readable", 1, 1), NewTopic("secret", 1, 1)]).values():
        f.result(20)
    w = wire_as(bootstrap, "alice")
    TAF, GAF, CAF, TXN = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                          ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

    deadline = time.monotonic() + 30  # the group coordinator (and __consumer_offsets) first
    while w.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["alice-group"]), 4).coordinators[0].error_code:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)

    def commit(group: str) -> dict[str, int]:
        r = w.send(m.OffsetCommitRequest(group_id=group, topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
            name=n, partitions=[m.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])
            for n in ("readable", "secret")]), 8)
        return {t.name: t.partitions[0].error_code for t in r.topics}

    # Kafka answers NOT_COORDINATOR (retriable) until its coordinator has loaded the offsets partition
    retriable = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    deadline = time.monotonic() + 30
    while (got := commit("alice-group"))["readable"] in retriable and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == {"readable": ErrorCode.NONE, "secret": TAF}
    assert commit("other-group") == {"readable": GAF, "secret": GAF}

    groups = [m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="alice-group", topics=[
        m.OffsetFetchRequest.OffsetFetchRequestTopics(name=n, partition_indexes=[0]) for n in ("readable", "secret")]),
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="alice-group", topics=None),
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id="other-group", topics=None)]
    r = w.send(m.OffsetFetchRequest(groups=groups), 8)
    named, every, other = r.groups
    assert {t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in named.topics} == {
        "readable": (ErrorCode.NONE, 0), "secret": (TAF, -1)}
    assert [t.name for t in every.topics] == ["readable"]  # the commit of secret was refused, none to leave out
    assert other.error_code == GAF
    r = w.send(m.OffsetFetchRequest(group_id="alice-group", topics=[
        m.OffsetFetchRequest.OffsetFetchRequestTopic(name="secret", partition_indexes=[0])]), 7)
    assert (r.error_code, r.topics[0].partitions[0].error_code) == (ErrorCode.NONE, TAF)

    r = w.send(m.OffsetDeleteRequest(group_id="alice-group", topics=[
        m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name="readable", partitions=[
            m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
    assert r.error_code == GAF  # DELETE on the group
    assert [x.error_code for x in w.send(m.DeleteGroupsRequest(groups_names=["alice-group"]), 2).results] == [GAF]

    def per_topic(resp, topics_attr: str, name_attr: str, parts_attr: str | None) -> dict[str, int]:
        out = {}
        for t in getattr(resp, topics_attr):
            out[getattr(t, name_attr)] = getattr(t, parts_attr)[0].error_code if parts_attr else t.error_code
        return out

    r = w.send(m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(name=n, partitions=[
        m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)]) for n in ("readable", "secret")]), 7)
    assert per_topic(r, "topics", "name", "partitions") == {"readable": ErrorCode.NONE, "secret": TAF}
    r = w.send(m.OffsetForLeaderEpochRequest(topics=[m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic=n, partitions=[m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])
        for n in ("readable", "secret")]), 4)
    assert per_topic(r, "topics", "topic", "partitions") == {"readable": ErrorCode.NONE, "secret": TAF}
    r = w.send(m.DescribeProducersRequest(topics=[m.DescribeProducersRequest.TopicRequest(
        name=n, partition_indexes=[0]) for n in ("readable", "secret")]), 0)
    assert per_topic(r, "topics", "name", "partitions") == {"readable": ErrorCode.NONE, "secret": TAF}
    r = w.send(m.DescribeTopicPartitionsRequest(topics=[m.DescribeTopicPartitionsRequest.TopicRequest(name=n)
                                                        for n in ("readable", "secret")]), 0)
    assert per_topic(r, "topics", "name", None) == {"readable": ErrorCode.NONE, "secret": TAF}
    assert [t.name for t in w.send(m.DescribeTopicPartitionsRequest(), 0).topics] == ["readable"]
    r = w.send(m.CreatePartitionsRequest(topics=[m.CreatePartitionsRequest.CreatePartitionsTopic(
        name="readable", count=2, assignments=None)], timeout_ms=10000), 3)
    assert [x.error_code for x in r.results] == [TAF]  # ALTER on the topic
    r = w.send(m.DeleteRecordsRequest(topics=[m.DeleteRecordsRequest.DeleteRecordsTopic(name="readable", partitions=[
        m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=10000), 2)
    assert r.topics[0].partitions[0].error_code == TAF  # DELETE on the topic
    r = w.send(m.DescribeConfigsRequest(resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name="readable", configuration_keys=None)]), 4)
    assert r.results[0].error_code == TAF  # DESCRIBE_CONFIGS on the topic

    assert w.send(m.ConsumerGroupHeartbeatRequest(group_id="other-group", member_epoch=0, rebalance_timeout_ms=30000,
                                                  subscribed_topic_names=["readable"], topic_partitions=[]),
                  0).error_code == GAF
    assert w.send(m.ConsumerGroupHeartbeatRequest(group_id="alice-group", member_epoch=0, rebalance_timeout_ms=30000,
                                                  subscribed_topic_names=["readable", "secret"], topic_partitions=[]),
                  0).error_code == TAF

    assert w.send(m.DescribeTransactionsRequest(transactional_ids=["bob-ok"]), 0).transaction_states[0].error_code == TXN
    assert w.send(m.ListTransactionsRequest(), 0).transaction_states == []
    assert w.send(m.AddOffsetsToTxnRequest(transactional_id="t", group_id="alice-group"), 3).error_code == TXN
    assert w.send(m.EndTxnRequest(transactional_id="t", committed=True), 3).error_code == TXN
    r = w.send(m.TxnOffsetCommitRequest(transactional_id="t", group_id="alice-group", topics=[
        m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="readable", partitions=[
            m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=0)])]), 3)
    assert r.topics[0].partitions[0].error_code == TXN
    r = w.send(m.AddPartitionsToTxnRequest(v3_and_below_transactional_id="t", v3_and_below_topics=[
        m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="readable", partitions=[0])]), 3)
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == TXN
    r = w.send(m.AddPartitionsToTxnRequest(transactions=[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id="t", verify_only=True, topics=[])]), 4)
    assert r.error_code == CAF  # v4+ is the brokers' own (CLUSTER_ACTION)

    r = w.send(m.ElectLeadersRequest(election_type=0, topic_partitions=[m.ElectLeadersRequest.TopicPartitions(
        topic="readable", partitions=[0])]), 2)
    assert (r.error_code, r.replica_election_results[0].partition_result[0].error_code) == (CAF, CAF)
    assert w.send(m.ListPartitionReassignmentsRequest(topics=None), 0).error_code == CAF
    assert w.send(m.AlterPartitionReassignmentsRequest(topics=[]), 0).error_code == CAF
    assert w.send(m.DescribeLogDirsRequest(topics=None), 4).error_code == CAF
    assert w.send(m.DescribeQuorumRequest(topics=[]), 2).error_code == CAF
    r = w.send(m.WriteTxnMarkersRequest(markers=[m.WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
        topics=[m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="readable", partition_indexes=[0])])]), 1)
    assert r.markers[0].topics[0].partitions[0].error_code == CAF
    w.close()


def test_prefixed_acls_and_deny_precedence(kbroker_factory, tmp_path):
    """Prefixed ACLs and DENY over ALLOW, enforced for a real consumer and producer: alice may read and write every
    topic starting with ``team-`` and use every group starting with ``g-`` (PREFIXED ACLs added with kbroker-acls;
    ``security_support.consume`` names its groups ``g-<n>``), but a literal DENY Read on ``team-payroll`` wins over the prefixed ALLOW; a topic outside the
    prefix stays refused. Removing the DENY (kbroker-acls --remove) lets her read it."""
    broker, bootstrap = acl_broker(kbroker_factory, tmp_path, [])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("team-orders", "team-payroll", "other")]).values():
        f.result(20)
    for t in ("team-orders", "team-payroll", "other"):
        produce({"bootstrap.servers": broker.bootstrap}, t, [f"{t}-{i}".encode() for i in range(5)])

    def acls(*argv: str) -> None:
        done = subprocess.run([sys.executable, "-m", "kbroker.cli.acls", "--bootstrap-server", broker.bootstrap,
                               "--force", *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done

    acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write", "--topic",
         "team-", "--resource-pattern-type", "prefixed")
    acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "g-",
         "--resource-pattern-type", "prefixed")
    acls("--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "team-payroll")
    alice = conf(bootstrap, "alice")

    assert sorted(consume(alice, "team-orders", 5)) == [
        f"team-orders-{i}".encode() for i in range(5)]
    produce(alice, "team-orders", [b"from-alice"])  # Write under the prefix
    for topic in ("team-payroll", "other"):
        c = Consumer({**alice, "group.id": "g-b", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        err = first_error(c)
        c.close()
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, err)
    # the DENY covers Read only: Write under the prefix still goes through, Describe (implied by Write) too
    produce(alice, "team-payroll", [b"deposit"])
    assert "team-payroll" in AdminClient(alice).list_topics(timeout=10).topics

    acls("--remove", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "team-payroll")
    got = consume(alice, "team-payroll", 6)
    assert sorted(got) == sorted([f"team-payroll-{i}".encode() for i in range(5)] + [b"deposit"])
