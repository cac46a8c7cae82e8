"""The broker's loggers as a config resource (kbroker.server.broker_loggers, KIP-412): levels in log4j's names,
SET and DELETE, and Kafka's refusals. Against real brokers (both targets) in compat_tests/test_kafka_tools.py and
the protocol differential."""

from __future__ import annotations

import logging

import pytest

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.broker_loggers import alter_loggers, describe_loggers

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture()
def logger():
    lg = logging.getLogger("kbroker.test_broker_loggers")
    lg.setLevel(logging.NOTSET)
    yield lg
    lg.setLevel(logging.NOTSET)


def test_described_with_effective_levels_in_log4j_names(logger) -> None:
    root = logging.getLogger().getEffectiveLevel()
    logger.setLevel(logging.WARNING)
    got = dict(describe_loggers())
    assert got["kbroker.test_broker_loggers"] == "WARN"
    assert got["root"] == {10: "DEBUG", 20: "INFO", 30: "WARN", 40: "ERROR", 50: "FATAL"}[root]
    assert describe_loggers({"root"}) == [("root", got["root"])]
    assert all(n == "root" or n.startswith("kbroker") for n in got)


def test_set_and_delete(logger) -> None:
    alter_loggers([("kbroker.test_broker_loggers", SET, "trace")])
    assert logger.level == 5 and dict(describe_loggers())["kbroker.test_broker_loggers"] == "TRACE"
    alter_loggers([("kbroker.test_broker_loggers", SET, "OFF")], validate_only=True)
    assert logger.level == 5  # validated only
    alter_loggers([("kbroker.test_broker_loggers", DELETE, None)])
    assert logger.level == logging.NOTSET  # inherits again


@pytest.mark.parametrize("change, code", [
    (("root", SET, "LOUD"), ErrorCode.INVALID_CONFIG),
    (("root", SET, None), ErrorCode.INVALID_CONFIG),
    (("root", DELETE, None), ErrorCode.INVALID_REQUEST),
    (("kbroker", APPEND, "INFO"), ErrorCode.INVALID_REQUEST),
    (("kbroker", SUBTRACT, "INFO"), ErrorCode.INVALID_REQUEST),
])
def test_refusals(logger, change, code) -> None:
    with pytest.raises(KafkaError) as exc:
        alter_loggers([("kbroker.test_broker_loggers", SET, "ERROR"), change])
    assert exc.value.code == code
    assert logger.level == logging.NOTSET  # all or none

