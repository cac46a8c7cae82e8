"""``kbroker-acls``: add, remove and list ACLs, like ``kafka-acls.sh`` (Kafka's ``AclCommand``).

    kbroker-acls --bootstrap-server localhost:9092 --add --allow-principal User:alice --operation Read \\
        --topic orders --group billing
    kbroker-acls --bootstrap-server localhost:9092 --add --allow-principal User:bob --producer --topic orders \\
        [--idempotent] [--transactional-id tx-]
    kbroker-acls --bootstrap-server localhost:9092 --add --allow-principal User:carol --consumer --topic fin- \\
        --group fin- --resource-pattern-type prefixed
    kbroker-acls --bootstrap-server localhost:9092 --list [--topic orders] [--principal User:alice]
    kbroker-acls --bootstrap-server localhost:9092 --remove --topic orders [--allow-principal User:alice
        --operation Read] [--force]

Flags and output are ``AclCommand``'s: ``--allow-principal`` / ``--deny-principal`` (``Type:name``, repeatable)
with ``--allow-host`` / ``--deny-host`` (default ``*``), ``--operation`` (repeatable; default All; names such as
Read, Write, IdempotentWrite, DescribeConfigs, case-insensitive), resources ``--topic``, ``--group``,
``--transactional-id``, ``--delegation-token`` (a token id), ``--user-principal`` (the USER resource of
CreateTokens / DescribeTokens, KIP-48; all repeatable) and ``--cluster``, ``--resource-pattern-type`` literal
(default) / prefixed,
and for ``--list`` / ``--remove`` also any / match. ``--producer`` adds Write, Describe and Create on the topics
and Write, Describe on the transactional ids (``--idempotent``: IdempotentWrite on the cluster); ``--consumer``
adds Read, Describe on the topics and Read on the groups. ``--add`` prints ``Adding ACLs for resource
`ResourcePattern(...)`:`` with one ``(principal=..., host=..., operation=..., permissionType=...)`` line per ACL,
then lists the ACLs of the resources named; ``--remove`` asks for confirmation unless ``--force`` is given.
``--list`` prints ``Current ACLs for resource `ResourcePattern(...)`:`` per resource (with ``--principal``:
``ACLs for principal `User:alice``` first, and only that principal's ACLs). The requests are CreateAcls /
DescribeAcls / DeleteAcls through confluent-kafka's AdminClient; a broker error ends the command with
``Error while executing ACL command: <exception>: <message>`` and status 1. The requests are CreateAcls,
DescribeAcls and DeleteAcls sent with kbroker's own codec (:mod:`kbroker.cli._wire`: librdkafka has no
DELEGATION_TOKEN or USER resource and drops DescribeAcls' top-level error), TLS and SASL from
``--command-config``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_bootstrap,
    add_command_config,
    add_version,
    load_properties,
    run_tool,
    wire_ssl_context,
)
from kbroker.protocol.errors import ErrorCode
from kbroker.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType

PROG = "kbroker-acls"
CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"

# Kafka's AclOperation names (the --operation values) and the operations each resource type supports
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS", "TWO_PHASE_COMMIT")
SUPPORTED = {
    "TOPIC": {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
    "GROUP": {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"},
    "CLUSTER": {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                "DESCRIBE"},
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE", "TWO_PHASE_COMMIT"},
    "DELEGATION_TOKEN": {"DESCRIBE"},
    "USER": {"CREATE_TOKENS", "DESCRIBE_TOKENS"},
}
PATTERN_TYPES = ("literal", "prefixed", "any", "match")

#: a resource filter: (resource type name, name, pattern type name); an ACL entry: (principal, host, operation,
#: permission type), names as Kafka prints them
Resource = tuple[str, str, str]
Entry = tuple[str, str, str, str]


def pascal(name: str) -> str:
    """``IDEMPOTENT_WRITE`` -> ``IdempotentWrite`` (Kafka's ``SecurityUtils.operationName``)."""
    return "".join(part.capitalize() for part in name.split("_"))


def operation(text: str) -> str:
    key = text.strip().replace("_", "").replace("-", "").lower()
    for op in OPERATIONS:
        if op.replace("_", "").lower() == key:
            return op
    raise CliError(f"Invalid operation name {text.strip()}: expected one of "
                   f"{', '.join(pascal(o) for o in OPERATIONS)}")


def principal(text: str) -> str:
    p = text.strip()
    if ":" not in p:
        raise CliError(f"Could not parse principal from `{p}` (no colon is present separating the principal "
                       f"type from the principal name)")
    return p


def resource_text(resource: Resource) -> str:
    rtype, name, pattern = resource
    return f"ResourcePattern(resourceType={rtype}, name={name}, patternType={pattern})"


def entry_text(entry: Entry) -> str:
    return f"(principal={entry[0]}, host={entry[1]}, operation={entry[2]}, permissionType={entry[3]})"


def block(title: str, entries: Iterable[Entry]) -> str:
    """``AclCommand``'s ``s"$title $Newline ${acls.map("\\t" + _).mkString(Newline)} $Newline"``."""
    return f"{title} \n " + "\n".join("\t" + entry_text(e) for e in sorted(entries)) + " \n"


def build_parser() -> argparse.ArgumentParser:
    p = ToolParser(prog=PROG, description="Add, remove and list ACLs (kafka-acls.sh).")
    add_bootstrap(p)
    add_command_config(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources named, else all)")
    p.add_argument("--topic", action="append", default=[], help="topic (repeatable)")
    p.add_argument("--group", action="append", default=[], help="consumer group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[], help="transactional id (repeatable)")
    p.add_argument("--delegation-token", action="append", default=[], help="delegation token id (repeatable)")
    p.add_argument("--user-principal", action="append", default=[],
                   help="user principal (Type:name) whose tokens the ACLs are about (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal", type=str.lower, choices=PATTERN_TYPES,
                   help="literal (default) or prefixed; any or match with --list / --remove")
    p.add_argument("--allow-principal", action="append", default=[], help="principal to allow (Type:name)")
    p.add_argument("--deny-principal", action="append", default=[], help="principal to deny (Type:name)")
    p.add_argument("--allow-host", action="append", default=[], help="host of the allowed principals (default *)")
    p.add_argument("--deny-host", action="append", default=[], help="host of the denied principals (default *)")
    p.add_argument("--operation", action="append", default=[], help="operation (repeatable; default All)")
    p.add_argument("--principal", action="append", default=[], help="with --list: that principal's ACLs only")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")
    add_version(p)
    return p


def check_args(args: argparse.Namespace) -> None:
    """``AclCommand.checkArgs``."""
    if (args.producer or args.consumer) and args.list:
        raise CliError("Option --list does not take --producer or --consumer")
    if args.principal and not args.list:
        raise CliError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise CliError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise CliError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group
                          or (not args.producer and (args.cluster or args.transactional_id))):
        raise CliError("With --consumer you must specify a --topic and a --group and no --cluster or "
                       "--transactional-id option should be specified.")
    if args.add and args.resource_pattern_type not in ("literal", "prefixed"):
        raise CliError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is not valid "
                       f"when adding acls.")


