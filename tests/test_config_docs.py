"""docs/configuration.md is generated from the configuration definitions and kept current; the definitions
agree with the defaults the broker reads, and cover every topic key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.config import ConfigException
from kbroker.controller.config_def import BROKER_CONFIG_DEF, TOPIC_DOCS, check_defaults_agree, validate_server_config
from kbroker.controller.topic_configs import TOPIC_CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_doc_is_current():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_docs.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_definitions_agree_with_broker_defaults():
    assert check_defaults_agree() == []


def test_every_key_is_documented():
    assert [n for n, d in BROKER_CONFIG_DEF.items() if not d.doc] == []
    assert sorted(set(k for k, v in TOPIC_CONFIG_KEYS.items() if not v.internal) - set(TOPIC_DOCS)) == []


@pytest.mark.parametrize("key,value,expected", [
    ("log.retention.hours", "banana", "Invalid value banana for configuration log.retention.hours: Not a number"),
    ("num.partitions", "0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
    ("log.cleanup.policy", "forever", "String must be one of: compact, delete"),
    ("log.message.timestamp.type", "Now", "String must be one of: CreateTime, LogAppendTime"),
    ("metrics.port", "70000", "Value must be no more than 65535"),
])
def test_bad_values_are_refused_with_one_line(key, value, expected):
    with pytest.raises(ConfigException) as e:
        validate_server_config({key: value})
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_unknown_and_unused_keys_are_warnings():
    warnings = validate_server_config({"num.partitons": "3", "num.io.threads": "16", "retention.ms": "5",
                                       "listener.name.plaintext.foo": "x", "node.id": "2"})
    assert warnings == [
        "The configuration 'num.io.threads' is accepted but has no effect in kbroker.",
        "The configuration 'num.partitons' was supplied but isn't a known config.",
        "The configuration 'retention.ms' is a topic config; set it per topic, or use its broker name in "
        "server.properties.",
    ]
