#!/usr/bin/env python3
"""TLS against plaintext on one kbroker node (issue 11): produce and consume MB/s and broker CPU seconds per GB
of payload, confluent-kafka clients, the same broker serving a PLAINTEXT and an SSL listener (RSA 2048
certificates from :mod:`kbroker.testing.certs`, TLS 1.3, a client certificate required). Rounds alternate
plaintext and TLS; each round uses fresh topics. Consume over plaintext uses sendfile; over TLS the segment
bytes are read and encrypted in the broker (no sendfile, as in Kafka).

Usage: ``.venv/bin/python bench/tls.py [--rounds 3] [--count 200000] [--size 1024]``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import bench_consume, bench_produce, create_topic, machine  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402
from kbroker.testing.certs import CertificateAuthority  # noqa: E402
from kbroker.testing.plugin import free_port  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json", help="write the results as JSON to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-tls-") as tmp:
        ca = CertificateAuthority(Path(tmp) / "ca")
        server, client = ca.issue("broker"), ca.issue("bench-client")
        broker = KbrokerProcess(Path(tmp) / "broker")
        ssl_port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}"
        broker.overrides.update({"listeners": listeners, "advertised.listeners": listeners,
                                 **server.pem_properties(), **ca.truststore_properties(),
                                 "ssl.client.auth": "required"})
        broker.start()
        modes = {
            "plaintext": (broker.bootstrap, {}),
            "tls": (f"127.0.0.1:{ssl_port}", {"security.protocol": "ssl", "ssl.ca.location": str(ca.pem_path),
                                              "ssl.certificate.location": str(client.cert_path),
                                              "ssl.key.location": str(client.key_path)}),
        }
        results: dict[str, dict[str, list[dict]]] = {m: {"produce": [], "consume": []} for m in modes}
        try:
            for r in range(args.rounds):
                for mode, (bootstrap, conf) in modes.items():
                    topic = f"bench-{mode}-{r}"
                    create_topic(bootstrap, topic, conf=conf)
                    p = bench_produce(bootstrap, broker.pid, topic, args.count, args.size, "1", "none", conf)
                    c = bench_consume(bootstrap, broker.pid, topic, args.count, args.size, conf)
                    results[mode]["produce"].append(p)
                    results[mode]["consume"].append(c)
                    print(f"round {r} {mode:9s} produce {p['MB/s']:7.1f} MB/s {p['broker_cpu_s_per_GB']:5.2f} s/GB   "
                          f"consume {c['MB/s']:7.1f} MB/s {c['broker_cpu_s_per_GB']:5.2f} s/GB", flush=True)
        finally:
            broker.stop()
    print(f"\nmachine: {machine()}\nmedians of {args.rounds} rounds, {args.count} x {args.size} B records:")
    summary = {}
    for mode, cases in results.items():
        for case, runs in cases.items():
            mbs = statistics.median(x["MB/s"] for x in runs)
            cpu = statistics.median(x["broker_cpu_s_per_GB"] for x in runs)
            summary[f"{mode} {case}"] = {"MB/s": round(mbs, 1), "broker_cpu_s_per_GB": round(cpu, 2)}
            print(f"  {mode:9s} {case:7s} {mbs:7.1f} MB/s  {cpu:5.2f} broker CPU s/GB")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "summary": summary, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
