"""One consumer-group member as a separate process, for compat_tests/test_groups.py (holds no tests).

``python -m compat_tests.test_groups_member --client confluent|kafka-python|aiokafka --bootstrap B
--group G --topics T1[,T2] [--instance-id I] [--session-timeout-ms 6000] [--heartbeat-interval-ms 500]
[--assignor range|roundrobin|cooperative-sticky] [--metadata M] [--process-delay-ms 0]
[--group-protocol classic|consumer] [--pattern REGEX]``

With ``--group-protocol consumer`` (KIP-848, confluent-kafka only) the assignor is the server-side one
(``group.remote.assignor``: uniform or range; other names leave the broker's default) and the session timeout
and heartbeat interval are the broker's; ``--pattern`` subscribes to a regular expression.

Subscribes, and for every batch the client hands over: reports each record, then commits the next offsets
synchronously (commit-after-process) with ``--metadata`` and reports the commit. It stops cleanly (closing the
consumer, which leaves the group unless it is a static member) when stdin reaches EOF; the test kills it with
SIGKILL to simulate a crash. The Java client does the same in compat_tests/java/GroupDriver.java.

Output, one JSON object per line on stdout:
  {"event":"assigned","partitions":[[topic,p],...]}   {"event":"revoked","partitions":[...]}
  {"event":"record","topic":t,"partition":p,"offset":o,"value":v}
  {"event":"committed","offsets":[[topic,p,next_offset],...]}
  {"event":"commit_failed","error":...}   {"event":"error","error":...}   {"event":"closed"}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Any

_out_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def watch_stdin(stop: threading.Event) -> None:
    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=run, daemon=True).start()


def _value(v: bytes | None) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------- confluent


def run_confluent(args: argparse.Namespace, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
        "client.id": args.client_id,
    }
    consumer_protocol = args.group_protocol == "consumer"
    if consumer_protocol:
        conf["group.protocol"] = "consumer"
        if args.assignor in ("uniform", "range"):
            conf["group.remote.assignor"] = args.assignor
    else:
        conf.update({"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": args.heartbeat_interval_ms,
                     "partition.assignment.strategy": args.assignor})
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    cooperative = args.assignor == "cooperative-sticky" or consumer_protocol

    def on_assign(c: Any, parts: list[Any]) -> None:
        emit("assigned", partitions=[[p.topic, p.partition] for p in parts])
        if cooperative:
            c.incremental_assign(parts)

    def on_revoke(c: Any, parts: list[Any]) -> None:
        emit("revoked", partitions=[[p.topic, p.partition] for p in parts])
        if cooperative:
            c.incremental_unassign(parts)

    def on_lost(c: Any, parts: list[Any]) -> None:
        emit("revoked", lost=True, partitions=[[p.topic, p.partition] for p in parts])
        if cooperative:
            c.incremental_unassign(parts)

    consumer.subscribe([args.pattern] if args.pattern else args.topics, on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_lost)
    try:
        while not stop.is_set():
            msgs = consumer.consume(num_messages=200, timeout=0.1)
            nxt: dict[tuple[str, int], int] = {}
            for m in msgs:
                if m.error():
                    emit("error", error=str(m.error()))
                    continue
                emit("record", topic=m.topic(), partition=m.partition(), offset=m.offset(), value=_value(m.value()))
                nxt[(m.topic(), m.partition())] = m.offset() + 1
                if args.process_delay_ms:
                    time.sleep(args.process_delay_ms / 1000)
            if nxt:
                offsets = [TopicPartition(t, p, o, metadata=args.metadata) for (t, p), o in nxt.items()]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                    emit("committed", offsets=[[t, p, o] for (t, p), o in nxt.items()])
                except KafkaException as exc:
                    emit("commit_failed", error=str(exc))
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------- kafka-python


def run_kafka_python(args: argparse.Namespace, stop: threading.Event) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]
    kw: dict[str, Any] = {}
    if args.instance_id:
        kw["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms, partition_assignment_strategy=[assignor],
        fetch_max_wait_ms=100, client_id=args.client_id, **kw)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=[[p.topic, p.partition] for p in revoked])

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=[[p.topic, p.partition] for p in assigned])

    consumer.subscribe(args.topics, listener=Listener())
    try:
        while not stop.is_set():
            # A long poll timeout on purpose: kafka-python 3.0 can drop a SyncGroup response that arrives
            # after the poll that started the rebalance timed out (the member then never heartbeats again).
            batch = consumer.poll(timeout_ms=2000, max_records=200)
            nxt: dict[Any, int] = {}
            for tp, records in batch.items():
                for r in records:
                    emit("record", topic=r.topic, partition=r.partition, offset=r.offset, value=_value(r.value))
                    nxt[tp] = r.offset + 1
                    if args.process_delay_ms:
                        time.sleep(args.process_delay_ms / 1000)
            if nxt:
                try:
                    consumer.commit({tp: OffsetAndMetadata(o, args.metadata, -1) for tp, o in nxt.items()})
                    emit("committed", offsets=[[tp.topic, tp.partition, o] for tp, o in nxt.items()])
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------- aiokafka


def run_aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    asyncio.run(_run_aiokafka(args, stop))


async def _run_aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[args.assignor]
    kw: dict[str, Any] = {}
    if args.instance_id:
        kw["group_instance_id"] = args.instance_id
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms, partition_assignment_strategy=(assignor,),
        fetch_max_wait_ms=100, client_id=args.client_id, **kw)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=[[p.topic, p.partition] for p in revoked])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", partitions=[[p.topic, p.partition] for p in assigned])

    consumer.subscribe(args.topics, listener=Listener())
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100, max_records=200)
            nxt: dict[Any, int] = {}
            for tp, records in batch.items():
                for r in records:
                    emit("record", topic=r.topic, partition=r.partition, offset=r.offset, value=_value(r.value))
                    nxt[tp] = r.offset + 1
                    if args.process_delay_ms:
                        await asyncio.sleep(args.process_delay_ms / 1000)
            if nxt:
                try:
                    await consumer.commit({tp: OffsetAndMetadata(o, args.metadata) for tp, o in nxt.items()})
                    emit("committed", offsets=[[tp.topic, tp.partition, o] for tp, o in nxt.items()])
                except KafkaError as exc:
                    emit("commit_failed", error=repr(exc))
    finally:
        await consumer.stop()


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True, choices=sorted(RUNNERS))
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topics", default=[], type=lambda s: s.split(","))
    ap.add_argument("--instance-id", default=None)
    ap.add_argument("--client-id", default="compat-group-member")
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--assignor", default="range")
    ap.add_argument("--metadata", default="")
    ap.add_argument("--process-delay-ms", type=int, default=0)
    ap.add_argument("--group-protocol", default="classic", choices=["classic", "consumer"])
    ap.add_argument("--pattern", default=None)
    args = ap.parse_args(argv)
    if os.environ.get("KBROKER_GROUP_MEMBER_DEBUG"):
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    watch_stdin(stop)
    try:
        RUNNERS[args.client](args, stop)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        emit("error", error=f"{type(exc).__name__}: {exc}")
        return 1
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
