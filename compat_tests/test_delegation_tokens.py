"""Delegation tokens (KIP-48, issue 35 item 3): CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken
and DescribeDelegationToken through the Java Admin, a Java producer and consumer that log in with a token over SCRAM
(``tokenauth=true``), the error codes Kafka answers, and ``kbroker-delegation-tokens``. The broker has a PLAINTEXT
listener (where tokens are refused) and a SASL_PLAINTEXT one with SCRAM users created through the Admin API, and
``delegation.token.secret.key``, on kbroker and on the reference Kafka alike."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.test_sasl import sasl_broker
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import CreateDelegationTokenRequest, DescribeDelegationTokenRequest

pytestmark = pytest.mark.timeout(300)

SECRET = "kbroker-token-secret"
BIN = Path(sys.executable).parent
TOOL = "kbroker-delegation-tokens"


def _scram_jaas(user: str, password: str, token: bool = False) -> str:
    extra = ' tokenauth="true"' if token else ""
    return (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
            f'password="{password}"{extra};')


def java_sasl(user: str, password: str, token: bool = False) -> list[str]:
    """The Java client's properties for SCRAM-SHA-256 on SASL_PLAINTEXT, as ``--prop`` arguments."""
    return ["--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=SCRAM-SHA-256",
            "--prop", f"sasl.jaas.config={_scram_jaas(user, password, token)}"]


