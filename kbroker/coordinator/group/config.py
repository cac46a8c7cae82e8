"""Group coordinator settings: Kafka's broker keys, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kbroker.controller.group_configs import GROUP_RESOURCE, effective_group_config
from kbroker.coordinator.group.assignors import parse_assignors

OFFSETS_TOPIC = "__consumer_offsets"

#: Kafka's defaults for the group coordinator keys (facts from Kafka's broker configuration docs).
DEFAULTS: dict[str, int] = {
    "offsets.topic.num.partitions": 50,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.segment.bytes": 104857600,
    "offsets.load.buffer.size": 5242880,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 4096,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    "group.max.size": 2147483647,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.max.size": 2147483647,
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.min.heartbeat.interval.ms": 5000,
    "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.consumer.assignment.interval.ms": 1000,
    "group.share.assignment.interval.ms": 1000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.session.timeout.ms": 45000,
    "group.share.max.size": 200,
}

#: ``group.consumer.migration.policy`` values (KIP-848 online upgrade / downgrade); Kafka's default first.
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")

#: ``group.consumer.assignors``: Kafka's default lists the uniform assignor first (the default), then range.
DEFAULT_CONSUMER_ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    offsets_topic_num_partitions: int = DEFAULTS["offsets.topic.num.partitions"]
    offsets_topic_replication_factor: int = DEFAULTS["offsets.topic.replication.factor"]
    offsets_topic_segment_bytes: int = DEFAULTS["offsets.topic.segment.bytes"]
    offsets_retention_ms: int = DEFAULTS["offsets.retention.minutes"] * 60_000
    offsets_retention_check_interval_ms: int = DEFAULTS["offsets.retention.check.interval.ms"]
    offset_metadata_max_bytes: int = DEFAULTS["offset.metadata.max.bytes"]
    group_initial_rebalance_delay_ms: int = DEFAULTS["group.initial.rebalance.delay.ms"]
    group_min_session_timeout_ms: int = DEFAULTS["group.min.session.timeout.ms"]
    group_max_session_timeout_ms: int = DEFAULTS["group.max.session.timeout.ms"]
    group_max_size: int = DEFAULTS["group.max.size"]
    consumer_group_heartbeat_interval_ms: int = DEFAULTS["group.consumer.heartbeat.interval.ms"]
    consumer_group_session_timeout_ms: int = DEFAULTS["group.consumer.session.timeout.ms"]
    consumer_group_max_size: int = DEFAULTS["group.consumer.max.size"]
    #: least ms between two target assignment computations of a consumer / share group (KIP-1263); a group's
    #: ``consumer.assignment.interval.ms`` / ``share.assignment.interval.ms`` overrides it
    consumer_group_assignment_interval_ms: int = DEFAULTS["group.consumer.assignment.interval.ms"]
    share_group_assignment_interval_ms: int = DEFAULTS["group.share.assignment.interval.ms"]
    share_group_heartbeat_interval_ms: int = DEFAULTS["group.share.heartbeat.interval.ms"]
    share_group_session_timeout_ms: int = DEFAULTS["group.share.session.timeout.ms"]
    share_group_max_size: int = DEFAULTS["group.share.max.size"]
    #: server-side assignor names; the first is used when members name none
    consumer_group_assignors: tuple[str, ...] = DEFAULT_CONSUMER_ASSIGNORS
    #: ``group.consumer.migration.policy``: one of :data:`MIGRATION_POLICIES`
    consumer_group_migration_policy: str = MIGRATION_POLICIES[0]
    #: the broker's configs as given (group configs take their defaults and bounds from them)
    props: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def group_config_defaults(self) -> dict[str, str]:
        """The broker keys group configs take defaults and bounds from: :attr:`props` with this config's consumer
        session timeout and heartbeat interval and its consumer and share assignment intervals."""
        return {**self.props, "group.consumer.session.timeout.ms": str(self.consumer_group_session_timeout_ms),
                "group.consumer.heartbeat.interval.ms": str(self.consumer_group_heartbeat_interval_ms),
                "group.consumer.assignment.interval.ms": str(self.consumer_group_assignment_interval_ms),
                "group.share.assignment.interval.ms": str(self.share_group_assignment_interval_ms)}

    @classmethod
    def from_broker_config(cls, config: Any) -> GroupCoordinatorConfig:
        """From a :class:`~kbroker.config.BrokerConfig` (keys the operator did not set keep Kafka's default)."""

        def get(key: str) -> int:
            value = config.props.get(key) if hasattr(config, "props") else None
            if value is None or str(value).strip() == "":
                return DEFAULTS[key]
            return int(str(value).strip())

        assignors = str(config.props.get("group.consumer.assignors") or "").strip() if hasattr(config, "props") else ""
        props = dict(config.props) if hasattr(config, "props") else {}
        policy = str(props.get("group.consumer.migration.policy") or MIGRATION_POLICIES[0]).strip().lower()
        return cls(
            offsets_topic_num_partitions=get("offsets.topic.num.partitions"),
            offsets_topic_replication_factor=get("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes=get("offsets.topic.segment.bytes"),
            offsets_retention_ms=get("offsets.retention.minutes") * 60_000,
            offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=get("offset.metadata.max.bytes"),
            group_initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms=get("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=get("group.max.session.timeout.ms"),
            group_max_size=get("group.max.size"),
            consumer_group_heartbeat_interval_ms=get("group.consumer.heartbeat.interval.ms"),
            consumer_group_session_timeout_ms=get("group.consumer.session.timeout.ms"),
            consumer_group_max_size=get("group.consumer.max.size"),
            consumer_group_assignment_interval_ms=get("group.consumer.assignment.interval.ms"),
            share_group_assignment_interval_ms=get("group.share.assignment.interval.ms"),
            share_group_heartbeat_interval_ms=get("group.share.heartbeat.interval.ms"),
            share_group_session_timeout_ms=get("group.share.session.timeout.ms"),
            share_group_max_size=get("group.share.max.size"),
            consumer_group_assignors=parse_assignors(assignors) if assignors else DEFAULT_CONSUMER_ASSIGNORS,
            consumer_group_migration_policy=policy if policy in MIGRATION_POLICIES else MIGRATION_POLICIES[0],
            props=props,
        )


def group_config(image: Any, broker_props: Mapping[str, str], group_id: str) -> dict[str, object]:
    """The configs a coordinator uses for group ``group_id``: every key of
    :data:`kbroker.controller.group_configs.GROUP_CONFIG_KEYS` (``consumer.session.timeout.ms`` int ms,
    ``share.auto.offset.reset`` str, ``share.renew.acknowledge.enable`` bool ...), from the group's dynamic configs
    in the metadata ``image`` (ConfigResource GROUP), else the broker's synonym in ``broker_props``
    (``group.consumer.session.timeout.ms`` ...), else Kafka's default. ``image`` may be None (broker values)."""
    overrides = image.configs.get((GROUP_RESOURCE, group_id), {}) if image is not None else {}
    return effective_group_config(overrides, broker_props)
