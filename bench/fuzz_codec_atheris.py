"""Coverage-guided fuzzing of the request decoders and the record-batch view with atheris (libFuzzer).

The corpus starts from the golden frames real clients sent (tests/golden); the invariants are those of
``kbroker.testing.fuzz.check_one`` (decode succeeds or raises the codec's DecodeError; a record batch validates
or raises KafkaError; nothing else). Run::

    .venv/bin/pip install atheris
    .venv/bin/python bench/fuzz_codec_atheris.py -runs=1000000 -seed=1

Figures from a run are in docs/reliability.md. CI runs the seeded random-mutation slice in
tests/protocol/test_fuzz.py instead (atheris is not a runtime dependency).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

with atheris.instrument_imports():
    from kbroker.protocol import codec, headers, records  # noqa: F401
    from kbroker.testing.fuzz import FuzzFailure, check_batches, check_one, golden_requests


def test_one_input(data: bytes) -> None:
    try:
        check_one(data)
        if len(data) > 61:
            check_batches(data)
    except FuzzFailure:
        raise


def main() -> None:
    corpus = Path(tempfile.mkdtemp(prefix="kbroker-fuzz-corpus-"))
    for i, frame in enumerate(golden_requests()):
        (corpus / f"golden{i:03d}").write_bytes(frame)
    argv = [sys.argv[0], *sys.argv[1:], str(corpus)]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
