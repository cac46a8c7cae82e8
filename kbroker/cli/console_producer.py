"""``kbroker-console-producer``: produce the lines of standard input, like ``kafka-console-producer.sh``.

    kbroker-console-producer --bootstrap-server localhost:9092 --topic t
    kbroker-console-producer --bootstrap-server localhost:9092 --topic t --property parse.key=true \\
        --property key.separator=: --compression-codec lz4 --producer-property acks=1

Reader properties are Kafka's ``LineMessageReader`` ones: ``parse.key``, ``key.separator`` (default tab),
``parse.headers``, ``headers.delimiter`` (tab), ``headers.separator`` (``,``), ``headers.key.separator`` (``:``),
``null.marker`` and ``ignore.error``. Uses confluent-kafka's Producer.
"""

from __future__ import annotations

import sys
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
    timeout_from_env,
)

PROG = "kbroker-console-producer"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Read data from standard input and publish it to Kafka.")
    add_bootstrap(p)
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to produce messages to")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="a reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--reader-property", action="append", default=[], metavar="KEY=VALUE", help="same as --property")
    p.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="a producer configuration property")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="FILE",
                   help="producer configuration properties file")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                   help="none, gzip (the default when given without a value), snappy, lz4 or zstd")
    p.add_argument("--sync", action="store_true", help="send each message synchronously")
    p.add_argument("--batch-size", type=int, help="messages per batch (batch.num.messages)")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms: max time a message waits for a batch "
                                                             "(default 1000)")
    p.add_argument("--request-required-acks", default=None, help="acks (default -1)")
    p.add_argument("--request-timeout-ms", type=int, help="request.timeout.ms")
    p.add_argument("--message-send-max-retries", type=int, help="retries")
    p.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms")
    p.add_argument("--max-block-ms", type=int, help="accepted for compatibility")
    p.add_argument("--max-memory-bytes", type=int, help="buffer memory (queue.buffering.max.kbytes)")
    p.add_argument("--max-partition-memory-bytes", type=int, help="accepted for compatibility")
    p.add_argument("--metadata-expiry-ms", type=int, help="metadata.max.age.ms")
    add_version(p)
    return p


class LineReader:
    """Kafka's ``LineMessageReader``: one record per line, optional key and headers."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = props.get("parse.key", "false").strip().lower() == "true"
        self.key_sep = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").strip().lower() == "true"
        self.headers_delim = props.get("headers.delimiter", "\t")
        self.headers_sep = props.get("headers.separator", ",")
        self.header_key_sep = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        self.ignore_error = props.get("ignore.error", "false").strip().lower() == "true"
        if self.null_marker is not None and self.null_marker == "":
            raise CliError("null.marker must not be empty")
        self.line_no = 0

    def _null(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def parse(self, line: str) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        self.line_no += 1
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            cut = rest.find(self.headers_delim)
            if cut < 0:
                if not self.ignore_error:
                    raise CliError(f"No headers delimiter found on line number {self.line_no}: '{line}'")
            else:
                raw, rest = rest[:cut], rest[cut + len(self.headers_delim):]
                if raw != self.null_marker:
                    for h in raw.split(self.headers_sep):
                        k, sep, v = h.partition(self.header_key_sep)
                        if self.null_marker is not None and k == self.null_marker:
                            raise CliError(f"Header keys should not be equal to the null marker '{self.null_marker}' "
                                           "as they can't be null")
                        headers.append((k, self._null(v) if sep else None))
        key: bytes | None = None
        if self.parse_key:
            cut = rest.find(self.key_sep)
            if cut < 0:
                if not self.ignore_error:
                    raise CliError(f"No key separator found on line number {self.line_no}: '{line}'")
                return None, self._null(rest), headers
            key, rest = self._null(rest[:cut]), rest[cut + len(self.key_sep):]
        return key, self._null(rest), headers


def producer_conf(a: Any) -> dict[str, Any]:
    props = load_properties(a.producer_config)
    props.update(parse_kv(a.producer_property, "--producer-property"))
    conf = client_config(a.bootstrap_server, props)
    conf.setdefault("linger.ms", a.timeout if a.timeout is not None else 1000)
    if a.request_required_acks is not None:
        conf["acks"] = a.request_required_acks
    conf.setdefault("acks", "all")
    if a.compression_codec is not None:
        if a.compression_codec not in CODECS:
            raise CliError(f"unknown compression codec {a.compression_codec!r}: use one of {', '.join(CODECS)}")
        conf["compression.type"] = a.compression_codec
    if a.batch_size is not None:
        conf["batch.num.messages"] = a.batch_size
    if a.request_timeout_ms is not None:
        conf["request.timeout.ms"] = a.request_timeout_ms
    if a.message_send_max_retries is not None:
        conf["retries"] = a.message_send_max_retries
    if a.retry_backoff_ms is not None:
        conf["retry.backoff.ms"] = a.retry_backoff_ms
    if a.max_memory_bytes is not None:
        conf["queue.buffering.max.kbytes"] = max(1, a.max_memory_bytes // 1024)
    if a.metadata_expiry_ms is not None:
        conf["metadata.max.age.ms"] = a.metadata_expiry_ms
    conf.setdefault("message.timeout.ms", 120_000)  # Kafka's delivery.timeout.ms default
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        from confluent_kafka import KafkaException, Producer

        reader_props = parse_kv(args.property + args.reader_property, "--property", strip_values=False)
        reader = LineReader(reader_props)
        try:
            producer = Producer(producer_conf(args))
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"invalid producer configuration: {kafka_error_text(exc)}") from None
        check_reachable(producer, args.bootstrap_server)
        errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                key = msg.key()
                value = msg.value()
                errors.append(f"Error when sending message to topic {msg.topic()} with key: "
                              f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                              f"{'null' if value is None else f'{len(value)} bytes'} with error: {err.str()}")
                print(f"ERROR {errors[-1]}", file=sys.stderr)

        stdin = sys.stdin
        for raw in stdin:
            line = raw[:-1] if raw.endswith("\n") else raw
            if line.endswith("\r"):
                line = line[:-1]
            key, value, headers = reader.parse(line)
            while True:
                try:
                    producer.produce(args.topic, value=value, key=key, headers=headers or None,
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
                except KafkaException as exc:
                    raise CliError(kafka_error_text(exc)) from None
            if args.sync:
                producer.flush()
            producer.poll(0)
        remaining = producer.flush(max(timeout_from_env(), 30.0))
        if remaining:
            raise CliError(f"{remaining} message(s) were not delivered in time")
        return 1 if errors else 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
