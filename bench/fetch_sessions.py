#!/usr/bin/env python3
"""What incremental fetch sessions (KIP-227) save a broker serving a consumer of many partitions (issue 13).

The Java consumer (kafka-clients 4.3.0, compat_tests/java/KafkaDriver.java, which opens fetch sessions) is
assigned every partition of a ``--partitions`` topic (default 1,000) and long-polls them with the client's
defaults (``fetch.max.wait.ms`` 500, ``fetch.min.bytes`` 1) while a producer trickles ``--rate`` records/s
(default 200) over the partitions for ``--seconds``. The broker runs once with fetch sessions (the default
``max.incremental.fetch.session.cache.slots``) and once with ``max.incremental.fetch.session.cache.slots=0``,
where every fetch names, and every response carries, all the partitions; alternating, ``--rounds`` times.
Reported: the broker's cores (utime + stime from /proc) and its CPU per record delivered, medians.

Usage: ``python bench/fetch_sessions.py [--partitions 1000] [--rate 200] [--seconds 10] [--rounds 3]`` (needs
java and javac; the jars come from scripts/fetch_jars.sh). Not a test: nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.run import cpu_seconds  # noqa: E402
from compat_tests.clients import JavaDriver  # noqa: E402
from compat_tests.conftest import CLASSES_DIR, JARS_DIR, compile_driver, ensure_jars  # noqa: E402
from kbroker.testing import KbrokerProcess  # noqa: E402

def run_once(driver: JavaDriver, sessions: bool, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="kbroker-sessions-") as root:
        broker = KbrokerProcess(root, log_level="WARNING", overrides={} if sessions else {
            "max.incremental.fetch.session.cache.slots": "0"})
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("wide", args.partitions, 1)])["wide"].result(60)
            time.sleep(1.0)
            total = int(args.rate * args.seconds)
            consumer = driver.popen(["consume", "--bootstrap", broker.bootstrap, "--topic", "wide",
                                     "--expect", str(total), "--timeout-ms", str(int((args.seconds + 60) * 1000))])
            assert consumer.stdout is not None
            lines: list[str] = []
            ready = threading.Event()

            def read() -> None:
                for line in consumer.stdout:  # type: ignore[union-attr]
                    lines.append(line)
                    if '"ready"' in line:
                        ready.set()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            if not ready.wait(60):
                raise RuntimeError("the Java consumer did not get ready")
            time.sleep(2.0)  # its first full fetch is answered and the session (if any) is open
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
            cpu0, t0 = cpu_seconds(broker.pid), time.monotonic()
            nxt = t0
            for i in range(total):
                producer.produce("wide", b"x" * 100, partition=(i * 7919) % args.partitions)
                producer.poll(0)
                nxt += 1.0 / args.rate
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            producer.flush(30)
            consumer.wait(120)
            took, cpu = time.monotonic() - t0, cpu_seconds(broker.pid) - cpu0
            reader.join(10)
            events = [json.loads(x) for x in lines if x.startswith("{")]
            got = sum(1 for e in events if e.get("event") == "record")
            if got != total:
                raise RuntimeError(f"the consumer read {got} of {total} records")
        finally:
            broker.stop()
    return {"broker_cores": cpu / took, "broker_us_per_record": cpu / total * 1e6, "seconds": took}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=200.0, help="records/s produced")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        print("needs java and javac (openjdk-17-jdk-headless)", file=sys.stderr)
        return 2
    ensure_jars()
    compile_driver(javac)
    driver = JavaDriver(java, os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")]))
    runs: dict[str, list[dict[str, float]]] = {"sessions": [], "no sessions": []}
    for r in range(args.rounds):
        for name in runs:
            res = run_once(driver, name == "sessions", args)
            runs[name].append(res)
            print(f"round {r + 1} {name}:", {k: round(v, 3) for k, v in res.items()}, flush=True)
    med = {name: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for name, rs in runs.items()}
    for name, values in med.items():
        print(f"median {name}:", {k: round(v, 3) for k, v in values.items()})
    print("sessions / no sessions: broker cores x"
          f"{med['sessions']['broker_cores'] / med['no sessions']['broker_cores']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
