"""``kbroker-reassign-partitions``: move partition replicas between brokers, like ``kafka-reassign-partitions.sh``.

    kbroker-reassign-partitions --bootstrap-server localhost:9092 --generate \\
        --topics-to-move-json-file topics.json --broker-list 1,2,3 [--disable-rack-aware]
    kbroker-reassign-partitions --bootstrap-server localhost:9092 --execute --reassignment-json-file plan.json \\
        [--throttle 50000000] [--additional]
    kbroker-reassign-partitions --bootstrap-server localhost:9092 --verify --reassignment-json-file plan.json \\
        [--preserve-throttles]
    kbroker-reassign-partitions --bootstrap-server localhost:9092 --cancel --reassignment-json-file plan.json
    kbroker-reassign-partitions --bootstrap-server localhost:9092 --list

Shapes (Kafka's ``ReassignPartitionsCommand``; facts only):

* ``--topics-to-move-json-file``: ``{"topics": [{"topic": "t"}], "version": 1}``;
* ``--reassignment-json-file`` and what ``--generate`` prints: ``{"version":1,"partitions":[{"topic":"t",
  "partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}`` (``log_dirs`` optional, as long as
  ``replicas`` when given; compact JSON, partitions sorted by topic and partition);
* ``--generate`` prints ``Current partition replica assignment``, the current JSON, a blank line, then
  ``Proposed partition reassignment configuration`` and the proposal: for each topic, its partition count and
  replication factor kept, replicas placed over the ``--broker-list`` brokers as Kafka's ``AdminUtils`` places
  them (round robin from a random start, followers at a growing shift; with racks on every broker the racks
  alternate, unless ``--disable-rack-aware``; brokers of the list that are not registered are left out);
* ``--execute`` prints the current assignment of the partitions it moves (``Save this to use as the
  --reassignment-json-file option during rollback``), sends AlterPartitionReassignments and prints
  ``Successfully started partition reassignment(s) for t-0,t-1``. ``--throttle N`` first sets the topic
  configs ``leader.replication.throttled.replicas`` (``partition:broker`` of the current replicas) and
  ``follower.replication.throttled.replicas`` (the replicas being added) of every moving topic, then the
  broker configs ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate`` of every
  broker involved (IncrementalAlterConfigs of resource BROKER ``"<id>"``, sent to that broker); partitions
  already being reassigned count too;
* ``--verify`` prints ``Status of partition reassignment:`` and per partition ``Reassignment of partition t-0
  is completed.`` / ``... is still in progress.`` / ``There is no active reassignment of partition t-0, but
  replica set is 1,2 rather than 2,1.``; once no reassignment is in progress anywhere it removes the throttles
  (``Clearing broker-level throttles on brokers 1,2,3``: the three broker rate keys on every registered broker
  and every broker of the file; ``Clearing topic-level throttles on topic t``) unless ``--preserve-throttles``;
* ``--cancel`` cancels the file's partitions that are being reassigned (``Successfully cancelled partition
  reassignment(s) for: t-0`` or ``None of the specified partition reassignments are active.``) and clears the
  throttles as ``--verify`` does;
* ``--list``: ``Current partition reassignments:`` then ``t-0: replicas: 1,2,3. adding: 3. removing: 1.``, or
  ``No partition reassignments found.``

Errors (exit status 1, on stderr with this tool's prefix; Kafka prints them on stdout): ``Error: Unknown broker
id 9``, ``Error: Topic t not found.``, ``Error: Unable to find partition: t-7``, ``Error: The input string is not
a valid JSON``, ``Error: Partition reassignment list cannot be empty``, duplicate partitions or replicas,
``Cannot execute because there is an existing partition assignment. ...`` (without ``--additional``),
``Error reassigning partition(s):`` with one ``t-0: <broker's message>`` line per refused partition. Kafka
prints Java exception class names in some of these; kbroker prints the messages only.

``log_dirs`` other than ``"any"``: ``--execute`` sends AlterReplicaLogDirs to each replica's broker (again, until
``--timeout``, for replicas the reassignment has not created yet) and prints ``Successfully started log directory
move(s) for: t-0-1,...``; ``--verify`` reports each move as Kafka does (``Reassignment of replica t-0-1 completed
successfully.`` / ``... is still in progress.`` / ``... is not being moved from log dir X to Y.``).

Differences: ``--cancel`` refuses ``log_dirs`` other than ``"any"`` (Kafka moves such replicas back), and
``--replica-alter-log-dirs-throttle`` is accepted and says that it sets nothing (the copy is not throttled).
Kafka's ``--cancel`` prints ``None of the specified partition moves are active.`` without a line break; kbroker
ends the line.

Everything goes through kbroker's protocol codec (:mod:`kbroker.cli._wire`; confluent-kafka has neither
AlterPartitionReassignments nor ListPartitionReassignments): Metadata, AlterPartitionReassignments (API 45),
ListPartitionReassignments (API 46), IncrementalAlterConfigs; so the connection is plain TCP
(``security.protocol=PLAINTEXT``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_command_config,
    add_version,
    load_properties,
    run_tool,
    timeout_from_env,
    wire_ssl_context,
)

PROG = "kbroker-reassign-partitions"
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
ANY_LOG_DIR = "any"
BROKER_LEVEL_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                          "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_LEVEL_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
CANNOT_EXECUTE_MESSAGE = ("Cannot execute because there is an existing partition assignment.  Use --additional to "
                          "override this and create a new partition assignment in addition to the existing one. The "
                          "--additional flag can also be used to change the throttle by resubmitting the current "
                          "reassignment.")
VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.")
LOG_DIRS_UNSUPPORTED = ("kbroker-reassign-partitions --cancel does not cancel log directory moves: log_dirs must be "
                        "\"any\" (move the replica back with another --execute)")
TOPIC, BROKER = 2, 4  # ConfigResource types
OP_SET, OP_DELETE = 0, 1

TopicPartition = tuple[str, int]

# Which options each action requires and permits besides --bootstrap-server (Kafka's validateAndParseArgs).
REQUIRED = {"generate": ("topics_to_move_json_file", "broker_list"), "execute": ("reassignment_json_file",),
            "verify": ("reassignment_json_file",), "cancel": ("reassignment_json_file",), "list": ()}
PERMITTED = {"generate": ("command_config", "disable_rack_aware"),
             "execute": ("command_config", "additional", "throttle", "replica_alter_log_dirs_throttle", "timeout"),
             "verify": ("command_config", "preserve_throttles"),
             "cancel": ("command_config", "preserve_throttles", "timeout"),
             "list": ("command_config",)}
OPTIONS = ("command_config", "reassignment_json_file", "topics_to_move_json_file", "broker_list",
           "disable_rack_aware", "throttle", "replica_alter_log_dirs_throttle", "timeout", "additional",
           "preserve_throttles")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="This tool helps to move topic partitions between replicas.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to use for bootstrapping")
    add_command_config(p)
    p.add_argument("--generate", action="store_true", help="generate a candidate partition reassignment "
                                                           "configuration (it is not executed)")
    p.add_argument("--execute", action="store_true", help="start the reassignment of --reassignment-json-file")
    p.add_argument("--verify", action="store_true", help="check whether the reassignment of --reassignment-json-file "
                                                         "completed; once it has, remove the throttles")
    p.add_argument("--cancel", action="store_true", help="cancel an active reassignment")
    p.add_argument("--list", action="store_true", help="list all active partition reassignments")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='the partition reassignment: {"partitions": [{"topic": "foo", "partition": 1, '
                        '"replicas": [1,2,3], "log_dirs": ["any","any","any"]}], "version": 1} (log_dirs optional)')
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='with --generate: the topics to move, {"topics": [{"topic": "foo"}], "version": 1}')
    p.add_argument("--broker-list", metavar="BROKERLIST", help='with --generate: the brokers to move them to, "0,1,2"')
    p.add_argument("--disable-rack-aware", action="store_true", help="disable rack aware replica assignment")
    p.add_argument("--throttle", type=int, metavar="BYTES_PER_SEC",
                   help="with --execute: throttle the movement of partitions between brokers to this rate (bytes/s); "
                        "resubmit with --additional to change it")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, metavar="BYTES_PER_SEC",
                   help="accepted for compatibility: kbroker does not throttle moves between log directories")
    p.add_argument("--timeout", type=int, metavar="MS", help="accepted for compatibility (Kafka: how long to wait for "
                                                            "log directory moves to start); unused")
    p.add_argument("--additional", action="store_true", help="execute this reassignment in addition to ongoing ones "
                                                             "(also changes the throttle of an ongoing one)")
    p.add_argument("--preserve-throttles", action="store_true", help="do not modify broker or topic throttles")
    add_version(p)
    return p


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False  # --throttle 0 is given


def check_args(p: ToolParser, a: argparse.Namespace) -> str:
    """The action, after Kafka's checks: exactly one action, its required options, no option it does not take."""
    chosen = [x for x in ACTIONS if getattr(a, x)]
    if len(chosen) != 1:
        p.error("Command must include exactly one action: --generate, --execute, --verify, --cancel, --list")
    action = chosen[0]
    if not a.bootstrap_server:
        p.error("Missing required argument \"[bootstrap-server]\"")
    for name in REQUIRED[action]:
        if not _given(a, name):
            p.error(f"Missing required argument \"[{name.replace('_', '-')}]\"")
    for name in OPTIONS:
        if _given(a, name) and name not in REQUIRED[action] and name not in PERMITTED[action]:
            p.error(f"Option \"[{name.replace('_', '-')}]\" can't be used with action \"[{action}]\"")
    return action


