"""A small blocking Kafka protocol client for the requests confluent-kafka does not expose.

The tools use confluent-kafka wherever it covers an operation; this client (kbroker's own sans-I/O codec over
a plain socket) does the rest: DescribeQuorum, DescribeConfigs with full synonym lists and the cluster-default
broker resource, IncrementalAlterConfigs of that resource, OffsetDelete, DescribeTopicPartitions. It talks
to any Kafka-compatible broker: every connection starts with ApiVersions and each request is sent at the
highest version both sides support.

Every socket operation is bounded by the client's ``timeout`` (seconds); failures are :class:`CliError`.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kbroker.cli._common import CliError, timeout_from_env
from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES, ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    MetadataRequest,
)

_SIZE = struct.Struct(">i")
_MAX_RESPONSE = 256 * 1024 * 1024


def split_hostport(text: str) -> tuple[str, int]:
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise CliError(f"invalid server address {text!r}: expected host:port")
    return host.strip("[]") or "localhost", int(port)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


class Connection:
    """One broker connection: size-prefixed frames, correlation ids, negotiated versions."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self._corr = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise CliError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        self.sock.settimeout(timeout)
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _negotiate(self) -> None:
        resp = self._roundtrip(ApiVersionsRequest(client_software_name="kbroker-cli", client_software_version="1"), 3)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:  # an older broker: retry with v0
            resp = self._roundtrip(ApiVersionsRequest(), 0)
        if resp.error_code:
            raise CliError(f"{self.address} refused ApiVersions: {error_name(resp.error_code)}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, cls: type) -> int:
        key = cls.API_KEY  # type: ignore[attr-defined]
        ours = cls.VALID_VERSIONS  # type: ignore[attr-defined]
        theirs = self.versions.get(key)
        name = ApiKey(key).name
        if theirs is None:
            raise CliError(f"the broker at {self.address} does not support {name} (API key {key})")
        hi = min(ours[1], theirs[1])
        if hi < max(ours[0], theirs[0]):
            raise CliError(f"no common version of {name}: broker {theirs[0]}-{theirs[1]}, tool {ours[0]}-{ours[1]}")
        return hi

    def supports(self, cls: type) -> bool:
        return cls.API_KEY in self.versions  # type: ignore[attr-defined]

    def send(self, request: Any, version: int | None = None) -> Any:
        """Send ``request`` (at ``version``, default: the highest common one) and return the decoded response."""
        if version is None:
            version = self.version_for(type(request))
        return self._roundtrip(request, version)

    def _roundtrip(self, request: Any, version: int) -> Any:
        key = type(request).API_KEY
        self._corr += 1
        corr = self._corr
        body = encode_request_header(key, version, corr, self.client_id) + codec.encode(request, version)
        try:
            self.sock.sendall(_SIZE.pack(len(body)) + body)
            (size,) = _SIZE.unpack(self._recv(4))
            if size < 4 or size > _MAX_RESPONSE:
                raise CliError(f"{self.address} sent a malformed response (size {size})")
            frame = self._recv(size)
        except socket.timeout:
            raise CliError(f"no answer from {self.address} within {self.timeout:g} s") from None
        except OSError as exc:
            raise CliError(f"connection to {self.address} failed: {exc.strerror or exc}") from None
        (got,) = _SIZE.unpack_from(frame, 0)
        if got != corr:
            raise CliError(f"{self.address} answered correlation id {got}, expected {corr}")
        pos = 4
        if response_header_version(key, version) >= 1:
            pos = codec._skip_tagged(frame, pos)
        try:
            resp, _ = codec.decode(RESPONSES[key], frame, version, pos)
        except codec.DecodeError as exc:
            raise CliError(f"cannot decode {ApiKey(key).name} v{version} response from {self.address}: {exc}") from None
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise CliError(f"{self.address} closed the connection (the request may be unsupported)")
            buf += chunk
        return bytes(buf)


class WireClient:
    """Connections to the cluster behind ``bootstrap`` (``host:port[,host:port...]``), made on demand."""

    def __init__(self, bootstrap: str, timeout: float | None = None, client_id: str = "kbroker-cli") -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout or timeout_from_env()
        self.client_id = client_id
        self._conns: dict[str, Connection] = {}
        self._nodes: dict[int, tuple[str, int]] | None = None
        self._any: Connection | None = None

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _connect(self, host: str, port: int) -> Connection:
        key = f"{host}:{port}"
        conn = self._conns.get(key)
        if conn is None:
            conn = Connection(host, port, self.timeout, self.client_id)
            self._conns[key] = conn
        return conn

    def any_broker(self) -> Connection:
        """A connection to the first bootstrap server that answers."""
        if self._any is not None:
            return self._any
        errors = []
        deadline = time.monotonic() + self.timeout
        for item in self.bootstrap.split(","):
            if not item.strip():
                continue
            host, port = split_hostport(item)
            try:
                self._any = self._connect(host, port)
                return self._any
            except CliError as exc:
                errors.append(str(exc))
            if time.monotonic() > deadline:
                break
        raise CliError(f"cannot reach a broker at {self.bootstrap} within {self.timeout:g} s"
                       + (f" ({'; '.join(errors)})" if errors else ""))

    def send(self, request: Any, version: int | None = None) -> Any:
        return self.any_broker().send(request, version)

    def nodes(self) -> dict[int, tuple[str, int]]:
        """node id -> (host, port), from a Metadata request without topics."""
        if self._nodes is None:
            conn = self.any_broker()
            resp = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
            self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return self._nodes

    def node(self, node_id: int) -> Connection:
        addr = self.nodes().get(node_id)
        if addr is None:
            raise CliError(f"broker {node_id} is not in the cluster (brokers: {sorted(self.nodes())})")
        return self._connect(*addr)

    def group_coordinator(self, group: str) -> Connection:
        """Connection to the coordinator of consumer group ``group`` (FindCoordinator, key type 0)."""
        conn = self.any_broker()
        version = conn.version_for(FindCoordinatorRequest)
        if version >= 4:
            resp = conn.send(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version)
            c = resp.coordinators[0]
            code, node, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            resp = conn.send(FindCoordinatorRequest(key=group, key_type=0), version)
            code, node, host, port = resp.error_code, resp.node_id, resp.host, resp.port
        if code:
            raise CliError(f"cannot find the coordinator of group {group!r}: {error_name(code)}")
        return self._connect(host, port)
