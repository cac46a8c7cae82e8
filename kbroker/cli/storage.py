"""``kbroker-storage``: format and inspect a node's log directories, like ``kafka-storage.sh``.

    kbroker-storage random-uuid
    kbroker-storage format -t <cluster-id> -c server.properties [--ignore-formatted] [--standalone]
    kbroker-storage info -c server.properties

``format`` writes ``meta.properties`` (``version=1``, ``cluster.id``, ``node.id``, a fresh ``directory.id``) into
every ``log.dirs`` entry and the ``metadata.log.dir``: exactly what kbroker's controller writes on a first start
and checks on every start, so a formatted node starts with the chosen cluster id. The metadata log itself (its
bootstrap records: ``metadata.version`` 4.3-IV0 and ``group.version`` 1) is written by that first start, or in
a cluster by the first active controller.

A dynamic quorum (KIP-853: ``controller.quorum.bootstrap.servers``, no ``controller.quorum.voters``) keeps its
voters in the metadata log. ``--standalone`` (this controller is the only voter) or ``--initial-controllers
id@host:port:directory-id,...`` (this node's metadata directory gets the directory id given for it) writes them
as the bootstrap snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` (a KRaftVersion
and a KRaftVoters record); ``--no-initial-controllers`` formats a controller that joins later as an observer
(``kbroker-metadata-quorum add-controller``). With static voters ``--initial-controllers`` must name them and
nothing more is written. ``info`` reports what is on disk.

``--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` (repeatable; also ``iterations=``, ``salt=``,
``saltedpassword=``, as ``kafka-storage.sh``) writes SCRAM credentials (KIP-554) into the bootstrap metadata,
``<metadata.log.dir>/bootstrap.checkpoint`` (Kafka's file: the bootstrap feature levels, then a
UserScramCredentialRecord per credential), which the first active controller commits to the new metadata log
(``kbroker.controller.bootstrap``); format every controller of a new cluster with the same flags.

``--feature transaction.version=N`` (N 0, 1 or 2; default 2 as Kafka 4.3 formats its latest release) goes into
the same file: the first active controller finalizes that level instead of 2 (0: not finalized, clients use the
classic transaction protocol). ``metadata.version=30``, ``group.version=1`` and ``kraft.version=0`` are accepted
as the levels kbroker always bootstraps.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kbroker.cli._common import CliError, ToolParser, add_version, run_tool

PROG = "kbroker-storage"
METADATA_VERSION = "4.3-IV0"
RELEASE_VERSIONS = {"4.3", "4.3-IV0", METADATA_VERSION}


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="The Kafka storage tool (kbroker).")
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="{info,format,random-uuid}", parser_class=ToolParser)
    info = sub.add_parser("info", help="get information about the log directories on this node")
    fmt = sub.add_parser("format", help="format the log directories on this node")
    sub.add_parser("random-uuid", help="print a random UUID")
    for sp in (info, fmt):
        sp.add_argument("--config", "-c", required=True, help="the server.properties file to use")
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster id to use")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="skip directories that are already formatted instead of failing")
    fmt.add_argument("--release-version", "-r", help=f"the metadata.version to bootstrap ({METADATA_VERSION})")
    fmt.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL",
                     help="a feature level to bootstrap: transaction.version=0|1|2 (default 2); otherwise only the "
                          "levels kbroker bootstraps are accepted")
    fmt.add_argument("--standalone", "-s", action="store_true",
                     help="a dynamic quorum whose only voter is this controller")
    fmt.add_argument("--initial-controllers", "-I",
                     help="the initial voters of a dynamic quorum, id@host:port:directory-id,... (with static "
                          "voters: must match controller.quorum.voters)")
    fmt.add_argument("--no-initial-controllers", "-N", action="store_true",
                     help="a controller that joins a dynamic quorum later (add-controller)")
    fmt.add_argument("--add-scram", "-S", action="append", default=[], metavar="MECHANISM=[name=...,password=...]",
                     help="a SCRAM credential to bootstrap, e.g. 'SCRAM-SHA-256=[name=alice,password=alice-secret]' "
                          "(also iterations=, salt= (base64), saltedpassword= (base64, with salt)); repeatable")
    return p


def load_config(path: str) -> Any:
    from kbroker.config import BrokerConfig

    try:
        return BrokerConfig.from_file(path)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def directories(config: Any) -> list[Path]:
    """``log.dirs`` plus ``metadata.log.dir``, sorted and without duplicates (Kafka's order)."""
    dirs = {str(d) for d in config.log_dirs}
    if not dirs:
        raise CliError("No log directories found in the configuration.")
    dirs.add(str(config.metadata_log_dir))
    return [Path(d) for d in sorted(dirs)]


def format_command(args: Any) -> int:
    from kbroker.controller.uuids import uuid_from_str
    from kbroker.storage.log_manager import META_PROPERTIES_FILE, write_meta_properties

    config = load_config(args.config)
    if not config.process_roles:
        raise CliError("The kafka configuration file appears to be for a legacy cluster. Formatting is only "
                       "supported for clusters in KRaft mode.")
    try:
        uuid_from_str(args.cluster_id)
    except ValueError as exc:
        raise CliError(f"Cluster ID string {args.cluster_id} does not appear to be a valid UUID: {exc}") from None
    try:
        node_id = config.node_id
    except ValueError:
        raise CliError(f"The node.id must be set to a non-negative integer. We saw {config.get('node.id')!r}") from None
    if node_id < 0:
        raise CliError(f"The node.id must be set to a non-negative integer. We saw {node_id}")
    if args.release_version and args.release_version not in RELEASE_VERSIONS:
        raise CliError(f"kbroker bootstraps metadata.version {METADATA_VERSION}; release version "
                       f"{args.release_version} is not supported")
    from kbroker.controller.quorum_controller import BOOTSTRAP_FEATURES, FORMAT_FEATURES

    chosen: dict[str, int] = {}
    for feature in args.feature:
        name, _, level = (x.strip() for x in feature.partition("="))
        if name in FORMAT_FEATURES and level.isdigit() and int(level) in FORMAT_FEATURES[name]:
            chosen[name] = int(level)
        elif (name, level) not in {("metadata.version", "30"), ("group.version", "1"), ("kraft.version", "0")}:
            raise CliError(f"unsupported feature level {feature!r}: kbroker bootstraps metadata.version=30, "
                           "group.version=1, transaction.version 0, 1 or 2 (default 2), share.version 0 or 1 "
                           "(default 1) and streams.version 0 or 1 (default 1)")
    scram_records = [parse_add_scram(arg) for arg in args.add_scram]
    from kbroker.controller.quorum_controller import parse_quorum_voters

    try:
        static = parse_quorum_voters(config.get("controller.quorum.voters"))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    dynamic = not static and bool(config.get("controller.quorum.bootstrap.servers").strip())
    if sum(map(bool, (args.standalone, args.initial_controllers, args.no_initial_controllers))) > 1:
        raise CliError("Only one of --standalone, --initial-controllers and --no-initial-controllers can be given.")
    bootstrap_voters = None
    own_directory_id: str | None = None
    if dynamic and "controller" in config.process_roles and (args.standalone or args.initial_controllers):
        bootstrap_voters, own_directory_id = _initial_voters(config, node_id, args)
    elif args.initial_controllers:
        voters = [v.strip() for v in args.initial_controllers.split(",") if v.strip()]
        ids = {v.split("@", 1)[0].split("-", 1)[0] for v in voters}
        configured = {str(i) for i in static}
        if not configured and ids != {str(node_id)}:
            raise CliError(f"without controller.quorum.voters the metadata quorum is this node only: "
                           f"--initial-controllers must name only node {node_id}, got {args.initial_controllers}")
        if configured and ids != configured:
            raise CliError(f"--initial-controllers names nodes {', '.join(sorted(ids))}, controller.quorum.voters "
                           f"names {', '.join(sorted(configured))}: kbroker's voters are the static ones")
    dirs = directories(config)
    metadata_dir = Path(config.metadata_log_dir)
    todo = []
    for d in dirs:
        if (d / META_PROPERTIES_FILE).exists():
            if not args.ignore_formatted:
                raise CliError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore this "
                               "directory and format the others.")
            continue
        todo.append(d)
    if not todo:
        print("All of the log directories are already formatted.")
        return 0
    for d in todo:
        try:
            d.mkdir(parents=True, exist_ok=True)
            props = write_meta_properties(d, cluster_id=args.cluster_id, node_id=node_id,
                                          directory_id=own_directory_id if d == metadata_dir else None)
            if d == metadata_dir and bootstrap_voters is not None:
                _write_bootstrap_snapshot(d, bootstrap_voters, node_id, props["directory.id"])
            if d == metadata_dir and (scram_records or chosen):
                from kbroker.controller.bootstrap import write_bootstrap_file

                write_bootstrap_file(d, {**BOOTSTRAP_FEATURES, **chosen}, scram_records)
        except OSError as exc:
            raise CliError(f"Unable to create storage directory {d}: {exc.strerror or exc}") from None
        kind = "metadata" if d == metadata_dir else "data"
        print(f"Formatting {kind} directory {d} with metadata.version {METADATA_VERSION}.")
    return 0


