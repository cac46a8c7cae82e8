"""``kbroker-cluster``: cluster-wide operations, like Kafka's ``kafka-cluster.sh``.

    kbroker-cluster cluster-id --bootstrap-server localhost:9092
    kbroker-cluster unregister --bootstrap-server localhost:9092 --id 4

``cluster-id`` prints ``Cluster ID: <id>`` (from Metadata); ``unregister`` sends UnregisterBroker (API 64) for a
broker that is gone for good and prints ``Broker <id> is no longer registered.`` (errors: the broker is not
registered, no active controller, ...). Through kbroker's protocol codec, PLAINTEXT only.
"""

from __future__ import annotations

import sys

from kbroker.cli._common import CliError, ToolParser, add_command_config, add_version, load_properties, \
    run_tool, wire_ssl_context

PROG = "kbroker-cluster"


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Cluster-wide operations.")
    add_version(p)
    sub = p.add_subparsers(dest="command", metavar="{cluster-id,unregister}", parser_class=ToolParser)
    for name, text in (("cluster-id", "get information about the ID of a cluster"),
                       ("unregister", "unregister a broker")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT", help="a broker to connect to")
        s.add_argument("--bootstrap-controller", "-C", metavar="HOST:PORT",
                       help="a controller to connect to (its controller listener)")
        add_command_config(s)
        if name == "unregister":
            s.add_argument("--id", "-i", type=int, required=True, help="the ID of the broker to unregister")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is required: cluster-id or unregister")
    bootstrap = args.bootstrap_server or args.bootstrap_controller
    if not bootstrap:
        parser.error("one of --bootstrap-server or --bootstrap-controller must be specified")

    def body() -> int:
        from kbroker.cli._wire import WireClient, error_name
        from kbroker.protocol.messages import MetadataRequest, UnregisterBrokerRequest

        tls = wire_ssl_context(load_properties(args.command_config), PROG)
        with WireClient(bootstrap, ssl_context=tls) as wire:
            conn = wire.any_broker()
            if args.command == "cluster-id":
                md = conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
                print(f"Cluster ID: {md.cluster_id}")
                return 0
            resp = conn.send(UnregisterBrokerRequest(broker_id=args.id), 0)
        if resp.error_code:
            raise CliError(f"Error while unregistering broker {args.id}: {error_name(resp.error_code)}"
                           + (f" ({resp.error_message})" if resp.error_message else ""))
        print(f"Broker {args.id} is no longer registered.")
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
