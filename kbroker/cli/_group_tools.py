"""What ``kbroker-share-groups`` and ``kbroker-streams-groups`` share: a service over kbroker's own codec
(:mod:`kbroker.cli._wire`, TLS and SASL from ``--command-config``) that lists the groups of one type on every
broker (ListGroups), asks the group coordinator (retrying while it moves or loads, as Kafka's Admin client does),
deletes groups (DeleteGroups after a describe, with Kafka's messages) and runs the tool's one action."""

from __future__ import annotations

import sys
import time
from typing import Any, Sequence

from kbroker.cli._common import CliError, kafka_table, load_properties, print_lines, run_tool, wire_ssl_context


class WireGroupService:
    """Base of a group tool's service. Subclasses set :attr:`PROG`, :attr:`GROUP_TYPE` (ListGroups' type),
    :attr:`DELETE_NOUN` and :attr:`DELETE_ITEM` (the words of Kafka's delete messages) and define
    ``_describe_group(gid)`` (the group's describe answer, with ``error_code`` and ``error_message``)."""

    PROG = ""
    GROUP_TYPE = ""
    #: "Deletion of some <noun> failed" / "Deletion of requested <noun> (...) was successful."
    DELETE_NOUN = ""
    #: "* <item> '<id>' could not be deleted due to: ..."
    DELETE_ITEM = "Group"

    def __init__(self, args: Any) -> None:
        from kbroker.cli._wire import WireClient

        self.args = args
        props = load_properties(args.command_config)
        self.wire = WireClient(args.bootstrap_server, timeout=max(args.timeout / 1000, 1.0),
                               ssl_context=wire_ssl_context(props, self.PROG))
        #: an action reported a failure: the tool exits with status 1
        self.failed = False

    def close(self) -> None:
        self.wire.close()

    def _error(self, code: int, message: str | None = None) -> str:
        from kbroker.cli._wire import error_text

        return error_text(code, message)

    def _describe_group(self, gid: str) -> Any:
        raise NotImplementedError

    def _to_coordinator(self, gid: str, request: Any, error_of: Any, version: int | None = None) -> Any:
        """``request``'s answer from the coordinator of ``gid``; an answer whose ``error_of(answer)`` is
        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS (a coordinator moving or
        still loading, e.g. on a new cluster) is retried for up to ``--timeout``, as Kafka's Admin client does."""
        from kbroker.protocol.errors import ErrorCode

        retriable = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        deadline = time.monotonic() + max(self.args.timeout / 1000, 1.0)
        while True:
            resp = self.wire.group_coordinator(gid).send(request, version)
            if error_of(resp) not in retriable or time.monotonic() >= deadline:
                return resp
            time.sleep(0.2)

    def _listed(self, group: Any) -> bool:
        """Whether a ListGroups entry is a group of this tool's type."""
        return group.group_type == self.GROUP_TYPE

    def list(self) -> None:
        """``--list [--state [S,...]]``: the groups of every broker, with their states when asked."""
        from kbroker.protocol.messages import ListGroupsRequest

        states = [s.strip() for s in (self.args.state or "").split(",") if s.strip()]
        groups: dict[str, str] = {}
        for node in sorted(self.wire.nodes()):
            resp = self.wire.node(node).send(ListGroupsRequest(states_filter=states,
                                                               types_filter=[self.GROUP_TYPE]))
            if resp.error_code:
                raise CliError(f"ListGroups on broker {node} failed: {self._error(resp.error_code)}")
            for g in resp.groups:
                if self._listed(g):
                    groups[g.group_id] = g.group_state
        if self.args.state is not None:
            print_lines(kafka_table(["GROUP", "STATE"], sorted(groups.items()), [0, 0]))
        else:
            for gid in sorted(groups):
                print(gid)

    def delete(self) -> None:
        """``--delete --group G...``: each group that describes without error is deleted; failures are listed
        as Kafka's tools list them."""
        from kbroker.protocol.messages import DeleteGroupsRequest

        ok, failed = [], {}
        for gid in self.args.group:
            g = self._describe_group(gid)
            if g.error_code:
                failed[gid] = self._error(g.error_code, g.error_message)
                continue
            r = self.wire.group_coordinator(gid).send(DeleteGroupsRequest(groups_names=[gid])).results[0]
            if r.error_code:
                failed[gid] = self._error(r.error_code)
            else:
                ok.append(gid)
        if failed:
            self.failed = True
            print(f"Error: Deletion of some {self.DELETE_NOUN} failed:")
            for gid, why in failed.items():
                print(f"* {self.DELETE_ITEM} '{gid}' could not be deleted due to: {why}")
        if ok:
            print(f"Deletion of requested {self.DELETE_NOUN} (" + ", ".join(f"'{g}'" for g in ok)
                  + ") was successful.")


def run_group_tool(service_class: type[WireGroupService], args: Any, actions: Sequence[str]) -> int:
    """Run the one action of ``actions`` that ``args`` chose; status 1 when it reported a failure."""

    def body() -> int:
        svc = service_class(args)
        try:
            action = next(x for x in actions if getattr(args, x))
            getattr(svc, action)()
        finally:
            svc.close()
        sys.stdout.flush()
        return 1 if svc.failed else 0

    return run_tool(service_class.PROG, body)
