"""SCRAM credentials (KIP-554) managed by real clients and tools against real brokers.

confluent-kafka's AdminClient alters and describes credentials (AlterUserScramCredentials /
DescribeUserScramCredentials) and gets each of Kafka's per-user errors; kafka-python's admin client sends what
librdkafka refuses to send (an unknown mechanism, an empty user name, a user described twice).
``kbroker-configs --entity-type users`` and ``kbroker-storage format --add-scram`` are run as a user runs them; an
authorizer that denies the CLUSTER operations gets CLUSTER_AUTHORIZATION_FAILED. In a 3-node cluster a credential
altered through a node that is not the active controller (forwarded) is described by every node, as are the ones
every node was formatted with, and all survive a restart of every node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from compat_tests.clients import admin_client
from compat_tests.conftest import unique

pytestmark = pytest.mark.timeout(180)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def _upsert(user: str, mechanism: Any = SHA256, iterations: int = 8192, password: bytes = b"secret") -> Any:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password)


def alter(admin: Any, alterations: list[Any]) -> dict[str, Any]:
    """user -> None (done) or (error code, message), from confluent-kafka's futures."""
    out: dict[str, Any] = {}
    for user, fut in admin.alter_user_scram_credentials(alterations, request_timeout=15).items():
        try:
            fut.result(20)
            out[user] = None
        except KafkaException as exc:
            out[user] = (exc.args[0].code(), exc.args[0].str())
    return out


def described(admin: Any, user: str) -> Any:
    """[(mechanism, iterations)] of ``user`` by mechanism (Kafka answers them in no set order), or (error code,
    message)."""
    try:
        desc = admin.describe_user_scram_credentials([user], request_timeout=15)[user].result(20)
    except KafkaException as exc:
        return exc.args[0].code(), exc.args[0].str()
    assert desc.user == user
    return sorted(((i.mechanism, i.iterations) for i in desc.scram_credential_infos), key=lambda x: x[0].value)


def described_all(admin: Any) -> dict[str, list[tuple[Any, int]]]:
    everyone = admin.describe_user_scram_credentials(request_timeout=15).result(20)
    return {u: sorted(((i.mechanism, i.iterations) for i in d.scram_credential_infos), key=lambda x: x[0].value)
            for u, d in everyone.items()}


def tool(name: str, *args: Any, ok: bool = True) -> subprocess.CompletedProcess:
    """Run ``kbroker-<name>`` (``python -m kbroker.cli.<name>``) as a user would."""
    proc = subprocess.run([sys.executable, "-m", f"kbroker.cli.{name}", *map(str, args)], capture_output=True,
                          text=True, timeout=90, env={**os.environ, "KBROKER_CLI_TIMEOUT_S": "15"})
    if ok:
        assert proc.returncode == 0, f"kbroker-{name} {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


# ------------------------------------------------------------------------------------- confluent-kafka


