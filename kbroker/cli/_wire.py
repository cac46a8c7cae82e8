"""A small blocking Kafka protocol client for the requests confluent-kafka does not expose.

The tools use confluent-kafka wherever it covers an operation; this client (kbroker's own sans-I/O codec over
a plain socket) does the rest: DescribeQuorum, DescribeConfigs with full synonym lists and the cluster-default
broker resource, IncrementalAlterConfigs of that resource and of each broker's own (sent to that broker, as
Kafka's AdminClient does), OffsetDelete, DescribeTopicPartitions, AlterPartitionReassignments (API 45) and
ListPartitionReassignments (API 46). It talks to any Kafka-compatible broker: every connection starts with
ApiVersions and each request is sent at the highest version both sides support.

The controller-bound requests (45, 46) go to the node Metadata names as the controller (a KRaft broker
names itself or another broker and forwards them to the active controller); a NOT_CONTROLLER answer is
retried against a fresh Metadata answer until the timeout.

Every socket operation is bounded by the client's ``timeout`` (seconds); failures are :class:`CliError`.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from kbroker.cli._common import AuthenticationError, CliError, timeout_from_env
from kbroker.protocol import codec
from kbroker.protocol.api_keys import RESPONSES, ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ApiVersionsRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
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


# Kafka's default messages (``Errors.java``) for the codes the operator tools report, used when a response
# carries a code without a message, as Kafka's AdminClient does.
_DEFAULT_MESSAGES = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.INVALID_REPLICATION_FACTOR: "Replication factor is below 1 or larger than the number of available "
                                          "brokers.",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "Replica assignment is invalid.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client library "
                               "or the message was sent to an incompatible broker. See the broker logs for more "
                               "details.",
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: "No partition reassignment is in progress.",
}


def error_text(code: int, message: str | None = None) -> str:
    """``message``, else Kafka's default message for ``code``, else the code's name."""
    if message:
        return message
    try:
        return _DEFAULT_MESSAGES.get(ErrorCode(code)) or ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


@dataclass(frozen=True)
class Reassignment:
    """One ongoing partition reassignment (ListPartitionReassignments): all replicas, those being added and
    those being removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


TopicPartitionKey = tuple[str, int]
BROKER_RESOURCE = 4


