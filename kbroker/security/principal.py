"""The principal of a TLS client: its certificate's subject, mapped by ``ssl.principal.mapping.rules``.

Kafka's rules (KIP-371): a comma- or newline-separated list of ``RULE:pattern/replacement/[L|U]`` and
``DEFAULT``. The subject is written as an RFC 2253 / 4514 distinguished name, most specific attribute first
(``CN=alice,OU=eng,O=example``, what Java's ``X500Principal.getName()`` gives); the first rule whose pattern
matches the whole name gives the name (``$1``… name the pattern's groups; ``L``/``U`` lower- or upper-case the
result); ``DEFAULT`` gives the distinguished name unchanged. When no rule matches, the client cannot be
authenticated (Kafka throws ``NoMatchingRule`` and closes the connection): :class:`NoMatchingRule`.

A client without a certificate (``ssl.client.auth`` none or requested) is ``User:ANONYMOUS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` entry matches the certificate's distinguished name."""


class InvalidRules(ValueError):
    """``ssl.principal.mapping.rules`` cannot be parsed (the message names the part that is wrong)."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        out = re.sub(r"\\(.)|\$(\d+)", lambda x: x.group(1) if x.group(1) is not None else (m.group(int(x.group(2)))
                                                                                             or ""), self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


# one rule, then a separator: DEFAULT | RULE:pattern/replacement/[LU]; "/" inside pattern or replacement is "\/"
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:[,\n]\s*|$)")


def parse_rules(text: str) -> list[Rule]:
    """Parse ``ssl.principal.mapping.rules``; raises :class:`InvalidRules`."""
    rules: list[Rule] = []
    text = text.strip()
    pos = 0
    while pos < len(text):
        m = _RULE.match(text, pos)
        if m is None or m.end() == pos:
            raise InvalidRules(f"Invalid rule: {text[pos:]}")
        if m.group(1):
            rules.append(Rule(None))
        else:
            try:
                pattern = re.compile(m.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise InvalidRules(f"Invalid rule pattern {m.group(2)!r}: {exc}") from None
            rules.append(Rule(pattern, m.group(3).replace("\\/", "/"), m.group(4)))
        pos = m.end()
    return rules or [Rule(None)]


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once; :meth:`principal` per connection."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = parse_rules(rules or "DEFAULT")

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"No rules apply to {dn}")

    def principal(self, cert_der: bytes | None) -> str:
        """``User:<name>`` for a client certificate (DER), ``User:ANONYMOUS`` without one."""
        if not cert_der:
            return ANONYMOUS
        return "User:" + self.name(subject_dn(cert_der))


def subject_dn(cert_der: bytes) -> str:
    """The certificate's subject as an RFC 4514 string, most specific attribute first."""
    from cryptography import x509

    return x509.load_der_x509_certificate(cert_der).subject.rfc4514_string()
