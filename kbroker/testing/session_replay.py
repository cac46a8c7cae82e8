"""Replay of real clients' sessions to Apache Kafka and to kbroker, answers compared (issue 31, item 4c).

A session is what one client (the Java client, librdkafka, kafka-python, aiokafka) sent a broker, request by
request, and what it was answered, as a recording proxy saw it (``scripts/capture_frames.py``'s :func:`record`).
:func:`replay` sends the same requests, in the recorded order, to a Kafka node and to a kbroker node, and compares
the two live answers field by field with the protocol differential's normalisation
(:mod:`kbroker.testing.differential`).

Requests are replayed as recorded, with one change: the ids a broker hands out are those the live broker handed
out. After each answer, the recorded answer and the live one are walked side by side; where a field named in
:data:`ID_FIELDS` differs (a member id, a producer id and epoch, a fetch session id, a topic id, a generation),
the recorded value is mapped to the live one, and later requests carry the live value in fields of that name,
also in the producer id and epoch of record batch headers (whose CRC is then recomputed). Each session goes over
one connection per broker (the recorded client may have used several: requests to one broker do not depend on the
connection they come on, but for SASL, which these sessions do not use).

Differences are checked against the differential's allow list under the names ``<Api> v<version>`` (the entries
that also hold for the generated sequences) and ``replay <client>: <Api> v<version>``.
"""

from __future__ import annotations

import copy
import dataclasses
import struct
import threading
import time
from typing import Any

import crc32c

from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS, RESPONSES
from kbroker.protocol.headers import decode_request_header, response_header_version
from kbroker.testing import differential as d

__all__ = ["ID_FIELDS", "Recorded", "SessionResult", "sequence_of", "replay"]

#: answer fields whose values a broker picks and later requests repeat
ID_FIELDS = frozenset({"member_id", "producer_id", "producer_epoch", "session_id", "topic_id", "client_instance_id",
                       "generation_id", "member_epoch"})


#: error codes a client retries on (the broker is not ready yet: metadata not propagated, coordinator loading,
#: producer id block not allocated): a replayed step that gets one is sent again, bounded, as the client would
RETRIABLE = frozenset({3, 5, 6, 14, 15, 16, 100})
#: the longest pause kept between two recorded requests, s
MAX_PAUSE_S = 1.0


@dataclasses.dataclass
class Recorded:
    """One recorded request (frame without the size prefix, header included), its answer (None: none came) and
    when it was sent (monotonic seconds; the replay keeps the gaps, up to :data:`MAX_PAUSE_S`)."""

    api_key: int
    version: int
    request: bytes
    response: bytes | None
    at: float = 0.0


@dataclasses.dataclass
class SessionResult:
    client: str
    steps: int
    compared: int
    identical: int
    allowed: int
    differences: list[dict[str, Any]]  # the undocumented ones
    seconds: float


def _decode_request(rec: Recorded) -> Any:
    header = decode_request_header(rec.request)
    msg, _ = codec.decode(REQUESTS[rec.api_key], rec.request, rec.version, header.body_offset)
    return msg


def _decode_response(rec: Recorded) -> Any:
    frame = rec.response
    assert frame is not None
    pos = 4 if response_header_version(rec.api_key, rec.version) == 0 else codec._skip_tagged(frame, 4)
    msg, _ = codec.decode(RESPONSES[rec.api_key], frame, rec.version, pos)
    return msg


def _learn(ids: dict[tuple[str, Any], Any], recorded: Any, live: Any, name: str = "") -> None:
    """Walk the recorded and the live answer side by side (arrays by index) and map recorded ids to live ones."""
    if isinstance(recorded, dict) and isinstance(live, dict):
        for k, v in recorded.items():
            if k in live:
                _learn(ids, v, live[k], k)
    elif isinstance(recorded, list) and isinstance(live, list):
        for a, b in zip(recorded, live):
            _learn(ids, a, b, name)
    elif name in ID_FIELDS and recorded != live and recorded not in (None, "", -1):
        ids[(name, _key(recorded))] = live


def _key(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _raw(v: Any) -> Any:
    """A to_plain value back in the message's form (uuids are ("uuid", hex) there, bytes in the message)."""
    if isinstance(v, tuple) and v and v[0] == "uuid":
        return bytes.fromhex(v[1])
    return v


def _substitute(msg: Any, ids: dict[tuple[str, Any], Any]) -> Any:
    """Replace, in place, every id field of ``msg`` whose recorded value has a live one; record batches too."""
    if dataclasses.is_dataclass(msg):
        for f in type(msg).FIELDS:
            v = getattr(msg, f.name, None)
            if f.name in ID_FIELDS and v is not None:
                plain = ("uuid", bytes(v).hex()) if isinstance(v, (bytes, bytearray)) and len(v) == 16 else v
                if (f.name, _key(plain)) in ids:
                    setattr(msg, f.name, _raw(ids[(f.name, _key(plain))]))
            elif f.kind == "records" and isinstance(v, (bytes, bytearray)) and v:
                setattr(msg, f.name, _rewrite_batches(bytes(v), ids))
            elif isinstance(v, list):
                for x in v:
                    _substitute(x, ids)
            elif dataclasses.is_dataclass(v):
                _substitute(v, ids)
    return msg


_PID_AT, _EPOCH_AT, _CRC_AT, _ATTR_AT = 43, 51, 17, 21  # offsets in a v2 record batch header


def _rewrite_batches(buf: bytes, ids: dict[tuple[str, Any], Any]) -> bytes:
    """The producer id and epoch of each v2 batch mapped to the live broker's, the batch CRC recomputed."""
    out = bytearray(buf)
    pos = 0
    while pos + 61 <= len(out):
        (length,) = struct.unpack_from(">i", out, pos + 8)
        end = pos + 12 + length
        if out[pos + 16] != 2 or end > len(out):
            break
        pid, epoch = struct.unpack_from(">qh", out, pos + _PID_AT)
        new_pid = ids.get(("producer_id", pid), pid)
        new_epoch = ids.get(("producer_epoch", epoch), epoch)
        if (new_pid, new_epoch) != (pid, epoch):
            struct.pack_into(">qh", out, pos + _PID_AT, new_pid, new_epoch)
            struct.pack_into(">I", out, pos + _CRC_AT, crc32c.crc32c(bytes(out[pos + _ATTR_AT:end])))
        pos = end
    return bytes(out)


def _settled(msg: Any) -> bool:
    """No retriable error code anywhere in the answer."""
    if dataclasses.is_dataclass(msg):
        if getattr(msg, "error_code", 0) in RETRIABLE:
            return False
        return all(_settled(getattr(msg, f.name, None)) for f in type(msg).FIELDS if f.kind in ("struct", "array"))
    if isinstance(msg, list):
        return all(_settled(x) for x in msg)
    return True


def sequence_of(client: str, session: list[Recorded]) -> d.Sequence:
    """The session as a differential :class:`~kbroker.testing.differential.Sequence` whose steps substitute the
    ids learned so far (``ctx.vars["ids"]``) and learn new ones from each answer, paced as recorded, each sent
    again (up to 3 s) while its answer carries a retriable error."""
    steps = []
    for i, rec in enumerate(session):
        pause = min(MAX_PAUSE_S, max(0.0, rec.at - session[i - 1].at)) if i and rec.at else 0.0
        request = _decode_request(rec)
        recorded_answer = d.to_plain(_decode_response(rec), rec.version) if rec.response is not None else None

        def body(ctx: d.Ctx, request: Any = request) -> Any:
            return _substitute(copy.deepcopy(request), ctx.vars.setdefault("ids", {}))

        def capture(ctx: d.Ctx, live: Any, rec: Recorded = rec, recorded_answer: Any = recorded_answer) -> None:
            if recorded_answer is not None:
                _learn(ctx.vars.setdefault("ids", {}), recorded_answer, d.to_plain(live, rec.version))

        steps.append(d.Step(rec.api_key, rec.version, body=body, response=rec.response is not None,
                            capture=capture, timeout=30.0, pause=pause, until=_settled, tries=60))
    return d.Sequence(f"replay {client}", session[0].api_key if session else 18, steps, kind="replay")


def replay(kafka: d.Target, kbroker: d.Target, sessions: dict[str, list[Recorded]],
           allow: d.AllowList | None = None, budget_s: float = 300.0) -> list[SessionResult]:
    """Replay each client's session to both brokers (at the same time), compare the answers step by step."""
    allow = allow or d.AllowList()
    results = []
    for client, session in sessions.items():
        seq = sequence_of(client, session)
        started = time.monotonic()
        outcomes: dict[str, list[d.Outcome]] = {}

        def go(t: d.Target, seq: d.Sequence = seq) -> None:
            outcomes[t.label] = d._run_steps(t, seq, {}, time.monotonic() + budget_s)

        threads = [threading.Thread(target=go, args=(t,), daemon=True) for t in (kafka, kbroker)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(budget_s + 60)
        a, b = outcomes.get(kafka.label, []), outcomes.get(kbroker.label, [])
        compared = identical = allowed = 0
        undocumented: list[dict[str, Any]] = []
        for i, (step, x, y) in enumerate(zip(seq.steps, a, b)):
            compared += 1
            label = f"{d.api_name(step.api_key)} v{step.version}"
            if x.status != y.status:
                diffs = [("<outcome>", f"{x.status} {x.detail}".strip(), f"{y.status} {y.detail}".strip())]
            else:
                diffs = d.diff(x.value, y.value) if x.status == "response" else []
            if not diffs:
                identical += 1
                continue
            open_diffs = [(p, ka, kb) for p, ka, kb in diffs
                          if allow.match(label, p) is None and allow.match(f"replay {client}: {label}", p) is None]
            if open_diffs:
                undocumented += [{"client": client, "step": i, "request": label, "path": p, "kafka": ka, "kbroker": kb}
                                 for p, ka, kb in open_diffs]
            else:
                allowed += 1
        if len(a) != len(seq.steps) or len(b) != len(seq.steps):
            undocumented.append({"client": client, "step": min(len(a), len(b)), "request": "<session>",
                                 "path": "<steps run>", "kafka": len(a), "kbroker": len(b)})
        results.append(SessionResult(client, len(seq.steps), compared, identical, allowed, undocumented,
                                     time.monotonic() - started))
    return results