class Connection:
    """One broker connection: size-prefixed frames, correlation ids, negotiated versions."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str, security: Any = None) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self._corr = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise CliError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        if security is not None and security.ssl_context is not None:
            try:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
            except OSError as exc:  # ssl.SSLError included: a failed handshake, an untrusted certificate
                self.sock.close()
                raise CliError(f"TLS handshake with {self.address} failed: {exc}") from None
        self.sock.settimeout(timeout)
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        if security is not None and security.sasl is not None:
            self._authenticate(security.sasl)

    def _authenticate(self, sasl: Any) -> None:
        """SaslHandshake v1 and SaslAuthenticate (:func:`kbroker.security.sasl.client_requests`)."""
        from kbroker.security.sasl import AuthenticationFailed, client_requests

        steps = client_requests(sasl)
        try:
            request, version = next(steps)
            while True:
                request, version = steps.send(self._roundtrip(request, version))
        except StopIteration:
            return
        except AuthenticationFailed as exc:
            raise AuthenticationError(f"{exc} (SASL {sasl.mechanism} with {self.address})") from None

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
    """Connections to the cluster behind ``bootstrap`` (``host:port[,host:port...]``), made on demand; TLS ones
    with ``ssl_context``, a :class:`kbroker.cli._common.WireSecurity` (TLS and SASL) from
    :func:`kbroker.cli._common.wire_ssl_context`."""

    def __init__(self, bootstrap: str, timeout: float | None = None, client_id: str = "kbroker-cli",
                 ssl_context: Any = None) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout or timeout_from_env()
        self.client_id = client_id
        self.ssl_context = ssl_context
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
            conn = Connection(host, port, self.timeout, self.client_id, self.ssl_context)  # a WireSecurity
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
            except AuthenticationError:
                raise
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

    def metadata(self, topics: Sequence[str] | None = None) -> Any:
        """A Metadata answer for ``topics`` (None: every topic; no auto-creation). Its brokers also refresh the
        node map."""
        resp = self.any_broker().send(MetadataRequest(topics=None if topics is None else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False))
        self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def controller(self) -> Connection:
        """Connection to the node a fresh Metadata answer names as the controller (any broker if none)."""
        resp = self.any_broker().send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        self._nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
        if resp.controller_id >= 0 and resp.controller_id in self._nodes:
            return self._connect(*self._nodes[resp.controller_id])
        return self.any_broker()

    def _to_controller(self, request: Any, codes_of: Any) -> Any:
        """Send ``request`` to the controller; while any code ``codes_of(response)`` gives is NOT_CONTROLLER,
        ask again (a new controller is elected) until the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            resp = self.controller().send(request)
            if ErrorCode.NOT_CONTROLLER not in codes_of(resp) or time.monotonic() > deadline:
                return resp
            time.sleep(0.2)

    def alter_partition_reassignments(self, targets: Mapping[TopicPartitionKey, Sequence[int] | None],
                                      timeout_ms: int = 60_000) -> dict[TopicPartitionKey, tuple[int, str | None]]:
        """AlterPartitionReassignments: ``(topic, partition) -> target replicas`` (None cancels). Returns
        ``(topic, partition) -> (error code, message or None)``; a top-level error applies to every partition."""
        req_cls = AlterPartitionReassignmentsRequest
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), replicas in targets.items():
            by_topic.setdefault(topic, []).append(req_cls.ReassignablePartition(
                partition_index=partition, replicas=None if replicas is None else list(replicas)))
        request = req_cls(timeout_ms=timeout_ms, allow_replication_factor_change=True, topics=[
            req_cls.ReassignableTopic(name=t, partitions=parts) for t, parts in by_topic.items()])

        def codes(resp: Any) -> list[int]:
            return [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]

        resp = self._to_controller(request, codes)
        out: dict[TopicPartitionKey, tuple[int, str | None]] = {}
        for t in resp.responses:
            for p in t.partitions:
                out[(t.name, p.partition_index)] = (p.error_code, p.error_message)
        for key in targets:
            if resp.error_code:
                out[key] = (resp.error_code, resp.error_message)
            out.setdefault(key, (ErrorCode.UNKNOWN_SERVER_ERROR, "no result for this partition in the response"))
        return out

    def list_partition_reassignments(self, partitions: Iterable[TopicPartitionKey] | None = None
                                     ) -> dict[TopicPartitionKey, Reassignment]:
        """ListPartitionReassignments of ``partitions`` (None: all of them); a top-level error is a
        :class:`CliError`."""
        req_cls = ListPartitionReassignmentsRequest
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [req_cls.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]
        resp = self._to_controller(req_cls(topics=topics), lambda r: [r.error_code])
        if resp.error_code:
            raise CliError(error_text(resp.error_code, resp.error_message))
        return {(t.name, p.partition_index): Reassignment(tuple(p.replicas), tuple(p.adding_replicas),
                                                          tuple(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    def incremental_alter_configs(self, resources: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]]
                                  ) -> list[tuple[int, str | None]]:
        """IncrementalAlterConfigs of ``(resource type, name, [(key, op, value)])``, one ``(error code,
        message)`` per resource in order. A broker's own resource (BROKER named by id) goes to that broker,
        the others together to any broker, as Kafka's AdminClient sends them."""
        req_cls = IncrementalAlterConfigsRequest
        groups: dict[int | None, list[int]] = {}
        for i, (rtype, name, _) in enumerate(resources):
            node = int(name) if rtype == BROKER_RESOURCE and name.strip().isdigit() else None
            groups.setdefault(node, []).append(i)
        out: list[tuple[int, str | None]] = [(ErrorCode.NONE, None)] * len(resources)
        for node, indexes in groups.items():
            conn = self.any_broker() if node is None else self.node(node)
            request = req_cls(resources=[req_cls.AlterConfigsResource(
                resource_type=resources[i][0], resource_name=resources[i][1],
                configs=[req_cls.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in resources[i][2]])
                for i in indexes])
            resp = conn.send(request)
            answered = {(r.resource_type, r.resource_name): (r.error_code, r.error_message) for r in resp.responses}
            for i in indexes:
                out[i] = answered.get((resources[i][0], resources[i][1]),
                                      (ErrorCode.UNKNOWN_SERVER_ERROR, "no result for this resource in the response"))
        return out

    def group_coordinator(self, group: str) -> Connection:
        """Connection to the coordinator of consumer group ``group`` (FindCoordinator, key type 0).
        COORDINATOR_NOT_AVAILABLE (e.g. ``__consumer_offsets`` still being created on a new cluster) and
        COORDINATOR_LOAD_IN_PROGRESS are retried for up to the client's timeout, as Kafka's Admin client does."""
        conn = self.any_broker()
        version = conn.version_for(FindCoordinatorRequest)
        deadline = time.monotonic() + self.timeout
        while True:
            if version >= 4:
                resp = conn.send(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version)
                c = resp.coordinators[0]
                code, host, port = c.error_code, c.host, c.port
            else:
                resp = conn.send(FindCoordinatorRequest(key=group, key_type=0), version)
                code, host, port = resp.error_code, resp.host, resp.port
            if code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) \
                    or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        if code:
            raise CliError(f"cannot find the coordinator of group {group!r}: {error_name(code)}")
        return self._connect(host, port)
