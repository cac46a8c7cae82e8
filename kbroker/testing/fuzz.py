"""Fuzzing of the wire codec and the record-batch view, seeded from the golden frames real clients sent.

Each input is a golden request frame mutated a few times (bit flips, byte changes, inserted/removed bytes,
lengths and varints set to extreme values, truncation, splicing with another frame). The invariants:

* ``decode_request_header`` + ``codec.decode`` of the request type either succeed or raise the codec's own
  ``DecodeError`` (what makes the server close the connection) — never another exception, never a hang;
* a record batch inside (or the mutated bytes as a batch) either validates, or raises ``KafkaError``
  (CORRUPT_MESSAGE / INVALID_RECORD), and decoding its records never raises anything else;
* the compiled record structure check and its Python twin agree on every batch's record bytes;
* no single input allocates without bound (a 2 GB length prefix must be refused, not allocated): each input is
  run under a time budget and a check of the process's peak memory growth.

Run a campaign: ``python -m kbroker.testing.fuzz --inputs 1000000 --seed 1`` (see docs/reliability.md).
"""

from __future__ import annotations

import argparse
import random
import resource
import struct
import sys
import time
from pathlib import Path
from typing import Callable

from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.headers import decode_request_header, peek_key_version
from kbroker.protocol.record_check import IMPLEMENTATION, check_records, check_records_py
from kbroker.protocol.records import BATCH_HEADER_SIZE, RecordBatch, iter_batches

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden"
EXTREMES = [0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


class FuzzFailure(AssertionError):
    pass


def golden_requests(root: Path = GOLDEN) -> list[bytes]:
    frames = []
    for p in sorted(root.glob("*/*_request_v*.bin")):
        frames.append(p.read_bytes())
    if not frames:
        raise FileNotFoundError(f"no golden request frames under {root}")
    return frames


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    """A few random mutations; four times in five the request header's key and version are kept, so that most
    inputs reach the body decoders."""
    if len(data) > 8 and rng.random() < 0.8:
        return data[:8] + _mutate(rng, data[8:], corpus)
    return _mutate(rng, data, corpus)


def _mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        if not buf:
            buf += bytes([rng.randrange(256)])
            continue
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf[i] = rng.randrange(256)
        elif op == 2:
            del buf[i:i + rng.randint(1, 8)]
        elif op == 3:
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4 and len(buf) >= 4:  # an int32 (a length or count) set to an extreme
            j = rng.randrange(len(buf) - 3)
            struct.pack_into(">I", buf, j, rng.choice(EXTREMES))
        elif op == 5:  # an unsigned varint (compact lengths) set to something huge
            buf[i:i + 1] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
        elif op == 6:
            del buf[rng.randrange(len(buf)):]
        else:
            other = rng.choice(corpus)
            j = rng.randrange(len(other)) if other else 0
            buf[i:] = other[j:]
    return bytes(buf)


STATS = {"decoded": 0, "refused": 0, "unknown_api": 0, "batches": 0, "bad_batches": 0, "record_checks": 0}


def check_one(frame: bytes) -> None:
    """Run one input through the request path and the batch view; raise FuzzFailure on a broken invariant."""
    try:
        api_key, version, _ = peek_key_version(frame)
    except codec.DecodeError:
        STATS["refused"] += 1
        return
    except Exception as exc:
        raise FuzzFailure(f"peek_key_version raised {type(exc).__name__}: {exc}") from exc
    cls = REQUESTS.get(api_key)
    if cls is None or cls.VALID_VERSIONS is None or not cls.VALID_VERSIONS[0] <= version <= cls.VALID_VERSIONS[1]:
        STATS["unknown_api"] += 1
        return  # the server closes the connection without decoding
    try:
        header = decode_request_header(frame)
        request, _ = codec.decode(cls, frame, version, header.body_offset)
    except codec.DecodeError:
        STATS["refused"] += 1
        return
    except Exception as exc:
        raise FuzzFailure(f"{cls.__name__} v{version}: {type(exc).__name__}: {exc}") from exc
    STATS["decoded"] += 1
    for records in _records_of(request):
        check_batches(bytes(records))


def _records_of(msg: object) -> list[bytes]:
    out = []
    for t in getattr(msg, "topic_data", None) or ():
        for p in getattr(t, "partition_data", None) or ():
            if p.records is not None:
                out.append(p.records)
    return out


def check_batches(data: bytes) -> None:
    try:
        batches = list(iter_batches(data))
    except KafkaError:
        return
    except Exception as exc:
        raise FuzzFailure(f"iter_batches raised {type(exc).__name__}: {exc}") from exc
    for b in batches:
        STATS["batches"] += 1
        check_record_structure_agrees(b)
        try:
            b.validate()
            b.validate_records()
            for _ in b.records():
                pass
        except KafkaError:
            STATS["bad_batches"] += 1
            continue
        except Exception as exc:
            raise FuzzFailure(f"record batch: {type(exc).__name__}: {exc}") from exc


def check_record_structure_agrees(b: RecordBatch) -> None:
    """The compiled record check and its Python twin give the same answer on the batch's (uncompressed)
    record bytes, whatever the CRC says (kbroker/protocol/record_check.py)."""
    if b.compression or len(b.buffer) < BATCH_HEADER_SIZE:
        return
    payload = bytes(b.buffer[BATCH_HEADER_SIZE:])
    count = b.records_count
    expected = check_records_py(payload, count)
    got = check_records(payload, count)
    if got != expected:
        raise FuzzFailure(f"record check ({IMPLEMENTATION}) answered {got!r}, the Python check {expected!r}")
    STATS["record_checks"] += 1


def run(inputs: int, seed: int, report: Callable[[str], None] | None = None, budget_s: float = 1.0) -> dict:
    rng = random.Random(seed)
    corpus = golden_requests()
    for k in STATS:
        STATS[k] = 0
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    slowest = 0.0
    for n in range(inputs):
        base = rng.choice(corpus)
        data = mutate(rng, base, corpus)
        t = time.monotonic()
        try:
            check_one(data)
            if rng.random() < 0.2:  # the batch view on its own, on mutated batch bytes
                check_batches(mutate(rng, _first_batch(base) or data, corpus))
        except FuzzFailure as exc:
            raise FuzzFailure(f"input {n} (seed {seed}): {exc}; input hex {data[:200].hex()}") from exc
        took = time.monotonic() - t
        slowest = max(slowest, took)
        if took > budget_s:
            raise FuzzFailure(f"input {n} (seed {seed}) took {took:.2f} s; input hex {data[:200].hex()}")
        if report and n and n % 100_000 == 0:
            report(f"{n} inputs, {time.monotonic() - t0:.0f} s")
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024
    if grew_mb > 512:
        raise FuzzFailure(f"peak memory grew by {grew_mb:.0f} MB")
    return {"inputs": inputs, "seconds": round(time.monotonic() - t0, 1), "slowest_ms": round(slowest * 1000, 2),
            "peak_growth_mb": round(grew_mb, 1), "seed_frames": len(corpus), **STATS}


def _first_batch(frame: bytes) -> bytes | None:
    try:
        api_key, version, _ = peek_key_version(frame)
        cls = REQUESTS[api_key]
        req, _ = codec.decode(cls, frame, version, decode_request_header(frame).body_offset)
    except Exception:
        return None
    recs = _records_of(req)
    return bytes(recs[0]) if recs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    try:
        res = run(args.inputs, args.seed, report=lambda s: print(s, flush=True))
    except FuzzFailure as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    print(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
