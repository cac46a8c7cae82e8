"""``kbroker-dump-log``: print log segments, indexes and producer snapshots offline, like ``kafka-dump-log.sh``.

    kbroker-dump-log --files 00000000000000000000.log [--deep-iteration] [--print-data-log]
    kbroker-dump-log --files 00000000000000000000.index,00000000000000000000.timeindex
    kbroker-dump-log --files 00000000000000000042.snapshot
    kbroker-dump-log --cluster-metadata-decoder --files __cluster_metadata-0/00000000000000000000.log

kbroker keeps Kafka's on-disk layout (docs/storage-format.md), so this reads kbroker's files and Apache
Kafka's alike. The output follows Kafka 4.x's ``DumpLogSegments``: one ``baseOffset: ... isvalid: true`` line
per batch, ``| offset: ...`` lines per record with ``--deep-iteration`` (``key:``/``payload:`` with
``--print-data-log``), ``offset: N position: P`` for ``.index``, ``timestamp: T offset: O`` for ``.timeindex``
and ``producerId: ...`` lines for ``.snapshot``. Problems (index entries that do not match the log,
non-consecutive offsets, trailing bytes) are reported the way Kafka reports them.
"""

from __future__ import annotations

import base64
import functools
import json
import struct
import sys
from pathlib import Path
from typing import Any, Callable

from kbroker.cli._common import CliError, ToolParser, add_version, run_tool

PROG = "kbroker-dump-log"

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # v2 batch header, 61 bytes
_LOG_OVERHEAD = 12
_V2_HEADER = 61
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                  5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
_INT32_MAX = 2**31 - 1


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="Parse log files and dump their contents to the console, useful for "
                                          "debugging a seemingly corrupt log segment.")
    p.add_argument("--files", required=True, metavar="FILE1,FILE2,...",
                   help="REQUIRED: the comma-separated list of data and index log files to be dumped")
    p.add_argument("--print-data-log", action="store_true",
                   help="print the messages' content when dumping data logs (implies --deep-iteration)")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only the batches")
    p.add_argument("--verify-index-only", action="store_true", help="verify the index without printing it")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only check the index sanity (the check a broker runs at startup)")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, help="size of the largest message")
    p.add_argument("--max-bytes", type=int, default=_INT32_MAX,
                   help="limit the bytes of batches read from each .log file")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="skip metadata when printing records (also skips control records)")
    p.add_argument("--cluster-metadata-decoder", action="store_true",
                   help="decode the records as KRaft cluster metadata records (__cluster_metadata)")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="decode the records as __consumer_offsets records (group metadata and offsets)")
    p.add_argument("--transaction-log-decoder", action="store_true",
                   help="decode the records as __transaction_state records (transaction metadata)")
    p.add_argument("--key-decoder-class", nargs="?", const="StringDecoder", help="only the default string decoder")
    p.add_argument("--value-decoder-class", nargs="?", const="StringDecoder", help="only the default string decoder")
    add_version(p)
    return p


# ------------------------------------------------------------------------------------------ JSON of messages


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def message_json(msg: Any, version: int) -> dict[str, Any]:
    """A generated message as Kafka's generated ``*JsonConverter.write`` shapes it: camelCase fields of
    ``version``, uuids as Kafka text, bytes as base64, tagged fields only when not at their default."""
    from kbroker.controller.uuids import uuid_to_str
    from kbroker.protocol.schema import default_for, in_range

    out: dict[str, Any] = {}
    for f in type(msg).FIELDS:
        if not in_range(f.versions, version):
            continue
        value = getattr(msg, f.name)
        if f.tagged is not None and in_range(f.tagged, version) and value == default_for(f):
            continue

        def conv(v: Any, kind: str) -> Any:
            if v is None:
                return None
            if kind == "uuid":
                return uuid_to_str(bytes(v))
            if kind in ("bytes", "records"):
                return base64.b64encode(bytes(v)).decode("ascii")
            if kind == "struct":
                return message_json(v, version)
            return v

        if f.kind == "array":
            out[_camel(f.name)] = None if value is None else [conv(v, f.elem or "") for v in value]
        else:
            out[_camel(f.name)] = conv(value, f.kind)
    return out


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _record_type_name(cls: type) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper()


