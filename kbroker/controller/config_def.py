"""One definition of every configuration key kbroker understands, in the spirit of Kafka's ``ConfigDef``.

Each :class:`ConfigDef` entry gives the key's name, type, default, valid values or range, importance, a
one-line description, how it can change at run time (``read-only``: only in ``server.properties``;
``per-broker`` / ``cluster-wide``: also through IncrementalAlterConfigs, as Kafka's dynamic broker configs) and
whether kbroker acts on it (``used``; Kafka keys that kbroker accepts and ignores say so). Names, types and
defaults are Kafka 4.x's; the descriptions are kbroker's own.

Used for:

* :func:`validate_server_config`: the start-up check. A bad value raises :class:`~kbroker.config.ConfigException`
  whose one-line message names key, value and what is allowed; unknown keys come back as warnings (Kafka's
  "was supplied but isn't a known config");
* the topic keys' and dynamic broker keys' validation already in :mod:`kbroker.controller.topic_configs` and
  :mod:`kbroker.controller.broker_configs` (the same :class:`TopicConfigKey` parser);
* ``docs/configuration.md``, written by ``scripts/config_docs.py --write`` and checked by a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kbroker.config import BROKER_DEFAULTS, ConfigException
from kbroker.controller.broker_configs import DYNAMIC_BROKER_CONFIGS, DYNAMIC_ONLY_BROKER_KEYS
from kbroker.controller.topic_configs import INT_MAX, LONG_MAX, TOPIC_CONFIG_KEYS, TopicConfigKey, parse_config_value
from kbroker.protocol.errors import KafkaError

HIGH, MEDIUM, LOW = "high", "medium", "low"
READ_ONLY, PER_BROKER, CLUSTER_WIDE = "read-only", "per-broker", "cluster-wide"


@dataclass(frozen=True)
class ConfigDef:
    key: TopicConfigKey
    importance: str
    doc: str
    dynamic: str = READ_ONLY
    used: bool = True
    #: Kafka's ConfigDef type when it is not ``key.type`` (``short``, which is parsed as ``int`` here)
    kafka_type: str = ""

    @property
    def config_type(self) -> str:
        """Kafka's type of the key: boolean, string, int, short, long, double, list, class or password."""
        return self.kafka_type or self.key.type

    @property
    def name(self) -> str:
        return self.key.name

    def valid_values(self) -> str:
        k = self.key
        if k.choices:
            return ", ".join(k.choices)
        if k.lo is not None or k.hi is not None:
            lo = "..." if k.lo is None else _fmt(k.lo)
            hi = "..." if k.hi is None else _fmt(k.hi)
            return f"[{lo}, {hi}]"
        return ""


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


_L = str(LONG_MAX)
_I = str(INT_MAX)

# name, type, default, importance, doc, (lo, hi, choices), used
_STATIC: list[tuple] = [
    ("process.roles", "list", "broker,controller", HIGH,
     "The roles of this node: broker, controller, or both (kbroker runs the combined node).", None, True),
    ("node.id", "int", "1", HIGH, "The id of this node in the cluster.", (0, None, None), True),
    ("broker.id", "int", "-1", LOW, "Kafka's older name for node.id; kbroker reads node.id.", (-1, None, None), False),
    ("cluster.id", "string", "", MEDIUM, "The cluster id to format a new data directory with (else a random one).",
     None, True),
    ("controller.quorum.voters", "list", "", HIGH,
     "The static voters of the metadata quorum (id@host:port,... on their controller listeners); other voters "
     "than this node make it a cluster node (docs/cluster.md).", None, True),
    ("controller.quorum.bootstrap.servers", "list", "", HIGH,
     "Controllers (host:port,...) a node asks first when the quorum is dynamic (KIP-853): the voters are then in "
     "the metadata log, formatted with kbroker-storage format --standalone or --initial-controllers.", None, True),
    ("controller.quorum.election.timeout.ms", "int", "1000", HIGH,
     "How long a voter waits without a leader before it asks for (pre-)votes; randomised up to twice this.",
     (0, None, None), True),
    ("controller.quorum.fetch.timeout.ms", "int", "2000", HIGH,
     "How long a follower waits without a successful fetch from its leader before it starts an election.",
     (0, None, None), True),
    ("controller.quorum.election.backoff.max.ms", "int", "1000", HIGH,
     "The longest back-off before a voter retries a failed election.", (0, None, None), True),
    ("controller.quorum.request.timeout.ms", "int", "2000", MEDIUM,
     "How long a Raft request, and a metadata write waiting for the quorum, may take.", (0, None, None), True),
    ("controller.quorum.retry.backoff.ms", "int", "20", LOW,
     "The back-off before a failed Raft request is retried.", (0, None, None), True),
    ("broker.heartbeat.interval.ms", "int", "2000", MEDIUM,
     "How often a broker sends BrokerHeartbeat to the active controller (and retries its registration).",
     (0, None, None), True),
    ("broker.session.timeout.ms", "int", "9000", MEDIUM,
     "How long the active controller waits for a broker's heartbeat before fencing it.", (0, None, None), True),
    ("controller.listener.names", "list", "CONTROLLER", HIGH, "The listeners that serve the controller quorum.",
     None, True),
    ("listeners", "list", "PLAINTEXT://localhost:9092", HIGH,
     "The listeners to bind, as NAME://host:port; an empty host binds every interface.", None, True),
    ("advertised.listeners", "list", "", HIGH,
     "The addresses clients are told to use, per listener name (default: the listeners).", None, True),
    ("listener.security.protocol.map", "string",
     "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", MEDIUM,
     "The security protocol of each listener name: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.", None, True),
    ("inter.broker.listener.name", "string", "PLAINTEXT", MEDIUM,
     "The listener this broker uses to reach other brokers (replica fetches, transaction verification, markers); "
     "every broker must have a listener of that name.", None, True),
    ("broker.rack", "string", "", MEDIUM,
     "The rack of this broker, for rack-aware replica placement and consumers' closest replica (KIP-392).", None,
     True),
    # broker-level synonyms of topic configs that Kafka reads only from server.properties (its dynamic ones are
    # the first synonym of each topic key: log.roll.ms, log.retention.ms, ...)
    ("log.roll.hours", "int", "168", HIGH, "Default age at which a segment rolls, hours (when log.roll.ms is unset).",
     (1, None, None), True),
    ("log.roll.jitter.hours", "int", "0", HIGH, "Random jitter subtracted from the roll time, hours.",
     (0, None, None), False),
    ("log.retention.minutes", "int", "", HIGH, "Default time data is kept, minutes; wins over hours.", None, True),
    ("log.retention.hours", "int", "168", HIGH, "Default time data is kept, hours.", None, True),
    ("log.flush.scheduler.interval.ms", "long", _L, HIGH, "How often logs are checked for a time-based flush.",
     None, True),
    ("log.dirs", "list", "", HIGH, "The directories that hold partition logs (comma-separated).", None, True),
    ("log.dir", "list", "/tmp/kafka-logs", HIGH, "The log directory when log.dirs is not set.", None, True),
    ("metadata.log.dir", "string", "", HIGH,
     "The directory of the metadata log (__cluster_metadata); default: the first log directory.", None, True),
    ("metadata.log.segment.bytes", "int", "1073741824", LOW, "Segment size of the metadata log.", (12, None, None),
     True),
    ("metadata.log.segment.ms", "long", "604800000", LOW, "Age after which the metadata log rolls a segment.",
     (1, None, None), True),
    ("metadata.max.retention.bytes", "long", "104857600", LOW,
     "Size of the metadata log past which the log below the latest snapshot is deleted (-1: no limit).",
     None, True),
    ("metadata.log.max.record.bytes.between.snapshots", "long", "20971520", HIGH,
     "Bytes of metadata records committed after which a new snapshot of the metadata is written.",
     (1, None, None), True),
    ("metadata.max.idle.interval.ms", "int", "500", LOW,
     "How long the active controller of a cluster writes nothing before it commits a NoOpRecord (0: never).",
     (0, None, None), True),
    ("metadata.log.max.snapshot.interval.ms", "long", "3600000", HIGH,
     "Longest time between snapshots while new metadata is committed (0: no time-based snapshots).",
     (0, None, None), True),
    ("metadata.max.retention.ms", "long", "604800000", LOW,
     "Age of metadata log segments past which the log below the latest snapshot is deleted (-1: no limit).", None,
     True),
    ("num.partitions", "int", "1", MEDIUM, "Partitions of an auto-created topic or one created without a count.",
     (1, None, None), True),
    ("default.replication.factor", "int", "1", MEDIUM, "Replication factor of topics created without one.",
     (1, None, None), True),
    ("auto.create.topics.enable", "boolean", "true", HIGH,
     "Create a topic when a client asks for its metadata or produces to it.", None, True),
    ("delete.topic.enable", "boolean", "true", HIGH, "Allow DeleteTopics.", None, True),
    ("auto.leader.rebalance.enable", "boolean", "true", HIGH,
     "The active controller moves leadership back to each partition's preferred (first) replica when that "
     "replica is alive and in sync, every leader.imbalance.check.interval.seconds.", None, True),
    ("leader.imbalance.check.interval.seconds", "long", "300", HIGH,
     "How often the active controller looks for partitions not led by their preferred replica.",
     (1, None, None), True),
    ("leader.imbalance.per.broker.percentage", "int", "10", HIGH,
     "Accepted for compatibility; a KRaft controller (Kafka's and kbroker's) balances every imbalanced "
     "partition whatever the ratio.", (0, None, None), False),
    ("socket.request.max.bytes", "int", "104857600", HIGH,
     "The largest request frame accepted; a larger one closes the connection.", (1, None, None), True),
    ("connections.max.idle.ms", "long", "600000", MEDIUM,
     "A connection that completes no request for this long is closed.", (1, None, None), True),
    ("kbroker.request.read.timeout.ms", "long", "30000", MEDIUM,
     "kbroker's own key: a request frame that has begun must arrive whole within this time, else the "
     "connection is closed.", (1, None, None), True),
    ("max.connections.per.ip.overrides", "string", "", MEDIUM,
     "Per-address exceptions to max.connections.per.ip, as host:count,...", None, True),
    ("socket.send.buffer.bytes", "int", "102400", HIGH, "SO_SNDBUF of client sockets (-1: the OS default).", None,
     False),
    ("socket.receive.buffer.bytes", "int", "102400", HIGH, "SO_RCVBUF of client sockets (-1: the OS default).",
     None, False),
    ("replica.fetch.max.bytes", "int", "1048576", MEDIUM, "Bytes a follower fetches per partition (at least one "
     "batch is returned, whatever its size).", (0, None, None), True),
    ("replica.fetch.response.max.bytes", "int", "10485760", MEDIUM,
     "The most bytes one follower Fetch response may hold.", (0, None, None), True),
    ("max.incremental.fetch.session.cache.slots", "int", "1000", MEDIUM,
     "Incremental fetch sessions (KIP-227) the broker keeps; 0 turns them off (clients then send full requests).",
     (0, None, None), True),
    ("replica.fetch.wait.max.ms", "int", "500", MEDIUM,
     "How long a follower's Fetch waits at the leader for data (keep below replica.lag.time.max.ms).",
     (0, None, None), True),
    ("replica.fetch.min.bytes", "int", "1", MEDIUM, "Bytes a follower's Fetch waits for before it is answered.",
     (1, None, None), True),
    ("replica.fetch.backoff.ms", "int", "1000", MEDIUM,
     "How long a follower waits after a failed fetch of a partition or from an unreachable leader.",
     (0, None, None), True),
    ("replica.lag.time.max.ms", "long", "30000", HIGH,
     "A follower that has not caught up with the leader for this long leaves the ISR (AlterPartition).",
     (1, None, None), True),
    ("replica.selector.class", "string", "", MEDIUM,
     "Which replica consumers with a client.rack are sent to (KIP-392): empty, the leader only; "
     "org.apache.kafka.common.replica.RackAwareReplicaSelector, an in-sync replica in the consumer's rack "
     "(docs/cluster.md). Other class names are refused.",
     (None, None, ("org.apache.kafka.common.replica.RackAwareReplicaSelector",)), True),
    ("quota.window.num", "int", "11", LOW,
     "Samples the client quotas' rates keep (producer_byte_rate, consumer_byte_rate, request_percentage; "
     "kbroker/server/client_quotas.py).", (1, None, None), True),
    ("quota.window.size.seconds", "int", "1", LOW,
     "Seconds each sample of the client quotas' rates covers.", (1, None, None), True),
    ("controller.quota.window.num", "int", "11", LOW,
     "Samples the controller_mutation_rate quotas keep (KIP-599).", (1, None, None), True),
    ("controller.quota.window.size.seconds", "int", "1", LOW,
     "Seconds each sample of the controller_mutation_rate quotas covers.", (1, None, None), True),
    ("replication.quota.window.num", "int", "11", LOW,
     "Samples the replication throttles' byte rates keep (KIP-73; kbroker/server/replication_quota.py).",
     (1, None, None), True),
    ("replication.quota.window.size.seconds", "int", "1", LOW,
     "Seconds each sample of the replication throttles' byte rates covers.", (1, None, None), True),
    ("replica.socket.timeout.ms", "int", "30000", HIGH,
     "How long a follower waits for the answer to a Fetch, beyond replica.fetch.wait.max.ms.", (1, None, None),
     True),
    ("fetch.max.bytes", "int", "57671680", MEDIUM, "The most bytes one Fetch response may hold.", (1024, None, None),
     False),
    ("log.retention.check.interval.ms", "long", "300000", MEDIUM, "How often retention is applied.",
     (1, None, None), True),
    ("log.flush.offset.checkpoint.interval.ms", "int", "60000", HIGH,
     "How often the recovery-point checkpoint is written.", (0, None, None), True),
    ("log.cleaner.enable", "boolean", "true", MEDIUM, "Run the log cleaner (compaction).", None, True),
    ("log.cleaner.io.buffer.size.per.thread", "int", "524288", LOW, "Kafka's older cleaner buffer key.", None,
     False),
    ("offsets.topic.num.partitions", "int", "50", HIGH, "Partitions of __consumer_offsets.", (1, None, None), True),
    ("offsets.topic.replication.factor", "short", "3", HIGH,
     "Replication factor of __consumer_offsets (capped at the live brokers).", (1, None, None), True),
    ("offsets.topic.segment.bytes", "int", "104857600", HIGH, "Segment size of __consumer_offsets.",
     (1, None, None), True),
    ("offsets.commit.timeout.ms", "int", "5000", HIGH,
     "How long a coordinator's write (an offset commit, a transaction state change) waits for the in-sync "
     "replicas of its internal topic partition before the answer is COORDINATOR_NOT_AVAILABLE.",
     (1, None, None), True),
    ("offsets.retention.minutes", "int", "10080", HIGH, "How long committed offsets of an empty group are kept.",
     (1, None, None), True),
    ("offsets.retention.check.interval.ms", "long", "600000", HIGH, "How often expired offsets are removed.",
     (1, None, None), True),
    ("offsets.load.buffer.size", "int", "5242880", HIGH, "Read size when loading __consumer_offsets.",
     (1, None, None), True),
    ("offset.metadata.max.bytes", "int", "4096", HIGH, "The largest metadata string of a committed offset.",
     None, True),
    ("group.initial.rebalance.delay.ms", "int", "3000", MEDIUM,
     "How long a new classic group waits for more members before its first rebalance.", (0, None, None), True),
    ("group.min.session.timeout.ms", "int", "6000", MEDIUM, "The smallest session timeout a member may ask for.",
     None, True),
    ("group.max.session.timeout.ms", "int", "1800000", MEDIUM, "The largest session timeout a member may ask for.",
     None, True),
    ("group.max.size", "int", _I, MEDIUM, "The most members a classic group may have.", (1, None, None), True),
    ("group.consumer.assignors", "list", "uniform,range", MEDIUM,
     "Server-side assignors of consumer groups (KIP-848), the first is the default.", None, True),
    ("group.consumer.session.timeout.ms", "int", "45000", MEDIUM, "Session timeout of KIP-848 consumer members.",
     (1, None, None), True),
    ("group.consumer.heartbeat.interval.ms", "int", "5000", MEDIUM,
     "Heartbeat interval of KIP-848 consumer members.", (1, None, None), True),
    ("group.consumer.max.size", "int", _I, MEDIUM, "The most members a consumer group may have.", (1, None, None),
     True),
    ("group.consumer.min.session.timeout.ms", "int", "45000", MEDIUM,
     "The smallest consumer.session.timeout.ms a group config may set.", (1, None, None), True),
    ("group.consumer.max.session.timeout.ms", "int", "60000", MEDIUM,
     "The largest consumer.session.timeout.ms a group config may set.", (1, None, None), True),
    ("group.consumer.min.heartbeat.interval.ms", "int", "5000", MEDIUM,
     "The smallest consumer.heartbeat.interval.ms a group config may set.", (1, None, None), True),
    ("group.consumer.max.heartbeat.interval.ms", "int", "15000", MEDIUM,
     "The largest consumer.heartbeat.interval.ms a group config may set.", (1, None, None), True),
    ("group.consumer.assignment.interval.ms", "int", "1000", MEDIUM,
     "Least time between two target assignment computations of a consumer group (KIP-1263).", (0, None, None),
     True),
    ("group.consumer.min.assignment.interval.ms", "int", "0", MEDIUM,
     "The smallest consumer.assignment.interval.ms a group config may set.", (0, None, None), True),
    ("group.consumer.max.assignment.interval.ms", "int", "15000", MEDIUM,
     "The largest consumer.assignment.interval.ms a group config may set.", (0, None, None), True),
    ("group.consumer.migration.policy", "string", "bidirectional", MEDIUM,
     "Online conversion between classic and consumer groups (KIP-848): bidirectional, upgrade (classic to "
     "consumer only), downgrade (consumer to classic only) or disabled.",
     (None, None, ("bidirectional", "upgrade", "downgrade", "disabled")), True),
    ("group.share.session.timeout.ms", "int", "45000", MEDIUM, "Session timeout of share group members (KIP-932).",
     (1, None, None), True),
    ("group.share.heartbeat.interval.ms", "int", "5000", MEDIUM, "Heartbeat interval of share group members.",
     (1, None, None), True),
    ("group.share.max.size", "int", "200", MEDIUM, "The most members a share group may have.", (1, 1000, None),
     True),
    ("group.share.record.lock.duration.ms", "int", "30000", MEDIUM,
     "How long a share group member holds a record it acquired before it goes back to Available.",
     (1000, 3600000, None), True),
    ("group.share.delivery.count.limit", "int", "5", MEDIUM,
     "Deliveries of a record to share group members before it is archived.", (2, 10, None), True),
    ("group.share.partition.max.record.locks", "int", "2000", MEDIUM,
     "The most records in flight (acquired or waiting for redelivery) per share partition.", (100, 10000, None),
     True),
    ("group.share.max.share.sessions", "int", "2000", MEDIUM, "The most share sessions this broker keeps.",
     (1, None, None), True),
    ("group.share.assignment.interval.ms", "int", "1000", MEDIUM,
     "Least time between two target assignment computations of a share group (KIP-1263).",
     (0, None, None), True),
    ("group.share.min.session.timeout.ms", "int", "45000", MEDIUM,
     "The smallest share.session.timeout.ms a group config may set.", (1, None, None), True),
    ("group.share.max.session.timeout.ms", "int", "60000", MEDIUM,
     "The largest share.session.timeout.ms a group config may set.", (1, None, None), True),
    ("group.share.min.heartbeat.interval.ms", "int", "5000", MEDIUM,
     "The smallest share.heartbeat.interval.ms a group config may set.", (1, None, None), True),
    ("group.share.max.heartbeat.interval.ms", "int", "15000", MEDIUM,
     "The largest share.heartbeat.interval.ms a group config may set.", (1, None, None), True),
    ("group.share.min.record.lock.duration.ms", "int", "15000", MEDIUM,
     "The smallest share.record.lock.duration.ms a group config may set.", (1000, 30000, None), True),
    ("group.share.max.record.lock.duration.ms", "int", "60000", MEDIUM,
     "The largest share.record.lock.duration.ms a group config may set.", (30000, 3600000, None), True),
    ("group.share.min.delivery.count.limit", "int", "2", MEDIUM,
     "The smallest share.delivery.count.limit a group config may set.", (2, 5, None), True),
    ("group.share.max.delivery.count.limit", "int", "10", MEDIUM,
     "The largest share.delivery.count.limit a group config may set.", (5, 25, None), True),
    ("group.share.min.partition.max.record.locks", "int", "100", MEDIUM,
     "The smallest share.partition.max.record.locks a group config may set.", (100, 2000, None), True),
    ("group.share.max.partition.max.record.locks", "int", "4000", MEDIUM,
     "The largest share.partition.max.record.locks a group config may set.", (2000, 10000, None), True),
    ("group.share.min.assignment.interval.ms", "int", "0", MEDIUM,
     "The smallest share.assignment.interval.ms a group config may set.", (0, None, None), True),
    ("group.share.max.assignment.interval.ms", "int", "15000", MEDIUM,
     "The largest share.assignment.interval.ms a group config may set.", (0, None, None), True),
    ("share.coordinator.state.topic.num.partitions", "int", "50", HIGH, "Partitions of __share_group_state.",
     (1, None, None), True),
    ("share.coordinator.state.topic.replication.factor", "short", "3", HIGH,
     "Replication factor of __share_group_state (capped at the live brokers).", (1, None, None), True),
    ("share.coordinator.state.topic.min.isr", "short", "2", HIGH,
     "min.insync.replicas of __share_group_state (capped at its replication factor).", (1, None, None), True),
    ("share.coordinator.state.topic.segment.bytes", "int", "104857600", HIGH, "Segment size of __share_group_state.",
     (1, None, None), True),
    ("transaction.state.log.num.partitions", "int", "50", HIGH, "Partitions of __transaction_state.",
     (1, None, None), True),
    ("transaction.state.log.replication.factor", "short", "3", HIGH, "Replication factor of __transaction_state.",
     (1, None, None), True),
    ("transaction.state.log.min.isr", "int", "2", HIGH, "min.insync.replicas of __transaction_state.",
     (1, None, None), True),
    ("transaction.state.log.segment.bytes", "int", "104857600", HIGH, "Segment size of __transaction_state.",
     (1, None, None), True),
    ("transaction.max.timeout.ms", "int", "900000", HIGH, "The longest transaction timeout a producer may ask for.",
     (1, None, None), True),
    ("transactional.id.expiration.ms", "int", "604800000", HIGH,
     "How long an idle transactional id is kept.", (1, None, None), True),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000", LOW,
     "How often timed-out transactions are aborted.", (1, None, None), True),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000", LOW,
     "How often expired transactional ids are removed.", (1, None, None), True),
    ("producer.id.expiration.check.interval.ms", "int", "600000", LOW,
     "How often idle producer ids are expired.", (1, None, None), True),
    ("remote.log.storage.system.enable", "boolean", "false", MEDIUM,
     "Tiered storage (not implemented: topics cannot enable it).", None, True),
    ("unclean.leader.election.enable", "boolean", "false", HIGH,
     "Elect an out-of-sync replica when no in-sync one is left.", None, False),
    ("authorizer.class.name", "string", "", HIGH,
     "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer for kbroker's ACL authorizer (ACLs "
     "in the metadata log), or a Python class path with authorize(principal, operation, resource_type, name, "
     "host) (empty: allow everything, Kafka's default).", None, True),
    ("super.users", "string", "", HIGH,
     "Principals (Type:name, separated by ;) that kbroker's ACL authorizer allows everything.", None, True),
    ("allow.everyone.if.no.acl.found", "boolean", "false", MEDIUM,
     "With kbroker's ACL authorizer: allow an operation on a resource that has no ACL at all.", None, True),
    ("ssl.protocol", "string", "TLSv1.3", MEDIUM,
     "Kafka's SSLContext protocol; kbroker takes its TLS versions from ssl.enabled.protocols.", None, False),
    ("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", MEDIUM,
     "The TLS versions a TLS listener or connection accepts (the lowest and highest named are the bounds).", None,
     True),
    ("ssl.cipher.suites", "list", "", LOW,
     "TLS 1.2 cipher suites (IANA or OpenSSL names; empty: OpenSSL's defaults); TLS 1.3 suites cannot be "
     "restricted.", None, True),
    ("ssl.keystore.type", "string", "JKS", MEDIUM,
     "PEM or PKCS12 (a JKS-typed file holding PKCS12 is read as PKCS12; real JKS files are refused).", None, True),
    ("ssl.keystore.location", "string", "", HIGH, "The keystore file (PKCS12, or PEM with key and chain).", None,
     True),
    ("ssl.keystore.password", "password", "", HIGH, "The PKCS12 keystore's password.", None, True),
    ("ssl.key.password", "password", "", HIGH, "The password of the private key (encrypted PEM key).", None, True),
    ("ssl.keystore.certificate.chain", "password", "", HIGH, "The certificate chain as PEM text (type PEM).", None,
     True),
    ("ssl.keystore.key", "password", "", HIGH, "The private key as PEM text (type PEM).", None, True),
    ("ssl.truststore.type", "string", "JKS", MEDIUM, "PEM or PKCS12 (as ssl.keystore.type).", None, True),
    ("ssl.truststore.location", "string", "", HIGH, "The truststore file (PKCS12 or PEM certificates).", None,
     True),
    ("ssl.truststore.password", "password", "", HIGH, "The PKCS12 truststore's password.", None, True),
    ("ssl.truststore.certificates", "password", "", HIGH, "Trusted certificates as PEM text (type PEM).", None, True),
    ("ssl.client.auth", "string", "none", MEDIUM,
     "Client certificates on TLS listeners: none, requested or required.", (None, None, ("required", "requested",
                                                                                        "none")), True),
    ("ssl.endpoint.identification.algorithm", "string", "https", LOW,
     "https: this node checks the host name in the certificates of the nodes it connects to; empty: it does "
     "not.", None, True),
    ("ssl.principal.mapping.rules", "string", "DEFAULT", LOW,
     "Rules from a client certificate's distinguished name to its principal (RULE:pattern/replacement/[LU], "
     "DEFAULT).", None, True),
    ("sasl.enabled.mechanisms", "list", "GSSAPI", MEDIUM,
     "The SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (GSSAPI is not "
     "implemented).",
     None, True),
    ("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", MEDIUM,
     "The mechanism this broker authenticates with on a SASL inter-broker listener.", None, True),
    ("sasl.mechanism.controller.protocol", "string", "GSSAPI", MEDIUM,
     "The mechanism this node authenticates with on a SASL controller listener.", None, True),
    ("sasl.jaas.config", "password", "", MEDIUM,
     "JAAS login module line (per listener and mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config); PLAIN's "
     "user_<name> options are its users, username/password this node's own.", None, True),
    ("connection.failed.authentication.delay.ms", "int", "100", LOW,
     "Delay before a failed authentication is answered and the connection closed, ms.", (0, None, None), True),
    ("sasl.server.max.receive.size", "int", "524288", LOW,
     "Largest SASL token accepted before authentication, bytes.", (1, None, None), True),
    ("sasl.oauthbearer.jwks.endpoint.url", "string", "", MEDIUM,
     "Where OAuthBearerValidatorCallbackHandler gets the signing keys: an https://, http:// or file: URL.", None,
     True),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", "3600000", LOW,
     "How often the JWKS is fetched again, ms (and when a token names an unknown key id).", (1, None, None), True),
    ("sasl.oauthbearer.expected.audience", "list", "", LOW,
     "Audiences a token's aud claim must name one of (empty: not checked).", None, True),
    ("sasl.oauthbearer.expected.issuer", "string", "", LOW, "The iss claim a token must have (empty: not checked).",
     None, True),
    ("sasl.oauthbearer.sub.claim.name", "string", "sub", LOW, "The claim holding the principal name.", None, True),
    ("sasl.oauthbearer.scope.claim.name", "string", "scope", LOW, "The claim holding the scopes.", None, False),
    ("sasl.oauthbearer.clock.skew.seconds", "int", "30", LOW,
     "Clock difference allowed when checking exp, nbf and iat, seconds.", (0, None, None), True),
    ("delegation.token.secret.key", "password", "", MEDIUM,
     "Secret key of delegation tokens (KIP-48): a token's HMAC is HMAC-SHA512 of its id with this key; empty: "
     "delegation tokens are disabled. The same on every node.", None, True),
    ("delegation.token.max.lifetime.ms", "long", "604800000", MEDIUM,
     "Longest a delegation token can live, however often it is renewed, ms.", (1, None, None), True),
    ("delegation.token.expiry.time.ms", "long", "86400000", MEDIUM,
     "How long a delegation token lives before it must be renewed, ms (also the longest renewal).", (1, None, None),
     True),
    ("delegation.token.expiry.check.interval.ms", "long", "3600000", LOW,
     "How often the active controller removes expired delegation tokens, ms.", (1, None, None), True),
    ("connections.max.reauth.ms", "long", "0", MEDIUM,
     "Longest SASL session before the client must re-authenticate (KIP-368); 0: no limit.", (0, None, None), True),
    ("metrics.port", "int", "", LOW,
     "Port of the Prometheus metrics endpoint (kbroker's own key; unset: no endpoint).", (0, 65535, None), True),
    ("metrics.host", "string", "", LOW,
     "Address the metrics endpoint binds (kbroker's own key; default: the host of the first listener).", None, True),
]

