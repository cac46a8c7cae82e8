"""Produce with a real client, read everything back, check every byte.

For each client (confluent-kafka, kcat, kafka-python, aiokafka, Java) and each produce setting (codec
none/gzip/snappy/lz4/zstd, idempotence on/off, acks all/1/0, linger so batches hold several records):
keyed records with headers and explicit timestamps go to a fresh 3-partition topic; the same client
consumes from the beginning and each record's key, value, headers, timestamp, partition and offset must
match what the producer sent and reported, with offsets dense 0..n-1 per partition. The stored batches
are then read with a hand-encoded Fetch and checked (CRC, codec kept, producer id, batching).
Cross-client tests produce with one client and consume with another.
"""

from __future__ import annotations

import pytest

from compat_tests.clients import CLIENT_NAMES, ProduceOptions
from compat_tests.logcheck import check_stored_batches
from compat_tests.records import RecordSpec, verify_round_trip

pytestmark = [pytest.mark.timeout(180), pytest.mark.kafka_reference]  # kafka_reference: CI runs it against Kafka too

RECORDS = 45
PARTITIONS = 3

CASES = [
    ProduceOptions(acks="all", compression="none", idempotence=True),
    ProduceOptions(acks="all", compression="gzip", idempotence=True),
    ProduceOptions(acks="all", compression="snappy", idempotence=True),
    ProduceOptions(acks="all", compression="lz4", idempotence=True),
    ProduceOptions(acks="all", compression="zstd", idempotence=True),
    ProduceOptions(acks="all", compression="lz4", idempotence=False),
    ProduceOptions(acks="1", compression="none", idempotence=False),
    ProduceOptions(acks="0", compression="zstd", idempotence=False),
]


@pytest.mark.parametrize("opts", CASES, ids=[c.label() for c in CASES])
@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_round_trip(client_name, opts, get_client, bootstrap_servers, topic_factory):
    client = get_client(client_name)
    if opts.compression not in client.codecs:
        pytest.skip(f"{client.name}: no {opts.compression} codec library installed (has {client.codecs})")
    topic = topic_factory(PARTITIONS)
    spec = RecordSpec.new(f"{client.name}", RECORDS, partitions=PARTITIONS).restrict(client.caps) \
        .restrict(client.consume_caps)

    produced = client.produce(bootstrap_servers, topic, spec, opts)
    consumed = client.consume(bootstrap_servers, topic, spec.count)

    verify_round_trip(spec, produced.acks, consumed, produced_window=produced.window)
    check_stored_batches(bootstrap_servers, topic, PARTITIONS, opts, spec.count)


CROSS = [
    # producer, consumer, codec, partitions (0 = the producer's own partitioner picks), consumer isolation
    ("java", "confluent", "zstd", 0, "read_uncommitted"),
    ("confluent", "java", "lz4", PARTITIONS, "read_committed"),
    ("kcat", "kafka-python", "snappy", PARTITIONS, "read_uncommitted"),
    ("kafka-python", "aiokafka", "gzip", PARTITIONS, "read_committed"),
    ("aiokafka", "kcat", "lz4", PARTITIONS, "read_uncommitted"),
    ("confluent", "kafka-python", "zstd", PARTITIONS, "read_committed"),
    ("java", "kcat", "gzip", PARTITIONS, "read_committed"),
    ("kafka-python", "java", "snappy", PARTITIONS, "read_uncommitted"),
    ("aiokafka", "confluent", "none", PARTITIONS, "read_committed"),
]


@pytest.mark.parametrize("producer_name,consumer_name,codec,partitions,isolation", CROSS,
                         ids=[f"{p}-to-{c}-{z}-{i.replace('read_', '')}" for p, c, z, _, i in CROSS])
def test_cross_client(producer_name, consumer_name, codec, partitions, isolation, get_client, bootstrap_servers,
                      topic_factory):
    """Produce with one client, consume with another. Non-transactional records are visible to
    read_committed consumers up to the last stable offset, which is the high watermark here."""
    producer = get_client(producer_name)
    consumer = get_client(consumer_name)
    if codec not in producer.codecs:
        pytest.skip(f"{producer.name}: no {codec} codec library installed")
    if codec not in consumer.codecs:
        pytest.skip(f"{consumer.name}: no {codec} codec library installed")
    topic = topic_factory(PARTITIONS)
    spec = RecordSpec.new(f"{producer.name}-to-{consumer.name}", 30, partitions=partitions) \
        .restrict(producer.caps).restrict(consumer.consume_caps)
    opts = ProduceOptions(acks="all", compression=codec, idempotence=True)

    produced = producer.produce(bootstrap_servers, topic, spec, opts)
    consumed = consumer.consume(bootstrap_servers, topic, spec.count, isolation=isolation)

    verify_round_trip(spec, produced.acks, consumed, produced_window=produced.window)
    check_stored_batches(bootstrap_servers, topic, PARTITIONS, opts, spec.count)
