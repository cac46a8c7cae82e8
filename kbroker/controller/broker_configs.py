"""Dynamic broker configs: which broker keys IncrementalAlterConfigs / AlterConfigs may set, and how they are
checked (facts from Apache Kafka 4.x's ``DynamicBrokerConfig``; no code copied).

A dynamic broker config is stored as a ConfigRecord of resource type BROKER, either for one node (resource
name = its node id; DescribeConfigs source DYNAMIC_BROKER_CONFIG) or for the whole cluster (resource name
``""``; source DYNAMIC_DEFAULT_BROKER_CONFIG). Precedence, highest first: per-broker dynamic, cluster
default dynamic, ``server.properties`` (STATIC_BROKER_CONFIG), Kafka's default (DEFAULT_CONFIG).

kbroker accepts the keys Kafka can change at runtime that matter to it:

* the broker-level synonyms of topic configs (``log.retention.ms``, ``log.segment.bytes``,
  ``log.cleanup.policy``, ``message.max.bytes``, ``compression.type``, ``log.cleaner.delete.retention.ms``
  ...): they change the defaults of every topic without its own override, and live logs pick them up;
* the log cleaner's keys (``log.cleaner.threads``, ``log.cleaner.backoff.ms``,
  ``log.cleaner.io.max.bytes.per.second``, ``log.cleaner.dedupe.buffer.size`` ...);
* the replication throttles' rates (``leader.replication.throttled.rate``,
  ``follower.replication.throttled.rate``; KIP-73, :mod:`kbroker.server.replication_quota`), which, as in Kafka,
  can only be set dynamically (:data:`DYNAMIC_ONLY_BROKER_KEYS`: a value in ``server.properties`` has no effect);
* a few thread-pool and connection keys that are stored and reported but change nothing in kbroker
  (``num.io.threads``, ``max.connections`` ...).

As in Kafka, other known broker keys are refused with INVALID_REQUEST ("Cannot update these configs
dynamically"), badly typed values with INVALID_REQUEST (Kafka maps broker validation failures to
INVALID_REQUEST, KAFKA-13609), and keys Kafka does not know are accepted and stored as custom configs.
"""

from __future__ import annotations

from typing import Mapping

from kbroker.config import BROKER_DEFAULTS
from kbroker.controller.topic_configs import INT_MAX, LONG_MAX, TopicConfigKey, parse_config_value
from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["DYNAMIC_BROKER_CONFIGS", "DYNAMIC_ONLY_BROKER_KEYS", "STATIC_BROKER_KEYS", "broker_synonyms", "effective_broker_props", "is_list_config",
           "validate_broker_configs"]

_L = str(LONG_MAX)

_KEYS = [
    # broker-level synonyms of topic configs
    TopicConfigKey("log.segment.bytes", "int", "1073741824", lo=1024 * 1024),
    TopicConfigKey("log.roll.ms", "long", None, lo=1),
    TopicConfigKey("log.roll.jitter.ms", "long", None, lo=0),
    TopicConfigKey("log.index.size.max.bytes", "int", "10485760", lo=4),
    TopicConfigKey("log.index.interval.bytes", "int", "4096", lo=0),
    TopicConfigKey("log.flush.interval.messages", "long", _L, lo=1),
    TopicConfigKey("log.flush.interval.ms", "long", None),
    TopicConfigKey("log.retention.bytes", "long", "-1"),
    TopicConfigKey("log.retention.ms", "long", None, lo=-1),
    TopicConfigKey("log.segment.delete.delay.ms", "long", "60000", lo=0),
    TopicConfigKey("log.cleanup.policy", "list", "delete", choices=("compact", "delete")),
    TopicConfigKey("log.cleaner.delete.retention.ms", "long", "86400000", lo=0),
    TopicConfigKey("log.cleaner.min.compaction.lag.ms", "long", "0", lo=0),
    TopicConfigKey("log.cleaner.max.compaction.lag.ms", "long", _L, lo=1),
    TopicConfigKey("log.cleaner.min.cleanable.ratio", "double", "0.5", lo=0, hi=1),
    TopicConfigKey("log.message.timestamp.type", "string", "CreateTime", choices=("CreateTime", "LogAppendTime")),
    TopicConfigKey("log.message.timestamp.before.max.ms", "long", _L, lo=0),
    TopicConfigKey("log.message.timestamp.after.max.ms", "long", "3600000", lo=0),
    TopicConfigKey("log.preallocate", "boolean", "false"),
    TopicConfigKey("log.local.retention.ms", "long", "-2", lo=-2),
    TopicConfigKey("log.local.retention.bytes", "long", "-2", lo=-2),
    TopicConfigKey("message.max.bytes", "int", "1048588", lo=0),
    TopicConfigKey("min.insync.replicas", "int", "1", lo=1),
    TopicConfigKey("unclean.leader.election.enable", "boolean", "false"),
    TopicConfigKey("compression.type", "string", "producer",
                   choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    TopicConfigKey("compression.gzip.level", "int", "-1", lo=-1, hi=9),
    TopicConfigKey("compression.lz4.level", "int", "9", lo=1, hi=17),
    TopicConfigKey("compression.zstd.level", "int", "3", lo=-131072, hi=22),
    # the log cleaner
    TopicConfigKey("log.cleaner.threads", "int", "1", lo=0),
    TopicConfigKey("log.cleaner.backoff.ms", "long", "15000", lo=0),
    TopicConfigKey("log.cleaner.dedupe.buffer.size", "long", "134217728"),
    TopicConfigKey("log.cleaner.io.buffer.size", "int", "524288", lo=0),
    TopicConfigKey("log.cleaner.io.buffer.load.factor", "double", "0.9"),
    TopicConfigKey("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308"),
    # replication throttles (KIP-73), bytes/s
    TopicConfigKey("leader.replication.throttled.rate", "long", _L, lo=0),
    TopicConfigKey("follower.replication.throttled.rate", "long", _L, lo=0),
    # stored and reported, no effect in kbroker
    TopicConfigKey("num.io.threads", "int", "8", lo=1),
    TopicConfigKey("num.network.threads", "int", "3", lo=1),
    TopicConfigKey("num.replica.fetchers", "int", "1", lo=1),
    TopicConfigKey("num.recovery.threads.per.data.dir", "int", "2", lo=1),
    TopicConfigKey("background.threads", "int", "10", lo=1),
    TopicConfigKey("max.connections", "int", str(INT_MAX), lo=0),
    TopicConfigKey("max.connections.per.ip", "int", str(INT_MAX), lo=0),
    TopicConfigKey("max.connection.creation.rate", "int", str(INT_MAX), lo=0),
    TopicConfigKey("producer.id.expiration.ms", "int", "86400000", lo=1),
    TopicConfigKey("transaction.partition.verification.enable", "boolean", "true"),
]

#: key -> definition of every broker config kbroker accepts as a dynamic config
DYNAMIC_BROKER_CONFIGS: Mapping[str, TopicConfigKey] = {k.name: k for k in _KEYS}

#: Dynamic broker keys Kafka reads only from the dynamic configs (``QuotaConfig.DYNAMIC_ONLY_BROKER_QUOTA_CONFIGS``):
#: set in ``server.properties`` they have no effect.
DYNAMIC_ONLY_BROKER_KEYS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})