_DYNAMIC_DOCS: dict[str, tuple[str, str, bool]] = {
    "log.segment.bytes": (HIGH, "Default segment size of topic logs (topic key segment.bytes).", True),
    "log.roll.ms": (HIGH, "Default age at which a segment rolls, ms (segment.ms); wins over log.roll.hours.", True),
    "log.roll.jitter.ms": (HIGH, "Random jitter subtracted from the roll time, ms.", False),
    "log.index.size.max.bytes": (MEDIUM, "Default offset index size limit (segment.index.bytes).", True),
    "log.index.interval.bytes": (MEDIUM, "Bytes between offset index entries (index.interval.bytes).", True),
    "log.flush.interval.messages": (HIGH, "Messages appended before a log is fsynced (flush.messages).", True),
    "log.flush.interval.ms": (HIGH, "Age of unflushed data before a log is fsynced (flush.ms).", True),
    "log.retention.bytes": (HIGH, "Default size a partition keeps before deleting old segments (-1: no limit).",
                            True),
    "log.retention.ms": (HIGH, "Default time data is kept, ms (retention.ms); wins over minutes and hours.", True),
    "log.segment.delete.delay.ms": (HIGH, "Delay before a deleted segment's files are removed.", True),
    "log.cleanup.policy": (MEDIUM, "Default cleanup policy: delete, compact or both.", True),
    "log.cleaner.delete.retention.ms": (MEDIUM, "How long tombstones are kept by compaction.", True),
    "log.cleaner.min.compaction.lag.ms": (MEDIUM, "The youngest a record may be to be compacted.", True),
    "log.cleaner.max.compaction.lag.ms": (MEDIUM, "The oldest a record may be before compaction is forced.", True),
    "log.cleaner.min.cleanable.ratio": (MEDIUM, "Dirty ratio above which a log is compacted.", True),
    "log.message.timestamp.type": (MEDIUM, "Default timestamp type: CreateTime or LogAppendTime.", True),
    "log.message.timestamp.before.max.ms": (MEDIUM, "How far in the past a record's timestamp may be.", True),
    "log.message.timestamp.after.max.ms": (MEDIUM, "How far in the future a record's timestamp may be.", True),
    "log.preallocate": (MEDIUM, "Preallocate segment files (ignored by kbroker).", False),
    "log.local.retention.ms": (MEDIUM, "Local retention with tiered storage (no tiered storage in kbroker).", False),
    "log.local.retention.bytes": (MEDIUM, "Local retention with tiered storage (no tiered storage in kbroker).",
                                  False),
    "message.max.bytes": (HIGH, "The largest record batch a topic accepts by default (max.message.bytes).", True),
    "min.insync.replicas": (HIGH, "In-sync replicas an acks=all write needs (min.insync.replicas).", True),
    "unclean.leader.election.enable": (HIGH, "Elect an out-of-sync replica when no in-sync one is left.", False),
    "compression.type": (HIGH, "Default compression of stored batches; producer keeps the producer's.", True),
    "compression.gzip.level": (MEDIUM, "gzip level when the broker compresses.", True),
    "compression.lz4.level": (MEDIUM, "lz4 level when the broker compresses.", True),
    "compression.zstd.level": (MEDIUM, "zstd level when the broker compresses.", True),
    "log.cleaner.threads": (MEDIUM, "Cleaner threads (kbroker cleans on one background task).", True),
    "log.cleaner.backoff.ms": (MEDIUM, "Sleep of the cleaner when there is nothing to clean.", True),
    "log.cleaner.dedupe.buffer.size": (MEDIUM, "Memory for the cleaner's key map.", True),
    "log.cleaner.io.buffer.size": (MEDIUM, "Cleaner read/write buffer size.", True),
    "log.cleaner.io.buffer.load.factor": (MEDIUM, "Load factor of the cleaner's key map.", False),
    "log.cleaner.io.max.bytes.per.second": (MEDIUM, "Cleaner I/O throttle.", False),
    "leader.replication.throttled.rate": (
        MEDIUM, "Upper bound (bytes/s) of what this broker as a leader sends for the replicas in "
                "leader.replication.throttled.replicas; followers outside the ISR get no records of them while it is "
                "exceeded (KIP-73). Dynamic only: no effect in server.properties.", True),
    "follower.replication.throttled.rate": (
        MEDIUM, "Upper bound (bytes/s) of what this broker as a follower fetches for the replicas in "
                "follower.replication.throttled.replicas; while it is exceeded it does not fetch those outside the ISR "
                "(KIP-73). Dynamic only: no effect in server.properties.", True),
    "num.io.threads": (HIGH, "Request handler threads (kbroker: one event loop; stored, no effect).", False),
    "num.network.threads": (HIGH, "Network threads (kbroker: one event loop; stored, no effect).", False),
    "num.replica.fetchers": (HIGH, "Fetch loops per leader broker a follower runs (partitions spread by hash; read "
                                   "at start-up).", True),
    "num.recovery.threads.per.data.dir": (HIGH, "Threads that recover logs at start-up.", False),
    "background.threads": (HIGH, "Background task threads.", False),
    "max.connections": (MEDIUM, "The most connections the broker accepts; more are closed at once (read at "
                                "start-up).", True),
    "max.connections.per.ip": (MEDIUM, "The most connections from one address; more are closed at once (read at "
                                       "start-up).", True),
    "max.connection.creation.rate": (MEDIUM, "New connections per second the broker accepts on listeners other than "
                                             "the inter-broker one (KIP-612): the acceptor waits before taking more "
                                             "up; per listener as listener.name.<l>.max.connection.creation.rate "
                                             "(that one read at start-up).", True),
    "producer.id.expiration.ms": (LOW, "How long an idle producer id is kept in a partition.", True),
    "transaction.partition.verification.enable": (LOW, "Verify the partitions of a transaction before appends.",
                                                  True),
}

_CLUSTER_WIDE_ONLY: frozenset[str] = frozenset()

#: Broker keys whose Kafka default is the empty string or list (DescribeConfigs answers ``""`` with a
#: DEFAULT_CONFIG synonym), where the other keys defined here with an empty default have none (answered as null)
EMPTY_STRING_DEFAULTS: frozenset[str] = frozenset({
    "authorizer.class.name", "controller.quorum.bootstrap.servers", "controller.quorum.voters",
    "max.connections.per.ip.overrides", "sasl.oauthbearer.expected.audience", "ssl.cipher.suites",
})

#: Keys defined here that Kafka's DescribeConfigs of a broker lists only when they are set: the replication
#: throttle rates (dynamic-only quota keys, KIP-73), the authorizer's own keys, keys Kafka keeps internal or no
#: longer has, and the cluster id (kept in meta.properties by Kafka)
LISTED_ONLY_WHEN_SET: frozenset[str] = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate", "allow.everyone.if.no.acl.found",
    "super.users", "producer.id.expiration.check.interval.ms", "leader.imbalance.per.broker.percentage",
    "log.cleaner.io.buffer.size.per.thread", "cluster.id",
})


def _build() -> dict[str, ConfigDef]:
    out: dict[str, ConfigDef] = {}
    for name, typ, default, imp, doc, rng, used in _STATIC:
        lo, hi, choices = rng or (None, None, None)
        t = "int" if typ == "short" else typ
        out[name] = ConfigDef(TopicConfigKey(name, t, default or None, lo=lo, hi=hi, choices=choices), imp, doc,
                              READ_ONLY, used, kafka_type=typ if typ != t else "")
    for name, key in DYNAMIC_BROKER_CONFIGS.items():
        imp, doc, used = _DYNAMIC_DOCS.get(name, (MEDIUM, "", False))
        out[name] = ConfigDef(key, imp, doc, PER_BROKER, used)
    return dict(sorted(out.items()))


BROKER_CONFIG_DEF: Mapping[str, ConfigDef] = _build()
"""Every broker key kbroker knows -> its definition."""

TOPIC_DOCS: dict[str, str] = {
    "cleanup.policy": "delete (by time or size), compact (keep the last record of each key), or both.",
    "compression.type": "Compression of stored batches; producer keeps what the producer sent.",
    "compression.gzip.level": "gzip level when the broker compresses.",
    "compression.lz4.level": "lz4 level when the broker compresses.",
    "compression.zstd.level": "zstd level when the broker compresses.",
    "delete.retention.ms": "How long tombstones survive compaction.",
    "file.delete.delay.ms": "Delay before a deleted segment's files are removed.",
    "flush.messages": "Messages appended before the log is fsynced.",
    "flush.ms": "Age of unflushed data before the log is fsynced.",
    "follower.replication.throttled.replicas": "Replicas throttled on the follower side (partition:brokerId,... or "
                                               "*), by follower.replication.throttled.rate.",
    "index.interval.bytes": "Bytes between offset index entries.",
    "leader.replication.throttled.replicas": "Replicas throttled on the leader side (partition:brokerId,... or *), "
                                             "by leader.replication.throttled.rate.",
    "local.retention.bytes": "Local retention with tiered storage (no tiered storage in kbroker).",
    "local.retention.ms": "Local retention with tiered storage (no tiered storage in kbroker).",
    "max.compaction.lag.ms": "The oldest a record may be before compaction is forced.",
    "max.message.bytes": "The largest record batch the topic accepts.",
    "message.downconversion.enable": "Removed in Kafka 4.0; accepted and ignored.",
    "message.timestamp.after.max.ms": "How far in the future a record's timestamp may be.",
    "message.timestamp.before.max.ms": "How far in the past a record's timestamp may be.",
    "message.timestamp.type": "CreateTime (the producer's) or LogAppendTime (the broker's).",
    "min.cleanable.dirty.ratio": "Dirty ratio above which the log is compacted.",
    "min.compaction.lag.ms": "The youngest a record may be to be compacted.",
    "min.insync.replicas": "In-sync replicas an acks=all write needs.",
    "preallocate": "Preallocate segment files (ignored by kbroker).",
    "remote.log.copy.disable": "Tiered storage (not implemented).",
    "remote.log.delete.on.disable": "Tiered storage (not implemented).",
    "remote.storage.enable": "Tiered storage (not implemented: refused).",
    "retention.bytes": "Size a partition keeps before old segments are deleted (-1: no limit).",
    "retention.ms": "Time data is kept (-1: forever).",
    "segment.bytes": "Segment file size.",
    "segment.index.bytes": "Offset index size limit per segment.",
    "segment.jitter.ms": "Random jitter subtracted from segment.ms.",
    "segment.ms": "Age at which the active segment rolls.",
    "unclean.leader.election.enable": "Elect an out-of-sync replica when no in-sync one is left.",
}


