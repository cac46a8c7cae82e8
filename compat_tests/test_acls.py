"""ACLs (KIP-140 admin API, KIP-801 ACLs in the metadata log) managed by real clients and tools against real
brokers running kbroker's StandardAuthorizer.

confluent-kafka's, kafka-python's and the Java admin clients create, describe and delete ACLs and get Kafka's
errors (INVALID_REQUEST with the controller's messages, SECURITY_DISABLED without an authorizer); ``kbroker-acls``
is run as ``kafka-acls.sh`` is (--add / --list / --remove, --producer / --consumer, prefixed patterns); the ACLs
survive a restart; a SASL PLAIN user needs ALTER on the cluster to create ACLs (a super user always may, and an ACL a super
user grants lets the user do it); in a 3-node cluster ACLs created through any node (forwarded to the active
controller) are described by every node, also after a restart of every node. Whether the other APIs enforce the
ACLs is tested where the handlers check them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AdminClient,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.clients import admin_client
from compat_tests.test_sasl import rdkafka_conf, sasl_broker

pytestmark = pytest.mark.timeout(240)

STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
OPEN = {**STANDARD, "super.users": "User:ANONYMOUS"}  # the PLAINTEXT listener's clients may manage ACLs
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
CLUSTER = ResourceType.BROKER  # confluent-kafka's name of code 4, Kafka's CLUSTER
EVERY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)


def binding(name: str, op: Any = AclOperation.READ, perm: Any = ALLOW, principal: str = "User:alice",
            rtype: Any = ResourceType.TOPIC, pattern: Any = LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def key(b: Any) -> tuple:
    return ("CLUSTER" if b.restype == CLUSTER else b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission_type.name)


def create(admin: Any, bindings: list[Any]) -> list[Any]:
    """None (created) or (error code, message) per binding, in order."""
    futures = admin.create_acls(bindings, request_timeout=15)
    out = []
    for b in bindings:
        try:
            futures[b].result(20)
            out.append(None)
        except KafkaException as exc:
            out.append((exc.args[0].code(), exc.args[0].str()))
    return out


def describe(admin: Any, acl_filter: Any = EVERY) -> list[tuple]:
    return sorted(key(b) for b in admin.describe_acls(acl_filter, request_timeout=15).result(20))


def tool(*args: Any, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run ``kbroker-acls`` (``python -m kbroker.cli.acls``) as a user would."""
    proc = subprocess.run([sys.executable, "-m", "kbroker.cli.acls", *map(str, args)], capture_output=True,
                          text=True, timeout=90, input=stdin, env={**os.environ, "KBROKER_CLI_TIMEOUT_S": "15"})
    if ok:
        assert proc.returncode == 0, f"kbroker-acls {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


# ------------------------------------------------------------------------------------- confluent-kafka


