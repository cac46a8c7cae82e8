#!/usr/bin/env python3
"""Where a kbroker process spends its CPU in one of ``bench/request_cost.py``'s cases (issue 13, item 1).

Starts a kbroker subprocess, attaches py-spy to it for the length of the case, runs the case with
confluent-kafka clients, and writes py-spy's raw stacks (``profile.raw``, the folded format flame-graph tools
read) and, with ``--svg``, an SVG flame graph (``profile.svg``) into ``--out``; then prints the frames with the largest share of
the samples, by their own time and with their callees. Only samples where the broker was running count (py-spy
leaves idle threads out), so the shares are of the broker's busy time.

``./dev.sh profile [--case single|many|latency] [--native] [--svg] [--rate 200] [--out profile-out]`` (py-spy comes with
the ``bench`` extra; attaching needs ptrace, i.e. root or ``kernel.yama.ptrace_scope=0``). ``--native`` adds the
C frames (uvloop, the interpreter, libc's system calls). Not a test: nothing asserts on anything.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import request_cost  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402


def summarize(raw: Path, top: int) -> str:
    """The ``top`` frames by own samples and by inclusive samples, as percentages of all samples."""
    total = 0
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "no samples (was py-spy allowed to attach?)"
    lines = [f"{total} samples"]
    lines += ["own time:"] + [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["with callees:"] + [f"  {100 * n / total:5.1f}%  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["single", "many", "latency"], default="latency")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the many and latency cases")
    ap.add_argument("--requests", type=int, default=5000, help="requests of the single case")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="include C frames (uvloop, libc)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--svg", action="store_true", help="also record an SVG flame graph (a second py-spy, which "
                                                     "doubles the sampling's cost)")
    ap.add_argument("--out", default="profile-out", help="directory for profile.raw and profile.svg")
    args = ap.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kbroker-profile-") as root:
        broker = KbrokerProcess(root, log_level="WARNING")
        broker.start()
        try:
            common = [py_spy, "record", "--pid", str(broker.pid), "--rate", str(args.rate)]
            # --nonblocking (no pause of the broker per sample) cannot unwind C frames
            common.append("--native" if args.native else "--nonblocking")
            spies = [subprocess.Popen(common + ["--format", fmt, "--output", str(out / name)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for fmt, name in (("raw", "profile.raw"), ("flamegraph", "profile.svg"))[:2 if args.svg else 1]]
            time.sleep(1.0)  # py-spy attached
            if args.case == "single":
                got = request_cost.single(broker, args.requests)
            elif args.case == "many":
                got = request_cost.many(broker, 50, 10, args.seconds, 5, 0.0)
            else:
                got = request_cost.latency(broker, 1000, args.seconds)
            print(f"{args.case}:", {k: round(v, 3) for k, v in got.items()})
            for spy in spies:
                spy.send_signal(2)  # SIGINT: py-spy writes what it has and exits
            for spy in spies:
                try:
                    _, err = spy.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    spy.kill()
                    _, err = spy.communicate()
                if spy.returncode not in (0, -2):
                    print(f"py-spy exited {spy.returncode}: {err.decode(errors='replace')[-2000:]}", file=sys.stderr)
        finally:
            broker.stop()
    if not (out / "profile.raw").exists():
        print("py-spy wrote no profile", file=sys.stderr)
        return 1
    print(summarize(out / "profile.raw", args.top))
    if args.svg:
        print(f"flame graph: {out / 'profile.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
