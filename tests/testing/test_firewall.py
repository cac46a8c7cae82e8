"""kbroker.testing.firewall: a cut really drops what one process sends to another's port on loopback, leaves other
processes alone, heals, and leaves no iptables chain behind."""

from __future__ import annotations

import socket
import subprocess
import sys

from kbroker.testing.firewall import LoopbackFirewall, _run, node_gid

#: a child that connects to 127.0.0.1:PORT and prints "connected" or the error's class name
CONNECT = ("import socket, sys\n"
           "s = socket.socket(); s.settimeout(1.5)\n"
           "try:\n    s.connect(('127.0.0.1', int(sys.argv[1]))); print('connected')\n"
           "except OSError as e:\n    print(type(e).__name__)\n")


def connect_as(gid: int, port: int) -> str:
    out = subprocess.run([sys.executable, "-c", CONNECT, str(port)], capture_output=True, text=True, timeout=30,
                         group=gid)
    return out.stdout.strip()


def test_a_cut_drops_one_group_to_one_port_until_healed():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    fw = LoopbackFirewall()
    try:
        a, b = node_gid(1), node_gid(port)
        fw.add_node(1, a, [1])
        fw.add_node(2, b, [port])
        assert connect_as(a, port) == "connected"
        fw.partition(1, 2)
        assert f"--gid-owner {a} -j DROP" in fw.rules()
        assert connect_as(a, port) == "TimeoutError"  # dropped: silence, no reset
        assert connect_as(b, port) == "connected"  # the node itself, and any other group, still reach it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # this process (a test's clients)
        fw.heal()
        assert connect_as(a, port) == "connected"
    finally:
        fw.close()
        server.close()
    assert fw.chain not in _run(["-S"]).stdout