def test_confluent_create_describe_delete_round_trip_and_restart(kbroker_factory):
    broker = kbroker_factory(OPEN)
    admin = admin_client(broker.bootstrap)
    good = [
        binding("orders"),
        binding("orders", AclOperation.WRITE, DENY, "User:bob", host="10.1.2.3"),
        binding("fin-", AclOperation.ALL, pattern=PREFIXED),
        binding("*", AclOperation.DESCRIBE, principal="User:*"),
        binding("billing", rtype=ResourceType.GROUP),
        binding("kafka-cluster", AclOperation.IDEMPOTENT_WRITE, rtype=CLUSTER),
        binding("tx-", AclOperation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID, pattern=PREFIXED),
    ]
    assert create(admin, good) == [None] * len(good)
    assert create(admin, [binding("orders")]) == [None]  # already there: not added twice
    bad = [binding("other", rtype=CLUSTER), binding("t", principal="alice")]
    assert create(admin, bad) == [
        (KafkaError.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (KafkaError.INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present separating the "
                                     "principal type from the principal name)")]
    everything = sorted(key(b) for b in good)
    assert describe(admin) == everything

    # filters: MATCH gives what applies to a topic name, LITERAL / PREFIXED / principal / operation narrow it
    match_fin = AclBindingFilter(ResourceType.TOPIC, "fin-ledger", ResourcePatternType.MATCH, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    assert [k[1] for k in describe(admin, match_fin)] == ["*", "fin-"]
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert describe(admin, bob) == [("TOPIC", "orders", "LITERAL", "User:bob", "10.1.2.3", "WRITE", "DENY")]
    groups = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None, AclOperation.READ,
                              AclPermissionType.ALLOW)
    assert describe(admin, groups) == [("GROUP", "billing", "LITERAL", "User:alice", "*", "READ", "ALLOW")]

    # delete: each filter lists what it matched; an ACL matched twice goes once
    orders = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    futures = admin.delete_acls([orders, bob], request_timeout=15)
    assert sorted(key(b) for b in futures[orders].result(20)) == [
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:bob", "10.1.2.3", "WRITE", "DENY")]
    assert [key(b)[1] for b in futures[bob].result(20)] == ["orders"]
    left = [k for k in everything if k[1] != "orders"]
    assert describe(admin) == left

    broker.restart()  # replayed from the metadata log
    assert describe(admin_client(broker.bootstrap)) == left
    # and from a snapshot
    broker.stop()
    broker.overrides["metadata.log.max.snapshot.interval.ms"] = "1"
    broker.start()
    admin = admin_client(broker.bootstrap)
    assert create(admin, [binding("after-snapshot")]) == [None]
    assert list(Path(broker.log_dirs).glob("__cluster_metadata-0/*.checkpoint")), "no metadata snapshot written"
    broker.restart()
    assert describe(admin_client(broker.bootstrap)) == sorted(
        left + [("TOPIC", "after-snapshot", "LITERAL", "User:alice", "*", "READ", "ALLOW")])


def _kp_filter_everything() -> Any:
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
    from kafka.admin import ResourceType as KResourceType

    return ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(KResourceType.ANY, None, ACLResourcePatternType.ANY))


def test_security_disabled_without_an_authorizer(kbroker_factory):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import SecurityDisabledError

    broker = kbroker_factory()
    admin = admin_client(broker.bootstrap)
    assert create(admin, [binding("t")]) == [(KafkaError.SECURITY_DISABLED, "No Authorizer is configured.")]
    # DescribeAcls answers the error at the top level, which librdkafka 2.x drops (its result is an empty list):
    # kafka-python reads it
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured on the broker"):
            kadmin.describe_acls(_kp_filter_everything())
    finally:
        kadmin.close()
    f = admin.delete_acls([EVERY], request_timeout=15)[EVERY]
    with pytest.raises(KafkaException) as info:
        f.result(20)
    assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_kafka_python_admin_client(kbroker_factory):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType as KResourceType,
    )

    broker = kbroker_factory(OPEN)
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        acl = ACL(principal="User:carol", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED))
        created = kadmin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1, created
        any_filter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, "kp-topic",
                                                                      ACLResourcePatternType.MATCH))
        deadline = time.monotonic() + 20  # the broker's authorizer has the ACL once it applied the record
        acls, error = kadmin.describe_acls(any_filter)
        while not acls and time.monotonic() < deadline:
            time.sleep(0.2)
            acls, error = kadmin.describe_acls(any_filter)
        assert error.errno == 0 and [(a.principal, a.resource_pattern.resource_name) for a in acls] == [
            ("User:carol", "kp-")]
        deleted = kadmin.delete_acls([any_filter])
        assert [(f is any_filter, [a.principal for a in matched], err.errno) for f, matched, err in deleted] == [
            (True, ["User:carol"], 0)]
        deadline = time.monotonic() + 20
        while kadmin.describe_acls(any_filter)[0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert kadmin.describe_acls(any_filter)[0] == []
    finally:
        kadmin.close()


# ------------------------------------------------------------------------------------- kbroker-acls


def test_kbroker_acls_add_list_remove(kbroker_factory):
    broker = kbroker_factory(OPEN)
    base = ["--bootstrap-server", broker.bootstrap]
    out = tool(*base, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "describe",
               "--topic", "orders", "--group", "billing").stdout
    topic = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"
    group = "ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)"
    read = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
    desc = "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    assert out.startswith(f"Adding ACLs for resource `{topic}`: \n \t{desc}\n\t{read} \n\n"), out
    assert f"Current ACLs for resource `{topic}`: \n \t{desc}\n\t{read} \n\n" in out, out
    assert f"Current ACLs for resource `{group}`: \n \t{desc}\n\t{read} \n\n" in out, out

    # --producer / --consumer, a deny with a host, prefixed patterns
    tool(*base, "--add", "--allow-principal", "User:bob", "--producer", "--topic", "orders", "--idempotent",
         "--transactional-id", "bob-tx")
    tool(*base, "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "fin-", "--group", "fin-",
         "--resource-pattern-type", "prefixed")
    tool(*base, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.66", "--operation", "All",
         "--topic", "*")
    acls = describe(admin_client(broker.bootstrap))
    assert [a for a in acls if a[3] == "User:bob"] == [
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "*", "IDEMPOTENT_WRITE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:bob", "*", "CREATE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:bob", "*", "WRITE", "ALLOW"),
        ("TRANSACTIONAL_ID", "bob-tx", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW"),
        ("TRANSACTIONAL_ID", "bob-tx", "LITERAL", "User:bob", "*", "WRITE", "ALLOW")]
    assert [a for a in acls if a[3] == "User:carol"] == [
        ("GROUP", "fin-", "PREFIXED", "User:carol", "*", "READ", "ALLOW"),
        ("TOPIC", "fin-", "PREFIXED", "User:carol", "*", "DESCRIBE", "ALLOW"),
        ("TOPIC", "fin-", "PREFIXED", "User:carol", "*", "READ", "ALLOW")]
    assert [a for a in acls if a[3] == "User:mallory"] == [
        ("TOPIC", "*", "LITERAL", "User:mallory", "10.0.0.66", "ALL", "DENY")]

    # --list: everything, one resource, one principal, the ACLs that match a name
    every = tool(*base, "--list").stdout
    assert every.count("Current ACLs for resource") == 7, every
    one = tool(*base, "--list", "--topic", "orders").stdout
    assert one.count("Current ACLs for resource") == 1 and "User:bob" in one and "User:carol" not in one, one
    bob = tool(*base, "--list", "--principal", "User:bob").stdout
    assert bob.startswith("ACLs for principal `User:bob`\n") and "User:alice" not in bob, bob
    assert bob.count("Current ACLs for resource") == 3, bob
    matched = tool(*base, "--list", "--topic", "fin-reports", "--resource-pattern-type", "match").stdout
    assert [line.split("`")[1] for line in matched.splitlines() if line.startswith("Current")] == [
        "ResourcePattern(resourceType=TOPIC, name=*, patternType=LITERAL)",
        "ResourcePattern(resourceType=TOPIC, name=fin-, patternType=PREFIXED)"], matched

    # --remove: one ACL with confirmation, then a whole resource with --force
    answered_no = tool(*base, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic",
                       "orders", stdin="n\n").stdout
    assert answered_no.startswith(f"Are you sure you want to remove ACLs: \n \t{read} \n from resource filter "
                                  f"`{topic}`? (y/n)\n"), answered_no
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW") in describe(admin_client(
        broker.bootstrap))
    tool(*base, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
         stdin="y\n")
    left = describe(admin_client(broker.bootstrap))
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW") not in left
    assert ("TOPIC", "orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW") in left
    tool(*base, "--remove", "--force", "--consumer", "--allow-principal", "User:carol", "--topic", "fin-",
         "--group", "fin-", "--resource-pattern-type", "prefixed")
    tool(*base, "--remove", "--force", "--topic", "orders")
    left = describe(admin_client(broker.bootstrap))
    assert not [a for a in left if a[1] in ("orders", "fin-")], left

    # argument errors as kafka-acls.sh words them
    def refused(*args: str) -> str:
        proc = tool(*base, *args, ok=False)
        assert proc.returncode == 1, proc
        return proc.stderr

    assert "With --consumer you must specify a --topic and a --group" in refused(
        "--add", "--allow-principal", "User:x", "--consumer", "--topic", "t")
    assert "You must specify one of: --allow-principal, --deny-principal" in refused("--add", "--topic", "t")
    assert "not valid when adding acls" in refused("--add", "--allow-principal", "User:x", "--topic", "t",
                                                   "--resource-pattern-type", "match")
    assert "ResourceType GROUP only supports operations" in refused(
        "--add", "--allow-principal", "User:x", "--operation", "Write", "--group", "g")
    assert "Could not parse principal from `alice`" in refused("--add", "--allow-principal", "alice", "--topic", "t")
    assert tool("--version").stdout.startswith("kbroker")