# ------------------------------------------------------------------------------------------ JSON files


def replica_text(replica: tuple[str, int, int]) -> str:
    """Kafka's ``TopicPartitionReplica`` text: ``topic-partition-broker``."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def _replica_order(replica: tuple[str, int, int]) -> tuple[int, str, int]:
    return replica[2], replica[0], replica[1]


def tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _java_list(items: Iterable[Any]) -> str:
    """``[a, b]``: how Java prints a list or set."""
    return "[" + ", ".join(str(x) for x in items) + "]"


def _duplicates(items: Sequence[Any]) -> list[Any]:
    seen: set[Any] = set()
    dupes: list[Any] = []
    for x in items:
        if x in seen and x not in dupes:
            dupes.append(x)
        seen.add(x)
    return dupes


def _load_json(text: str) -> Any:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CliError(f"Error: The input string is not a valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise CliError("Error: The input string is not a JSON object")
    return doc


def _version(doc: Mapping[str, Any]) -> None:
    version = doc.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise CliError(f"Error: Not supported version field value {version}")


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CliError(f"Error: {what} must be an integer, not {json.dumps(value)}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise CliError(f"Error: {what} must be a string, not {json.dumps(value)}")
    return value


def _items(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise CliError(f"Error: \"{key}\" must be a list of JSON objects")
    return value


def parse_topics_to_move(text: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file`` (``{"topics": [{"topic": "t"}], "version": 1}``), in file
    order; duplicates are refused as Kafka does."""
    doc = _load_json(text)
    _version(doc)
    topics = []
    for item in _items(doc, "topics"):
        if "topic" not in item:
            raise CliError("Error: Missing \"topic\" field in " + json.dumps(item))
        topics.append(_str(item["topic"], "\"topic\""))
    dupes = _duplicates(topics)
    if dupes:
        raise CliError(f"Error: List of topics to reassign contains duplicate entries: {_java_list(dupes)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    """``--broker-list 1,2,3``; duplicates are refused as Kafka does."""
    brokers = []
    for item in text.split(","):
        try:
            brokers.append(int(item))
        except ValueError:
            raise CliError(f"Error: For input string: \"{item}\"") from None
    dupes = _duplicates(brokers)
    if dupes:
        raise CliError(f"Error: Broker list contains duplicate entries: {_java_list(dupes)}")
    return brokers


def parse_reassignment(text: str) -> tuple[list[tuple[TopicPartition, list[int]]], dict[tuple[str, int, int], str]]:
    """A ``--reassignment-json-file``: ``[((topic, partition), replicas)]`` in file order (duplicates kept, see
    :func:`check_execute_targets`) and the replicas given a log directory other than ``"any"``
    (``(topic, partition, broker) -> dir``)."""
    doc = _load_json(text)
    _version(doc)
    parts: list[tuple[TopicPartition, list[int]]] = []
    log_dirs: dict[tuple[str, int, int], str] = {}
    for item in _items(doc, "partitions"):
        for key in ("topic", "partition", "replicas"):
            if key not in item:
                raise CliError(f"Error: Missing \"{key}\" field in " + json.dumps(item))
        topic = _str(item["topic"], "\"topic\"")
        partition = _int(item["partition"], "\"partition\"")
        if not isinstance(item["replicas"], list):
            raise CliError(f"Error: \"replicas\" must be a list of broker ids, not {json.dumps(item['replicas'])}")
        replicas = [_int(r, "a replica") for r in item["replicas"]]
        dirs = item.get("log_dirs")
        if dirs is None:
            dirs = [ANY_LOG_DIR] * len(replicas)
        if not isinstance(dirs, list):
            raise CliError(f"Error: \"log_dirs\" must be a list of strings, not {json.dumps(dirs)}")
        dirs = [_str(d, "a log dir") for d in dirs]
        if len(dirs) != len(replicas):
            raise CliError(f"Error: Size of replicas list {_java_list(replicas)} is different from size of log dirs "
                           f"list {_java_list(dirs)} for partition {topic}-{partition}")
        parts.append(((topic, partition), replicas))
        for replica, log_dir in zip(replicas, dirs):
            if log_dir != ANY_LOG_DIR:
                log_dirs[(topic, partition, replica)] = log_dir
    return parts, log_dirs


def check_execute_targets(parts: Sequence[tuple[TopicPartition, list[int]]]) -> dict[TopicPartition, list[int]]:
    """Kafka's checks of an ``--execute`` file: not empty, no empty replica list, no partition twice, no broker twice
    in a replica list."""
    if not parts:
        raise CliError("Error: Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in parts):
        raise CliError("Error: Partition replica list cannot be empty")
    dupes = _duplicates([tp for tp, _ in parts])
    if dupes:
        raise CliError("Error: Partition reassignment contains duplicate topic partitions: "
                       + ",".join(tp_text(tp) for tp in dupes))
    repeated = [(tp, _duplicates(replicas)) for tp, replicas in parts if _duplicates(replicas)]
    if repeated:
        raise CliError("Error: Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{tp_text(tp)} contains multiple entries for {','.join(map(str, d))}" for tp, d in repeated))
    return dict(parts)


def reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson`` (every ``log_dirs`` entry ``"any"``): compact, sorted partitions."""
    partitions = [{"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
                   "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])} for t, p in sorted(assignment)]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ --generate


def generate_brokers(registered: Sequence[tuple[int, str | None]], wanted: Sequence[int],
                     rack_aware: bool) -> list[tuple[int, str | None]]:
    """The registered brokers of ``--broker-list`` with their racks (none with ``--disable-rack-aware``); racks on
    some brokers only are refused, as Kafka does."""
    chosen = [(b, rack if rack_aware else None) for b, rack in registered if b in set(wanted)]
    rackless = sum(1 for _, rack in chosen if rack is None)
    if rack_aware and rackless not in (0, len(chosen)):
        raise CliError("Error: Not all brokers have rack information. Add --disable-rack-aware in command line to "
                       "make replica assignment without rack information.")
    return chosen


def assign_replicas(brokers: Sequence[tuple[int, str | None]], num_partitions: int, replication_factor: int,
                    rng: random.Random) -> dict[int, list[int]]:
    """Replicas of partitions ``0..num_partitions-1`` over ``brokers`` (``(id, rack or None)``), as Kafka's
    ``AdminUtils.assignReplicasToBrokers`` with a random start index and shift: partition ``p`` starts at broker
    ``(start + p) % n`` of the (rack-alternated) broker order and its followers are placed at a shift that grows
    by one (times the number of racks) every ``n`` partitions. :func:`~kbroker.controller.replica_placement.
    place_replicas` places one partition at a time."""
    from kbroker.controller.replica_placement import place_replicas

    n = len(brokers)
    if replication_factor > n:
        raise CliError(f"Error: Replication factor: {replication_factor} larger than available brokers: {n}.")
    racks = {rack for _, rack in brokers}
    factor = len(racks) if None not in racks else 1
    start, shift = rng.randrange(n), rng.randrange(n)
    return {p: place_replicas(brokers, 1, replication_factor, p, start_index=start + p,
                              start_shift=(shift + p // n) * factor)[p]
            for p in range(num_partitions)}


def propose_assignment(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[tuple[int, str | None]],
                       rng: random.Random | None = None) -> dict[TopicPartition, list[int]]:
    """A new placement of every topic of ``current``: same partition count and replication factor (that of its
    first partition), replicas over ``brokers``."""
    rng = rng or random.Random()
    by_topic: dict[str, dict[int, Sequence[int]]] = {}
    for (topic, partition), replicas in current.items():
        by_topic.setdefault(topic, {})[partition] = replicas
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in sorted(by_topic):
        parts = by_topic[topic]
        rf = len(parts[min(parts)])
        for partition, replicas in assign_replicas(brokers, len(parts), rf, rng).items():
            proposed[(topic, partition)] = replicas
    return proposed


# ------------------------------------------------------------------------------------------ throttles


@dataclass
class PartitionMove:
    """The brokers a partition's data comes from (its current replicas) and goes to (the replicas added)."""

    sources: set[int] = field(default_factory=set)
    destinations: set[int] = field(default_factory=set)


def move_map(ongoing: Mapping[TopicPartition, Any], proposed: Mapping[TopicPartition, Sequence[int]],
             current: Mapping[TopicPartition, Sequence[int]]) -> dict[str, dict[int, PartitionMove]]:
    """``topic -> partition -> PartitionMove`` of the ongoing reassignments (``ongoing``: ``Reassignment`` objects)
    and the proposed ones (Kafka's ``calculateProposedMoveMap``): an ongoing one keeps its sources."""
    moves: dict[str, dict[int, PartitionMove]] = {}
    for (topic, partition), r in ongoing.items():
        moves.setdefault(topic, {})[partition] = PartitionMove(set(r.replicas) - set(r.adding), set(r.adding))
    for (topic, partition), replicas in proposed.items():
        parts = moves.setdefault(topic, {})
        if partition in parts:
            sources = set(parts[partition].sources)
        elif (topic, partition) in current:
            sources = set(current[(topic, partition)])
        else:
            raise CliError(f"Error: Trying to reassign a topic partition {topic}-{partition} with 0 replicas")
        parts[partition] = PartitionMove(sources, set(replicas) - sources)
    return moves


def leader_throttles(moves: Mapping[str, Mapping[int, PartitionMove]]) -> dict[str, str]:
    """``leader.replication.throttled.replicas`` per topic: ``partition:broker`` of every source, sorted as text."""
    return {topic: ",".join(sorted({f"{p}:{b}" for p, m in parts.items() for b in m.sources}))
            for topic, parts in moves.items()}


def follower_throttles(moves: Mapping[str, Mapping[int, PartitionMove]]) -> dict[str, str]:
    """``follower.replication.throttled.replicas`` per topic: ``partition:broker`` of every destination."""
    return {topic: ",".join(sorted({f"{p}:{b}" for p, m in parts.items() for b in m.destinations
                                    if b not in m.sources}))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: Mapping[str, Mapping[int, PartitionMove]]) -> list[int]:
    return sorted({b for parts in moves.values() for m in parts.values() for b in m.sources | m.destinations})


# ------------------------------------------------------------------------------------------ text


@dataclass(frozen=True)
class PartitionState:
    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool


def status_lines(states: Mapping[TopicPartition, PartitionState]) -> list[str]:
    """``--verify``'s report (Kafka's ``partitionReassignmentStatesToString``)."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        s = states[tp]
        if not s.done:
            lines.append(f"Reassignment of partition {tp_text(tp)} is still in progress.")
        elif s.current == s.target:
            lines.append(f"Reassignment of partition {tp_text(tp)} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp_text(tp)}, but replica set is "
                         f"{','.join(map(str, s.current))} rather than {','.join(map(str, s.target))}.")
    return lines


def list_lines(ongoing: Mapping[TopicPartition, Any]) -> list[str]:
    """``--list``'s report (Kafka's ``curReassignmentsToString``)."""
    if not ongoing:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{tp_text(tp)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding:
            line += f" adding: {','.join(map(str, r.adding))}."
        if r.removing:
            line += f" removing: {','.join(map(str, r.removing))}."
        lines.append(line)
    return lines


def _plural(n: int) -> str:
    return "" if n == 1 else "s"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


# ------------------------------------------------------------------------------------------ actions


class ReassignService:
    """The five actions against the cluster behind ``--bootstrap-server``."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kbroker.cli._wire import WireClient

        self.args = args
        tls = wire_ssl_context(load_properties(args.command_config), PROG)
        self.timeout = timeout_from_env()
        self.wire = WireClient(args.bootstrap_server, self.timeout, client_id="reassign-partitions-tool",
                               ssl_context=tls)

    def close(self) -> None:
        self.wire.close()

    # ---- cluster state
    def brokers(self) -> list[tuple[int, str | None]]:
        """Registered brokers ``(id, rack)``, by id."""
        return sorted((b.node_id, b.rack) for b in self.wire.metadata([]).brokers)

    def replica_assignment(self, topics: Iterable[str]) -> dict[TopicPartition, list[int]]:
        """Current replicas of every partition of ``topics``; an unknown topic is an error (Kafka's
        ``describeTopics``)."""
        from kbroker.cli._wire import error_text
        from kbroker.protocol.errors import ErrorCode

        names = sorted(set(topics))
        if not names:
            return {}
        out: dict[TopicPartition, list[int]] = {}
        for t in self.wire.metadata(names).topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"Error: Topic {t.name} not found.")
            if t.error_code:
                raise CliError(f"Error: {error_text(t.error_code)} (topic {t.name})")
            for p in t.partitions:
                out[(t.name, p.partition_index)] = list(p.replica_nodes)
        return out

    def partition_replicas(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, list[int]]:
        """Current replicas of ``partitions``, all of which must exist (Kafka's
        ``getReplicaAssignmentForPartitions``)."""
        wanted = set(partitions)
        found = {tp: r for tp, r in self.replica_assignment(t for t, _ in wanted).items() if tp in wanted}
        missing = sorted(wanted - set(found))
        if missing:
            raise CliError("Error: Unable to find partition: " + ", ".join(tp_text(tp) for tp in missing))
        return found

    def alter_configs(self, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]]) -> None:
        from kbroker.cli._wire import error_text

        if not resources:
            return
        for (rtype, name, _), (code, message) in zip(resources, self.wire.incremental_alter_configs(resources)):
            if code:
                what = f"topic {name}" if rtype == TOPIC else f"broker {name}"
                raise CliError(f"Error: {error_text(code, message)} ({what})")

    def clear_all_throttles(self, targets: Sequence[tuple[TopicPartition, list[int]]]) -> None:
        """Kafka's ``clearAllThrottles``: the broker throttles of every registered broker and every broker of
        the file, the topic throttles of every topic of the file."""
        brokers = sorted({b for b, _ in self.brokers()} | {b for _, replicas in targets for b in replicas})
        print(f"Clearing broker-level throttles on broker{_plural(len(brokers))} {','.join(map(str, brokers))}")
        self.alter_configs([(BROKER, str(b), [(k, OP_DELETE, None) for k in BROKER_LEVEL_THROTTLES])
                            for b in brokers])
        topics = sorted({t for (t, _), _ in targets})
        print(f"Clearing topic-level throttles on topic{_plural(len(topics))} {','.join(topics)}")
        self.alter_configs([(TOPIC, t, [(k, OP_DELETE, None) for k in TOPIC_LEVEL_THROTTLES]) for t in topics])

    # ---- actions
    def generate(self) -> None:
        a = self.args
        brokers = parse_broker_list(a.broker_list)
        topics = parse_topics_to_move(_read(a.topics_to_move_json_file))
        current = self.replica_assignment(topics)
        chosen = generate_brokers(self.brokers(), brokers, rack_aware=not a.disable_rack_aware)
        proposed = propose_assignment(current, chosen)
        print(f"Current partition replica assignment\n{reassignment_json(current)}\n")
        print(f"Proposed partition reassignment configuration\n{reassignment_json(proposed)}")

    def execute(self) -> None:
        from kbroker.cli._wire import error_text

        a = self.args
        parts, log_dirs = parse_reassignment(_read(a.reassignment_json_file))
        proposed = check_execute_targets(parts)
        ongoing = self.wire.list_partition_reassignments()
        if ongoing and not a.additional:
            raise CliError(CANNOT_EXECUTE_MESSAGE)
        registered = {b for b, _ in self.brokers()}
        unknown = sorted({b for replicas in proposed.values() for b in replicas} - registered)
        if unknown:
            raise CliError(f"Error: Unknown broker id {unknown[0]}")
        current = self.partition_replicas(proposed)
        print(f"Current partition replica assignment\n\n{reassignment_json(current)}\n\n"
              "Save this to use as the --reassignment-json-file option during rollback")
        throttle = a.throttle if a.throttle is not None else -1
        log_dir_throttle = a.replica_alter_log_dirs_throttle if a.replica_alter_log_dirs_throttle is not None else -1
        if throttle >= 0 or log_dir_throttle >= 0:
            print(VERIFY_WARNING)
            if throttle >= 0:
                moves = move_map(ongoing, proposed, current)
                leaders, followers = leader_throttles(moves), follower_throttles(moves)
                self.alter_configs([(TOPIC, t, [(TOPIC_LEVEL_THROTTLES[0], OP_SET, leaders[t]),
                                                (TOPIC_LEVEL_THROTTLES[1], OP_SET, followers[t])])
                                    for t in sorted(moves)])
                self.alter_configs([(BROKER, str(b), [(BROKER_LEVEL_THROTTLES[0], OP_SET, str(throttle)),
                                                      (BROKER_LEVEL_THROTTLES[1], OP_SET, str(throttle))])
                                    for b in reassigning_brokers(moves)])
                print(f"The inter-broker throttle limit was set to {throttle} B/s")
            if log_dir_throttle >= 0:
                print(f"The replica-alter-dir throttle limit was not set ({log_dir_throttle} B/s): kbroker does not "
                      "throttle moves between log directories")
        results = self.wire.alter_partition_reassignments(proposed, timeout_ms=int(self.timeout * 1000))
        errors = {tp: error_text(code, message) for tp, (code, message) in results.items() if code}
        if errors:
            raise CliError("Error reassigning partition(s):\n"
                           + "\n".join(f"{tp_text(tp)}: {errors[tp]}" for tp in sorted(errors)))
        print(f"Successfully started partition reassignment{_plural(len(proposed))} for "
              + ",".join(tp_text(tp) for tp in sorted(proposed)))
        if log_dirs:
            self.execute_log_dir_moves(log_dirs)

    def execute_log_dir_moves(self, moves: Mapping[tuple[str, int, int], str]) -> None:
        """AlterReplicaLogDirs to each replica's broker, again for replicas not created there yet
        (NOT_LEADER_OR_FOLLOWER) until ``--timeout``; Kafka's messages."""
        from kbroker.cli._wire import error_text
        from kbroker.protocol.errors import ErrorCode
        from kbroker.protocol.messages import AlterReplicaLogDirsRequest as Req

        pending = dict(moves)
        deadline = time.monotonic() + self.timeout
        while True:
            started: list[tuple[str, int, int]] = []
            by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
            for (t, p, b), d in pending.items():
                by_broker.setdefault(b, {}).setdefault(d, {}).setdefault(t, []).append(p)
            for broker, dirs in sorted(by_broker.items()):
                req = Req(dirs=[Req.AlterReplicaLogDir(path=d, topics=[
                    Req.AlterReplicaLogDirTopic(name=t, partitions=sorted(ps)) for t, ps in sorted(topics.items())])
                    for d, topics in sorted(dirs.items())])
                resp = self.wire.node(broker).send(req)
                for topic in resp.results:
                    for part in topic.partitions:
                        key = (topic.topic_name, part.partition_index, broker)
                        if part.error_code == 0:
                            started.append(key)
                        elif part.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                     ErrorCode.REPLICA_NOT_AVAILABLE):
                            raise CliError(f"Error: failed to move {replica_text(key)} to {pending[key]}: "
                                           f"{error_text(part.error_code, None)}")
            if started:
                print(f"Successfully started log directory move{_plural(len(started))} for: "
                      + ",".join(replica_text(r) for r in sorted(started, key=_replica_order)))
            for key in started:
                pending.pop(key, None)
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise CliError(f"Error: Timed out before log directory move{_plural(len(pending))} could be "
                               "started for: " + ",".join(replica_text(r) for r in sorted(pending, key=_replica_order)))
            time.sleep(0.1)

    def log_dir_move_lines(self, moves: Mapping[tuple[str, int, int], str]) -> list[str]:
        """Kafka's report of log directory moves (DescribeLogDirs of each broker), one line per replica."""
        from kbroker.protocol.messages import DescribeLogDirsRequest as Req

        found: dict[tuple[str, int, int], dict[bool, str]] = {}
        for broker in sorted({b for _, _, b in moves}):
            topics = {}
            for t, p, b in moves:
                if b == broker:
                    topics.setdefault(t, []).append(p)
            resp = self.wire.node(broker).send(Req(topics=[Req.DescribableLogDirTopic(topic=t, partitions=sorted(ps))
                                                           for t, ps in sorted(topics.items())]))
            for result in resp.results:
                if result.error_code:
                    continue
                for topic in result.topics:
                    for part in topic.partitions:
                        found.setdefault((topic.name, part.partition_index, broker), {})[part.is_future_key] = \
                            result.log_dir
        lines = []
        for key in sorted(moves, key=_replica_order):
            target, (t, p, b) = moves[key], key
            where = found.get(key, {})
            current, future = where.get(False), where.get(True)
            if current is None:
                lines.append(f"Partition {t}-{p} cannot be found in any live log directory on broker {b}.")
            elif future is not None:
                lines.append(f"Reassignment of replica {replica_text(key)} is still in progress." if future == target
                             else f"Partition {t}-{p} on broker {b} is being moved to log dir {future} instead of "
                                  f"{target}.")
            elif current == target:
                lines.append(f"Reassignment of replica {replica_text(key)} completed successfully.")
            else:
                lines.append(f"Partition {t}-{p} on broker {b} is not being moved from log dir {current} to "
                             f"{target}.")
        return lines

    def verify(self) -> None:
        a = self.args
        targets, log_dirs = parse_reassignment(_read(a.reassignment_json_file))
        ongoing = self.wire.list_partition_reassignments()
        states: dict[TopicPartition, PartitionState] = {}
        described: dict[TopicPartition, list[int]] = {}
        for topic in sorted({topic for (topic, p), _ in targets if (topic, p) not in ongoing}):
            try:
                described.update(self.replica_assignment([topic]))
            except CliError:  # an unknown topic: no replicas (Kafka's topicDescriptionFutureToState)
                pass
        for tp, target in targets:
            if tp in ongoing:
                states[tp] = PartitionState(ongoing[tp].replicas, tuple(target), False)
            else:
                states[tp] = PartitionState(tuple(described.get(tp, ())), tuple(target), True)
        for line in status_lines(states):
            print(line)
        moving = False
        if log_dirs:
            move_lines = self.log_dir_move_lines(log_dirs)
            moving = any(line.endswith("is still in progress.") for line in move_lines)
            for line in move_lines:
                print(line)
        else:
            print()  # Kafka prints its (here empty) report of log directory moves
        if not ongoing and not moving and not a.preserve_throttles:
            self.clear_all_throttles(targets)

    def cancel(self) -> None:
        from kbroker.cli._wire import error_text

        a = self.args
        targets, log_dirs = parse_reassignment(_read(a.reassignment_json_file))
        if log_dirs:
            raise CliError(f"Error: {LOG_DIRS_UNSUPPORTED}")
        wanted = {tp for tp, _ in targets}
        ongoing = self.wire.list_partition_reassignments(sorted(wanted)) if wanted else {}
        cancelling = sorted(tp for tp, r in ongoing.items() if tp in wanted and (not r.adding or r.removing))
        if cancelling:
            results = self.wire.alter_partition_reassignments({tp: None for tp in cancelling},
                                                              timeout_ms=int(self.timeout * 1000))
            errors = {tp: error_text(code, message) for tp, (code, message) in results.items() if code}
            if errors:
                raise CliError(f"Error cancelling partition reassignment{_plural(len(errors))} for:\n"
                               + "\n".join(f"{tp_text(tp)}: {errors[tp]}" for tp in sorted(errors)))
            print(f"Successfully cancelled partition reassignment{_plural(len(cancelling))} for: "
                  + ",".join(tp_text(tp) for tp in cancelling))
        else:
            print("None of the specified partition reassignments are active.")
        print("None of the specified partition moves are active.")
        if not a.preserve_throttles:
            self.clear_all_throttles(targets)

    def list(self) -> None:
        for line in list_lines(self.wire.list_partition_reassignments()):
            print(line)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    action = check_args(parser, args)

    def body() -> int:
        svc = ReassignService(args)
        try:
            getattr(svc, action)()
        finally:
            svc.close()
        sys.stdout.flush()
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
