"""The Produce response for per-record errors (KIP-467), byte-level through the broker's dispatch: the
partition's code names the rule (INVALID_RECORD for a keyless record on a compacted topic, INVALID_TIMESTAMP for
a timestamp out of range), ``record_errors`` names every bad record by index with its message, ``error_message``
is Kafka's summary, and v7 (before KIP-467) gets the code alone. Nothing is appended."""

from __future__ import annotations

import time

import pytest

from kbroker.controller.quorum_controller import CreateTopicSpec
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ProduceRequest
from kbroker.protocol.records import build_batch


def produce(node, topic, records, version):
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=build_batch(records))])])
    return node.call(ApiKey.PRODUCE, version, req).responses[0].partition_responses[0]


@pytest.mark.parametrize("version", [7, 8, 9, 11])
def test_keyless_records_on_compacted_topic(node, version):
    node.broker.controller.create_topics([CreateTopicSpec("c", 1, configs={"cleanup.policy": "compact"})])
    now = int(time.time() * 1000)
    r = produce(node, "c", [(None if i in (2, 7) else b"k", b"v", [], now) for i in range(10)], version)
    assert r.error_code == 87  # INVALID_RECORD
    if version >= 8:
        assert [e.batch_index for e in r.record_errors] == [2, 7]
        assert all("Compacted topic cannot accept message without key" in e.batch_index_error_message
                   for e in r.record_errors)
        assert r.error_message.startswith("One or more records have been rejected due to 2 record errors")
    assert node.broker.log_manager.get_log("c", 0).log_end_offset == 0


def test_timestamps_out_of_range(node):
    node.broker.controller.create_topics([CreateTopicSpec(
        "t", 1, configs={"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "60000"})])
    now = int(time.time() * 1000)
    ts = [now, now - 86_400_000, now, now + 3_600_000, now]
    r = produce(node, "t", [(b"k", b"v", [], t) for t in ts], 9)
    assert r.error_code == 32  # INVALID_TIMESTAMP
    assert [e.batch_index for e in r.record_errors] == [1, 3]
    assert "of message with offset 1 is out of range" in r.record_errors[0].batch_index_error_message
    assert node.broker.log_manager.get_log("t", 0).log_end_offset == 0