def resource_filters(args: argparse.Namespace, required: bool = True) -> list[Resource]:
    pattern = args.resource_pattern_type.upper()
    out: list[Resource] = [("TOPIC", t.strip(), pattern) for t in args.topic]
    if pattern == "LITERAL" and (args.cluster or args.idempotent):
        out.append(("CLUSTER", CLUSTER_NAME, "LITERAL"))
    out += [("GROUP", g.strip(), pattern) for g in args.group]
    out += [("TRANSACTIONAL_ID", t.strip(), pattern) for t in args.transactional_id]
    out += [("DELEGATION_TOKEN", t.strip(), pattern) for t in args.delegation_token]
    out += [("USER", principal(u), pattern) for u in args.user_principal]
    if not out and required:
        raise CliError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                       "or --delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(out))


def entries(args: argparse.Namespace, operations: Iterable[str]) -> set[Entry]:
    """``AclCommand.getAcl``: every (principal, host, operation) of the allowed and denied principals."""
    out: set[Entry] = set()
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, "ALLOW"),
                                          (args.deny_principal, args.deny_host, "DENY")):
        names = {principal(p) for p in principals}
        for host in ({h.strip() for h in hosts} or {WILDCARD_HOST}) if names else set():
            out |= {(p, host, op, permission) for p in names for op in operations}
    return out


