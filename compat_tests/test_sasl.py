"""SASL (issue 11, item 2): SaslHandshake and SaslAuthenticate (v0 bare-token framing and the v1+ form),
PLAIN with users from the listener's JAAS configuration, SCRAM-SHA-256/512 with credentials from the metadata
log, on SASL_PLAINTEXT and SASL_SSL listeners; wrong credentials get SASL_AUTHENTICATION_FAILED and a closed
connection; re-authentication (KIP-368); SASL between the nodes of a cluster. Real clients: confluent-kafka,
kcat, kafka-python, aiokafka and the Java client."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from compat_tests.security_support import Wire, add_internal_listener, consume, produce, replicate_and_read_back
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kbroker.testing.plugin import free_port

pytestmark = pytest.mark.timeout(240)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


def sasl_broker(kbroker_factory, settings: dict[str, str], protocol: str = "SASL_PLAINTEXT", start: bool = True):
    """A broker with a PLAINTEXT listener (the harness's readiness probe) and a ``protocol`` one named SASL."""
    broker = kbroker_factory(start=False)
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SASL://127.0.0.1:{port}"
    broker.overrides.update({
        "listeners": listeners, "advertised.listeners": listeners,
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:{protocol}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
        # Kafka wants a JAAS entry for every enabled mechanism, SCRAM's login module has no options.
        "listener.name.sasl.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS, **settings})
    if start:
        broker.start()
    return broker, f"127.0.0.1:{port}"


def rdkafka_conf(bootstrap: str, user: str, password: str, mechanism: str = "PLAIN",
                 protocol: str = "sasl_plaintext") -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def test_plain_with_every_client(kbroker_factory, java_driver):
    """PLAIN users from ``listener.name.sasl.plain.sasl.jaas.config``: confluent-kafka, kcat, kafka-python,
    aiokafka and the Java client produce and consume as alice; a wrong password and an unknown user are refused."""
    broker, bootstrap = sasl_broker(kbroker_factory, {})
    conf = rdkafka_conf(bootstrap, "alice", "alice-secret")
    values = [f"plain-{i}".encode() for i in range(200)]
    produce(conf, "plain", values)
    assert sorted(consume(conf, "plain", len(values))) == sorted(values)

    r = subprocess.run(["kcat", "-b", bootstrap, "-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanism=PLAIN",
                        "-X", "sasl.username=admin", "-X", "sasl.password=admin-secret", "-C", "-t", "plain", "-e",
                        "-q"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(v.decode() for v in values), r.stderr

    from kafka import KafkaConsumer, KafkaProducer

    kp_sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
               "sasl_plain_password": "alice-secret"}
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kp_sasl)
    for i in range(30):
        kp.send("plain-kafka-python", f"kp-{i}".encode())
    kp.flush(30)
    kp.close()
    kc = KafkaConsumer("plain-kafka-python", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10000, **kp_sasl)
    assert sorted(m.value for m in kc) == sorted(f"kp-{i}".encode() for i in range(30))
    kc.close()

    async def aiokafka_round_trip() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        opts = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret"}
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **opts)
        await p.start()
        try:
            for i in range(30):
                await p.send_and_wait("plain-aiokafka", f"aio-{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer("plain-aiokafka", bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts)
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 30:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(aiokafka_round_trip()) == [f"aio-{i}".encode() for i in range(30)]

    java_sasl = ["--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=PLAIN", "--prop",
                 'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                 'username="alice" password="alice-secret";']
    done = java_driver.one(java_driver.run(["produce", "--bootstrap", bootstrap, "--topic", "plain-java", "--count",
                                            "100", "--acks", "all", *java_sasl]), "done")
    assert done["acked"] == 100 and done["failed"] == 0, done
    got = java_driver.one(java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "plain-java", "--expect",
                                           "100", *java_sasl]), "done")
    assert got["count"] == 100, got

    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        w = Wire(bootstrap)
        assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
        resp = w.send(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()), 2)
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, resp
        assert resp.error_message == "Authentication failed: Invalid username or password", resp
        assert w.closed_within(5), "the connection stays open after a failed authentication"
        w.close()
    bad = Producer({**rdkafka_conf(bootstrap, "alice", "wrong"), "message.timeout.ms": 3000})
    errors: list = []
    bad.produce("plain", b"x", on_delivery=lambda err, msg: errors.append(err))
    bad.flush(10)
    assert errors and errors[0] is not None, errors


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_scram_with_credentials_from_the_metadata_log(kbroker_factory, java_driver, tmp_path, protocol):
    """SCRAM-SHA-256 and SCRAM-SHA-512 credentials created with AlterUserScramCredentials (confluent-kafka's
    AdminClient, on the PLAINTEXT listener): confluent-kafka, kcat, kafka-python, aiokafka and the Java client
    authenticate with them (on SASL_SSL over TLS too); a wrong password, a user without that mechanism's credential
    and a deleted credential are refused; credentials survive a restart (they are metadata records)."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    tls: dict[str, str] = {}
    rd_tls: dict[str, str] = {}
    if protocol == "SASL_SSL":
        from kbroker.testing.certs import CertificateAuthority

        ca = CertificateAuthority(tmp_path / "ca")
        tls = ca.issue("broker").pem_properties()
        rd_tls = {"ssl.ca.location": str(ca.pem_path)}
    broker, bootstrap = sasl_broker(kbroker_factory, tls, protocol)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upserts = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            b"alice-scram"),
               UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                            b"bob-scram")]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(20)
    proto = protocol.lower()

    def conf(user: str, password: str, mechanism: str) -> dict[str, str]:
        return {**rdkafka_conf(bootstrap, user, password, mechanism, proto), **rd_tls}

    alice, bob = conf("alice", "alice-scram", "SCRAM-SHA-256"), conf("bob", "bob-scram", "SCRAM-SHA-512")
    values = [f"scram-{i}".encode() for i in range(100)]
    produce(alice, "scram", values)
    assert sorted(consume(bob, "scram", len(values))) == sorted(values)

    kcat = ["kcat", "-b", bootstrap, "-X", f"security.protocol={proto}", "-X", "sasl.mechanism=SCRAM-SHA-512",
            "-X", "sasl.username=bob", "-X", "sasl.password=bob-scram"]
    kcat += [x for k, v in rd_tls.items() for x in ("-X", f"{k}={v}")]
    r = subprocess.run([*kcat, "-C", "-t", "scram", "-e", "-q"], capture_output=True, text=True, timeout=60)
    # kcat 1.7.1 bundles librdkafka 2.0.2, whose SCRAM final message repeats the client nonce (librdkafka #4895):
    # Kafka refuses it even with the right password (the Python clients' newer librdkafka is served above)
    assert r.returncode != 0 and r.stdout == "", r
    assert "SASL authentication" in r.stderr or "transport failure" in r.stderr, r.stderr

    from kafka import KafkaConsumer

    kp_opts = {"security_protocol": protocol, "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
               "sasl_plain_password": "alice-scram"}
    if rd_tls:
        kp_opts["ssl_cafile"] = rd_tls["ssl.ca.location"]
    kc = KafkaConsumer("scram", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10000, **kp_opts)
    assert len(list(kc)) == len(values)
    kc.close()

    async def aiokafka_count() -> int:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.helpers import create_ssl_context

        opts = {"security_protocol": protocol, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bob",
                "sasl_plain_password": "bob-scram"}
        if rd_tls:
            opts["ssl_context"] = create_ssl_context(cafile=rd_tls["ssl.ca.location"])
        c = AIOKafkaConsumer("scram", bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts)
        await c.start()
        n = 0
        try:
            async with asyncio.timeout(30):
                async for _ in c:
                    n += 1
                    if n == len(values):
                        break
        finally:
            await c.stop()
        return n

    assert asyncio.run(aiokafka_count()) == len(values)

    java = ["--prop", f"security.protocol={protocol}", "--prop", "sasl.mechanism=SCRAM-SHA-256", "--prop",
            'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            'password="alice-scram";']
    if rd_tls:
        java += ["--prop", "ssl.truststore.type=PEM", "--prop", f"ssl.truststore.location={rd_tls['ssl.ca.location']}"]
    got = java_driver.one(java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "scram", "--expect",
                                           str(len(values)), *java]), "done")
    assert got["count"] == len(values), got

    def refused(c: dict[str, str]) -> bool:
        p = Producer({**c, "message.timeout.ms": 3000})
        errors: list = []
        p.produce("scram", b"x", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        return bool(errors) and errors[0] is not None

    assert refused(conf("alice", "wrong", "SCRAM-SHA-256"))
    assert refused(conf("alice", "alice-scram", "SCRAM-SHA-512"))  # alice has no SHA-512 credential
    assert refused(conf("carol", "x", "SCRAM-SHA-256"))
    broker.restart()
    produce(alice, "scram", [b"after restart"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_256)]).values():
        f.result(20)
    assert refused(alice)


def test_the_exchange_on_the_wire(kbroker_factory):
    """ApiVersions is answered before authentication, any other request closes the connection; an unknown
    mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled list; v0 handshakes take bare tokens; on a
    listener without SASL the SASL requests get ILLEGAL_SASL_STATE."""
    broker, bootstrap = sasl_broker(kbroker_factory, {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    w = Wire(bootstrap)
    av = w.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert {17, 36} <= {k.api_key for k in av.api_keys}
    hs = w.send(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
    assert (hs.error_code, list(hs.mechanisms)) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["PLAIN", "SCRAM-SHA-512"])
    with pytest.raises(ConnectionError):
        w.send(MetadataRequest(topics=None), 4)  # before authentication: closed, no answer
    w.close()

    w = Wire(bootstrap)  # v0: the token is a bare frame and so is the answer
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == ErrorCode.NONE
    assert w.raw(b"\0admin\0admin-secret") == b""
    assert w.send(MetadataRequest(topics=None), 4).brokers  # authenticated
    # once authenticated: a stray SaslAuthenticate or a v0 handshake is ILLEGAL_SASL_STATE, the connection stays
    assert w.send(SaslAuthenticateRequest(auth_bytes=b"x"), 2).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert w.send(MetadataRequest(topics=None), 4).brokers
    w.close()
    w = Wire(bootstrap)
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == ErrorCode.NONE
    with pytest.raises(ConnectionError):
        w.raw(b"\0admin\0nope")  # v0: a failed authentication closes without an answer
    w.close()

    w = Wire(broker.bootstrap)  # PLAINTEXT listener
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert w.send(SaslAuthenticateRequest(auth_bytes=b"x"), 2).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert w.send(MetadataRequest(topics=None), 4).brokers
    w.close()


def test_reauthentication_kip_368(kbroker_factory):
    """``connections.max.reauth.ms=1500``: SaslAuthenticate v1+ tells the session lifetime; librdkafka
    re-authenticates on its own and keeps producing for 5 s; a raw connection that does not is closed at its
    first request after the session expired; re-authentication as another user is refused."""
    broker, bootstrap = sasl_broker(kbroker_factory, {"connections.max.reauth.ms": "1500"})
    w = Wire(bootstrap)
    w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    resp = w.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
    assert resp.error_code == ErrorCode.NONE and resp.session_lifetime_ms == 1500, resp
    assert w.send(MetadataRequest(topics=None), 4).brokers
    # re-authenticating on the same connection, as the same user: the session is renewed
    assert w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.NONE
    assert w.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2).error_code == ErrorCode.NONE
    time.sleep(1.8)
    with pytest.raises(ConnectionError):
        w.send(MetadataRequest(topics=None), 4)
    w.close()
    w = Wire(bootstrap)
    w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    w.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
    w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    other = w.send(SaslAuthenticateRequest(auth_bytes=b"\0admin\0admin-secret"), 2)
    assert other.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "principal" in other.error_message
    w.close()

    p = Producer({**rdkafka_conf(bootstrap, "alice", "alice-secret"), "linger.ms": 0})
    errors: list = []
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 5:
        p.produce("reauth", f"r-{n}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
        n += 1
        p.poll(0.05)
    assert p.flush(20) == 0 and not errors, errors[:3]
    assert len(consume(rdkafka_conf(bootstrap, "alice", "alice-secret"), "reauth", n)) == n
    # librdkafka renewed its sessions in place: the only connection closed for an expired session is the raw one
    # (counted in kbroker's own log lines)
    if broker.target == "kbroker":
        assert broker.log_text().count("the SASL session expired") == 1, broker.log_tail(30)


def test_tools_with_sasl_client_properties(kbroker_factory, tmp_path):
    """The tools read the Java client's ``sasl.mechanism`` and ``sasl.jaas.config`` from --command-config, for
    librdkafka and for kbroker's own codec (DescribeConfigs, DescribeTopicPartitions)."""
    from compat_tests.test_cli_tools import cli

    broker, bootstrap = sasl_broker(kbroker_factory, {})
    conf = tmp_path / "client.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" "
                    "password=\"alice-secret\";\n")
    base = ["--bootstrap-server", bootstrap, "--command-config", conf]
    cli("kbroker-topics", *base, "--create", "--topic", "tools", "--partitions", "2")
    out = cli("kbroker-topics", *base, "--describe", "--topic", "tools").stdout
    assert "PartitionCount: 2" in out and "Elr: N/A" not in out, out
    out = cli("kbroker-configs", *base, "--describe", "--entity-type", "topics", "--entity-name", "tools",
              "--all").stdout
    assert "cleanup.policy=delete" in out, out
    conf.write_text(conf.read_text().replace("alice-secret", "wrong"))
    bad = cli("kbroker-configs", *base, "--describe", "--entity-type", "topics", "--entity-name", "tools", ok=False)
    assert bad.returncode != 0 and "Invalid username or password" in bad.stderr, bad.stderr


