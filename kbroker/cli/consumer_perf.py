"""``kbroker-consumer-perf-test``: consumer throughput, like ``kafka-consumer-perf-test.sh``.

    kbroker-consumer-perf-test --bootstrap-server localhost:9092 --topic t --messages 100000 [--group g]

Prints Kafka's ``ConsumerPerformance`` header
``start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec`` and one line of figures (``--show-detailed-stats`` adds a line
per ``--reporting-interval``). As Kafka's tool, it subscribes with a consumer group (``perf-consumer-NNNNN``
unless ``--group``), so the broker must support consumer groups; rebalance time is the time until the first
assignment. Stops after ``--messages`` records or ``--timeout`` ms without one. Uses confluent-kafka's Consumer.
"""

from __future__ import annotations

import random
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
    run_tool,
)

PROG = "kbroker-consumer-perf-test"
HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
          "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
                   "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="A tool to test consumer performance.")
    add_bootstrap(p)
    p.add_argument("--topic", help="the topic to consume")
    p.add_argument("--include", metavar="REGEX", help="regular expression of the topics to consume")
    p.add_argument("--group", help="the consumer group id (default perf-consumer-<random>)")
    p.add_argument("--messages", "--num-records", dest="messages", type=int, required=True,
                   help="REQUIRED: number of messages to consume")
    p.add_argument("--from-latest", action="store_true", help="start at the latest offset (default: earliest)")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, help="bytes per fetch per partition")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, help="TCP receive buffer size")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config", metavar="FILE",
                   help="consumer configuration properties file")
    p.add_argument("--timeout", type=int, default=10_000, metavar="MS", help="max ms between two records")
    p.add_argument("--show-detailed-stats", action="store_true", help="a line per --reporting-interval")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS", help="interval of detailed stats")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", help="Java SimpleDateFormat pattern")
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.add_argument("--print-metrics", action="store_true", help="accepted for compatibility")
    add_version(p)
    return p


def java_date(fmt: str, epoch_s: float) -> str:
    """The subset of ``SimpleDateFormat`` that the date formats of Kafka's docs use."""
    t = time.localtime(epoch_s)
    ms = int(epoch_s * 1000) % 1000
    out = fmt
    for java, value in (("yyyy", f"{t.tm_year:04d}"), ("MM", f"{t.tm_mon:02d}"), ("dd", f"{t.tm_mday:02d}"),
                        ("HH", f"{t.tm_hour:02d}"), ("mm", f"{t.tm_min:02d}"), ("ss", f"{t.tm_sec:02d}"),
                        ("SSS", f"{ms:03d}")):
        out = out.replace(java, value)
    return out


def figures(mb: float, msgs: int, elapsed_ms: float, join_ms: float) -> str:
    secs = max(elapsed_ms, 1e-9) / 1000.0
    fetch_ms = elapsed_ms - join_ms
    fetch_secs = fetch_ms / 1000.0
    fetch_mb_sec = mb / fetch_secs if fetch_secs > 0 else 0.0
    fetch_msg_sec = msgs / fetch_secs if fetch_secs > 0 else 0.0
    return "%.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f" % (mb, mb / secs, msgs, msgs / secs, int(join_ms),
                                                          int(fetch_ms), fetch_mb_sec, fetch_msg_sec)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.topic) == bool(args.include):
        parser.error("Exactly one of include/topic is required.")
    if args.messages <= 0:
        parser.error("--messages must be greater than zero")

    def body() -> int:
        from confluent_kafka import Consumer, KafkaException

        props = load_properties(args.consumer_config)
        conf: dict[str, Any] = client_config(args.bootstrap_server, props)
        conf.setdefault("group.id", args.group or f"perf-consumer-{random.randint(0, 99999)}")
        conf.setdefault("auto.offset.reset", "latest" if args.from_latest else "earliest")
        conf.setdefault("enable.auto.commit", True)
        conf.setdefault("max.partition.fetch.bytes", args.fetch_size)
        conf.setdefault("socket.receive.buffer.bytes", args.socket_buffer_size)
        conf.setdefault("isolation.level", "read_uncommitted")
        try:
            consumer = Consumer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"invalid consumer configuration: {kafka_error_text(exc)}") from None
        check_reachable(consumer, args.bootstrap_server)
        joined: list[float] = []
        start = time.time()

        def on_assign(c: Any, parts: Any) -> None:
            if not joined:
                joined.append(time.time())

        consumer.subscribe([args.topic] if args.topic else ["^" + args.include], on_assign=on_assign)
        if not args.hide_header:
            print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
        count = nbytes = 0
        last_record = time.time()
        last_report = start
        last_count, last_bytes = 0, 0
        timed_out = False
        try:
            while count < args.messages:
                msgs = consumer.consume(min(500, args.messages - count), 0.1)
                now = time.time()
                got = [m for m in msgs if not m.error()]
                for m in msgs:
                    if m.error() and m.error().fatal():
                        raise CliError(f"consumer failed: {m.error().str()}")
                if got:
                    last_record = now
                    count += len(got)
                    nbytes += sum(len(m.value() or b"") + len(m.key() or b"") for m in got)
                elif (now - last_record) * 1000 > args.timeout:
                    timed_out = True
                    break
                if args.show_detailed_stats and got and (now - last_report) * 1000 >= args.reporting_interval:
                    # rows come only while records arrive (as Kafka's tool); the rebalance time is the part of
                    # this interval spent before the group handed out partitions
                    join_point = joined[0] if joined else now
                    join_ms = max(0.0, min(join_point, now) - last_report) * 1000
                    print(f"{java_date(args.date_format, now)}, 0, "
                          + figures((nbytes - last_bytes) / (1024 * 1024), count - last_count,
                                    (now - last_report) * 1000, join_ms), flush=True)
                    last_report, last_count, last_bytes = now, count, nbytes
        finally:
            end = time.time()
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                pass
        if timed_out:
            print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
                  "exceeded. You can use the --timeout option to increase the timeout.", file=sys.stderr)
        join_ms = ((joined[0] if joined else end) - start) * 1000
        if not args.show_detailed_stats:
            print(f"{java_date(args.date_format, start)}, {java_date(args.date_format, end)}, "
                  + figures(nbytes / (1024 * 1024), count, (end - start) * 1000, join_ms), flush=True)
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