def token_broker(kbroker_factory: Any, settings: dict[str, str] | None = None) -> tuple[Any, str]:
    """A broker with the SASL listener, the secret key, and SCRAM-SHA-256 users alice, bob, carol, dave and erin (password
    ``<name>-secret``) created on the PLAINTEXT listener."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    broker, bootstrap = sasl_broker(kbroker_factory, {"delegation.token.secret.key": SECRET, **(settings or {})})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                            f"{u}-secret".encode()) for u in ("alice", "bob", "carol", "dave", "erin")]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(20)
    return broker, bootstrap


def admin(java_driver: Any, bootstrap: str, sub: str, *args: str, user: str = "alice",
          password: str | None = None, token: bool = False, ok: bool = True) -> dict[str, Any]:
    """One Java Admin call (KafkaDriver admin <sub>) as ``user``; the last event (the answer or the error)."""
    events = java_driver.run(["admin", sub, "--bootstrap", bootstrap, *args,
                              *java_sasl(user, password or f"{user}-secret", token)], check=ok)
    return events[-1]


@pytest.mark.kafka_reference
def test_java_admin_lifecycle_and_a_java_client_logging_in_with_the_token(kbroker_factory, java_driver):
    """alice creates a token renewable by bob with the Java Admin: id and HMAC (HMAC-SHA512 of the id with the secret
    key), owner and requester alice, expiry <= max; a Java producer and consumer log in with it (SCRAM tokenauth) and
    act as alice; bob renews it, carol may not (she sees it: without an authorizer DESCRIBE is allowed); alice
    expires it at once and the token no longer logs in."""
    broker, bootstrap = token_broker(kbroker_factory)
    before = int(time.time() * 1000)
    t = admin(java_driver, bootstrap, "create-token", "--renewer", "User:bob", "--max-life-ms", "3600000")
    assert (t["owner"], t["requester"], t["renewers"]) == ("User:alice", "User:alice", ["User:bob"]), t
    assert base64.b64decode(t["hmac"]) == hmac.new(SECRET.encode(), t["token_id"].encode(), hashlib.sha512).digest()
    assert before - 5000 <= t["issue_timestamp"] <= int(time.time() * 1000) + 5000
    assert t["max_timestamp"] == t["issue_timestamp"] + 3600000, t
    assert t["expiry_timestamp"] == t["max_timestamp"], t  # the default expiry (a day) is past the max lifetime

    # Kafka's broker answers DescribeDelegationToken from its token cache, which learns the token from the metadata
    # log a moment after CreateDelegationToken is answered (an empty list was seen in CI): wait for it
    deadline = time.monotonic() + 20
    while not (described := admin(java_driver, bootstrap, "describe-tokens")["tokens"]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [d["token_id"] for d in described] == [t["token_id"]] and described[0]["hmac"] == t["hmac"], described
    assert admin(java_driver, bootstrap, "describe-tokens", user="bob")["tokens"][0]["token_id"] == t["token_id"]
    # without an authorizer everyone has DESCRIBE on every token, as in Kafka
    assert [d["token_id"] for d in admin(java_driver, bootstrap, "describe-tokens", user="carol")["tokens"]] == [
        t["token_id"]]
    # an owner filter matches the owner, the requester and the renewers (Kafka's TokenInformation.ownerOrRenewer)
    assert len(admin(java_driver, bootstrap, "describe-tokens", "--owner", "User:bob")["tokens"]) == 1
    assert admin(java_driver, bootstrap, "describe-tokens", "--owner", "User:carol")["tokens"] == []

    # the token logs a Java producer and consumer in, as alice
    login = java_sasl(t["token_id"], t["hmac"], token=True)
    java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "token-topic", "--count", "20", *login])
    got = java_driver.one(java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "token-topic",
                                           "--expect", "20", *login]), "done")
    assert got["count"] == 20, got
    # a connection authenticated with a token may not ask for tokens
    err = admin(java_driver, bootstrap, "describe-tokens", user=t["token_id"], password=t["hmac"], token=True,
                ok=False)
    assert err["error_class"] == "UnsupportedByAuthenticationException", err

    renewed = admin(java_driver, bootstrap, "renew-token", "--hmac", t["hmac"], "--period-ms", "60000", user="bob")
    assert 0 < renewed["expiry_timestamp"] - int(time.time() * 1000) <= 61000, renewed
    err = admin(java_driver, bootstrap, "renew-token", "--hmac", t["hmac"], user="carol", ok=False)
    assert err["error_class"] == "DelegationTokenOwnerMismatchException", err
    unknown = base64.b64encode(b"\x01" * 64).decode()
    err = admin(java_driver, bootstrap, "renew-token", "--hmac", unknown, ok=False)
    assert err["error_class"] == "DelegationTokenNotFoundException", err

    expired = admin(java_driver, bootstrap, "expire-token", "--hmac", t["hmac"], "--period-ms", "-1")
    assert abs(expired["expiry_timestamp"] - int(time.time() * 1000)) < 10000, expired
    assert admin(java_driver, bootstrap, "describe-tokens")["tokens"] == []
    err = admin(java_driver, bootstrap, "expire-token", "--hmac", t["hmac"], ok=False)
    assert err["error_class"] == "DelegationTokenNotFoundException", err
    events = java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "token-topic", "--count", "1", *login,
                              "--prop", "max.block.ms=5000"], check=False)
    assert java_driver.last_returncode != 0, events
    assert any(e.get("error_class") == "SaslAuthenticationException" for e in events), events


def test_owner_renewer_rules_and_a_token_for_another_owner(kbroker_factory, java_driver):
    """v3: alice creates a token owned by bob (no authorizer: allowed); bob is its owner, alice its requester; bob
    may renew it, alice (only its requester) and carol may not; a renewer that is not a User is refused with
    INVALID_PRINCIPAL_TYPE; the token logs in after a restart."""
    broker, bootstrap = token_broker(kbroker_factory)
    t = admin(java_driver, bootstrap, "create-token", "--owner", "User:bob")
    assert (t["owner"], t["requester"]) == ("User:bob", "User:alice"), t
    assert admin(java_driver, bootstrap, "describe-tokens", "--owner", "User:bob", user="bob")["tokens"][0][
        "token_id"] == t["token_id"]
    admin(java_driver, bootstrap, "renew-token", "--hmac", t["hmac"], user="bob")
    for who in ("alice", "carol"):
        err = admin(java_driver, bootstrap, "expire-token", "--hmac", t["hmac"], user=who, ok=False)
        assert err["error_class"] == "DelegationTokenOwnerMismatchException", (who, err)
    err = admin(java_driver, bootstrap, "create-token", "--renewer", "Group:ops", ok=False)
    assert err["error_class"] == "InvalidPrincipalTypeException", err
    # bob's token logs in, also after a restart (the token is a metadata record)
    login = java_sasl(t["token_id"], t["hmac"], token=True)
    java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "bob-topic", "--count", "3", *login])
    broker.restart()
    java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "bob-topic", "--count", "3", *login])
    assert [d["token_id"] for d in admin(java_driver, bootstrap, "describe-tokens", user="bob")["tokens"]] == [
        t["token_id"]]


def _wire(address: str, request: Any, version: int) -> Any:
    from kbroker.cli._wire import Connection, split_hostport

    host, port = split_hostport(address)
    conn = Connection(host, port, 10.0, "dt-test", None)
    try:
        return conn.send(request, version)
    finally:
        conn.close()


def test_plaintext_connections_are_refused_and_without_the_secret_key_tokens_are_disabled(kbroker_factory,
                                                                                          java_driver):
    """On a PLAINTEXT listener every token API answers DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; on a broker without
    ``delegation.token.secret.key`` create answers DELEGATION_TOKEN_AUTH_DISABLED (DelegationTokenDisabledException)
    and describe too."""
    broker, bootstrap = sasl_broker(kbroker_factory, {})
    create = _wire(broker.bootstrap, CreateDelegationTokenRequest(owner_principal_type=None,
                                                                  owner_principal_name=None), 3)
    assert create.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, create
    assert (create.principal_type, create.principal_name) == ("User", "ANONYMOUS"), create
    describe = _wire(broker.bootstrap, DescribeDelegationTokenRequest(owners=None), 3)
    assert describe.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, describe

    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    up = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                      b"alice-secret")
    plain_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in plain_admin.alter_user_scram_credentials([up]).values():
        f.result(20)
    err = admin(java_driver, bootstrap, "create-token", ok=False)
    assert err["error_class"] == "DelegationTokenDisabledException", err
    err = admin(java_driver, bootstrap, "describe-tokens", ok=False)
    assert err["error_class"] == "DelegationTokenDisabledException", err


def tool(*args: Any, ok: bool = True) -> subprocess.CompletedProcess:
    script = BIN / TOOL
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "kbroker.cli.delegation_tokens"]
    proc = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KBROKER_CLI_TIMEOUT_S": "10"})
    if ok:
        assert proc.returncode == 0, f"{TOOL} {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.kafka_reference
def test_kbroker_delegation_tokens_tool(kbroker_factory, tmp_path):
    """``kbroker-delegation-tokens`` with kafka-delegation-tokens' flags and output: --create prints the token's
    row under Kafka's header, --describe lists it, --renew / --expire print the new expiry date; a renewal by
    someone else prints Kafka's error line and exits 1."""
    broker, bootstrap = token_broker(kbroker_factory)

    def config(user: str) -> Path:
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                        f"sasl.jaas.config={_scram_jaas(user, user + '-secret')}\n")
        return path

    base = ["--bootstrap-server", bootstrap, "--command-config", config("alice")]
    out = tool(*base, "--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob").stdout
    lines = out.splitlines()
    assert lines[0] == "Calling create token operation with renewers :[User:bob] , max-life-time-period :-1", out
    assert lines[1].startswith("Created delegation token with tokenId : "), out
    token_id = lines[1].rsplit(" ", 1)[1]
    rows = [line.split() for line in lines[2:] if line.strip()]
    assert rows[0] == ["TOKENID", "HMAC", "OWNER", "REQUESTER", "RENEWERS", "ISSUEDATE", "EXPIRYDATE", "MAXDATE"]
    assert rows[1][0] == token_id and rows[1][2:5] == ["User:alice", "User:alice", "[User:bob]"], out
    hmac_b64 = rows[1][1]
    assert base64.b64decode(hmac_b64) == hmac.new(SECRET.encode(), token_id.encode(), hashlib.sha512).digest()

    out = tool(*base, "--describe").stdout
    assert out.startswith("Calling describe token operation for current user.\nTotal number of tokens : 1"), out
    assert token_id in out and hmac_b64 in out, out
    out = tool(*base, "--describe", "--owner-principal", "User:carol").stdout
    assert "Calling describe token operation for owners: [User:carol]" in out and "tokens : 0" in out, out

    out = tool(*base, "--renew", "--hmac", hmac_b64, "--renew-time-period", "60000").stdout
    assert out.startswith(f"Calling renew token operation with hmac :{hmac_b64} , renew-time-period :60000\n"
                          "Completed renew operation. New expiry date : "), out
    carol = ["--bootstrap-server", bootstrap, "--command-config", config("carol")]
    bad = tool(*carol, "--renew", "--hmac", hmac_b64, ok=False)
    assert bad.returncode == 1, bad
    assert "Error while executing delegation token command : " in bad.stdout, bad.stdout
    assert "DelegationTokenOwnerMismatchException" in bad.stdout, bad.stdout

    out = tool(*base, "--expire", "--hmac", hmac_b64, "--expiry-time-period", "-1").stdout
    assert out.startswith(f"Calling expire token operation with hmac :{hmac_b64} , expire-time-period :-1\n"
                          "Completed expire operation. New expiry date : "), out
    assert "Total number of tokens : 0" in tool(*base, "--describe").stdout


