"""``kbroker --processes N``: one kbroker node on one machine as N processes, so it uses N cores (issue 13).

CPython runs one thread of Python at a time per process, so one kbroker process uses at most one core. The
chosen answer (docs/decisions/0002-multi-core.md) is the one Kafka's own model already has: several brokers in
one cluster. ``kbroker --processes N`` starts them for the user, with the embedded default's listener as the
cluster's bootstrap:

* node k (1..N), ``process.roles=broker``: node 1 on the client listener the user gave (default
  ``PLAINTEXT://localhost:9092``), node k >= 2 on port ``9092 + k`` (9094, 9095, ...);
* node 1000, ``process.roles=controller``: the metadata quorum (one voter) on a ``CONTROLLER`` listener on the
  next port (9093). It is mostly idle; it is a process of its own because a broker and a controller in one
  process with a quorum of one is kbroker's single-process shortcut (no Raft), which other brokers cannot
  follow, and the separate roles are the production layout every cluster test exercises.

Clients bootstrap from 9092 and see N brokers in Metadata; the partitions of a topic are spread over them
by the controller's placement, so produce, fetch and the group and transaction coordinators
(``__consumer_offsets``, ``__transaction_state`` partitions) are shared between the cores. Every node has its
own data directory beside ``log.dirs`` (``./kbroker-data-node1``, ..., ``./kbroker-data-controller``),
formatted on first start with one cluster id. The processes share one machine's fate (disk, power), so
replication between them protects nothing a single process does not: internal topics are created with
replication factor 1, as in the single-process default (a user may still override them and
``default.replication.factor``).

The parent process is a supervisor, not a broker: it forwards SIGTERM/SIGINT (brokers first, the controller
last, so brokers shut down in a controlled way), restarts a child that dies (at most ``MAX_RESTARTS`` times within
``RESTART_WINDOW_S`` each; past that it stops every node and exits 1) and exits 0 after a clean stop.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from kbroker.config import ConfigException, parse_properties
from kbroker.controller.uuids import random_uuid, uuid_to_str

#: Restarts of one child allowed within RESTART_WINDOW_S seconds before the node gives up.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 300.0
#: How long each stopping child gets to flush and exit after SIGTERM before SIGKILL (seconds).
STOP_TIMEOUT_S = 60.0

log = logging.getLogger("kbroker.node")


@dataclass
class Child:
    """One process of the node: its node id, the properties it starts with, and its restart history."""

    node_id: int
    props: dict[str, str]
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)


def _client_listener(props: dict[str, str]) -> tuple[str, str, int]:
    """(listener name, host, port) of the one client listener (``listeners``); ValueError when there are
    several or it has no port."""
    listeners = [x.strip() for x in props.get("listeners", "").split(",") if x.strip()]
    if len(listeners) != 1 or "://" not in listeners[0]:
        raise ValueError("--processes needs exactly one client listener in 'listeners' "
                         f"(got {props.get('listeners')!r})")
    name, _, address = listeners[0].partition("://")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listener {listeners[0]!r} has no port")
    return name, host, int(port)


def _advertised_host(props: dict[str, str], default: str, port: int) -> str:
    """The host of ``advertised.listeners`` when it advertises the client listener's port, else the listener's
    own host (an override of ``listeners`` alone leaves the embedded default's ``localhost:9092`` behind)."""
    adv = [x.strip() for x in props.get("advertised.listeners", "").split(",") if x.strip()]
    if adv and "://" in adv[0]:
        host, _, adv_port = adv[0].partition("://")[2].rpartition(":")
        if host and adv_port == str(port):
            return host
    return default


#: The node id of the controller process (broker ids are 1..N).
CONTROLLER_NODE_ID = 1000


def data_dir(base: str, node_id: int) -> str:
    """The data directory of node ``node_id``: ``<log.dirs>-node<id>`` (``-controller`` for the controller)
    beside the single-process one."""
    suffix = "controller" if node_id == CONTROLLER_NODE_ID else f"node{node_id}"
    return f"{base.rstrip('/')}-{suffix}"


def _existing_cluster_id(path: str) -> str | None:
    try:
        with open(os.path.join(path, "meta.properties"), encoding="utf-8") as f:
            return parse_properties(f.read()).get("cluster.id") or None
    except (OSError, UnicodeDecodeError, ConfigException):
        return None


def node_properties(props: dict[str, str], processes: int) -> list[dict[str, str]]:
    """The properties of the controller (first) and of each of the ``processes`` brokers, from the embedded
    default's ``props`` (with the user's overrides). Raises ValueError for what cannot be split (several
    listeners, several log.dirs)."""
    if processes < 2:
        raise ValueError("--processes must be 2 or more for a multi-process node")
    name, host, port = _client_listener(props)
    if name.upper() == "CONTROLLER":
        raise ValueError("the client listener may not be named CONTROLLER")
    adv_host = _advertised_host(props, host, port)
    base = props.get("log.dirs", "./kbroker-data")
    if "," in base:
        raise ValueError("--processes needs one log.dirs entry (each node gets <log.dirs>-node<id>)")
    cluster_id = (props.get("cluster.id") or _existing_cluster_id(data_dir(base, CONTROLLER_NODE_ID))
                  or uuid_to_str(random_uuid()))
    controller = f"{host}:{port + 1}"
    common = {
        **props,
        "cluster.id": cluster_id,
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"{CONTROLLER_NODE_ID}@{controller}",
    }
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr"):
        common.setdefault(key, "1")
    ctl = dict(common, **{"node.id": str(CONTROLLER_NODE_ID), "process.roles": "controller",
                          "listeners": f"CONTROLLER://{controller}",
                          "log.dirs": data_dir(base, CONTROLLER_NODE_ID)})
    ctl.pop("advertised.listeners", None)
    out = [ctl]
    for node_id in range(1, processes + 1):
        broker_port = port if node_id == 1 else port + node_id
        out.append(dict(common, **{"node.id": str(node_id), "log.dirs": data_dir(base, node_id),
                                   "process.roles": "broker", "listeners": f"{name}://{host}:{broker_port}",
                                   "advertised.listeners": f"{name}://{adv_host}:{broker_port}"}))
    return out


def _spawn(child: Child, log_level: str) -> None:
    cmd = [sys.executable, "-m", "kbroker.cli.main", "--log-level", log_level]
    for key, value in child.props.items():
        cmd += ["--override", f"{key}={value}"]
    child.proc = subprocess.Popen(cmd)
    log.info("node %d started as process %d", child.node_id, child.proc.pid)


def _stop_all(children: list[Child]) -> None:
    """SIGTERM the brokers, then the controller (``children[0]``); SIGKILL whoever outlives STOP_TIMEOUT_S."""
    for group in (children[1:], children[:1]):
        for c in group:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for c in group:
            if c.proc is None:
                continue
            try:
                c.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("node %d did not stop within %.0f s: killed", c.node_id, STOP_TIMEOUT_S)
                c.proc.kill()
                c.proc.wait()


def run(props: dict[str, str], processes: int, log_level: str) -> int:
    """Run the node as ``processes`` processes until SIGTERM/SIGINT; the exit code of the supervisor."""
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        children = [Child(int(p["node.id"]), p) for p in node_properties(props, processes)]
    except ValueError as exc:
        log.error("kbroker cannot start: %s", exc)
        return 2
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for c in children:
        _spawn(c, log_level)
    log.info("kbroker node of %d broker processes and a controller: bootstrap %s", processes,
             children[1].props["advertised.listeners"].partition("://")[2])
    code = 0
    while not stopping:
        time.sleep(0.2)
        for c in children:
            assert c.proc is not None
            rc = c.proc.poll()
            if rc is None or stopping:
                continue
            now = time.monotonic()
            c.restarts = [t for t in c.restarts if now - t < RESTART_WINDOW_S] + [now]
            if len(c.restarts) > MAX_RESTARTS:
                log.error("node %d exited (code %s) %d times within %.0f s: stopping the node", c.node_id, rc,
                          len(c.restarts), RESTART_WINDOW_S)
                stopping, code = True, 1
                break
            log.warning("node %d exited (code %s): restarting it", c.node_id, rc)
            _spawn(c, log_level)
    _stop_all(children)
    return code
