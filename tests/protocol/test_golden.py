"""Golden frames from real clients (tests/golden/, see its README): decode, re-encode, compare bytes.

Every ``tests/golden/<client>/<api>_<request|response>_v<N>_<nnn>.bin`` is one raw frame (no size prefix)
recorded by ``scripts/capture_frames.py`` between a real Kafka client and kbroker. For each one:

* the header decodes and re-encodes to the same bytes (request header v1/v2, response header v0/v1);
* the body decodes with kbroker's codec at version N, **the decoder consumes the whole frame**, and
  ``codec.encode`` gives back exactly the bytes the client (or broker) sent;
* a request and the response with the same ``nnn`` carry the same correlation id;
* the record batches inside Produce requests and Fetch responses parse, pass their CRC and decompress
  (gzip, lz4, zstd as written by each client's own compressor).

A frame that is *not* canonical on the wire is listed in ``KNOWN_NONCANONICAL`` with the exact byte
difference and why; for it the test asserts that difference (nothing more, nothing less) and that the
decoded message is what re-encoding canonically gives. Nothing else is exempt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS, RESPONSES, ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.headers import (
    decode_request_header,
    encode_request_header,
    encode_response_header,
    response_header_version,
)
from kbroker.protocol.records import iter_batches, split_batches_strict

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NAME = re.compile(r"(?P<api>[a-z_]+)_(?P<dir>request|response)_v(?P<ver>\d+)_(?P<n>\d{3})\.bin")
CLIENTS = ("java", "confluent", "kcat", "kafka-python", "aiokafka")


@dataclass(frozen=True)
class Golden:
    path: Path
    client: str
    api_key: ApiKey
    direction: str
    version: int
    n: str

    @property
    def id(self) -> str:
        return f"{self.client}/{self.path.stem}"

    @property
    def frame(self) -> bytes:
        return self.path.read_bytes()

    def partner(self) -> Path:
        other = "response" if self.direction == "request" else "request"
        return self.path.with_name(self.path.name.replace(f"_{self.direction}_", f"_{other}_"))


def _load() -> list[Golden]:
    out = []
    for p in sorted(GOLDEN.glob("*/*.bin")):
        m = NAME.fullmatch(p.name)
        if m is None:
            raise AssertionError(f"golden file with an unexpected name: {p}")
        out.append(Golden(p, p.parent.name, ApiKey[m["api"].upper()], m["dir"], int(m["ver"]), m["n"]))
    return out


FILES = _load()
REQUEST_FILES = [g for g in FILES if g.direction == "request"]
RESPONSE_FILES = [g for g in FILES if g.direction == "response"]


# ------------------------------------------------------------------------------------------ known quirks


@dataclass(frozen=True)
class NonCanonical:
    """A frame whose bytes legitimately differ from kbroker's canonical encoding.

    ``canonical_end`` is where kbroker's decoder stops; ``trailing`` the bytes after it, which kbroker (like
    the Apache broker, whose generated parsers do not check for leftover bytes) ignores."""

    reason: str
    canonical_end: int
    trailing: bytes
    expect: dict[str, Any]  # fields of the decoded message and their values


# librdkafka (confluentinc/librdkafka#5049, fix proposed in #5053, still open): a Metadata request for
# *all* topics at a flexible version (v9+) reserves the topic-array count with a 4-byte int32 placeholder
# (rd_kafka_buf_write_arraycnt_pos) and never finalizes it into a 1-byte compact length, so the body is
#     00 00 00 00 | 01 | 00 | 00     (placeholder, AllowAutoTopicCreation=true, IncludeTopicAuthorizedOps, tags)
# instead of the canonical
#     00 | 01 | 00 | 00              (topics=null, true, false, no tagged fields).
# Every broker reads the first placeholder byte as "topics: null (all topics)" and the next three zero bytes
# as AllowAutoTopicCreation=false, IncludeTopicAuthorizedOperations=false and an empty tagged-field
# section, then leaves the real three bytes `01 00 00` unread. kbroker must do the same: decode the
# 39 bytes, ignore the 3 trailing ones (a strict "whole frame consumed" check in the broker would break
# every librdkafka client's full metadata refresh). The request header here is 35 bytes
# (key, version, correlation id, client id "kbroker-golden-confluent" (24), empty header tags).
LIBRDKAFKA_5049 = "librdkafka#5049: all-topics Metadata v9+ keeps a 4-byte array-count placeholder"

KNOWN_NONCANONICAL: dict[str, NonCanonical] = {
    "confluent/metadata_request_v13_001": NonCanonical(
        LIBRDKAFKA_5049, canonical_end=39, trailing=b"\x01\x00\x00",
        expect={"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
    ),
}


# ------------------------------------------------------------------------------------------ helpers


def decode_request(g: Golden) -> tuple[Any, int, int, bytes]:
    """-> (message, header length, body end, re-encoded header)."""
    frame = g.frame
    hdr = decode_request_header(frame)
    assert (hdr.api_key, hdr.api_version) == (g.api_key, g.version), "file name disagrees with the frame header"
    msg, end = codec.decode(REQUESTS[g.api_key], frame, g.version, hdr.body_offset)
    header = encode_request_header(hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id)
    return msg, hdr.body_offset, end, header


def response_body_version(g: Golden, frame: bytes, pos: int) -> int:
    """The version the response body is written in: the request's, except an ApiVersions request newer than
    the broker, which is answered in v0 with UNSUPPORTED_VERSION (KIP-511)."""
    if g.api_key == ApiKey.API_VERSIONS and frame[pos:pos + 2] == ErrorCode.UNSUPPORTED_VERSION.to_bytes(2, "big"):
        return 0
    return g.version


def decode_response(g: Golden) -> tuple[Any, int, int, bytes, int]:
    """-> (message, header length, body end, re-encoded header, body version)."""
    frame = g.frame
    hv = response_header_version(g.api_key, g.version)
    corr = int.from_bytes(frame[:4], "big", signed=True)
    pos = 4 if hv == 0 else codec._skip_tagged(frame, 4)  # noqa: SLF001 - the header's tag section
    ver = response_body_version(g, frame, pos)
    msg, end = codec.decode(RESPONSES[g.api_key], frame, ver, pos)
    return msg, pos, end, encode_response_header(corr, hv), ver


def check_roundtrip(g: Golden, msg: Any, body_at: int, end: int, header: bytes, version: int) -> None:
    frame = g.frame
    assert frame[:body_at] == header, "header does not re-encode to the same bytes"
    body = codec.encode(msg, version)
    quirk = KNOWN_NONCANONICAL.get(g.id)
    if quirk is None:
        assert end == len(frame), f"decoder stopped at byte {end} of {len(frame)}: {frame[end:].hex()} left"
        assert header + body == frame, (
            f"re-encoding differs from the captured frame\n"
            f" captured: {frame[body_at:].hex()}\n re-coded: {body.hex()}"
        )
        return
    # A documented non-canonical frame: exactly the documented difference, and the canonical re-encoding
    # decodes back to the same message.
    assert end == quirk.canonical_end, f"{quirk.reason}: decoder stopped at {end}, expected {quirk.canonical_end}"
    assert frame[end:] == quirk.trailing, f"{quirk.reason}: trailing bytes {frame[end:].hex()}"
    assert header + body == frame[:end], f"{quirk.reason}: canonical part does not re-encode identically"
    for name, value in quirk.expect.items():
        assert getattr(msg, name) == value, f"{quirk.reason}: {name} = {getattr(msg, name)!r}"
    again, end2 = codec.decode(type(msg), body, version, 0)
    assert (again, end2) == (msg, len(body))


# ------------------------------------------------------------------------------------------ tests


def test_golden_set_is_present() -> None:
    """A missing or emptied capture must fail here, not turn every parametrized test into nothing."""
    have = {g.client for g in FILES}
    assert set(CLIENTS) <= have, f"no golden frames for {sorted(set(CLIENTS) - have)}; see tests/golden/README.md"
    for client in CLIENTS:
        apis = {g.api_key for g in FILES if g.client == client}
        assert {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH} <= apis, (client, apis)
    assert sum(g.path.stat().st_size for g in FILES) < 2 * 1024 * 1024
    assert all(g.path.stat().st_size <= 64 * 1024 for g in FILES)


def test_known_noncanonical_frames_exist() -> None:
    """Every documented exemption names a file that is there (after a re-capture, update the table)."""
    ids = {g.id for g in FILES}
    assert set(KNOWN_NONCANONICAL) <= ids, sorted(set(KNOWN_NONCANONICAL) - ids)
    for gid in KNOWN_NONCANONICAL:
        assert next(g for g in FILES if g.id == gid).direction == "request"


def test_at_most_two_frames_per_key() -> None:
    counts: dict[tuple[str, int, str, int], int] = {}
    for g in FILES:
        k = (g.client, int(g.api_key), g.direction, g.version)
        counts[k] = counts.get(k, 0) + 1
    assert max(counts.values()) <= 2, {k: v for k, v in counts.items() if v > 2}


@pytest.mark.parametrize("g", REQUEST_FILES, ids=[g.id for g in REQUEST_FILES])
def test_request_roundtrip(g: Golden) -> None:
    msg, body_at, end, header = decode_request(g)
    check_roundtrip(g, msg, body_at, end, header, g.version)


@pytest.mark.parametrize("g", RESPONSE_FILES, ids=[g.id for g in RESPONSE_FILES])
def test_response_roundtrip(g: Golden) -> None:
    msg, body_at, end, header, ver = decode_response(g)
    check_roundtrip(g, msg, body_at, end, header, ver)


@pytest.mark.parametrize("g", RESPONSE_FILES, ids=[g.id for g in RESPONSE_FILES])
def test_response_pairs_with_request(g: Golden) -> None:
    req = g.partner()
    assert req.exists(), f"response without its request {req.name}"
    assert req.read_bytes()[4:8] == g.frame[:4], "correlation ids of the pair differ"


def _records_fields(g: Golden) -> list[Any]:
    if g.api_key == ApiKey.PRODUCE and g.direction == "request":
        msg = decode_request(g)[0]
        return [p.records for t in msg.topic_data for p in t.partition_data]
    if g.api_key == ApiKey.FETCH and g.direction == "response":
        msg = decode_response(g)[0]
        return [p.records for t in msg.responses for p in t.partitions]
    return []


RECORD_FILES = [g for g in FILES if (g.api_key, g.direction) in ((ApiKey.PRODUCE, "request"),
                                                                  (ApiKey.FETCH, "response"))]


@pytest.mark.parametrize("g", RECORD_FILES, ids=[g.id for g in RECORD_FILES])
def test_record_batches(g: Golden) -> None:
    """The records bytes the codec hands over are whole, CRC-valid v2 batches that decompress and decode."""
    n = 0
    for records in _records_fields(g):
        if records is None or len(records) == 0:
            continue
        # A Fetch response may end in a partial batch; a Produce request may not.
        batches = split_batches_strict(records) if g.direction == "request" else list(iter_batches(records))
        for b in batches:
            b.validate_records()
            n += b.records_count
    if g.direction == "request":
        assert n > 0, "a Produce request without records"