#: (broker key, its lower-bound key, its upper-bound key, Kafka's wording of the upper bound check): the share
#: group keys Kafka's ``ShareGroupConfig`` and ``GroupCoordinatorConfig`` require within their min/max keys
_SHARE_GROUP_BOUNDED = (
    ("group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
     "group.share.max.heartbeat.interval.ms", "le"),
    ("group.share.session.timeout.ms", "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms",
     "le"),
    ("group.share.assignment.interval.ms", "group.share.min.assignment.interval.ms",
     "group.share.max.assignment.interval.ms", "le"),
    ("group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
     "group.share.max.record.lock.duration.ms", "ge"),
    ("group.share.delivery.count.limit", "group.share.min.delivery.count.limit",
     "group.share.max.delivery.count.limit", "ge"),
    ("group.share.partition.max.record.locks", "group.share.min.partition.max.record.locks",
     "group.share.max.partition.max.record.locks", "ge"),
)


def _check_share_group_bounds(props: Mapping[str, str]) -> None:
    """Kafka's start-up checks of the share group keys against their ``group.share.min/max.*`` bounds (and the
    heartbeat interval below the session timeout); raises ConfigException with Kafka's message."""

    def value(key: str) -> int:
        raw = props.get(key)
        d = BROKER_CONFIG_DEF[key]
        return int(str(raw).strip()) if raw is not None and str(raw).strip() else int(d.key.default or 0)

    for key, lo_key, hi_key, wording in _SHARE_GROUP_BOUNDED:
        v = value(key)
        if v < value(lo_key):
            raise ConfigException(f"{key} must be greater than or equal to {lo_key}")
        if v > value(hi_key):
            raise ConfigException(f"{key} must be less than or equal to {hi_key}" if wording == "le"
                                  else f"{hi_key} must be greater than or equal to {key}")
    if value("group.share.heartbeat.interval.ms") >= value("group.share.session.timeout.ms"):
        raise ConfigException("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")


