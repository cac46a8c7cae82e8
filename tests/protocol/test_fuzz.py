"""A seeded slice of the codec fuzzer (kbroker.testing.fuzz) in CI: mutated golden request frames through the
request decoders and the record-batch view; decoding either succeeds or raises the codec's DecodeError, a
batch validates or raises KafkaError — nothing else, no input slow or memory-hungry. The long coverage-guided
campaign (atheris, 10^6+ inputs) is bench/fuzz_codec_atheris.py; figures in docs/reliability.md."""

from __future__ import annotations

import pytest

from kbroker.testing.fuzz import FuzzFailure, check_one, run


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_codec_fuzz_slice(seed):
    res = run(60_000, seed)
    assert res["decoded"] > 3_000 and res["batches"] > 2_000  # the mutations reach the decoders
    assert res["slowest_ms"] < 1000


def test_the_fuzzer_reports_a_broken_invariant(monkeypatch):
    from kbroker.protocol import codec

    def broken(*a, **kw):
        raise IndexError("a decoder bug")

    monkeypatch.setattr(codec, "decode", broken)
    from kbroker.testing import fuzz

    with pytest.raises(FuzzFailure, match="IndexError"):
        frame = fuzz.golden_requests()[0]
        check_one(frame)


def test_huge_lengths_are_refused_without_allocating():
    import resource
    import struct

    from kbroker.testing.fuzz import golden_requests

    frame = bytearray(golden_requests()[0])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for pos in range(8, min(len(frame) - 4, 200)):
        mutated = bytearray(frame)
        struct.pack_into(">I", mutated, pos, 0x7FFFFFFF)
        check_one(bytes(mutated))
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 256
