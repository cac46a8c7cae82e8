"""``kbroker-metadata-quorum``: describe and change the KRaft metadata quorum, like ``kafka-metadata-quorum.sh``.

    kbroker-metadata-quorum --bootstrap-server localhost:9092 describe --status
    kbroker-metadata-quorum --bootstrap-server localhost:9092 describe --replication [--human-readable]
    kbroker-metadata-quorum --command-config controller.properties --bootstrap-controller HOST:PORT add-controller
    kbroker-metadata-quorum --bootstrap-controller HOST:PORT remove-controller --controller-id N \
        --controller-directory-id UUID

``add-controller`` (KIP-853) makes the controller that ``--command-config`` describes (its ``node.id``, the
directory id in its metadata directory's ``meta.properties``, its ``controller.listener.names`` endpoints from
``advertised.listeners`` / ``listeners``) a voter: it must be running and following the metadata log as an
observer. It sends AddRaftVoter (API 80); ``remove-controller`` sends RemoveRaftVoter (API 81). Either goes to the
node named, which forwards it to the quorum's leader.

Sends DescribeQuorum (API 55) for ``__cluster_metadata-0`` and the cluster id from Metadata through kbroker's
protocol codec; prints Kafka 4.x's ``MetadataQuorumCommand`` layout (``ClusterId:``, ``LeaderId:``, ...,
``CurrentVoters: [{"id": 1, "directoryId": "...", "endpoints": [...]}]``, without ``directoryId`` for the
voters of a static quorum, as Kafka's tool prints them).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_command_config,
    add_version,
    kafka_table,
    load_properties,
    run_tool,
    wire_ssl_context,
)

PROG = "kbroker-metadata-quorum"
METADATA_TOPIC = "__cluster_metadata"


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Describe the KRaft metadata quorum.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="a broker to connect to")
    p.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                   help="a controller to connect to (kbroker nodes are combined: same as --bootstrap-server)")
    add_command_config(p)
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="{describe,add-controller,remove-controller}",
                           parser_class=ToolParser)
    d = sub.add_parser("describe", help="describe the metadata quorum info")
    g = d.add_mutually_exclusive_group(required=True)
    g.add_argument("--status", action="store_true", help="a summary of the quorum state")
    g.add_argument("--replication", action="store_true", help="the replication state of every replica")
    d.add_argument("--human-readable", action="store_true", help="with --replication: timestamps as 'N ms ago'")
    sub.add_parser("add-controller", help="add the controller of --command-config to the voters")
    r = sub.add_parser("remove-controller", help="remove a controller from the voters")
    r.add_argument("--controller-id", type=int, required=True, help="the node id of the controller to remove")
    r.add_argument("--controller-directory-id", required=True,
                   help="the directory id of the controller's metadata directory")
    return p


def _controller_identity(props: dict[str, str]) -> tuple[int, str, bytes, list[tuple[str, str, int]]]:
    """(node id, cluster id, directory id, controller endpoints) of the controller a properties file describes."""
    from pathlib import Path

    from kbroker.cli._wire import split_hostport
    from kbroker.config import ConfigException, parse_properties
    from kbroker.controller.uuids import uuid_from_str

    if not props.get("node.id", "").strip().lstrip("-").isdigit():
        raise CliError("--command-config must give the new controller's node.id")
    node_id = int(props["node.id"])
    meta_dir = (props.get("metadata.log.dir") or props.get("log.dirs", "").split(",")[0]
                or props.get("log.dir", "/tmp/kafka-logs")).strip()
    meta = Path(meta_dir) / "meta.properties"
    try:
        stored = parse_properties(meta.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read {meta} ({exc.strerror}): start the new controller first, so that its "
                       f"metadata directory is formatted") from None
    except ConfigException as exc:
        raise CliError(f"cannot read {meta}: {exc}") from None
    try:
        directory_id = uuid_from_str(stored.get("directory.id", ""))
    except ValueError:
        raise CliError(f"{meta} has no valid directory.id") from None
    names = {n.strip().upper() for n in props.get("controller.listener.names", "CONTROLLER").split(",") if n.strip()}
    endpoints: list[tuple[str, str, int]] = []
    for key in ("advertised.listeners", "listeners"):
        for item in (x.strip() for x in props.get(key, "").split(",") if x.strip()):
            name, _, addr = item.partition("://")
            if name.upper() in names and all(e[0] != name.upper() for e in endpoints):
                host, port = split_hostport(addr)
                if not host:
                    raise CliError(f"the {name} listener of node {node_id} has no host: set advertised.listeners")
                endpoints.append((name.upper(), host, port))
    if not endpoints:
        raise CliError(f"--command-config names no listener of controller.listener.names {sorted(names)}")
    return node_id, stored.get("cluster.id", ""), directory_id, endpoints


def add_controller(bootstrap: str, props: dict[str, str], tls: Any = None) -> None:
    from kbroker.cli._wire import WireClient, error_name
    from kbroker.controller.uuids import uuid_to_str
    from kbroker.protocol.messages.add_raft_voter_request import AddRaftVoterRequest

    node_id, cluster_id, directory_id, endpoints = _controller_identity(props)
    with WireClient(bootstrap, ssl_context=tls) as wire:
        conn = wire.any_broker()
        req = AddRaftVoterRequest(cluster_id=cluster_id or None, timeout_ms=30_000, voter_id=node_id,
                                  voter_directory_id=directory_id,
                                  listeners=[AddRaftVoterRequest.Listener(name=n, host=h, port=p)
                                             for n, h, p in endpoints], ack_when_committed=True)
        resp = conn.send(req, conn.version_for(AddRaftVoterRequest))
    if resp.error_code:
        raise CliError(f"AddRaftVoter failed: {error_name(resp.error_code)}"
                       + (f" ({resp.error_message})" if resp.error_message else ""))
    print(f"Added controller {node_id} with directory id {uuid_to_str(directory_id)} and endpoints: "
          + ", ".join(f"{n}://{h}:{p}" for n, h, p in endpoints))


def remove_controller(bootstrap: str, node_id: int, directory_id_text: str, tls: Any = None) -> None:
    from kbroker.cli._wire import WireClient, error_name
    from kbroker.controller.uuids import uuid_from_str
    from kbroker.protocol.messages.remove_raft_voter_request import RemoveRaftVoterRequest

    try:
        directory_id = uuid_from_str(directory_id_text)
    except ValueError:
        raise CliError(f"--controller-directory-id {directory_id_text!r} is not a directory id") from None
    with WireClient(bootstrap, ssl_context=tls) as wire:
        conn = wire.any_broker()
        # a null cluster id: "do not check" (Kafka's nodes refuse an empty one as another cluster's)
        resp = conn.send(RemoveRaftVoterRequest(cluster_id=None, voter_id=node_id, voter_directory_id=directory_id),
                         conn.version_for(RemoveRaftVoterRequest))
    if resp.error_code:
        raise CliError(f"RemoveRaftVoter failed: {error_name(resp.error_code)}"
                       + (f" ({resp.error_message})" if resp.error_message else ""))
    print(f"Removed controller {node_id} with directory id {directory_id_text}")


def _uuid(raw: bytes) -> str | None:
    from kbroker.controller.uuids import ZERO_UUID, uuid_to_str

    return None if raw == ZERO_UUID else uuid_to_str(raw)


def describe_quorum(bootstrap: str, tls: Any = None) -> tuple[str, Any, Any, int]:
    """(cluster id, partition data, response, version) of the metadata partition."""
    from kbroker.cli._wire import WireClient, error_name
    from kbroker.protocol.messages import DescribeQuorumRequest, MetadataRequest

    with WireClient(bootstrap, ssl_context=tls) as wire:
        conn = wire.any_broker()
        md = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        version = conn.version_for(DescribeQuorumRequest)
        req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name=METADATA_TOPIC, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
        resp = conn.send(req, version)
    if resp.error_code:
        raise CliError(f"DescribeQuorum failed: {error_name(resp.error_code)}"
                       + (f" ({resp.error_message})" if resp.error_message else ""))
    try:
        part = resp.topics[0].partitions[0]
    except IndexError:
        raise CliError("DescribeQuorum returned no metadata partition") from None
    if part.error_code:
        raise CliError(f"DescribeQuorum failed: {error_name(part.error_code)}"
                       + (f" ({part.error_message})" if part.error_message else ""))
    return md.cluster_id or "", part, resp, version


def voters_text(part: Any, resp: Any, version: int) -> str:
    if version < 2:
        return "[" + ",".join(str(v.replica_id) for v in part.current_voters) + "]"
    endpoints = {n.node_id: [f"{lst.name}://{lst.host}:{lst.port}" for lst in n.listeners] for n in resp.nodes}
    items = []
    for v in part.current_voters:
        dir_id = _uuid(v.replica_directory_id)  # a static quorum's voters have none: Kafka leaves the key out
        items.append(f'{{"id": {v.replica_id}, '
                     + (f'"directoryId": {json.dumps(dir_id)}, ' if dir_id is not None else "")
                     + f'"endpoints": {json.dumps(endpoints.get(v.replica_id, []), separators=(", ", ": "))}}}')
    return "[" + ", ".join(items) + "]"


def observers_text(part: Any, version: int) -> str:
    if version < 2:
        return "[" + ",".join(str(v.replica_id) for v in part.observers) + "]"
    items = [f'{{"id": {o.replica_id}, "directoryId": {json.dumps(_uuid(o.replica_directory_id))}}}'
             for o in part.observers]
    return "[" + ", ".join(items) + "]"


def status(bootstrap: str, tls: Any = None) -> None:
    cluster_id, part, resp, version = describe_quorum(bootstrap, tls)
    voters = list(part.current_voters)
    leader = next((v for v in voters if v.replica_id == part.leader_id), None)
    if leader is None or not voters:
        raise CliError(f"the leader {part.leader_id} is not among the voters")
    laggard = min(voters, key=lambda v: v.log_end_offset)
    lag = leader.log_end_offset - laggard.log_end_offset
    if laggard is leader:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    rows = [("ClusterId:", cluster_id), ("LeaderId:", part.leader_id), ("LeaderEpoch:", part.leader_epoch),
            ("HighWatermark:", part.high_watermark), ("MaxFollowerLag:", lag), ("MaxFollowerLagTimeMs:", lag_ms),
            ("CurrentVoters:", voters_text(part, resp, version)),
            ("CurrentObservers:", observers_text(part, version))]
    for name, value in rows:
        print(f"{name:<24}{value}")


def replication(bootstrap: str, human: bool, tls: Any = None) -> None:
    _, part, _, version = describe_quorum(bootstrap, tls)
    now = int(time.time() * 1000)

    def ts(v: int) -> str:
        if v < 0:
            return "-1"
        return f"{now - v} ms ago" if human else str(v)

    leader = next((v for v in part.current_voters if v.replica_id == part.leader_id), None)
    ordered = ([(leader, "Leader")] if leader else []) + [
        (v, "Follower") for v in part.current_voters if v is not leader] + [(o, "Observer") for o in part.observers]
    header = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    rows = [[r.replica_id, _uuid(r.replica_directory_id) if version >= 2 else "AAAAAAAAAAAAAAAAAAAAAA",
             r.log_end_offset, part.high_watermark - r.log_end_offset, ts(r.last_fetch_timestamp),
             ts(r.last_caught_up_timestamp), status_] for r, status_ in ordered]
    rows = [[("AAAAAAAAAAAAAAAAAAAAAA" if c is None else c) for c in row] for row in rows]
    for line in kafka_table(header, rows, [0] * len(header), sep="\t", strip=False):
        print(line + "\t")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in ("describe", "add-controller", "remove-controller"):
        parser.error("a command is required: describe (--status | --replication), add-controller or "
                     "remove-controller")
    bootstrap = args.bootstrap_server or args.bootstrap_controller
    if not bootstrap:
        parser.error("one of --bootstrap-server or --bootstrap-controller must be specified")
    if args.bootstrap_server and args.bootstrap_controller:
        parser.error("only one of --bootstrap-server or --bootstrap-controller must be specified")
    if args.command == "describe" and args.human_readable and not args.replication:
        parser.error("--human-readable is only valid with --replication")
    if args.command == "add-controller" and not args.command_config:
        parser.error("add-controller needs --command-config: the properties of the controller to add")

    def body() -> int:
        props = load_properties(args.command_config)
        tls = wire_ssl_context(props, PROG)
        if args.command == "add-controller":
            add_controller(bootstrap, props, tls)
        elif args.command == "remove-controller":
            remove_controller(bootstrap, args.controller_id, args.controller_directory_id, tls)
        elif args.status:
            status(bootstrap, tls)
        else:
            replication(bootstrap, args.human_readable, tls)
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
