"""``kbroker-console-consumer``: print records to standard output, like ``kafka-console-consumer.sh``.

    kbroker-console-consumer --bootstrap-server localhost:9092 --topic t --from-beginning
    kbroker-console-consumer --bootstrap-server localhost:9092 --topic t --partition 0 --offset 42 \\
        --max-messages 10 --property print.key=true --property print.offset=true --property key.separator=:
    kbroker-console-consumer --bootstrap-server localhost:9092 --include 'orders.*' --group g

Formatting follows Kafka's ``DefaultMessageFormatter`` (``print.timestamp``, ``print.partition``,
``print.offset``, ``print.headers``, ``print.key``, ``print.value``, ``key.separator``, ``line.separator``,
``headers.separator``, ``null.literal``). Without ``--group`` a random ``console-consumer-NNNNN`` group is used
and nothing is committed; with ``--partition`` the partition is assigned (no group membership needed).
``Processed a total of N messages`` goes to stderr at the end. Uses confluent-kafka's Consumer.
"""

from __future__ import annotations

import random
import signal
import sys
import time
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_bootstrap,
    add_version,
    check_reachable,
    client_config,
    kafka_error_text,
    load_properties,
    parse_kv,
    run_tool,
)

PROG = "kbroker-console-consumer"


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Consume records from Kafka and print them to standard output.")
    add_bootstrap(p)
    p.add_argument("--topic", help="the topic to consume")
    p.add_argument("--include", "--whitelist", dest="include", metavar="REGEX",
                   help="regular expression of the topics to consume")
    p.add_argument("--group", help="the consumer group id")
    p.add_argument("--partition", type=int, help="consume only this partition (assigned, no group membership)")
    p.add_argument("--offset", default=None, metavar="earliest|latest|N",
                   help="with --partition: where to start (default latest)")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset when there is no "
                                                                 "committed offset")
    p.add_argument("--max-messages", type=int, default=-1, help="exit after this many messages")
    p.add_argument("--timeout-ms", type=int, default=-1, help="exit when no message arrives for this long")
    p.add_argument("--skip-message-on-error", action="store_true", help="skip a message that cannot be printed")
    p.add_argument("--property", "--formatter-property", action="append", default=[], dest="property",
                   metavar="KEY=VALUE", help="a formatter property (print.key=true, key.separator=..., ...)")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a consumer configuration property")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config", metavar="FILE",
                   help="consumer configuration properties file")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default=None,
                   help="read_uncommitted (default) or read_committed")
    p.add_argument("--formatter", help="only the default formatter (org.apache.kafka.tools.consumer."
                                       "DefaultMessageFormatter) is available")
    p.add_argument("--key-deserializer", help="accepted for compatibility (keys are printed as bytes)")
    p.add_argument("--value-deserializer", help="accepted for compatibility (values are printed as bytes)")
    p.add_argument("--enable-systest-events", action="store_true", help="accepted for compatibility")
    add_version(p)
    return p


def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    v = props.get(key)
    return default if v is None else v.strip().lower() == "true"


def _unescape(text: str) -> str:
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


class Formatter:
    """Kafka's ``DefaultMessageFormatter``."""

    def __init__(self, props: dict[str, str]) -> None:
        self.ts = _bool(props, "print.timestamp", False)
        self.partition = _bool(props, "print.partition", False)
        self.offset = _bool(props, "print.offset", False)
        self.headers = _bool(props, "print.headers", False)
        self.key = _bool(props, "print.key", False)
        self.value = _bool(props, "print.value", True)
        self.key_sep = _unescape(props.get("key.separator", "\t")).encode()
        self.line_sep = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_sep = _unescape(props.get("headers.separator", ",")).encode()
        self.null = _unescape(props.get("null.literal", "null")).encode()

    def format(self, msg: Any) -> bytes:
        parts: list[bytes] = []
        if self.ts:
            ttype, ts = msg.timestamp()
            parts.append({1: b"CreateTime:", 2: b"LogAppendTime:"}.get(ttype, b"") + str(ts).encode()
                         if ttype in (1, 2) else b"NO_TIMESTAMP")
        if self.partition:
            parts.append(b"Partition:" + str(msg.partition()).encode())
        if self.offset:
            parts.append(b"Offset:" + str(msg.offset()).encode())
        if self.headers:
            hs = msg.headers() or []
            parts.append(self.headers_sep.join(k.encode() + b":" + (self.null if v is None else bytes(v))
                                               for k, v in hs) if hs else b"NO_HEADERS")
        if self.key:
            k = msg.key()
            parts.append(self.null if k is None else bytes(k))
        if self.value:
            v = msg.value()
            parts.append(self.null if v is None else bytes(v))
        return self.key_sep.join(parts) + self.line_sep


