"""``kbroker-client-metrics``: list, describe, alter and delete client metrics subscriptions (KIP-714), like
``kafka-client-metrics.sh``.

    kbroker-client-metrics --bootstrap-server localhost:9092 --list
    kbroker-client-metrics --bootstrap-server localhost:9092 --describe [--name N]
    kbroker-client-metrics --bootstrap-server localhost:9092 --alter --name N \\
        --metrics org.apache.kafka.producer.,org.apache.kafka.consumer. --interval 60000 --match client_id=app-.*
    kbroker-client-metrics --bootstrap-server localhost:9092 --alter --generate-name --metrics '*'
    kbroker-client-metrics --bootstrap-server localhost:9092 --delete --name N

A subscription is a CLIENT_METRICS config resource (type 16) with the keys ``metrics`` (metric name prefixes,
``*`` for all), ``interval.ms`` (push interval) and ``match`` (``selector=regex`` pairs); ``--alter`` sets the
keys given with one IncrementalAlterConfigs, ``--delete`` deletes all three, ``--list`` uses ListConfigResources
(API 74, CLIENT_METRICS) and ``--describe`` DescribeConfigs. Output is Kafka's ``ClientMetricsCommand``'s
("Altered client metrics config for N.", "Client metrics configs for N are:" then ``  key=value`` lines).
"""

from __future__ import annotations

import uuid
from typing import Any

from kbroker.cli._common import CliError, ToolParser, add_command_config, add_version, load_properties, run_tool, \
    wire_ssl_context

PROG = "kbroker-client-metrics"
CLIENT_METRICS = 16
SET, DELETE = 0, 1


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="This tool helps to manipulate and describe client metrics "
                                          "configurations.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="REQUIRED: The Kafka server to connect to.")
    add_command_config(p)
    add_version(p)
    ops = p.add_mutually_exclusive_group()
    ops.add_argument("--list", action="store_true", help="List the client metrics configuration resources.")
    ops.add_argument("--describe", action="store_true", help="Describe client metrics configuration.")
    ops.add_argument("--alter", action="store_true", help="Alter the configuration for the client metrics resource.")
    ops.add_argument("--delete", action="store_true", help="Delete the configuration for the client metrics "
                                                          "resource.")
    p.add_argument("--name", help="Name of client metrics configuration resource.")
    p.add_argument("--generate-name", action="store_true",
                   help="Generate a UUID to use as the name.")
    p.add_argument("--metrics", help="Telemetry metric name prefixes as a comma-separated list.")
    p.add_argument("--interval", type=int, help="The metrics push interval in milliseconds.")
    p.add_argument("--match", help="Matching selector 'k1=v1,k2=v2'. The following is a list of valid selector "
                                   "names: client_id, client_instance_id, client_software_name, "
                                   "client_software_version, client_source_address, client_source_port")
    return p


def _alter(bootstrap: str, name: str, ops: list[tuple[str, int, str | None]], tls: Any) -> None:
    from kbroker.cli._wire import WireClient, error_text

    with WireClient(bootstrap, ssl_context=tls) as wire:
        (code, message), = wire.incremental_alter_configs([(CLIENT_METRICS, name, ops)])
    if code:
        raise CliError(f"Error while executing client metrics config command : {error_text(code, message)}")


def list_names(bootstrap: str, tls: Any) -> list[str]:
    from kbroker.cli._wire import WireClient, error_name
    from kbroker.protocol.messages import ListConfigResourcesRequest

    with WireClient(bootstrap, ssl_context=tls) as wire:
        conn = wire.any_broker()
        version = conn.version_for(ListConfigResourcesRequest)
        resp = conn.send(ListConfigResourcesRequest(resource_types=[CLIENT_METRICS]), version)
    if resp.error_code:
        raise CliError(f"Error while executing client metrics config command : {error_name(resp.error_code)}")
    return sorted(r.resource_name for r in resp.config_resources if version == 0 or r.resource_type == CLIENT_METRICS)


def describe(bootstrap: str, names: list[str], tls: Any) -> list[str]:
    from kbroker.cli._wire import WireClient, error_text
    from kbroker.protocol.messages import DescribeConfigsRequest as Req

    lines = []
    with WireClient(bootstrap, ssl_context=tls) as wire:
        resp = wire.send(Req(resources=[Req.DescribeConfigsResource(resource_type=CLIENT_METRICS, resource_name=n,
                                                                     configuration_keys=None) for n in names],
                             include_synonyms=False, include_documentation=False))
    for name, result in zip(names, resp.results):
        if result.error_code:
            raise CliError(f"Error while executing client metrics config command : "
                           f"{error_text(result.error_code, result.error_message)}")
        lines.append(f"Client metrics configs for {name} are:")
        lines.extend(f"  {c.name}={c.value}" for c in result.configs)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.list or args.describe or args.alter or args.delete):
        parser.error("Command must include exactly one action: --list, --describe, --alter or --delete.")
    if args.alter and not (args.name or args.generate_name):
        parser.error("A client metric name must be provided with --alter (--name or --generate-name).")
    if args.delete and not args.name:
        parser.error("A client metric name must be provided with --delete (--name).")
    if args.name and args.generate_name:
        parser.error("--name and --generate-name cannot be used together.")

    def body() -> int:
        tls = wire_ssl_context(load_properties(args.command_config), PROG)
        if args.list:
            for name in list_names(args.bootstrap_server, tls):
                print(name)
        elif args.describe:
            names = [args.name] if args.name else list_names(args.bootstrap_server, tls)
            for line in describe(args.bootstrap_server, names, tls):
                print(line)
        elif args.delete:
            _alter(args.bootstrap_server, args.name,
                   [("metrics", DELETE, None), ("interval.ms", DELETE, None), ("match", DELETE, None)], tls)
            print(f"Deleted client metrics config for {args.name}.")
        else:
            name = args.name or str(uuid.uuid4())
            ops: list[tuple[str, int, str | None]] = []
            if args.metrics is not None:
                ops.append(("metrics", SET, args.metrics))
            if args.interval is not None:
                ops.append(("interval.ms", SET, str(args.interval)))
            if args.match is not None:
                ops.append(("match", SET, args.match))
            if not ops:
                raise CliError("At least one of --metrics, --interval or --match must be given with --alter.")
            _alter(args.bootstrap_server, name, ops, tls)
            print(f"Altered client metrics config for {name}.")
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    raise SystemExit(main())