@pytest.mark.kafka_reference
def test_confluent_alter_describe_round_trip_and_errors(bootstrap_servers):
    admin = admin_client(bootstrap_servers)
    alice, bob, carol = unique("scram-alice"), unique("scram-bob"), unique("scram-carol")

    assert alter(admin, [_upsert(alice, SHA256, 8192), _upsert(bob, SHA512, 4096)]) == {alice: None, bob: None}
    assert described(admin, alice) == [(SHA256, 8192)]
    assert alter(admin, [_upsert(alice, SHA512, 16384, b"other")]) == {alice: None}
    assert described(admin, alice) == [(SHA256, 8192), (SHA512, 16384)]
    everyone = described_all(admin)
    assert everyone[alice] == [(SHA256, 8192), (SHA512, 16384)] and everyone[bob] == [(SHA512, 4096)]
    assert carol not in everyone

    duplicate = (KafkaError.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    assert alter(admin, [_upsert(carol, SHA256), _upsert(carol, SHA512)]) == {carol: duplicate}
    assert alter(admin, [UserScramCredentialDeletion(bob, SHA512), _upsert(bob, SHA256)]) == {bob: duplicate}
    assert alter(admin, [_upsert(carol, SHA256, 4095)]) == {
        carol: (KafkaError.UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
    assert alter(admin, [_upsert(carol, SHA256, 16385)]) == {
        carol: (KafkaError.UNACCEPTABLE_CREDENTIAL, "Too many iterations")}
    assert alter(admin, [UserScramCredentialDeletion(carol, SHA256)]) == {
        carol: (KafkaError.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
    code, message = described(admin, carol)
    # librdkafka 2.16 copies one byte past the end of this message (a trailing "\x01"; kafka-python reads it
    # exactly, below), so only its start is compared
    assert code == KafkaError.RESOURCE_NOT_FOUND
    assert message.startswith(f"Attempt to describe a user credential that does not exist: {carol}"), message
    assert described(admin, bob) == [(SHA512, 4096)]  # the refused requests changed nothing

    # one request, several users: each gets its own result, the valid ones are applied
    assert alter(admin, [UserScramCredentialDeletion(alice, SHA256), _upsert(carol, SHA256, 100),
                         UserScramCredentialDeletion(bob, SHA512)]) == {
        alice: None, bob: None, carol: (KafkaError.UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
    assert described(admin, alice) == [(SHA512, 16384)]
    assert described(admin, bob)[0] == KafkaError.RESOURCE_NOT_FOUND
    assert bob not in described_all(admin)


def test_kafka_python_sends_what_librdkafka_refuses(bootstrap_servers):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import ScramMechanism as KpMechanism
    from kafka.admin import UserScramCredentialDeletion as KpDeletion
    from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

    dave, erin = unique("scram-dave"), unique("scram-erin")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=15_000)
    try:
        assert admin.alter_user_scram_credentials([
            KpUpsertion(dave, KpMechanism.SCRAM_SHA_256, "pw", iterations=4096),
            KpDeletion(erin, KpMechanism.UNKNOWN),
            KpUpsertion("", KpMechanism.SCRAM_SHA_512, "pw"),
        ]) == {dave: None, erin: "Unknown SCRAM mechanism", "": "Username must not be empty"}
        got = admin.describe_user_scram_credentials([dave, erin, erin, "nobody-" + dave])
        assert got["nobody-" + dave] == {"error": "Attempt to describe a user credential that does not exist: "
                                                  f"nobody-{dave}", "credential_infos": []}
        assert got[dave] == {"error": None, "credential_infos": [
            {"mechanism": KpMechanism.SCRAM_SHA_256, "iterations": 4096}]}
        assert got[erin] == {"error": "Cannot describe SCRAM credentials for the same user twice in a single "
                                      f"request: {erin}", "credential_infos": []}
        assert dave in admin.describe_user_scram_credentials(None)
    finally:
        admin.close()


@pytest.mark.kbroker_only("uses the Python authorizer plugin compat_tests/deny_cluster_authorizer.py")
def test_cluster_authorization_failed_for_every_user(kbroker_factory):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError

    broker = kbroker_factory({"authorizer.class.name": "compat_tests.deny_cluster_authorizer.DenyClusterAlterDescribe"})
    denied = (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    assert alter(admin_client(broker.bootstrap), [_upsert("alice"), UserScramCredentialDeletion("bob", SHA512)]) == {
        "alice": denied, "bob": denied}
    # Describe: a top-level error (librdkafka 2.16 aborts the process on any such answer, so kafka-python asks)
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        for users in (None, ["alice"]):
            with pytest.raises(ClusterAuthorizationFailedError):
                kadmin.describe_user_scram_credentials(users)
    finally:
        kadmin.close()
    out = tool("configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "users", ok=False)
    assert out.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed." in out.stderr, out


# ------------------------------------------------------------------------------------- the tools


def test_kbroker_configs_users(bootstrap_servers):
    alice = unique("scram-cfg")
    base = ["--bootstrap-server", bootstrap_servers, "--entity-type", "users"]
    out = tool("configs", *base, "--entity-name", alice, "--alter",
               "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]").stdout
    assert out == f"Completed updating config for user {alice}.\n"
    tool("configs", "--bootstrap-server", bootstrap_servers, "--user", alice, "--alter",
         "--add-config", "SCRAM-SHA-512=[password=alice-secret]")
    # the tool lists the mechanisms in the broker's order, which Kafka does not fix
    head = f"SCRAM credential configs for user-principal '{alice}' are "
    both = {"SCRAM-SHA-256=iterations=8192", "SCRAM-SHA-512=iterations=4096"}
    described_one = tool("configs", *base, "--entity-name", alice, "--describe").stdout
    assert described_one.startswith(head) and described_one.endswith("\n"), described_one
    assert set(described_one[len(head):-1].split(", ")) == both, described_one
    every = [line for line in tool("configs", *base, "--describe").stdout.splitlines() if line.startswith(head)]
    assert len(every) == 1 and set(every[0][len(head):].split(", ")) == both, every

    tool("configs", *base, "--entity-name", alice, "--alter", "--delete-config", "SCRAM-SHA-512")
    assert tool("configs", *base, "--entity-name", alice, "--describe").stdout == (
        f"SCRAM credential configs for user-principal '{alice}' are SCRAM-SHA-256=iterations=8192\n")
    tool("configs", *base, "--entity-name", alice, "--alter", "--delete-config", "SCRAM-SHA-256")
    assert tool("configs", *base, "--entity-name", alice, "--describe").stdout == ""  # no credentials: nothing

    def refused(*args: str) -> str:
        proc = tool("configs", *base, "--entity-name", alice, "--alter", *args, ok=False)
        assert proc.returncode == 1, proc
        return proc.stderr

    assert "Iterations 1000 is less than the minimum 4096 required for SCRAM-SHA-256" in refused(
        "--add-config", "SCRAM-SHA-256=[iterations=1000,password=x]")
    assert "Invalid credential property SCRAM-SHA-256=secret" in refused("--add-config", "SCRAM-SHA-256=secret")
    assert "Unexpected config names: retention.ms" in refused("--add-config", "retention.ms=1")
    assert "Attempt to delete a user credential that does not exist" in refused("--delete-config", "SCRAM-SHA-512")
    assert "A user credential cannot be altered twice in the same request" in refused(
        "--add-config", "SCRAM-SHA-256=[password=a],SCRAM-SHA-512=[password=b]")
    assert "Too many iterations" in refused("--add-config", "SCRAM-SHA-256=[iterations=20000,password=x]")
    default = tool("configs", *base, "--entity-default", "--alter", "--add-config",
                   "SCRAM-SHA-256=[password=x]", ok=False)
    assert "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials" in \
        default.stderr
    assert described(admin_client(bootstrap_servers), alice)[0] == KafkaError.RESOURCE_NOT_FOUND


@pytest.mark.kbroker_only("kbroker-storage format writes kbroker's data directory (bootstrap.checkpoint); Kafka nodes "
                          "are formatted by Kafka's StorageTool (on Kafka 4.3.1 alice's SCRAM-SHA-512 credential from "
                          "this file was gone after the restart: to investigate)")
def test_kbroker_storage_add_scram_then_the_broker_has_the_credentials(kbroker_factory, tmp_path):
    broker = kbroker_factory(start=False)
    cluster_id = tool("storage", "random-uuid").stdout.strip()
    props = tmp_path / "server.properties"
    props.write_text(f"process.roles=broker,controller\nnode.id={broker.node_id}\nlog.dirs={broker.log_dirs}\n"
                     f"listeners=PLAINTEXT://127.0.0.1:{broker.port}\n")
    tool("storage", "format", "-t", cluster_id, "-c", props,
         "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]",
         "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]",
         "--add-scram", "SCRAM-SHA-512=[name=bob,password=bob-secret]")
    assert (Path(broker.log_dirs) / "bootstrap.checkpoint").is_file()
    broker.start()
    admin = admin_client(broker.bootstrap)
    assert described_all(admin) == {"alice": [(SHA256, 4096), (SHA512, 8192)], "bob": [(SHA512, 4096)]}
    assert tool("configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "users",
                "--entity-name", "alice").stdout == (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, "
        "SCRAM-SHA-512=iterations=8192\n")
    # the bootstrap records are written once: a restart after a change keeps the change
    assert alter(admin, [UserScramCredentialDeletion("bob", SHA512)]) == {"bob": None}
    broker.restart()
    assert described_all(admin_client(broker.bootstrap)) == {"alice": [(SHA256, 4096), (SHA512, 8192)]}


# ------------------------------------------------------------------------------------- a cluster


def _describe_on(cluster: Any, node_id: int, users: list[str] | None) -> dict[str, Any]:
    """DescribeUserScramCredentials sent to node ``node_id`` itself: user -> [(mechanism, iterations)] or error."""
    from kbroker.protocol.messages import DescribeUserScramCredentialsRequest as Req
    from kbroker.protocol.messages import DescribeUserScramCredentialsResponse as Resp
    from kbroker.testing.cluster import ask

    req = Req(users=None if users is None else [Req.UserName(name=u) for u in users])
    resp = ask(cluster.host, cluster.nodes[node_id].port, 50, 0, req, Resp)
    assert resp.error_code == 0, resp
    return {r.user: r.error_code or [(c.mechanism, c.iterations) for c in r.credential_infos] for r in resp.results}


def test_cluster_credentials_everywhere_and_across_a_full_restart(tmp_path):
    from kbroker.protocol.messages import AlterUserScramCredentialsRequest as Req
    from kbroker.protocol.messages import AlterUserScramCredentialsResponse as Resp
    from kbroker.controller.scram_control import salted_password
    from kbroker.testing.cluster import KbrokerCluster, ask, wait_every_node

    cluster = KbrokerCluster(tmp_path, nodes=3)
    try:
        for i in cluster.controller_ids:  # as in Kafka, every controller is formatted with the same credentials
            cluster.format(i, "--add-scram", "SCRAM-SHA-512=[name=boot,password=boot-secret,iterations=8192]")
        cluster.start()
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i, None), {"boot": [(2, 8192)]})

        active = cluster.controller_id()
        standby = next(i for i in cluster.broker_ids if i != active)
        # confluent-kafka bootstrapped at a standby (which names itself as controller and forwards)
        admin = admin_client(cluster.nodes[standby].bootstrap)
        assert alter(admin, [_upsert("alice", SHA256, 8192)]) == {"alice": None}
        # and a request sent to the standby itself: forwarded, answered once the quorum committed it
        salt = b"s" * 16
        req = Req(upsertions=[Req.ScramCredentialUpsertion(name="bob", mechanism=2, iterations=4096, salt=salt,
                                                           salted_password=salted_password(2, "pw", salt, 4096))],
                  deletions=[Req.ScramCredentialDeletion(name="nobody", mechanism=1)])
        resp = ask(cluster.host, cluster.nodes[standby].port, 51, 0, req, Resp, timeout=20)
        assert sorted((r.user, r.error_code) for r in resp.results) == [("bob", 0), ("nobody", 91)]
        want = {"alice": [(1, 8192)], "bob": [(2, 4096)], "boot": [(2, 8192)]}
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i, None), want)
        for i in cluster.broker_ids:
            assert _describe_on(cluster, i, ["alice", "zed"]) == {"alice": [(1, 8192)], "zed": 91}

        cluster.stop()
        cluster.start()
        wait_every_node(cluster.broker_ids, lambda i: _describe_on(cluster, i, None), want)
    finally:
        cluster.stop()
