"""``kbroker-delete-records``: move partitions' log start offsets forward, like ``kafka-delete-records.sh``.

    kbroker-delete-records --bootstrap-server localhost:9092 --offset-json-file offsets.json

with Kafka's JSON format ``{"partitions": [{"topic": "t", "partition": 0, "offset": 42}], "version": 1}``
(``"offset": -1`` deletes up to the high watermark). Prints ``partition: t-0<TAB>low_watermark: 42`` per
partition, or ``partition: t-0<TAB>error: ...``. Sends DeleteRecords through confluent-kafka's AdminClient.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from kbroker.cli._common import (
    CliError,
    ToolParser,
    add_bootstrap,
    add_command_config,
    add_version,
    admin_client,
    check_reachable,
    kafka_error_text,
    load_properties,
    result,
    run_tool,
)

PROG = "kbroker-delete-records"


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Delete records of the given partitions down to the specified offset.")
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='REQUIRED: JSON file of {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], '
                        '"version": 1}')
    add_command_config(p)
    add_version(p)
    return p


def parse_offsets(text: str) -> list[tuple[str, int, int]]:
    """Kafka's ``DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup`` plus its duplicate check."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CliError(f"The offset json file is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError("The offset json file must hold a JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    parts = doc.get("partitions")
    if not isinstance(parts, list):
        raise CliError("Missing partitions field")
    out: list[tuple[str, int, int]] = []
    for item in parts:
        try:
            topic, partition, offset = item["topic"], item["partition"], item["offset"]
        except (KeyError, TypeError):
            raise CliError(f"Each partition needs topic, partition and offset: {json.dumps(item)}") from None
        if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
            raise CliError(f"Invalid partition entry {json.dumps(item)}")
        out.append((topic, partition, offset))
    seen: set[tuple[str, int]] = set()
    dupes = []
    for t, p, _ in out:
        if (t, p) in seen:
            dupes.append(f"{t}-{p}")
        seen.add((t, p))
    if dupes:
        raise CliError(f"Offset json file contains duplicate topic partitions: {','.join(dupes)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        from confluent_kafka import TopicPartition

        try:
            with open(args.offset_json_file) as fh:
                text = fh.read()
        except OSError as exc:
            raise CliError(f"cannot read {args.offset_json_file}: {exc.strerror or exc}") from None
        offsets = parse_offsets(text)
        admin = admin_client(args.bootstrap_server, load_properties(args.command_config))
        check_reachable(admin, args.bootstrap_server)
        print("Executing records delete operation")
        failed = 0
        futures: dict[Any, Any] = {}
        if offsets:
            futures = admin.delete_records([TopicPartition(t, p, o) for t, p, o in offsets], request_timeout=10,
                                           operation_timeout=10)
        print("Records delete operation completed:")
        for tp, fut in futures.items():
            try:
                res = result(fut)
                print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {res.low_watermark}")
            except CliError:
                raise
            except Exception as exc:  # noqa: BLE001 - KafkaException for this partition
                failed += 1
                print(f"partition: {tp.topic}-{tp.partition}\terror: {kafka_error_text(exc)}")
        return 1 if failed else 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
