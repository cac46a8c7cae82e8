"""Several kbroker processes on 127.0.0.1 forming one cluster with a KRaft-style metadata quorum.

``KbrokerCluster(root, nodes=3)`` starts combined broker+controller nodes (``process.roles=broker,controller``)
with ids 1..3, each with a client listener (PLAINTEXT) and a controller listener (CONTROLLER) on free ports, one
cluster id, and ``controller.quorum.voters`` naming every node. ``KbrokerCluster(root, nodes=3, brokers=3)``
separates the roles as production clusters do: nodes 1..3 are controllers only (``process.roles=controller``,
a CONTROLLER listener and nothing else), nodes 4..6 brokers only (``process.roles=broker``, a PLAINTEXT
listener; they follow the metadata log as observers and register with the active controller).
Nodes are :class:`KbrokerProcess` objects, so each can be killed (``kill -9``), stopped, paused
(SIGSTOP/SIGCONT) and restarted on its own. With ``link_proxies=True`` every node reaches every voter through
its own :class:`~kbroker.testing.proxy.TcpProxy` (one per direction of each link), and every broker reaches
every other broker's inter-broker listener (replica fetches) through one too, so a test can
:meth:`~KbrokerCluster.partition` two nodes, :meth:`~KbrokerCluster.isolate` one, and :meth:`~KbrokerCluster.heal`.
The proxies only cut what a node sends to the addresses it was configured with: Kafka's voters fetch from the endpoint
the leader announces (its real CONTROLLER listener, KIP-853), so they cannot cut a Kafka node off. With
``firewall=True`` the same three calls add and remove iptables DROP rules instead (:mod:`kbroker.testing.firewall`:
each node runs with a group id of its own, and what one node's sockets send to the other's listening ports is
dropped, both ways; the test's clients still reach every node), which cuts kbroker's and Kafka's nodes alike; it
needs root and Debian's ``iptables``::

    with KbrokerCluster(tmp_path, nodes=3, brokers=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})   # the brokers
        cluster.kill(cluster.controller_id())
        cluster.restart(5)

With ``dynamic_quorum=True`` (and ``brokers``) the quorum is dynamic (KIP-853): no ``controller.quorum.voters``,
every node has ``controller.quorum.bootstrap.servers`` naming the first controllers; controller 1 is formatted with
``kbroker-storage format --standalone`` (the only voter); the other controllers are formatted with
``--no-initial-controllers`` and follow as observers until :meth:`KbrokerCluster.add_voter` (``kbroker-metadata-quorum
add-controller``) makes them voters.

Under the ``kafka`` test target (``KBROKER_TEST_TARGET=kafka``, or ``target="kafka"``) the same cluster is made of
Apache Kafka 4.3.1 nodes (:class:`~kbroker.testing.kafka.KafkaProcess`, storage formatted by Kafka's StorageTool), with
the same hooks: the reference that a cluster test's expectations are checked against.

Every wait is bounded (``timeout`` seconds) and raises on expiry.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from kbroker.testing.plugin import (BrokerStartError, KbrokerProcess, api_versions_probe, free_port, process_class,
                                    tcp_connectable)

__all__ = ["ControllerProcess", "KbrokerCluster", "wait_until"]


def _cluster_id() -> str:
    """A random cluster id as ``kbroker-storage random-uuid`` makes it (never starting with ``-``, which a
    command line would take for an option)."""
    from kbroker.controller.uuids import random_uuid, uuid_to_str

    return uuid_to_str(random_uuid())


class ControllerProcess(KbrokerProcess):
    """A controller-only node (``process.roles=controller``): its one listener is the controller listener
    (``port``); it is ready once that listener answers ApiVersions (a quorum needs a majority to do more)."""

    def base_properties(self) -> dict[str, str]:
        props = super().base_properties()
        props.update({"process.roles": "controller", "listeners": f"CONTROLLER://{self.host}:{self.port}"})
        props.pop("advertised.listeners", None)
        return props

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not (tcp_connectable(self.host, self.port, timeout=1.0) and api_versions_probe(self.host, self.port)):
            if not self.is_running():
                raise BrokerStartError(f"controller {self.node_id} exited during startup\n"
                                       f"{self.log_tail(60, since=self._start_offset)}")
            if time.monotonic() > deadline:
                raise BrokerStartError(f"controller {self.node_id} not answering on {self.bootstrap} after "
                                       f"{timeout:.0f}s\n{self.log_tail(60, since=self._start_offset)}")
            time.sleep(0.1)


class KbrokerCluster:
    """``nodes`` voters with ids 1..nodes (combined nodes, or controllers only when ``brokers`` > 0) and
    ``brokers`` broker-only nodes with ids nodes+1..nodes+brokers; see the module docstring. ``overrides`` go to
    every node, ``node_overrides`` (node id -> properties) to one node each."""

    def __init__(self, root: str | os.PathLike[str], nodes: int = 3, overrides: Mapping[str, Any] | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 90.0, brokers: int = 0,
                 link_proxies: bool = False, dynamic_quorum: bool = False,
                 node_overrides: Mapping[int, Mapping[str, Any]] | None = None, target: str | None = None,
                 firewall: bool = False) -> None:
        if dynamic_quorum and (not brokers or link_proxies):
            raise ValueError("dynamic_quorum needs separate brokers and no link proxies")
        #: with ``firewall``: the :class:`~kbroker.testing.firewall.LoopbackFirewall` (iptables rules) that
        #: :meth:`partition` / :meth:`isolate` / :meth:`heal` drive, made at :meth:`start`
        self.firewall_enabled = firewall
        self.firewall: Any = None
        self.dynamic_quorum = dynamic_quorum
        self._formatted = False
        #: the node classes: kbroker's, or Apache Kafka's under the ``kafka`` target
        self.node_class = process_class(target)
        self.kafka = self.node_class.target == "kafka"
        if self.kafka:
            from kbroker.testing.kafka import KafkaControllerProcess  # noqa: PLC0415

            self.controller_class: type[KbrokerProcess] = KafkaControllerProcess
        else:
            self.controller_class = ControllerProcess
        self.root = Path(root)
        self.host = host
        self.cluster_id = _cluster_id()
        self.start_timeout = start_timeout
        ids = list(range(1, nodes + 1))
        #: the voters of the metadata quorum, and the nodes that serve clients
        self.controller_ids = ids
        self.broker_ids = list(range(nodes + 1, nodes + brokers + 1)) if brokers else list(ids)
        self.controller_ports = {i: free_port(host) for i in ids}
        #: with ``link_proxies``: a :class:`~kbroker.testing.proxy.TcpProxy` for every link from a node to a
        #: voter, ``(from node, to voter) -> proxy``; each node reaches the other voters through them only
        self.link_proxies = link_proxies
        self.links: dict[tuple[int, int], Any] = {}
        #: with ``link_proxies``: ``(from broker, to broker) -> proxy`` for broker-to-broker traffic (replica fetches)
        self.replication_links: dict[tuple[int, int], Any] = {}
        self._replication_ports: dict[tuple[int, int], int] = {}
        self._proxy_ports: dict[tuple[int, int], int] = {}
        voters = ",".join(f"{i}@{host}:{p}" for i, p in self.controller_ports.items())
        common = {"controller.listener.names": "CONTROLLER", "controller.quorum.voters": voters,
                  "cluster.id": self.cluster_id}
        if dynamic_quorum:
            common = {"controller.listener.names": "CONTROLLER", "cluster.id": self.cluster_id,
                      "controller.quorum.bootstrap.servers": ",".join(f"{host}:{p}"
                                                                      for p in self.controller_ports.values())}
        extra = {str(k): str(v) for k, v in (overrides or {}).items()}
        self._common = {**common, **extra}
        #: node id -> properties of that node only (``node_overrides``, e.g. ``broker.rack``), over ``overrides``
        own = {i: {str(k): str(v) for k, v in props.items()} for i, props in (node_overrides or {}).items()}
        self.nodes: dict[int, KbrokerProcess] = {}
        for i in ids:
            if brokers:
                self.nodes[i] = self.controller_class(self.root / f"controller{i}", port=self.controller_ports[i],
                                                  node_id=i, overrides={**common, **extra, **own.get(i, {})},
                                                  host=host,
                                                  start_timeout=start_timeout)
                continue
            port = free_port(host)
            props = {
                "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{self.controller_ports[i]}",
                "advertised.listeners": f"PLAINTEXT://{host}:{port}",
                **common, **extra, **own.get(i, {}),
            }
            self.nodes[i] = self.node_class(self.root / f"node{i}", port=port, node_id=i, overrides=props,
                                            host=host, start_timeout=start_timeout, **self._extra(i))
        for i in self.broker_ids if brokers else ():
            port = free_port(host)
            props = {"process.roles": "broker", "listeners": f"PLAINTEXT://{host}:{port}",
                     "advertised.listeners": f"PLAINTEXT://{host}:{port}", **common, **extra, **own.get(i, {})}
            self.nodes[i] = self.node_class(self.root / f"broker{i}", port=port, node_id=i, overrides=props,
                                            host=host, start_timeout=start_timeout)

    def _extra(self, node_id: int) -> dict[str, Any]:
        """Constructor arguments only Kafka nodes take: a combined node's CONTROLLER listener port."""
        return {"controller_port": self.controller_ports[node_id]} if self.kafka else {}

    @property
    def bootstrap(self) -> str:
        """The brokers' client listeners."""
        return ",".join(self.nodes[i].bootstrap for i in self.broker_ids)

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_running()]

    # ---- lifecycle
    def start(self) -> KbrokerCluster:
        """Start every node at once (none can serve before a majority runs) and wait for each. Nodes already
        running are left alone (``with cluster:`` has started them)."""
        if self.link_proxies:
            self._start_links()
        if self.firewall_enabled:
            self._start_firewall()
        if self.dynamic_quorum and not self._formatted:
            for i in self.controller_ids:
                self.format(i, "--standalone" if i == self.controller_ids[0] else "--no-initial-controllers")
            self._formatted = True
        starting = [n for n in self.nodes.values() if not n.is_running()]
        for n in starting:
            n._spawn()
        for n in starting:
            n.wait_ready(self.start_timeout)
        self.wait_registered()
        return self

    def wait_registered(self, timeout: float | None = None, brokers: list[int] | None = None) -> None:
        """Wait until every running broker lists ``brokers`` (default: the running brokers) in its Metadata
        answer: each has registered and every broker's image has caught up with that."""
        want = set(brokers if brokers is not None else [i for i in self.broker_ids if self.nodes[i].is_running()])
        deadline = time.monotonic() + (timeout or self.start_timeout)
        seen: dict[int, set[int]] = {}
        while time.monotonic() < deadline:
            for i in self.broker_ids:
                if self.nodes[i].is_running():
                    try:
                        seen[i] = metadata_brokers(self.host, self.nodes[i].port)
                    except (OSError, ValueError):
                        seen[i] = set()
            if all(seen.get(i) == want for i in want):
                return
            time.sleep(0.1)
        raise TimeoutError(f"brokers {sorted(want)} not all registered within the timeout (each saw {seen})")

    def properties_file(self, node_id: int) -> Path:
        """Every property of node ``node_id`` (its config file plus the overrides) in one file, as
        ``kbroker-storage --config`` and ``kbroker-metadata-quorum --command-config`` take it."""
        node = self.nodes[node_id]
        path = self.root / f"node{node_id}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in {**node.base_properties(), **node.overrides}.items()))
        return path

    def format(self, node_id: int, *flags: str) -> str:
        """``kbroker-storage format`` (Kafka's StorageTool for Kafka nodes) for node ``node_id`` with this cluster's
        id; returns its output."""
        import subprocess
        import sys

        if self.kafka:
            return self.nodes[node_id].format(*flags)  # type: ignore[attr-defined]

        out = subprocess.run([sys.executable, "-m", "kbroker.cli.storage", "format", "-t", self.cluster_id, "-c",
                              str(self.properties_file(node_id)), *flags], capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"kbroker-storage format of node {node_id} failed: {out.stderr.strip()}")
        return out.stdout

    def add_voter(self, node_id: int, via: int | None = None) -> str:
        """``kbroker-metadata-quorum add-controller`` for controller ``node_id`` (through controller ``via``, by
        default the first running one); returns its output. Raises RuntimeError when the tool fails."""
        import subprocess
        import sys

        via = via if via is not None else next(i for i in self.controller_ids if self.nodes[i].is_running())
        if self.kafka:
            from kbroker.testing.kafka import run_kafka_tool  # noqa: PLC0415

            self.nodes[node_id].write_config()
            out = run_kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--command-config",
                                 str(self.nodes[node_id].config_path), "--bootstrap-controller",
                                 self.nodes[via].bootstrap, "add-controller", timeout=60)
            if out.returncode != 0:
                raise RuntimeError(f"add-controller {node_id} failed: {out.stderr.strip()}")
            return out.stdout
        out = subprocess.run([sys.executable, "-m", "kbroker.cli.metadata_quorum", "--command-config",
                              str(self.properties_file(node_id)), "--bootstrap-controller",
                              self.nodes[via].bootstrap, "add-controller"], capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"add-controller {node_id} failed: {out.stderr.strip()}")
        return out.stdout

    def add_controller(self, node_id: int) -> KbrokerProcess:
        """Start a new controller-only node ``node_id`` that knows the cluster's first voters
        (``controller.quorum.voters``) but is not one: it follows the metadata log as an observer until
        ``kbroker-metadata-quorum add-controller`` makes it a voter (KIP-853). Returns the running process; its
        ``config_path`` is what ``--command-config`` takes."""
        if node_id in self.nodes:
            raise ValueError(f"node {node_id} exists")
        port = free_port(self.host)
        self.controller_ports[node_id] = port
        node = self.controller_class(self.root / f"controller{node_id}", port=port, node_id=node_id,
                                     overrides=dict(self._common), host=self.host, start_timeout=self.start_timeout)
        self.nodes[node_id] = node
        self.controller_ids.append(node_id)
        self._firewall_node(node_id)
        if self.dynamic_quorum:
            self.format(node_id, "--no-initial-controllers")
        node.start()
        return node

    def add_broker(self, node_id: int) -> KbrokerProcess:
        """Start a new broker-only node ``node_id`` (``process.roles=broker``) that joins the running cluster: it
        registers with the controller quorum and hosts nothing until partitions are assigned or reassigned to
        it. Returns the running process once every running broker lists it."""
        if node_id in self.nodes:
            raise ValueError(f"node {node_id} exists")
        if self.link_proxies:
            raise ValueError("add_broker does not set up link proxies for the new broker")
        port = free_port(self.host)
        props = {"process.roles": "broker", "listeners": f"PLAINTEXT://{self.host}:{port}",
                 "advertised.listeners": f"PLAINTEXT://{self.host}:{port}", **self._common}
        node = self.node_class(self.root / f"broker{node_id}", port=port, node_id=node_id, overrides=props,
                               host=self.host, start_timeout=self.start_timeout)
        self.nodes[node_id] = node
        self.broker_ids.append(node_id)
        self._firewall_node(node_id)
        node.start()
        self.wait_registered()
        return node

    def restart(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.is_running():
            n.stop()
        n.start()

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def pause(self, node_id: int) -> None:
        os.killpg(self.nodes[node_id].pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.killpg(self.nodes[node_id].pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every node (SIGTERM): brokers first, then the quorum's followers, the leader last, so each
        stopping broker finds an active controller for its controlled shutdown. Partitions made with ``firewall``
        are healed first and its iptables chain removed at the end."""
        if self.firewall is not None:
            self.firewall.heal()
        leader = -1
        try:
            leader = self.controller_id(timeout=2.0)
        except TimeoutError:
            pass
        order = [i for i in self.nodes if i not in self.controller_ids]
        order += [i for i in self.controller_ids if i != leader] + [i for i in self.controller_ids if i == leader]
        for i in order:
            if self.nodes[i].is_running():
                self.nodes[i].stop()
        for proxy in [*self.links.values(), *self.replication_links.values()]:
            proxy.stop()
        self.links.clear()
        self.replication_links.clear()
        if self.firewall is not None:
            self.firewall.close()
            self.firewall = None

    # ---- network faults (``link_proxies=True``)
    def _start_links(self) -> None:
        from kbroker.testing.proxy import TcpProxy

        for i in self.nodes:
            for j in self.controller_ids:
                if i != j and (i, j) not in self.links:
                    self.links[(i, j)] = TcpProxy(self.host, self.controller_ports[j], listen_host=self.host).start()
            voters = ",".join(
                f"{j}@{self.host}:{self.controller_ports[j] if j == i else self.links[(i, j)].port}"
                for j in self.controller_ids)
            self.nodes[i].overrides["controller.quorum.voters"] = voters
        self._start_replication_links()

    def _start_replication_links(self) -> None:
        """Broker-to-broker traffic (replica fetches, transaction verification) through a proxy per direction of each
        link as well: every broker ``m`` gets one more listener per broker ``k``, ``FROM<k>``, advertised at the
        proxy that carries ``k``'s connections to ``m`` (``m``'s own is direct), and uses ``FROM<m>`` as its
        ``inter.broker.listener.name`` (Kafka lets each broker name its own, as long as every broker has it)."""
        from kbroker.testing.proxy import TcpProxy

        brokers = [b for b in self.broker_ids]
        if len(brokers) < 2:
            return
        if not self._replication_ports:
            self._replication_ports = {(m, k): free_port(self.host) for m in brokers for k in brokers}
            self._proxy_ports = {(k, m): free_port(self.host) for m in brokers for k in brokers if k != m}
            protocols = ",".join(f"FROM{k}:PLAINTEXT" for k in brokers)
            for m in brokers:
                node = self.nodes[m]
                node.overrides["listeners"] += "".join(
                    f",FROM{k}://{self.host}:{self._replication_ports[(m, k)]}" for k in brokers)
                node.overrides["advertised.listeners"] += "".join(
                    f",FROM{k}://{self.host}:"
                    f"{self._replication_ports[(m, k)] if k == m else self._proxy_ports[(k, m)]}" for k in brokers)
                node.overrides["inter.broker.listener.name"] = f"FROM{m}"
                node.overrides["listener.security.protocol.map"] = (
                    "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT," + protocols)
        for (k, m), port in self._proxy_ports.items():
            if (k, m) not in self.replication_links:
                self.replication_links[(k, m)] = TcpProxy(self.host, self._replication_ports[(m, k)],
                                                          listen_host=self.host, listen_port=port).start()

    def _start_firewall(self) -> None:
        """The iptables chain of this cluster, and every node's group id and listening ports registered in it."""
        from kbroker.testing.firewall import LoopbackFirewall  # noqa: PLC0415

        if self.firewall is None:
            self.firewall = LoopbackFirewall()
        for i in self.nodes:
            self._firewall_node(i)

    def _firewall_node(self, node_id: int) -> None:
        """Give node ``node_id`` its own group id (``GID_BASE`` + its port) and register its ports."""
        from kbroker.testing.firewall import node_gid  # noqa: PLC0415

        if not self.firewall_enabled:
            return
        if self.firewall is None:
            self._start_firewall()
            return
        node = self.nodes[node_id]
        node.group = node_gid(node.port)
        props = node.properties() if hasattr(node, "properties") else {**node.base_properties(), **node.overrides}
        ports = {node.port, *(int(p) for p in re.findall(r":(\d+)(?=,|$)", props.get("listeners", "")))}
        if node_id in self.controller_ports:
            ports.add(self.controller_ports[node_id])
        self.firewall.add_node(node_id, node.group, ports)

    def _links_of(self, a: int, b: int) -> list[Any]:
        return [p for links in (self.links, self.replication_links) for key, p in links.items()
                if key in ((a, b), (b, a))]

    def partition(self, a: int, b: int) -> None:
        """Silence the links between nodes ``a`` and ``b`` (both directions; TCP sees no reset) until :meth:`heal`:
        with ``firewall``, iptables drops what each node's processes send to the other's ports; with
        ``link_proxies``, the proxies on their links stop forwarding (both, when both are on)."""
        if self.firewall is not None:
            self.firewall.partition(a, b)
        for p in self._links_of(a, b):
            p.partition()

    def isolate(self, node_id: int) -> None:
        """Partition ``node_id`` from every other node (its clients still reach it)."""
        for other in self.nodes:
            if other != node_id:
                self.partition(node_id, other)

    def heal(self) -> None:
        """Undo every :meth:`partition` / :meth:`isolate`."""
        if self.firewall is not None:
            self.firewall.heal()
        for p in [*self.links.values(), *self.replication_links.values()]:
            p.heal()

    def __enter__(self) -> KbrokerCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- state
    def controller_id(self, timeout: float = 30.0, exclude: int | None = None) -> int:
        """The active controller (the metadata quorum's leader) as every running node reports it in
        DescribeQuorum, once they agree on one that is running (and is not ``exclude``). Metadata's controller id
        does not tell: a cluster node names itself there, as Kafka's brokers name any live broker, and forwards."""
        deadline = time.monotonic() + timeout
        seen: list[int] = []
        while time.monotonic() < deadline:
            seen = []
            # Kafka's controller-only followers answer NOT_LEADER_OR_FOLLOWER without naming the leader; its
            # brokers forward DescribeQuorum to the active controller, so they are the ones asked
            asked = [i for i in self.running() if not self.kafka or i in self.broker_ids]
            for i in asked:
                if not tcp_connectable(self.host, self.nodes[i].port):
                    continue
                try:
                    seen.append(quorum_leader(self.host, self.nodes[i].port))
                except (OSError, ValueError):  # a node starting or stopping
                    seen.append(-1)
            if seen and len(set(seen)) == 1 and seen[0] in self.running() and seen[0] != exclude:
                return seen[0]
            time.sleep(0.2)
        raise TimeoutError(f"the nodes did not agree on a running controller within {timeout} s (saw {seen})")


def ask(host: str, port: int, api_key: int, version: int, request: Any, response_cls: type,
         timeout: float = 5.0) -> Any:
    """One request through kbroker's codec, on a fresh connection; the decoded answer."""
    from kbroker.protocol import codec
    from kbroker.protocol.headers import encode_request_header, response_header_version

    body = encode_request_header(api_key, version, 1, "kbroker-cluster-harness") + codec.encode(request, version)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        frame = _recv_exactly(sock, size)
    # the correlation id, then (flexible versions) the response header's tags
    pos = 4 if response_header_version(api_key, version) == 0 else codec._skip_tagged(frame, 4)
    resp, _ = codec.decode(response_cls, frame, version, pos)
    return resp


def wait_until(cond: Any, timeout: float, what: str) -> Any:
    """Call ``cond()`` every 0.2 s until it returns something true (returned) or ``timeout`` seconds pass
    (AssertionError naming ``what`` and the last value)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def wait_every_node(node_ids: Any, answer: Any, want: Any, timeout: float = 30.0) -> None:
    """Until ``answer(node id)`` equals ``want`` for every node of ``node_ids`` (each node asked every 0.2 s; a node
    that cannot answer, OSError or ValueError, counts as not yet); AssertionError with every node's last answer
    after ``timeout`` seconds. For metadata that every node must serve from its own committed image."""
    deadline = time.monotonic() + timeout
    seen: dict[int, Any] = {}
    while time.monotonic() < deadline:
        seen = {}
        for i in node_ids:
            try:
                seen[i] = answer(i)
            except (OSError, ValueError) as exc:
                seen[i] = repr(exc)
        if all(s == want for s in seen.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"nodes did not all describe {want} within {timeout} s: {seen}")


def quorum_leader(host: str, port: int, timeout: float = 5.0) -> int:
    """The metadata quorum's leader id as the node at ``host:port`` knows it (DescribeQuorum v0 through
    kbroker's codec; a standby answers NOT_LEADER_OR_FOLLOWER and still names the leader). -1: none known."""
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse

    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    resp = ask(host, port, ApiKey.DESCRIBE_QUORUM, 0, req, DescribeQuorumResponse, timeout)
    if resp.error_code or not resp.topics or not resp.topics[0].partitions:
        raise ValueError(f"DescribeQuorum failed: error {resp.error_code}")
    if resp.topics[0].partitions[0].error_code and resp.topics[0].partitions[0].leader_id <= 0:
        raise ValueError(f"DescribeQuorum failed: partition error {resp.topics[0].partitions[0].error_code}")
    return resp.topics[0].partitions[0].leader_id


def metadata_brokers(host: str, port: int, timeout: float = 5.0) -> set[int]:
    """The broker ids that the node at ``host:port`` itself lists in Metadata (v12, no topics): the registered,
    unfenced brokers of its committed metadata image."""
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.messages import MetadataRequest, MetadataResponse

    resp = ask(host, port, ApiKey.METADATA, 12, MetadataRequest(topics=[]), MetadataResponse, timeout)
    return {b.node_id for b in resp.brokers}


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


#: what ``kbroker-dev-cluster ACTION NODE --dir DIR`` can do to one node of a running dev cluster
NODE_ACTIONS = ("kill", "stop", "start", "restart", "pause", "resume")
CONTROL_SOCKET = "control.sock"


def dev_cluster_defaults(brokers: int) -> dict[str, str]:
    """The properties ``kbroker-dev-cluster`` gives every node unless ``--override`` says otherwise: internal
    topics (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``) replicated to min(3, brokers)
    nodes, and from 3 brokers on ``min.insync.replicas`` 2 and ``default.replication.factor`` 3, as a production
    cluster is set up (so acks=all survives one node down and a killed node loses nothing acknowledged)."""
    rf = str(min(3, max(1, brokers)))
    out = {"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
           "share.coordinator.state.topic.replication.factor": rf}
    isr = "2" if brokers >= 3 else "1"
    out.update({"transaction.state.log.min.isr": isr, "share.coordinator.state.topic.min.isr": isr,
                "min.insync.replicas": isr})
    if brokers >= 3:
        out["default.replication.factor"] = "3"
    return out


def _control_client(action: str, node: int | None, root: str) -> int:
    """Send one line to a running ``kbroker-dev-cluster``'s control socket (``<dir>/control.sock``) and print
    its answer; 0 when it says ``ok``."""
    path = Path(root) / CONTROL_SOCKET
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(180)
            sock.connect(str(path))
            sock.sendall(f"{action} {'' if node is None else node}\n".encode())
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
    except OSError as exc:
        print(f"kbroker-dev-cluster: no dev cluster answers at {path} ({exc})", file=sys.stderr)
        return 1
    text = answer.decode().rstrip("\n")
    print(text.replace("\t", "\n"))
    return 0 if text.startswith("ok") else 1


class _DevControl:
    """The running dev cluster's side of the control socket: one request line per connection, ``ACTION NODE``
    (:data:`NODE_ACTIONS`) or ``status``; answers one line, ``ok ...`` or ``error ...`` (lines of a status are
    joined with tabs). Node actions run one at a time."""

    def __init__(self, cluster: KbrokerCluster, path: Path) -> None:
        import threading

        self.cluster = cluster
        self.path = path
        self.lock = threading.Lock()
        #: nodes stopped, killed or paused on request: their exit is not reported as a failure
        self.expected_down: set[int] = set()
        path.unlink(missing_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.server.settimeout(0.5)
        self.closed = False
        self.thread = threading.Thread(target=self._serve, name="dev-cluster-control", daemon=True)
        self.thread.start()

    def status(self) -> list[str]:
        out = []
        for i, n in self.cluster.nodes.items():
            state = "running" if n.is_running() else f"down (exit code {n.proc.returncode if n.proc else None})"
            out.append(f"node {i} {n.bootstrap} {state}")
        return out

    def handle(self, line: str) -> str:
        parts = line.split()
        if parts == ["status"]:
            return "ok\t" + "\t".join(self.status())
        if len(parts) != 2 or parts[0] not in NODE_ACTIONS or not parts[1].isdigit():
            return f"error: want 'status' or one of {', '.join(NODE_ACTIONS)} and a node id, got {line!r}"
        action, node = parts[0], int(parts[1])
        if node not in self.cluster.nodes:
            return f"error: no node {node} (nodes {sorted(self.cluster.nodes)})"
        n = self.cluster.nodes[node]
        with self.lock:
            try:
                if action in ("start", "restart", "resume"):
                    if action == "start" and n.is_running():
                        return f"error: node {node} is running"
                    if action == "resume":
                        self.cluster.resume(node)
                    elif action == "restart":
                        self.cluster.restart(node)
                    else:
                        n.start()
                    self.expected_down.discard(node)
                    done = {"start": "started", "restart": "restarted", "resume": "resumed"}[action]
                    return f"ok: node {node} {done}, pid {n.pid}"
                if not n.is_running():
                    return f"error: node {node} is not running"
                self.expected_down.add(node)
                if action == "kill":
                    return f"ok: node {node} killed (exit code {n.kill()})"
                if action == "stop":
                    return f"ok: node {node} stopped (exit code {n.stop()})"
                self.cluster.pause(node)
                return f"ok: node {node} paused (SIGSTOP)"
            except Exception as exc:  # noqa: BLE001 - answered to the operator, the cluster keeps running
                return f"error: {action} {node}: {exc}"

    def _serve(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(10)
                    data = b""
                    while not data.endswith(b"\n") and len(data) < 1024:
                        chunk = conn.recv(1024)
                        if not chunk:
                            break
                        data += chunk
                    answer = self.handle(data.decode(errors="replace").strip())
                    print(f"control: {data.decode(errors='replace').strip()} -> {answer.split(chr(9))[0]}",
                          flush=True)
                    conn.sendall(answer.encode() + b"\n")
                except OSError:
                    continue

    def close(self) -> None:
        self.closed = True
        self.server.close()
        self.thread.join(5)
        self.path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """``kbroker-dev-cluster``: start a cluster on this machine's loopback for development and tests of one's own
    code, print how to reach it, and run until Ctrl-C / SIGTERM (then stop every node cleanly)::

        kbroker-dev-cluster --controllers 3 --brokers 3 [--dir DIR] [--link-proxies] [--override k=v ...]
        kbroker-dev-cluster {kill,stop,start,restart,pause,resume} NODE --dir DIR
        kbroker-dev-cluster status --dir DIR

    With ``--brokers 0`` the controllers are combined broker+controller nodes. Prints one ``node`` line per
    process (id, roles, address, pid, data directory), then ``bootstrap.servers=...`` and ``ready``. A node that
    exits is reported once (``node N exited ...``) and the others keep serving. The second form acts on one node
    of a running dev cluster through its control socket (``DIR/control.sock``): ``kill`` (SIGKILL), ``stop``
    (SIGTERM, a controlled shutdown), ``start`` / ``restart`` (same port and data), ``pause`` / ``resume``
    (SIGSTOP / SIGCONT). Internal topics are replicated as :func:`dev_cluster_defaults` says.
    """
    import argparse
    import tempfile

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in (*NODE_ACTIONS, "status"):
        cp = argparse.ArgumentParser(prog=f"kbroker-dev-cluster {argv[0]}",
                                     description="act on one node of a running kbroker-dev-cluster")
        if argv[0] != "status":
            cp.add_argument("node", type=int, help="the node id (as in the 'node' lines)")
        cp.add_argument("--dir", required=True, help="the running cluster's --dir (printed as 'dir' at start)")
        cargs = cp.parse_args(argv[1:])
        return _control_client(argv[0], getattr(cargs, "node", None), cargs.dir)

    ap = argparse.ArgumentParser(prog="kbroker-dev-cluster", description=main.__doc__.splitlines()[0])
    ap.add_argument("--controllers", type=int, default=3, help="voters of the metadata quorum (default 3)")
    ap.add_argument("--brokers", type=int, default=0,
                    help="broker-only nodes; 0 (the default) makes the controllers combined nodes")
    ap.add_argument("--dir", default=None, help="where the nodes keep their data (default: a temporary directory)")
    ap.add_argument("--link-proxies", action="store_true", help="a TCP proxy on every link to a voter")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every node")
    ap.add_argument("--start-timeout", type=float, default=120.0)
    from kbroker.cli._common import add_version

    add_version(ap)
    args = ap.parse_args(argv)
    if args.controllers < 1 or args.brokers < 0:
        ap.error("--controllers must be at least 1 and --brokers at least 0")
    overrides = dev_cluster_defaults(args.brokers or args.controllers)
    for kv in args.override:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--override wants KEY=VALUE, got {kv!r}")
        overrides[key.strip()] = value.strip()
    tmp = None
    root = args.dir
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="kbroker-dev-cluster-")
        root = tmp.name
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = KbrokerCluster(root, nodes=args.controllers, brokers=args.brokers, overrides=overrides,
                             start_timeout=args.start_timeout, link_proxies=args.link_proxies)
    control: _DevControl | None = None
    try:
        cluster.start()
        for i, n in cluster.nodes.items():
            roles = "controller" if i in cluster.controller_ids and args.brokers else \
                ("broker,controller" if i in cluster.controller_ids else "broker")
            print(f"node {i} {roles} {n.bootstrap} pid {n.pid} dir {n.data_dir}", flush=True)
        print(f"cluster.id={cluster.cluster_id}", flush=True)
        print(f"bootstrap.servers={cluster.bootstrap}", flush=True)
        control = _DevControl(cluster, Path(root) / CONTROL_SOCKET)
        print(f"control: kbroker-dev-cluster {{{','.join(NODE_ACTIONS)}}} NODE --dir {root}", flush=True)
        print("ready", flush=True)
        reported: set[int] = set()
        while not stop["now"]:
            time.sleep(0.2)
            with control.lock:
                for i, n in cluster.nodes.items():
                    if n.is_running():
                        reported.discard(i)
                    elif i not in reported:
                        reported.add(i)
                        if i not in control.expected_down:
                            code = n.proc.returncode if n.proc else None
                            print(f"node {i} exited (exit code {code}); the other nodes keep serving "
                                  f"(kbroker-dev-cluster start {i} --dir {root} starts it again)", flush=True)
    finally:
        if control is not None:
            control.close()
        cluster.stop()
        if tmp is not None:
            tmp.cleanup()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
