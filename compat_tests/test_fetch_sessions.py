"""Incremental fetch sessions (KIP-227) against a real broker: the protocol's session rules through kbroker's codec
over TCP, and the Java consumer (which opens sessions) reading many partitions through them."""

from __future__ import annotations

import base64
import urllib.request

from confluent_kafka import Producer

from compat_tests.conftest import create_topic
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import FetchRequest as Req, FetchResponse
from kbroker.testing.cluster import ask
from kbroker.testing.plugin import current_target, free_port

VERSION = 12  # topic names (v13+ uses topic ids; the session rules are the same)


def _fetch(broker, session_id: int, epoch: int, parts: list[tuple[str, int, int]],
           forgotten: list[tuple[str, int]] = ()) -> FetchResponse:  # noqa: ANN001
    topics: dict[str, list] = {}
    for t, p, offset in parts:
        topics.setdefault(t, []).append(Req.FetchPartition(partition=p, fetch_offset=offset,
                                                            partition_max_bytes=1 << 20))
    gone: dict[str, list[int]] = {}
    for t, p in forgotten:
        gone.setdefault(t, []).append(p)
    req = Req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
              session_epoch=epoch, topics=[Req.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
              forgotten_topics_data=[Req.ForgottenTopic(topic=t, partitions=ps) for t, ps in gone.items()])
    return ask("127.0.0.1", broker.port, ApiKey.FETCH, VERSION, req, FetchResponse)


def _returned(resp: FetchResponse) -> dict[tuple[str, int], bool]:
    """(topic, partition) -> has records, for every partition in the response."""
    return {(t.topic, p.partition_index): bool(p.records) for t in resp.responses for p in t.partitions}


def test_session_rules(kbroker_factory) -> None:
    broker = kbroker_factory()
    create_topic(broker.bootstrap, "sess", 3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        producer.produce("sess", b"first", partition=p)
    assert producer.flush(10) == 0

    full = _fetch(broker, 0, 0, [("sess", p, 0) for p in range(3)])
    sid = full.session_id
    assert full.error_code == 0 and sid > 0
    assert _returned(full) == {("sess", 0): True, ("sess", 1): True, ("sess", 2): True}

    # incremental, new positions for all three: nothing new anywhere -> no partitions at all
    inc = _fetch(broker, sid, 1, [("sess", p, 1) for p in range(3)])
    assert inc.error_code == 0 and inc.session_id == sid and _returned(inc) == {}

    producer.produce("sess", b"second", partition=1)
    assert producer.flush(10) == 0
    inc = _fetch(broker, sid, 2, [])  # positions unchanged: only partition 1 has news (records, a new HW)
    assert _returned(inc) == {("sess", 1): True}

    # forget partition 1; the next response does not mention it though it still has unread records
    inc = _fetch(broker, sid, 3, [], forgotten=[("sess", 1)])
    assert _returned(inc) == {}
    producer.produce("sess", b"third", partition=2)
    assert producer.flush(10) == 0
    assert _returned(_fetch(broker, sid, 4, [])) == {("sess", 2): True}

    assert _fetch(broker, sid, 4, []).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # epoch reused
    assert _fetch(broker, sid + 1 if sid < 2**31 - 1 else 1, 1, []).error_code == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    closed = _fetch(broker, sid, -1, [("sess", 0, 0)])  # close and fetch without a session
    assert closed.session_id == 0 and _returned(closed) == {("sess", 0): True}
    assert _fetch(broker, sid, 5, []).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_sessionless_clients_get_full_answers(kbroker_factory) -> None:
    broker = kbroker_factory()
    create_topic(broker.bootstrap, "plain", 2)
    resp = _fetch(broker, 0, -1, [("plain", 0, 0), ("plain", 1, 0)])
    assert resp.session_id == 0 and set(_returned(resp)) == {("plain", 0), ("plain", 1)}


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert values, f"{name} is not on the metrics endpoint"
    return values[0]


def test_java_consumer_reads_many_partitions_through_a_session(kbroker_factory, java_driver) -> None:
    metrics_port = free_port()
    on_kbroker = current_target() == "kbroker"
    broker = kbroker_factory(overrides={"metrics.port": str(metrics_port), "metrics.host": "127.0.0.1"}
                             if on_kbroker else {})
    create_topic(broker.bootstrap, "wide", 40)
    # idempotent: a batch retried (a partition whose leader is not known yet) keeps its place in the partition
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.size": 200,
                         "enable.idempotence": True})
    for i in range(4000):
        producer.produce("wide", str(i).encode(), partition=i % 40)
    assert producer.flush(30) == 0
    events = java_driver.run(["consume", "--bootstrap", broker.bootstrap, "--topic", "wide", "--expect", "4000",
                              "--timeout-ms", "60000", "--fetch-max-wait-ms", "100",
                              # small fetches: many of them, each moving a few partitions' positions
                              "--prop", "fetch.max.bytes=4000", "--prop", "max.partition.fetch.bytes=400"],
                             timeout=120)
    records = [e for e in events if e.get("event") == "record"]
    by_partition: dict[int, list[int]] = {}
    for r in records:
        by_partition.setdefault(r["partition"], []).append(int(base64.b64decode(r["value"])))
    assert sorted(v for vs in by_partition.values() for v in vs) == list(range(4000))
    assert all(vs == list(range(p, 4000, 40)) for p, vs in by_partition.items())  # in order, once
    if not on_kbroker:
        return  # the session counters are kbroker's metrics.port endpoint
    # the Java client opened a session and fetched incrementally through it
    assert _metric(metrics_port, "kbroker_fetch_sessions_created_total") >= 1
    assert _metric(metrics_port, "kbroker_fetch_session_incremental_requests_total") >= 10
