"""``kbroker-producer-perf-test``: producer throughput and latency, like ``kafka-producer-perf-test.sh``.

    kbroker-producer-perf-test --topic t --num-records 100000 --record-size 100 --throughput -1 \\
        --producer-props bootstrap.servers=localhost:9092 acks=1 linger.ms=5

Every ``--reporting-interval`` ms (default 5000) a line ``N records sent, X records/sec (Y MB/sec), Z ms avg
latency, W ms max latency.`` and at the end the total with the 50th, 95th, 99th and 99.9th latency
percentiles, as Kafka's ``ProducerPerformance`` prints them. Latency is measured from ``produce()`` to the
delivery report. Uses confluent-kafka's Producer.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_version,
    check_reachable,
    client_config,
    kafka_error_text,
    load_properties,
    parse_kv,
    run_tool,
)

PROG = "kbroker-producer-perf-test"


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="A tool to test producer performance.")
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    p.add_argument("--num-records", type=int, required=True, help="REQUIRED: number of records to produce")
    p.add_argument("--record-size", type=int, help="record size in bytes")
    p.add_argument("--payload-file", help="file of payloads, one per --payload-delimiter")
    p.add_argument("--payload-delimiter", default="\\n", help="delimiter of --payload-file (default \\n)")
    p.add_argument("--payload-monotonic", action="store_true", help="payloads are the record numbers 0, 1, 2, ...")
    p.add_argument("--throughput", type=float, required=True,
                   help="REQUIRED: maximum records/sec; -1 for no limit")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="PROP=VALUE", help="producer properties")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="FILE",
                   help="producer configuration properties file")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the server(s) to connect to")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS", help="ms between progress lines")
    p.add_argument("--warmup-records", type=int, default=0, help="records to leave out of the final statistics")
    p.add_argument("--transactional-id", help="not supported by this tool")
    p.add_argument("--transaction-duration-ms", type=int, help="not supported by this tool")
    p.add_argument("--print-metrics", action="store_true", help="print librdkafka statistics at the end")
    add_version(p)
    return p


class Stats:
    """Kafka's ``ProducerPerformance.Stats``: windows of ``interval`` ms and sampled latencies."""

    def __init__(self, num_records: int, interval_ms: int) -> None:
        self.start = time.monotonic()
        self.window_start = self.start
        self.interval = interval_ms / 1000.0
        self.sampling = max(1, num_records // min(num_records, 500_000)) if num_records > 0 else 1
        self.latencies: list[int] = []
        self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.w_count = self.w_bytes = self.w_total = self.w_max = 0
        self.iteration = 0

    def record(self, latency_ms: int, size: int) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.w_count += 1
        self.w_bytes += size
        self.w_total += latency_ms
        self.w_max = max(self.w_max, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        now = time.monotonic()
        if now - self.window_start >= self.interval:
            self.print_window(now)
            self.window_start = now
            self.w_count = self.w_bytes = self.w_total = self.w_max = 0

    def print_window(self, now: float) -> None:
        elapsed = max(now - self.window_start, 1e-9)
        print("%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency."
              % (self.w_count, self.w_count / elapsed, self.w_bytes / elapsed / (1024 * 1024),
                 self.w_total / max(self.w_count, 1), float(self.w_max)), flush=True)

    def print_total(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        lat = sorted(self.latencies)

        def pct(p: float) -> int:
            return lat[min(int(p * len(lat)), len(lat) - 1)] if lat else 0

        print("%d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, "
              "%d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th."
              % (self.count, self.count / elapsed, self.bytes / elapsed / (1024 * 1024),
                 self.total_latency / max(self.count, 1), float(self.max_latency),
                 pct(0.5), pct(0.95), pct(0.99), pct(0.999)), flush=True)


def payloads(a: Any) -> list[bytes] | None:
    if a.payload_file is None:
        return None
    delim = a.payload_delimiter.encode().decode("unicode_escape")
    try:
        with open(a.payload_file, encoding="utf-8") as fh:
            items = [x.encode() for x in fh.read().split(delim) if x]
    except OSError as exc:
        raise CliError(f"cannot read {a.payload_file}: {exc.strerror or exc}") from None
    if not items:
        raise CliError(f"File is empty: {a.payload_file}")
    print(f"Number of messages read: {len(items)}")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sources = sum(bool(x) for x in (args.record_size is not None, args.payload_file, args.payload_monotonic))
    if sources != 1:
        parser.error("Either --record-size or --payload-file or --payload-monotonic must be specified but not both.")
    if args.record_size is not None and args.record_size <= 0:
        parser.error("--record-size must be positive")
    if args.num_records <= 0:
        parser.error("--num-records must be greater than zero")
    if args.transactional_id or args.transaction_duration_ms:
        parser.error("--transactional-id/--transaction-duration-ms are not supported by this tool")

    def body() -> int:
        from confluent_kafka import KafkaException, Producer

        props = load_properties(args.producer_config)
        props.update(parse_kv(args.producer_props, "--producer-props"))
        bootstrap = args.bootstrap_server or props.get("bootstrap.servers")
        if not bootstrap:
            raise CliError("Either --bootstrap-server, a bootstrap.servers entry in --producer-props or "
                           "--producer.config must be specified")
        conf = client_config(bootstrap, props)
        if args.print_metrics:
            conf["statistics.interval.ms"] = 0
        try:
            producer = Producer(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"invalid producer configuration: {kafka_error_text(exc)}") from None
        check_reachable(producer, bootstrap)
        items = payloads(args)
        rnd = random.Random()
        fixed = bytes(rnd.randint(65, 90) for _ in range(args.record_size)) if args.record_size else b""
        stats = Stats(args.num_records - args.warmup_records if args.warmup_records else args.num_records,
                      args.reporting_interval)
        errors: list[str] = []
        warm = args.warmup_records

        def callback(start: float, size: int, i: int) -> Any:
            def on_delivery(err: Any, msg: Any) -> None:
                if err is not None:
                    if not errors:
                        print(f"ERROR Error when sending message to topic {args.topic}: {err.str()}", file=sys.stderr)
                    errors.append(err.str())
                    return
                if i >= warm:
                    stats.record(int((time.monotonic() - start) * 1000), size)
            return on_delivery

        start_time = time.monotonic()
        for i in range(args.num_records):
            if args.payload_monotonic:
                payload = str(i).encode()
            elif items is not None:
                payload = items[rnd.randrange(len(items))]
            else:
                payload = fixed
            if i == warm and warm:
                stats.start = stats.window_start = time.monotonic()
            sent = time.monotonic()
            while True:
                try:
                    producer.produce(args.topic, value=payload, on_delivery=callback(sent, len(payload), i))
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    raise CliError(kafka_error_text(exc)) from None
            producer.poll(0)
            if args.throughput > 0:  # Kafka's ThroughputThrottler: sleep until we are back on schedule
                ahead = (i + 1) / args.throughput - (time.monotonic() - start_time)
                if ahead > 0.002:
                    producer.poll(ahead)
        left = producer.flush(120)
        stats.print_total()
        if left:
            raise CliError(f"{left} record(s) were not delivered within 120 s")
        if errors:
            raise CliError(f"{len(errors)} record(s) failed: {errors[0]}")
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