# ------------------------------------------------------------------------------------- SASL principals


def test_sasl_user_needs_alter_on_the_cluster(kbroker_factory):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError

    broker, bootstrap = sasl_broker(kbroker_factory, {**STANDARD, "super.users": "User:admin"})
    alice = AdminClient(rdkafka_conf(bootstrap, "alice", "alice-secret"))
    admin = AdminClient(rdkafka_conf(bootstrap, "admin", "admin-secret"))
    denied = (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    got = create(alice, [binding("t1"), binding("t2")])
    if broker.target == "kbroker":
        assert got == [denied, denied]
    else:  # Kafka's message is its controller's internal text (the forwarded request and its connection)
        assert [code for code, _ in got] == [KafkaError.CLUSTER_AUTHORIZATION_FAILED] * 2, got
    # DescribeAcls answers the error at the top level (asked with kafka-python)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="alice", sasl_plain_password="alice-secret", request_timeout_ms=15_000)
    try:
        everything = _kp_filter_everything()
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(everything)
        # the super user may, and grants alice ALTER and DESCRIBE on the cluster
        assert create(admin, [binding("kafka-cluster", AclOperation.ALTER, rtype=CLUSTER)]) == [None]
        assert create(alice, [binding("t1")]) == [None]
        # ALTER implies DESCRIBE: alice may list now
        acls, error = kp.describe_acls(everything)
        assert error.errno == 0 and sorted(a.resource_pattern.resource_name for a in acls) == ["kafka-cluster", "t1"]
        # a DENY for alice's host wins over the ALLOW
        assert create(admin, [binding("kafka-cluster", AclOperation.ALTER, DENY, rtype=CLUSTER,
                                      host="127.0.0.1")]) == [None]
        again = create(alice, [binding("t2")])  # Kafka's message: see above
        assert again == [denied] if broker.target == "kbroker" else again[0][0] == denied[0], again
        assert describe(admin) == sorted([
            ("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*", "ALTER", "ALLOW"),
            ("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "127.0.0.1", "ALTER", "DENY"),
            ("TOPIC", "t1", "LITERAL", "User:alice", "*", "READ", "ALLOW")])
    finally:
        kp.close()


# ------------------------------------------------------------------------------------- a cluster


def _describe_on(cluster: Any, node_id: int) -> list[tuple]:
    """DescribeAcls (everything) sent to node ``node_id`` itself."""
    from kbroker.protocol.messages import DescribeAclsRequest as Req
    from kbroker.protocol.messages import DescribeAclsResponse as Resp
    from kbroker.testing.cluster import ask

    req = Req(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
              host_filter=None, operation=1, permission_type=1)
    resp = ask(cluster.host, cluster.nodes[node_id].port, 29, 3, req, Resp)
    assert resp.error_code == 0, resp
    return sorted((r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                   a.permission_type) for r in resp.resources for a in r.acls)


def test_cluster_acls_everywhere_and_across_a_full_restart(tmp_path):
    from kbroker.protocol.messages import CreateAclsRequest as Req
    from kbroker.protocol.messages import CreateAclsResponse as Resp
    from kbroker.testing.cluster import KbrokerCluster, ask, wait_every_node

    cluster = KbrokerCluster(tmp_path, nodes=3, overrides=OPEN)
    try:
        cluster.start()
        active = cluster.controller_id()
        standby = next(i for i in cluster.broker_ids if i != active)
        # confluent-kafka bootstrapped at a standby
        admin = admin_client(cluster.nodes[standby].bootstrap)
        assert create(admin, [binding("everywhere"), binding("p-", pattern=PREFIXED)]) == [None, None]
        # and a request sent to the standby itself: forwarded, answered once the quorum committed it
        req = Req(creations=[Req.AclCreation(resource_type=2, resource_name="direct", resource_pattern_type=3,
                                             principal="User:bob", host="*", operation=4, permission_type=2),
                             Req.AclCreation(resource_type=2, resource_name="", resource_pattern_type=3,
                                             principal="User:bob", host="*", operation=4, permission_type=2)])
        resp = ask(cluster.host, cluster.nodes[standby].port, 30, 3, req, Resp, timeout=20)
        assert [(r.error_code, r.error_message) for r in resp.results] == [
            (0, ""), (KafkaError.INVALID_REQUEST, "Invalid empty resource name")]
        want = sorted([(2, "direct", 3, "User:bob", "*", 4, 2), (2, "everywhere", 3, "User:alice", "*", 3, 3),
                       (2, "p-", 4, "User:alice", "*", 3, 3)])
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i), want)
        # a delete through another standby (or the active controller)
        other = next(i for i in cluster.broker_ids if i != standby)
        everywhere = AclBindingFilter(ResourceType.TOPIC, "everywhere", ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        other_admin = admin_client(cluster.nodes[other].bootstrap)
        deleted = other_admin.delete_acls([everywhere], request_timeout=15)
        assert [key(b)[1] for b in deleted[everywhere].result(20)] == ["everywhere"]
        want = [w for w in want if w[1] != "everywhere"]
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i), want)

        cluster.stop()
        cluster.start()
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i), want)
    finally:
        cluster.stop()


