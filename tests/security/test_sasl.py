"""kbroker.security.sasl: JAAS lines, the PLAIN and SCRAM servers, the client exchange against them, the
per-connection state machine (what may be sent when; re-authentication keeps the principal)."""

from __future__ import annotations

import pytest
import scramp

from kbroker.security.sasl import (
    AuthenticationFailed,
    PlainServer,
    SaslAuthenticator,
    SaslClientConfig,
    SaslConfigError,
    SaslListenerConfig,
    ScramServer,
    client_config,
    parse_jaas,
)


def test_jaas_lines():
    j = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                   'password="a\\"b c" user_admin="x";')
    assert j.module.endswith("PlainLoginModule")
    assert dict(j.options) == {"username": "admin", "password": 'a"b c', "user_admin": "x"}
    assert parse_jaas("M optional a=b").options == {"a": "b"}
    for bad in ("", "OnlyAModule", 'M required user="x" ="y";'):
        with pytest.raises(SaslConfigError):
            parse_jaas(bad)


def test_plain_server():
    ok = PlainServer({"alice": "s3cret"})
    assert ok.step(b"\0alice\0s3cret") == b"" and ok.complete and ok.username == "alice"
    assert PlainServer({"alice": "s3cret"}).step(b"alice\0alice\0s3cret") == b""  # authzid = authcid
    cases = {b"\0alice\0wrong": "Invalid username or password", b"\0bob\0s3cret": "Invalid username or password",
             b"\0\0s3cret": "username not specified", b"\0alice\0": "password not specified",
             b"alice": "expected 3 tokens", b"carol\0alice\0s3cret": "authorization id"}
    for token, msg in cases.items():
        with pytest.raises(AuthenticationFailed, match=msg):
            PlainServer({"alice": "s3cret"}).step(token)


def _store(mechanism: str, users: dict[str, str]):  # noqa: ANN202
    code = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}[mechanism]
    infos = {(u, code): scramp.ScramMechanism(mechanism).make_auth_info(p, 4096) for u, p in users.items()}
    return lambda user, c: infos.get((user, c))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_our_client(mechanism):
    lookup = _store(mechanism, {"alice": "pw", "we,ird=": "pw2"})
    for user, password in (("alice", "pw"), ("we,ird=", "pw2")):
        server = ScramServer(mechanism, lookup)
        client = SaslClientConfig(mechanism, user, password).exchange()
        token = client.first()
        while token is not None:
            token = client.step(server.step(token))
        assert server.complete and server.username == user and client.complete
    for user, password in (("alice", "bad"), ("nobody", "pw")):
        server = ScramServer(mechanism, lookup)
        client = SaslClientConfig(mechanism, user, password).exchange()
        with pytest.raises(AuthenticationFailed, match=f"invalid credentials with SASL mechanism {mechanism}"):
            token = client.first()
            while token is not None:
                token = client.step(server.step(token))


def _authenticator(reauth_users=None) -> SaslAuthenticator:  # noqa: ANN001
    cfg = SaslListenerConfig("SASL", ("PLAIN",), reauth_users or {"alice": "a", "bob": "b"})
    return SaslAuthenticator(cfg, lambda u, c: None)


def test_state_machine_and_reauthentication():
    a = _authenticator()
    assert a.allows(18) and a.allows(17) and not a.allows(36) and not a.allows(3)
    assert not a.handshake("SCRAM-SHA-256", 1)  # not enabled
    assert a.handshake("PLAIN", 1) and a.allows(36) and not a.allows(3) and not a.allows(17)
    a.authenticate(b"\0alice\0a")
    assert a.authenticated and a.principal == "User:alice" and a.allows(3) and a.allows(36)
    assert not a.handshake("PLAIN", 0)  # re-authentication needs handshake v1
    assert a.handshake("PLAIN", 1) and not a.allows(3)
    a.authenticate(b"\0alice\0a")
    assert a.authenticated
    assert a.handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed, match="Cannot change principals"):
        a.authenticate(b"\0bob\0b")
    assert not a.allows(18)

    v0 = _authenticator()
    assert v0.handshake("PLAIN", 0) and v0.raw_tokens and not v0.allows(36)


def test_listener_and_client_configs():
    get = {"sasl.enabled.mechanisms": "GSSAPI,PLAIN",
           "plain.sasl.jaas.config": 'M required username="n" password="p" user_n="p";',
           "connection.failed.authentication.delay.ms": "0", "sasl.server.max.receive.size": "1000",
           "sasl.mechanism.inter.broker.protocol": "PLAIN"}.get
    cfg = SaslListenerConfig.of(lambda k: get(k, ""), "INTERNAL")
    assert cfg.mechanisms == ("PLAIN",) and dict(cfg.plain_users) == {"n": "p"} and cfg.failed_delay_s == 0
    assert client_config(lambda k: get(k, ""), "sasl.mechanism.inter.broker.protocol") == SaslClientConfig(
        "PLAIN", "n", "p")
    with pytest.raises(SaslConfigError, match="enables no mechanism"):
        SaslListenerConfig.of(lambda k: "GSSAPI" if k == "sasl.enabled.mechanisms" else "", "X")
    with pytest.raises(SaslConfigError, match="no JAAS configuration"):
        SaslListenerConfig.of(lambda k: "PLAIN" if k == "sasl.enabled.mechanisms" else "", "X")


def test_scram_refuses_the_doubled_client_nonce_of_old_librdkafka():
    """librdkafka before 2.6.1 (librdkafka #4895; Debian's kcat has 2.0.2) puts client nonce + server nonce in
    the final message's r=, the server nonce already starting with the client's; Kafka 4.3 refuses that exchange
    (SASL_AUTHENTICATION_FAILED, even with the right password), and so does kbroker."""
    import base64
    import hashlib
    import hmac as _hmac

    lookup = _store("SCRAM-SHA-256", {"alice": "pw"})
    salt, _, _, iterations = lookup("alice", 1)
    server = ScramServer("SCRAM-SHA-256", lookup)
    client_first_bare = "n=alice,r=cnonce"
    server_first = server.step(("n,," + client_first_bare).encode()).decode()
    server_nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r=cnonce{server_nonce}"
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, iterations)
    client_key = _hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    signature = _hmac.new(hashlib.sha256(client_key).digest(),
                          f"{client_first_bare},{server_first},{without_proof}".encode(), hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    with pytest.raises(AuthenticationFailed):
        server.step(f"{without_proof},p={proof}".encode())
    assert not server.complete
