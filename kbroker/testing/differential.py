"""Protocol differential: the same request sequences sent to Apache Kafka 4.3.1 and to kbroker, answers compared.

Each :class:`Sequence` is a few requests (each a :class:`Step`) sent in order on one raw TCP connection per broker,
encoded with kbroker's own codec (:mod:`kbroker.protocol.codec`); the two brokers run the same sequence at the
same time, each on its own connection. Every answer is decoded with the response schema of its version, turned
into nested dicts (only the fields that exist in that version), normalised (:func:`normalise`) and compared field
by field (:func:`diff`). A connection closed (or a request left unanswered) by one broker where the other answers
is a difference at the path ``<outcome>``; an answer that does not decode is one too.

What the normaliser changes, and nothing else (docs/compat.md, "Protocol differential against Kafka 4.3.1"):

* ``throttle_time_ms``: dropped (a quota's timing, not a behaviour);
* timestamps chosen by the broker (``timestamp``, ``log_append_time_ms``, ``*_timestamp*``, ``*_time_ms`` of
  transactions and quorum voters): a value >= 0 becomes ``"<ts>"`` (-1 and other sentinels are kept);
* ids a broker makes up: ``cluster_id`` -> ``"<cluster-id>"``; topic ids -> ``"<topic-id:NAME>"`` (the broker's own
  id of topic NAME, so a wrong id still shows); other uuids, ``member_id``, ``producer_id`` (>= 0), fetch
  ``session_id`` (> 0), ``client_instance_id``, ``incarnation_id``, ``process_id``: renamed ``"<kind#n>"`` in order of
  first appearance within the sequence (so "the same id twice" is still checked);
* node ids (``node_id``, ``leader_id``, ``broker_id``, ``controller_id``, ``coordinator`` ids, replica lists): the
  broker's own node id -> ``"<self>"``; ports (``port``) equal to one of the broker's own -> ``"<port>"``;
* strings: the broker's data directory, its ports and its cluster id inside any string (config values,
  ``log_dir``) are replaced by placeholders;
* error messages (``error_message`` and the like): ``"<message>"`` whether null or not: free text, and kbroker
  writes its own (the error code is compared);
* per API, values that track each broker's own metadata log or its disk (:data:`VOLATILE`): ApiVersions'
  ``finalized_features_epoch``, DescribeQuorum's offsets, DescribeLogDirs' byte counts, DescribeCluster's and
  BrokerHeartbeat's broker epochs.

Arrays of structs are matched by their natural key when every element has one (``name``, ``partition_index``,
``api_key``, ...; the path reads ``configs[name=retention.ms]``), by index otherwise; an element on one side only
is a difference (``<missing>``). Record batches are compared decoded (offsets, epochs, attributes, records).

``run(kafka, kbroker, sequences)`` returns a :class:`Report` (``to_json()``, ``markdown()``); the sequences come
from :func:`valid_sequences`, :func:`invalid_sequences` and :func:`refused_sequences`; an allow-list
(:func:`load_allow_list`) marks the documented, intended divergences. ``scripts/protocol_diff.py`` is the command
line; ``compat_tests/test_protocol_differential.py`` runs a slice.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import socket
import struct
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

from kbroker.protocol import codec
from kbroker.protocol import messages as m
from kbroker.protocol.api_keys import REQUESTS, RESPONSES, ApiKey
from kbroker.protocol.headers import encode_request_header, response_header_version
from kbroker.protocol.schema import ZERO_UUID, in_range

__all__ = ["Target", "Step", "Sequence", "Report", "run", "valid_sequences", "invalid_sequences",
           "refused_sequences", "all_sequences", "advertised_versions", "normalise", "diff", "load_allow_list",
           "api_name"]

CLIENT_ID = "kbroker-differential"
STEP_TIMEOUT = 10.0


def api_name(key: int) -> str:
    try:
        return "".join(p.capitalize() for p in ApiKey(key).name.split("_"))
    except ValueError:
        return f"Unknown{key}"


# ------------------------------------------------------------------------------------------------ targets

@dataclasses.dataclass
class Target:
    """One broker under comparison: where it listens, and what of it the normaliser must know (its node id, its
    other ports, its data directory). ``label`` is ``kafka`` or ``kbroker``."""

    label: str
    host: str
    port: int
    node_id: int = 1
    other_ports: tuple[int, ...] = ()
    data_dir: str | None = None
    #: ``(user, password)``: every connection first authenticates with SASL/PLAIN (SaslHandshake v1, then
    #: SaslAuthenticate v2) before a sequence's steps; None: no SASL
    sasl_plain: tuple[str, str] | None = None

    @classmethod
    def of_process(cls, label: str, proc: Any) -> "Target":
        ports = tuple(p for p in (getattr(proc, "controller_port", None),) if p)
        return cls(label, proc.host, proc.port, getattr(proc, "node_id", 1), ports, str(proc.data_dir))

    @classmethod
    def of_bootstrap(cls, label: str, bootstrap: str) -> "Target":
        host, _, port = bootstrap.rpartition(":")
        return cls(label, host or "127.0.0.1", int(port))


class Ctx:
    """Per broker and per sequence: its topic ids (name -> uuid) and what earlier answers left (``vars``)."""

    def __init__(self, target: Target, topic_ids: dict[str, bytes]) -> None:
        self.target = target
        self.topic_ids = dict(topic_ids)
        self.vars: dict[str, Any] = {}

    def tid(self, name: str) -> bytes:
        return self.topic_ids.get(name, ZERO_UUID)


# ------------------------------------------------------------------------------------------------ steps

@dataclasses.dataclass
class Step:
    """One request. ``body``: a message, or ``ctx -> message``. ``raw``: instead, ``ctx -> frame bytes`` (header
    and body, no size prefix; ``size`` overrides the size prefix). ``response``: False when no answer is due
    (Produce acks=0). ``compare``: False for setup steps. ``capture(ctx, response)`` keeps what later steps need.
    ``until(response) -> bool``: retried (bounded, 50 ms apart) until true, for state that settles
    asynchronously on both brokers; the last answer is compared. ``decode_version``: decode the answer at this
    version (ApiVersions answers an unsupported version in v0). ``outcome_only``: compare only whether an
    answer came (e.g. "is the connection still open")."""

    api_key: int
    version: int
    body: Any = None
    raw: Callable[[Ctx], bytes] | None = None
    size: int | None = None
    response: bool = True
    compare: bool = True
    capture: Callable[[Ctx, Any], None] | None = None
    until: Callable[[Any], bool] | None = None
    tries: int = 40
    decode_version: int | None = None
    pause: float = 0.0
    timeout: float = STEP_TIMEOUT
    outcome_only: bool = False

    def label(self) -> str:
        return f"{api_name(self.api_key)} v{self.version}" + (" (raw)" if self.raw else "")


@dataclasses.dataclass
class Sequence:
    """``name`` (unique), ``api_key`` (its row in the table), ``kind`` (valid / invalid / refused)."""

    name: str
    api_key: int
    steps: list[Step]
    kind: str = "valid"


@dataclasses.dataclass
class Outcome:
    status: str  # response | closed | timeout | none | undecodable
    value: Any = None  # the normalised answer
    message: Any = None  # the decoded message (for captures)
    detail: str = ""


# ------------------------------------------------------------------------------------------------ transport

class Conn:
    def __init__(self, target: Target, timeout: float = STEP_TIMEOUT) -> None:
        self.target = target
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.corr = 0

    def _open(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection((self.target.host, self.target.port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.target.sasl_plain is not None:
                self._authenticate(*self.target.sasl_plain)
        return self.sock

    def _authenticate(self, user: str, password: str) -> None:
        """SASL/PLAIN on a fresh connection (KIP-43's SaslHandshake v1, then SaslAuthenticate v2); a refusal closes
        the connection and raises ConnectionRefusedError (the step shows as ``closed``)."""
        assert self.sock is not None
        token = b"\0" + user.encode() + b"\0" + password.encode()
        for key, version, msg in ((ApiKey.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="PLAIN")),
                                  (ApiKey.SASL_AUTHENTICATE, 2, m.SaslAuthenticateRequest(auth_bytes=token))):
            self.corr += 1
            frame = encode_request(key, version, msg, self.corr)
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            (n,) = struct.unpack(">i", self._recv(4))
            resp = decode_response(key, version, self._recv(n), self.corr)
            if resp.error_code:
                self.close()
                raise ConnectionRefusedError(f"SASL {api_name(key)} as {user}: error code {resp.error_code}")

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def _recv(self, n: int) -> bytes:
        assert self.sock is not None
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionResetError("closed")
            buf += chunk
        return bytes(buf)

    def exchange(self, frame: bytes, size: int | None, want: bool) -> tuple[str, bytes | None, str]:
        """Send one frame; ``(status, answer frame, detail)``."""
        try:
            sock = self._open()
            sock.sendall(struct.pack(">i", len(frame) if size is None else size) + frame)
            if not want:
                # nothing is due; a close shows as the next step's outcome (or here, if it came at once)
                sock.settimeout(0.2)
                try:
                    got = sock.recv(1, socket.MSG_PEEK)
                    if got == b"":
                        self.close()
                        return "closed", None, "closed after a request that wants no answer"
                    return "unexpected", None, "answered a request that wants no answer"
                except socket.timeout:
                    return "none", None, ""
                finally:
                    if self.sock is not None:
                        self.sock.settimeout(self.timeout)
            (n,) = struct.unpack(">i", self._recv(4))
            if n < 4 or n > 256 << 20:
                self.close()
                return "undecodable", None, f"size prefix {n}"
            return "response", self._recv(n), ""
        except socket.timeout:
            self.close()
            return "timeout", None, f"no answer in {self.timeout:.0f} s"
        except OSError as exc:
            self.close()
            return "closed", None, type(exc).__name__


def encode_request(key: int, version: int, msg: Any, corr: int) -> bytes:
    return encode_request_header(key, version, corr, CLIENT_ID) + codec.encode(msg, version)


def decode_response(key: int, version: int, frame: bytes, corr: int) -> Any:
    (got,) = struct.unpack_from(">i", frame, 0)
    if got != corr:
        raise codec.DecodeError(f"correlation id {got}, expected {corr}")
    pos = 4 if response_header_version(key, version) == 0 else codec._skip_tagged(frame, 4)
    msg, end = codec.decode(RESPONSES[key], frame, version, pos)
    if end != len(frame):
        raise codec.DecodeError(f"{len(frame) - end} bytes after the response")
    return msg


# ------------------------------------------------------------------------------------------------ to dicts

def to_plain(msg: Any, version: int) -> Any:
    """A decoded message as nested dicts of the fields present at ``version``; uuids as hex, bytes as hex,
    records decoded."""
    if dataclasses.is_dataclass(msg):
        out: dict[str, Any] = {}
        for f in type(msg).FIELDS:
            if not in_range(f.versions, version):
                continue
            v = getattr(msg, f.name)
            if f.kind == "records":
                out[f.name] = _records_plain(v)
            elif f.kind == "array":
                out[f.name] = None if v is None else [to_plain(x, version) for x in v]
            elif f.kind == "struct":
                out[f.name] = None if v is None else to_plain(v, version)
            else:
                out[f.name] = _scalar(f.kind, v)
        return out
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return bytes(msg).hex()
    return msg


def _scalar(kind: str, v: Any) -> Any:
    if kind == "uuid":
        return ("uuid", bytes(v).hex())
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return v


def _records_plain(v: Any) -> Any:
    if v is None:
        return None
    data = bytes(v)
    if not data:
        return []
    from kbroker.protocol.records import iter_batches  # noqa: PLC0415

    out: list[Any] = []
    try:
        for b in iter_batches(data):
            out.append({"base_offset": b.base_offset, "partition_leader_epoch": b.partition_leader_epoch,
                        "attributes": b.attributes, "last_offset_delta": b.last_offset_delta,
                        "base_timestamp": b.base_timestamp, "max_timestamp": b.max_timestamp,
                        "producer_id": b.producer_id, "producer_epoch": b.producer_epoch,
                        "base_sequence": b.base_sequence,
                        "records": [[None if r.key is None else bytes(r.key).hex(),
                                     None if r.value is None else bytes(r.value).hex()] for r in b.records()]})
    except Exception as exc:  # noqa: BLE001 - shown as a value, compared as such
        out.append({"<undecodable records>": f"{type(exc).__name__}: {exc}", "bytes": len(data)})
    return out


# ------------------------------------------------------------------------------------------------ normaliser

TIMESTAMP_FIELDS = {"timestamp", "log_append_time_ms", "max_timestamp", "max_timestamp_ms", "last_timestamp",
                    "last_fetch_timestamp", "last_caught_up_timestamp", "issue_timestamp", "issue_timestamp_ms",
                    "expiry_timestamp", "expiry_timestamp_ms", "transaction_start_time_ms",
                    "acquisition_lock_timeout_ms_at"}
MESSAGE_FIELDS = {"error_message", "batch_index_error_message", "acknowledge_error_message", "status_message"}
NODE_FIELDS = {"node_id", "leader_id", "broker_id", "controller_id", "coordinator_id", "replica_id", "voter_id"}
NODE_LISTS = {"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas", "last_known_elr",
              "replicas", "adding_replicas", "removing_replicas", "broker_ids", "leader_recovery_state_nodes"}
RENAMED = {"member_id": "member", "leader": "member", "producer_id": "pid", "client_instance_id": "instance", "incarnation_id": "incarnation",
           "process_id": "process", "session_id": "session", "ongoing_txn_producer_id": "pid",
           "subscription_id": "subscription",
           "directory_id": "dir", "replica_directory_id": "dir", "voter_directory_id": "dir"}
#: api key -> fields whose values follow each broker's own metadata log, clock or disk
VOLATILE: dict[int, set[str]] = {
    18: {"finalized_features_epoch"},
    55: {"high_watermark", "log_end_offset", "leader_epoch"},
    35: {"total_bytes", "usable_bytes"},
    60: {"broker_epoch"},
    63: {"broker_epoch"},
}
ARRAY_KEYS = ("name", "topic_name", "topic", "partition_index", "partition", "api_key", "resource_name", "key",
              "group_id", "transactional_id", "node_id", "broker_id", "topic_id", "entity_type", "member_id",
              "resource_type", "log_dir", "quorum_type", "producer_id", "config_key", "partition_id", "user")


class Normaliser:
    def __init__(self, target: Target, ctx: Ctx, api_key: int) -> None:
        self.t = target
        self.topic_names = {v.hex(): k for k, v in ctx.topic_ids.items()}
        self.renames: dict[str, dict[Any, str]] = ctx.vars.setdefault("__renames__", defaultdict(dict))
        self.volatile = VOLATILE.get(api_key, set())
        self.ports = {target.port, *target.other_ports}

    def rename(self, kind: str, value: Any) -> str:
        table = self.renames[kind]
        if value not in table:
            table[value] = f"<{kind}#{len(table) + 1}>"
        return table[value]

    def string(self, s: str) -> str:
        if self.t.data_dir:
            s = s.replace(self.t.data_dir, "<data-dir>")
        for p in self.ports:
            s = re.sub(rf"(?<=:){p}\b", "<port>", s)
        cid = self.renames.get("__cluster_id__")
        if cid:
            s = s.replace(next(iter(cid)), "<cluster-id>")
        return s

    def field(self, name: str, v: Any) -> Any:
        if isinstance(v, tuple) and v and v[0] == "uuid":
            hexv = v[1]
            if hexv == ZERO_UUID.hex():
                return "<zero-uuid>"
            if hexv in self.topic_names:
                return f"<topic-id:{self.topic_names[hexv]}>"
            return self.rename(RENAMED.get(name, "uuid"), hexv)
        if name in self.volatile:
            return "<volatile>"
        if name in MESSAGE_FIELDS:
            return "<message>"
        if name == "cluster_id" and isinstance(v, str):
            self.renames["__cluster_id__"][v] = "x"
            return "<cluster-id>"
        if name in TIMESTAMP_FIELDS and isinstance(v, int) and v >= 0:
            return "<ts>"
        if name in NODE_FIELDS and isinstance(v, int) and v == self.t.node_id and v >= 0:
            return "<self>"
        if name in NODE_LISTS and isinstance(v, list):
            return [("<self>" if x == self.t.node_id else x) if isinstance(x, int) else self.walk(x) for x in v]
        if name == "port" and v in self.ports:
            return "<port>"
        if name in RENAMED and v not in (None, "", -1, 0) and not isinstance(v, (dict, list)):
            return self.rename(RENAMED[name], v)
        if isinstance(v, str):
            return self.string(v)
        return self.walk(v)

    def walk(self, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: self.field(k, x) for k, x in v.items() if k != "throttle_time_ms"}
        if isinstance(v, list):
            return [self.walk(x) for x in v]
        if isinstance(v, tuple) and v and v[0] == "uuid":
            return self.field("uuid", v)
        if isinstance(v, str):
            return self.string(v)
        return v


def normalise(plain: Any, target: Target, ctx: Ctx, api_key: int) -> Any:
    return Normaliser(target, ctx, api_key).walk(plain)


# ------------------------------------------------------------------------------------------------ diff

MISSING = "<missing>"


def _array_key(a: list[Any], b: list[Any]) -> str | None:
    """The first of :data:`ARRAY_KEYS` that every element of both lists has, unique within each list."""
    if not (a or b) or not all(isinstance(x, dict) for x in a + b):
        return None
    for k in ARRAY_KEYS:
        if any(k not in x for x in a + b):
            continue
        if all(len({repr(x[k]) for x in side}) == len(side) for side in (a, b)):
            return k
    return None


def diff(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The paths where ``a`` (Kafka) and ``b`` (kbroker) differ, with both values (``<missing>`` where absent)."""
    out: list[tuple[str, Any, Any]] = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            out += diff(a.get(k, MISSING), b.get(k, MISSING), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list):
        key = _array_key(a, b)
        if key is not None:
            am = {repr(x[key]): x for x in a}
            bm = {repr(x[key]): x for x in b}
            for k in list(am) + [k for k in bm if k not in am]:
                shown = k.strip("'")
                out += diff(am.get(k, MISSING), bm.get(k, MISSING), f"{path}[{key}={shown}]")
            return out
        if all(isinstance(x, dict) for x in a + b) and sorted(map(repr, a)) == sorted(map(repr, b)):
            return out  # the same structs in another order (and no key to match them by): no spec orders them
        if all(not isinstance(x, (dict, list)) for x in a + b):
            if a != b:
                out.append((path, a, b))
            return out
        for i in range(max(len(a), len(b))):
            out += diff(a[i] if i < len(a) else MISSING, b[i] if i < len(b) else MISSING, f"{path}[{i}]")
        return out
    if a != b:
        out.append((path, _short(a), _short(b)))
    return out


def _short(v: Any) -> Any:
    text = json.dumps(v, default=str)
    return v if len(text) <= 400 else text[:400] + "..."


# ------------------------------------------------------------------------------------------------ running

def _run_steps(target: Target, seq: Sequence, topic_ids: dict[str, bytes], deadline: float) -> list[Outcome]:
    ctx = Ctx(target, topic_ids)
    conn = Conn(target)
    outs: list[Outcome] = []
    try:
        for step in seq.steps:
            if step.pause:
                time.sleep(step.pause)
            out, version = _one(conn, ctx, step, deadline)
            if out.message is not None:
                _learn_topic_ids(ctx, out.message)
                if step.capture is not None:
                    try:
                        step.capture(ctx, out.message)
                    except Exception:  # noqa: BLE001 - a capture of an unexpected answer: later steps show it
                        pass
                out.value = normalise(to_plain(out.message, version), ctx.target, ctx, step.api_key)
            outs.append(out)
    finally:
        conn.close()
    return outs


def _learn_topic_ids(ctx: Ctx, msg: Any) -> None:
    """Topic ids that a CreateTopics / Metadata / DescribeTopicPartitions answer gives for names not known yet:
    each broker's own ids, so that the normaliser names them (an id that contradicts a known one still shows)."""
    for t in getattr(msg, "topics", None) or ():
        name, tid = getattr(t, "name", None), getattr(t, "topic_id", None)
        if isinstance(name, str) and isinstance(tid, (bytes, bytearray)) and bytes(tid) != ZERO_UUID:
            ctx.topic_ids.setdefault(name, bytes(tid))


def _one(conn: Conn, ctx: Ctx, step: Step, deadline: float) -> tuple[Outcome, int]:
    tries = step.tries if step.until else 1
    out = Outcome("none")
    version = step.version if step.decode_version is None else step.decode_version
    conn.timeout = step.timeout
    for _ in range(max(1, tries)):
        conn.corr += 1
        corr = conn.corr
        try:
            if step.raw is not None:
                frame = step.raw(ctx)
            else:
                body = step.body(ctx) if callable(step.body) else step.body
                frame = encode_request(step.api_key, step.version, body, corr)
        except Exception as exc:  # noqa: BLE001 - a request this harness cannot build (a broken capture)
            return Outcome("unbuildable", detail=f"{type(exc).__name__}: {exc}"), version
        status, answer, detail = conn.exchange(frame, step.size, step.response)
        if status != "response":
            return Outcome(status, detail=detail), version
        version = step.version if step.decode_version is None else step.decode_version
        try:
            msg = decode_response(step.api_key, version, answer, corr)
        except Exception as exc:  # noqa: BLE001
            if step.api_key == ApiKey.API_VERSIONS and version != 0:
                try:
                    msg = decode_response(step.api_key, 0, answer, corr)
                    version = 0
                except Exception:  # noqa: BLE001
                    return Outcome("undecodable", detail=f"{type(exc).__name__}: {exc}"), version
            else:
                return Outcome("undecodable", detail=f"{type(exc).__name__}: {exc}"), version
        out = Outcome("response", None, msg)
        if step.until is None or time.monotonic() > deadline:
            return out, version
        try:
            if step.until(msg):
                return out, version
        except Exception:  # noqa: BLE001
            return out, version
        time.sleep(0.05)
    return out, version


@dataclasses.dataclass
class SeqResult:
    seq: Sequence
    differences: list[dict[str, Any]]
    seconds: float

    @property
    def identical(self) -> bool:
        return not any(d["allowed"] is None for d in self.differences)


def compare(seq: Sequence, a: list[Outcome], b: list[Outcome]) -> list[dict[str, Any]]:
    diffs: list[dict[str, Any]] = []
    for i, (step, x, y) in enumerate(zip(seq.steps, a, b)):
        if not step.compare:
            continue
        where = {"step": i, "request": step.label()}
        if x.status != y.status:
            diffs.append({**where, "path": "<outcome>", "kafka": x.status + (f" ({x.detail})" if x.detail else ""),
                          "kbroker": y.status + (f" ({y.detail})" if y.detail else "")})
            continue
        if x.status == "response" and not step.outcome_only:
            for path, va, vb in diff(x.value, y.value):
                diffs.append({**where, "path": path, "kafka": va, "kbroker": vb})
    if len(a) != len(b):
        diffs.append({"step": min(len(a), len(b)), "request": "", "path": "<steps>", "kafka": len(a),
                      "kbroker": len(b)})
    return diffs


class AllowList:
    """Documented divergences: entries ``{"sequence": glob, "path": glob, "reason": text}`` (``*`` matches
    anything, everything else literally; ``step`` optional)."""

    def __init__(self, entries: Iterable[dict[str, Any]] = ()) -> None:
        self.entries = [dict(e) for e in entries]
        self._rx = [(re.compile(_glob(e["sequence"])), re.compile(_glob(e.get("path", "*")))) for e in self.entries]
        self.used = [0] * len(self.entries)

    def match(self, seq_name: str, path: str) -> str | None:
        """The reason of the first entry matching; a ``denied: X`` sequence (X sent without authorization) also
        matches X's entries, whose divergences do not depend on who asks."""
        for name in (seq_name, seq_name.removeprefix("denied: ")):
            for i, (rs, rp) in enumerate(self._rx):
                if rs.fullmatch(name) and rp.fullmatch(path):
                    self.used[i] += 1
                    return self.entries[i]["reason"]
        return None


def _glob(pattern: str) -> str:
    return ".*".join(re.escape(p) for p in pattern.split("*"))


def load_allow_list(path: str | Path) -> AllowList:
    data = json.loads(Path(path).read_text())
    entries = data["allowed"] if isinstance(data, dict) else data
    for e in entries:
        if not e.get("reason"):
            raise ValueError(f"allow-list entry without a reason: {e}")
    return AllowList(entries)


@dataclasses.dataclass
class Report:
    results: list[SeqResult]
    seconds: float
    kafka: str
    kbroker: str

    def per_api(self) -> dict[int, dict[str, Any]]:
        rows: dict[int, dict[str, Any]] = {}
        for r in self.results:
            row = rows.setdefault(r.seq.api_key, {"api": api_name(r.seq.api_key), "run": 0, "identical": 0,
                                                  "different": 0, "allowed": 0, "paths": set()})
            row["run"] += 1
            if not r.differences:
                row["identical"] += 1
            elif r.identical:
                row["allowed"] += 1
            else:
                row["different"] += 1
            for d in r.differences:
                row["paths"].add(_generic_path(d["path"]))
        return dict(sorted(rows.items()))

    def failures(self) -> list[dict[str, Any]]:
        return [{"sequence": r.seq.name, **d} for r in self.results for d in r.differences if d["allowed"] is None]

    def to_json(self) -> dict[str, Any]:
        return {
            "kafka": self.kafka, "kbroker": self.kbroker, "seconds": round(self.seconds, 1),
            "sequences": len(self.results),
            "identical": sum(1 for r in self.results if not r.differences),
            "allowed": sum(1 for r in self.results if r.differences and r.identical),
            "different": sum(1 for r in self.results if not r.identical),
            "per_api": {str(k): {**v, "paths": sorted(v["paths"])} for k, v in self.per_api().items()},
            "results": [{"sequence": r.seq.name, "api_key": r.seq.api_key, "kind": r.seq.kind,
                         "seconds": round(r.seconds, 3), "differences": r.differences} for r in self.results],
        }

    def markdown(self) -> str:
        lines = ["| Key | API | Sequences | Identical | Intended divergence | Different | Fields that differ |",
                 "|---:|---|---:|---:|---:|---:|---|"]
        for key, row in self.per_api().items():
            paths = ", ".join(f"`{p}`" for p in sorted(row["paths"])[:6])
            more = len(row["paths"]) - 6
            if more > 0:
                paths += f" (+{more})"
            lines.append(f"| {key} | {row['api']} | {row['run']} | {row['identical']} | {row['allowed']} | "
                         f"{row['different']} | {paths} |")
        return "\n".join(lines)


def _generic_path(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def run(kafka: Target, kbroker: Target, sequences: list[Sequence], allow: AllowList | None = None,
        topic_ids: dict[str, dict[str, bytes]] | None = None, budget_s: float = 900.0,
        progress: Callable[[str], None] | None = None) -> Report:
    """Run every sequence on both brokers at once (one thread each), compare, mark allowed differences."""
    allow = allow or AllowList()
    ids = topic_ids or {"kafka": {}, "kbroker": {}}
    t0 = time.monotonic()
    deadline = t0 + budget_s
    results: list[SeqResult] = []
    for n, seq in enumerate(sequences):
        if time.monotonic() > deadline:
            raise TimeoutError(f"differential run over its {budget_s:.0f} s budget after {n} sequences")
        t = time.monotonic()
        outs: dict[str, list[Outcome]] = {}

        def go(label: str, target: Target) -> None:
            outs[label] = _run_steps(target, seq, ids.get(label, {}), deadline)

        th = threading.Thread(target=go, args=("kbroker", kbroker), daemon=True)
        th.start()
        go("kafka", kafka)
        th.join(STEP_TIMEOUT * len(seq.steps) * 2 + 5)
        kb = outs.get("kbroker") or [Outcome("timeout", detail="sequence did not finish")] * len(seq.steps)
        diffs = compare(seq, outs["kafka"], kb)
        for d in diffs:
            d["allowed"] = allow.match(seq.name, d["path"])
        results.append(SeqResult(seq, diffs, time.monotonic() - t))
        if progress and n % 50 == 0:
            progress(f"{n}/{len(sequences)} sequences, {time.monotonic() - t0:.0f} s")
    return Report(results, time.monotonic() - t0, f"{kafka.host}:{kafka.port}", f"{kbroker.host}:{kbroker.port}")


# ------------------------------------------------------------------------------------------------ the catalogue

from kbroker.testing import differential_sequences as _seqs  # noqa: E402  (the catalogue uses the types above)

valid_sequences = _seqs.valid_sequences
invalid_sequences = _seqs.invalid_sequences
refused_sequences = _seqs.refused_sequences
all_sequences = _seqs.all_sequences
advertised_versions = _seqs.advertised_versions
setup = _seqs.setup
Names = _seqs.Names


# ------------------------------------------------------------------------------------------------ a pair of brokers

#: the server properties both brokers get (on top of the harness's common ones): the keys the reference harness
#: sets in Kafka's server.properties (KRaft needs them, or one node's internal topics do), so that DescribeConfigs
#: compares like with like
PAIR_OVERRIDES: dict[str, str] = {
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                      "SASL_SSL:SASL_SSL",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


class BrokerPair:
    """One Apache Kafka 4.3.1 node and one kbroker node, started at the same time on free loopback ports with the
    same server properties (``overrides``); ``targets()`` for :func:`run`. A context manager: both are stopped on
    exit, whatever happened."""

    def __init__(self, root: str | Path, overrides: dict[str, str] | None = None) -> None:
        from kbroker.testing.kafka import KafkaProcess  # noqa: PLC0415
        from kbroker.testing.plugin import KbrokerProcess  # noqa: PLC0415

        root = Path(root)
        props = {**PAIR_OVERRIDES, **(overrides or {})}
        self.kafka = KafkaProcess(root / "kafka", overrides=props)
        self.kbroker = KbrokerProcess(root / "kbroker", overrides=props)

    def start(self) -> "BrokerPair":
        errors: list[BaseException] = []

        def go(p: Any) -> None:
            try:
                p.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
        threads = [threading.Thread(target=go, args=(p,), daemon=True) for p in (self.kafka, self.kbroker)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(300)
        if errors or not (self.kafka.is_running() and self.kbroker.is_running()):
            self.stop()
            raise errors[0] if errors else RuntimeError("a broker of the pair did not start")
        return self

    def stop(self) -> None:
        for p in (self.kafka, self.kbroker):
            p.close()

    def targets(self) -> tuple[Target, Target]:
        return Target.of_process("kafka", self.kafka), Target.of_process("kbroker", self.kbroker)

    def __enter__(self) -> "BrokerPair":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: PLAIN users of :class:`AuthBrokerPair`'s SASL listener: ``admin`` (a super user) and ``alice`` (no ACLs)
AUTH_PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                   'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class AuthBrokerPair(BrokerPair):
    """A Kafka node and a kbroker node with the same security set-up: the harness's PLAINTEXT listener, whose
    principal (``User:ANONYMOUS``) is a super user (the readiness probe and :func:`setup` use it), and a
    SASL_PLAINTEXT listener named ``SASL`` with the PLAIN users of :data:`AUTH_PLAIN_JAAS`, under Kafka's
    StandardAuthorizer with no ACLs (``allow.everyone.if.no.acl.found`` false): ``alice`` may do nothing. For the
    differential of authentication failures (:func:`sasl_sequences`) and of missing authorization
    (:func:`differential_denied`)."""

    def __init__(self, root: str | Path, overrides: dict[str, str] | None = None) -> None:
        from kbroker.testing.kafka import KafkaProcess  # noqa: PLC0415
        from kbroker.testing.plugin import KbrokerProcess, free_port  # noqa: PLC0415

        root = Path(root)
        self.sasl_ports: dict[str, int] = {}
        nodes = []
        for label, cls in (("kafka", KafkaProcess), ("kbroker", KbrokerProcess)):
            port, sasl_port = free_port(), free_port()
            listeners = f"PLAINTEXT://127.0.0.1:{port},SASL://127.0.0.1:{sasl_port}"
            props = {**PAIR_OVERRIDES, "listeners": listeners, "advertised.listeners": listeners,
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
                     "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl.plain.sasl.jaas.config": AUTH_PLAIN_JAAS,
                     "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "super.users": "User:ANONYMOUS;User:admin", **(overrides or {})}
            nodes.append(cls(root / label, port=port, overrides=props))
            self.sasl_ports[label] = sasl_port
        self.kafka, self.kbroker = nodes

    def sasl_targets(self, user: str | None = None, password: str | None = None) -> tuple[Target, Target]:
        """Targets on the SASL listeners: connections authenticated as ``user`` first, or not at all (None)."""
        out = []
        for label, proc in (("kafka", self.kafka), ("kbroker", self.kbroker)):
            t = Target.of_process(label, proc)
            out.append(dataclasses.replace(t, port=self.sasl_ports[label], other_ports=(*t.other_ports, proc.port),
                                           sasl_plain=(user, password or "") if user else None))
        return out[0], out[1]


def differential_denied(pair: AuthBrokerPair, allow: AllowList | None = None, only: str | None = None,
                        budget_s: float = 900.0) -> Report:
    """Missing authorization: every valid sequence (:func:`valid_sequences`) sent as ``alice``, who has no ACLs,
    after :func:`setup` as the super user; then the SASL sequences on unauthenticated connections. Sequence names
    get the prefix ``denied: ``."""
    kafka, kbroker = pair.targets()
    n = Names()
    advertised = advertised_versions(kafka)
    ids = setup([kafka, kbroker], n)
    seqs = [dataclasses.replace(s, name=f"denied: {s.name}", kind="denied") for s in valid_sequences(advertised, n)]
    if only:
        seqs = [s for s in seqs if re.search(only, s.name)]
    alice = pair.sasl_targets("alice", "alice-secret")
    report = run(alice[0], alice[1], seqs, allow, ids, budget_s=budget_s)
    sasl = [s for s in _seqs.sasl_sequences(n) if not only or re.search(only, s.name)]
    anonymous = pair.sasl_targets()
    more = run(anonymous[0], anonymous[1], sasl, allow, ids, budget_s=budget_s)
    return Report(report.results + more.results, report.seconds + more.seconds, report.kafka, report.kbroker)


def differential(kafka: Target, kbroker: Target, allow: AllowList | None = None, only: str | None = None,
                 names: Any = None, progress: Callable[[str], None] | None = None,
                 budget_s: float = 900.0) -> Report:
    """The whole differential: the versions the reference advertises, the setup on both, every sequence (those
    whose name matches the regular expression ``only``, when given), compared."""
    n = names or Names()
    advertised = advertised_versions(kafka)
    ids = setup([kafka, kbroker], n)
    seqs = all_sequences(advertised, n)
    if only:
        seqs = [s for s in seqs if re.search(only, s.name)]
    return run(kafka, kbroker, seqs, allow, ids, budget_s=budget_s, progress=progress)
