"""``kbroker-topics``: create, delete, describe, alter and list topics, like ``kafka-topics.sh``.

    kbroker-topics --bootstrap-server localhost:9092 --create --topic t --partitions 3 --config retention.ms=60000
    kbroker-topics --bootstrap-server localhost:9092 --describe --topic t
    kbroker-topics --bootstrap-server localhost:9092 --alter --topic t --partitions 6
    kbroker-topics --bootstrap-server localhost:9092 --list [--exclude-internal]
    kbroker-topics --bootstrap-server localhost:9092 --delete --topic t [--if-exists]

Flags, messages and output follow Kafka 4.x's ``TopicCommand``: ``--topic`` is a regular expression for every
action but ``--create``; ``--describe`` prints ``Topic: t<TAB>TopicId: ...<TAB>PartitionCount: ...`` and one
line per partition. Everything goes through the Kafka protocol (confluent-kafka's AdminClient; the ELR
columns come from DescribeTopicPartitions when the broker has it).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_bootstrap,
    add_command_config,
    add_version,
    admin_client,
    check_reachable,
    kafka_error_text,
    load_properties,
    result,
    run_tool,
    wire_ssl_context,
)

PROG = "kbroker-topics"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ACTIONS = ("list", "describe", "create", "alter", "delete")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Create, delete, describe, or change a topic.")
    add_bootstrap(p, required=False)
    add_command_config(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=f"{action} topics")
    p.add_argument("--topic", help="the topic to create, or a regular expression of topics to alter, describe "
                                   "or delete (',' separates alternatives)")
    p.add_argument("--topic-id", help="the topic id to describe (only with --describe)")
    p.add_argument("--partitions", type=int, help="number of partitions to create, or to grow to with --alter")
    p.add_argument("--replication-factor", type=int, help="replication factor of the new topic")
    p.add_argument("--replica-assignment", help="manual assignment: broker_id_for_part1_replica1:"
                                                "broker_id_for_part1_replica2,broker_id_for_part2_replica1,...")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="a topic configuration override for the topic being created (repeatable)")
    p.add_argument("--delete-config", action="append", default=[], help=argparsesuppress())
    p.add_argument("--if-exists", action="store_true", help="only act if the topic exists (alter, delete, describe)")
    p.add_argument("--if-not-exists", action="store_true", help="only create the topic if it does not exist")
    p.add_argument("--exclude-internal", action="store_true", help="exclude internal topics from list/describe")
    p.add_argument("--under-replicated-partitions", action="store_true", help="only partitions whose ISR is short")
    p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without an available leader")
    p.add_argument("--under-min-isr-partitions", action="store_true", help="only partitions with ISR < min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true", help="only partitions with ISR = min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true", help="only topics that override configs")
    p.add_argument("--partition-size-limit-per-response", type=int, help="accepted for compatibility; ignored")
    add_version(p)
    return p


def argparsesuppress() -> str:
    import argparse

    return argparse.SUPPRESS


def check_args(p: ToolParser, a: Any) -> None:
    chosen = [x for x in ACTIONS if getattr(a, x)]
    if len(chosen) != 1:
        p.error("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = chosen[0]
    if not a.bootstrap_server:
        p.error("Missing required argument \"[bootstrap-server]\"")
    if action in ("create", "alter", "delete") and not a.topic:
        p.error("Missing required argument \"[topic]\"")
    if a.topic_id and action != "describe":
        p.error("Option \"[topic-id]\" can only be used with option \"[describe]\"")
    if action == "alter" and a.partitions is None:
        p.error("Missing required argument \"[partitions]\"")
    if action == "alter" and a.config:
        p.error("Option \"[config]\" can't be used with option \"[alter]\": use kbroker-configs --alter")
    if a.delete_config:
        p.error("Option \"[delete-config]\" is not supported with --bootstrap-server: use kbroker-configs --alter "
                "--delete-config")
    if a.config and action != "create":
        p.error("Option \"[config]\" can only be used with option \"[create]\"")
    if a.replication_factor is not None and action != "create":
        p.error("Option \"[replication-factor]\" can only be used with option \"[create]\"")
    if a.partitions is not None and action not in ("create", "alter"):
        p.error("Option \"[partitions]\" can only be used with options \"[create]\" or \"[alter]\"")
    if a.replica_assignment and action not in ("create", "alter"):
        p.error("Option \"[replica-assignment]\" can only be used with options \"[create]\" or \"[alter]\"")
    if a.replica_assignment and (a.partitions is not None and action == "create" or a.replication_factor is not None):
        p.error("Option \"[replica-assignment]\" can't be used with options \"[partitions]\" or "
                "\"[replication-factor]\" when creating a topic")
    if a.if_exists and action not in ("alter", "delete", "describe"):
        p.error("Option \"[if-exists]\" can only be used with options \"[alter]\", \"[delete]\" or \"[describe]\"")
    if a.if_not_exists and action != "create":
        p.error("Option \"[if-not-exists]\" can only be used with option \"[create]\"")
    if a.exclude_internal and action not in ("list", "describe"):
        p.error("Option \"[exclude-internal]\" can only be used with options \"[list]\" or \"[describe]\"")
    reports = [a.under_replicated_partitions, a.unavailable_partitions, a.under_min_isr_partitions,
               a.at_min_isr_partitions, a.topics_with_overrides]
    if any(reports) and action != "describe":
        p.error("the --under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions, "
                "--at-min-isr-partitions and --topics-with-overrides options only work with --describe")
    if sum(bool(x) for x in reports) > 1:
        p.error("only one of --under-replicated-partitions, --unavailable-partitions, --under-min-isr-partitions, "
                "--at-min-isr-partitions and --topics-with-overrides can be used at a time")


def kafka_uuid(u: Any) -> str:
    """confluent-kafka's ``Uuid`` prints standard base64; Kafka prints URL-safe base64 without padding."""
    import struct

    from kbroker.controller.uuids import uuid_to_str

    if u is None:
        return ""
    return uuid_to_str(struct.pack(">qq", u.get_most_significant_bits(), u.get_least_significant_bits()))


