"""``kbroker-configs``: describe and change topic and broker configs, like ``kafka-configs.sh``.

    kbroker-configs --bootstrap-server localhost:9092 --entity-type topics --entity-name t --describe [--all]
    kbroker-configs --bootstrap-server localhost:9092 --entity-type topics --entity-name t --alter \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config segment.ms
    kbroker-configs --bootstrap-server localhost:9092 --entity-type brokers --entity-default --describe
    kbroker-configs --bootstrap-server localhost:9092 --broker 1 --alter --add-config log.retention.ms=3600000
    kbroker-configs --bootstrap-server localhost:9092 --entity-type users --entity-name alice --alter \
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]' --delete-config SCRAM-SHA-512
    kbroker-configs --bootstrap-server localhost:9092 --entity-type users [--entity-name alice] --describe

Output follows Kafka's ``ConfigCommand``: ``Dynamic configs for topic t are:`` then
``  name=value sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:name=value, DEFAULT_CONFIG:...}`` per entry, and
``Completed updating config for topic t.`` after an alter. Changes use IncrementalAlterConfigs
(confluent-kafka's AdminClient); descriptions use DescribeConfigs with synonyms through kbroker's protocol
codec, which keeps every synonym (several can share a name) and reaches the cluster-default broker resource.

Users carry SCRAM credentials (KIP-554), changed with AlterUserScramCredentials (confluent-kafka's AdminClient) and
listed with DescribeUserScramCredentials (kbroker's protocol codec): ``--add-config
'SCRAM-SHA-256=[iterations=8192,password=secret]'`` (iterations optional, default 4096; the client salts and
hashes the password, which never reaches the broker) and ``--delete-config SCRAM-SHA-512``, sent as one request
as ``kafka-configs.sh`` does (so two changes of one user in one command get DUPLICATE_RESOURCE from the
controller, as from Kafka's). ``--describe`` prints ``SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-256=iterations=8192`` per user that has credentials.

Client quotas (KIP-546) of ``users``, ``clients`` (client ids), both together (``--entity-type users --entity-name
alice --entity-type clients --entity-name c1``) and ``ips``, a name or ``--entity-default`` per type, in the
order given: ``--add-config producer_byte_rate=1048576,consumer_byte_rate=2097152`` / ``--delete-config`` with
AlterClientQuotas, ``--describe`` with DescribeClientQuotas (strict: exactly the types given; a type without a
name matches every name of it), through kbroker's protocol codec; quota and SCRAM keys can be mixed for users as
with ``kafka-configs.sh``. ``--describe`` prints ``Quota configs for user-principal 'alice', client-id 'c1' are
producer_byte_rate=1048576.0`` per entity.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_command_config,
    add_version,
    admin_client,
    kafka_error_text,
    load_properties,
    result,
    run_tool,
    wire_ssl_context,
)

PROG = "kbroker-configs"

# ConfigResource.Type codes and the dynamic source shown by --describe without --all.
RESOURCE_TYPES = {"topics": 2, "brokers": 4, "broker-loggers": 8, "client-metrics": 16, "groups": 32}
SINGULAR = {"topics": "topic", "brokers": "broker", "broker-loggers": "broker-logger",
            "client-metrics": "client-metric", "groups": "group", "users": "user"}
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
QUOTA_TYPES = ("clients", "ips")
#: kafka-configs.sh's entity types -> ClientQuotaEntity types
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})
OP_SET, OP_DELETE = 0, 1
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's client quota keys of users (``QuotaConfig.isClientOrUserQuotaConfig``)
USER_QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                             "controller_mutation_rate"})


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Add, remove and describe configs of topics and brokers.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the Kafka server(s) to connect to")
    p.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                   help="a controller to connect to (kbroker nodes are combined: same as --bootstrap-server)")
    add_command_config(p)
    p.add_argument("--describe", action="store_true", help="list configs for the given entity")
    p.add_argument("--alter", action="store_true", help="alter the configuration of the entity")
    p.add_argument("--all", action="store_true", help="with --describe: every config, not only the dynamic ones")
    p.add_argument("--entity-type", choices=[*RESOURCE_TYPES, "users", *QUOTA_TYPES], action="append",
                   dest="entity_types", default=[],
                   help="type of entity (topics, brokers, broker-loggers, client-metrics, groups, users, clients, "
                        "ips); users and clients may be given together")
    p.add_argument("--entity-name", action=_EntityName, dest="entity_names", default=[],
                   help="name of the entity (topic name, broker id, user, client id, ip)")
    p.add_argument("--entity-default", action=_EntityName, nargs=0, dest="entity_names",
                   help="the default (brokers: the cluster-wide default; users, clients, ips: the default entity)")
    p.add_argument("--topic", help="shorthand for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", help="shorthand for --entity-type brokers --entity-name BROKER")
    p.add_argument("--broker-defaults", action="store_true", help="shorthand for --entity-type brokers --entity-default")
    p.add_argument("--broker-logger", help="shorthand for --entity-type broker-loggers --entity-name BROKER")
    p.add_argument("--group", help="shorthand for --entity-type groups --entity-name GROUP")
    p.add_argument("--user", help="shorthand for --entity-type users --entity-name USER")
    p.add_argument("--client", help="shorthand for --entity-type clients --entity-name CLIENT")
    p.add_argument("--ip", help="shorthand for --entity-type ips --entity-name IP")
    p.add_argument("--add-config", metavar="K=V,K2=[V1,V2]", help="configs to set, comma-separated; list values "
                                                                   "in square brackets")
    p.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    p.add_argument("--delete-config", action="append", default=[], metavar="K1,K2", help="configs to remove")
    add_version(p)
    return p


class _EntityName(argparse.Action):
    """``--entity-name N`` and ``--entity-default`` in the order given (``None`` stands for the default), paired
    with the ``--entity-type`` s in order, as kafka-configs.sh pairs them."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        names = list(getattr(namespace, self.dest) or [])
        names.append(None if option_string == "--entity-default" else values)
        setattr(namespace, self.dest, names)


def _split_entities(a: Any) -> None:
    """``a.entity_type`` / ``a.entity_name`` / ``a.entity_default`` from the lists, for a single entity."""
    a.entity_type = a.entity_types[0] if a.entity_types else None
    names = a.entity_names or []
    a.entity_default = bool(names) and names[0] is None
    a.entity_name = names[0] if names else None


def quota_entities(p: ToolParser, a: Any) -> list[tuple[str, str | None]] | None:
    """The client-quota entity of the command line as ``(ClientQuotaEntity type, name or None for the default)``
    pairs, names left out (``...``-less: every name) when none is given; None when it is not a quota command."""
    types = list(a.entity_types)
    names = list(a.entity_names or [])
    for value, kind in ((a.user, "users"), (a.client, "clients"), (a.ip, "ips")):
        if value is not None:
            types.append(kind)
            names.append(value)
    if not types or any(t not in QUOTA_ENTITY_TYPES for t in types):
        return None
    if len(set(types)) != len(types):
        p.error("an entity type can be given only once")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        p.error("only users and clients can be combined")
    if len(names) > len(types):
        p.error("there are more entity names than entity types")
    out: list[tuple[str, str | None]] = []
    for i, t in enumerate(types):
        out.append((QUOTA_ENTITY_TYPES[t], names[i] if i < len(names) else ...))  # type: ignore[arg-type]
    return out


