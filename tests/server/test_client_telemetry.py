"""Client telemetry rules (KIP-714, kbroker.server.client_telemetry and kbroker.controller.client_metrics) on a
fake metadata image and clock; the wire path is compat_tests/test_client_metrics.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbroker.controller.client_metrics import validate_client_metrics_configs
from kbroker.controller.uuids import uuid_to_str
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.records import compress
from kbroker.server.client_telemetry import ClientTelemetry, TelemetryError

JAVA = {"client_id": "app-1", "client_software_name": "apache-kafka-java", "client_software_version": "4.3.0",
        "client_source_address": "127.0.0.1", "client_source_port": "5000"}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(configs):
    controller = SimpleNamespace(image=SimpleNamespace(configs=configs))
    clock = Clock()
    return ClientTelemetry(controller, clock=clock), controller, clock


def otlp(name: str, value: float, **attrs: str) -> bytes:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = ExportMetricsServiceRequest()
    m = req.resource_metrics.add().scope_metrics.add().metrics.add()
    m.name = name
    dp = m.gauge.data_points.add()
    dp.as_double = value
    dp.attributes.extend([KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()])
    return req.SerializeToString()


def test_validation_messages():
    with pytest.raises(KafkaError) as exc:
        validate_client_metrics_configs("s", {"interval.ms": "99"})
    assert (exc.value.code, exc.value.message) == (
        ErrorCode.INVALID_REQUEST, "Invalid value 99 for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    with pytest.raises(KafkaError) as exc:
        validate_client_metrics_configs("s", {"match": "client_id=a,nope=b"})
    assert (exc.value.code, exc.value.message) == (ErrorCode.INVALID_CONFIG, "Illegal client matching pattern: nope=b")
    with pytest.raises(KafkaError) as exc:
        validate_client_metrics_configs("s", {"colour": "red"})
    assert exc.value.message == "Unknown client metrics configuration: colour"
    validate_client_metrics_configs("s", {"metrics": "a.,b.", "interval.ms": "100", "match": "client_id=app-.*"})


def test_matching_subscriptions_are_merged_and_others_left_out():
    tel, _, _ = make({(16, "a"): {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000",
                                  "match": "client_software_name=apache-kafka-java"},
                      (16, "b"): {"metrics": "org.apache.kafka.consumer.", "interval.ms": "2000",
                                  "match": "client_id=app-.*"},
                      (16, "c"): {"metrics": "*", "match": "client_id=other"},
                      (4, ""): {"log.retention.ms": "1"}})
    inst = tel.get_subscriptions(bytes(16), JAVA)
    assert inst.instance_id != bytes(16)
    assert inst.metrics == ("org.apache.kafka.consumer.", "org.apache.kafka.producer.") and inst.interval_ms == 2000
    other = tel.get_subscriptions(bytes(16), {**JAVA, "client_id": "other", "client_software_name": "x"})
    assert other.metrics == ("",) and other.interval_ms == 300000  # '*': every metric (an empty prefix)
    nobody = tel.get_subscriptions(bytes(16), {**JAVA, "client_id": "x", "client_software_name": "x"})
    assert nobody.metrics == () and nobody.interval_ms == 300000


def test_throttling_subscription_changes_and_push_errors():
    configs = {(16, "a"): {"metrics": "org.", "interval.ms": "1000"}}
    tel, controller, clock = make(configs)
    inst = tel.get_subscriptions(bytes(16), JAVA)
    iid, sub = inst.instance_id, inst.subscription_id
    with pytest.raises(TelemetryError) as exc:
        tel.get_subscriptions(iid, JAVA)  # again within the push interval
    assert exc.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    payload = otlp("org.apache.kafka.producer.record.send.total", 7.0, topic="t")
    tel.push(iid, sub, False, 0, payload, JAVA)  # the first push after a Get: accepted at once
    with pytest.raises(TelemetryError) as exc:
        tel.push(iid, sub, False, 0, payload, JAVA)
    assert exc.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    clock.t += 1.0
    with pytest.raises(TelemetryError) as exc:
        tel.push(iid, sub, False, 9, payload, JAVA)
    assert exc.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    clock.t += 1.0
    with pytest.raises(TelemetryError) as exc:
        tel.push(iid, sub, False, 0, b"\xff\xff garbage", JAVA)
    assert exc.value.code == ErrorCode.INVALID_RECORD
    clock.t += 1.0
    tel.push(iid, sub, False, 4, compress(4, otlp("org.apache.kafka.producer.record.send.total", 9.0, topic="t")),
             JAVA)
    assert tel.collect() == [("org_apache_kafka_producer_record_send_total",
                              {"client_instance_id": uuid_to_str(iid),
                               "client_id": "app-1", "client_software_name": "apache-kafka-java", "topic": "t"}, 9.0)]
    # the subscriptions change: the old subscription id is unknown, a new Get is not throttled
    controller.image = SimpleNamespace(configs={(16, "a"): {"metrics": "org.", "interval.ms": "2000"}})
    clock.t += 0.1
    with pytest.raises(TelemetryError) as exc:
        tel.push(iid, sub, False, 0, payload, JAVA)
    assert exc.value.code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    new = tel.get_subscriptions(iid, JAVA)
    assert new.subscription_id != sub and new.interval_ms == 2000
    tel.push(iid, new.subscription_id, True, 0, b"", JAVA)  # terminating
    with pytest.raises(TelemetryError) as exc:
        tel.push(iid, new.subscription_id, False, 0, b"", JAVA)
    assert exc.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(TelemetryError) as exc:
        tel.push(bytes(16), 0, False, 0, b"", JAVA)
    assert exc.value.code == ErrorCode.INVALID_REQUEST
    tel.max_bytes = 10
    other = tel.get_subscriptions(bytes(16), JAVA)
    with pytest.raises(TelemetryError) as exc:
        tel.push(other.instance_id, other.subscription_id, False, 0, payload, JAVA)
    assert exc.value.code == ErrorCode.TELEMETRY_TOO_LARGE