@pytest.mark.kafka_reference
def test_acls_for_tokens_and_the_token_principal(kbroker_factory, java_driver):
    """With StandardAuthorizer: a token for another owner needs CREATE_TOKENS on that owner's USER resource
    (DelegationTokenAuthorizationException without it); a token is seen by its owner, renewers and requester, and by
    others with DESCRIBE on the DELEGATION_TOKEN resource or DESCRIBE_TOKENS on the owner's USER resource; a client
    logging in with bob's token has bob's ACLs."""
    broker, bootstrap = token_broker(kbroker_factory, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"})  # the PLAINTEXT listener's clients (the harness, this test) manage ACLs

    def grant(*acls: str) -> None:
        java_driver.run(["admin", "create-acls", "--bootstrap", broker.bootstrap,
                         *[x for a in acls for x in ("--acl", a)]])

    java_driver.run(["admin", "create-topic", "--bootstrap", broker.bootstrap, "--topic", "bob-topic"])
    java_driver.run(["admin", "create-topic", "--bootstrap", broker.bootstrap, "--topic", "other-topic"])
    err = admin(java_driver, bootstrap, "create-token", "--owner", "User:bob", ok=False)
    assert err["error_class"] == "DelegationTokenAuthorizationException", err
    grant("USER,User:bob,LITERAL,User:alice,*,CREATE_TOKENS,ALLOW")
    t = admin(java_driver, bootstrap, "create-token", "--owner", "User:bob", "--renewer", "User:dave")
    assert (t["owner"], t["requester"]) == ("User:bob", "User:alice"), t

    def seen(user: str) -> list[str]:
        return [d["token_id"] for d in admin(java_driver, bootstrap, "describe-tokens", user=user)["tokens"]]

    assert seen("bob") == seen("dave") == seen("alice") == [t["token_id"]]  # owner, renewer, requester
    assert seen("carol") == seen("erin") == []
    grant(f"DELEGATION_TOKEN,{t['token_id']},LITERAL,User:carol,*,DESCRIBE,ALLOW",
          "USER,User:bob,LITERAL,User:erin,*,DESCRIBE_TOKENS,ALLOW")
    assert seen("carol") == seen("erin") == [t["token_id"]]

    grant("TOPIC,bob-topic,LITERAL,User:bob,*,WRITE,ALLOW", "TOPIC,bob-topic,LITERAL,User:bob,*,DESCRIBE,ALLOW")
    login = java_sasl(t["token_id"], t["hmac"], token=True)
    java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "bob-topic", "--count", "3", *login])
    events = java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "other-topic", "--count", "1", *login,
                              "--prop", "max.block.ms=5000"], check=False)
    assert java_driver.last_returncode != 0, events
    assert any(e.get("error_class") == "TopicAuthorizationException" for e in events), events