# ------------------------------------------------------------------------------------------ record parsers


def string_parser(rec: Any) -> tuple[str | None, str | None]:
    key = None if rec.key is None else bytes(rec.key).decode("utf-8", "replace")
    value = None if rec.value is None else bytes(rec.value).decode("utf-8", "replace")
    return key, value


def metadata_parser(rec: Any) -> tuple[str | None, str | None]:
    from kbroker.controller.records import decode_metadata_record_with_version

    try:
        msg, version = decode_metadata_record_with_version(rec.value)
        out = {"type": _record_type_name(type(msg)), "version": version, "data": message_json(msg, version)}
        return None, _dumps(out)
    except Exception as exc:  # noqa: BLE001 - Kafka prints and goes on
        return None, f"Error at {rec.offset}, skipping. {exc}"


@functools.lru_cache(maxsize=2)
def _coordinator_registry(transaction_log: bool = False) -> tuple[dict[int, type], dict[int, type]]:
    """Record type -> key / value class of ``__consumer_offsets`` (or of ``__transaction_state``: its record
    types 0 and 1 are reused by other coordinator topics)."""
    from kbroker.protocol import coordinator_records as cr

    keys: dict[int, type] = {}
    values: dict[int, type] = {}
    names = ("TransactionLogKey", "TransactionLogValue") if transaction_log else [
        n for n in dir(cr) if not n.startswith("TransactionLog")]
    for name in names:
        cls = getattr(cr, name)
        spec = getattr(cls, "SPEC_TYPE", None)
        if spec == "coordinator-key":
            keys.setdefault(cls.API_KEY, cls)
        elif spec == "coordinator-value":
            values.setdefault(cls.API_KEY, cls)
    return keys, values


def offsets_parser(rec: Any, transaction_log: bool = False) -> tuple[str | None, str | None]:
    from kbroker.protocol import codec

    if rec.key is None:
        raise CliError(f"Failed to decode message at offset {rec.offset} using the specified decoder "
                       "(message had a missing key)")
    keys, values = _coordinator_registry(transaction_log)
    try:
        key_bytes = bytes(rec.key)
        (rtype,) = struct.unpack_from(">h", key_bytes, 0)
        kcls = keys.get(rtype)
        if kcls is None:
            return f"Unknown record type {rtype} at offset {rec.offset}, skipping.", None
        kmsg, _ = codec.decode(kcls, key_bytes, 0, 2)
        key = _dumps({"type": str(rtype), "data": message_json(kmsg, 0)})
        if rec.value is None:
            return key, "<DELETE>"
        value_bytes = bytes(rec.value)
        (version,) = struct.unpack_from(">h", value_bytes, 0)
        vcls = values[rtype]
        vmsg, _ = codec.decode(vcls, value_bytes, version, 2)
        return key, _dumps({"version": str(version), "data": message_json(vmsg, version)})
    except Exception as exc:  # noqa: BLE001
        return f"Error at offset {rec.offset}, skipping. {exc}", None


def transaction_log_parser(rec: Any) -> tuple[str | None, str | None]:
    return offsets_parser(rec, transaction_log=True)


# ------------------------------------------------------------------------------------------ .log


