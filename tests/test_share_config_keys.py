"""The share group and share coordinator broker keys in ``server.properties`` (Kafka 4.3's ``ShareGroupConfig``,
``GroupCoordinatorConfig`` and ``ShareCoordinatorConfig``): known (no "isn't a known config" warning), ranges
and the start-up checks against the ``group.share.min/max.*`` keys, with Kafka's messages."""

from __future__ import annotations

import pytest

from kbroker.config import ConfigException
from kbroker.controller.config_def import validate_server_config


def test_share_keys_are_known():
    props = {"share.coordinator.state.topic.num.partitions": "3",
             "share.coordinator.state.topic.replication.factor": "1",
             "share.coordinator.state.topic.min.isr": "1",
             "share.coordinator.state.topic.segment.bytes": "1048576",
             "group.share.min.record.lock.duration.ms": "2000", "group.share.record.lock.duration.ms": "2000",
             "group.share.max.record.lock.duration.ms": "40000",
             "group.share.min.heartbeat.interval.ms": "500", "group.share.heartbeat.interval.ms": "500",
             "group.share.max.heartbeat.interval.ms": "10000",
             "group.share.min.session.timeout.ms": "6000", "group.share.session.timeout.ms": "6000",
             "group.share.max.session.timeout.ms": "70000",
             "group.share.min.delivery.count.limit": "3", "group.share.max.delivery.count.limit": "20",
             "group.share.min.partition.max.record.locks": "100", "group.share.partition.max.record.locks": "100",
             "group.share.max.partition.max.record.locks": "2000",
             "group.share.min.assignment.interval.ms": "0", "group.share.max.assignment.interval.ms": "15000"}
    assert validate_server_config(props) == []


@pytest.mark.parametrize("props, message", [
    ({"group.share.record.lock.duration.ms": "10000"},
     "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"group.share.record.lock.duration.ms": "70000"},
     "group.share.max.record.lock.duration.ms must be greater than or equal to group.share.record.lock.duration.ms"),
    ({"group.share.delivery.count.limit": "2", "group.share.min.delivery.count.limit": "3"},
     "group.share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit"),
    ({"group.share.partition.max.record.locks": "5000"},
     "group.share.max.partition.max.record.locks must be greater than or equal to "
     "group.share.partition.max.record.locks"),
    ({"group.share.heartbeat.interval.ms": "500"},
     "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ({"group.share.heartbeat.interval.ms": "20000"},
     "group.share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({"group.share.session.timeout.ms": "70000"},
     "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ({"group.share.min.session.timeout.ms": "4000", "group.share.session.timeout.ms": "4000"},
     "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
    ({"group.share.assignment.interval.ms": "20000"},
     "group.share.assignment.interval.ms must be less than or equal to group.share.max.assignment.interval.ms"),
])
def test_share_group_keys_within_their_bounds(props, message):
    """Messages as Kafka 4.3.1's ShareGroupConfig / GroupCoordinatorConfig give them (checked with its classes)."""
    with pytest.raises(ConfigException) as exc:
        validate_server_config(props)
    assert str(exc.value) == message


@pytest.mark.parametrize("key, value", [("group.share.min.record.lock.duration.ms", "40000"),
                                        ("group.share.max.record.lock.duration.ms", "20000"),
                                        ("group.share.max.delivery.count.limit", "30"),
                                        ("group.share.partition.max.record.locks", "50"),
                                        ("share.coordinator.state.topic.min.isr", "0")])
def test_share_key_ranges(key, value):
    with pytest.raises(ConfigException, match=f"Invalid value {value} for configuration {key}"):
        validate_server_config({key: value})
