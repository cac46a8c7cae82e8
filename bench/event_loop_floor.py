#!/usr/bin/env python3
"""The floor under kbroker's cost per request (issue 13): what a server that does nothing but answer costs.

A request/response ping-pong over loopback TCP, one request in flight (as the ``single`` case of
``bench/request_cost.py``: a producer with ``linger.ms=0`` that waits for each acknowledgement), against three
servers that each answer a length-prefixed frame with a 50-byte frame and do nothing else:

* ``uvloop``: an ``asyncio.Protocol`` on uvloop (kbroker's network layer without any of kbroker: a request is a
  ``data_received`` callback and one ``transport.write``);
* ``uvloop-task``: the same with kbroker's structure (frames put on an ``asyncio.Queue`` that a per-connection
  task drains, one ``transport.write`` per response);
* ``blocking``: a plain thread doing ``recv`` / ``send`` on a blocking socket (no event loop at all: the cost of
  the two system calls and loopback TCP).

The server runs in its own process; its CPU (utime + stime from /proc) per request is printed. The client is
a plain Python socket loop in this process. Not a test: nothing asserts on speed.

Usage: ``python bench/event_loop_floor.py [--requests 20000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.run import cpu_seconds  # noqa: E402
from kbroker.testing.plugin import free_port  # noqa: E402

REQUEST = b"\x00" * 150  # about a one-record Produce request of 100 B
RESPONSE = struct.pack(">i", 50) + b"\x00" * 50

SERVER = r"""
import asyncio, socket, struct, sys
kind, port = sys.argv[1], int(sys.argv[2])
RESPONSE = struct.pack(">i", 50) + b"\x00" * 50

def frames(buf):
    out = []
    while len(buf) >= 4:
        n = struct.unpack_from(">i", buf)[0]
        if len(buf) < 4 + n:
            break
        out.append(bytes(buf[4:4 + n]))
        del buf[:4 + n]
    return out

if kind == "blocking":
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(); print("ready", flush=True)
    conn, _ = srv.accept(); conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    while True:
        data = conn.recv(65536)
        if not data:
            break
        buf += data
        for _ in frames(buf):
            conn.sendall(RESPONSE)
    sys.exit(0)

import uvloop

class Direct(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, bytearray()
        t.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def data_received(self, data):
        self.buf += data
        for _ in frames(self.buf):
            self.t.write(RESPONSE)

class Queued(Direct):
    def connection_made(self, t):
        super().connection_made(t)
        self.q = asyncio.Queue()
        asyncio.get_running_loop().create_task(self.run())
    def data_received(self, data):
        self.buf += data
        for f in frames(self.buf):
            self.q.put_nowait(f)
    async def run(self):
        while True:
            await self.q.get()
            self.t.write(RESPONSE)

async def main():
    loop = asyncio.get_running_loop()
    await loop.create_server(Direct if kind == "uvloop" else Queued, "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()

uvloop.run(main())
"""


def run(kind: str, requests: int) -> float:
    """Server CPU microseconds per request/response for one server kind."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, kind, str(port)], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = struct.pack(">i", len(REQUEST)) + REQUEST
        for _ in range(1000):  # warm-up
            sock.sendall(frame)
            sock.recv(4096)
        cpu0 = cpu_seconds(server.pid)
        for _ in range(requests):
            sock.sendall(frame)
            got = sock.recv(4096)
            while len(got) < len(RESPONSE):
                got += sock.recv(4096)
        cpu = cpu_seconds(server.pid) - cpu0
        sock.close()
        return cpu / requests * 1e6
    finally:
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[float]] = {"blocking": [], "uvloop": [], "uvloop-task": []}
    for rnd in range(args.rounds):
        for kind in results:
            us = run(kind, args.requests)
            results[kind].append(us)
            print(f"round {rnd + 1} {kind}: {us:.1f} us of server CPU per request", flush=True)
    for kind, values in results.items():
        print(f"median {kind}: {statistics.median(values):.1f} us per request")


if __name__ == "__main__":
    main()
