"""The README starts with the two set-up commands, and its API table matches the handler table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_first_lines_are_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0].startswith("./dev.sh broker")
    assert lines[1].startswith("./dev.sh test")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev.sh test" in ci


def test_api_table_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "api_table.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_compat_table_lists_every_kafka_api_key_once():
    """docs/compat.md's generated table has one row per Kafka 4.4.0 API key, 0 to the highest, and a reason for
    each key without a handler."""
    import re

    from kbroker.protocol.api_keys import REQUESTS

    text = (ROOT / "docs" / "compat.md").read_text()
    table = text.split("<!-- api-keys:begin", 1)[1].split("<!-- api-keys:end -->", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [int(r[1]) for r in rows] == list(range(0, max(REQUESTS) + 1))
    # | Key | API | Kafka 4.3.1 | Kafka 4.4.0 | kbroker | Notes |
    assert all(r[6].strip() for r in rows if r[5].strip() == "-")
