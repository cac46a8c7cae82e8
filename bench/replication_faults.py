#!/usr/bin/env python3
"""The long replication fault campaign (issue 10): 1,000 faults by default against three brokers under an acks=all
load, checked with kbroker.testing.history. The campaign itself is :mod:`kbroker.testing.fault_campaign` (CI
runs a 100-fault slice of it in compat_tests/test_replication.py). Usage: ``python bench/replication_faults.py
[--faults 1000] [--seed 7] [--verbose]``; figures go into docs/performance.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kbroker.testing.fault_campaign import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    if not any(a.startswith("--faults") for a in args):
        args = ["--faults", "1000", *args]
    sys.exit(main(args))
