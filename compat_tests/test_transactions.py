"""Transactions with real clients: exactly-once pipelines, aborts, fencing, timeouts and crashes.

* Java (kafka-clients 4.3.1, ``compat_tests/java/TxnDriver.java``): the consume-transform-produce loop with
  ``sendOffsetsToTransaction``, killed with -9 three times while it runs; a read_committed consumer then
  finds every input record exactly once in the output, and the group's committed offsets at the input's end.
* Aborted transactions: read_committed sees none of their records, read_uncommitted sees them all, and the
  offsets the producer was given include the aborted batches and one marker per partition and transaction.
* Zombie fencing: a second producer with the same ``transactional.id`` fences the first, whose next send and
  commit fail; the zombie's open transaction is aborted.
* confluent-kafka and aiokafka transactional producers (commit and abort).
* A transaction left open past ``transaction.timeout.ms`` is aborted by the coordinator (its own broker with
  a short abort check interval); the producer's commit then fails.
* The Java Admin client lists and describes an open transaction, describes the partition's producers and
  aborts the transaction with ``abortTransaction`` (WriteTxnMarkers).
* The broker is killed with -9 while a commit's markers are being written (``kbroker.transaction.marker.delay.ms``
  spreads them out); after the restart the coordinator finishes the commit and read_committed consumers see
  every transaction whole or not at all.
The idempotent producer behind a response-dropping proxy is ``compat_tests/test_idempotence.py``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients import CLASSES_DIR, JARS_DIR, create_topic
from compat_tests.test_idempotence import RawClient
from kbroker.protocol.messages import DescribeTransactionsRequest, ListOffsetsRequest

pytestmark = pytest.mark.timeout(120)

TXN_DRIVER_SOURCE = Path(__file__).parent / "java" / "TxnDriver.java"


@pytest.fixture(scope="session")
def txn_driver() -> list[str]:
    """The command prefix that runs TxnDriver (compiled on first use, like the other Java drivers)."""
    from compat_tests.conftest import ensure_jars

    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless")
    ensure_jars()
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = CLASSES_DIR / "TxnDriver.class"
    with open(CLASSES_DIR / ".compile-txn.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists() or target.stat().st_mtime < TXN_DRIVER_SOURCE.stat().st_mtime:
            r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                                str(JARS_DIR / "*"), str(TXN_DRIVER_SOURCE)], capture_output=True, text=True,
                               timeout=300)
            if r.returncode != 0:
                pytest.fail(f"javac TxnDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
            os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")]), "TxnDriver"]


def run_driver(driver: list[str], *args: str, timeout: float = 90) -> list[dict[str, Any]]:
    r = subprocess.run(driver + list(args), capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0, f"TxnDriver {args[0]} exited {r.returncode}: {events[-3:]}\n{r.stderr[-3000:]}"
    return events


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
                timeout: float = 20.0, idle: float = 3.0) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record, read with confluent-kafka from the start; stops at
    ``expect`` records, or after ``idle`` seconds without any, or at ``timeout``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, str]] = []
        deadline, last = time.monotonic() + timeout, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle:
            if expect is not None and len(out) >= expect:
                break
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            last = time.monotonic()
            out.append((m.partition(), m.offset(), m.value().decode()))
        return out
    finally:
        c.close()


def list_offset(bootstrap: str, topic: str, partition: int, isolation: int) -> int:
    raw = RawClient(bootstrap)
    try:
        resp = raw.call(ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])]), 7)
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0
        return p.offset
    finally:
        raw.close()


def describe_transaction(bootstrap: str, transactional_id: str) -> Any:
    raw = RawClient(bootstrap)
    try:
        return raw.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0).transaction_states[0]
    finally:
        raw.close()


# ============================================================================================ Java EOS loop


def test_java_consume_transform_produce_exactly_once_across_kill9(txn_driver, bootstrap_servers) -> None:
    from confluent_kafka import Producer

    n, partitions = 600, 3
    source, sink, group, txn_id = unique("eos-in"), unique("eos-out"), unique("eos-group"), unique("eos-txn")
    create_topic(bootstrap_servers, source, partitions)
    create_topic(bootstrap_servers, sink, partitions)
    p = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for i in range(n):
        p.produce(source, value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0
    cmd = txn_driver + ["transform", "--bootstrap", bootstrap_servers, "--input", source, "--output", sink,
                        "--group", group, "--txn-id", txn_id, "--max-per-txn", "9", "--idle-ms", "3000"]
    for round_ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            commits, deadline = 0, time.monotonic() + 60
            while commits < 8 + round_ and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                commits += '"committed"' in line
            assert commits == 8 + round_, f"round {round_}: {commits} commits; stderr {proc.stderr.read()[-2000:]}"
        finally:
            proc.send_signal(signal.SIGKILL)  # in the middle of the loop: a transaction may be open
            proc.wait(10)
    events = run_driver(txn_driver, *cmd[len(txn_driver):], timeout=100)
    assert events[-1]["event"] == "done"
    out = consume_all(bootstrap_servers, sink, partitions, "read_committed", expect=n + 1, idle=4)
    counts = Counter(v for _, _, v in out)
    assert sorted(counts) == sorted(f"v{i}" for i in range(n)), "records lost"
    assert [v for v, c in counts.items() if c > 1] == [], "records duplicated"
    # the group's committed offsets are the input's end
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(source, i) for i in range(partitions)], timeout=10)
        assert sum(tp.offset for tp in committed) == n
    finally:
        c.close()


# ============================================================================================ aborts


def test_aborted_transactions_are_invisible_to_read_committed(txn_driver, bootstrap_servers) -> None:
    topic, partitions = unique("abort"), 2
    create_topic(bootstrap_servers, topic, partitions)
    events = run_driver(txn_driver, "produce", "--bootstrap", bootstrap_servers, "--topic", topic,
                        "--txn-id", unique("abort-txn"), "--transactions", "6", "--per-txn", "4",
                        "--abort-every", "2", "--partitions", str(partitions))
    txns = [e for e in events if e["event"] == "txn"]
    assert [t["result"] for t in txns] == ["commit", "abort"] * 3
    committed = {(p, o) for t in txns if t["result"] == "commit" for p, o in t["offsets"]}
    aborted = {(p, o) for t in txns if t["result"] == "abort" for p, o in t["offsets"]}
    rc = consume_all(bootstrap_servers, topic, partitions, "read_committed", expect=len(committed))
    ru = consume_all(bootstrap_servers, topic, partitions, "read_uncommitted", expect=len(committed) + len(aborted))
    assert {(p, o) for p, o, _ in rc} == committed
    assert all(v.startswith(("t0-", "t2-", "t4-")) for _, _, v in rc)
    assert {(p, o) for p, o, _ in ru} == committed | aborted  # aborted data stays in the log, same offsets
    # per partition and transaction: 2 records then a marker, so offsets advance by 3 per transaction
    for p in range(partitions):
        offsets = sorted(o for (q, o) in committed | aborted if q == p)
        assert offsets == [3 * i + j for i in range(6) for j in range(2)]
        end = list_offset(bootstrap_servers, topic, p, 0)
        assert end == 18 == list_offset(bootstrap_servers, topic, p, 1)  # nothing open: LSO = HW


# ============================================================================================ fencing


def test_second_producer_fences_the_zombie(txn_driver, bootstrap_servers) -> None:
    topic = unique("fence")
    create_topic(bootstrap_servers, topic, 1)
    txn_id = unique("fence-txn")
    e = run_driver(txn_driver, "fence", "--bootstrap", bootstrap_servers, "--topic", topic, "--txn-id", txn_id)[-1]
    assert e["event"] == "fence"
    assert e["a_send_error"] in ("InvalidProducerEpochException", "ProducerFencedException"), e
    assert e["a_commit_error"] in ("ProducerFencedException", "KafkaException", "InvalidProducerEpochException"), e
    rc = consume_all(bootstrap_servers, topic, 1, "read_committed", expect=2)
    assert [v for _, _, v in rc] == ["fencer-1"]
    ru = consume_all(bootstrap_servers, topic, 1, "read_uncommitted", expect=3)
    assert [v for _, _, v in ru] == ["zombie-1", "fencer-1"]  # the zombie's second send never landed
    state = describe_transaction(bootstrap_servers, txn_id)
    assert (state.error_code, state.transaction_state) == (0, "CompleteCommit")


# ============================================================================================ Python clients


def test_confluent_kafka_transactional_producer(bootstrap_servers) -> None:
    from confluent_kafka import Producer

    topic = unique("confluent-txn")
    create_topic(bootstrap_servers, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": unique("confluent"),
                  "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for j in range(5):
            p.produce(topic, value=f"c{i}-{j}".encode(), partition=j % 2)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)
    rc = consume_all(bootstrap_servers, topic, 2, "read_committed", expect=10)
    assert sorted(v for _, _, v in rc) == sorted(f"c{i}-{j}" for i in (0, 2) for j in range(5))
    ru = consume_all(bootstrap_servers, topic, 2, "read_uncommitted", expect=15)
    assert len(ru) == 15


def test_aiokafka_transactional_producer(bootstrap_servers) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    topic = unique("aiokafka-txn")
    create_topic(bootstrap_servers, topic, 2)

    async def run() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=unique("aio"),
                                      enable_idempotence=True)
        await p.start()
        try:
            for i, commit in enumerate((True, False, True)):
                await p.begin_transaction()
                for j in range(5):
                    await p.send_and_wait(topic, f"a{i}-{j}".encode(), partition=j % 2)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    rc = consume_all(bootstrap_servers, topic, 2, "read_committed", expect=10)
    assert sorted(v for _, _, v in rc) == sorted(f"a{i}-{j}" for i in (0, 2) for j in range(5))
    assert len(consume_all(bootstrap_servers, topic, 2, "read_uncommitted", expect=15)) == 15


def test_java_admin_describes_and_aborts_an_open_transaction(txn_driver, bootstrap_servers) -> None:
    topic, txn_id = unique("admin-txn"), unique("admin")
    create_topic(bootstrap_servers, topic, 1)
    e = run_driver(txn_driver, "admin", "--bootstrap", bootstrap_servers, "--topic", topic, "--txn-id", txn_id)[-1]
    assert e["event"] == "admin"
    assert [(x["id"], x["state"]) for x in e["listed"]] == [(txn_id, "Ongoing")]
    assert (e["state"], e["partitions"], e["active_producers"], e["txn_start_offset"], e["last_sequence"]) == (
        "Ongoing", 1, 1, 0, 2)
    assert e["listed"][0]["producer_id"] == e["producer_id"]
    # the Admin's marker closed the transaction in the partition (offset 3); the producer's close() then
    # aborted it at the coordinator, whose marker is offset 4. Nothing is visible, nothing is left open.
    assert list_offset(bootstrap_servers, topic, 0, 1) == list_offset(bootstrap_servers, topic, 0, 0) == 5
    assert describe_transaction(bootstrap_servers, txn_id).transaction_state == "CompleteAbort"
    assert consume_all(bootstrap_servers, topic, 1, "read_committed", idle=1.5) == []


# ============================================================================================ timeout and crash


def test_open_transaction_times_out_and_is_aborted(txn_driver, kbroker_factory) -> None:
    broker = kbroker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
                              "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"})
    bootstrap = broker.bootstrap
    topic, txn_id = unique("timeout"), unique("timeout-txn")
    create_topic(bootstrap, topic, 1)
    e = run_driver(txn_driver, "open", "--bootstrap", bootstrap, "--topic", topic, "--txn-id", txn_id,
                   "--count", "5", "--txn-timeout-ms", "1500", "--wait-ms", "3500")[-1]
    # the coordinator aborted it and bumped the epoch; the commit of the old epoch is refused as
    # INVALID_TXN_STATE (Kafka 4.3 with transactions version 2)
    assert e["commit_error"] == "InvalidTxnStateException", e
    state = describe_transaction(bootstrap, txn_id)
    # the Java 4.3 client began it with transactions version 2 (Produce v12): the timeout fences the producer
    # and aborts with that one bump (epoch 1), as Kafka 4.3's coordinator does
    assert state.transaction_state == "CompleteAbort" and state.producer_epoch == 1
    assert consume_all(bootstrap, topic, 1, "read_committed", idle=2) == []
    assert len(consume_all(bootstrap, topic, 1, "read_uncommitted", expect=5)) == 5
    assert list_offset(bootstrap, topic, 0, 1) == list_offset(bootstrap, topic, 0, 0) == 6  # 5 records + marker


@pytest.mark.kbroker_only("slows the commit markers with the kbroker-only key kbroker.transaction.marker.delay.ms "
                          "to land the kill between PrepareCommit and CompleteCommit, and checks kbroker's "
                          "'loaded in PrepareCommit' log line")
def test_broker_kill9_during_commit_markers(txn_driver, kbroker_factory) -> None:
    partitions, per_txn = 6, 12
    broker = kbroker_factory({"kbroker.transaction.marker.delay.ms": "400",
                              "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"})
    bootstrap = broker.bootstrap
    topic, txn_id = unique("crash"), unique("crash-txn")
    create_topic(bootstrap, topic, partitions)
    seen_before: list[tuple[int, int, str]] = []
    stop = threading.Event()

    def watch() -> None:  # a read_committed consumer running through the crash
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watch"), "enable.auto.commit": False,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "reconnect.backoff.max.ms": 500})
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while not stop.is_set():
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen_before.append((m.partition(), m.offset(), m.value().decode()))
        c.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    proc = subprocess.Popen(txn_driver + ["produce", "--bootstrap", bootstrap, "--topic", topic, "--txn-id", txn_id,
                                          "--transactions", "20", "--per-txn", str(per_txn),
                                          "--partitions", str(partitions), "--max-block-ms", "5000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        committed = []
        deadline = time.monotonic() + 60
        while len(committed) < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("{") and json.loads(line)["event"] == "txn":
                committed.append(json.loads(line))
        assert len(committed) == 2, proc.stderr.read()[-2000:]
        # EndTxn of the second transaction was answered once PrepareCommit was durable; its markers
        # go out one partition every 400 ms: kill the broker in the middle of them
        time.sleep(0.9)
        broker.kill()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    broker.start()
    assert f"transactional id {txn_id} loaded in PrepareCommit" in Path(broker.log_path).read_text(), \
        "the kill did not land between PrepareCommit and CompleteCommit"
    deadline = time.monotonic() + 30
    while describe_transaction(bootstrap, txn_id).transaction_state != "CompleteCommit":
        assert time.monotonic() < deadline, describe_transaction(bootstrap, txn_id)
        time.sleep(0.2)
    after = consume_all(bootstrap, topic, partitions, "read_committed", idle=3)
    time.sleep(1)
    stop.set()
    watcher.join(10)
    by_txn: dict[str, set[str]] = defaultdict(set)
    for _, _, v in after + seen_before:
        by_txn[v.split("-")[0]].add(v)
    torn = {t: len(vs) for t, vs in by_txn.items() if len(vs) != per_txn}
    assert torn == {}, f"partially visible transactions: {torn}"
    assert {"t0", "t1"} <= set(by_txn)  # both committed transactions are complete after the restart
    assert len(after) == per_txn * len(by_txn)  # each record once
