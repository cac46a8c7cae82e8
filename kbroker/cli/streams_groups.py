"""``kbroker-streams-groups``: list, describe and delete streams groups (KIP-1071), like Kafka's
``kafka-streams-groups.sh``.

    kbroker-streams-groups --bootstrap-server localhost:9092 --list [--state [Stable,Empty]]
    kbroker-streams-groups --bootstrap-server localhost:9092 --describe --group g [--members|--state|--offsets] \
        [--verbose]
    kbroker-streams-groups --bootstrap-server localhost:9092 --delete --group g

Columns follow Kafka 4.3's ``StreamsGroupCommand`` (GROUP STATE; GROUP TOPIC PARTITION OFFSET-LAG; GROUP
COORDINATOR (ID) STATE [GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH] #MEMBERS; GROUP [TARGET-ASSIGNMENT-EPOCH TOPOLOGY-EPOCH]
MEMBER [MEMBER-PROTOCOL MEMBER-EPOCH] PROCESS CLIENT-ID ASSIGNMENTS), laid out as it does; rows are sorted.
Requests go over kbroker's protocol codec: ListGroups to every broker, StreamsGroupDescribe, OffsetFetch and
DeleteGroups to the group coordinator, ListOffsets to the partition leaders. Not implemented: ``--reset-offsets``,
``--delete-offsets``, ``--all-groups``, and ``--verbose`` with ``--offsets``.
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

PROG = "kbroker-streams-groups"
ACTIONS = ("list", "describe", "delete")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="List all streams groups, describe a streams group, or delete streams "
                                          "group info.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the server(s) to connect to")
    add_command_config(p)
    p.add_argument("--list", action="store_true", help="list all streams groups")
    p.add_argument("--describe", action="store_true", help="describe streams group(s): offsets, members, state")
    p.add_argument("--delete", action="store_true", help="delete streams group(s) (must be empty)")
    p.add_argument("--group", action="append", default=[], help="the streams group (repeatable)")
    p.add_argument("--members", action="store_true", help="describe the members of the group")
    p.add_argument("--offsets", action="store_true", help="describe the group's offsets and lag (the default)")
    p.add_argument("--state", nargs="?", const="", metavar="STATES",
                   help="with --describe: the group state; with --list: show/filter states (comma-separated)")
    p.add_argument("--verbose", action="store_true", help="more columns with --describe")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout for some calls (default 5000)")
    add_version(p)
    return p


def check_args(p: ToolParser, a: Any) -> None:
    chosen = [x for x in ACTIONS if getattr(a, x)]
    if len(chosen) != 1:
        p.error("Command must include exactly one action: --list, --describe, --delete")
    if not a.bootstrap_server:
        p.error("Missing required argument \"[bootstrap-server]\"")
    if chosen[0] != "list" and not a.group:
        p.error(f"Option [--{chosen[0]}] takes one of these options: [group]")
    if sum([a.members, a.offsets, a.state is not None and chosen[0] == "describe"]) > 1:
        p.error("Option [describe] takes at most one of these options: [members], [offsets], [state]")


def task_text(kind: str, tasks: list[Any]) -> str:
    """``ACTIVE: 0:[0,1,2]; 1:[0,1,2]; `` (Kafka's layout; empty without tasks)."""
    if not tasks:
        return ""
    parts = "".join(f"{t.subtopology_id}:[{','.join(str(p) for p in sorted(t.partitions))}]; "
                    for t in sorted(tasks, key=lambda t: t.subtopology_id))
    return f"{kind}: {parts}"


class StreamsGroupService(WireGroupService):
    PROG = PROG
    GROUP_TYPE = "streams"
    DELETE_NOUN = "streams groups"
    DELETE_ITEM = "Group"

    # ---- describe
    def _describe_group(self, gid: str) -> Any:
        from kbroker.protocol.messages import StreamsGroupDescribeRequest

        resp = self._to_coordinator(gid, StreamsGroupDescribeRequest(group_ids=[gid]),
                                    lambda r: r.groups[0].error_code)
        return resp.groups[0]

    def describe(self) -> None:
        for gid in self.args.group:
            g = self._describe_group(gid)
            if g.error_code:
                print(f"Error: Executing streams group command failed due to "
                      f"{self._error(g.error_code, g.error_message)}", file=sys.stderr)
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
            print(f"\nStreams group '{gid}' has no active members.")
            return
        verbose = self.args.verbose
        rows = []
        for m in sorted(g.members, key=lambda m: m.member_id):
            a, t = m.assignment, m.target_assignment
            text = (task_text("ACTIVE", a.active_tasks) + task_text("STANDBY", a.standby_tasks)
                    + task_text("WARMUP", a.warmup_tasks))
            if verbose:
                text += (task_text("TARGET-ACTIVE", t.active_tasks) + task_text("TARGET-STANDBY", t.standby_tasks)
                         + task_text("TARGET-WARMUP", t.warmup_tasks))
            rows.append([gid, *([g.assignment_epoch, m.topology_epoch] if verbose else []), m.member_id,
                         *(["streams", m.member_epoch] if verbose else []), m.process_id, m.client_id, text])
        header = ["GROUP", *(["TARGET-ASSIGNMENT-EPOCH", "TOPOLOGY-EPOCH"] if verbose else []), "MEMBER",
                  *(["MEMBER-PROTOCOL", "MEMBER-EPOCH"] if verbose else []), "PROCESS", "CLIENT-ID", "ASSIGNMENTS"]
        widths = [0, *([25, 0] if verbose else []), 0, *([15, 15] if verbose else []), 0, 0, 0]
        print_lines(kafka_table(header, rows, widths))

    def _print_state(self, gid: str, g: Any) -> None:
        conn = self.wire.group_coordinator(gid)
        node = next((n for n, addr in self.wire.nodes().items() if f"{addr[0]}:{addr[1]}" == conn.address), -1)
        header = ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"]
        row: list[Any] = [gid, f"{conn.address} ({node})", g.group_state, len(g.members)]
        widths = [0, 25, 25, 0]
        if self.args.verbose:
            header[3:3] = ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
            row[3:3] = [g.group_epoch, g.assignment_epoch]
            widths[3:3] = [15, 25]
        print_lines(kafka_table(header, [row], widths))

    def _print_offsets(self, gid: str, g: Any) -> None:
        from kbroker.protocol.messages import OffsetFetchRequest as Req

        topics = sorted({t for s in (g.topology.subtopologies if g.topology else []) for t in
                         list(s.source_topics) + [r.name for r in s.repartition_source_topics]})
        md = self.wire.metadata(topics)
        parts = {t.name: sorted(p.partition_index for p in t.partitions) for t in md.topics if not t.error_code}
        resp = self._to_coordinator(gid, Req(groups=[Req.OffsetFetchRequestGroup(group_id=gid, topics=[
            Req.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in sorted(parts.items())])]),
            lambda r: r.groups[0].error_code, 9)  # v9: topics by name
        rg = resp.groups[0]
        if rg.error_code:
            raise CliError(f"fetching the offsets of {gid} failed: {self._error(rg.error_code)}")
        committed = {(t.name, p.partition_index): p.committed_offset for t in rg.topics for p in t.partitions}
        ends, starts = self._log_offsets(md, parts, -1), self._log_offsets(md, parts, -2)
        rows = []
        for (t, p), off in sorted(committed.items()):
            end = ends.get((t, p))
            base = off if off >= 0 else starts.get((t, p))  # Kafka's tool: no commit -> the lag from the start
            rows.append([gid, t, p, "-" if base is None or end is None else end - base])
        if not rows:
            print(f"\nStreams group '{gid}' has no offsets.")
            return
        print_lines(kafka_table(["GROUP", "TOPIC", "PARTITION", "OFFSET-LAG"], rows, [0, 0, 10, 0]))

    def _log_offsets(self, md: Any, parts: dict[str, list[int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets (read_uncommitted, as the Admin client's default) of ``parts`` at ``timestamp`` (-1 latest,
        -2 earliest)."""
        from kbroker.protocol.messages import ListOffsetsRequest as Req

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
                    if not p.error_code:
                        out[(t.name, p.partition_index)] = p.offset
        return out

    # ---- delete


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_group_tool(StreamsGroupService, args, ACTIONS)


if __name__ == "__main__":
    sys.exit(main())
