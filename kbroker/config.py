"""Broker configuration: Kafka's ``server.properties`` keys with Kafka's defaults.

``BrokerConfig`` is immutable. Values are kept as the strings the operator wrote (so DescribeConfigs can
report them verbatim) and read through typed accessors (``get_int``, ``get_bool``, ``get_list``) or the
snake_case attributes defined below for the keys kbroker uses most.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import jproperties

#: Kafka's defaults of the ``ssl.*`` keys (read per listener by :mod:`kbroker.security.tls`)
SSL_DEFAULTS: dict[str, str] = {
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.key.password": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.keystore.key": "",
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.principal.mapping.rules": "DEFAULT",
}

#: Kafka's defaults of the SASL keys (read per listener by :mod:`kbroker.security.sasl`)
SASL_DEFAULTS: dict[str, str] = {
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "sasl.mechanism.controller.protocol": "GSSAPI",
    "sasl.jaas.config": "",
    "connection.failed.authentication.delay.ms": "100",
    "sasl.server.max.receive.size": "524288",
    "connections.max.reauth.ms": "0",
    "sasl.oauthbearer.jwks.endpoint.url": "",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": "3600000",
    "sasl.oauthbearer.expected.audience": "",
    "sasl.oauthbearer.expected.issuer": "",
    "sasl.oauthbearer.sub.claim.name": "sub",
    "sasl.oauthbearer.scope.claim.name": "scope",
    "sasl.oauthbearer.clock.skew.seconds": "30",
}

# Kafka broker defaults for the keys kbroker reads (facts from Kafka's documentation of broker configs).
BROKER_DEFAULTS: dict[str, str] = {
    "process.roles": "broker,controller",
    "delegation.token.secret.key": "",
    "delegation.token.max.lifetime.ms": "604800000",
    "delegation.token.expiry.time.ms": "86400000",
    "delegation.token.expiry.check.interval.ms": "3600000",
    "node.id": "1",
    "controller.quorum.voters": "",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "controller.quorum.election.backoff.max.ms": "1000",
    "controller.quorum.request.timeout.ms": "2000",
    "controller.quorum.retry.backoff.ms": "20",
    "metadata.log.max.record.bytes.between.snapshots": "20971520",
    "metadata.log.max.snapshot.interval.ms": "3600000",
    "metadata.max.idle.interval.ms": "500",
    "metadata.max.retention.bytes": "104857600",
    "metadata.max.retention.ms": "604800000",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://localhost:9092",
    "advertised.listeners": "",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": "PLAINTEXT",
    "log.dirs": "",
    "log.dir": "/tmp/kafka-logs",
    "metadata.log.dir": "",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "remote.log.storage.system.enable": "false",
    "socket.request.max.bytes": "104857600",
    "connections.max.idle.ms": "600000",
    "kbroker.request.read.timeout.ms": "30000",
    "max.connections": "2147483647",
    "max.connection.creation.rate": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "message.max.bytes": "1048588",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.wait.max.ms": "500",
    "max.incremental.fetch.session.cache.slots": "1000",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.backoff.ms": "1000",
    "replica.lag.time.max.ms": "30000",
    "replica.socket.timeout.ms": "30000",
    "replication.quota.window.num": "11",
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
    "controller.quota.window.num": "11",
    "controller.quota.window.size.seconds": "1",
    "replication.quota.window.size.seconds": "1",
    "num.replica.fetchers": "1",
    "log.segment.bytes": "1073741824",
    "log.roll.ms": "",
    "log.roll.hours": "168",
    "log.retention.ms": "",
    "log.retention.minutes": "",
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.flush.interval.messages": "9223372036854775807",
    "log.flush.interval.ms": "",
    "log.flush.scheduler.interval.ms": "9223372036854775807",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.segment.delete.delay.ms": "60000",
    "log.message.timestamp.type": "CreateTime",
    "log.cleanup.policy": "delete",
    "compression.type": "producer",
    "min.insync.replicas": "1",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.commit.timeout.ms": "5000",
    "transaction.state.log.num.partitions": "50",
    "group.initial.rebalance.delay.ms": "3000",
    "producer.id.expiration.ms": "86400000",
    "producer.id.expiration.check.interval.ms": "600000",
    "fetch.max.bytes": "57671680",
    "cluster.id": "",
    **SSL_DEFAULTS,
    **SASL_DEFAULTS,
}


class ConfigException(ValueError):
    """A configuration value kbroker cannot use; the message is one line naming the key, the value and what is
    allowed (Kafka's ``ConfigException`` wording: ``Invalid value X for configuration K: ...``)."""


#: a ``\\u`` escape not followed by four hex digits, after an even number of backslashes (an odd number escapes
#: the backslash itself); Java's ``Properties.load`` rejects it ("Malformed \\uxxxx encoding")
_MALFORMED_UNICODE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u(?![0-9a-fA-F]{4})")


class _JavaProperties(jproperties.Properties):
    """jproperties' reader with every comment line skipped, as Java does (jproperties reads ``#:`` lines as
    metadata and rejects some of them)."""

    def _parse_comment(self) -> None:
        self._getc()
        self._skip_natural_line()


def _check_unicode_escapes(text: str) -> None:
    """Raise :class:`ConfigException` for a malformed ``\\uXXXX`` escape outside comment lines (jproperties reads
    fewer than four hex digits, Java refuses them)."""
    continued = False
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        head = line.lstrip(" \t\f")
        if not continued and (not head or head[0] in "#!"):
            continue
        bad = _MALFORMED_UNICODE_ESCAPE.search(line)
        if bad:
            raise ConfigException(f"Malformed \\uxxxx encoding on line {number}: {line.strip()}")
        continued = (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str, *, trim_values: bool = True) -> dict[str, str]:
    """Parse Java ``.properties`` text as ``java.util.Properties.load`` does: ``key=value``, ``key: value`` or
    ``key value`` (whitespace separator), ``#``/``!`` comment lines, ``\\`` line continuations, ``\\uXXXX``,
    ``\\t``/``\\n``/``\\r``/``\\f`` escapes and escaped ``=``, ``:`` and spaces in keys; a key given twice keeps its
    last value. This is the one reader of the broker (``server.properties``, ``meta.properties``) and the tools
    (``--command-config`` and the like); parsing is jproperties'.

    ``trim_values`` strips whitespace around each value as Kafka's ``ConfigDef`` does when it parses a value
    (``Properties.load`` itself keeps trailing whitespace; ``trim_values=False`` returns exactly what it reads).
    Raises :class:`ConfigException` for text Java rejects (a malformed ``\\uXXXX`` escape)."""
    _check_unicode_escapes(text)
    reader = _JavaProperties()
    try:
        reader.load(text)
    except jproperties.ParseError as exc:
        raise ConfigException(f"Malformed properties text: {exc}") from None
    values = {key: value for key, (value, _meta) in reader.items()}
    return {key: value.strip() for key, value in values.items()} if trim_values else values


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` entry of ``listeners`` / ``advertised.listeners``."""

    name: str
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Listener:
        name, _, rest = text.strip().partition("://")
        host, _, port = rest.rpartition(":")
        if not rest or not port.isdigit() or not name:
            raise ConfigException(f"Invalid value {text.strip()} for a listener: expected NAME://host:port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return cls(name.upper(), host, int(port))


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's static configuration. ``props`` holds only what the operator set."""

    props: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: str | Path, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        props = parse_properties(Path(path).read_text(encoding="utf-8"))
        props.update(overrides or {})
        return cls(props)

    # ---- generic accessors ----
    def get(self, key: str) -> str:
        """The configured value, else Kafka's default, else ``""``."""
        if key in self.props:
            return self.props[key]
        return BROKER_DEFAULTS.get(key, "")

    def is_set(self, key: str) -> bool:
        return key in self.props

    def get_int(self, key: str) -> int:
        value = self.get(key)
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigException(f"Invalid value {value} for configuration {key}: Not a number of type "
                                  f"INT or LONG") from None

    def get_bool(self, key: str) -> bool:
        value = self.get(key).strip().lower()
        if value == "":
            return False
        if value not in ("true", "false"):
            raise ConfigException(f"Invalid value {self.get(key)} for configuration {key}: Expected value to be "
                                  f"either true or false")
        return value == "true"

    def get_list(self, key: str) -> list[str]:
        return [x.strip() for x in self.get(key).split(",") if x.strip()]

    # ---- frequently used keys ----
    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def process_roles(self) -> list[str]:
        return self.get_list("process.roles")

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get_list("log.dirs") or self.get_list("log.dir")
        return [Path(d) for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        d = self.get("metadata.log.dir")
        return Path(d) if d else self.log_dirs[0]

    @property
    def listeners(self) -> list[Listener]:
        return [Listener.parse(x) for x in self.get_list("listeners")]

    @property
    def advertised_listeners(self) -> list[Listener]:
        """``advertised.listeners``, falling back per listener to ``listeners`` (Kafka's rule).

        A listener bound to all interfaces (empty host or 0.0.0.0) is advertised with the machine's
        host name, as Kafka does.
        """
        adv = {lst.name: lst for lst in (Listener.parse(x) for x in self.get_list("advertised.listeners"))}
        out = []
        controller_names = set(n.upper() for n in self.get_list("controller.listener.names"))
        for lst in self.listeners:
            if lst.name in controller_names and "broker" in self.process_roles and lst.name not in adv:
                continue
            a = adv.get(lst.name, lst)
            if a.host in ("", "0.0.0.0", "::"):
                import socket

                a = Listener(a.name, socket.getfqdn(), a.port)
            out.append(a)
        return out

    def security_protocol(self, listener: str) -> str:
        """The security protocol of listener ``listener`` (``listener.security.protocol.map``; a listener named
        after a protocol is that protocol, Kafka's fallback): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
        for item in self.get_list("listener.security.protocol.map"):
            name, sep, proto = item.partition(":")
            if sep and name.strip().upper() == listener.upper():
                return proto.strip().upper()
        return listener.upper()

    @property
    def socket_request_max_bytes(self) -> int:
        return self.get_int("socket.request.max.bytes")

    @property
    def num_partitions(self) -> int:
        return self.get_int("num.partitions")

    @property
    def auto_create_topics_enable(self) -> bool:
        return self.get_bool("auto.create.topics.enable")

    def with_overrides(self, overrides: Mapping[str, str]) -> BrokerConfig:
        merged = dict(self.props)
        merged.update(overrides)
        return BrokerConfig(merged)