def filter_to_entries(args: argparse.Namespace) -> dict[Resource, set[Entry]]:
    """``AclCommand.getResourceFilterToAcls``: the ACLs per resource filter of an --add or --remove."""
    out: dict[Resource, set[Entry]] = {}
    filters = resource_filters(args)
    if not args.producer and not args.consumer:
        ops = {operation(o) for o in args.operation} or {"ALL"}
        acls = entries(args, ops)
        out = {f: set(acls) for f in filters}
    if args.producer:
        for f in filters:
            if f[0] == "TOPIC":
                out[f] = entries(args, ("WRITE", "DESCRIBE", "CREATE"))
            elif f[0] == "TRANSACTIONAL_ID":
                out[f] = entries(args, ("WRITE", "DESCRIBE"))
        if args.idempotent:
            out[("CLUSTER", CLUSTER_NAME, "LITERAL")] = entries(args, ("IDEMPOTENT_WRITE",))
    if args.consumer:
        for f in filters:
            if f[0] == "TOPIC":
                out[f] = out.get(f, set()) | entries(args, ("READ", "DESCRIBE"))
            elif f[0] == "GROUP":
                out[f] = out.get(f, set()) | entries(args, ("READ",))
    for (rtype, _, _), acls in out.items():
        valid = SUPPORTED[rtype] | {"ALL"}
        if any(e[2] not in valid for e in acls):
            raise CliError(f"ResourceType {rtype} only supports operations [{', '.join(sorted(valid))}]")
    return out


# ------------------------------------------------------------------------------------------ the requests


#: the Java exception ``kafka-acls`` names for an error code it meets (``Errors.java``)
_EXCEPTIONS = {
    ErrorCode.SECURITY_DISABLED: "SecurityDisabledException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.INVALID_REQUEST: "InvalidRequestException",
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    ErrorCode.NOT_CONTROLLER: "NotControllerException",
}


def _check(code: int, message: str | None) -> None:
    """A broker's error, as ``kafka-acls`` reports it (``org.apache.kafka.common.errors.<Exception>: <message>``)."""
    if not code:
        return
    from kbroker.cli._wire import error_text

    exc = _EXCEPTIONS.get(ErrorCode(code)) if code in ErrorCode._value2member_map_ else None
    text = error_text(code, message)
    raise CliError("Error while executing ACL command: "
                   + (f"org.apache.kafka.common.errors.{exc}: {text}" if exc else text), status=1)


def _describe(wire: Any, filters: list[Resource]) -> dict[Resource, set[Entry]]:
    """DescribeAcls for each resource filter (none: every ACL) -> the ACLs found, per resource."""
    from kbroker.protocol.messages import DescribeAclsRequest

    asked = [DescribeAclsRequest(resource_type_filter=ResourceType[f[0]], resource_name_filter=f[1],
                                 pattern_type_filter=PatternType[f[2]], principal_filter=None, host_filter=None,
                                 operation=AclOperation.ANY, permission_type=AclPermissionType.ANY)
             for f in filters] or [DescribeAclsRequest(
                 resource_type_filter=ResourceType.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
                 principal_filter=None, host_filter=None, operation=AclOperation.ANY,
                 permission_type=AclPermissionType.ANY)]
    out: dict[Resource, set[Entry]] = {}
    for req in asked:
        resp = wire.send(req)
        _check(resp.error_code, resp.error_message)
        for r in resp.resources:
            key = (ResourceType(r.resource_type).name, r.resource_name, PatternType(r.pattern_type).name)
            out.setdefault(key, set()).update(
                (a.principal, a.host, AclOperation(a.operation).name, AclPermissionType(a.permission_type).name)
                for a in r.acls)
    return out