def resolve_entity(p: ToolParser, a: Any) -> tuple[str, str | None]:
    """(entity type, entity name or None for "all"); ``""`` is the cluster default."""
    _split_entities(a)
    if len(a.entity_types) > 1:
        p.error("only users and clients can be given together as entity types")
    shorthands = [(a.topic, "topics"), (a.broker, "brokers"), (a.broker_logger, "broker-loggers"), (a.group, "groups"),
                  (a.user, "users")]
    etype, name = a.entity_type, a.entity_name
    for value, kind in shorthands:
        if value is not None:
            if etype and etype != kind:
                p.error(f"--{SINGULAR[kind].replace('_', '-')} can't be combined with --entity-type {etype}")
            etype, name = kind, value
    if a.broker_defaults:
        etype, a.entity_default = "brokers", True
    if not etype:
        p.error("an entity type must be specified with --entity-type (or --topic/--broker/--broker-defaults)")
    if a.entity_default:
        if etype not in ("brokers", "users", *QUOTA_TYPES):
            p.error("--entity-default is only valid with --entity-type brokers, users, clients or ips")
        if name is not None:
            p.error("--entity-name and --entity-default can't be used together")
        name = ""
    if etype in ("brokers", "broker-loggers") and name:
        if not name.strip().isdigit():
            p.error(f"The entity name for {etype} must be a valid integer broker id, but it is: {name}")
    return etype, name


def parse_add_config(text: str | None, file: str | None) -> dict[str, str]:
    """Kafka's ``--add-config`` syntax: ``k=v,k2=[a,b]`` (commas inside [] belong to the value)."""
    out: dict[str, str] = {}
    if file:
        out.update(load_properties(file))
    if text:
        lookahead = r"(?=[^\]]*(?:\[|$))"
        for item in re.split("," + lookahead, text):
            pair = re.split(r"\s*=\s*" + lookahead, item)
            if len(pair) != 2:
                raise CliError("requirement failed: Invalid entity config: all configs to be added must be in the "
                               "format \"key=val\" or \"key=[val1,val2]\".")
            out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out



def _alterations(a: argparse.Namespace, name: str | None) -> tuple[dict[str, str], list[str]]:
    """``--add-config`` / ``--add-config-file`` (key -> value) and ``--delete-config`` (keys) of an --alter; the
    checks kafka-configs.sh makes before sending anything."""
    if name is None:
        raise CliError("--entity-name or --entity-default must be specified with --alter")
    to_add = parse_add_config(a.add_config, a.add_config_file)
    to_delete = [k.strip() for item in a.delete_config for k in item.split(",") if k.strip()]
    if not to_add and not to_delete:
        raise CliError("--add-config, --add-config-file or --delete-config must be specified with --alter")
    return to_add, to_delete