def parse_add_scram(argument: str) -> Any:
    """The UserScramCredentialRecord of one ``--add-scram`` argument, parsed as Kafka's ``ScramParser``:
    ``<mechanism>=[key=value,...]`` with mechanism SCRAM-SHA-256 or SCRAM-SHA-512 and the keys ``name``
    (required), ``password`` or ``saltedpassword`` (base64, needs ``salt``), ``salt`` (base64; random when not
    given) and ``iterations`` (4096..16384, default 4096); values may be in double quotes. Raises
    :class:`CliError` with Kafka's message for each mistake."""
    import base64
    import binascii

    from kbroker.controller.scram_control import (DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISM_CODES,
                                                  MIN_ITERATIONS, credential_record)

    text = argument.strip()
    mechanism, eq, config = text.partition("=")
    if not eq:
        raise CliError(f"Failed to find equals sign in SCRAM argument '{text}'")
    if mechanism not in MECHANISM_CODES:
        raise CliError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise CliError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise CliError("Expected configuration string to end with ]")
    parts: dict[str, str] = {}
    for component in config[1:-1].split(","):
        key, eq, value = component.partition("=")
        if not eq:
            raise CliError(f"No equals sign found in SCRAM component: {component}")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        parts[key] = value
    name = parts.pop("name", None)
    if name is None:
        raise CliError("You must supply 'name' to add-scram")

    def b64(what: str, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise CliError(f"Failed to decode given {what}: {value}") from None

    salt = b64("salt", parts.pop("salt")) if "salt" in parts else None
    iterations = DEFAULT_ITERATIONS
    if "iterations" in parts:
        raw = parts.pop("iterations")
        try:
            iterations = int(raw)
        except ValueError:
            raise CliError(f"Failed to parse iterations count: {raw}") from None
    password = parts.pop("password", None)
    salted_text = parts.pop("saltedpassword", None)
    salted = None
    if password is None:
        if salted_text is None:
            raise CliError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise CliError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = b64("saltedPassword", salted_text)
    if parts:
        raise CliError(f"Unknown SCRAM configurations: {', '.join(sorted(parts))}")
    if iterations < MIN_ITERATIONS:
        raise CliError(f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {mechanism}")
    if iterations > MAX_ITERATIONS:
        raise CliError(f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {mechanism}")
    return credential_record(name, MECHANISM_CODES[mechanism], password=password,
                             salted=salted if password is None else None, salt=salt, iterations=iterations)


def _initial_voters(config: Any, node_id: int, args: Any) -> tuple[list[tuple[int, str | None, list[Any]]], str | None]:
    """The voters of a new dynamic quorum -> ([(id, directory id or None for this node's new one, endpoints)],
    this node's directory id when --initial-controllers gives it)."""
    from kbroker.controller.uuids import uuid_from_str

    names = {n.upper() for n in config.get_list("controller.listener.names")}
    own = [(lst.name.upper(), lst.host or "localhost", lst.port) for lst in config.listeners
           if lst.name.upper() in names]
    if args.standalone:
        if not own:
            raise CliError("--standalone needs a listener named in controller.listener.names")
        return [(node_id, None, own)], None
    out: list[tuple[int, str | None, list[Any]]] = []
    own_dir = None
    listener = sorted(names)[0] if names else "CONTROLLER"
    for item in (x.strip() for x in args.initial_controllers.split(",") if x.strip()):
        import re

        m = re.fullmatch(r"(\d+)@\[?([^\]@]*?)\]?:(\d+):([A-Za-z0-9_-]{22})", item)
        if m is None:
            raise CliError(f"Invalid --initial-controllers entry {item!r}: expected id@host:port:directory-id")
        try:
            uuid_from_str(m.group(4))
        except ValueError:
            raise CliError(f"Invalid directory id {m.group(4)!r} in --initial-controllers") from None
        vid = int(m.group(1))
        if vid == node_id:
            own_dir = m.group(4)
        out.append((vid, m.group(4), [(listener, m.group(2), int(m.group(3)))]))
    if len({v[0] for v in out}) != len(out):
        raise CliError("--initial-controllers names a node twice")
    if own_dir is None:
        raise CliError(f"--initial-controllers does not name this node ({node_id})")
    return out, own_dir


def _write_bootstrap_snapshot(metadata_dir: Path, voters: list[tuple[int, str | None, list[Any]]], node_id: int,
                              own_directory_id: str) -> None:
    import time

    from kbroker.controller.raft.log import Voter, VoterSet
    from kbroker.controller.snapshot import SnapshotStore, encode_snapshot
    from kbroker.controller.uuids import uuid_from_str

    vs = VoterSet.of([Voter(vid, uuid_from_str(d if d is not None else own_directory_id), tuple(eps))
                      for vid, d, eps in voters])
    now = int(time.time() * 1000)
    SnapshotStore(metadata_dir / "__cluster_metadata-0").write(0, 0, encode_snapshot([], 0, now, now, voters=vs))
    print("Bootstrap voters of the metadata quorum: "
          + ", ".join(f"{v.node_id}@{v.endpoints[0][1]}:{v.endpoints[0][2]}" for v in vs.voters))


def _props_text(props: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(props.items())) + "}"


def info_command(args: Any) -> int:
    from kbroker.storage.log_manager import META_PROPERTIES_FILE, read_meta_properties

    config = load_config(args.config)
    dirs = directories(config)
    problems: list[str] = []
    found: list[Path] = []
    first: dict[str, str] | None = None
    for d in dirs:
        if not d.is_dir():
            problems.append(f"{d} does not exist" if not d.exists() else f"{d} is not a directory")
            continue
        found.append(d)
        props = read_meta_properties(d)
        if props is None:
            problems.append(f"{d} is not formatted.")
            continue
        if props.get("version") not in ("0", "1"):
            problems.append(f"Unsupported version for {d / META_PROPERTIES_FILE}: {props.get('version')}")
            continue
        if first is None:
            first = props
        else:
            same = {k: v for k, v in props.items() if k != "directory.id"}
            ref = {k: v for k, v in first.items() if k != "directory.id"}
            if same != ref:
                problems.append(f"Metadata for {d / META_PROPERTIES_FILE} was {_props_text(props)}, but other "
                                f"directories featured {_props_text(first)}")
    if first is not None:
        if config.process_roles and first.get("version") == "0":
            problems.append("The kafka configuration file appears to be for a cluster in KRaft mode, but the "
                            "directories are formatted for legacy mode.")
        if first.get("node.id") not in (None, str(config.get("node.id"))):
            problems.append(f"node.id {first.get('node.id')} in meta.properties does not match node.id "
                            f"{config.get('node.id')} in {args.config}")
    if found:
        print("Found log directory:" if len(found) == 1 else "Found log directories:")
        for d in found:
            print(f"  {d}")
        print()
    if first is not None:
        print(f"Found metadata: {_props_text(first)}")
        print()
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:")
        for problem in problems:
            print(f"  {problem}")
        print()
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is required: info, format or random-uuid")

    def body() -> int:
        if args.command == "random-uuid":
            from kbroker.controller.uuids import random_uuid, uuid_to_str

            print(uuid_to_str(random_uuid()))
            return 0
        if args.command == "format":
            return format_command(args)
        return info_command(args)

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
