"""Client metrics (KIP-714): subscriptions through ``kbroker-client-metrics`` (CLIENT_METRICS config resources,
ListConfigResources), then a Java producer that gets the subscription, pushes its metrics with PushTelemetry, and
the broker's Prometheus endpoint that exports them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from compat_tests.conftest import unique
from kbroker.testing.plugin import free_port


def client_metrics(bootstrap: str, *args: Any, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "kbroker.cli.client_metrics", "--bootstrap-server", bootstrap,
                           *map(str, args)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KBROKER_CLI_TIMEOUT_S": "15"})
    if ok:
        assert proc.returncode == 0, f"kbroker-client-metrics {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.kafka_reference
def test_client_metrics_subscriptions_with_the_tool(kbroker_factory):
    b = kbroker_factory().bootstrap
    assert client_metrics(b, "--list").stdout == ""
    out = client_metrics(b, "--alter", "--name", "producers", "--metrics", "org.apache.kafka.producer.",
                         "--interval", "1000", "--match", "client_software_name=apache-kafka-java,client_id=app-.*")
    assert out.stdout.strip() == "Altered client metrics config for producers."
    client_metrics(b, "--alter", "--name", "everything", "--metrics", "*")
    assert client_metrics(b, "--list").stdout.split() == ["everything", "producers"]
    assert client_metrics(b, "--describe", "--name", "producers").stdout.splitlines() == [
        "Client metrics configs for producers are:", "  interval.ms=1000",
        "  match=client_software_name=apache-kafka-java,client_id=app-.*", "  metrics=org.apache.kafka.producer."]
    bad = client_metrics(b, "--alter", "--name", "x", "--interval", "50", ok=False)
    assert bad.returncode == 1 and "interval must be between 100 and 3600000 (1 hour)" in bad.stderr
    bad = client_metrics(b, "--alter", "--name", "x", "--match", "colour=red", ok=False)
    assert "Illegal client matching pattern: colour=red" in bad.stderr
    assert client_metrics(b, "--delete", "--name", "everything").stdout.strip() == \
        "Deleted client metrics config for everything."
    assert client_metrics(b, "--list").stdout.split() == ["producers"]


@pytest.mark.kbroker_only("reads the pushed client metrics from kbroker's metrics.port Prometheus endpoint")
def test_java_producer_pushes_subscribed_metrics_to_the_prometheus_endpoint(kbroker_factory, java_driver):
    metrics_port = free_port()
    b = kbroker_factory(overrides={"metrics.port": str(metrics_port), "metrics.host": "127.0.0.1"}).bootstrap
    client_metrics(b, "--alter", "--name", "java-producers", "--metrics", "org.apache.kafka.producer.",
                   "--interval", "500", "--match", "client_software_name=apache-kafka-java")
    client_metrics(b, "--alter", "--name", "nobody", "--metrics", "*", "--match", "client_id=no-such-client")
    topic = unique("telemetry")
    java_driver.run(["produce", "--bootstrap", b, "--topic", topic, "--count", "30", "--delay-ms", "100"])

    def scrape() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()

    deadline = time.monotonic() + 20
    text = scrape()
    while "org_apache_kafka_producer_" not in text and time.monotonic() < deadline:
        time.sleep(0.5)
        text = scrape()
    pushed = [line for line in text.splitlines() if line.startswith("org_apache_kafka_")]
    assert pushed, text[-2000:]
    assert all(line.startswith("org_apache_kafka_producer_") for line in pushed)  # only what was subscribed
    assert all('client_software_name="apache-kafka-java"' in line for line in pushed)
    sends = [line for line in pushed if line.startswith("org_apache_kafka_producer_record_send_total{")]
    assert sends and float(sends[0].rsplit(" ", 1)[1]) > 0, pushed[:20]


@pytest.mark.kbroker_only("reads the pushed client metrics from kbroker's metrics.port Prometheus endpoint")
def test_librdkafka_producer_pushes_its_metrics(kbroker_factory):
    from confluent_kafka import Producer

    metrics_port = free_port()
    b = kbroker_factory(overrides={"metrics.port": str(metrics_port), "metrics.host": "127.0.0.1"}).bootstrap
    client_metrics(b, "--alter", "--name", "rdk", "--metrics", "*", "--interval", "500", "--match", "client_id=rdk-app")
    producer = Producer({"bootstrap.servers": b, "client.id": "rdk-app"})
    topic = unique("telemetry-rdk")
    for _ in range(20):
        producer.produce(topic, b"x")
        producer.poll(0.1)
    assert producer.flush(10) == 0
    time.sleep(1.0)  # a push or two every 500 ms
    producer = None  # the terminating push: the series stay until the instance expires
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    pushed = [line for line in text.splitlines() if 'client_id="rdk-app"' in line and not line.startswith("#")]
    assert any(line.startswith("org_apache_kafka_producer_connection_creation_total{") for line in pushed), text[-3000:]
