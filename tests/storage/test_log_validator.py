"""Topic-config checks on append: timestamps, keys on compacted topics, recompression, LogAppendTime."""

from __future__ import annotations

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import RecordBatch, build_batch, iter_batches
from kbroker.storage.config import LONG_MAX, LogConfig
from kbroker.storage.log_validator import CODECS, recompress_batch, validate_for_append

NOW = 1_700_000_000_000
CODEC_NAMES = {v: k for k, v in CODECS.items()}


def _producer_batch(codec: int = 0, ts: int = NOW, n: int = 3, keys: bool = True) -> bytes:
    return build_batch([((b"k%d" % i) if keys else None, b"v%d" % i * 20, [("h", b"%d" % i)], ts + i) for i in range(n)],
                       compression=codec, producer_id=7, producer_epoch=2, base_sequence=11)


def _records(buf: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for b in iter_batches(buf) for r in b.records()]


def test_default_config_leaves_batches_alone():
    buf = bytearray(_producer_batch(codec=1))
    assert validate_for_append(buf, LogConfig(), NOW) is buf


@pytest.mark.parametrize("src", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dst", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_recompression_to_the_topic_codec(src, dst):
    raw = _producer_batch(codec=src)
    out = validate_for_append(bytearray(raw), LogConfig(compression_type=dst), NOW)
    (before,), (after,) = list(iter_batches(raw)), list(iter_batches(out))
    if CODECS[dst] == src:
        assert bytes(out) == raw  # same codec: the producer's bytes are kept as they are
        return
    assert after.compression == CODECS[dst]
    after.validate_records()  # length and CRC recomputed, records decode strictly
    keep = ("base_offset", "partition_leader_epoch", "last_offset_delta", "base_timestamp", "max_timestamp",
            "producer_id", "producer_epoch", "base_sequence", "records_count", "timestamp_type")
    assert {k: getattr(after, k) for k in keep} == {k: getattr(before, k) for k in keep}
    assert _records(out) == _records(raw)


def test_recompression_keeps_control_batches_and_levels():
    from kbroker.protocol.records import build_control_batch

    marker = build_control_batch(1, 7, 2, 0, NOW)
    data = marker + _producer_batch(codec=0)
    out = validate_for_append(bytearray(data), LogConfig(compression_type="zstd", compression_zstd_level=19), NOW)
    batches = list(iter_batches(out))
    assert bytes(batches[0].buffer) == marker
    assert batches[1].compression == 4 and _records(bytes(batches[1].buffer)) == _records(data[len(marker):])
    assert recompress_batch(_producer_batch(), 1, 9) != recompress_batch(_producer_batch(), 1, 1)


def test_create_time_bounds():
    cfg = LogConfig(message_timestamp_before_max_ms=60_000, message_timestamp_after_max_ms=1_000)
    validate_for_append(bytearray(_producer_batch(ts=NOW - 60_000, n=1)), cfg, NOW)
    validate_for_append(bytearray(_producer_batch(ts=NOW + 1_000, n=1)), cfg, NOW)
    for ts in (NOW - 60_001, NOW + 1_001):
        with pytest.raises(KafkaError) as ei:
            validate_for_append(bytearray(_producer_batch(ts=ts, n=1)), cfg, NOW)
        assert ei.value.code == ErrorCode.INVALID_TIMESTAMP
        assert f"[{NOW - 60_000}, {NOW + 1_000}]" in ei.value.message
    # the max timestamp of the batch is checked too (third record at ts + 2)
    with pytest.raises(KafkaError):
        validate_for_append(bytearray(_producer_batch(ts=NOW, n=3)), cfg, NOW - 1_000)
    # LogAppendTime topics ignore producer timestamps; unlimited bounds never check
    validate_for_append(bytearray(_producer_batch(ts=1)), LogConfig(message_timestamp_type="LogAppendTime",
                                                                    message_timestamp_before_max_ms=0), NOW)
    validate_for_append(bytearray(_producer_batch(ts=NOW * 2)),
                        LogConfig(message_timestamp_after_max_ms=LONG_MAX), NOW)


def test_compacted_topics_need_keys():
    cfg = LogConfig(cleanup_policy="compact")
    validate_for_append(bytearray(_producer_batch()), cfg, NOW)
    with pytest.raises(KafkaError) as ei:
        validate_for_append(bytearray(_producer_batch(keys=False)), cfg, NOW, "t-0")
    assert ei.value.code == ErrorCode.INVALID_RECORD and "t-0" in ei.value.message
    validate_for_append(bytearray(_producer_batch(keys=False)), LogConfig(), NOW)


def test_log_append_time_with_recompression(open_log):
    plog = open_log(LogConfig(message_timestamp_type="LogAppendTime", compression_type="lz4"))
    info = plog.append_as_leader(_producer_batch(codec=1, ts=5), 0, NOW)
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    (b,) = list(iter_batches(plog.read(0, 1 << 20).read_bytes()))
    assert b.compression == 3 and b.timestamp_type == 1 and b.max_timestamp == NOW and b.verify_crc()
    assert [r.timestamp for r in b.records()] == [NOW] * 3
    assert [r.offset for r in b.records()] == [0, 1, 2]


def test_append_rejects_out_of_range_timestamps(open_log):
    plog = open_log(LogConfig(message_timestamp_after_max_ms=10))
    with pytest.raises(KafkaError) as ei:
        plog.append_as_leader(_producer_batch(ts=NOW + 11, n=1), 0, NOW)
    assert ei.value.code == ErrorCode.INVALID_TIMESTAMP
    assert plog.log_end_offset == 0  # nothing written
    assert RecordBatch(_producer_batch()).verify_crc()
