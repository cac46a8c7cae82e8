"""docs/compat.md's table of the compat tests' standing against the reference Kafka (kbroker_only tests and their
reasons, the kafka_reference slice) is generated from the markers and kept current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_reference_table_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "reference_tests.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_every_kbroker_only_test_says_why():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import reference_tests  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    only, reference, _ = reference_tests.scan()
    assert [row for row in only if len(row[2]) < 15] == []
    assert reference, "no test is in the reference slice that CI runs against Kafka"
