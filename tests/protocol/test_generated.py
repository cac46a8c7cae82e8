"""The committed message modules must equal what scripts/generate_messages.py produces from the specs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT.parent / "shared" / "kafka-protocol"


@pytest.mark.skipif(not (SPECS / "message-specs").is_dir(),
                    reason="../shared/kafka-protocol is absent, so the specs to compare with are not here")
def test_generated_code_matches_specs():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_messages.py"), "--check",
                           "--specs", str(SPECS)], capture_output=True, text=True)
    assert proc.returncode == 0, "generated messages are out of date:\n" + proc.stderr
