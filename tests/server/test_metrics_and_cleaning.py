"""The Prometheus endpoint (metrics.port) and the background log cleaner of a running broker."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.records import iter_batches
from tests.server.conftest import start_node, stop_node
from tests.server.test_operator_apis import _create, _fetch, _produce


def _scrape(node, path: str = "/metrics") -> tuple[int, str]:
    async def get() -> tuple[int, str]:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.broker.metrics.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        data = await reader.read()
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode()

    return node.run(get())


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def metered(tmp_path):
    n = start_node(tmp_path, **{"metrics.port": "0", "metrics.host": "127.0.0.1"})
    try:
        yield n
    finally:
        stop_node(n)


def test_metrics_endpoint_counts_produce_and_fetch(metered):
    node = metered
    _create(node, "m", 2)
    status, text = _scrape(node)
    assert status == 200
    before = _samples(text)
    assert before[("kafka_server_replicamanager_partitioncount", ())] == 2
    assert ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "m"),)) not in before
    assert before[("kafka_server_leaderreplication_byte_rate", ())] == 0  # the replication throttles' rates
    assert before[("kafka_server_followerreplication_byte_rate", ())] == 0
    for i in range(3):
        assert _produce(node, "m", 1, [(b"k", b"x" * 50), (b"k2", b"y")]).error_code == 0
    fetched = _fetch(node, "m", 1, 0)
    fetched_bytes = sum(len(b.buffer) for b in iter_batches(bytes(fetched.records)))
    after = _samples(_scrape(node)[1])
    assert after[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "m"),))] == 6
    assert after[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "m"),))] > 150
    assert after[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "m"),))] == fetched_bytes
    assert after[("kafka_network_requestmetrics_requests_total", (("request", "Produce"), ("version", "9")))] == 3
    assert after[("kafka_network_requestmetrics_requests_total", (("request", "Fetch"), ("version", "12")))] == 1
    assert after[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))] == 3
    assert after[("kafka_log_log_logendoffset", (("partition", "1"), ("topic", "m")))] == 6
    assert after[("kafka_log_log_size", (("partition", "1"), ("topic", "m")))] > 150
    assert after[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert ("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),)) in after
    assert _scrape(node, "/nope")[0] == 404


def test_no_metrics_endpoint_by_default(node):
    assert node.broker.metrics is None
    assert ApiKey.PRODUCE in node.broker.apis.handlers


def test_background_cleaner_compacts_a_topic(tmp_path):
    node = start_node(tmp_path, **{"log.cleaner.backoff.ms": "20"})
    try:
        _create(node, "cc", 1, **{"cleanup.policy": "compact", "internal.segment.bytes": "300",
                                  "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})
        for i in range(30):
            assert _produce(node, "cc", 0, [(b"key%d" % (i % 3), b"value-%d" % i)]).error_code == 0
        time.sleep(0.15)
        _produce(node, "cc", 0, [(b"last", b"rolls the active segment")])
        cleaner = node.broker.log_cleaner
        deadline = time.monotonic() + 20
        while cleaner.first_dirty.get(("cc", 0)) != 30 and time.monotonic() < deadline:
            node.run(asyncio.sleep(0.05))
        assert cleaner.rounds > 0 and cleaner.first_dirty[("cc", 0)] == 30
        plog = node.broker.log_manager.get_log("cc", 0)
        recs = [(r.offset, r.key, r.value) for b in iter_batches(plog.read(0, 1 << 20).read_bytes())
                for r in b.records()]
        assert recs == [(27, b"key0", b"value-27"), (28, b"key1", b"value-28"), (29, b"key2", b"value-29"),
                        (30, b"last", b"rolls the active segment")]
    finally:
        stop_node(node)