def validate_server_config(props: Mapping[str, str]) -> list[str]:
    """Check ``server.properties`` (and ``--override``s) against the definitions.

    Returns warning lines (unknown keys, known keys kbroker does not act on); raises
    :class:`~kbroker.config.ConfigException` with one line for the first value that is not valid.
    """
    warnings: list[str] = []
    for name in sorted(props):
        raw = props[name]
        d = BROKER_CONFIG_DEF.get(name)
        if d is None:
            if name in TOPIC_CONFIG_KEYS:
                warnings.append(f"The configuration '{name}' is a topic config; set it per topic, or use its broker "
                                f"name in server.properties.")
            elif not _is_listener_prefixed(name):
                warnings.append(f"The configuration '{name}' was supplied but isn't a known config.")
            continue
        if raw.strip() == "" and d.key.default is None:
            continue  # unset optional key
        try:
            parse_config_value(d.key, raw)
        except KafkaError as exc:
            raise ConfigException(exc.message) from None
        if name in DYNAMIC_ONLY_BROKER_KEYS:
            warnings.append(f"The configuration '{name}' can only be set dynamically (kbroker-configs --alter "
                            f"--entity-type brokers); its value in server.properties has no effect.")
        elif not d.used and raw != (d.key.default or ""):
            warnings.append(f"The configuration '{name}' is accepted but has no effect in kbroker.")
    _check_share_group_bounds(props)
    return warnings


SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def validate_listeners(props: Mapping[str, str]) -> None:
    """Refuse a listener whose security protocol kbroker does not know (a typo in
    ``listener.security.protocol.map``): serving it as plaintext would silently drop the security the operator
    asked for."""
    get = lambda k: props.get(k, BROKER_DEFAULTS.get(k, ""))  # noqa: E731
    mapping: dict[str, str] = {}
    for item in get("listener.security.protocol.map").split(","):
        name, sep, proto = item.strip().partition(":")
        if sep:
            mapping[name.strip().upper()] = proto.strip().upper()
    for item in get("listeners").split(","):
        if not item.strip():
            continue
        name = item.strip().partition("://")[0].strip().upper()
        proto = mapping.get(name, name)
        if proto not in SUPPORTED_SECURITY_PROTOCOLS:
            raise ConfigException(
                f"Listener {name} ({item.strip()}) uses security protocol {proto}, which is not one of "
                f"{', '.join(SUPPORTED_SECURITY_PROTOCOLS)}: map it to one of them in listener.security.protocol.map")


def _is_listener_prefixed(name: str) -> bool:
    """``listener.name.<listener>.<key>`` keys (per-listener settings) are not checked here."""
    return name.startswith("listener.name.")


def check_defaults_agree() -> list[str]:
    """Keys whose default here differs from :data:`kbroker.config.BROKER_DEFAULTS` (a test keeps this empty)."""
    bad = []
    for name, default in BROKER_DEFAULTS.items():
        d = BROKER_CONFIG_DEF.get(name)
        if d is None:
            bad.append(f"{name}: not defined")
        elif (d.key.default or "") != default:
            bad.append(f"{name}: {d.key.default!r} here, {default!r} in BROKER_DEFAULTS")
    return bad
