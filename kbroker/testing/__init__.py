"""Test harness for running real Kafka clients against kbroker (see ``kbroker.testing.plugin``)."""

from kbroker.testing.plugin import (
    BrokerStartError,
    ContainerBroker,
    ExternalBroker,
    KbrokerProcess,
    api_versions_probe,
    free_port,
    wait_for_broker,
)

__all__ = [
    "BrokerStartError",
    "ContainerBroker",
    "ExternalBroker",
    "KbrokerProcess",
    "api_versions_probe",
    "free_port",
    "wait_for_broker",
]
