#!/usr/bin/env python3
"""Connection set-up rate with SASL (issue 11): new connections per second and broker CPU per connection on one
kbroker node, for PLAINTEXT, SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (credentials with 4096 iterations, the
minimum Kafka accepts, in the metadata log), each connection doing what a client does before its first real
request: ApiVersions, SaslHandshake and SaslAuthenticate (one round for PLAIN, two for SCRAM), then one Metadata
request, then close.

The clients are ``--clients`` processes, each opening connections one after another with kbroker's own codec client
(:class:`kbroker.cli._wire.Connection`; its SCRAM side derives the salted password once per connection, as
librdkafka and the Java client do). Broker CPU is read from /proc for the broker process only. With two cores the
clients' own CPU (Python, the client half of SCRAM) limits the rate; the broker's CPU per connection is the figure
that carries over.

Usage: ``.venv/bin/python bench/sasl_connect.py [--seconds 10] [--clients 2]``. Not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import machine  # noqa: E402

from kbroker.testing import KbrokerProcess  # noqa: E402
from kbroker.testing.plugin import free_port  # noqa: E402

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_bench="bench-secret";')
MODES = ("PLAINTEXT", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client(mode: str, host: str, port: int, seconds: float, out: multiprocessing.Queue) -> None:
    from kbroker.cli._common import WireSecurity
    from kbroker.cli._wire import Connection
    from kbroker.protocol.messages import MetadataRequest
    from kbroker.security.sasl import SaslClientConfig

    security = None if mode == "PLAINTEXT" else WireSecurity(
        sasl=SaslClientConfig(mechanism=mode, username="bench", password="bench-secret"))
    done, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = Connection(host, port, 10, "bench-sasl", security)
        conn.send(MetadataRequest(topics=[]))
        conn.close()
        done += 1
    out.put(done)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", type=int, default=2)
    args = ap.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="kbroker-bench-sasl-") as tmp:
        broker = KbrokerProcess(Path(tmp) / "broker")
        sasl_port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SASL://127.0.0.1:{sasl_port}"
        broker.overrides.update({
            "listeners": listeners, "advertised.listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl.plain.sasl.jaas.config": PLAIN_JAAS,
            "max.connections.per.ip": "100000", "max.connection.creation.rate": "1000000"})
        broker.start()
        try:
            from confluent_kafka.admin import (
                AdminClient,
                ScramCredentialInfo,
                ScramMechanism,
                UserScramCredentialUpsertion,
            )

            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one alteration per request
                upsert = UserScramCredentialUpsertion("bench", ScramCredentialInfo(m, 4096), b"bench-secret")
                for f in admin.alter_user_scram_credentials([upsert]).values():
                    f.result(20)
            print(f"{'mode':<14} {'connections/s':>14} {'broker CPU us/connection':>26}")
            for mode in MODES:
                port = broker.port if mode == "PLAINTEXT" else sasl_port
                q: multiprocessing.Queue = multiprocessing.Queue()
                procs = [multiprocessing.Process(target=client, args=(mode, "127.0.0.1", port, args.seconds, q))
                         for _ in range(args.clients)]
                cpu0, t0 = cpu_seconds(broker.pid), time.monotonic()
                for p in procs:
                    p.start()
                total = sum(q.get(timeout=args.seconds + 60) for _ in procs)
                for p in procs:
                    p.join(30)
                wall, cpu = time.monotonic() - t0, cpu_seconds(broker.pid) - cpu0
                print(f"{mode:<14} {total / wall:>14.0f} {cpu / total * 1e6:>26.0f}", flush=True)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
