"""Several kbroker processes on 127.0.0.1 forming one cluster with a KRaft-style metadata quorum.

``KbrokerCluster(root, nodes=3)`` gives each node a client listener (PLAINTEXT) and a controller listener
(CONTROLLER) on free ports, one cluster id, and ``controller.quorum.voters`` naming every node: combined
broker+controller nodes (``process.roles=broker,controller``). Nodes are :class:`KbrokerProcess` objects, so
each can be killed (``kill -9``), stopped, paused (SIGSTOP/SIGCONT) and restarted on its own::

    with KbrokerCluster(tmp_path) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(cluster.controller_id())
        cluster.restart(2)

Every wait is bounded (``timeout`` seconds) and raises on expiry.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import struct
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from kbroker.testing.plugin import KbrokerProcess, free_port, tcp_connectable, wait_for_broker

__all__ = ["KbrokerCluster"]


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KbrokerCluster:
    """``nodes`` combined nodes with ids 1..nodes; see the module docstring."""

    def __init__(self, root: str | os.PathLike[str], nodes: int = 3, overrides: Mapping[str, Any] | None = None,
                 host: str = "127.0.0.1", start_timeout: float = 90.0) -> None:
        self.root = Path(root)
        self.host = host
        self.cluster_id = _cluster_id()
        self.start_timeout = start_timeout
        ids = list(range(1, nodes + 1))
        self.controller_ports = {i: free_port(host) for i in ids}
        voters = ",".join(f"{i}@{host}:{p}" for i, p in self.controller_ports.items())
        self.nodes: dict[int, KbrokerProcess] = {}
        for i in ids:
            port = free_port(host)
            props = {
                "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{self.controller_ports[i]}",
                "advertised.listeners": f"PLAINTEXT://{host}:{port}",
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": voters,
                "cluster.id": self.cluster_id,
                **{str(k): str(v) for k, v in (overrides or {}).items()},
            }
            self.nodes[i] = KbrokerProcess(self.root / f"node{i}", port=port, node_id=i, overrides=props,
                                           host=host, start_timeout=start_timeout)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_running()]

    # ---- lifecycle
    def start(self) -> KbrokerCluster:
        """Start every node at once (none can serve before a majority runs) and wait for each."""
        for n in self.nodes.values():
            n._spawn()
        for n in self.nodes.values():
            wait_for_broker(n.bootstrap, self.start_timeout, alive=n.is_running,
                            describe=lambda n=n: n.log_tail(60, since=n._start_offset))
        return self

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
        for n in self.nodes.values():
            if n.is_running():
                n.stop()

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
            for i in self.running():
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


def quorum_leader(host: str, port: int, timeout: float = 5.0) -> int:
    """The metadata quorum's leader id as the node at ``host:port`` knows it (DescribeQuorum v0 through
    kbroker's codec; a standby answers NOT_LEADER_OR_FOLLOWER and still names the leader). -1: none known."""
    from kbroker.protocol import codec
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse

    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    from kbroker.protocol.headers import encode_request_header

    body = encode_request_header(ApiKey.DESCRIBE_QUORUM, 0, 1, "kbroker-cluster-harness") + codec.encode(req, 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        frame = _recv_exactly(sock, size)
    pos = codec._skip_tagged(frame, 4)  # correlation id, then the flexible response header's tags
    resp, _ = codec.decode(DescribeQuorumResponse, frame, 0, pos)
    if resp.error_code or not resp.topics or not resp.topics[0].partitions:
        raise ValueError(f"DescribeQuorum failed: error {resp.error_code}")
    return resp.topics[0].partitions[0].leader_id


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf
