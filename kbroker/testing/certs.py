"""Certificates for tests and examples: a private certificate authority that issues server and client
identities, written as the files Kafka's clients and kbroker's ``ssl.*`` keys take (PEM key and chain, PKCS12
keystore, PEM CA certificate). Built with ``cryptography``; RSA 2048 keys, valid for a day.

    ca = CertificateAuthority(tmp_path / "tls")
    server = ca.issue("broker", hosts=["127.0.0.1", "localhost"])
    alice = ca.issue("alice", ou="eng")      # subject CN=alice,OU=eng,O=kbroker-test
    server.pem_properties()  # {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": ..., ...}
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

ORGANIZATION = "kbroker-test"


@dataclass
class Identity:
    """One issued certificate and its key, with the files written for it."""

    name: str
    dn: str  # RFC 4514, most specific first: CN=alice,OU=eng,O=kbroker-test
    cert_pem: str  # the certificate, then the CA's
    key_pem: str  # PKCS8, encrypted with key_password when one was given
    cert_path: Path
    key_path: Path
    p12_path: Path  # PKCS12 keystore (password ``p12_password``)
    p12_password: str
    key_password: str | None
    ca: CertificateAuthority

    def pem_properties(self, prefix: str = "") -> dict[str, str]:
        """Kafka's PEM keystore keys holding this identity (``prefix``: ``listener.name.ssl.`` for one listener)."""
        props = {f"{prefix}ssl.keystore.type": "PEM", f"{prefix}ssl.keystore.certificate.chain": self.cert_pem,
                 f"{prefix}ssl.keystore.key": self.key_pem}
        if self.key_password:
            props[f"{prefix}ssl.key.password"] = self.key_password
        return props

    def p12_properties(self, prefix: str = "") -> dict[str, str]:
        """Kafka's PKCS12 keystore keys for this identity's keystore file."""
        return {f"{prefix}ssl.keystore.type": "PKCS12", f"{prefix}ssl.keystore.location": str(self.p12_path),
                f"{prefix}ssl.keystore.password": self.p12_password}


class CertificateAuthority:
    """A self-signed CA whose files live in ``directory`` (``ca.pem``, ``ca-truststore.p12``)."""

    def __init__(self, directory: str | Path, name: str = "kbroker-test-ca", truststore_password: str = "changeit"):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import NameOID

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = _new_key()
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                             x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.pem = _pem(self.cert)
        self.pem_path = self.directory / "ca.pem"
        self.pem_path.write_text(self.pem)
        self.truststore_password = truststore_password
        self.truststore_path = self.directory / "ca-truststore.p12"
        self.truststore_path.write_bytes(_p12(None, None, [self.cert], truststore_password))

    def truststore_properties(self, prefix: str = "", pkcs12: bool = False) -> dict[str, str]:
        """Kafka's truststore keys trusting this CA: PEM text, or the PKCS12 truststore file."""
        if pkcs12:
            return {f"{prefix}ssl.truststore.type": "PKCS12", f"{prefix}ssl.truststore.location":
                    str(self.truststore_path), f"{prefix}ssl.truststore.password": self.truststore_password}
        return {f"{prefix}ssl.truststore.type": "PEM", f"{prefix}ssl.truststore.certificates": self.pem}

    def issue(self, name: str, *, hosts: Iterable[str] = ("127.0.0.1", "localhost"), ou: str | None = None,
              key_password: str | None = None, p12_password: str = "changeit") -> Identity:
        """A certificate for ``CN=name[,OU=ou],O=kbroker-test`` usable as server and client, naming ``hosts``
        (IP addresses or DNS names) as subject alternative names."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = _new_key()
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
        if ou:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, name))
        subject = x509.Name(attrs)
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    encryption).decode()
        cert_pem = _pem(cert) + self.pem
        cert_path, key_path = self.directory / f"{name}.pem", self.directory / f"{name}.key"
        cert_path.write_text(cert_pem)
        key_path.write_text(key_pem)
        p12_path = self.directory / f"{name}.p12"
        p12_path.write_bytes(_p12(name, key, [cert, self.cert], p12_password))
        return Identity(name, subject.rfc4514_string(), cert_pem, key_pem, cert_path, key_path, p12_path,
                        p12_password, key_password, self)


def _new_key():  # noqa: ANN202
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(cert) -> str:  # noqa: ANN001
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _p12(name: str | None, key, certs: list, password: str) -> bytes:  # noqa: ANN001
    """A PKCS12 store Java reads too: PBES2/AES with a SHA-256 MAC (OpenSSL 3's defaults, Java 17 reads
    them); a store without a key holds the certificates as trusted entries."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    if key is None:
        return pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(c, None) for c in certs],
                                                BestAvailableEncryption(password.encode()))
    return pkcs12.serialize_key_and_certificates(name.encode() if name else None, key, certs[0], certs[1:],
                                                 BestAvailableEncryption(password.encode()))