def _create(wire: Any, resource: Resource, acls: Iterable[Entry]) -> None:
    from kbroker.protocol.messages import CreateAclsRequest

    resp = wire.send(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=ResourceType[resource[0]], resource_name=resource[1],
        resource_pattern_type=PatternType[resource[2]], principal=e[0], host=e[1], operation=AclOperation[e[2]],
        permission_type=AclPermissionType[e[3]]) for e in sorted(acls)]))
    for r in resp.results:
        _check(r.error_code, r.error_message)


def _delete(wire: Any, resource: Resource, acls: Iterable[Entry] | None = None) -> None:
    """DeleteAcls of the ACLs named (None: every ACL of the resource filter)."""
    from kbroker.protocol.messages import DeleteAclsRequest

    def one(e: Entry | None) -> Any:
        return DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=ResourceType[resource[0]], resource_name_filter=resource[1],
            pattern_type_filter=PatternType[resource[2]], principal_filter=None if e is None else e[0],
            host_filter=None if e is None else e[1], operation=AclOperation.ANY if e is None else AclOperation[e[2]],
            permission_type=AclPermissionType.ANY if e is None else AclPermissionType[e[3]])

    resp = wire.send(DeleteAclsRequest(filters=[one(None)] if acls is None else [one(e) for e in sorted(acls)]))
    for r in resp.filter_results:
        _check(r.error_code, r.error_message)


def list_acls(wire: Any, args: argparse.Namespace) -> None:
    found = _describe(wire, resource_filters(args, required=False))
    wanted = [principal(p) for p in args.principal]
    groups: list[tuple[str | None, dict[Resource, set[Entry]]]] = [(None, found)] if not wanted else [
        (p, {r: {e for e in acls if e[0] == p} for r, acls in found.items()}) for p in wanted]
    for who, per_resource in groups:
        if who is not None:
            print(f"ACLs for principal `{who}`")
        for resource, acls in sorted(per_resource.items()):
            if acls:
                print(block(f"Current ACLs for resource `{resource_text(resource)}`:", acls))


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


def add_acls(wire: Any, args: argparse.Namespace) -> None:
    per_resource = filter_to_entries(args)
    if any(not acls for acls in per_resource.values()):
        raise CliError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    for resource, acls in per_resource.items():
        print(block(f"Adding ACLs for resource `{resource_text(resource)}`:", acls))
        _create(wire, resource, acls)
    list_acls(wire, args)


def remove_acls(wire: Any, args: argparse.Namespace) -> None:
    for resource, acls in filter_to_entries(args).items():
        name = resource_text(resource)
        if not acls:
            if _confirm(args, f"Are you sure you want to delete all ACLs for resource filter `{name}`? (y/n)"):
                _delete(wire, resource)
        elif _confirm(args, block("Are you sure you want to remove ACLs:", acls)
                      + f" from resource filter `{name}`? (y/n)"):
            _delete(wire, resource, acls)
    list_acls(wire, args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> None:
        from kbroker.cli._wire import WireClient

        check_args(args)
        security = wire_ssl_context(load_properties(args.command_config), "sending ACL requests")
        with WireClient(args.bootstrap_server, ssl_context=security) as wire:
            if args.add:
                add_acls(wire, args)
            elif args.remove:
                remove_acls(wire, args)
            else:
                list_acls(wire, args)

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