def test_a_cluster_authenticates_its_own_connections(tmp_path):
    """Three combined nodes whose controller listener and inter-broker listener (INTERNAL) are SASL_PLAINTEXT
    with PLAIN only: the voters and the replica fetchers authenticate with the listener's JAAS username and
    password; the quorum commits and an RF-3 topic's ISR fills; clients use the PLAINTEXT listener."""
    from kbroker.testing.cluster import KbrokerCluster

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="node" '
            'password="node-secret" user_node="node-secret";')
    cluster = KbrokerCluster(tmp_path, nodes=3, overrides={
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas, "listener.name.controller.plain.sasl.jaas.config": jaas})
    add_internal_listener(cluster)
    with cluster:
        replicate_and_read_back(cluster, 2000)


def _unsecured(claims: dict) -> str:
    import base64
    import json

    def enc(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{enc({'alg': 'none'})}.{enc(claims)}."


def _oauth_token(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_with_unsecured_tokens(kbroker_factory, java_driver):
    """OAUTHBEARER with Kafka's default (unsecured JWT) validator: confluent-kafka (librdkafka's unsecured
    tokens), kafka-python (a token provider) and the Java client (OAuthBearerLoginModule's unsecured login)
    authenticate; the token's ``sub`` is the principal (StandardAuthorizer: ``User:ALICE@ENG`` is a super user, every
    user may READ the topic and any group); an expired token gets RFC 7628's error challenge, then
    SASL_AUTHENTICATION_FAILED."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    broker, bootstrap = sasl_broker(kbroker_factory, {
        "sasl.enabled.mechanisms": "OAUTHBEARER", "connections.max.reauth.ms": "600000",
        "listener.name.sasl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ALICE@ENG"})
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=ALICE@ENG"}
    read_all = [AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:*", "*", AclOperation.READ,
                           AclPermissionType.ALLOW) for rtype, name in ((ResourceType.TOPIC, "oauth"),
                                                                        (ResourceType.GROUP, "*"))]
    alice_admin = AdminClient(conf)
    for f in alice_admin.create_acls(read_all).values():
        f.result(20)
    values = [f"oauth-{i}".encode() for i in range(50)]
    produce(conf, "oauth", values)
    assert sorted(consume(conf, "oauth", len(values))) == sorted(values)

    def ops(c: dict) -> set[str]:
        admin = AdminClient(c)
        td = admin.describe_topics(TopicCollection(["oauth"]), include_authorized_operations=True)["oauth"].result(20)
        return {op.name for op in td.authorized_operations}

    assert "WRITE" in ops(conf)
    deadline = time.monotonic() + 20  # the ACLs reach the broker's authorizer after their metadata records
    bob: set[str] | Exception = set()
    while time.monotonic() < deadline:
        try:
            bob = ops({**conf, "sasl.oauthbearer.config": "principal=bob"})
        except Exception as exc:  # noqa: BLE001 - not yet allowed to describe the topic
            bob = exc
        if bob == {"DESCRIBE", "READ"}:
            break
        time.sleep(0.3)
    assert bob == {"DESCRIBE", "READ"}, bob

    from kafka import KafkaConsumer

    try:  # kafka-python 3.x; 2.x had it in kafka.sasl.oauth
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:
        from kafka.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return _unsecured({"sub": "carol", "exp": int(time.time()) + 600, "iat": int(time.time())})

    kc = KafkaConsumer("oauth", bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                       sasl_oauth_token_provider=Provider())
    assert len(list(kc)) == len(values)
    kc.close()

    java = ["--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=OAUTHBEARER", "--prop",
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="dave";']
    got = java_driver.one(java_driver.run(["consume", "--bootstrap", bootstrap, "--topic", "oauth", "--expect",
                                           str(len(values)), *java]), "done")
    assert got["count"] == len(values), got

    w = Wire(bootstrap)
    assert w.send(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1).error_code == ErrorCode.NONE
    good = _unsecured({"sub": "erin", "exp": int(time.time()) + 3})
    resp = w.send(SaslAuthenticateRequest(auth_bytes=_oauth_token(good)), 2)
    assert resp.error_code == ErrorCode.NONE and 0 < resp.session_lifetime_ms <= 3000, resp  # the token's exp
    w.close()
    w = Wire(bootstrap)
    w.send(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
    expired = _unsecured({"sub": "erin", "exp": int(time.time()) - 60})
    challenge = w.send(SaslAuthenticateRequest(auth_bytes=_oauth_token(expired)), 2)
    assert challenge.error_code == ErrorCode.NONE and b'"invalid_token"' in bytes(challenge.auth_bytes), challenge
    final = w.send(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2)
    assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "invalid_token" in final.error_message
    assert w.closed_within(5)
    w.close()


def test_oauthbearer_with_a_jwks(kbroker_factory, tmp_path):
    """OAuthBearerValidatorCallbackHandler (KIP-768): RS256 tokens checked against a JWKS served over HTTP, with
    the expected audience and issuer; confluent-kafka's token callback gets in; a token for another audience, one
    signed by a key not in the set and one from another issuer are refused."""
    import http.server
    import json
    import threading

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key, stranger = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(jwks)

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        jwks_url = f"http://127.0.0.1:{server.server_port}/jwks.json"
        broker, bootstrap = sasl_broker(kbroker_factory, {
            "sasl.enabled.mechanisms": "OAUTHBEARER", "listener.name.sasl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
            "listener.name.sasl.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
            "sasl.oauthbearer.expected.audience": "kbroker", "sasl.oauthbearer.expected.issuer": "https://idp.test"},
            start=False)
        if broker.target == "kafka":
            # Kafka 4 fetches only URLs listed in this JVM system property (KAFKA_OPTS in its scripts)
            broker.system_properties["org.apache.kafka.sasl.oauthbearer.allowed.urls"] = jwks_url
        broker.start()

        def token(signer=key, kid: str = "k1", aud: str = "kbroker", iss: str = "https://idp.test") -> str:  # noqa: ANN001
            now = int(time.time())
            return jwt.encode({"sub": "svc-orders", "aud": aud, "iss": iss, "iat": now, "exp": now + 600}, signer,
                              algorithm="RS256", headers={"kid": kid})

        conf = {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
                "sasl.mechanism": "OAUTHBEARER",
                "oauth_cb": lambda _cfg: (token(), time.time() + 600)}
        produce(conf, "jwks", [b"signed"])
        assert consume(conf, "jwks", 1) == [b"signed"]
        for bad in (token(aud="other"), token(signer=stranger), token(iss="https://evil.test"),
                    token(kid="unknown")):
            w = Wire(bootstrap)
            w.send(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
            challenge = w.send(SaslAuthenticateRequest(auth_bytes=_oauth_token(bad)), 2)
            assert b"invalid_token" in bytes(challenge.auth_bytes), challenge
            final = w.send(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2)
            assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            w.close()
        w = Wire(bootstrap)
        w.send(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1)
        assert w.send(SaslAuthenticateRequest(auth_bytes=_oauth_token(token())), 2).error_code == ErrorCode.NONE
        assert w.send(MetadataRequest(topics=None), 4).brokers
        w.close()
    finally:
        server.shutdown()


def _wait_for_log(broker, text: str, timeout: float = 10) -> str:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = broker.log_text()
        if text in log:
            return log
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in the broker's log:\n{broker.log_tail(30)}")


@pytest.mark.kbroker_only("kbroker's tools and kbroker's log line of a failed authentication")
def test_tools_report_a_failed_authentication_at_once(kbroker_factory, tmp_path):
    """The tools say ``Authentication failed: <the broker's reason>`` as soon as the broker refuses their
    credentials (librdkafka's admin client, producer and consumer, and kbroker's own codec), not that no broker can
    be reached after their 10 s timeout; the broker logs each failed login once, at INFO, with the client's
    address, the mechanism and the principal the client claimed."""
    from compat_tests.test_cli_tools import cli

    broker, bootstrap = sasl_broker(kbroker_factory, {})
    conf = tmp_path / "bad.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    "    username=\"alice\" password=\"wrong\";\n")
    cases = [("kbroker-topics", "--command-config", "--list"),
             ("kbroker-consumer-groups", "--command-config", "--list"),
             ("kbroker-configs", "--command-config", "--describe", "--entity-type", "topics", "--entity-name", "t"),
             ("kbroker-configs", "--command-config", "--alter", "--entity-type", "topics", "--entity-name", "t",
              "--add-config", "retention.ms=1000"),
             ("kbroker-console-producer", "--producer.config", "--topic", "t"),
             ("kbroker-console-consumer", "--consumer.config", "--topic", "t", "--max-messages", "1")]
    for tool, flag, *args in cases:
        t0 = time.monotonic()
        res = cli(tool, "--bootstrap-server", bootstrap, flag, conf, *args, ok=False, input="")
        took = time.monotonic() - t0
        assert res.returncode == 1, (tool, res.stdout, res.stderr)
        assert "Authentication failed: Invalid username or password" in res.stderr, (tool, res.stderr)
        assert "cannot reach" not in res.stderr and "Traceback" not in res.stderr, (tool, res.stderr)
        assert took < 8, f"{tool} took {took:.1f} s to report the failed authentication (its timeout is 10 s)"
    assert "principal User:alice): Authentication failed: Invalid username or password" in broker.log_text()

    # one line per failed login, with what the broker knows of it
    for mechanism, first, reason in (
            ("PLAIN", b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
            ("SCRAM-SHA-256", b"n,,n=nobody,r=abcdefghijkl", "Authentication failed during authentication due "
                                                              "to invalid credentials with SASL mechanism "
                                                              "SCRAM-SHA-256")):
        w = Wire(bootstrap)
        port = w.sock.getsockname()[1]
        assert w.send(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == ErrorCode.NONE
        resp = w.send(SaslAuthenticateRequest(auth_bytes=first), 2)
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, resp
        assert w.closed_within(5)
        w.close()
        principal = "User:alice" if mechanism == "PLAIN" else "User:nobody"
        log = _wait_for_log(broker, f"Failed authentication with 127.0.0.1:{port} ")
        lines = [line for line in log.splitlines() if f"127.0.0.1:{port} " in line or f"', {port})" in line]
        assert len(lines) == 1, lines
        assert " INFO " in lines[0] and (f"(listener SASL, mechanism {mechanism}, principal {principal}): {reason}"
                                         in lines[0]), lines
