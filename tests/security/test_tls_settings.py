"""kbroker.security: ssl.principal.mapping.rules (Kafka's rule syntax and semantics) and the TLS contexts built
from ssl.* keys (per-listener precedence, protocols, cipher names, keystore errors)."""

from __future__ import annotations

import ssl

import pytest

from kbroker.security.principal import ANONYMOUS, InvalidRules, NoMatchingRule, SslPrincipalMapper, parse_rules
from kbroker.security.tls import TlsConfigError, client_context, server_context, settings
from kbroker.testing.certs import CertificateAuthority


def test_default_rule_keeps_the_distinguished_name():
    assert SslPrincipalMapper().name("CN=alice,OU=eng,O=example") == "CN=alice,OU=eng,O=example"
    assert SslPrincipalMapper("DEFAULT").principal(None) == ANONYMOUS


def test_first_matching_rule_wins_with_groups_and_case():
    rules = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,"
             "RULE:^cn=(.*?),ou=(.*?)$/$1@$2/U,DEFAULT")
    m = SslPrincipalMapper(rules)
    assert m.name("CN=svc,OU=ServiceUsers,O=x") == "svc"
    assert m.name("CN=Alice,OU=Eng,O=Example") == "alice@eng"
    assert m.name("cn=bob,ou=ops") == "BOB@OPS"
    assert m.name("CN=carol") == "CN=carol"  # DEFAULT


def test_no_matching_rule_and_bad_rules():
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=x$/x/").name("CN=y")
    for bad in ("RULE:abc", "NOPE", "RULE:^a$/b/X", "DEFAULT,RULE:a/b"):
        with pytest.raises(InvalidRules):
            parse_rules(bad)
    # a slash inside the pattern is escaped; newline separators work too
    assert SslPrincipalMapper("RULE:^CN=(.*)\\/x$/$1/\nDEFAULT").name("CN=a/x") == "a"


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


def test_listener_keys_win_over_plain_keys(ca):
    get = settings({"ssl.client.auth": "required", "listener.name.internal.ssl.client.auth": "none"}, "INTERNAL")
    assert get("ssl.client.auth") == "none"
    assert settings({"ssl.client.auth": "required"}, "INTERNAL")("ssl.client.auth") == "required"
    assert settings({}, "X")("ssl.keystore.type") == "JKS"  # Kafka's default


def test_server_context_from_pem_text_and_pkcs12(ca):
    ident = ca.issue("node", key_password="pw")
    ctx = server_context(settings({**ident.pem_properties(), **ca.truststore_properties(),
                                   "ssl.client.auth": "requested", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3"}))
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    ctx = server_context(settings({**ident.p12_properties(), "ssl.keystore.type": "JKS"}))  # PKCS12 content wins
    assert ctx.verify_mode == ssl.CERT_NONE
    with pytest.raises(TlsConfigError, match="ssl.key.password"):
        server_context(settings({**ident.pem_properties(), "ssl.key.password": "wrong"}))
    with pytest.raises(TlsConfigError, match="no keystore"):
        server_context(settings({}))
    with pytest.raises(TlsConfigError, match="ssl.client.auth"):
        server_context(settings({**ident.p12_properties(), "ssl.client.auth": "always"}))


def test_client_context_checks_host_names_unless_told_not_to(ca):
    assert client_context(settings(ca.truststore_properties(pkcs12=True))).check_hostname
    off = client_context(settings({**ca.truststore_properties(), "ssl.endpoint.identification.algorithm": ""}))
    assert not off.check_hostname and off.verify_mode == ssl.CERT_REQUIRED


def test_cipher_suites_by_iana_or_openssl_name(ca):
    ident = ca.issue("node2")
    ctx = server_context(settings({**ident.p12_properties(), "ssl.cipher.suites":
                                   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES256-GCM-SHA384"}))
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"}
    only13 = server_context(settings({**ident.p12_properties(), "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}))
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(TlsConfigError, match="cipher"):
        server_context(settings({**ident.p12_properties(), "ssl.cipher.suites": "TLS_NOT_A_SUITE"}))
    with pytest.raises(TlsConfigError, match="ssl.enabled.protocols"):
        server_context(settings({**ident.p12_properties(), "ssl.enabled.protocols": "SSLv3"}))