def consumer_conf(a: Any) -> tuple[dict[str, Any], bool]:
    props = load_properties(a.consumer_config)
    props.update(parse_kv(a.consumer_property, "--consumer-property"))
    if a.group and props.get("group.id") not in (None, a.group):
        raise CliError(f"The group ids provided in different places (directly using '--group': {a.group}, via "
                       f"consumer config 'group.id': {props['group.id']}) do not match.")
    conf = client_config(a.bootstrap_server, props)
    group_given = bool(a.group or props.get("group.id"))
    if a.group:
        conf["group.id"] = a.group
    if not group_given:
        conf["group.id"] = f"console-consumer-{random.randint(0, 99999)}"
        conf.setdefault("enable.auto.commit", False)
    conf.setdefault("auto.offset.reset", "earliest" if a.from_beginning else "latest")
    conf["isolation.level"] = a.isolation_level or props.get("isolation.level", "read_uncommitted")
    conf.setdefault("enable.partition.eof", False)
    return conf, group_given


def check_args(p: ToolParser, a: Any) -> None:
    if bool(a.topic) == bool(a.include):
        p.error("Exactly one of include/topic is required.")
    if a.partition is not None and not a.topic:
        p.error("The topic is required when partition is specified.")
    if a.offset is not None and a.partition is None:
        p.error("The partition is required when offset is specified.")
    if a.from_beginning and a.offset is not None:
        p.error("Options from-beginning and offset cannot be specified together.")
    if a.group and a.partition is not None:
        pass  # allowed: the group is used for committing, the partition is assigned
    if a.offset is not None and a.offset not in ("earliest", "latest"):
        try:
            if int(a.offset) < 0:
                raise ValueError
        except ValueError:
            p.error(f"The provided offset value '{a.offset}' is incorrect. Valid values are 'earliest', 'latest', "
                    "or a non-negative long.")
    if a.formatter and not a.formatter.endswith("DefaultMessageFormatter"):
        p.error(f"formatter {a.formatter} is not available: only DefaultMessageFormatter")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    count = [0]

    def body() -> int:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

        formatter = Formatter(parse_kv(args.property, "--property", strip_values=False))
        conf, _ = consumer_conf(args)
        try:
            consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"invalid consumer configuration: {kafka_error_text(exc)}") from None
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            md = check_reachable(consumer, args.bootstrap_server)
            if args.partition is not None:
                tm = md.topics.get(args.topic)
                if tm is None or tm.error is not None or args.partition not in tm.partitions:
                    md = consumer.list_topics(args.topic, timeout=10)
                    tm = md.topics.get(args.topic)
                if tm is None or args.partition not in tm.partitions:
                    raise CliError(f"Partition {args.partition} of topic {args.topic} does not exist")
                if args.from_beginning or args.offset == "earliest":
                    start = OFFSET_BEGINNING
                elif args.offset in (None, "latest"):
                    start = OFFSET_END
                else:
                    start = int(args.offset)
                consumer.assign([TopicPartition(args.topic, args.partition, start)])
            else:
                consumer.subscribe([args.topic] if args.topic else ["^" + args.include])
            out = sys.stdout.buffer
            last = time.monotonic()
            warned: set[str] = set()
            while args.max_messages < 0 or count[0] < args.max_messages:
                msg = consumer.poll(0.2)
                if msg is None:
                    if args.timeout_ms >= 0 and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] ERROR Error processing message, terminating "
                              "consumer process:  (org.apache.kafka.tools.consumer.ConsoleConsumer)\n"
                              "org.apache.kafka.common.errors.TimeoutException", file=sys.stderr)
                        break
                    continue
                if msg.error():
                    err = msg.error()
                    if err.fatal():
                        raise CliError(f"Error processing message, terminating consumer process: {err.str()}")
                    if err.code() != KafkaError._PARTITION_EOF and err.str() not in warned:
                        warned.add(err.str())
                        print(f"WARN {err.str()}", file=sys.stderr)
                    continue
                last = time.monotonic()
                try:
                    out.write(formatter.format(msg))
                except Exception as exc:  # noqa: BLE001
                    if not args.skip_message_on_error:
                        raise CliError(f"Error processing message, terminating consumer process: {exc}") from None
                    continue
                out.flush()
                count[0] += 1
        finally:
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass
            print(f"Processed a total of {count[0]} messages", file=sys.stderr)
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
