"""``kbroker-leader-election``: elect partition leaders, like ``kafka-leader-election.sh``.

    kbroker-leader-election --bootstrap-server localhost:9092 --election-type preferred --topic t --partition 0
    kbroker-leader-election --bootstrap-server localhost:9092 --election-type PREFERRED --all-topic-partitions
    kbroker-leader-election --bootstrap-server localhost:9092 --election-type unclean --path-to-json-file p.json

Shapes (Kafka's ``LeaderElectionCommand``; facts only): ``--election-type`` is ``PREFERRED`` (make the first
replica the leader where it is not) or ``UNCLEAN`` (elect a leader for leaderless partitions), in any case;
exactly one of ``--topic`` (with ``--partition``), ``--all-topic-partitions`` (null partitions in the request:
the broker tries every partition and leaves out those that need no election) and ``--path-to-json-file``
(``{"partitions": [{"topic": "t", "partition": 0}]}``). Output, partitions sorted and joined by ``", "``::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <the broker's message>

and, when any partition failed, ``N replica(s) could not be elected`` on stderr with exit status 1
(Kafka prints the Java exception, class and message, where kbroker prints the message).

Errors: the argument checks of Kafka (``Missing required option(s): bootstrap-server, election-type``, ``One and
only one of the following options is required: topic, all-topic-partitions, path-to-json-file``, ``Missing
required option(s): partition``, ``Option partition is only allowed if topic is used``; exit 1 with the usage);
a JSON file that does not parse (``Replica election data is empty``), without ``partitions`` (``Replica election
data is missing "partitions" field``) or with a partition twice (``Replica election data contains duplicate
partitions: [t-0]``); ``Timeout waiting for election results``; ``Not authorized to perform leader election``.

Sends ElectLeaders (API 43) through confluent-kafka's ``AdminClient.elect_leaders`` (so ``--command-config`` may
configure TLS/SASL).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_command_config,
    add_version,
    admin_client,
    check_reachable,
    kafka_error_name,
    kafka_error_text,
    load_properties,
    result,
    run_tool,
    timeout_from_env,
)

PROG = "kbroker-leader-election"
ELECTION_TYPES = ("PREFERRED", "UNCLEAN")


def election_type(text: str) -> str:
    """``preferred``/``unclean`` in any case, as Kafka's enum converter reads them."""
    value = text.strip().upper()
    if value not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"Value [{text}] is not one of [{', '.join(ELECTION_TYPES)}]")
    return value


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="This tool attempts to elect a new leader for a set of topic partitions. "
                                          "The type of elections supported are preferred replicas and unclean "
                                          "replicas.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="REQUIRED: the broker(s) to connect to, host:port, comma-separated")
    add_command_config(p)
    p.add_argument("--election-type", type=election_type, metavar="TYPE",
                   help="REQUIRED: \"preferred\" (elect the preferred replica where it is not the leader) or "
                        "\"unclean\" (elect a leader where there is none)")
    p.add_argument("--topic", help="the topic of the partition to elect a leader for (needs --partition)")
    p.add_argument("--partition", type=int, help="the partition to elect a leader for (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="elect leaders for every eligible partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='the partitions, as {"partitions": [{"topic": "foo", "partition": 1}]}')
    add_version(p)
    return p


def check_args(p: ToolParser, a: argparse.Namespace) -> None:
    missing = [name for name, value in (("bootstrap-server", a.bootstrap_server), ("election-type", a.election_type))
               if not value]
    if missing:
        p.error("Missing required option(s): " + ", ".join(missing))
    if sum(1 for x in (a.topic is not None, a.all_topic_partitions, a.path_to_json_file is not None) if x) != 1:
        p.error("One and only one of the following options is required: topic, all-topic-partitions, "
                "path-to-json-file")
    if a.topic is not None and a.partition is None:
        p.error("Missing required option(s): partition")
    if a.topic is None and a.partition is not None:
        p.error("Option partition is only allowed if topic is used")


