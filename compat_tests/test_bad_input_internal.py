"""Clients may not write to internal topics (Kafka answers INVALID_TOPIC_EXCEPTION)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient


@pytest.mark.timeout(60)
def test_produce_to_consumer_offsets_is_refused(bootstrap_servers):
    # a consumer with a group id looks up its coordinator, which makes the broker create __consumer_offsets
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "internal-topic-probe"})
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    deadline = time.monotonic() + 20
    while "__consumer_offsets" not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "__consumer_offsets was not created by a group lookup"
        consumer.poll(0.2)
    consumer.close()
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": False, "retries": 0,
                         "message.timeout.ms": 10000})
    producer.produce("__consumer_offsets", key=b"k", value=b"v", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors[0]
