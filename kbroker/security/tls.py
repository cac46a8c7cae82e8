"""TLS contexts from Kafka's ``ssl.*`` keys, for listeners (server side) and for this node's and the tools'
own connections (client side).

Keys (Kafka's names and defaults; issue 11, KIP-651 for PEM):

* keystore: ``ssl.keystore.type`` ``PEM`` with ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``
  (the PEM text itself) or ``ssl.keystore.location`` (a PEM file holding key and chain), or ``PKCS12`` with
  ``ssl.keystore.location`` and ``ssl.keystore.password``; ``ssl.key.password`` for an encrypted key. A
  ``JKS``-typed location that holds a PKCS12 file is read as PKCS12 (as Java does); a real JKS file is refused
  with the ``keytool`` line that converts it.
* truststore: ``ssl.truststore.type`` ``PEM`` with ``ssl.truststore.certificates`` (PEM text) or a PEM
  ``ssl.truststore.location``, or ``PKCS12`` with ``ssl.truststore.location`` / ``ssl.truststore.password``;
  none configured: the system's CA certificates.
* ``ssl.client.auth`` ``none`` / ``requested`` / ``required``; ``ssl.enabled.protocols`` (the lowest and highest
  named become the context's bounds); ``ssl.cipher.suites`` (IANA names as Java uses them, or OpenSSL names;
  TLS 1.2 suites are enforced; Python's ``ssl`` cannot restrict TLS 1.3 suites, so naming only some of them
  logs a warning, and a list without TLS 1.2 suites disables TLS 1.2);
  ``ssl.endpoint.identification.algorithm`` ``https`` (default: a client checks the server's host name) or
  empty.

Every key is read per listener first: ``listener.name.<listener in lower case>.<key>`` wins over ``<key>``
(Kafka's rule). Errors are :class:`TlsConfigError` (a :class:`~kbroker.config.ConfigException`: the broker
refuses to start, naming the key).
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any, Callable

from kbroker.config import BROKER_DEFAULTS, ConfigException

log = logging.getLogger(__name__)

Getter = Callable[[str], str]

#: TLS 1.2 suites: IANA name (Java's) -> OpenSSL name (from ``openssl ciphers -stdname``)
IANA_TO_OPENSSL: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8": "ECDHE-ECDSA-AES256-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM": "ECDHE-ECDSA-AES256-CCM",
    "TLS_DHE_RSA_WITH_AES_256_CCM_8": "DHE-RSA-AES256-CCM8",
    "TLS_DHE_RSA_WITH_AES_256_CCM": "DHE-RSA-AES256-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8": "ECDHE-ECDSA-AES128-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM": "ECDHE-ECDSA-AES128-CCM",
    "TLS_DHE_RSA_WITH_AES_128_CCM_8": "DHE-RSA-AES128-CCM8",
    "TLS_DHE_RSA_WITH_AES_128_CCM": "DHE-RSA-AES128-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_256_CCM_8": "AES256-CCM8",
    "TLS_RSA_WITH_AES_256_CCM": "AES256-CCM",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_128_CCM_8": "AES128-CCM8",
    "TLS_RSA_WITH_AES_128_CCM": "AES128-CCM",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}
TLS13_SUITES = ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256")

_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1.2": ssl.TLSVersion.TLSv1_2,
             "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


class TlsConfigError(ConfigException):
    """An ``ssl.*`` setting that cannot be used (missing keystore, unreadable file, wrong password, ...)."""


def settings(props: Any, listener: str | None = None) -> Getter:
    """A getter for a listener's keys (``ssl.*``, ``sasl.*``): ``listener.name.<listener>.<key>``, else ``<key>``,
    else Kafka's default.

    ``props`` is a :class:`~kbroker.config.BrokerConfig` or a plain mapping (a client's properties)."""
    raw = props.props if hasattr(props, "props") else props
    prefix = f"listener.name.{listener.lower()}." if listener else None

    def get(key: str) -> str:
        if prefix is not None and prefix + key in raw:
            return str(raw[prefix + key])
        if key in raw:
            return str(raw[key])
        return BROKER_DEFAULTS.get(key, "")

    return get


def server_context(get: Getter, what: str = "the listener") -> ssl.SSLContext:
    """The context of a TLS listener: its keystore (required), ``ssl.client.auth`` with the truststore."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols_and_ciphers(ctx, get)
    if not _load_keystore(ctx, get):
        raise TlsConfigError(f"{what} uses TLS but has no keystore: set ssl.keystore.location (PKCS12 or PEM) or "
                             f"ssl.keystore.certificate.chain and ssl.keystore.key (ssl.keystore.type=PEM)")
    auth = get("ssl.client.auth").strip().lower() or "none"
    if auth not in _CLIENT_AUTH:
        raise TlsConfigError(f"Invalid value {auth} for configuration ssl.client.auth: String must be one of: "
                             f"required, requested, none")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none" and not _load_truststore(ctx, get):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(get: Getter) -> ssl.SSLContext:
    """The context of a connection this process opens: the server verified against the truststore (host name
    too unless ``ssl.endpoint.identification.algorithm`` is empty); the keystore, if any, as client
    certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols_and_ciphers(ctx, get)
    ctx.check_hostname = get("ssl.endpoint.identification.algorithm").strip().lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, get):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, get)
    return ctx


