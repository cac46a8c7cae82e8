"""One consume-transform-produce processor (exactly once, KIP-447) as its own process, for
compat_tests/test_cluster_eos_rebalance.py: a librdkafka consumer (read_committed, no auto commit) of ``--input``
and a transactional producer that copies each record to ``--output`` and commits the consumer's positions with
the group's metadata in the same transaction (``send_offsets_to_transaction``), committed after ``--batch`` records or
``--commit-interval-ms``, whichever comes first, so that a transaction spans several polls. A revocation aborts the open transaction (its records are processed again by the partitions' next
owner from the committed offsets); an abortable commit error aborts and rewinds to the committed offsets; a fatal
error (PRODUCER_FENCED, say) is reported and ends the process with status 3.

Events on stdout, one JSON object per line: ``started``, ``assigned`` / ``revoked`` (partitions),
``committed`` (records in the transaction, total so far), ``aborted`` (why), ``fatal`` (error name and text),
``stopped``. SIGTERM closes the consumer (leaving the group, or not for a static member) and the producer.

    python compat_tests/eos_processor.py --bootstrap H:P --group G --input IN --output OUT --instance N
        [--protocol classic|consumer] [--assignor range|cooperative-sticky] [--static] [--pause-ms 50]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--protocol", default="classic", choices=("classic", "consumer"))
    ap.add_argument("--assignor", default="range")
    ap.add_argument("--static", action="store_true")
    ap.add_argument("--batch", type=int, default=60, help="records that make a transaction commit")
    ap.add_argument("--commit-interval-ms", type=int, default=300, help="longest a transaction stays open")
    ap.add_argument("--pause-ms", type=int, default=20, help="pause after each poll that returned records (the run "
                                                               "lasts long enough for rebalances to meet open "
                                                               "transactions)")
    a = ap.parse_args()

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    conf = {"bootstrap.servers": a.bootstrap, "group.id": a.group, "group.protocol": a.protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
            "max.poll.interval.ms": 60000}
    if a.protocol == "classic":
        conf.update({"partition.assignment.strategy": a.assignor, "session.timeout.ms": 10000,
                     "heartbeat.interval.ms": 1000})
    if a.static:
        conf["group.instance.id"] = f"{a.group}-{a.instance}"
    consumer = Consumer(conf)
    producer = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": f"{a.group}-{a.instance}",
                         "transaction.timeout.ms": 20000, "linger.ms": 5})
    producer.init_transactions(60)
    in_txn = [False]
    total = [0]
    #: set when a transaction was aborted: the records it took from partitions still assigned must be read again
    need_rewind = [False]
    pending, opened = [0], 0.0  # records in the open transaction, and when it began

    def abort(why: str) -> None:
        if in_txn[0]:
            # the records first: with AddPartitionsToTxn still retried (CONCURRENT_TRANSACTIONS while the last
            # commit's markers are written) librdkafka would send EndTxn(abort) to a transaction still in
            # PrepareCommit, which Kafka answers INVALID_TXN_STATE (transactions version 1), a fatal error
            producer.flush(60)
            producer.abort_transaction(60)
            in_txn[0] = False
            need_rewind[0] = True
            emit("aborted", why=why)

    def retried(call: object, attempts: int = 5) -> None:
        """A transactional call, again after a retriable error (librdkafka's rule for these calls)."""
        for attempt in range(attempts):
            try:
                call()  # type: ignore[operator]
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == attempts - 1:
                    raise
                emit("retriable", error=exc.args[0].name())

    def rewind() -> None:
        parts = consumer.assignment()
        if not parts:
            return
        for tp in consumer.committed(parts, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else -2))

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        emit("assigned", partitions=sorted(p.partition for p in parts))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        abort("revoked")
        emit("revoked", partitions=sorted(p.partition for p in parts))

    def on_lost(c: Consumer, parts: list[TopicPartition]) -> None:
        abort("lost")
        emit("lost", partitions=sorted(p.partition for p in parts))

    consumer.subscribe([a.input], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started", instance=a.instance)
    try:
        while not stopping:
            msgs = consumer.consume(10, 0.1)
            if need_rewind[0]:  # an abort in a rebalance callback during that consume: drop and read again
                need_rewind[0] = False
                rewind()
                continue
            msgs = [m for m in msgs if m.error() is None]
            if msgs and not in_txn[0]:
                producer.begin_transaction()
                in_txn[0] = True
                pending[0], opened = 0, time.monotonic()
            for m in msgs:
                producer.produce(a.output, key=m.key(), value=m.value())
            pending[0] += len(msgs)
            if msgs:
                time.sleep(a.pause_ms / 1000)  # the "transform": it keeps the transaction open a while
            # a transaction stays open over several polls, as a stream processor's does between commits: the
            # rebalances meet open transactions
            if not in_txn[0] or (pending[0] < a.batch and time.monotonic() - opened < a.commit_interval_ms / 1000):
                continue
            try:
                positions = consumer.position(consumer.assignment())
                retried(lambda: producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                                     60))
                retried(lambda: producer.commit_transaction(60))
                in_txn[0] = False
                total[0] += pending[0]
                emit("committed", records=pending[0], total=total[0])
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    emit("fatal", error=err.name(), text=err.str())
                    return 3
                if not err.txn_requires_abort():
                    raise
                abort(f"{err.name()}: {err.str()}")
                need_rewind[0] = False
                rewind()
        abort("stopping")
    except KafkaException as exc:
        err = exc.args[0]
        emit("fatal", error=err.name() if isinstance(err, KafkaError) else type(exc).__name__, text=str(exc))
        return 3
    finally:
        consumer.close()
        producer.flush(10)
        emit("stopped", total=total[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