# ------------------------------------------------------------------------------------- the Java client


def test_java_admin_client(kbroker_factory, java_driver):
    broker = kbroker_factory(OPEN)
    base = ["--bootstrap", broker.bootstrap]
    created = java_driver.one(java_driver.run(
        ["admin", "create-acls", *base, "--acl", "TOPIC,jv,LITERAL,User:dave,*,READ,ALLOW",
         "--acl", "GROUP,jv-,PREFIXED,User:dave,10.0.0.1,ALL,DENY",
         "--acl", "TOPIC,x,LITERAL,dave,*,READ,ALLOW"]), "created-acls")
    assert [(r["acl"].split(",")[1], r["error_class"]) for r in created["results"]] == [
        ("jv", None), ("jv-", None), ("x", "InvalidRequestException")]
    assert "Could not parse principal from `dave`" in created["results"][2]["message"]
    match = "GROUP,jv-group,MATCH,,,ANY,ANY"
    assert java_driver.one(java_driver.run(["admin", "describe-acls", *base, "--acl", match]), "acls")["acls"] == [
        "GROUP,jv-,PREFIXED,User:dave,10.0.0.1,ALL,DENY"]
    deleted = java_driver.one(java_driver.run(["admin", "delete-acls", *base, "--acl", "ANY,,ANY,User:dave,,ANY,ANY"]),
                              "deleted-acls")
    assert deleted["results"] == [["GROUP,jv-,PREFIXED,User:dave,10.0.0.1,ALL,DENY",
                                   "TOPIC,jv,LITERAL,User:dave,*,READ,ALLOW"]]
    everything = "ANY,,ANY,,,ANY,ANY"
    assert java_driver.one(java_driver.run(["admin", "describe-acls", *base, "--acl", everything]),
                           "acls")["acls"] == []

    plain = kbroker_factory()  # no authorizer: the Java client reports DescribeAcls' top-level error
    events = java_driver.run(["admin", "describe-acls", "--bootstrap", plain.bootstrap, "--acl", everything],
                             check=False)
    error = java_driver.one(events, "error")
    assert error["error_class"] == "SecurityDisabledException", events
    assert error["message"] == "No Authorizer is configured on the broker"


