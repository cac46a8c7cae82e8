"""ListConfigResources (API 74, KIP-1142): the Java Admin client's listConfigResources and the v0 / unsupported-type
answers through kbroker's codec."""

from __future__ import annotations

import pytest

from compat_tests.conftest import unique

pytestmark = pytest.mark.kafka_reference  # CI runs this file against Apache Kafka too


def list_resources(host: str, port: int, version: int, types: list[int]) -> tuple[int, list[tuple[int, str]]]:
    from kbroker.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse
    from kbroker.testing.cluster import ask

    resp = ask(host, port, 74, version, ListConfigResourcesRequest(resource_types=types), ListConfigResourcesResponse)
    return resp.error_code, [(r.resource_type, r.resource_name) for r in resp.config_resources]


def test_java_admin_lists_config_resources(kbroker_factory, java_driver):
    broker = kbroker_factory()
    b = broker.bootstrap
    topic = unique("cfg-res")
    java_driver.run(["admin", "create-topic", "--bootstrap", b, "--topic", topic])

    def listed(*types: str) -> list[str]:
        args = ["admin", "list-config-resources", "--bootstrap", b]
        for t in types:
            args += ["--type", t]
        return java_driver.one(java_driver.run(args), "config-resources")["resources"]

    assert listed("TOPIC") == [f"TOPIC:{topic}"]
    assert listed("BROKER", "BROKER_LOGGER") == ["BROKER:1", "BROKER_LOGGER:1"]
    assert listed("CLIENT_METRICS", "GROUP") == []
    assert listed() == ["BROKER:1", "BROKER_LOGGER:1", f"TOPIC:{topic}"]

    host, port = b.split(":")
    assert list_resources(host, int(port), 1, [2]) == (0, [(2, topic)])
    assert list_resources(host, int(port), 1, [2, 1]) == (35, [])  # UNSUPPORTED_VERSION: type 1 is unknown
    assert list_resources(host, int(port), 0, []) == (0, [])  # v0: client metrics resources only