def include_filter(pattern: str) -> re.Pattern[str]:
    """Kafka's ``IncludeList``: commas separate alternatives, spaces and surrounding quotes are dropped."""
    text = pattern.strip().replace(",", "|").replace(" ", "")
    text = re.sub(r"^[\"']+", "", text)
    text = re.sub(r"[\"']+$", "", text)
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"invalid topic regular expression {pattern!r}: {exc}") from None


def parse_replica_assignment(text: str) -> list[list[int]]:
    out: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(x.strip()) for x in part.split(":")]
        except ValueError:
            raise CliError(f"invalid --replica-assignment {text!r}") from None
        dupes = sorted({b for b in brokers if brokers.count(b) > 1})
        if dupes:
            raise CliError("Partition replica lists may not contain duplicate entries: " + ",".join(map(str, dupes)))
        if out and len(brokers) != len(out[0]):
            raise CliError(f"Partition {i} has different replication factor: {brokers}")
        out.append(brokers)
    return out


def parse_topic_configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2:
            raise CliError("requirement failed: Invalid topic config: all configs to be added must be in the "
                           "format \"key=val\".")
        out[parts[0].strip()] = parts[1].strip()
    return out


class TopicService:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.props = load_properties(args.command_config)
        self.admin = admin_client(args.bootstrap_server, self.props)
        check_reachable(self.admin, args.bootstrap_server)

    def all_topics(self, exclude_internal: bool) -> list[str]:
        from confluent_kafka import KafkaException

        try:
            md = self.admin.list_topics(timeout=10)
        except KafkaException as exc:
            raise CliError(kafka_error_text(exc)) from None
        names = sorted(md.topics)
        if exclude_internal:
            names = [n for n in names if n not in INTERNAL_TOPICS]
        return names

    def topics(self, exclude_internal: bool) -> list[str]:
        names = self.all_topics(exclude_internal)
        if self.args.topic:
            rx = include_filter(self.args.topic)
            names = [n for n in names if rx.fullmatch(n)]
        return names

    def ensure_exists(self, found: list[str]) -> None:
        if self.args.topic and not found and not self.args.if_exists:
            raise CliError(f"Topic '{self.args.topic}' does not exist as expected", status=1)

    # ---- actions
    def create(self) -> None:
        from confluent_kafka.admin import NewTopic

        a = self.args
        name = a.topic
        if "." in name or "_" in name:
            print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
                  "could collide. To avoid issues it is best to use either, but not both.")
        if a.replication_factor is not None and not 1 <= a.replication_factor <= 32767:
            raise CliError("The replication factor must be between 1 and 32767 inclusive")
        if a.partitions is not None and a.partitions < 1:
            raise CliError("The partitions must be greater than 0")
        configs = parse_topic_configs(a.config)
        if a.replica_assignment:
            assignment = parse_replica_assignment(a.replica_assignment)
            # confluent-kafka 2.16 takes num_partitions -1 (its default) for a count next to the assignment and
            # refuses the pair ("mutually exclusive"); the assignment's own count is what CreateTopics sends anyway
            topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=configs)
        else:
            topic = NewTopic(name, num_partitions=a.partitions if a.partitions is not None else -1,
                             replication_factor=a.replication_factor if a.replication_factor is not None else -1,
                             config=configs)
        futures = self.admin.create_topics([topic], request_timeout=10, operation_timeout=10)
        try:
            result(futures[name])
        except CliError:
            raise
        except Exception as exc:  # noqa: BLE001 - KafkaException from the future
            from kbroker.cli._common import kafka_error_name

            if kafka_error_name(exc) == "TOPIC_ALREADY_EXISTS" and a.if_not_exists:
                return
            raise CliError(f"Error while executing topic command : {kafka_error_text(exc)}") from None
        print(f"Created topic {name}.")

    def list(self) -> None:
        print("\n".join(self.topics(self.args.exclude_internal)))

    def delete(self) -> None:
        found = self.topics(False)
        self.ensure_exists(found)
        if not found:
            return
        futures = self.admin.delete_topics(found, request_timeout=10, operation_timeout=10)
        failed = []
        for name, fut in futures.items():
            try:
                result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                failed.append(f"{name}: {kafka_error_text(exc)}")
        if failed:
            raise CliError("Error while executing topic command : " + "; ".join(failed))

    def alter(self) -> None:
        from confluent_kafka.admin import NewPartitions

        a = self.args
        found = self.topics(False)
        self.ensure_exists(found)
        if not found:
            return
        assignment = parse_replica_assignment(a.replica_assignment) if a.replica_assignment else None
        parts = []
        for name in found:
            if assignment is not None:
                current = len(self.describe_topics([name])[name].partitions)
                parts.append(NewPartitions(name, a.partitions, assignment[current:]))
            else:
                parts.append(NewPartitions(name, a.partitions))
        futures = self.admin.create_partitions(parts, request_timeout=10, operation_timeout=10)
        failed = []
        for name, fut in futures.items():
            try:
                result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                failed.append(kafka_error_text(exc))
        if failed:
            raise CliError("Error while executing topic command : " + "; ".join(failed))

    def describe_topics(self, names: list[str]) -> dict[str, Any]:
        from confluent_kafka import TopicCollection

        futures = self.admin.describe_topics(TopicCollection(names), request_timeout=10)
        out = {}
        for name, fut in futures.items():
            try:
                out[name] = result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise CliError(f"Error while executing topic command : {kafka_error_text(exc)}") from None
        return out

    def topic_configs(self, names: list[str]) -> dict[str, dict[str, Any]]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        if not names:
            return {}
        futures = self.admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                              request_timeout=10)
        out = {}
        for res, fut in futures.items():
            try:
                out[res.name] = result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise CliError(f"Error while executing topic command : {kafka_error_text(exc)}") from None
        return out

    def elr(self, names: list[str]) -> dict[tuple[str, int], tuple[list[int] | None, list[int] | None]]:
        """(topic, partition) -> (ELR, last known ELR) from DescribeTopicPartitions, when the broker has it."""
        from kbroker.cli._wire import WireClient
        from kbroker.protocol.messages import DescribeTopicPartitionsRequest

        out: dict[tuple[str, int], tuple[list[int] | None, list[int] | None]] = {}
        try:
            with WireClient(self.args.bootstrap_server, ssl_context=wire_ssl_context(self.props, PROG)) as wire:
                conn = wire.any_broker()
                if not conn.supports(DescribeTopicPartitionsRequest):
                    return out
                cursor = None
                while True:
                    req = DescribeTopicPartitionsRequest(
                        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in names],
                        response_partition_limit=2000, cursor=cursor)
                    resp = conn.send(req)
                    for t in resp.topics:
                        for p in t.partitions:
                            out[(t.name, p.partition_index)] = (p.eligible_leader_replicas, p.last_known_elr)
                    if resp.next_cursor is None:
                        return out
                    cursor = DescribeTopicPartitionsRequest.Cursor(topic_name=resp.next_cursor.topic_name,
                                                                   partition_index=resp.next_cursor.partition_index)
        except CliError:
            return out

    def describe(self) -> None:
        a = self.args
        if a.topic_id:
            names = self.topic_names_by_id(a.topic_id)
            if not names and not a.if_exists:
                raise CliError(f"TopicId '{a.topic_id}' does not exist as expected")
        else:
            names = self.topics(a.exclude_internal)
            self.ensure_exists(names)
        if not names:
            return
        descs = self.describe_topics(names)
        configs = self.topic_configs(names)
        live = {n.id for n in result(self.admin.describe_cluster(request_timeout=10)).nodes}
        elr = self.elr(names)
        report = (a.under_replicated_partitions or a.unavailable_partitions or a.under_min_isr_partitions
                  or a.at_min_isr_partitions)
        for name in sorted(descs):
            d = descs[name]
            cfg = configs.get(name, {})
            parts = sorted(d.partitions, key=lambda p: p.id)
            non_default = sorted((k, v.value) for k, v in cfg.items() if not v.is_default)
            if not report and (not a.topics_with_overrides or non_default):
                rf = len(parts[0].replicas) if parts else 0
                line = f"Topic: {name}"
                tid = kafka_uuid(d.topic_id)
                if tid and tid != "AAAAAAAAAAAAAAAAAAAAAA":
                    line += f"\tTopicId: {tid}"
                line += f"\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}"
                line += "\tConfigs: " + ",".join(f"{k}={v}" for k, v in non_default)
                print(line)
            if a.topics_with_overrides:
                continue
            min_isr_entry = cfg.get("min.insync.replicas")
            min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else 1
            for p in parts:
                leader = p.leader.id if p.leader is not None and p.leader.id >= 0 else None
                isr = [n.id for n in p.isr]
                replicas = [n.id for n in p.replicas]
                if a.under_replicated_partitions and not len(replicas) - len(isr) > 0:
                    continue
                if a.unavailable_partitions and not (leader is None or leader not in live):
                    continue
                if a.under_min_isr_partitions and not (leader is None or len(isr) < min_isr):
                    continue
                if a.at_min_isr_partitions and not len(isr) == min_isr:
                    continue
                e, lk = elr.get((name, p.id), (None, None))
                line = (f"\tTopic: {name}\tPartition: {p.id}\tLeader: {leader if leader is not None else 'none'}"
                        f"\tReplicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}")
                line += "\tElr: " + (",".join(map(str, e)) if e is not None else "N/A")
                line += "\tLastKnownElr: " + (",".join(map(str, lk)) if lk is not None else "N/A")
                print(line)

    def topic_names_by_id(self, topic_id: str) -> list[str]:
        names = self.all_topics(self.args.exclude_internal)
        descs = self.describe_topics(names) if names else {}
        return [n for n, d in descs.items() if kafka_uuid(d.topic_id) == topic_id]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)

    def body() -> int:
        svc = TopicService(args)
        action = next(x for x in ACTIONS if getattr(args, x))
        getattr(svc, action)()
        sys.stdout.flush()
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
