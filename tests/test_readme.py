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
