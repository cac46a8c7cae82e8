"""``kbroker-share-groups``: list, describe and delete share groups and reset their start offsets, like
``kafka-share-groups.sh`` (KIP-932).

    kbroker-share-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    kbroker-share-groups --bootstrap-server localhost:9092 --describe --group g [--members|--state|--offsets]
    kbroker-share-groups --bootstrap-server localhost:9092 --reset-offsets --group g --topic t[:0,1] \\
        --to-earliest|--to-latest|--to-offset N [--dry-run|--execute]
    kbroker-share-groups --bootstrap-server localhost:9092 --delete-offsets --group g --topic t
    kbroker-share-groups --bootstrap-server localhost:9092 --delete --group g

Columns follow Kafka 4.x's ``ShareGroupCommand`` (GROUP TOPIC PARTITION [LEADER-EPOCH] START-OFFSET LAG, laid out
as it does; GROUP TOPIC PARTITION NEW-OFFSET; GROUP CONSUMER-ID
HOST CLIENT-ID #PARTITIONS ASSIGNMENT; GROUP COORDINATOR (ID) STATE #MEMBERS). Requests go over kbroker's
protocol codec: ListGroups to every broker, ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets and DeleteGroups to the group coordinator, ListOffsets to the
partition leaders.
"""

from __future__ import annotations

import sys
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_command_config,
    add_version,
    kafka_table,
    print_lines,
)
from kbroker.cli._group_tools import WireGroupService, run_group_tool

PROG = "kbroker-share-groups"
ACTIONS = ("list", "describe", "reset_offsets", "delete_offsets", "delete")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="List all share groups, describe a share group, delete share group "
                                          "info, or reset share group start offsets.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to connect to")
    add_command_config(p)
    p.add_argument("--list", action="store_true", help="list all share groups")
    p.add_argument("--describe", action="store_true", help="describe share group(s): offsets, members, state")
    p.add_argument("--delete", action="store_true", help="delete share group(s) (must be empty)")
    p.add_argument("--reset-offsets", action="store_true", help="reset the start offsets of an empty share group "
                                                                 "(dry run unless --execute)")
    p.add_argument("--delete-offsets", action="store_true", help="delete a share group's state of topics")
    p.add_argument("--group", action="append", default=[], help="the share group (repeatable)")
    p.add_argument("--topic", action="append", default=[], help="topic, or topic:0,1,2 for some partitions")
    p.add_argument("--members", action="store_true", help="describe the members of the group")
    p.add_argument("--offsets", action="store_true", help="describe the group's start offsets (the default)")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="with --describe: the group state; with --list: show/filter states (comma-separated)")
    p.add_argument("--verbose", action="store_true", help="more columns with --describe")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout for some calls (default 5000)")
    p.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    p.add_argument("--to-offset", type=int, metavar="N", help="reset to a specific offset")
    p.add_argument("--dry-run", action="store_true", help="only show the result of a reset (the default)")
    p.add_argument("--execute", action="store_true", help="execute the reset")
    add_version(p)
    return p


