"""Network partitions between the processes of a test cluster on one machine's loopback, with iptables.

Every node runs with a group id of its own (``Popen(group=...)``: a root process keeps its file access, only its
group changes), and a cut from node A to node B is one rule: drop what A's sockets send to B's listening ports::

    iptables -A KBROKER_TEST_<pid>_<n> -p tcp -d 127.0.0.0/8 --dport <B's port> -m owner --gid-owner <A's gid> -j DROP

:meth:`LoopbackFirewall.partition` adds that rule for both directions of every listening port of the two nodes, so
each TCP connection between them loses its requests (those B makes to A as well: B's connections to A lose theirs),
new connections hang in SYN-SENT, and neither side sees a reset: a network partition as TCP sees it, silence.
Processes of other groups (the test's clients, Kafka's tools, a TcpProxy in the test process) still reach every
node. The source address does not tell the nodes apart: a socket that does not bind before it connects to
127.0.0.x sends from 127.0.0.1, which is what Kafka's and kbroker's inter-node clients do; the socket's owner does.

The rules live in one chain per firewall (``KBROKER_TEST_<pid>_<n>``, jumped to from OUTPUT: on loopback every packet
passes OUTPUT), so :meth:`heal` is one flush and :meth:`close` one flush, unlink and delete. Chains of processes that
died without closing theirs are removed when the next firewall is made. Group ids are taken from the port each node
was given (``GID_BASE`` + port), so the nodes of clusters run side by side (pytest-xdist workers) never share one.

Needs root and the ``iptables`` command (Debian's ``iptables``, nf_tables or legacy backend alike; ``./dev.sh
test`` installs it); :class:`FirewallUnavailable` says what is missing.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import subprocess
import threading
from typing import Iterable

__all__ = ["GID_BASE", "FirewallUnavailable", "LoopbackFirewall", "node_gid"]

#: group ids of test nodes: GID_BASE + the node's first port (far above any group a Debian system hands out)
GID_BASE = 1_500_000_000
CHAIN_PREFIX = "KBROKER_TEST_"
_counter = itertools.count(1)
_lock = threading.Lock()


class FirewallUnavailable(RuntimeError):
    """iptables cannot be used here (not installed, not root, or the kernel refuses); the message says which."""


def node_gid(port: int) -> int:
    """The group id a node listening first on ``port`` runs with."""
    return GID_BASE + port


def _iptables() -> str:
    path = shutil.which("iptables") or next((p for p in ("/usr/sbin/iptables", "/sbin/iptables")
                                             if os.access(p, os.X_OK)), None)
    if path is None:
        raise FirewallUnavailable("the cluster harness cuts nodes off with iptables, and there is no iptables "
                                  "command: install Debian's iptables (apt-get install iptables; ./dev.sh test does)")
    if os.geteuid() != 0:
        raise FirewallUnavailable("the cluster harness cuts nodes off with iptables rules, which needs root "
                                  f"(running as uid {os.geteuid()})")
    return path


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """One iptables command (``-w``: wait for the legacy backend's lock rather than fail when another test process
    holds it); a failure is retried a few times (nf_tables answers EAGAIN when two commits race)."""
    cmd = [_iptables(), "-w", "5", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    for _ in range(5):
        if out.returncode == 0 or not check or "temporarily unavailable" not in out.stderr.lower():
            break
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise FirewallUnavailable(f"{' '.join(cmd)} failed (exit {out.returncode}): {out.stderr.strip()}")
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drop_chain(chain: str) -> None:
    _run(["-D", "OUTPUT", "-j", chain], check=False)
    _run(["-F", chain], check=False)
    _run(["-X", chain], check=False)


def remove_stale_chains() -> list[str]:
    """Remove the chains of test processes that are gone (killed before they could clean up); their names."""
    listing = _run(["-S", "OUTPUT"], check=False).stdout + _run(["-S"], check=False).stdout
    gone = []
    for chain in sorted(set(re.findall(rf"{CHAIN_PREFIX}(\d+)_\d+", listing))):
        pid = int(chain)
        if pid != os.getpid() and not _pid_alive(pid):
            for name in sorted(set(re.findall(rf"{CHAIN_PREFIX}{pid}_\d+", listing))):
                _drop_chain(name)
                gone.append(name)
    return gone


class LoopbackFirewall:
    """The partitions of one test cluster: nodes are registered with their group id and listening ports
    (:meth:`add_node`); :meth:`partition` / :meth:`isolate` add DROP rules, :meth:`heal` removes them all,
    :meth:`close` removes the chain (also run at interpreter exit). Raises :class:`FirewallUnavailable` when made
    where iptables cannot be used."""

    def __init__(self) -> None:
        _iptables()
        with _lock:
            remove_stale_chains()
            self.chain = f"{CHAIN_PREFIX}{os.getpid()}_{next(_counter)}"
            _drop_chain(self.chain)  # a leftover of an earlier process with this pid
            _run(["-N", self.chain])
            _run(["-I", "OUTPUT", "-j", self.chain])
        self.gids: dict[int, int] = {}
        self.ports: dict[int, list[int]] = {}
        #: the directed cuts in force, ``(from node, to node)``
        self.cuts: set[tuple[int, int]] = set()
        self.closed = False
        atexit.register(self.close)

    def add_node(self, node_id: int, gid: int, ports: Iterable[int]) -> None:
        """Node ``node_id`` runs with group ``gid`` and listens on ``ports`` (loopback)."""
        self.gids[node_id] = gid
        self.ports[node_id] = sorted(set(ports))

    def _rules(self, a: int, b: int) -> list[list[str]]:
        return [["-p", "tcp", "-d", "127.0.0.0/8", "--dport", str(port), "-m", "owner", "--gid-owner",
                 str(self.gids[a]), "-j", "DROP"] for port in self.ports[b]]

    def cut(self, a: int, b: int) -> None:
        """Drop what node ``a`` sends to node ``b``'s ports (one direction) until :meth:`heal`."""
        if (a, b) in self.cuts or a == b:
            return
        for rule in self._rules(a, b):
            _run(["-A", self.chain, *rule])
        self.cuts.add((a, b))

    def partition(self, a: int, b: int) -> None:
        """Silence every connection between nodes ``a`` and ``b``, both ways, until :meth:`heal`."""
        self.cut(a, b)
        self.cut(b, a)

    def isolate(self, node_id: int) -> None:
        """Partition ``node_id`` from every other node (clients still reach it)."""
        for other in self.gids:
            if other != node_id:
                self.partition(node_id, other)

    def heal(self) -> None:
        """Remove every cut."""
        if self.cuts and not self.closed:
            _run(["-F", self.chain])
        self.cuts.clear()

    def rules(self) -> str:
        """The chain as ``iptables -S`` lists it (for failure messages)."""
        return _run(["-S", self.chain], check=False).stdout

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.cuts.clear()
        _drop_chain(self.chain)
        atexit.unregister(self.close)