def parse_election_data(text: str) -> list[tuple[str, int]]:
    """The partitions of a ``--path-to-json-file``, in file order; duplicates are refused as Kafka does."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CliError(f"Replica election data is empty (not valid JSON: {exc})") from None
    if not isinstance(doc, dict):
        raise CliError("Replica election data must be a JSON object")
    if "partitions" not in doc:
        raise CliError("Replica election data is missing \"partitions\" field")
    items = doc["partitions"]
    if not isinstance(items, list):
        raise CliError("Replica election data: \"partitions\" must be a list")
    out: list[tuple[str, int]] = []
    for item in items:
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise CliError(f"Replica election data: each partition needs a \"topic\" string and a \"partition\" "
                           f"integer: {json.dumps(item)}")
        out.append((topic, partition))
    dupes = sorted({tp for tp in out if out.count(tp) > 1})
    if dupes:
        raise CliError("Replica election data contains duplicate partitions: ["
                       + ", ".join(f"{t}-{p}" for t, p in dupes) + "]")
    return out


def report(kind: str, results: dict[tuple[str, int], Any]) -> int:
    """Print Kafka's three kinds of lines for ``(topic, partition) -> KafkaError or None``; the failure count."""
    succeeded = sorted(tp for tp, err in results.items() if err is None)
    noop = sorted(tp for tp, err in results.items() if err is not None and err.name() == "ELECTION_NOT_NEEDED")
    failed = sorted(tp for tp, err in results.items() if err is not None and err.name() != "ELECTION_NOT_NEEDED")
    if succeeded:
        print(f"Successfully completed leader election ({kind}) for partitions "
              + ", ".join(f"{t}-{p}" for t, p in succeeded))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in noop))
    for t, p in failed:
        print(f"Error completing leader election ({kind}) for partition: {t}-{p}: {results[(t, p)].str()}")
    return len(failed)


def elect(args: argparse.Namespace, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], Any]:
    from confluent_kafka import ElectionType, TopicPartition

    admin = admin_client(args.bootstrap_server, load_properties(args.command_config))
    if not hasattr(admin, "elect_leaders"):
        raise CliError("this confluent-kafka has no AdminClient.elect_leaders (2.5 or later is needed)")
    check_reachable(admin, args.bootstrap_server)
    timeout = timeout_from_env()
    # No request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders fails with a TypeError when
    # given either; the request is bounded by socket.timeout.ms (client_config) and the wait below.
    future = admin.elect_leaders(ElectionType[args.election_type],
                                 None if partitions is None else [TopicPartition(t, p) for t, p in partitions])
    try:
        answer = result(future, timeout + 5)
    except CliError:
        print("Timeout waiting for election results")
        raise CliError("Timeout waiting for election results") from None
    except Exception as exc:  # noqa: BLE001 - KafkaException for the whole request
        name = kafka_error_name(exc)
        if name in ("_TIMED_OUT", "REQUEST_TIMED_OUT"):
            print("Timeout waiting for election results")
            raise CliError("Timeout waiting for election results") from None
        if name == "CLUSTER_AUTHORIZATION_FAILED":
            print("Not authorized to perform leader election")
            raise CliError("Not authorized to perform leader election") from None
        raise CliError(kafka_error_text(exc)) from None
    return {(tp.topic, tp.partition): err for tp, err in answer.items()}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)

    def body() -> int:
        partitions: list[tuple[str, int]] | None
        if args.path_to_json_file is not None:
            try:
                with open(args.path_to_json_file, encoding="utf-8") as fh:
                    partitions = parse_election_data(fh.read())
            except OSError as exc:
                raise CliError(f"cannot read {args.path_to_json_file}: {exc.strerror or exc}") from None
        elif args.topic is not None:
            partitions = [(args.topic, args.partition)]
        else:
            partitions = None  # --all-topic-partitions: the broker tries every partition
        failed = report(args.election_type, elect(args, partitions))
        sys.stdout.flush()
        if failed:
            raise CliError(f"{failed} replica(s) could not be elected")
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