def test_an_expired_token_is_swept(kbroker_factory, java_driver):
    """A token whose expiry passes is removed by the controller's sweep (every
    ``delegation.token.expiry.check.interval.ms``): it is no longer described and no longer logs in; renewing it
    before then answers DELEGATION_TOKEN_EXPIRED."""
    broker, bootstrap = token_broker(kbroker_factory, {"delegation.token.expiry.check.interval.ms": "1000"})
    t = admin(java_driver, bootstrap, "create-token")
    expired = admin(java_driver, bootstrap, "expire-token", "--hmac", t["hmac"], "--period-ms", "1")
    assert expired["expiry_timestamp"] <= int(time.time() * 1000) + 1000, expired
    deadline = time.monotonic() + 30
    while admin(java_driver, bootstrap, "describe-tokens")["tokens"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert admin(java_driver, bootstrap, "describe-tokens")["tokens"] == []
    login = java_sasl(t["token_id"], t["hmac"], token=True)
    events = java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "swept", "--count", "1", *login,
                              "--prop", "max.block.ms=5000"], check=False)
    assert any(e.get("error_class") == "SaslAuthenticationException" for e in events), events


def test_a_cluster_replicates_tokens_through_the_metadata_log(tmp_path, java_driver):
    """Three combined nodes, each with a SASL_PLAINTEXT listener: alice creates a token through a node that is not
    the active controller (forwarded with her principal: she is its owner and requester); a Java producer and
    consumer bootstrapped at each node log in with it; expiring it through another standby removes it everywhere."""
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    from compat_tests.test_sasl import SCRAM_JAAS
    from kbroker.testing.cluster import KbrokerCluster
    from kbroker.testing.plugin import free_port

    cluster = KbrokerCluster(tmp_path, nodes=3, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256", "listener.name.sasl.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "delegation.token.secret.key": SECRET})
    sasl: dict[int, str] = {}
    for node_id, node in cluster.nodes.items():
        port = free_port()
        node.overrides["listeners"] += f",SASL://127.0.0.1:{port}"
        node.overrides["advertised.listeners"] += f",SASL://127.0.0.1:{port}"
        sasl[node_id] = f"127.0.0.1:{port}"
    with cluster:
        plain = AdminClient({"bootstrap.servers": cluster.bootstrap})
        upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              b"alice-secret")
        for f in plain.alter_user_scram_credentials([upsert]).values():
            f.result(30)
        plain.create_topics([NewTopic("replicated", 3, 3)])["replicated"].result(30)
        active = cluster.controller_id()
        standbys = [i for i in sorted(sasl) if i != active]
        t = admin(java_driver, sasl[standbys[0]], "create-token")
        assert (t["owner"], t["requester"]) == ("User:alice", "User:alice"), t
        login = java_sasl(t["token_id"], t["hmac"], token=True)
        for node_id in sorted(sasl):
            deadline = time.monotonic() + 30
            while True:  # the node has the token once it applied the record
                events = java_driver.run(["produce", "--bootstrap", sasl[node_id], "--topic", "replicated",
                                          "--count", "5", "--tag", f"n{node_id}", *login,
                                          "--prop", "max.block.ms=8000"], check=False)
                if java_driver.last_returncode == 0 or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert java_driver.last_returncode == 0, (node_id, events[-1:])
        got = java_driver.one(java_driver.run(["consume", "--bootstrap", sasl[standbys[-1]], "--topic", "replicated",
                                               "--expect", str(5 * len(sasl)), *login]), "done")
        assert got["count"] == 5 * len(sasl), got
        admin(java_driver, sasl[standbys[-1]], "expire-token", "--hmac", t["hmac"], "--period-ms", "-1")
        for node_id in sorted(sasl):
            deadline = time.monotonic() + 30
            while True:
                events = java_driver.run(["produce", "--bootstrap", sasl[node_id], "--topic", "replicated",
                                          "--count", "1", *login, "--prop", "max.block.ms=5000"], check=False)
                if java_driver.last_returncode != 0 or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert any(e.get("error_class") == "SaslAuthenticationException" for e in events), (node_id, events)