# ------------------------------------------------------------------------------------- the authorizer's log


@pytest.mark.kbroker_only("kbroker's kbroker.authorizer log lines")
def test_denials_are_logged_on_the_authorizer_logger(kbroker_factory, tmp_path):
    """Each denied operation is one INFO line on ``kbroker.authorizer`` in the shape of Kafka's authorizer log
    (principal, operation, host, resource, request), an identical one at most once per 10 s; allowed operations
    are not logged at INFO, nor the topics a listing of every topic leaves out."""
    from compat_tests.test_cli_tools import cli
    from confluent_kafka.admin import NewTopic

    broker, bootstrap = sasl_broker(kbroker_factory, {**STANDARD, "super.users": "User:admin"})
    admin = AdminClient(rdkafka_conf(bootstrap, "admin", "admin-secret"))
    admin.create_topics([NewTopic("secret", 1, 1), NewTopic("open", 1, 1)])["secret"].result(30)
    assert create(admin, [binding("open", AclOperation.DESCRIBE)]) == [None]
    conf = tmp_path / "alice.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" "
                    "password=\"alice-secret\";\n")
    base = ["--bootstrap-server", bootstrap, "--command-config", conf]
    listed = cli("kbroker-topics", *base, "--list").stdout.split()
    assert listed == ["open"], listed
    alice = AdminClient(rdkafka_conf(bootstrap, "alice", "alice-secret"))
    for _ in range(5):  # Metadata requests naming the topic, each refused
        md = alice.list_topics("secret", timeout=10)
        assert md.topics["secret"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, md.topics
    got = create(alice, [binding("x")])
    assert got[0] is not None and got[0][0] == KafkaError.CLUSTER_AUTHORIZATION_FAILED, got
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "operation = ALTER" not in broker.log_text():
        time.sleep(0.1)
    lines = [line for line in broker.log_text().splitlines() if " kbroker.authorizer: " in line]
    assert all(" INFO " in line and " is Denied " in line for line in lines), lines
    assert any(line.endswith("Principal = User:alice is Denied operation = DESCRIBE from host = 127.0.0.1 on "
                             "resource = Topic:LITERAL:secret for request = Metadata") for line in lines), lines
    assert any(line.endswith("Principal = User:alice is Denied operation = ALTER from host = 127.0.0.1 on "
                             "resource = Cluster:LITERAL:kafka-cluster for request = CreateAcls")
               for line in lines), lines
    # the listing of every topic logged nothing, and the same denial repeated within 10 s is logged once
    assert sum("Topic:LITERAL:secret for request = Metadata" in line for line in lines) == 1, lines
    assert len(lines) == 2, lines
