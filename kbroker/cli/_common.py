"""Shared plumbing of the ``kbroker-*`` operator tools (Kafka's ``kafka-*.sh`` counterparts).

Every tool speaks the Kafka protocol only, so it works against any Kafka-compatible broker. What this
module gives them:

* :class:`ToolParser`: ``argparse`` with Kafka's habits: a bad argument prints the message and the usage
  to stderr and exits with status 1 (Kafka's tools exit 1, not argparse's 2);
* :class:`CliError`: raised for a clear, expected failure; :func:`run_tool` prints ``prog: message`` to
  stderr and returns 1 (a Kafka-style prefix can be put in the message itself);
* client configuration: ``--command-config``/``--producer.config`` property files, ``k=v`` lists, and
  translation of the few Java client property names librdkafka spells differently;
* :func:`admin_client`, :func:`check_reachable`: a confluent-kafka ``AdminClient`` with bounded timeouts, and a
  metadata round trip that turns "no broker answers" into a clear error within ``timeout`` seconds;
* :func:`kafka_table`: whitespace-aligned columns as Kafka's tools print them (``%-15s``-style minimum widths,
  one space between columns), laid out with ``tabulate``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from kbroker.config import ConfigException, parse_properties

DEFAULT_TIMEOUT_S = 10.0
"""Bound on waiting for a broker: connection, metadata and each admin request."""


class CliError(Exception):
    """A failure to report as one clear line on stderr, with exit status ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class AuthenticationError(CliError):
    """The broker refused the tool's SASL credentials: ``Authentication failed: <the broker's reason>``, as Kafka's
    tools report a ``SaslAuthenticationException``; reported at once, never as an unreachable broker."""

    def __init__(self, reason: str, status: int = 1) -> None:
        reason = reason.strip()
        super().__init__(reason if reason.startswith("Authentication failed") else
                         f"Authentication failed: {reason}", status)


class ToolParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that exits with status 1 on a bad argument, as Kafka's tools do."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def timeout_from_env() -> float:
    """``KBROKER_CLI_TIMEOUT_S`` overrides :data:`DEFAULT_TIMEOUT_S` (the tests use it to keep failures short)."""
    try:
        return float(os.environ.get("KBROKER_CLI_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def run_tool(prog: str, body: Callable[[], int | None]) -> int:
    """Run a tool's body; map :class:`CliError` and Ctrl-C to a message and an exit status."""
    try:
        return body() or 0
    except CliError as exc:
        print(f"{prog}: {exc}" if str(exc) else prog, file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `kbroker-console-consumer ... | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at interpreter exit
        except OSError:
            pass
        return 0


# ------------------------------------------------------------------------------------------ properties


def load_properties(path: str | None) -> dict[str, str]:
    """Properties from ``path`` (``None``: empty), read as Java's ``Properties.load`` reads them
    (:func:`kbroker.config.parse_properties`); a missing, unreadable or malformed file is a :class:`CliError`."""
    if not path:
        return {}
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ConfigException, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


def parse_kv(items: Iterable[str], what: str = "property", strip_values: bool = True) -> dict[str, str]:
    """``["k=v", ...]`` -> dict. Whitespace around the key (and, with ``strip_values``, the value) is dropped."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"invalid {what} {item!r}: expected key=value")
        out[key.strip()] = value.strip() if strip_values else value
    return out


# Java client property names that librdkafka spells differently (value transform, or None: drop it).
_JAVA_TO_LIBRDKAFKA: dict[str, tuple[str, Callable[[str], str]] | None] = {
    "max.request.size": ("message.max.bytes", str),
    "buffer.memory": ("queue.buffering.max.kbytes", lambda v: str(max(1, int(v) // 1024))),
    "key.serializer": None,
    "value.serializer": None,
    "key.deserializer": None,
    "value.deserializer": None,
    "max.block.ms": None,
    "default.api.timeout.ms": None,
    "max.partition.fetch.bytes": ("max.partition.fetch.bytes", str),
    "fetch.max.wait.ms": ("fetch.wait.max.ms", str),
    "partition.assignment.strategy": None,
    "interceptor.classes": None,
    "metric.reporters": None,
}


def _ssl_to_librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """The Java client's ``ssl.*`` keys (what Kafka's tools read from ``--command-config``) as librdkafka's:
    truststores become ``ssl.ca.pem`` (PKCS12 ones read here; librdkafka has no PKCS12 truststore), PEM keystore
    text ``ssl.certificate.pem`` / ``ssl.key.pem``, a PEM keystore file ``ssl.certificate.location`` and
    ``ssl.key.location``, a PKCS12 keystore stays ``ssl.keystore.location``, IANA
    cipher names become OpenSSL's, an empty endpoint identification algorithm is ``none``."""
    from kbroker.security.tls import IANA_TO_OPENSSL, TlsConfigError, settings, truststore_pem

    get = settings(props)
    out: dict[str, str] = {}
    try:
        pem = truststore_pem(get)
    except TlsConfigError as exc:
        raise CliError(str(exc)) from None
    if pem:
        out["ssl.ca.pem"] = pem
    if get("ssl.keystore.certificate.chain").strip():
        out["ssl.certificate.pem"] = get("ssl.keystore.certificate.chain")
        out["ssl.key.pem"] = get("ssl.keystore.key")
    elif get("ssl.keystore.location").strip():
        location = get("ssl.keystore.location").strip()
        if get("ssl.keystore.type").strip().upper() == "PEM":  # one file with the key and the chain
            out["ssl.certificate.location"] = out["ssl.key.location"] = location
        else:
            out["ssl.keystore.location"] = location
            if get("ssl.keystore.password"):
                out["ssl.keystore.password"] = get("ssl.keystore.password")
    if get("ssl.key.password"):
        out["ssl.key.password"] = get("ssl.key.password")
    if "ssl.endpoint.identification.algorithm" in props:
        out["ssl.endpoint.identification.algorithm"] = props["ssl.endpoint.identification.algorithm"].strip() or "none"
    suites = [x.strip() for x in get("ssl.cipher.suites").split(",") if x.strip()]
    if suites:
        out["ssl.cipher.suites"] = ":".join(IANA_TO_OPENSSL.get(s, s) for s in suites)
    return out


def _sasl_jaas_to_librdkafka(text: str) -> dict[str, str]:
    """The Java client's ``sasl.jaas.config`` (PlainLoginModule / ScramLoginModule with username and password)
    as librdkafka's ``sasl.username`` / ``sasl.password``."""
    from kbroker.security.sasl import SaslConfigError, parse_jaas

    try:
        opts = parse_jaas(text).options
    except SaslConfigError as exc:
        raise CliError(str(exc)) from None
    return {k: opts[n] for k, n in (("sasl.username", "username"), ("sasl.password", "password")) if n in opts}


_JAVA_SSL_KEYS = frozenset({
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.key.password", "ssl.endpoint.identification.algorithm", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.protocol"})


def to_librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """Translate Java client property names to librdkafka's where they differ; drop Java-only ones."""
    out: dict[str, str] = {}
    if any(k in _JAVA_SSL_KEYS for k in props):
        out.update(_ssl_to_librdkafka(props))
    for key, value in props.items():
        if key in _JAVA_SSL_KEYS:
            continue
        if key == "sasl.jaas.config":
            out.update(_sasl_jaas_to_librdkafka(value))
            continue
        if key in _JAVA_TO_LIBRDKAFKA:
            rule = _JAVA_TO_LIBRDKAFKA[key]
            if rule is None:
                continue
            name, conv = rule
            try:
                out[name] = conv(value)
            except ValueError:
                raise CliError(f"invalid value {value!r} for {key}") from None
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class WireSecurity:
    """TLS context and SASL credentials of the connections of kbroker's own codec client."""

    ssl_context: Any = None
    sasl: Any = None


def wire_ssl_context(props: Mapping[str, str], what: str) -> WireSecurity | None:
    """The security of the requests sent through kbroker's own codec (:mod:`kbroker.cli._wire`), from the Java
    client's keys in ``--command-config``: None for ``security.protocol=PLAINTEXT``; a TLS client context from
    ``ssl.*`` for SSL and SASL_SSL; for SASL_PLAINTEXT and SASL_SSL ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256,
    SCRAM-SHA-512) with the ``username`` / ``password`` of ``sasl.jaas.config``."""
    proto = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if proto == "PLAINTEXT":
        return None
    if proto not in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise CliError(f"{what}: unknown security.protocol={proto}")
    from kbroker.security.sasl import SaslConfigError, client_config
    from kbroker.security.tls import TlsConfigError, client_context, settings

    get = settings(props)
    try:
        ctx = client_context(get) if proto in ("SSL", "SASL_SSL") else None
        sasl = None
        if proto.startswith("SASL"):
            sasl = client_config(get, "sasl.mechanism")
    except (TlsConfigError, SaslConfigError) as exc:
        raise CliError(str(exc)) from None
    return WireSecurity(ctx, sasl)


# ------------------------------------------------------------------------------------------ confluent-kafka


class _QuietLogger:
    """librdkafka's log lines (connection refused, retries...) would drown the tools' own clear errors; they
    are shown only with ``KBROKER_CLI_DEBUG=1``."""

    def __init__(self) -> None:
        self.verbose = bool(os.environ.get("KBROKER_CLI_DEBUG"))

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if self.verbose:
            print(msg % args if args else msg, file=sys.stderr)

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda msg, *a, **k: self.log(0, msg, *a, **k)


#: the last SASL authentication failure librdkafka reported to a tool's client (its ``error_cb``), the broker's
#: reason; :func:`check_reachable` turns it into an :class:`AuthenticationError`
_auth_failure: list[str] = []
#: the admin clients :func:`admin_client` made: :func:`result` serves their callbacks while it waits
_admin_clients: list[Any] = []


def _on_client_error(err: Any) -> None:
    """``error_cb`` of the tools' librdkafka clients: keep the reason of a SASL authentication failure."""
    from confluent_kafka import KafkaError

    if err.code() == KafkaError._AUTHENTICATION:
        text = err.str()
        _, sep, reason = text.partition("SASL authentication error: ")
        reason = (reason if sep else text).strip()
        if reason.endswith(")") and " (after " in reason:  # librdkafka's "(after 101ms in state AUTH_REQ)"
            reason = reason[:reason.rindex(" (after ")]
        _auth_failure[:] = [reason]


def raise_if_authentication_failed(client: Any) -> None:
    """Serve ``client``'s pending callbacks (``poll(0)``: an admin client or producer, or a consumer not yet
    subscribed) and raise :class:`AuthenticationError` if the broker refused its credentials."""
    client.poll(0)
    if _auth_failure:
        raise AuthenticationError(_auth_failure[-1])


def client_config(bootstrap: str | None, extra: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> dict[str, Any]:
    """librdkafka configuration for a tool: bootstrap servers, bounded socket timeouts, quiet logs, and an
    ``error_cb`` that keeps a SASL authentication failure for :func:`check_reachable`."""
    timeout = timeout or timeout_from_env()
    conf: dict[str, Any] = {"socket.timeout.ms": int(timeout * 1000), "logger": _QuietLogger(),
                            "socket.connection.setup.timeout.ms": int(timeout * 1000), "error_cb": _on_client_error}
    conf.update(to_librdkafka(extra or {}))
    if bootstrap:
        conf["bootstrap.servers"] = bootstrap
    if not conf.get("bootstrap.servers"):
        raise CliError("no bootstrap servers: use --bootstrap-server host:port")
    return conf


def admin_client(bootstrap: str | None, extra: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
    """A confluent-kafka ``AdminClient``; an invalid configuration property is a :class:`CliError`."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient(client_config(bootstrap, extra, timeout))
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"invalid client configuration: {kafka_error_text(exc)}") from None
    _admin_clients.append(admin)
    return admin


def check_reachable(client: Any, bootstrap: str, timeout: float | None = None) -> Any:
    """One metadata round trip (``list_topics``); returns the metadata, raises :class:`AuthenticationError` as
    soon as the broker refuses the SASL credentials, else a :class:`CliError` naming the bootstrap servers when
    no broker answers within ``timeout`` seconds. The wait is cut in growing slices (0.5 s, 1 s, 2 s...) so that
    an authentication failure, which librdkafka reports through ``error_cb`` only, is seen within one."""
    from confluent_kafka import KafkaException

    timeout = timeout or timeout_from_env()
    deadline = time.monotonic() + timeout
    step = 0.5
    while True:
        left = deadline - time.monotonic()
        try:
            return client.list_topics(timeout=max(0.05, min(step, left)))
        except KafkaException as exc:
            raise_if_authentication_failed(client)
            if time.monotonic() >= deadline:
                raise CliError(f"cannot reach a broker at {bootstrap} within {timeout:g} s "
                               f"({kafka_error_text(exc)})") from None
        step *= 2


def kafka_error_text(exc: BaseException) -> str:
    """The human part of a confluent-kafka exception (``KafkaError.str()``), else ``str(exc)``."""
    args = getattr(exc, "args", ())
    err = args[0] if args else None
    if err is not None and hasattr(err, "str") and callable(err.str):
        return err.str()
    return str(exc)


def kafka_error_name(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    err = args[0] if args else None
    if err is not None and hasattr(err, "name") and callable(err.name):
        return err.name()
    return type(exc).__name__


def result(future: Any, timeout: float | None = None) -> Any:
    """``future.result(timeout)`` with a bound; a timeout is a :class:`CliError`, credentials the broker refused
    an :class:`AuthenticationError` (within 0.5 s)."""
    import concurrent.futures

    timeout = timeout or timeout_from_env()
    deadline = time.monotonic() + timeout
    while True:  # in slices: a refused login is only reported through the clients' error_cb
        try:
            return future.result(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
        except concurrent.futures.TimeoutError:
            for admin in _admin_clients:
                raise_if_authentication_failed(admin)
            if time.monotonic() >= deadline:
                raise CliError(f"no answer from the broker within {timeout:g} s") from None


# ------------------------------------------------------------------------------------------ output


def _table_format(sep: str) -> Any:
    from tabulate import DataRow, TableFormat

    return TableFormat(lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
                       headerrow=DataRow("", sep, ""), datarow=DataRow("", sep, ""), padding=0, with_header_hide=None)


def kafka_table(header: Sequence[str], rows: Iterable[Sequence[Any]], min_widths: Sequence[int],
                sep: str = " ", strip: bool = True) -> list[str]:
    """Lines of a table laid out like Kafka's ``printf("%-15s %-10s %s")`` output.

    Column ``i`` is left-aligned, at least ``min_widths[i]`` wide (0: as wide as its longest cell), columns are
    separated by ``sep`` (one space) and, with ``strip``, trailing blanks are dropped.
    """
    from tabulate import tabulate

    def cell(v: Any) -> str:
        return "-" if v is None else str(v)

    head = [h.ljust(w) for h, w in zip(header, min_widths)]
    body = [[cell(v) for v in row] for row in rows]
    text = tabulate([head, *body], headers=(), tablefmt=_table_format(sep), disable_numparse=True,
                    stralign="left", preserve_whitespace=True)
    return [line.rstrip() if strip else line for line in text.splitlines()]


def print_lines(lines: Iterable[str], file: Any = None) -> None:
    out = file or sys.stdout
    for line in lines:
        print(line, file=out)


def add_bootstrap(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=required,
                        help="the Kafka server(s) to connect to (comma-separated host:port list)")


def add_command_config(parser: argparse.ArgumentParser, name: str = "--command-config") -> None:
    parser.add_argument(name, metavar="FILE", dest="command_config",
                        help="property file with client configuration (e.g. security settings)")


def version_string() -> str:
    try:
        from importlib.metadata import version

        return f"kbroker {version('kbroker')}"
    except Exception:  # noqa: BLE001 - not installed (source checkout)
        return "kbroker (source checkout)"


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=version_string(), help="display version and exit")