#: Known broker keys that Kafka only reads from server.properties (refused as dynamic configs).
STATIC_BROKER_KEYS = frozenset(set(BROKER_DEFAULTS) - set(DYNAMIC_BROKER_CONFIGS)) | frozenset({
    "broker.id", "log.cleaner.enable", "log.cleaner.io.buffer.size.per.thread", "metadata.log.segment.bytes",
    "metadata.log.segment.ms", "metadata.max.retention.bytes", "metadata.max.retention.ms",
    "controller.quorum.bootstrap.servers", "log.dirs", "log.dir", "broker.rack", "auto.leader.rebalance.enable",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr", "offsets.topic.replication.factor",
    "remote.log.storage.system.enable", "metrics.port", "metrics.host",
})


#: Groups of broker keys that are synonyms of one another, highest precedence first (Kafka's
#: ``brokerConfigSynonyms``).
_BROKER_SYNONYM_GROUPS = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
]


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker keys that set the same thing as ``name`` (itself included), highest precedence first."""
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def effective_broker_props(static: Mapping[str, str], cluster_default: Mapping[str, str],
                           per_broker: Mapping[str, str]) -> dict[str, str]:
    """``server.properties`` overlaid with the cluster-default, then the per-broker dynamic configs. A dynamic
    key hides its synonyms from the layers below, so a dynamic ``log.retention.hours`` wins over a static
    ``log.retention.ms`` (Kafka's ``overrideProps``)."""
    props = dict(static)
    for layer in (cluster_default, per_broker):
        for key, value in layer.items():
            for syn in broker_synonyms(key):
                props.pop(syn, None)
            props[key] = value
    return props


def is_list_config(name: str) -> bool:
    key = DYNAMIC_BROKER_CONFIGS.get(name)
    return key is not None and key.type == "list"


def _java_set(names: set[str]) -> str:
    """A set of names as Kafka 4.3's messages print it: ``[a, b]``."""
    return "[" + ", ".join(sorted(names)) + "]"


def validate_broker_configs(configs: Mapping[str, str | None]) -> None:
    """Check the dynamic configs a BROKER resource would hold after a change (null values are deletions and
    are skipped). Raises ``KafkaError(INVALID_REQUEST)`` as Kafka does."""
    present = {k: v for k, v in configs.items() if v is not None}
    static = {k for k in present if k in STATIC_BROKER_KEYS}
    if static:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {_java_set(static)}")
    for name, value in sorted(present.items()):
        key = DYNAMIC_BROKER_CONFIGS.get(name)
        if key is None:
            continue  # not a Kafka config: stored as a custom config
        try:
            parse_config_value(key, value)
        except KafkaError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
