"""What a listener's security protocol asks of its connections, and of this node's connections to a listener.

:class:`ListenerSecurity` is built once per listener before start-up writes anything (so a bad ``ssl.*`` or
``sasl.*`` setting stops the start with one line naming it): the security protocol
(``listener.security.protocol.map``), the TLS server context (SSL, SASL_SSL), the certificate principal mapper
(SSL) and the SASL mechanisms and users (SASL_PLAINTEXT, SASL_SSL). :func:`client_ssl_context` and
:func:`client_sasl` are the other side: what this node uses to reach another node's listener of that name
(inter-broker replication, transaction markers, the controller quorum), None for PLAINTEXT.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from kbroker.security.principal import ANONYMOUS, SslPrincipalMapper
from kbroker.security.sasl import SaslListenerConfig
from kbroker.security.tls import TlsConfigError, client_context, server_context, settings

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class ListenerSecurity:
    name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslListenerConfig | None = None

    @classmethod
    def of(cls, config: Any, listener: str) -> ListenerSecurity:
        """The security of ``listener`` from a :class:`~kbroker.config.BrokerConfig`; raises
        :class:`~kbroker.security.tls.TlsConfigError` or :class:`~kbroker.security.sasl.SaslConfigError`."""
        protocol = config.security_protocol(listener)
        get = settings(config, listener)
        out = cls(listener, protocol)
        if protocol in TLS_PROTOCOLS:
            out.ssl_context = server_context(get, f"listener {listener}")
        if protocol == "SSL":  # on SASL_SSL the principal is the SASL one
            try:
                out.principal_mapper = SslPrincipalMapper(get("ssl.principal.mapping.rules"))
            except ValueError as exc:
                raise TlsConfigError(f"Invalid value {get('ssl.principal.mapping.rules')} for configuration "
                                     f"ssl.principal.mapping.rules: {exc}") from None
        if protocol in SASL_PROTOCOLS:
            out.sasl = SaslListenerConfig.of(get, listener)
        return out

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    def principal(self, transport: Any) -> str:
        """The principal of a connection accepted on this listener before any SASL exchange (SSL: from the
        client's certificate, if it sent one); raises :class:`~kbroker.security.principal.NoMatchingRule`."""
        if self.principal_mapper is None:
            return ANONYMOUS
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return self.principal_mapper.principal(cert)


def client_ssl_context(config: Any, listener: str) -> ssl.SSLContext | None:
    """The TLS context for connecting to other nodes' ``listener`` (None when it is not a TLS listener)."""
    if config.security_protocol(listener) not in TLS_PROTOCOLS:
        return None
    return client_context(settings(config, listener))


def client_sasl(config: Any, listener: str, mechanism_key: str) -> Any:
    """This node's SASL credentials for other nodes' ``listener`` (None when it is not a SASL listener);
    ``mechanism_key`` is ``sasl.mechanism.inter.broker.protocol`` or ``sasl.mechanism.controller.protocol``."""
    if config.security_protocol(listener) not in SASL_PROTOCOLS:
        return None
    from kbroker.security.sasl import client_config

    return client_config(settings(config, listener), mechanism_key)