class ConfigService:
    def __init__(self, args: Any, etype: str, name: str | None) -> None:
        from kbroker.cli._wire import WireClient

        self.args = args
        self.etype = etype
        self.rtype = RESOURCE_TYPES[etype]
        self.name = name
        self.bootstrap = args.bootstrap_server or args.bootstrap_controller
        self.props = load_properties(args.command_config)
        self.wire = WireClient(self.bootstrap, ssl_context=wire_ssl_context(self.props, "describing configs"))

    def close(self) -> None:
        self.wire.close()

    def _conn_for(self, name: str) -> Any:
        if self.etype in ("brokers", "broker-loggers") and name:
            return self.wire.node(int(name))
        return self.wire.any_broker()

    def entries(self, name: str, describe_all: bool) -> list[Any]:
        """DescribeConfigs of one resource with synonyms, filtered as Kafka's ``getResourceConfig`` does."""
        from kbroker.cli._wire import error_name
        from kbroker.protocol.messages import DescribeConfigsRequest

        req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=self.rtype, resource_name=name, configuration_keys=None)], include_synonyms=True)
        resp = self._conn_for(name).send(req)
        res = resp.results[0]
        if res.error_code:
            what = f"{SINGULAR[self.etype]} '{name}'" if name else f"default {self.etype}"
            raise CliError(f"cannot describe configs of {what}: {error_name(res.error_code)}"
                           + (f" ({res.error_message})" if res.error_message else ""))
        wanted: int | None
        if describe_all:
            wanted = None
        elif self.etype == "brokers":
            wanted = 3 if name == "" else 2
        else:
            wanted = {"topics": 1, "broker-loggers": 6, "client-metrics": 7, "groups": 8}[self.etype]
        out = [c for c in res.configs if wanted is None or c.config_source == wanted]
        return sorted(out, key=lambda c: c.name)

    def entity_names(self) -> list[str]:
        if self.name is not None:
            return [self.name]
        if self.etype == "topics":
            from kbroker.protocol.messages import MetadataRequest

            resp = self.wire.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
            return sorted(t.name for t in resp.topics if t.name)
        if self.etype in ("brokers", "broker-loggers"):
            ids = [str(n) for n in sorted(self.wire.nodes())]
            return ids + ([""] if self.etype == "brokers" else [])
        raise CliError(f"--entity-name is required to describe {self.etype}")

    def describe(self) -> None:
        for name in self.entity_names():
            entries = self.entries(name, self.args.all)
            if name == "":
                print(f"Default configs for {self.etype} in the cluster are:")
            else:
                kind = "All" if self.args.all else "Dynamic"
                print(f"{kind} configs for {SINGULAR[self.etype]} {name} are:")
            for c in entries:
                syn = ", ".join(f"{CONFIG_SOURCES.get(s.source, s.source)}:{s.name}={_v(s.value)}" for s in c.synonyms)
                print(f"  {c.name}={_v(c.value)} sensitive={str(c.is_sensitive).lower()} synonyms={{{syn}}}")

    def alter(self) -> None:
        a = self.args
        to_add, to_delete = _alterations(a, self.name)
        if self.etype in ("topics", "brokers"):
            current = {c.name for c in self.entries(self.name, describe_all=False)}
            invalid = [k for k in to_delete if k not in current]
            if invalid:
                raise CliError(f"Error while executing config command : Invalid config(s): {','.join(invalid)}")
        ops = [(k, OP_SET, v) for k, v in to_add.items()] + [(k, OP_DELETE, None) for k in to_delete]
        if self.etype in ("topics", "brokers") and self.name != "":
            self._alter_with_admin(ops)
        else:
            self._alter_with_wire(ops)
        if self.name == "":
            print(f"Completed updating default config for {self.etype} in the cluster.")
        else:
            print(f"Completed updating config for {SINGULAR[self.etype]} {self.name}.")

    def _alter_with_admin(self, ops: list[tuple[str, int, str | None]]) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        admin = admin_client(self.bootstrap, self.props)
        rtype = ResourceType.TOPIC if self.etype == "topics" else ResourceType.BROKER
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if op == OP_SET
                               else AlterConfigOpType.DELETE) for k, op, v in ops]
        res = ConfigResource(rtype, self.name, incremental_configs=entries)
        futures = admin.incremental_alter_configs([res], request_timeout=10)
        for fut in futures.values():
            try:
                result(fut)
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001 - KafkaException
                raise CliError(f"Error while executing config command : {kafka_error_text(exc)}") from None

    def _alter_with_wire(self, ops: list[tuple[str, int, str | None]]) -> None:
        from kbroker.cli._wire import error_name
        from kbroker.protocol.messages import IncrementalAlterConfigsRequest as Req

        req = Req(resources=[Req.AlterConfigsResource(
            resource_type=self.rtype, resource_name=self.name or "",
            configs=[Req.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])
        resp = self._conn_for(self.name or "").send(req)
        for r in resp.responses:
            if r.error_code:
                raise CliError(f"Error while executing config command : {error_name(r.error_code)}"
                               + (f": {r.error_message}" if r.error_message else ""))


class ScramUserService:
    """``--entity-type users``: the SCRAM credentials of users, as Kafka's ``ConfigCommand`` handles them with
    ``--bootstrap-server`` (``alterUserScramCredentialConfigs``, ``describeClientQuotaAndUserScramCredentialConfigs``),
    changes through confluent-kafka's AdminClient, descriptions through kbroker's protocol codec."""

    def __init__(self, args: Any, name: str | None) -> None:
        self.args = args
        self.name = name
        self.props = load_properties(args.command_config)

    def close(self) -> None:
        pass

    def describe(self) -> None:
        """One ``SCRAM credential configs for user-principal '<user>' are <MECHANISM>=iterations=<n>, ...`` line per
        user with credentials: the named one, or every one. A named user without credentials prints nothing (Kafka's
        Admin client leaves RESOURCE_NOT_FOUND users out); ``--entity-default`` describes quotas only, so nothing
        here. Sent through kbroker's protocol codec (librdkafka 2.16 aborts on an answer with a top-level error,
        such as CLUSTER_AUTHORIZATION_FAILED, and mangles the error messages of this API)."""
        from kbroker.cli._wire import WireClient, error_name
        from kbroker.controller.scram_control import MECHANISM_NAMES
        from kbroker.protocol.errors import ErrorCode
        from kbroker.protocol.messages import DescribeUserScramCredentialsRequest as Req

        if self.name == "":
            return
        bootstrap = self.args.bootstrap_server or self.args.bootstrap_controller
        with WireClient(bootstrap, ssl_context=wire_ssl_context(self.props, "describing SCRAM credentials")) as wire:
            resp = wire.send(Req(users=None if self.name is None else [Req.UserName(name=self.name)]))
        if resp.error_code:
            raise CliError(f"Error while executing config command : {error_name(resp.error_code)}"
                           + (f": {resp.error_message}" if resp.error_message else ""))
        for r in resp.results:
            if r.error_code == ErrorCode.RESOURCE_NOT_FOUND:
                continue
            if r.error_code:
                print(f"Error retrieving SCRAM credential configs for user-principal '{r.user}': "
                      f"{error_name(r.error_code)}" + (f": {r.error_message}" if r.error_message else ""))
                continue
            text = ", ".join(f"{MECHANISM_NAMES.get(c.mechanism, 'UNKNOWN')}=iterations={c.iterations}"
                             for c in r.credential_infos)
            print(f"SCRAM credential configs for user-principal '{r.user}' are {text}")

    def alter(self) -> None:
        """Upsert the ``SCRAM-SHA-*=[iterations=N,password=P]`` entries of ``--add-config`` and delete the
        mechanisms of ``--delete-config``, in one AlterUserScramCredentials request; Kafka's checks and messages."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                           UserScramCredentialUpsertion)

        a = self.args
        to_add, to_delete = _alterations(a, self.name)
        unknown_add = sorted(k for k in to_add if k not in SCRAM_MECHANISMS and k not in USER_QUOTA_KEYS)
        if unknown_add:
            raise CliError("Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
                           f"Unexpected config names: {','.join(unknown_add)}")
        unknown_delete = sorted(k for k in to_delete if k not in SCRAM_MECHANISMS and k not in USER_QUOTA_KEYS)
        if unknown_delete:
            raise CliError("Only quota and SCRAM credential configs can be deleted for 'users' using "
                           f"--bootstrap-server. Unexpected config names: {','.join(unknown_delete)}")
        to_add = {k: v for k, v in to_add.items() if k in SCRAM_MECHANISMS}
        to_delete = [k for k in to_delete if k in SCRAM_MECHANISMS]
        if not to_add and not to_delete:
            return
        if self.name == "":
            raise CliError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                           "Credentials using --bootstrap-server.")
        mechanisms = {m: getattr(ScramMechanism, m.replace("-", "_")) for m in SCRAM_MECHANISMS}
        alterations: list[Any] = [UserScramCredentialDeletion(self.name, mechanisms[m]) for m in to_delete]
        for mechanism, value in to_add.items():
            iterations, password = _iterations_and_password(mechanism, value)
            alterations.append(UserScramCredentialUpsertion(
                self.name, ScramCredentialInfo(mechanisms[mechanism], iterations), password.encode("utf-8")))
        admin = admin_client(a.bootstrap_server or a.bootstrap_controller, self.props)
        try:
            futures = admin.alter_user_scram_credentials(alterations)
            for fut in futures.values():
                result(fut)
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"Error while executing config command : {kafka_error_text(exc)}") from None


class QuotaService:
    """Client quotas of users, client ids, both, or ips (KIP-546), as Kafka's ``ConfigCommand`` handles them with
    ``--bootstrap-server``: AlterClientQuotas / DescribeClientQuotas through kbroker's protocol codec."""

    def __init__(self, args: Any, entity: list[tuple[str, Any]]) -> None:
        self.args = args
        self.entity = entity
        self.props = load_properties(args.command_config)
        self.bootstrap = args.bootstrap_server or args.bootstrap_controller

    def _wire(self) -> Any:
        from kbroker.cli._wire import WireClient

        return WireClient(self.bootstrap, ssl_context=wire_ssl_context(self.props, "client quotas"))

    def describe(self) -> None:
        """``Quota configs for user-principal 'alice', client-id 'c1' are producer_byte_rate=1048576.0`` per
        matching entity (a type without a name: every entity of it)."""
        from kbroker.cli._wire import error_name
        from kbroker.protocol.messages import DescribeClientQuotasRequest as Req

        components = [Req.ComponentData(entity_type=t, match_type=2, match=None) if n is ...
                      else Req.ComponentData(entity_type=t, match_type=1, match=None) if n is None
                      else Req.ComponentData(entity_type=t, match_type=0, match=n) for t, n in self.entity]
        with self._wire() as wire:
            resp = wire.send(Req(components=components, strict=True))
        if resp.error_code:
            raise CliError(f"Error while executing config command : {error_name(resp.error_code)}"
                           + (f": {resp.error_message}" if resp.error_message else ""))
        for entry in resp.entries or []:
            names = {e.entity_type: e.entity_name for e in entry.entity}
            values = ", ".join(f"{v.key}={_double(v.value)}" for v in sorted(entry.values, key=lambda v: v.key))
            print(f"Quota configs for {describe_entity(names)} are {values}")

    def alter(self, to_add: dict[str, str], to_delete: list[str]) -> None:
        """Set ``to_add`` (values as numbers) and remove ``to_delete`` in one AlterClientQuotas request."""
        from kbroker.cli._wire import error_name
        from kbroker.protocol.messages import AlterClientQuotasRequest as Req

        if any(n is ... for _, n in self.entity):
            raise CliError("--entity-name or --entity-default must be specified with --alter")
        ops = []
        for key, value in to_add.items():
            try:
                number = float(value)
            except ValueError:
                raise CliError(f"Cannot parse quota configuration value for {key}: {value}") from None
            ops.append(Req.OpData(key=key, value=number, remove=False))
        ops += [Req.OpData(key=key, value=0.0, remove=True) for key in to_delete]
        req = Req(entries=[Req.EntryData(entity=[Req.EntityData(entity_type=t, entity_name=n) for t, n in self.entity],
                                         ops=ops)], validate_only=False)
        with self._wire() as wire:
            resp = wire.send(req)
        for entry in resp.entries:
            if entry.error_code:
                raise CliError(f"Error while executing config command : {error_name(entry.error_code)}"
                               + (f": {entry.error_message}" if entry.error_message else ""))


def describe_entity(names: dict[str, Any]) -> str:
    """Kafka's wording of a quota entity: ``user-principal 'alice', the default client-id``."""
    parts = []
    for etype, label in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip")):
        if etype in names:
            name = names[etype]
            parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(parts)


def _double(value: float) -> str:
    """A double as Java's ``Double.toString`` prints it: ``1048576.0``, ``1.048576E7`` (from 10^7 up), ``0.5``,
    ``1.0E-4`` (below 10^-3)."""
    import decimal

    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    d = decimal.Decimal(repr(float(value))).normalize()
    sign, digits, _ = d.as_tuple()
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + "." + (mantissa[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{d.adjusted()}"


def run_quota_command(args: Any, entity: list[tuple[str, Any]]) -> None:
    """--describe / --alter of a client-quota entity (with the SCRAM credentials of a single user)."""
    types = [t for t, _ in entity]
    single_user = types == ["user"]
    quotas = QuotaService(args, entity)
    if args.describe:
        quotas.describe()
        if single_user:
            ScramUserService(args, "" if entity[0][1] is None else (None if entity[0][1] is ... else entity[0][1])
                             ).describe()
        return
    name = entity[0][1]
    to_add, to_delete = _alterations(args, None if name is ... else (name or ""))
    kind = {"user": "users", "client-id": "clients", "ip": "ips"}[types[0]]
    allowed = IP_QUOTA_KEYS if types == ["ip"] else USER_QUOTA_KEYS
    if single_user:
        allowed = allowed | set(SCRAM_MECHANISMS)
    what = "connection quota" if types == ["ip"] else "quota and SCRAM credential" if single_user else "quota"
    for verb, keys in (("added", list(to_add)), ("deleted", to_delete)):
        unexpected = sorted(k for k in keys if k not in allowed)
        if unexpected:
            raise CliError(f"Only {what} configs can be {verb} for '{kind}' using --bootstrap-server. Unexpected "
                           f"config names: {','.join(unexpected)}")
    quota_add = {k: v for k, v in to_add.items() if k not in SCRAM_MECHANISMS}
    quota_delete = [k for k in to_delete if k not in SCRAM_MECHANISMS]
    if quota_add or quota_delete:
        quotas.alter(quota_add, quota_delete)
    if single_user and (len(quota_add) != len(to_add) or len(quota_delete) != len(to_delete)):
        ScramUserService(args, name or "").alter()
    if name:
        print(f"Completed updating config for {kind[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {kind} in the cluster.")


def _iterations_and_password(mechanism: str, value: str) -> tuple[int, str]:
    """``[iterations=N,]password=P`` of a SCRAM entry of ``--add-config`` (Kafka's pattern and messages; iterations
    default to 4096, and -1 means the default)."""
    from kbroker.controller.scram_control import DEFAULT_ITERATIONS, MIN_ITERATIONS

    m = re.fullmatch(r"(?:iterations=(-?[0-9]+),)?password=(.*)", value, re.S)
    if m is None:
        raise CliError(f"Invalid credential property {mechanism}={value}")
    iterations = DEFAULT_ITERATIONS if m.group(1) in (None, "-1") else int(m.group(1))
    if iterations < MIN_ITERATIONS:
        raise CliError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}")
    return iterations, m.group(2)


def _v(value: str | None) -> str:
    return "null" if value is None else value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.describe == args.alter:
        parser.error("Command must include exactly one action: --describe, --alter")
    if not (args.bootstrap_server or args.bootstrap_controller):
        parser.error("One of the required --bootstrap-server or --bootstrap-controller arguments must be specified")
    if args.all and not args.describe:
        parser.error("--all can only be used with --describe")
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        parser.error("--add-config, --add-config-file and --delete-config can only be used with --alter")

    def body() -> int:
        entity = quota_entities(parser, args)
        if entity is not None and (len(entity) > 1 or entity[0][0] != "user" or entity[0][1] is not ...
                                   or args.describe):
            run_quota_command(args, entity)
            return 0
        etype, name = resolve_entity(parser, args)
        svc: Any = ScramUserService(args, name) if etype == "users" else ConfigService(args, etype, name)
        try:
            svc.describe() if args.describe else svc.alter()
            if not args.describe and etype == "users":
                print(f"Completed updating config for user {name}.")
        finally:
            svc.close()
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
