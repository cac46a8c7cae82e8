"""Hand-written Kafka wire encoding for the compat tests.

Deliberately independent of kbroker's own protocol code (and of every client library): frames,
request/response headers, ApiVersions, Produce v9, Fetch v4 and v2 record batches are built and parsed
here with ``struct`` straight from the Kafka protocol spec, so a test that uses them checks the bytes on
the wire, not kbroker against itself. CRC-32C is implemented here too.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------- constants

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_API_VERSIONS = 18

NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {v: k for k, v in CODECS.items()}

# ---------------------------------------------------------------------------------------------- CRC-32C


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as used by v2 record batches. crc32c(b"123456789") == 0xE3069283."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------- primitives


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    assert v >= 0
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(v: int) -> bytes:
    """Signed zig-zag varint (record fields)."""
    return uvarint((v << 1) ^ (v >> 63))


def string(s: str | None) -> bytes:
    """int16-length string; None encodes as length -1 (nullable)."""
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def compact_string(s: str | None) -> bytes:
    """uvarint(len+1) string; None encodes as 0 (compact nullable)."""
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def compact_bytes(b: bytes | None) -> bytes:
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def compact_array(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = uvarint(0)


class Reader:
    """Sequential reader over a response payload."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self) -> int:
        return self._take(">b")

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def u32(self) -> int:
        return self._take(">I")

    def i64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.raw(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.raw(n - 1).decode()

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.raw(n)

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self.raw(n - 1)

    def array(self, fn):  # noqa: ANN001, ANN201
        n = self.i32()
        return None if n < 0 else [fn(self) for _ in range(n)]

    def compact_array(self, fn):  # noqa: ANN001, ANN201
        n = self.uvarint()
        return None if n == 0 else [fn(self) for _ in range(n - 1)]

    def tagged_fields(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------------------------- headers


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None = "kbroker-compat-raw",
                   header_version: int = 1) -> bytes:
    """Request header v1 (non-flexible APIs) or v2 (flexible: v1 + empty tagged fields)."""
    h = i16(api_key) + i16(version) + i32(correlation_id) + string(client_id)
    if header_version >= 2:
        h += NO_TAGS
    return h


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


# ---------------------------------------------------------------------------------------------- record batches


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0


def encode_record(offset_delta: int, timestamp_delta: int, r: Rec) -> bytes:
    body = i8(0) + varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if r.key is None else varint(len(r.key)) + r.key
    body += varint(-1) if r.value is None else varint(len(r.value)) + r.value
    body += varint(len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + body


def encode_batch(records: list[Rec], *, base_offset: int = 0, attributes: int = 0, magic: int = 2,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1, records_blob: bytes | None = None,
                 count: int | None = None, crc: int | None = None) -> bytes:
    """A v2 record batch. ``records_blob`` replaces the encoded records (e.g. a compressed payload or
    garbage), ``count`` overrides the declared record count, ``crc`` overrides the computed CRC."""
    first_ts = records[0].timestamp if records else 0
    max_ts = max((r.timestamp for r in records), default=first_ts)
    blob = records_blob if records_blob is not None else b"".join(
        encode_record(i, r.timestamp - first_ts, r) for i, r in enumerate(records))
    after_crc = (i16(attributes) + i32(max(len(records) - 1, 0)) + i64(first_ts) + i64(max_ts)
                 + i64(producer_id) + i16(producer_epoch) + i32(base_sequence)
                 + i32(len(records) if count is None else count) + blob)
    the_crc = crc32c(after_crc) if crc is None else crc
    batch_length = 4 + 1 + 4 + len(after_crc)  # partitionLeaderEpoch + magic + crc + rest
    return i64(base_offset) + i32(batch_length) + i32(partition_leader_epoch) + i8(magic) + u32(the_crc) + after_crc


@dataclass
class Batch:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_ok: bool
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    records: list[dict] | None  # decoded when uncompressed

    @property
    def codec(self) -> str:
        return CODEC_NAMES.get(self.attributes & 0x07, f"unknown({self.attributes & 0x07})")

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


def decode_records(blob: bytes, count: int) -> list[dict]:
    rd = Reader(blob)
    out = []
    for _ in range(count):
        length = rd.varint()
        end = rd.pos + length
        attrs = rd.i8()
        ts_delta = rd.varint()
        off_delta = rd.varint()
        kl = rd.varint()
        key = None if kl < 0 else rd.raw(kl)
        vl = rd.varint()
        value = None if vl < 0 else rd.raw(vl)
        headers = []
        for _ in range(rd.varint()):
            hk = rd.raw(rd.varint()).decode()
            hl = rd.varint()
            headers.append((hk, None if hl < 0 else rd.raw(hl)))
        if rd.pos != end:
            raise ValueError(f"record length {length} does not match its fields")
        out.append({"attributes": attrs, "timestamp_delta": ts_delta, "offset_delta": off_delta,
                    "key": key, "value": value, "headers": headers})
    if rd.remaining():
        raise ValueError(f"{rd.remaining()} bytes left after {count} records")
    return out


def decode_batches(data: bytes | None) -> list[Batch]:
    """Parse v2 record batches (a Fetch response's records field); a trailing partial batch is ignored."""
    out: list[Batch] = []
    if not data:
        return out
    pos = 0
    while len(data) - pos >= 12:
        base_offset, batch_length = struct.unpack_from(">qi", data, pos)
        if batch_length <= 0 or pos + 12 + batch_length > len(data):
            break  # partial batch at the end of a size-limited fetch
        body = data[pos + 12:pos + 12 + batch_length]
        rd = Reader(body)
        ple = rd.i32()
        magic = rd.i8()
        crc = rd.u32()
        crc_region = body[rd.pos:]
        attributes = rd.i16()
        last_offset_delta = rd.i32()
        first_ts = rd.i64()
        max_ts = rd.i64()
        pid = rd.i64()
        epoch = rd.i16()
        base_seq = rd.i32()
        count = rd.i32()
        blob = body[rd.pos:]
        records = decode_records(blob, count) if (attributes & 0x07) == 0 and magic == 2 else None
        out.append(Batch(base_offset, batch_length, ple, magic, crc, crc32c(crc_region) == crc, attributes,
                         last_offset_delta, first_ts, max_ts, pid, epoch, base_seq, count, records))
        pos += 12 + batch_length
    return out


# ---------------------------------------------------------------------------------------------- connection


class ConnectionClosed(Exception):
    pass


class KafkaConnection:
    """A plain TCP connection speaking hand-encoded Kafka frames."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self._corr = 1000

    @classmethod
    def to(cls, bootstrap: str, timeout: float = 10.0) -> KafkaConnection:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        return cls(host.strip("[]"), int(port), timeout)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._corr += 1
        return self._corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError as exc:
                raise ConnectionClosed(f"reset after {len(buf)} of {n} bytes") from exc
            if not chunk:
                raise ConnectionClosed(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        if size < 4 or size > 256 << 20:
            raise ValueError(f"implausible response frame size {size}")
        return self.recv_exact(size)

    def request(self, api_key: int, version: int, body: bytes, *, header_version: int = 1,
                response_header_version: int = 0, client_id: str | None = "kbroker-compat-raw") -> Reader:
        """Send one request and return a Reader positioned after the response header."""
        corr = self.next_correlation_id()
        self.send_raw(frame(request_header(api_key, version, corr, client_id, header_version) + body))
        payload = self.recv_frame()
        rd = Reader(payload)
        got = rd.i32()
        if got != corr:
            raise AssertionError(f"correlation id {got} != {corr}")
        if response_header_version >= 1:
            rd.tagged_fields()
        return rd

    def wait_closed(self, timeout: float = 10.0) -> tuple[bool, bytes]:
        """Read until the peer closes (True) or ``timeout`` passes with the socket still open (False).
        Returns whatever bytes arrived meanwhile."""
        deadline = time.monotonic() + timeout
        got = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, bytes(got)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False, bytes(got)
            except (ConnectionResetError, BrokenPipeError):
                return True, bytes(got)
            if not chunk:
                return True, bytes(got)
            got += chunk


# ---------------------------------------------------------------------------------------------- ApiVersions


@dataclass
class ApiVersionsResult:
    error_code: int
    api_keys: dict[int, tuple[int, int]]
    throttle_time_ms: int | None = None


def api_versions_body(version: int) -> bytes:
    if version >= 3:
        return compact_string("kbroker-compat") + compact_string("1.0") + NO_TAGS
    return b""


def parse_api_versions_v0(rd: Reader) -> ApiVersionsResult:
    err = rd.i16()
    keys = rd.array(lambda r: (r.i16(), r.i16(), r.i16())) or []
    return ApiVersionsResult(err, {k: (lo, hi) for k, lo, hi in keys})


def parse_api_versions_v3(rd: Reader) -> ApiVersionsResult:
    err = rd.i16()

    def entry(r: Reader) -> tuple[int, int, int]:
        k, lo, hi = r.i16(), r.i16(), r.i16()
        r.tagged_fields()
        return k, lo, hi

    keys = rd.compact_array(entry) or []
    throttle = rd.i32()
    rd.tagged_fields()
    return ApiVersionsResult(err, {k: (lo, hi) for k, lo, hi in keys}, throttle)


def api_versions(conn: KafkaConnection, version: int = 3) -> ApiVersionsResult:
    """ApiVersions (response header is always v0, even for the flexible v3)."""
    rd = conn.request(API_API_VERSIONS, version, api_versions_body(version),
                      header_version=2 if version >= 3 else 1, response_header_version=0)
    if version >= 3:
        return parse_api_versions_v3(rd)
    res = parse_api_versions_v0(rd)
    if version >= 1:
        res.throttle_time_ms = rd.i32()
    return res


# ---------------------------------------------------------------------------------------------- Produce v9


@dataclass
class ProducePartitionResult:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: list[tuple[int, str | None]]
    error_message: str | None


def produce_v9_body(topic: str, partition: int, records: bytes | None, *, acks: int = -1,
                    timeout_ms: int = 10000, transactional_id: str | None = None) -> bytes:
    part = i32(partition) + compact_bytes(records) + NO_TAGS
    topic_data = compact_string(topic) + compact_array([part]) + NO_TAGS
    return compact_string(transactional_id) + i16(acks) + i32(timeout_ms) + compact_array([topic_data]) + NO_TAGS


def produce_v9(conn: KafkaConnection, topic: str, partition: int, records: bytes | None,
               acks: int = -1, timeout_ms: int = 10000) -> ProducePartitionResult:
    """Produce v9 (flexible: request header v2, response header v1)."""
    rd = conn.request(API_PRODUCE, 9, produce_v9_body(topic, partition, records, acks=acks, timeout_ms=timeout_ms),
                      header_version=2, response_header_version=1)
    results: list[ProducePartitionResult] = []

    def part(r: Reader, name: str) -> None:
        idx, err, base, lat, lso = r.i32(), r.i16(), r.i64(), r.i64(), r.i64()

        def rec_err(rr: Reader) -> tuple[int, str | None]:
            bi, msg = rr.i32(), rr.compact_string()
            rr.tagged_fields()
            return bi, msg

        rec_errors = r.compact_array(rec_err) or []
        msg = r.compact_string()
        r.tagged_fields()
        results.append(ProducePartitionResult(name, idx, err, base, lat, lso, rec_errors, msg))

    def topic_resp(r: Reader) -> None:
        name = r.compact_string() or ""
        r.compact_array(lambda rr: part(rr, name))
        r.tagged_fields()

    rd.compact_array(topic_resp)
    rd.i32()  # throttle_time_ms
    rd.tagged_fields()
    matching = [x for x in results if x.topic == topic and x.partition == partition]
    if len(matching) != 1:
        raise AssertionError(f"expected one result for {topic}-{partition}, got {results}")
    return matching[0]


# ---------------------------------------------------------------------------------------------- Fetch v4


@dataclass
class FetchPartitionResult:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None
    records: bytes | None


def fetch_v4_body(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1,
                  max_bytes: int = 16 << 20, partition_max_bytes: int = 8 << 20, isolation_level: int = 0) -> bytes:
    part = i32(partition) + i64(offset) + i32(partition_max_bytes)
    topics = array([string(topic) + array([part])])
    return i32(-1) + i32(max_wait_ms) + i32(min_bytes) + i32(max_bytes) + i8(isolation_level) + topics


def fetch_v4(conn: KafkaConnection, topic: str, partition: int, offset: int, **kw: int) -> FetchPartitionResult:
    rd = conn.request(API_FETCH, 4, fetch_v4_body(topic, partition, offset, **kw))
    rd.i32()  # throttle_time_ms
    results: list[FetchPartitionResult] = []

    def part(r: Reader) -> None:
        idx, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
        aborted = r.array(lambda rr: (rr.i64(), rr.i64()))
        results.append(FetchPartitionResult(idx, err, hw, lso, aborted, r.bytes_()))

    def topic_resp(r: Reader) -> None:
        r.string()
        r.array(part)

    rd.array(topic_resp)
    matching = [x for x in results if x.partition == partition]
    if len(matching) != 1:
        raise AssertionError(f"expected one fetch result for partition {partition}, got {len(matching)}")
    return matching[0]


def read_log(bootstrap: str, topic: str, partition: int, *, timeout: float = 20.0) -> tuple[list[Batch], int]:
    """Every batch of one partition from offset 0 up to the high watermark, via raw Fetch v4.
    Returns (batches, high_watermark)."""
    batches: list[Batch] = []
    offset = 0
    deadline = time.monotonic() + timeout
    with KafkaConnection.to(bootstrap) as conn:
        while True:
            res = fetch_v4(conn, topic, partition, offset)
            if res.error_code != NONE:
                raise AssertionError(f"Fetch v4 {topic}-{partition}@{offset}: error code {res.error_code}")
            got = decode_batches(res.records)
            # a fetch may start inside the first returned (compressed) batch; keep only new ones
            got = [b for b in got if b.last_offset >= offset]
            batches += got
            if got:
                offset = got[-1].last_offset + 1
            if offset >= res.high_watermark:
                return batches, res.high_watermark
            if not got:
                time.sleep(0.05)
            if not got and time.monotonic() > deadline:
                raise AssertionError(f"Fetch v4 {topic}-{partition}: stuck at offset {offset} "
                                     f"below high watermark {res.high_watermark}")