class Dumper:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.print_data = (args.print_data_log or args.cluster_metadata_decoder or args.offsets_decoder
                           or args.transaction_log_decoder
                           or args.key_decoder_class is not None or args.value_decoder_class is not None)
        self.deep = args.deep_iteration or self.print_data
        self.parser: Callable[[Any], tuple[str | None, str | None]] = string_parser
        if args.cluster_metadata_decoder:
            self.parser = metadata_parser
        elif args.offsets_decoder:
            self.parser = offsets_parser
        elif args.transaction_log_decoder:
            self.parser = transaction_log_parser
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.time_errors: list[str] = []

    def dump(self, path: Path) -> None:
        print(f"Dumping {path}")
        name = path.name
        suffix = name[name.rfind("."):] if "." in name else ""
        handlers = {".log": self.dump_log, ".checkpoint": self.dump_log, ".index": self.dump_index,
                    ".timeindex": self.dump_time_index, ".snapshot": self.dump_snapshot, ".txnindex": self.dump_txn_index}
        handler = handlers.get(suffix)
        if handler is None:
            print(f"Ignoring unknown file {path}", file=sys.stderr)
            return
        try:
            handler(path)
        except FileNotFoundError:
            raise CliError(f"{path} (No such file or directory)") from None
        except IsADirectoryError:
            raise CliError(f"{path} (Is a directory)") from None

    def report(self) -> None:
        for fname, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{fname}", file=sys.stderr)
            for idx, log_off in sorted(pairs, reverse=True):
                print(f"  Index offset: {idx}, log offset: {log_off}", file=sys.stderr)
        for line in self.time_errors:
            print(line, file=sys.stderr)
        for fname, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {fname}", file=sys.stderr)
            for a, b in pairs:
                print(f"  {a} is followed by {b}", file=sys.stderr)

    def dump_log(self, path: Path) -> None:
        from kbroker.protocol.records import RecordBatch

        name = path.name
        if name.endswith(".log"):
            print(f"Log starting offset: {int(name.split('.')[0])}")
        elif name == "bootstrap.checkpoint":
            print("KRaft bootstrap snapshot")
        else:
            stem = name[: -len(".checkpoint")]
            off, _, epoch = stem.partition("-")
            if off.isdigit() and epoch.isdigit():
                print(f"Snapshot end offset: {int(off)}, epoch: {int(epoch)}")
        data = path.read_bytes()
        limit = min(len(data), self.args.max_bytes)
        pos = 0
        last_offset = [-1]
        while limit - pos >= _LOG_OVERHEAD:
            (base_offset, length) = struct.unpack_from(">qi", data, pos)
            size = length + _LOG_OVERHEAD
            if length < 0 or pos + size > limit or limit - pos < 17:
                break
            magic = data[pos + 16]
            if magic != 2:
                print(f"offset: {base_offset} position: {pos} size: {size} magic: {magic} "
                      "(message format v0/v1 is not decoded)")
                pos += size
                continue
            if size < _V2_HEADER:
                break
            batch = RecordBatch(memoryview(data)[pos:pos + size])
            self.print_batch(batch, pos)
            if self.deep:
                self.print_records(batch, path, last_offset)
            pos += size
        trailing = len(data) - pos
        if trailing > 0 and self.args.max_bytes == _INT32_MAX:
            print(f"Found {trailing} invalid bytes at the end of {path.name}")

    @staticmethod
    def _ts_type(batch: Any) -> str:
        return "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"

    def print_batch(self, b: Any, position: int) -> None:
        delete_horizon = f"OptionalLong[{b.base_timestamp}]" if b.has_delete_horizon else "OptionalLong.empty"
        valid = b.verify_crc()
        print(f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
              f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
              f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
              f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
              f"deleteHorizonMs: {delete_horizon} position: {position} {self._ts_type(b)}: {b.max_timestamp} "
              f"size: {b.size} magic: {b.magic} compresscodec: {_CODECS.get(b.compression, b.compression)} "
              f"crc: {b.crc} isvalid: {str(valid).lower()}")

    def print_records(self, b: Any, path: Path, last_offset: list[int]) -> None:
        try:
            records = list(b.records())
        except Exception as exc:  # noqa: BLE001 - a corrupt batch: say so and go on, as isvalid did
            print(f"| cannot decode the records of this batch: {exc}")
            return
        for i, rec in enumerate(records):
            if last_offset[0] >= 0 and rec.offset != last_offset[0] + 1:  # a segment may start anywhere
                self.non_consecutive.setdefault(str(path.resolve()), []).append((last_offset[0], rec.offset))
            last_offset[0] = rec.offset
            line = ""
            if not self.args.skip_record_metadata:
                seq = -1 if b.base_sequence < 0 else (b.base_sequence + (rec.offset - b.base_offset)) % (2**31)
                key_size = -1 if rec.key is None else len(rec.key)
                value_size = -1 if rec.value is None else len(rec.value)
                line = (f"| offset: {rec.offset} {self._ts_type(b)}: {rec.timestamp} keySize: {key_size} "
                        f"valueSize: {value_size} sequence: {seq} headerKeys: [{','.join(k for k, _ in rec.headers)}]")
                if b.is_control:
                    line += self.control_text(rec)
            if self.print_data and not b.is_control:
                prefix = "| " if self.args.skip_record_metadata else " "
                key, value = self.parser(rec)
                if key is not None:
                    line += f"{prefix}key: {key}"
                    prefix = " "
                if value is not None:
                    line += f"{prefix}payload: {value}"
            print(line)

    @staticmethod
    def control_text(rec: Any) -> str:
        from kbroker.protocol import codec
        from kbroker.protocol.messages import LeaderChangeMessage, SnapshotFooterRecord, SnapshotHeaderRecord

        key = bytes(rec.key or b"")
        if len(key) < 4:
            return " controlType: UNKNOWN(-1)"
        _, ctype = struct.unpack_from(">hh", key, 0)
        value = bytes(rec.value or b"")
        if ctype in (0, 1) and len(value) >= 6:
            _, coordinator_epoch = struct.unpack_from(">hi", value, 0)
            return f" endTxnMarker: {_CONTROL_TYPES[ctype]} coordinatorEpoch: {coordinator_epoch}"
        # KRaft control records: the value is the message itself (its own Version field first), read at version 0
        kraft = {2: (LeaderChangeMessage, "LeaderChange: "), 3: (SnapshotHeaderRecord, "SnapshotHeader "),
                 4: (SnapshotFooterRecord, "SnapshotFooter ")}
        if ctype in kraft:
            cls, label = kraft[ctype]
            try:
                msg, _ = codec.decode(cls, value, 0, 0)
                return f" {label}{_dumps(message_json(msg, 0))}"
            except Exception:  # noqa: BLE001
                pass
        return f" controlType: {_CONTROL_TYPES.get(ctype, 'UNKNOWN')}({ctype})"

    # ---- indexes
    @staticmethod
    def _base_offset(path: Path) -> int:
        stem = path.name.split(".")[0]
        if not stem.isdigit():
            raise CliError(f"{path}: the file name does not start with a base offset")
        return int(stem)

    def _log_of(self, path: Path) -> bytes:
        log = path.with_name(path.name.split(".")[0] + ".log")
        try:
            return log.read_bytes()
        except FileNotFoundError:
            raise CliError(f"{log} (No such file or directory): an index is dumped with its segment") from None

    @staticmethod
    def _batch_at(data: bytes, position: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, max timestamp) of the batch at ``position``, None if there is none."""
        if position < 0 or position + _V2_HEADER > len(data):
            return None
        h = _BATCH_HEADER.unpack_from(data, position)
        if h[1] + _LOG_OVERHEAD + position > len(data) or h[3] != 2:
            return None
        return h[0], h[0] + h[6], h[8]

    def dump_index(self, path: Path) -> None:
        base = self._base_offset(path)
        raw = path.read_bytes()
        log = self._log_of(path)
        n = len(raw) // _INDEX_ENTRY.size
        if n == 0:
            print(f"{path} is empty.")
            return
        entries = [_INDEX_ENTRY.unpack_from(raw, i * _INDEX_ENTRY.size) for i in range(n)]
        if self.args.index_sanity_check:
            problem = None
            if len(raw) % _INDEX_ENTRY.size:
                problem = f"Index file {path.name} is corrupt, found {len(raw)} bytes which is neither positive nor a multiple of 8."
            elif any(entries[i][0] <= entries[i - 1][0] for i in range(1, n)):
                problem = f"Corrupt index found, index file ({path}) has non-increasing offsets"
            if problem:
                raise CliError(problem)
            print(f"{path} passed sanity check.")
            return
        for i, (rel, position) in enumerate(entries):
            offset = base + rel
            if rel == 0 and i > 0:
                return
            batch = self._batch_at(log, position)
            found = batch[1] if batch else -1
            if found != offset:
                self.index_mismatches.setdefault(str(path.resolve()), []).append((offset, found))
            if not self.args.verify_index_only:
                print(f"offset: {offset} position: {position}")

    def dump_time_index(self, path: Path) -> None:
        base = self._base_offset(path)
        raw = path.read_bytes()
        log = self._log_of(path)
        entries = [_TIME_ENTRY.unpack_from(raw, i * _TIME_ENTRY.size) for i in range(len(raw) // _TIME_ENTRY.size)]
        if self.args.index_sanity_check:
            if len(raw) % _TIME_ENTRY.size or any(entries[i][0] < entries[i - 1][0] for i in range(1, len(entries))):
                raise CliError(f"Corrupt time index found, time index file ({path}) is not valid")
            print(f"{path} passed sanity check.")
            return
        batches: list[tuple[int, int, int]] = []
        pos = 0
        while True:
            b = self._batch_at(log, pos)
            if b is None:
                break
            batches.append(b)
            pos += struct.unpack_from(">i", log, pos + 8)[0] + _LOG_OVERHEAD
        mismatches, out_of_order, not_found = [], [], []
        prev = -1
        for i, (ts, rel) in enumerate(entries):
            offset = base + rel
            if rel == 0 and i > 0:
                break
            match = next((b for b in batches if b[1] >= offset), None)
            if match is None:
                not_found.append((offset, -1))
            elif match[1] != offset:
                not_found.append((offset, match[1]))
            else:
                if match[2] != ts:
                    mismatches.append((ts, match[2]))
                if prev >= ts:
                    out_of_order.append((ts, prev))
            if not self.args.verify_index_only:
                print(f"timestamp: {ts} offset: {offset}")
            prev = ts
        where = str(path.resolve())
        if mismatches:
            self.time_errors.append(f"Found timestamp mismatch in :{where}")
            self.time_errors += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in mismatches]
        if out_of_order:
            self.time_errors.append(f"Found out of order timestamp in :{where}")
            self.time_errors += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in out_of_order]
        if not_found:
            self.time_errors.append("The following indexed offsets are not found in the log.")
            self.time_errors += [f"Indexed offset: {a}, found log offset: {b}" for a, b in not_found]

    def dump_snapshot(self, path: Path) -> None:
        from kbroker.storage.producer_state import CorruptSnapshotError, read_snapshot

        try:
            entries = read_snapshot(path)
        except CorruptSnapshotError as exc:
            print(str(exc), file=sys.stderr)
            return
        for e in entries:
            txn = f"OptionalLong[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0 else "OptionalLong.empty"
            line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: "
                    f"{e.coordinator_epoch} currentTxnFirstOffset: {txn} lastTimestamp: {e.last_timestamp}")
            if e.batches:
                m = e.batches[0]
                line += (f" firstSequence: {m.first_seq} lastSequence: {m.last_seq} lastOffset: {m.last_offset} "
                         f"offsetDelta: {m.offset_delta} timestamp: {m.timestamp}")
            print(line)

    def dump_txn_index(self, path: Path) -> None:
        raw = path.read_bytes()
        for i in range(len(raw) // _TXN_ENTRY.size):
            version, pid, first, last, lso = _TXN_ENTRY.unpack_from(raw, i * _TXN_ENTRY.size)
            print(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                  f"lastStableOffset: {lso}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for opt in ("key_decoder_class", "value_decoder_class"):
        value = getattr(args, opt)
        if value is not None and value.rsplit(".", 1)[-1] != "StringDecoder":
            parser.error(f"--{opt.replace('_', '-')}: only the default StringDecoder is available, not {value}")
    if sum(map(bool, (args.cluster_metadata_decoder, args.offsets_decoder, args.transaction_log_decoder))) > 1:
        parser.error("only one of --cluster-metadata-decoder, --offsets-decoder and --transaction-log-decoder "
                     "can be used")
    files = [f for f in args.files.split(",") if f]
    if not files:
        parser.error("Missing required argument \"[files]\"")

    def body() -> int:
        dumper = Dumper(args)
        for f in files:
            dumper.dump(Path(f))
        sys.stdout.flush()
        dumper.report()
        return 0

    return run_tool(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