def check_args(p: ToolParser, a: Any) -> None:
    chosen = [x for x in ACTIONS if getattr(a, x)]
    if len(chosen) != 1:
        p.error("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                "--delete-offsets")
    if not a.bootstrap_server:
        p.error("Missing required argument \"[bootstrap-server]\"")
    if chosen[0] != "list" and not a.group:
        p.error(f"Option [{'--' + chosen[0].replace('_', '-')}] takes one of these options: [group]")
    if chosen[0] in ("reset_offsets", "delete_offsets") and not a.topic:
        p.error(f"Option [{'--' + chosen[0].replace('_', '-')}] needs --topic")
    if chosen[0] == "reset_offsets" and sum([a.to_earliest, a.to_latest, a.to_offset is not None]) != 1:
        p.error("Option [reset-offsets] takes exactly one of these options: [to-earliest], [to-latest], [to-offset]")
    if sum([a.members, a.offsets, a.state is not None and chosen[0] == "describe"]) > 1:
        p.error("Option [describe] takes at most one of these options: [members], [offsets], [state]")


def parse_topic(arg: str) -> tuple[str, list[int] | None]:
    if ":" not in arg:
        return arg, None
    topic, _, parts = arg.rpartition(":")
    try:
        return topic, sorted({int(x) for x in parts.split(",") if x.strip()})
    except ValueError:
        raise CliError(f"invalid partitions in --topic {arg!r}") from None


class ShareGroupService(WireGroupService):
    PROG = PROG
    GROUP_TYPE = "share"
    DELETE_NOUN = "share groups"
    DELETE_ITEM = "Share group"

    def _listed(self, group: Any) -> bool:
        return group.group_type in ("share", None, "") and (group.protocol_type == "share"
                                                             or group.group_type == "share")

    # ---- describe
    def _describe_group(self, gid: str) -> Any:
        from kbroker.protocol.messages import ShareGroupDescribeRequest

        resp = self._to_coordinator(gid, ShareGroupDescribeRequest(group_ids=[gid]),
                                    lambda r: r.groups[0].error_code)
        return resp.groups[0]

    def describe(self) -> None:
        for gid in self.args.group:
            g = self._describe_group(gid)
            if g.error_code:
                print(f"Error: Executing share group command failed due to {self._error(g.error_code, g.error_message)}",
                      file=sys.stderr)
                self.failed = True
                continue
            if self.args.members:
                self._print_members(gid, g)
            elif self.args.state is not None:
                self._print_state(gid, g)
            else:
                self._print_offsets(gid, g)

    def _print_members(self, gid: str, g: Any) -> None:
        if not g.members:
            print(f"\nShare group '{gid}' has no active members.")
            return
        rows = []
        for m in g.members:
            by_topic = {tp.topic_name: sorted(tp.partitions) for tp in m.assignment.topic_partitions}
            parts = [p for ps in by_topic.values() for p in ps]
            assignment = ";".join(f"{t}:{','.join(str(p) for p in ps)}" for t, ps in sorted(by_topic.items()))
            rows.append([gid, m.member_id, m.client_host, m.client_id, len(parts), assignment or "-"]
                        + ([m.member_epoch] if self.args.verbose else []))
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        if self.args.verbose:
            header.append("MEMBER-EPOCH")
        print()
        print_lines(kafka_table(header, rows, [0] * len(header)))

    def _print_state(self, gid: str, g: Any) -> None:
        conn = self.wire.group_coordinator(gid)
        node = next((n for n, addr in self.wire.nodes().items() if f"{addr[0]}:{addr[1]}" == conn.address), -1)
        header = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
        row = [gid, f"{conn.address} ({node})", g.group_state, len(g.members)]
        if self.args.verbose:
            header[3:3] = ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
            row[3:3] = [g.group_epoch, g.assignment_epoch]
        print()
        print_lines(kafka_table(header, [row], [0] * len(header)))

    def _print_offsets(self, gid: str, g: Any) -> None:
        from kbroker.protocol.messages import DescribeShareGroupOffsetsRequest as Req

        resp = self._to_coordinator(gid, Req(groups=[Req.DescribeShareGroupOffsetsRequestGroup(
            group_id=gid, topics=None)]), lambda r: r.groups[0].error_code)
        rg = resp.groups[0]
        if rg.error_code:
            raise CliError(f"describing the offsets of {gid} failed: {self._error(rg.error_code, rg.error_message)}")
        rows = []
        for t in sorted(rg.topics, key=lambda t: t.topic_name):
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                start = "-" if p.start_offset < 0 or p.error_code else p.start_offset
                lag = "-" if p.lag < 0 or p.error_code else p.lag
                epoch = ([p.leader_epoch if p.leader_epoch >= 0 else "-"] if self.args.verbose else [])
                rows.append([gid, t.topic_name, p.partition_index, *epoch, start, lag])
        if not rows:
            print(f"\nShare group '{gid}' has no offsets.")
            return
        # Kafka's layout: GROUP and TOPIC at least 15 wide, PARTITION 10, LEADER-EPOCH (--verbose) and
        # START-OFFSET 13
        header = ["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if self.args.verbose else []), "START-OFFSET",
                  "LAG"]
        print()
        print_lines(kafka_table(header, rows, [15, 15, 10, *([13] if self.args.verbose else []), 13, 0]))

    # ---- reset, delete offsets, delete
    def _partitions(self) -> dict[str, list[int]]:
        wanted = [parse_topic(a) for a in self.args.topic]
        md = self.wire.metadata([t for t, _ in wanted])
        known = {t.name: sorted(p.partition_index for p in t.partitions) for t in md.topics if not t.error_code}
        out = {}
        for t, ps in wanted:
            if t not in known:
                raise CliError(f"Error: topic {t} does not exist")
            out[t] = ps if ps is not None else known[t]
        return out

    def _log_offsets(self, parts: dict[str, list[int]], timestamp: int) -> dict[tuple[str, int], int]:
        from kbroker.protocol.messages import ListOffsetsRequest as Req

        md = self.wire.metadata(list(parts))
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in md.topics:
            for p in t.partitions:
                if p.partition_index in parts.get(t.name, ()):
                    by_leader.setdefault(p.leader_id, {}).setdefault(t.name, []).append(p.partition_index)
        out = {}
        for leader, topics in by_leader.items():
            resp = self.wire.node(leader).send(Req(replica_id=-1, topics=[Req.ListOffsetsTopic(
                name=t, partitions=[Req.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps])
                for t, ps in topics.items()]))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise CliError(f"ListOffsets {t.name}-{p.partition_index}: {self._error(p.error_code)}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    def reset_offsets(self) -> None:
        from kbroker.protocol.messages import AlterShareGroupOffsetsRequest as Req

        gid = self.args.group[0]
        parts = self._partitions()
        if self.args.to_offset is not None:
            plan = {(t, p): self.args.to_offset for t, ps in parts.items() for p in ps}
        else:
            plan = self._log_offsets(parts, -2 if self.args.to_earliest else -1)
        errors: dict[tuple[str, int], str] = {}
        if self.args.execute:
            resp = self._to_coordinator(gid, Req(group_id=gid, topics=[Req.AlterShareGroupOffsetsRequestTopic(
                topic_name=t, partitions=[Req.AlterShareGroupOffsetsRequestPartition(
                    partition_index=p, start_offset=plan[(t, p)]) for p in ps]) for t, ps in parts.items()]),
                lambda r: r.error_code)
            if resp.error_code:
                raise CliError(f"Error: Assignments can only be reset if the group '{gid}' is inactive, but the "
                               f"current state is not: {self._error(resp.error_code, resp.error_message)}")
            for t in resp.responses:
                for p in t.partitions:
                    if p.error_code:
                        errors[(t.topic_name, p.partition_index)] = self._error(p.error_code, p.error_message)
        rows = [[gid, t, p, errors.get((t, p), off)] for (t, p), off in sorted(plan.items())]
        print()
        print_lines(kafka_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [15, 15, 10, 0]))
        self.failed = bool(errors)

    def delete_offsets(self) -> None:
        from kbroker.protocol.messages import DeleteShareGroupOffsetsRequest as Req

        gid = self.args.group[0]
        topics = [parse_topic(a)[0] for a in self.args.topic]
        resp = self.wire.group_coordinator(gid).send(Req(group_id=gid, topics=[
            Req.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]))
        if resp.error_code:
            raise CliError(f"Error: Encountered some issues while deleting offsets in the share group '{gid}': "
                           f"{self._error(resp.error_code, resp.error_message)}")
        rows = []
        for t in resp.responses:
            ok = not t.error_code
            self.failed |= not ok
            rows.append([t.topic_name, "Successful" if ok else f"Error: {self._error(t.error_code, t.error_message)}"])
        print()
        print_lines(kafka_table(["TOPIC", "STATUS"], rows, [0, 0]))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_group_tool(ShareGroupService, args, ACTIONS)


if __name__ == "__main__":
    sys.exit(main())