# ---------------------------------------------------------------------------------------------- internals
def _protocols_and_ciphers(ctx: ssl.SSLContext, get: Getter) -> None:
    names = [x.strip() for x in get("ssl.enabled.protocols").split(",") if x.strip()]
    bad = [n for n in names if n not in _VERSIONS]
    if bad or not names:
        raise TlsConfigError(f"Invalid value {get('ssl.enabled.protocols')} for configuration ssl.enabled.protocols: "
                             f"expected a list of {', '.join(_VERSIONS)}")
    versions = sorted(_VERSIONS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = [x.strip() for x in get("ssl.cipher.suites").split(",") if x.strip()]
    if not suites:
        return
    tls13 = [s for s in suites if s in TLS13_SUITES]
    tls12 = []
    for s in suites:
        if s in TLS13_SUITES:
            continue
        name = IANA_TO_OPENSSL.get(s, s if s in IANA_TO_OPENSSL.values() else None)
        if name is None:
            raise TlsConfigError(f"Invalid value {s} in ssl.cipher.suites: not a cipher suite this kbroker knows "
                                 f"(IANA names such as TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, or OpenSSL names)")
        tls12.append(name)
    if tls12:
        ctx.set_ciphers(":".join(tls12))
    elif ctx.maximum_version >= ssl.TLSVersion.TLSv1_3:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3  # no TLS 1.2 suite named: no TLS 1.2
    else:
        raise TlsConfigError("ssl.cipher.suites names no suite of the enabled protocols")
    if tls13 and len(set(tls13)) < len(TLS13_SUITES):
        log.warning("ssl.cipher.suites names only some TLS 1.3 suites (%s); kbroker cannot restrict TLS 1.3 "
                    "suites and offers all of them", ", ".join(tls13))


def _read(path: str, key: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"Invalid value {path} for configuration {key}: {exc.strerror or exc}") from None


def _kind(data: bytes, declared: str, key: str) -> str:
    """PEM or PKCS12 from the file's content (Java, too, reads a PKCS12 file whatever the declared type)."""
    if data.lstrip().startswith(b"-----BEGIN"):
        return "PEM"
    if data.startswith(_JKS_MAGIC):
        raise TlsConfigError(f"{key} is a JKS keystore, which kbroker cannot read; convert it with keytool "
                             f"-importkeystore -srckeystore FILE -destkeystore FILE.p12 -deststoretype PKCS12 and "
                             f"set the type to PKCS12")
    if declared == "PEM":
        raise TlsConfigError(f"{key} is not a PEM file (ssl.*.type=PEM)")
    return "PKCS12"


def _load_keystore(ctx: ssl.SSLContext, get: Getter) -> bool:
    key_password = get("ssl.key.password") or None
    chain, key = get("ssl.keystore.certificate.chain").strip(), get("ssl.keystore.key").strip()
    if chain or key:
        if not (chain and key):
            raise TlsConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go together")
        _load_pem_chain(ctx, (key + "\n" + chain + "\n").encode(), key_password, "ssl.keystore.key")
        return True
    location = get("ssl.keystore.location").strip()
    if not location:
        return False
    data = _read(location, "ssl.keystore.location")
    if _kind(data, get("ssl.keystore.type").strip().upper(), "ssl.keystore.location") == "PEM":
        _load_pem_chain(ctx, data, key_password, "ssl.keystore.location")
        return True
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    store_password = get("ssl.keystore.password")
    last: Exception | None = None
    for pw in dict.fromkeys([store_password, key_password or ""]):
        try:
            pkey, cert, extra = pkcs12.load_key_and_certificates(data, pw.encode() if pw else None)
            break
        except ValueError as exc:
            last = exc
    else:
        raise TlsConfigError(f"ssl.keystore.location {location}: cannot open the PKCS12 keystore (wrong "
                             f"ssl.keystore.password?): {last}")
    if pkey is None or cert is None:
        raise TlsConfigError(f"ssl.keystore.location {location}: no private key entry in the keystore")
    pem = pkey.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    pem += cert.public_bytes(Encoding.PEM) + b"".join(c.public_bytes(Encoding.PEM) for c in extra or ())
    _load_pem_chain(ctx, pem, None, "ssl.keystore.location")
    return True


def _load_pem_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None, key: str) -> None:
    """``load_cert_chain`` reads files only: the PEM goes through a private (0600) temporary file."""
    fd, path = tempfile.mkstemp(prefix="kbroker-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=password)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"{key}: cannot load the private key and certificate chain (wrong ssl.key.password, "
                             f"or key and certificate do not match?): {exc}") from None
    finally:
        os.unlink(path)


def truststore_pem(get: Getter) -> str:
    """The truststore's certificates as PEM text ("" when none is configured); raises :class:`TlsConfigError`."""
    certs = get("ssl.truststore.certificates").strip()
    if certs:
        return certs + "\n"
    location = get("ssl.truststore.location").strip()
    if not location:
        return ""
    data = _read(location, "ssl.truststore.location")
    if _kind(data, get("ssl.truststore.type").strip().upper(), "ssl.truststore.location") == "PEM":
        return data.decode("ascii", "replace")
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    password = get("ssl.truststore.password")
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(f"ssl.truststore.location {location}: cannot open the PKCS12 truststore (wrong "
                             f"ssl.truststore.password?): {exc}") from None
    found = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    if not found:
        raise TlsConfigError(f"ssl.truststore.location {location}: no certificate in the truststore")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in found)


def _load_truststore(ctx: ssl.SSLContext, get: Getter) -> bool:
    pem = truststore_pem(get)
    if not pem:
        return False
    try:
        ctx.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"the truststore's certificates cannot be loaded: {exc}") from None
    return True
