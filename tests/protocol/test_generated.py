"""The committed message modules must equal what scripts/generate_messages.py produces from the specs
(Apache Kafka 4.4.0's, in specs/kafka-4.4.0/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs" / "kafka-4.4.0"


def test_generated_code_matches_specs():
    """``--check`` with the script's default specs, which are the ones in the repository."""
    assert (SPECS / "message-specs" / "ApiVersionsRequest.json").is_file()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate_messages.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, "generated messages are out of date:\n" + proc.stderr


def test_api_table_knows_the_ranges_kafka_4_3_1_had():
    """scripts/api_table.py's KAFKA_4_3_1_CHANGED (the 4.3.1 column of docs/compat.md) against the 4.3.1 specs in
    ../shared/kafka-protocol, when that folder is here."""
    import pytest

    old_specs = ROOT.parent / "shared" / "kafka-protocol" / "message-specs"
    if not old_specs.is_dir():
        pytest.skip("../shared/kafka-protocol (Kafka 4.3.1's specs) is absent")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import api_table
        import generate_messages
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def ranges(folder: Path) -> dict[int, tuple[int, int] | None]:
        out = {}
        for p in folder.glob("*Request.json"):
            spec = generate_messages.load_spec(p)
            if "apiKey" in spec:
                out[spec["apiKey"]] = generate_messages.parse_versions(spec.get("validVersions"))
        return out

    old, new = ranges(old_specs), ranges(SPECS / "message-specs")
    changed = {k: old.get(k) for k in new if old.get(k) != new[k]}
    assert changed == api_table.KAFKA_4_3_1_CHANGED
