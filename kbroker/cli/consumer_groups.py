"""``kbroker-consumer-groups``: list, describe, delete consumer groups and reset their offsets, like
``kafka-consumer-groups.sh``.

    kbroker-consumer-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    kbroker-consumer-groups --bootstrap-server localhost:9092 --describe --group g [--members|--state] [--verbose]
    kbroker-consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group g --topic t \\
        --to-earliest|--to-latest|--to-current|--to-offset N|--shift-by N|--to-datetime 2024-01-01T00:00:00.000 \\
        |--by-duration PT1H|--from-file plan.csv [--dry-run|--execute] [--export]
    kbroker-consumer-groups --bootstrap-server localhost:9092 --delete --group g
    kbroker-consumer-groups --bootstrap-server localhost:9092 --delete-offsets --group g --topic t[:0,1]

Columns and messages follow Kafka 4.x's ``ConsumerGroupCommand`` (GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, ...). Group operations use confluent-kafka's AdminClient;
``--delete-offsets`` sends OffsetDelete to the group coordinator through kbroker's protocol codec.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
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
    kafka_table,
    load_properties,
    result,
    run_tool,
    wire_ssl_context,
)

PROG = "kbroker-consumer-groups"
MISSING = "-"
OFFSET_INVALID = -1001
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets", "validate_regex")
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "shift_by", "from_file", "to_current",
             "to_offset")
STATE_NAMES = {"STABLE": "Stable", "PREPARING_REBALANCING": "PreparingRebalance",
               "COMPLETING_REBALANCING": "CompletingRebalance", "EMPTY": "Empty", "DEAD": "Dead", "UNKNOWN": "Unknown",
               "ASSIGNING": "Assigning", "RECONCILING": "Reconciling"}
TYPE_NAMES = {"CONSUMER": "Consumer", "CLASSIC": "Classic", "UNKNOWN": "Unknown"}
ERROR_MESSAGES = {
    "GROUP_ID_NOT_FOUND": "The group id does not exist.",
    "NON_EMPTY_GROUP": "The group is not empty.",
    "INVALID_GROUP_ID": "The configured groupId is invalid.",
    "GROUP_AUTHORIZATION_FAILED": "Group authorization failed.",
    "GROUP_SUBSCRIBED_TO_TOPIC": "The consumer group is actively subscribed to the topic",
    "UNKNOWN_TOPIC_OR_PARTITION": "This server does not host this topic-partition.",
    "TOPIC_AUTHORIZATION_FAILED": "Topic authorization failed.",
}


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="List all consumer groups, describe a consumer group, delete consumer "
                                          "group info, or reset consumer group offsets.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to connect to")
    add_command_config(p)
    p.add_argument("--list", action="store_true", help="list all consumer groups")
    p.add_argument("--describe", action="store_true", help="describe consumer group(s): offsets, lag, members")
    p.add_argument("--delete", action="store_true", help="delete consumer group(s) (must be empty)")
    p.add_argument("--reset-offsets", action="store_true", help="reset offsets of a consumer group (dry run unless "
                                                                 "--execute)")
    p.add_argument("--delete-offsets", action="store_true", help="delete offsets of a consumer group")
    p.add_argument("--validate-regex", metavar="REGEX", help="check a regular expression for subscriptions")
    p.add_argument("--group", action="append", default=[], help="the consumer group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--topic", action="append", default=[], help="topic, or topic:0,1,2 for some partitions")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for (reset)")
    p.add_argument("--members", action="store_true", help="describe the members of the group")
    p.add_argument("--offsets", action="store_true", help="describe the group's offsets (the default)")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="with --describe: the group state; with --list: show/filter states (comma-separated)")
    p.add_argument("--type", nargs="?", const="", metavar="TYPES", help="with --list: show/filter group types")
    p.add_argument("--verbose", action="store_true", help="more columns with --describe")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout for some calls (default 5000)")
    p.add_argument("--to-earliest", action="store_true", help="reset offsets to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset offsets to the latest offset")
    p.add_argument("--to-current", action="store_true", help="reset offsets to the current offset")
    p.add_argument("--to-offset", type=int, metavar="N", help="reset offsets to a specific offset")
    p.add_argument("--shift-by", type=int, metavar="N", help="shift the current offsets by N (may be negative)")
    p.add_argument("--to-datetime", metavar="DATETIME", help="reset to the offset at a time, "
                                                             "'YYYY-MM-DDTHH:mm:SS.sss' with an optional zone")
    p.add_argument("--by-duration", metavar="DURATION", help="reset to the offset this long ago, 'PnDTnHnMnS'")
    p.add_argument("--from-file", metavar="CSV", help="reset to the offsets in a CSV file")
    p.add_argument("--dry-run", action="store_true", help="only show the result of a reset (the default)")
    p.add_argument("--execute", action="store_true", help="execute the reset")
    p.add_argument("--export", action="store_true", help="print the reset plan as CSV")
    add_version(p)
    return p


def check_args(p: ToolParser, a: Any) -> None:
    chosen = [x for x in ACTIONS if getattr(a, x) not in (False, None)]
    if len(chosen) != 1:
        p.error("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                "--delete-offsets, --validate-regex")
    action = chosen[0]
    if action == "validate_regex":
        return
    if not a.bootstrap_server:
        p.error("Missing required argument \"[bootstrap-server]\"")
    if action in ("describe", "delete", "reset_offsets") and not (a.group or a.all_groups):
        p.error(f"Option [{action.replace('_', '-')}] takes one of these options: [all-groups], [group]")
    if a.group and a.all_groups:
        p.error("Option [group] can't be used with option [all-groups]")
    if action == "delete_offsets":
        if len(a.group) != 1 or not a.topic:
            p.error("Option [delete-offsets] takes the following options: [group], [topic] (one group)")
    if (a.members or a.offsets or a.verbose) and action != "describe":
        p.error("Options [members], [offsets] and [verbose] can only be used with [describe]")
    if a.state is not None and action not in ("describe", "list"):
        p.error("Option [state] can only be used with [describe] or [list]")
    if a.type is not None and action != "list":
        p.error("Option [type] can only be used with [list]")
    if action == "describe" and sum(bool(x) for x in (a.members, a.offsets, a.state is not None)) > 1:
        p.error("Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if action == "describe" and a.state:
        p.error("Option [describe] does not take a value for [state]")
    if a.topic and action not in ("reset_offsets", "delete_offsets"):
        p.error("Option [topic] can only be used with [reset-offsets] or [delete-offsets]")
    if a.all_topics and action != "reset_offsets":
        p.error("Option [all-topics] can only be used with [reset-offsets]")
    scenarios = [s for s in SCENARIOS if getattr(a, s) not in (False, None)]
    if scenarios and action != "reset_offsets":
        p.error("reset scenarios (--to-earliest, --to-offset, ...) can only be used with [reset-offsets]")
    if (a.dry_run or a.execute or a.export) and action != "reset_offsets":
        p.error("Options [dry-run], [execute] and [export] can only be used with [reset-offsets]")
    if action == "reset_offsets":
        if len(scenarios) != 1:
            p.error("Option [reset-offsets] takes exactly one of these options: --to-datetime, --by-duration, "
                    "--to-earliest, --to-latest, --shift-by, --from-file, --to-current, --to-offset")
        if a.dry_run and a.execute:
            p.error("Option [reset-offsets] only accepts one of [execute], [dry-run]")
        if a.topic and a.all_topics:
            p.error("Option [reset-offsets] takes only one of [topic], [all-topics]")
        if not (a.topic or a.all_topics or a.from_file):
            p.error("One of the reset scopes should be defined: --all-topics, --topic.")
        if not a.dry_run and not a.execute:
            print("WARN: No action will be performed as the --execute option is missing. In a future major "
                  "release, the default behavior of this command will be to prompt the user before executing the "
                  "reset rather than doing a dry run. You should add the --dry-run option explicitly if you are "
                  "scripting this command and want to keep the current default behavior without prompting.",
                  file=sys.stderr)


def parse_datetime(text: str) -> int:
    """Kafka's ``Utils.getDateTime``: ISO local date-time with optional millis and zone; no zone = local time."""
    s = text.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    s = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", s)
    try:
        value = dt.datetime.fromisoformat(s)
    except ValueError:
        raise CliError(f"Error parsing timestamp '{text}': expected format 'YYYY-MM-DDTHH:mm:SS.sss' with an "
                       "optional time zone (Z, +hh:mm, -hhmm)") from None
    if value.tzinfo is None:
        value = value.astimezone()
    return int(value.timestamp() * 1000)


