"""Checks on what the broker actually stored, read back with hand-encoded Fetch v4 (compat_tests/wire.py)."""

from __future__ import annotations

from compat_tests import wire
from compat_tests.clients import ProduceOptions


def check_stored_batches(bootstrap: str, topic: str, partitions: int, opts: ProduceOptions, total: int,
                         *, expect_multi_record_batches: bool = True) -> list[wire.Batch]:
    """Every stored batch is a valid v2 batch (CRC-32C checks out), offsets are contiguous from 0 up to
    the high watermark, the producer's codec was kept (compression.type=producer; librdkafka may send a
    batch uncompressed when compressing would not shrink it), the producer id is set iff the producer was
    idempotent, and the linger setting produced multi-record batches."""
    problems: list[str] = []
    everything: list[wire.Batch] = []
    for p in range(partitions):
        batches, hw = wire.read_log(bootstrap, topic, p)
        expect_next = 0
        for b in batches:
            where = f"{topic}-{p} batch @{b.base_offset}"
            if b.magic != 2:
                problems.append(f"{where}: magic {b.magic}")
            if not b.crc_ok:
                problems.append(f"{where}: CRC-32C mismatch (stored {b.crc:#010x})")
            if b.base_offset != expect_next:
                problems.append(f"{where}: expected base offset {expect_next}")
            if b.count != b.last_offset_delta + 1:
                problems.append(f"{where}: {b.count} records but lastOffsetDelta {b.last_offset_delta}")
            if b.codec not in (opts.compression, "none"):
                problems.append(f"{where}: codec {b.codec}, producer used {opts.compression}")
            if b.is_transactional or b.is_control:
                problems.append(f"{where}: unexpected transactional/control attributes {b.attributes:#x}")
            if opts.idempotence and (b.producer_id < 0 or b.base_sequence < 0):
                problems.append(f"{where}: idempotent batch stored with producerId {b.producer_id} "
                                f"baseSequence {b.base_sequence}")
            if not opts.idempotence and b.producer_id != -1:
                problems.append(f"{where}: non-idempotent batch stored with producerId {b.producer_id}")
            expect_next = b.last_offset + 1
        if expect_next != hw:
            problems.append(f"{topic}-{p}: batches end at {expect_next}, high watermark {hw}")
        everything += batches
    stored = sum(b.count for b in everything)
    if stored != total:
        problems.append(f"{stored} records stored, {total} produced")
    if opts.compression != "none" and not any(b.codec == opts.compression for b in everything):
        problems.append(f"no stored batch uses {opts.compression}: {[b.codec for b in everything]} (librdkafka "
                        "sends uncompressed when ApiVersions suggests the broker lacks the codec: LZ4 needs "
                        "FindCoordinator advertised, ZSTD needs Produce v7+)")
    if expect_multi_record_batches and not any(b.count > 1 for b in everything):
        problems.append(f"no multi-record batch stored (linger.ms={opts.linger_ms}): "
                        f"{[b.count for b in everything]}")
    if problems:
        raise AssertionError(f"stored log of {topic} is wrong:\n  " + "\n  ".join(problems[:20]))
    return everything