def parse_duration(text: str) -> int:
    """ISO-8601 duration (Java ``Duration.parse``) -> milliseconds."""
    m = re.fullmatch(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d+)?)S)?)?",
                     text.strip(), re.I)
    if not m or text.strip().upper().endswith(("P", "T")):
        raise CliError(f"Error parsing duration '{text}': expected ISO-8601 format PnDTnHnMnS")
    sign, d, h, mi, s = m.groups()
    ms = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60) * 1000 + float((s or "0").replace(",", ".")) * 1000
    return int(-ms if sign == "-" else ms)


class GroupService:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.props = load_properties(args.command_config)
        self.admin = admin_client(args.bootstrap_server, self.props)
        check_reachable(self.admin, args.bootstrap_server)
        self.timeout = max(args.timeout / 1000.0, 1.0)
        self.failed = False

    def error(self, msg: str) -> None:
        print(f"\nError: {msg}")
        self.failed = True

    # ---- listing
    def group_listings(self) -> list[Any]:
        res = result(self.admin.list_consumer_groups(request_timeout=self.timeout))
        return sorted(res.valid, key=lambda g: g.group_id)

    def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g.group_id for g in self.group_listings()]
        return list(dict.fromkeys(self.args.group))

    def list(self) -> None:
        a = self.args
        listings = self.group_listings()
        if a.state is None and a.type is None:
            for g in listings:
                print(g.group_id)
            return
        states = self._parse_set(a.state, STATE_NAMES, "state") if a.state else set()
        types = self._parse_set(a.type, TYPE_NAMES, "types") if a.type else set()
        rows = []
        for g in listings:
            state = STATE_NAMES.get(getattr(g.state, "name", "UNKNOWN"), "Unknown")
            gtype = TYPE_NAMES.get(getattr(getattr(g, "type", None), "name", "UNKNOWN"), "Unknown")
            if states and state.lower() not in states:
                continue
            if types and gtype.lower() not in types:
                continue
            row = [g.group_id] + ([gtype] if a.type is not None else []) + ([state] if a.state is not None else [])
            rows.append(row)
        width = max([15] + [len(r[0]) for r in rows]) + 10
        header = ["GROUP"] + (["TYPE"] if a.type is not None else []) + (["STATE"] if a.state is not None else [])
        widths = [width] + [20] * (len(header) - 1)
        for line in kafka_table(header, rows, widths):
            print(line)

    @staticmethod
    def _parse_set(text: str, names: dict[str, str], what: str) -> set[str]:
        valid = {v.lower() for v in names.values() if v != "Unknown"}
        parsed = {s.strip().lower() for s in text.split(",") if s.strip()}
        if not parsed <= valid:
            label = "state" if what == "state" else "types"
            raise CliError(f"Invalid {label} list '{text}'. Valid {'states' if what == 'state' else 'types'} are: "
                           + ", ".join(sorted(v for v in names.values() if v != "Unknown")))
        return parsed

    # ---- describing
    def describe_groups(self, ids: list[str]) -> dict[str, Any]:
        if not ids:
            return {}
        futures = self.admin.describe_consumer_groups(ids, request_timeout=self.timeout)
        out = {}
        for gid, fut in futures.items():
            try:
                out[gid] = result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                if kafka_error_name(exc) == "GROUP_ID_NOT_FOUND":
                    out[gid] = None
                else:
                    raise CliError(f"Executing consumer group command failed due to {kafka_error_text(exc)}") from None
        return out

    def committed(self, gid: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(gid)],
                                                         request_timeout=self.timeout)
        try:
            res = result(futures[gid])
        except CliError:
            raise
        except Exception as exc:  # noqa: BLE001
            if kafka_error_name(exc) == "GROUP_ID_NOT_FOUND":
                return {}
            raise CliError(f"Executing consumer group command failed due to {kafka_error_text(exc)}") from None
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions or () if tp.offset != OFFSET_INVALID}

    def log_offsets(self, tps: list[tuple[str, int]], spec: Any) -> dict[tuple[str, int], int | None]:
        from confluent_kafka import TopicPartition

        if not tps:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, request_timeout=self.timeout)
        out: dict[tuple[str, int], int | None] = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = result(fut).offset
            except CliError:
                raise
            except Exception:  # noqa: BLE001 - unknown topic, no leader: Kafka shows "-"
                out[(tp.topic, tp.partition)] = None
        return out

    def _state(self, desc: Any) -> str:
        return "Dead" if desc is None else STATE_NAMES.get(getattr(desc.state, "name", "UNKNOWN"), "Unknown")

    def should_print(self, gid: str, state: str, rows: int | None) -> bool:
        if rows is None:
            self.error(f"The consumer group '{gid}' does not exist.")
            return False
        if state == "Dead":
            self.error(f"Consumer group '{gid}' does not exist.")
        elif state == "Empty":
            print(f"\nConsumer group '{gid}' has no active members.", file=sys.stderr)
        elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
            print(f"\nWarning: Consumer group '{gid}' is rebalancing.", file=sys.stderr)
        return state != "Dead" and rows > 0

    def describe(self) -> None:
        a = self.args
        ids = self.group_ids()
        descs = self.describe_groups(ids)
        for gid in sorted(descs):
            desc = descs[gid]
            if a.members:
                self.print_members(gid, desc)
            elif a.state is not None:
                self.print_state(gid, desc)
            else:
                self.print_offsets(gid, desc)
        sys.stdout.flush()

    def print_offsets(self, gid: str, desc: Any) -> None:
        from confluent_kafka.admin import OffsetSpec

        state = self._state(desc)
        committed = self.committed(gid)
        rows: list[list[Any]] = []
        assigned: set[tuple[str, int]] = set()
        members = [] if desc is None else [m for m in desc.members if m.assignment and m.assignment.topic_partitions]
        members.sort(key=lambda m: -len(m.assignment.topic_partitions))
        all_tps = {(tp.topic, tp.partition) for m in members for tp in m.assignment.topic_partitions} | set(committed)
        ends = self.log_offsets(sorted(all_tps), OffsetSpec.latest())

        def row(tp: tuple[str, int], cid: str, host: str, client: str) -> list[Any]:
            off = committed.get(tp)
            end = ends.get(tp)
            lag = end - off if off is not None and off != -1 and end is not None else None
            return [gid, tp[0], tp[1], off, end, lag, cid, host, client]

        for m in members:
            tps = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
            assigned.update(tps)
            rows += [row(tp, m.member_id, m.host, m.client_id) for tp in tps]
        rows += [row(tp, MISSING, MISSING, MISSING) for tp in sorted(set(committed) - assigned)]
        if not self.should_print(gid, state, len(rows) if desc is not None or committed else 0):
            return
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]
        widths = [15, 15, 10, 15, 15, 15, 15, 15, 0]
        print()
        for line in kafka_table(header, rows, widths):
            print(line)

    def print_members(self, gid: str, desc: Any) -> None:
        state = self._state(desc)
        members = [] if desc is None else list(desc.members)
        if not self.should_print(gid, state, len(members)):
            return
        with_instance = any(m.group_instance_id for m in members)
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + [
            "HOST", "CLIENT-ID", "#PARTITIONS"]
        widths = [15, 15] + ([17] if with_instance else []) + [15, 15, 15]
        if self.args.verbose:
            header += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
            widths += [15, 20, 15, 20]
        rows = []
        for m in members:
            tps = list(m.assignment.topic_partitions) if m.assignment else []
            r = [gid, m.member_id] + ([m.group_instance_id or ""] if with_instance else []) + [
                m.host, m.client_id, len(tps)]
            if self.args.verbose:
                r += [MISSING, assignment_text(tps), MISSING, MISSING]
            rows.append(r)
        print()
        for line in kafka_table(header, rows, widths):
            print(line)

    def print_state(self, gid: str, desc: Any) -> None:
        state = self._state(desc)
        if not self.should_print(gid, state, 1):
            return
        c = desc.coordinator
        coordinator = f"{c.host}:{c.port}  ({c.id})"
        strategy = desc.partition_assignor or MISSING
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        rows = [[gid, coordinator, strategy, state, len(desc.members)]]
        print()
        for line in kafka_table(header, rows, [15, 25, 20, 20, 0]):
            print(line)

    # ---- deleting
    def delete(self) -> None:
        ids = self.group_ids()
        if not ids:
            raise CliError("no consumer group to delete")
        futures = self.admin.delete_consumer_groups(ids, request_timeout=self.timeout)
        ok, failed = [], {}
        for gid, fut in futures.items():
            try:
                result(fut)
                ok.append(gid)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001
                failed[gid] = f"{kafka_error_name(exc)}: {kafka_error_text(exc)}"
        if not failed:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
            return
        self.error("Deletion of some consumer groups failed:")
        for gid, why in failed.items():
            print(f"* Group '{gid}' could not be deleted due to: {why}")
        if ok:
            print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in ok))

    def delete_offsets(self) -> None:
        from kbroker.cli._wire import WireClient, error_name
        from kbroker.protocol.messages import OffsetDeleteRequest as Req

        tls = wire_ssl_context(self.props, "--delete-offsets")
        gid = self.args.group[0]
        wanted: dict[str, set[int]] = {}
        status: dict[tuple[str, int], str] = {}
        for arg in self.args.topic:
            if ":" in arg:
                for t, p in parse_topic_partitions(arg):
                    wanted.setdefault(t, set()).add(p)
            else:
                parts = self.topic_partitions([arg], strict=False)
                if parts is None:
                    status[(arg, -1)] = "Error: UNKNOWN_TOPIC_OR_PARTITION: " + ERROR_MESSAGES["UNKNOWN_TOPIC_OR_PARTITION"]
                else:
                    wanted.setdefault(arg, set()).update(p for _, p in parts)
        req = Req(group_id=gid, topics=[Req.OffsetDeleteRequestTopic(
            name=t, partitions=[Req.OffsetDeleteRequestPartition(partition_index=p) for p in sorted(ps)])
            for t, ps in sorted(wanted.items())])
        with WireClient(self.args.bootstrap_server, timeout=max(self.timeout, 1.0), ssl_context=tls) as wire:
            resp = wire.group_coordinator(gid).send(req)
        top = error_name(resp.error_code) if resp.error_code else "NONE"
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    name = error_name(p.error_code)
                    status[(t.name, p.partition_index)] = f"Error: {name}: {ERROR_MESSAGES.get(name, name)}"
                else:
                    status[(t.name, p.partition_index)] = "Successful"
        if top != "NONE":
            for t, ps in wanted.items():
                for p in ps:
                    status.setdefault((t, p), f"Error: {top}: {ERROR_MESSAGES.get(top, top)}")
        partition_errors = any(s != "Successful" for s in status.values())
        if top == "NONE" and not partition_errors:
            print(f"Request succeeded for deleting offsets from group {gid}.")
        elif top in ("INVALID_GROUP_ID", "GROUP_ID_NOT_FOUND", "GROUP_AUTHORIZATION_FAILED", "NON_EMPTY_GROUP"):
            self.error(ERROR_MESSAGES.get(top, top))
        elif top in ("NONE", "GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PARTITION"):
            self.error("Encountered some partition-level error, see the follow-up details.")
        else:
            self.error(f"Encountered some unknown error: {top}")
        rows = [[t, p if p >= 0 else MISSING, s] for (t, p), s in sorted(status.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
        print()
        for line in kafka_table(["TOPIC", "PARTITION", "STATUS"], rows, [15, 10, 15]):
            print(line)

    def topic_partitions(self, topics: list[str], strict: bool = True) -> list[tuple[str, int]] | None:
        md = self.admin.list_topics(timeout=self.timeout)
        out = []
        for t in topics:
            tm = md.topics.get(t)
            if tm is None or tm.error is not None:
                if strict:
                    raise CliError(f"Executing consumer group command failed due to "
                                   f"UnknownTopicOrPartitionException: topic {t} does not exist")
                return None
            out += [(t, p) for p in sorted(tm.partitions)]
        return out

    # ---- resetting
    def reset_offsets(self) -> None:
        a = self.args
        ids = self.group_ids()
        descs = self.describe_groups(ids)
        plan: dict[str, dict[tuple[str, int], int]] = {}
        file_plan = self.read_plan_file() if a.from_file else None
        for gid in ids:
            state = self._state(descs.get(gid))
            if state not in ("Empty", "Dead"):
                self.error(f"Assignments can only be reset if the group '{gid}' is inactive, but the current state "
                           f"is {state}.")
                plan[gid] = {}
                continue
            offsets = self.prepare(gid, file_plan)
            if a.execute:
                self.alter(gid, offsets)
            plan[gid] = offsets
        if a.export:
            single = len(ids) == 1
            lines = []
            for gid, offsets in plan.items():
                for (t, p), off in sorted(offsets.items()):
                    lines.append(f"{t},{p},{off}" if single else f"{gid},{t},{p},{off}")
            print("\n".join(lines))
            return
        rows = [[gid, t, p, off] for gid in sorted(plan) for (t, p), off in sorted(plan[gid].items())]
        gw = max([15] + [len(g) for g in plan])
        tw = max([15] + [len(r[1]) for r in rows])
        print()
        if plan:
            for line in kafka_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [gw, tw, 10, 0]):
                print(line)

    def read_plan_file(self) -> dict[str, dict[tuple[str, int], int]]:
        try:
            with open(self.args.from_file) as fh:
                lines = [ln.strip() for ln in fh if ln.strip()]
        except OSError as exc:
            raise CliError(f"cannot read {self.args.from_file}: {exc.strerror or exc}") from None
        out: dict[str, dict[tuple[str, int], int]] = {}
        single = len(self.args.group) == 1 and all(len(ln.split(",")) == 3 for ln in lines)
        for ln in lines:
            cols = [c.strip() for c in ln.split(",")]
            try:
                if single and len(cols) == 3:
                    gid, (t, p, o) = self.args.group[0], cols
                elif len(cols) == 4:
                    gid, t, p, o = cols
                else:
                    raise ValueError
                out.setdefault(gid, {})[(t, int(p))] = int(o)
            except ValueError:
                raise CliError(f"invalid line in {self.args.from_file}: {ln!r} (expected topic,partition,offset "
                               "or group,topic,partition,offset)") from None
        return out

    def scope(self, gid: str) -> list[tuple[str, int]]:
        a = self.args
        if a.all_topics:
            return sorted(self.committed(gid))
        out: list[tuple[str, int]] = []
        plain = [t for t in a.topic if ":" not in t]
        for arg in a.topic:
            if ":" in arg:
                out += parse_topic_partitions(arg)
        out += self.topic_partitions(plain) or []
        return list(dict.fromkeys(out))

    def prepare(self, gid: str, file_plan: dict[str, dict[tuple[str, int], int]] | None) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        a = self.args
        if file_plan is not None:
            return dict(file_plan.get(gid, {}))
        tps = self.scope(gid)
        known = {(t, p) for t, p in self.topic_partitions(sorted({t for t, _ in tps}), strict=False) or ()}
        missing = [tp for tp in tps if tp not in known]
        if missing:
            raise CliError("The partitions " + ", ".join(f"{t}-{p}" for t, p in missing) + " do not exist")
        if a.to_earliest:
            return self._require(self.log_offsets(tps, OffsetSpec.earliest()), "starting")
        if a.to_latest:
            return self._require(self.log_offsets(tps, OffsetSpec.latest()), "ending")
        if a.to_current:
            current = self.committed(gid)
            ends = self.log_offsets([tp for tp in tps if tp not in current], OffsetSpec.latest())
            return {tp: current[tp] if tp in current else ends[tp] for tp in tps}  # type: ignore[misc]
        if a.to_offset is not None:
            return self.clamp({tp: a.to_offset for tp in tps})
        if a.shift_by is not None:
            current = self.committed(gid)
            for tp in tps:
                if tp not in current:
                    raise CliError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current "
                                   "committed offset")
            return self.clamp({tp: current[tp] + a.shift_by for tp in tps})
        if a.to_datetime or a.by_duration:
            ts = parse_datetime(a.to_datetime) if a.to_datetime else int(time.time() * 1000) - parse_duration(a.by_duration)
            found = self.log_offsets(tps, OffsetSpec.for_timestamp(ts))
            out: dict[tuple[str, int], int] = {}
            fallback = []
            for tp in tps:
                off = found.get(tp)
                if off is None or off < 0:
                    print(f"\nWarn: Partition {tp[1]} from topic {tp[0]} is empty. Falling back to latest known offset.")
                    fallback.append(tp)
                else:
                    out[tp] = off
            out.update(self._require(self.log_offsets(fallback, OffsetSpec.latest()), "ending"))
            return out
        raise CliError("no reset scenario")

    def _require(self, offsets: dict[tuple[str, int], int | None], which: str) -> dict[tuple[str, int], int]:
        for tp, off in offsets.items():
            if off is None or off < 0:
                raise CliError(f"Error getting {which} offset of topic partition: {tp[0]}-{tp[1]}")
        return offsets  # type: ignore[return-value]

    def clamp(self, requested: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        tps = list(requested)
        starts = self.log_offsets(tps, OffsetSpec.earliest())
        ends = self.log_offsets(tps, OffsetSpec.latest())
        out = {}
        for tp, off in requested.items():
            end, start = ends.get(tp), starts.get(tp)
            if end is not None and off > end:
                print(f"WARN: New offset ({off}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. "
                      f"Value will be set to {end}", file=sys.stderr)
                off = end
            elif start is not None and off < start:
                print(f"WARN: New offset ({off}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. "
                      f"Value will be set to {start}", file=sys.stderr)
                off = start
            out[tp] = off
        return out

    def alter(self, gid: str, offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not offsets:
            return
        tps = [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())]
        futures = self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(gid, tps)],
                                                          request_timeout=self.timeout)
        try:
            res = result(futures[gid])
        except CliError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CliError(f"Executing consumer group command failed due to {kafka_error_text(exc)}") from None
        bad = [f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in res.topic_partitions or () if tp.error]
        if bad:
            raise CliError("Executing consumer group command failed due to " + "; ".join(bad))


def parse_topic_partitions(arg: str) -> list[tuple[str, int]]:
    parts = arg.split(":")
    if len(parts) != 2:
        raise CliError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, plist = parts
    out = []
    for p in plist.split(","):
        try:
            out.append((topic, int(p)))
        except ValueError:
            raise CliError(f"Invalid partition '{p}' specified in topic arg '{arg}''") from None
    return out


def assignment_text(tps: list[Any]) -> str:
    if not tps:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{t}:" + ",".join(map(str, sorted(ps))) for t, ps in by_topic.items()))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)

    def body() -> int:
        if args.validate_regex is not None:
            try:
                re.compile(args.validate_regex)
                print(f"The regular expression `{args.validate_regex}` is valid.")
                return 0
            except re.error as exc:
                print(f"The regular expression `{args.validate_regex}` is invalid: {exc}.")
                return 1
        svc = GroupService(args)
        action = next(x for x in ACTIONS if getattr(args, x) not in (False, None))
        getattr(svc, action)()
        sys.stdout.flush()
        return 1 if svc.failed else 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
