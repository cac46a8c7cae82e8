"""The metadata controller of a combined broker+controller node (a KRaft-style quorum of one).

Storage, under ``metadata.log.dir`` (default: the first ``log.dirs`` entry):

* ``meta.properties`` in every log directory (``version=1``, ``cluster.id``, ``node.id``,
  ``directory.id``), written on first start ("format on first start") and checked on every start;
* ``__cluster_metadata-0/``: the metadata log, a :class:`~kbroker.storage.log.PartitionLog` with topic id
  ``Uuid(0, 1)``; every record is a framed metadata record (:mod:`kbroker.controller.records`);
* ``__cluster_metadata-0/quorum-state``: the Raft election state (leader, epoch, voters) as one line of
  JSON, in the shape of Kafka's ``QuorumStateData`` v0.

Every start is an election the single voter wins: the leader epoch goes up by one and a ``LeaderChange``
control batch opens the epoch. The log is then replayed into a :class:`~kbroker.controller.image.MetadataImage`;
on the very first start the bootstrap records (finalized features) are written; finally this node
(re-)registers as a broker with its current listeners.

Writes go through :meth:`QuorumController._commit`: the records are replayed onto the current image first
(so a record that cannot apply never reaches the log), appended as one batch in the current epoch, flushed
with fsync, and only then published: the new image becomes :attr:`QuorumController.image` and listeners
registered with :meth:`add_listener` are called with ``(old_image, new_image, changes)``. Replay is the only
way the image changes, both here and on restart.

The controller is synchronous and quick; the broker calls it from its event loop. Multi-voter Raft
(Vote/BeginQuorumEpoch/Fetch, high-watermark commit) and snapshots are not implemented yet: the seams are
:meth:`_elect_self` (election), :meth:`_commit` (append + commit) and :meth:`_replay_log` (loading).
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from kbroker.config import BrokerConfig, ConfigException, parse_properties
from kbroker.controller.acl_control import plan_create_acls, plan_delete_acls
from kbroker.controller.bootstrap import BootstrapError, read_bootstrap_file
from kbroker.controller.config_control import plan_incremental_alter_configs, plan_legacy_alter_configs
from kbroker.controller.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    BrokerRegistration,
    Endpoint,
    MetadataChanges,
    MetadataDelta,
    MetadataImage,
    MetadataReplayError,
    diff_images,
    is_internal,
)
from kbroker.controller.replica_placement import place_replicas
from kbroker.controller.raft.client import NotLeaderError
from kbroker.controller.records import MetadataRecordError, decode_metadata_record, encode_metadata_record
from kbroker.controller.client_quota_control import plan_alter_client_quotas
from kbroker.controller.delegation_token_control import (
    CreateResult,
    expired_token_records,
    plan_create_delegation_token,
    plan_expire_delegation_token,
    plan_renew_delegation_token,
)
from kbroker.controller.scram_control import plan_alter_user_scram_credentials
from kbroker.controller.snapshot import (
    SnapshotError,
    SnapshotStore,
    decode_snapshot,
    encode_snapshot,
    image_records,
    load_image,
)
from kbroker.controller.replication_control import (
    complete_reassignment,
    list_partition_reassignments,
    plan_alter_partition_reassignments,
    plan_create_partitions,
    plan_elect_leaders,
)
from kbroker.controller.topic_configs import validate_topic_configs
from kbroker.controller.uuids import METADATA_TOPIC_ID, ZERO_UUID, random_uuid, uuid_from_str, uuid_to_str
from kbroker.protocol import codec
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.leader_change_message import LeaderChangeMessage
from kbroker.protocol.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

__all__ = [
    "BOOTSTRAP_FEATURES",
    "FORMAT_FEATURES",
    "METADATA_PARTITION_DIR",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "PRODUCER_ID_BLOCK_SIZE",
    "SUPPORTED_FEATURES",
    "CreateTopicResult",
    "CreateTopicSpec",
    "DeleteTopicResult",
    "MetadataStorageError",
    "QuorumController",
    "is_internal",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"
QUORUM_STATE_FILE = "quorum-state"
META_PROPERTIES = "meta.properties"

#: ``metadata.version`` feature level of Apache Kafka 4.3 (4.3-IV0), the release the protocol guide follows.
METADATA_VERSION_LEVEL = 30
#: Lowest ``metadata.version`` a 4.x node can run (3.3-IV3).
MINIMUM_METADATA_VERSION_LEVEL = 7
#: Finalized feature levels written on the first start, as Kafka 4.3 formats a cluster at its latest release:
#: ``transaction.version`` 2 (KIP-890 part 2: an epoch bump per transaction, implicit partition adds; Kafka's
#: default from metadata.version 4.0-IV2 on), ``share.version`` 1 (share groups, KIP-932, as Kafka 4.2+) and
#: ``streams.version`` 1 (streams groups, KIP-1071; Kafka's default from metadata.version 4.2-IV1 on).
#: ``kbroker-storage format --feature name=N`` bootstraps another level (kept in ``bootstrap.checkpoint``);
#: clusters started before keep theirs.
BOOTSTRAP_FEATURES: dict[str, int] = {"metadata.version": METADATA_VERSION_LEVEL, "group.version": 1,
                                      "transaction.version": 2, "share.version": 1, "streams.version": 1}
#: Feature ranges this node supports (registered with the broker, checked by :meth:`update_features`).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "metadata.version": (MINIMUM_METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    "group.version": (0, 1),
    "transaction.version": (0, 2),
    "share.version": (0, 1),
    "streams.version": (0, 1),
}

#: Feature levels ``kbroker-storage format --feature`` may bootstrap instead of ``BOOTSTRAP_FEATURES``.
FORMAT_FEATURES: dict[str, frozenset[int]] = {"transaction.version": frozenset({0, 1, 2}),
                                               "share.version": frozenset({0, 1}),
                                               "streams.version": frozenset({0, 1})}

#: Producer ids handed out per AllocateProducerIds call (Kafka's block size).
PRODUCER_ID_BLOCK_SIZE = 1000
_LONG_MAX = 2**63 - 1

#: Records per metadata batch; larger writes span several batches inside a metadata transaction.
MAX_RECORDS_PER_BATCH = 10_000
_MAX_METADATA_BATCH_BYTES = 8 * 1024 * 1024
_READ_CHUNK_BYTES = 8 * 1024 * 1024

_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249

# Control record key of a LEADER_CHANGE batch: int16 version 0, int16 type 2.
_LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)


PARTITION_CHANGES_PER_BATCH = 50
"""PartitionChangeRecords per metadata batch when a broker's fencing, shutdown or return moves many partitions."""
MAX_PREFERRED_ELECTIONS_PER_CHECK = 1000
"""Partitions whose leadership one automatic leader balancing moves at most (Kafka's controller has the same
bound); the next check does the rest."""


class MetadataStorageError(RuntimeError):
    """The metadata directories are inconsistent with each other or with the configuration."""


# ---- request / result types ------------------------------------------------------------------------

@dataclass
class CreateTopicSpec:
    """One topic of a CreateTopics request.

    ``num_partitions`` / ``replication_factor`` of -1 mean the broker defaults (``num.partitions``,
    ``default.replication.factor``); with ``assignments`` (partition -> broker ids) both must be -1.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] | None = None
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class CreateTopicResult:
    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    topic_id: bytes = ZERO_UUID  # zero for errors and for validate_only
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)  # the topic's config overrides


@dataclass
class DeleteTopicResult:
    name: str | None
    topic_id: bytes
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


MetadataListener = Callable[[MetadataImage, MetadataImage, MetadataChanges], None]


MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's bound on the partitions one CreateTopics / CreatePartitions request may create (POLICY_VIOLATION)."""
EXCESSIVE_BATCH_MESSAGE = "Unable to perform excessively large batch operation."

METADATA_TOPIC_NAME = "__cluster_metadata"
"""The metadata log's topic: never a user topic (not created, not auto-created, not deleted)."""


def validate_topic_name(name: str) -> str | None:
    """Kafka's topic name rules; returns the reason the name is illegal, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
                "'.', '_' and '-'")
    return None


def _collision_key(name: str) -> str:
    # '.' and '_' collide in metric names, so Kafka refuses topics that differ only by them.
    return name.replace(".", "_")


# ---- the controller ---------------------------------------------------------------------------------

class QuorumController:
    """Single-node metadata controller. See the module docstring for the storage layout and write path."""

    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        #: set by the broker: an I/O error in the metadata log takes its directory offline (and the broker down)
        self.failure_channel: Any = None
        self.clock = clock
        self.node_id = config.node_id
        self.metadata_dir = Path(config.metadata_log_dir)
        self.partition_dir = self.metadata_dir / METADATA_PARTITION_DIR
        self.cluster_id: str = ""
        self.directory_ids: dict[Path, bytes] = {}
        self.leader_epoch = -1
        self.incarnation_id = random_uuid()
        self._log: Any = None
        self._image: MetadataImage | None = None
        self._listeners: list[MetadataListener] = []
        self._lock = threading.RLock()
        self._started = False
        #: KRaft with other nodes (``controller.quorum.voters`` names nodes besides this one, or this node is a
        #: controller only, so its brokers are elsewhere and follow it over Raft): writes go through the Raft
        #: quorum (kbroker/server/metadata_quorum.py sets ``raft_append``) and readers see only what the quorum
        #: committed (``apply_committed``); planning sees the leader's appended, uncommitted writes. A combined
        #: node that is its only voter (the embedded default) is a quorum of one without Raft.
        self.quorum_voters = parse_quorum_voters(config.get("controller.quorum.voters"))
        #: ``controller.quorum.bootstrap.servers`` (KIP-853): a dynamic quorum, whose voters are in the metadata
        #: log (written by ``kbroker-storage format --standalone / --initial-controllers``, then changed by
        #: AddRaftVoter / RemoveRaftVoter); these are where a node with no voters in its log asks first
        self.bootstrap_servers = parse_bootstrap_servers(config.get("controller.quorum.bootstrap.servers"))
        self.raft_mode = (bool(self.quorum_voters) and (
            set(self.quorum_voters) != {self.node_id} or "broker" not in config.process_roles)) or (
            not self.quorum_voters and bool(self.bootstrap_servers))
        self._committed: MetadataImage | None = None
        self._active = False
        #: the active controller's view of broker liveness: node id -> last heartbeat (ms, the caller's clock)
        self._heartbeats: dict[int, int] = {}
        self.raft_append: Callable[[list[bytes]], int] | None = None
        self.raft_end_offset: Callable[[], int] | None = None
        #: the offset of the last record this controller appended (raft mode): a write is durable once committed
        self.last_appended_offset = -1
        #: snapshots of the metadata log (``<end offset>-<epoch>.checkpoint`` in the partition directory, KIP-630)
        self.snapshots: SnapshotStore | None = None
        #: the end offset of the snapshot the committed image was loaded from at start (0: none)
        self.loaded_snapshot_end = 0
        self.snapshot_max_bytes = config.get_int("metadata.log.max.record.bytes.between.snapshots")
        self.snapshot_interval_ms = config.get_int("metadata.log.max.snapshot.interval.ms")
        self.retention_bytes = config.get_int("metadata.max.retention.bytes")
        self.retention_ms = config.get_int("metadata.max.retention.ms")
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = 0
        #: records of ``bootstrap.checkpoint`` besides the feature levels (``format --add-scram``), read at start
        #: while the metadata log is still empty (kbroker.controller.bootstrap)
        self._bootstrap_extra: list[Any] = []
        self._bootstrap_features: dict[str, int] = {}

    # ---- public state ----
    @property
    def image(self) -> MetadataImage:
        """The current (committed) metadata image."""
        if self.raft_mode:
            if self._committed is None:
                raise RuntimeError("QuorumController.startup() has not run")
            return self._committed
        if self._image is None:
            raise RuntimeError("QuorumController.startup() has not run")
        return self._image

    @property
    def latest_image(self) -> MetadataImage:
        """The image the next write is planned on: the committed image plus this leader's appended writes."""
        if self._image is None:
            raise RuntimeError("QuorumController.startup() has not run")
        return self._image

    @property
    def is_active(self) -> bool:
        """True while this node is the active controller: always once started for a quorum of one; with other
        voters, while it leads the Raft quorum and has applied everything committed before its epoch."""
        if self.raft_mode:
            return self._started and self._active
        return self._started

    def add_listener(self, callback: MetadataListener) -> None:
        """Call ``callback(old_image, new_image, changes)`` after every committed write."""
        self._listeners.append(callback)

    def remove_listener(self, callback: MetadataListener) -> None:
        self._listeners.remove(callback)

    @staticmethod
    def is_internal(name: str) -> bool:
        return is_internal(name)

    # ---- lifecycle ----
    def startup(self) -> None:
        with self._lock:
            if self._started:
                return
            self._ensure_meta_properties()
            self._open_log()
            if self.raft_mode:
                # Only the latest snapshot (committed records only) is applied until the quorum says what else is
                # committed (apply_committed).
                loaded = self._load_latest_snapshot()
                self._image = self._committed = loaded[0] if loaded else MetadataImage.empty(self.cluster_id)
                self.loaded_snapshot_end = loaded[1][0] if loaded else 0
                self._read_bootstrap_file()
                self._started = True
                log.info("metadata controller opened the log for the quorum %s: cluster %s, node %d",
                         sorted(self.quorum_voters), self.cluster_id, self.node_id)
                return
            image, last_epoch, open_txn = self._replay_log()
            self._image = image
            # Bootstrap until the records are committed (also covers a crash during the first start).
            first_start = "metadata.version" not in image.features
            if first_start:
                held = [f"{d}: {what}" for d in self.config.log_dirs if (what := _partitions_in(Path(d)))]
                if held:
                    raise MetadataStorageError(
                        f"the metadata log in {self.partition_dir} is empty, but the log directories hold partitions "
                        f"({'; '.join(held)}): kbroker will not start a new cluster metadata over existing data; "
                        f"restore the metadata directory from a backup")
                self._read_bootstrap_file()
            self._elect_self(last_epoch)
            self._started = True
            if open_txn:
                # A multi-batch write was cut short (crash): abort it as Kafka's new leaders do.
                self._commit([AbortTransactionRecord(reason="metadata transaction was not completed")])
            if first_start:
                self._commit(self.bootstrap_records())
            if "broker" in self.config.process_roles:
                self.register_broker()
            log.info("metadata controller ready: cluster %s, node %d, epoch %d, metadata offset %d",
                     self.cluster_id, self.node_id, self.leader_epoch, self.latest_image.offset)

    def _read_bootstrap_file(self) -> None:
        """Keep the non-feature records of ``bootstrap.checkpoint`` for :meth:`bootstrap_records` while the
        metadata log has not been bootstrapped; a damaged file stops the start (MetadataStorageError)."""
        if "metadata.version" in self.latest_image.features or "controller" not in self.config.process_roles:
            return
        try:
            found = read_bootstrap_file(self.metadata_dir) or []
        except BootstrapError as exc:
            raise MetadataStorageError(str(exc)) from None
        self._bootstrap_extra = [r for r in found if not isinstance(r, FeatureLevelRecord)]
        # only the levels ``format --feature`` may choose come from the file (an older file holds no
        # transaction.version: the default applies)
        self._bootstrap_features = {r.name: r.feature_level for r in found if isinstance(r, FeatureLevelRecord)
                                    and r.name in FORMAT_FEATURES and r.feature_level in FORMAT_FEATURES[r.name]}

    def bootstrap_records(self) -> list[Any]:
        """The records that bootstrap a new cluster's metadata (kbroker.controller.bootstrap): a FeatureLevelRecord
        per ``BOOTSTRAP_FEATURES`` entry (the level ``kbroker-storage format --feature`` chose, when it did; a level
        0 is not written (not finalized), as Kafka's bootstrap leaves it out), the cluster-level
        ``min.insync.replicas`` ConfigRecord (BROKER resource ``""``, the static value) that every new Kafka 4.1+
        cluster gets, then the SCRAM credentials of ``kbroker-storage format --add-scram``.

        Kafka writes that ConfigRecord because its new clusters have eligible leader replicas on (KIP-966,
        ``eligible.leader.replicas.version`` 1 from 4.1-IV0, Kafka's ActivationRecordsGenerator /
        :func:`~kbroker.controller.feature_control.elr_safety_records`). kbroker has no ELR but writes it the same,
        so a new cluster looks as a Kafka 4.1+ one does: DescribeConfigs reports ``min.insync.replicas`` with source
        DYNAMIC_DEFAULT_BROKER_CONFIG, and a later edit of ``server.properties`` does not change it
        (``kbroker-configs --entity-type brokers --entity-default --alter`` does)."""
        features = {**BOOTSTRAP_FEATURES, **self._bootstrap_features}
        records: list[Any] = [FeatureLevelRecord(name=n, feature_level=lvl) for n, lvl in features.items() if lvl > 0]
        records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="min.insync.replicas",
                                    value=str(self._static_min_insync_replicas())))
        return [*records, *self._bootstrap_extra]

    def _static_min_insync_replicas(self) -> int:
        """``min.insync.replicas`` of ``server.properties`` (Kafka's default 1)."""
        try:
            return self.config.get_int("min.insync.replicas")
        except (KeyError, ValueError):
            return 1

    def shutdown(self) -> None:
        with self._lock:
            if self._log is not None:
                try:
                    self._log.flush()
                finally:
                    self._log.close()
                    self._log = None
            self._started = False

    # ---- format / meta.properties ----
    def _all_dirs(self) -> list[Path]:
        dirs: list[Path] = []
        for d in [*self.config.log_dirs, self.metadata_dir]:
            d = Path(d)
            if all(os.path.abspath(d) != os.path.abspath(x) for x in dirs):
                dirs.append(d)
        return dirs

    def _ensure_meta_properties(self) -> None:
        dirs = self._all_dirs()
        found: dict[Path, dict[str, str]] = {}
        for d in dirs:
            p = d / META_PROPERTIES
            if p.exists():
                try:
                    found[d] = parse_properties(p.read_text(encoding="utf-8"))
                except (UnicodeDecodeError, OSError, ConfigException) as exc:
                    raise MetadataStorageError(
                        f"{p} cannot be read ({type(exc).__name__}: {exc}): restore it from a backup (it names the "
                        f"cluster, this node and the directory)") from None
            else:
                held = _data_in(d)
                if held:
                    raise MetadataStorageError(
                        f"{p} is missing, but {d} holds data ({held}): restore meta.properties (from a backup, or "
                        f"copy it from another log directory of this node with a new directory.id), or move the "
                        f"data away to start empty")
        configured = self.config.get("cluster.id").strip()
        cluster_ids = {props.get("cluster.id", "") for props in found.values()}
        for d, props in found.items():
            for key in ("version", "cluster.id", "node.id"):
                if not props.get(key):
                    raise MetadataStorageError(
                        f"{d / META_PROPERTIES} has no {key} (the file is damaged): restore it from a backup, or copy "
                        f"it from another log directory of this node with a new directory.id")
            if props.get("version") != "1":
                raise MetadataStorageError(f"{d / META_PROPERTIES}: unsupported version {props.get('version')!r} "
                                           "(only version=1, KRaft, is supported)")
            if props.get("node.id") != str(self.node_id):
                raise MetadataStorageError(f"{d / META_PROPERTIES}: stored node.id {props.get('node.id')} does not "
                                           f"match configured node.id {self.node_id}")
        if len(cluster_ids) > 1:
            raise MetadataStorageError(f"log directories belong to different clusters: {sorted(cluster_ids)}")
        if cluster_ids:
            stored = cluster_ids.pop()
            if not stored:
                raise MetadataStorageError("meta.properties without cluster.id")
            if configured and configured != stored:
                raise MetadataStorageError(f"configured cluster.id {configured} does not match stored cluster.id "
                                           f"{stored}")
            self.cluster_id = stored
        else:
            if not configured and self._quorum_has_other_nodes():
                quorum = ("controller.quorum.voters " + self.config.get("controller.quorum.voters").strip()
                          if self.quorum_voters else
                          "controller.quorum.bootstrap.servers "
                          + self.config.get("controller.quorum.bootstrap.servers").strip())
                raise MetadataStorageError(
                    f"no cluster.id and unformatted storage, but this node's quorum ({quorum}) has other nodes, which "
                    f"would each make up a different cluster id: set cluster.id, the same on every node, or format "
                    f"every node with `kbroker-storage format -t ID -c FILE` (one ID for all, e.g. from "
                    f"`kbroker-storage random-uuid`)")
            self.cluster_id = configured or uuid_to_str(random_uuid())
        seen: set[bytes] = set()
        for d in dirs:
            props = found.get(d)
            dir_id: bytes | None = None
            if props is not None and props.get("directory.id"):
                try:
                    dir_id = uuid_from_str(props["directory.id"])
                except ValueError:
                    raise MetadataStorageError(f"{d / META_PROPERTIES}: invalid directory.id") from None
                if dir_id in seen:
                    raise MetadataStorageError(f"duplicate directory.id {props['directory.id']} in {d}")
            if props is None or dir_id is None:
                dir_id = random_uuid()
                while dir_id in seen:
                    dir_id = random_uuid()
                self._write_meta_properties(d, dir_id)
            seen.add(dir_id)
            self.directory_ids[d] = dir_id

    def _quorum_has_other_nodes(self) -> bool:
        """Whether this node's cluster has (or may have) nodes besides this one: several voters or bootstrap
        servers, or a quorum this node is not the one voter of. Such a node cannot make up a cluster id alone (the
        others would make up different ones and refuse each other's Raft and registration requests with
        INCONSISTENT_CLUSTER_ID)."""
        if len(self.quorum_voters) > 1 or len(self.bootstrap_servers) > 1:
            return True
        if "controller" not in self.config.process_roles:
            return bool(self.quorum_voters or self.bootstrap_servers)
        return bool(self.quorum_voters) and self.node_id not in self.quorum_voters

    def _write_meta_properties(self, d: Path, dir_id: bytes) -> None:
        d.mkdir(parents=True, exist_ok=True)
        props = {"cluster.id": self.cluster_id, "directory.id": uuid_to_str(dir_id),
                 "node.id": str(self.node_id), "version": "1"}
        text = "#\n#" + time.strftime("%a %b %d %H:%M:%S %Z %Y") + "\n"
        text += "".join(f"{k}={v}\n" for k, v in props.items())
        _write_file_durably(d / META_PROPERTIES, text.encode())
        log.info("formatted %s (cluster %s, node %d)", d, self.cluster_id, self.node_id)

    # ---- the metadata log ----
    def _metadata_log_config(self) -> Any:
        from kbroker.storage.config import LogConfig

        props = {
            "segment.bytes": self.config.get("metadata.log.segment.bytes") or "1073741824",
            "segment.ms": self.config.get("metadata.log.segment.ms") or "604800000",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "max.message.bytes": str(_MAX_METADATA_BATCH_BYTES),
            "cleanup.policy": "delete",
            # the metadata log is written by this controller only: no producer timestamp checks
            "message.timestamp.after.max.ms": str(_LONG_MAX),
        }
        return LogConfig.from_props(props)

    def _open_log(self) -> None:
        from kbroker.storage.log import PartitionLog

        self.partition_dir.mkdir(parents=True, exist_ok=True)
        _check_metadata_log(self.partition_dir)
        # Always recover from the start: the metadata log is small and every batch is CRC-checked, so a
        # torn tail left by a crash is truncated before replay.
        from kbroker.controller.raft.partition_log import open_metadata_log_start

        self.snapshots = SnapshotStore(self.partition_dir)
        self._log = PartitionLog(self.partition_dir, self._metadata_log_config(), topic_id=METADATA_TOPIC_ID,
                                 recovery_point=0, clean_shutdown=False, high_watermark=None,
                                 failure_channel=self.failure_channel)
        open_metadata_log_start(self.snapshots, self._log)
        self._last_snapshot_ms = self._now_ms()

    # ---- snapshots (KIP-630) ----
    def _load_latest_snapshot(self) -> tuple[MetadataImage, tuple[int, int]] | None:
        """The image of the latest snapshot and its id ``(end offset, epoch)``, or None. Raises MetadataStorageError for a damaged
        snapshot (snapshots are written whole and renamed into place: damage is no crash's doing)."""
        assert self.snapshots is not None
        latest = self.snapshots.latest()
        if latest is None:
            return None
        return self._read_snapshot(latest), latest

    def _read_snapshot(self, snapshot_id: tuple[int, int]) -> MetadataImage:
        assert self.snapshots is not None
        path = self.snapshots.path(snapshot_id)
        try:
            return load_image(self.cluster_id, decode_snapshot(self.snapshots.read(snapshot_id)), snapshot_id[0])
        except (SnapshotError, MetadataReplayError) as exc:
            raise MetadataStorageError(f"{path} is damaged ({exc}): restore {self.partition_dir} from a backup, or "
                                       f"(in a cluster) empty it so that this node fetches the metadata again")

    def snapshot_bytes(self, epoch: int, image: MetadataImage | None = None, last_contained_ms: int = -1,
                       voters: Any = None) -> bytes:
        """The committed image (or ``image``) as the content of a snapshot of ``epoch`` (Kafka's format);
        ``last_contained_ms``: the append time of the last record it holds (default: now); ``voters``: the voter
        set in force at the snapshot when the log names one (KIP-853)."""
        img = self.image if image is None else image
        now = self._now_ms()
        return encode_snapshot([encode_metadata_record(r) for r in image_records(img)], epoch,
                               now if last_contained_ms < 0 else last_contained_ms, now, voters=voters)

    def snapshot_due(self, appended_bytes: int) -> bool:
        """Count ``appended_bytes`` of committed metadata records; True when a snapshot is due:
        ``metadata.log.max.record.bytes.between.snapshots`` bytes since the last one, or
        ``metadata.log.max.snapshot.interval.ms`` elapsed with new records (0 disables the time rule)."""
        self._bytes_since_snapshot += appended_bytes
        if self._bytes_since_snapshot <= 0:
            return False
        if self._bytes_since_snapshot >= self.snapshot_max_bytes:
            return True
        return self.snapshot_interval_ms > 0 and self._now_ms() - self._last_snapshot_ms >= self.snapshot_interval_ms

    def snapshot_written(self) -> None:
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self._now_ms()

    def log_over_retention(self) -> bool:
        """``metadata.max.retention.bytes`` / ``.ms`` exceeded: the log below the latest snapshot may go."""
        lg = self._log
        if lg is None:
            return False
        if self.retention_bytes >= 0 and lg.size_in_bytes > self.retention_bytes:
            return True
        if self.retention_ms >= 0 and len(lg.segments) > 1:
            return self._now_ms() - lg.segments[0].largest_timestamp > self.retention_ms
        return False

    def load_snapshot(self, snapshot_id: tuple[int, int]) -> None:
        """Raft mode: this replica replaced its log by a snapshot fetched from the leader; the committed image
        becomes the snapshot's, and the listeners hear of every difference."""
        new = self._read_snapshot(snapshot_id)
        with self._lock:
            old = self.image
            self._committed = new
            if not self._active:
                self._image = new
            changes = diff_images(old, new)
        log.info("metadata image loaded from snapshot %s (end offset %d, epoch %d)",
                 self.snapshots.path(snapshot_id).name if self.snapshots else "", *snapshot_id)
        for cb in list(self._listeners):
            try:
                cb(old, new, changes)
            except Exception:
                log.exception("metadata listener %r failed", cb)

    def _maybe_snapshot_single(self, appended_bytes: int) -> None:
        """Quorum of one: everything in the log is committed; snapshot it when due and clean the log up."""
        if not self.snapshot_due(appended_bytes) or self.snapshots is None:
            return
        from kbroker.controller.raft.partition_log import delete_log_before_snapshot

        end = self._log.log_end_offset
        self.snapshots.write(end, self.leader_epoch, self.snapshot_bytes(self.leader_epoch, self._image))
        self.snapshot_written()
        if self.log_over_retention():
            delete_log_before_snapshot(self._log, self.snapshots, (end, self.leader_epoch), self._now_ms())

    def _read_batches(self, start: int = 0) -> Iterable[Any]:
        from kbroker.protocol.records import iter_batches

        pos = max(self._log.log_start_offset, start)
        end = self._log.log_end_offset
        while pos < end:
            info = self._log.read(pos, _READ_CHUNK_BYTES, end)
            data = b"".join(bytes(region.read_bytes()) for region in info.regions)
            if not data:
                raise MetadataStorageError(f"metadata log read at offset {pos} returned nothing (end {end})")
            advanced = False
            for batch in iter_batches(data):
                if batch.next_offset <= pos:
                    continue
                yield batch
                pos = batch.next_offset
                advanced = True
            if not advanced:
                raise MetadataStorageError(f"metadata log does not advance at offset {pos}")

    def _replay_log(self) -> tuple[MetadataImage, int, bool]:
        """Replay the latest snapshot and the metadata log after it -> (image, highest batch epoch, log ends inside
        a transaction)."""
        loaded = self._load_latest_snapshot()
        delta = MetadataDelta(loaded[0] if loaded else MetadataImage.empty(self.cluster_id))
        pending: list[tuple[Any, int]] | None = None
        last_epoch = loaded[1][1] if loaded else -1
        for batch in self._read_batches(loaded[1][0] if loaded else 0):
            last_epoch = max(last_epoch, batch.partition_leader_epoch)
            if batch.is_control:
                if pending is None:
                    delta.advance_offset(batch.last_offset)
                continue
            for rec in batch.records():
                try:
                    msg = decode_metadata_record(rec.value)
                except MetadataRecordError as exc:
                    # e.g. a record type or version that a newer Kafka wrote: replaying past it would build a
                    # different cluster than the one that wrote the log, so kbroker refuses to go on
                    raise MetadataStorageError(f"cannot replay the metadata log {self.partition_dir} at offset "
                                               f"{rec.offset}: {exc}") from exc
                if isinstance(msg, BeginTransactionRecord):
                    if pending is not None:
                        log.warning("metadata transaction at offset %d begins inside another; dropping the "
                                    "earlier one", rec.offset)
                    pending = [(msg, rec.offset)]
                elif isinstance(msg, EndTransactionRecord):
                    for m, off in pending or ():
                        delta.replay(m, off)
                    delta.replay(msg, rec.offset)
                    pending = None
                elif isinstance(msg, AbortTransactionRecord):
                    pending = None
                    delta.replay(msg, rec.offset)
                elif pending is not None:
                    pending.append((msg, rec.offset))
                else:
                    delta.replay(msg, rec.offset)
        return delta.apply(), last_epoch, pending is not None

    # ---- election (quorum of one) ----
    def _quorum_state_path(self) -> Path:
        return self.partition_dir / QUORUM_STATE_FILE

    def _read_quorum_state(self) -> dict[str, Any]:
        p = self._quorum_state_path()
        if not p.exists():
            return {}
        try:
            state = json.loads(p.read_text("utf-8"))
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
            int(state.get("leaderEpoch", 0))
            return state
        except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
            # A quorum of one: every epoch opened a LeaderChange batch in the log, so the log's last epoch is at
            # least the stored one, and the next election takes the one after it. Nothing else is lost.
            log.warning("%s is damaged (%s); rebuilding it from the metadata log (this node is the only voter)",
                        p, " ".join(str(exc).split())[:120])
            return {}

    def _elect_self(self, last_log_epoch: int) -> None:
        """Become leader in a new epoch: persist the election, then open the epoch in the log."""
        state = self._read_quorum_state()
        stored_cluster = state.get("clusterId")
        if stored_cluster and stored_cluster != self.cluster_id:
            raise MetadataStorageError(f"quorum-state belongs to cluster {stored_cluster}, not {self.cluster_id}")
        self.leader_epoch = max(int(state.get("leaderEpoch", 0)), last_log_epoch, 0) + 1
        voters = [{"voterId": self.node_id}]
        new_state = {"clusterId": self.cluster_id, "leaderId": self.node_id, "leaderEpoch": self.leader_epoch,
                     "votedId": -1, "appliedOffset": 0, "currentVoters": voters, "data_version": 0}
        _write_file_durably(self._quorum_state_path(), (json.dumps(new_state, separators=(",", ":"))).encode())
        self._append_leader_change()

    def _append_leader_change(self) -> None:
        from kbroker.protocol.records import build_batch

        msg = LeaderChangeMessage(version=0, leader_id=self.node_id,
                                  voters=[LeaderChangeMessage.Voter(voter_id=self.node_id)],
                                  granting_voters=[LeaderChangeMessage.Voter(voter_id=self.node_id)])
        now = self._now_ms()
        batch = build_batch([(_LEADER_CHANGE_KEY, codec.encode(msg, 0), [], now)],
                            base_offset=self._log.log_end_offset, partition_leader_epoch=self.leader_epoch,
                            is_control=True)
        self._log.append_as_leader(batch, self.leader_epoch, now)
        self._log.flush()
        if self._image is not None:
            delta = MetadataDelta(self._image)
            delta.advance_offset(self._log.log_end_offset - 1)
            self._image = delta.apply()

    # ---- the write path ----
    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _commit(self, records: Sequence[Any]) -> MetadataImage:
        """Append ``records`` atomically, flush, replay them into a new image and publish it."""
        from kbroker.protocol.records import build_batch

        if not records:
            return self.latest_image
        if not self._started or self._log is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "the metadata controller is not running")
        if self.raft_mode:
            return self._append_to_quorum(list(records))
        records = list(records)
        values = [encode_metadata_record(r) for r in records]
        chunks = _chunk(values)
        if len(chunks) > 1:  # several batches: bracket them so readers apply all or nothing
            records = [BeginTransactionRecord(name="kbroker"), *records, EndTransactionRecord()]
            values = [encode_metadata_record(records[0]), *values, encode_metadata_record(records[-1])]
            chunks = _chunk(values)
        base = self._log.log_end_offset
        old = self.latest_image
        delta = MetadataDelta(old)
        for i, rec in enumerate(records):
            delta.replay(rec, base + i)  # raises before anything is written if a record cannot apply
        new_image = delta.apply()
        changes = delta.changes()
        now = self._now_ms()
        batches = []
        offset = base
        for chunk in chunks:
            batches.append(build_batch([(None, v, [], now) for v in chunk], base_offset=offset,
                                       partition_leader_epoch=self.leader_epoch))
            offset += len(chunk)
        # One append call: the log validates every batch before writing any, then writes them together.
        self._log.append_as_leader(b"".join(batches), self.leader_epoch, now)
        self._log.flush()
        self._log.high_watermark = self._log.log_end_offset  # a quorum of one commits on its own fsync
        if self._log.log_end_offset != base + len(records):
            raise MetadataStorageError(f"metadata log end {self._log.log_end_offset} != expected "
                                       f"{base + len(records)}")
        self._image = new_image
        try:
            self._maybe_snapshot_single(sum(len(b) for b in batches))
        except OSError as exc:  # the write is committed; a snapshot can wait for the next one
            log.warning("writing a metadata snapshot failed: %s", exc)
        for cb in list(self._listeners):
            try:
                cb(old, new_image, changes)
            except Exception:  # a listener's bug must not undo a committed write
                log.exception("metadata listener %r failed", cb)
        return new_image

    # ---- the metadata quorum (raft mode) ----
    def _append_to_quorum(self, records: list[Any]) -> MetadataImage:
        """Append ``records`` as one batch to the Raft log (atomic: one batch is committed whole or not at all)
        and return the image planned with them; listeners hear of them when the quorum commits them. Raises
        ``KafkaError(NOT_CONTROLLER)`` when this node is not (or no longer) the Raft leader."""
        if not self._active or self.raft_append is None or self.raft_end_offset is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
        base = self.raft_end_offset()
        delta = MetadataDelta(self.latest_image)
        for i, rec in enumerate(records):
            delta.replay(rec, base + i)  # raises before anything is written if a record cannot apply
        new_image = delta.apply()
        try:
            last = self.raft_append([encode_metadata_record(r) for r in records])
        except NotLeaderError as exc:
            # the Raft leadership went (a higher epoch, a resignation) before the quorum told this controller to
            # renounce: the request is answered NOT_CONTROLLER and the sender asks the new controller
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} lost the leadership: {exc}") from None
        if last != base + len(records) - 1:
            raise MetadataStorageError(f"metadata records appended up to {last}, expected {base + len(records) - 1}")
        self._image = new_image
        self.last_appended_offset = last
        return new_image

    def apply_committed(self, batches: Iterable[Any]) -> None:
        """Replay committed record batches (``RecordBatch`` views, in offset order) into the committed image and
        tell the listeners. A standby or broker's view follows the committed image."""
        with self._lock:
            old = self.image
            delta = MetadataDelta(old)
            moved = False
            for batch in batches:
                moved = True
                if batch.is_control:
                    delta.advance_offset(batch.last_offset)
                    continue
                for rec in batch.records():
                    delta.replay(decode_metadata_record(rec.value), rec.offset)
            if not moved:
                return
            new = delta.apply()
            self._committed = new
            if not self._active:
                self._image = new
            changes = delta.changes()
        for cb in list(self._listeners):
            try:
                cb(old, new, changes)
            except Exception:  # a listener's bug must not stop the replay
                log.exception("metadata listener %r failed", cb)

    def activate(self, epoch: int) -> None:
        """This node leads the quorum in ``epoch`` and has applied every record committed before it."""
        with self._lock:
            self.leader_epoch = epoch
            self._image = self.image
            self._active = True
            self._heartbeats = {}  # every broker gets a full session from now
            log.info("node %d is the active controller in epoch %d (metadata offset %d)", self.node_id, epoch,
                     self.image.offset)

    def renounce(self) -> None:
        """Leadership lost: forget the writes that were appended but not committed."""
        with self._lock:
            if self._active:
                log.info("node %d is no longer the active controller", self.node_id)
            self._active = False
            self._image = self.image

    # ---- broker heartbeats and fencing (raft mode) ----
    def broker_heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        """A broker's heartbeat reached the active controller; returns whether it is (still) fenced. A fenced
        broker is unfenced by its heartbeat (Kafka waits until it has caught up with the metadata; a kbroker
        broker registers only once caught up) and gets back the leadership of partitions that had none.
        Raises ``KafkaError``: NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH."""
        with self._lock:
            if not self.is_active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
            reg = self._registration(broker_id, broker_epoch)
            self._heartbeats[broker_id] = now_ms
            if reg.fenced:
                self._commit([UnfenceBrokerRecord(id=broker_id, epoch=broker_epoch),
                              *self._leaders_for_unfenced(broker_id)])
            return False

    def _registration(self, broker_id: int, broker_epoch: int) -> Any:
        """The broker's registration in the latest image, checked against the epoch its request carries.
        Raises ``KafkaError``: BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH."""
        reg = self.latest_image.brokers.get(broker_id)
        if reg is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
        if reg.broker_epoch != broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                             f"broker {broker_id} is registered with epoch {reg.broker_epoch}, not {broker_epoch}")
        return reg

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> bool:
        """A broker asked to shut down (BrokerHeartbeat ``want_shut_down``, or this node stopping): fence it and
        move the leadership of its partitions to another live in-sync replica (none left: the partition has no
        leader until the broker is back), so clients move on before it goes away. Returns whether anything was
        appended (to be committed). Raises ``KafkaError``: NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED,
        STALE_BROKER_EPOCH."""
        with self._lock:
            if not self.is_active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
            reg = self._registration(broker_id, broker_epoch)
            if reg.fenced:
                return False
            log.info("broker %d is shutting down: fencing it and moving its leaderships", broker_id)
            self._commit_partition_changes([FenceBrokerRecord(id=broker_id, epoch=broker_epoch)],
                                           self._leaders_without(broker_id))
            self._heartbeats.pop(broker_id, None)
            return True

    def unregister_broker(self, broker_id: int) -> None:
        """Remove a broker's registration (UnregisterBroker, ``kbroker-cluster unregister``): an
        UnregisterBrokerRecord, and the leadership of its partitions moved to another live in-sync replica (none:
        leader -1). Meant for a broker that is gone for good; a live one registers again at its next heartbeat.
        Raises ``KafkaError``: NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED."""
        with self._lock:
            if self.raft_mode and not self.is_active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
            reg = self.latest_image.brokers.get(broker_id)
            if reg is None:
                raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not registered.")
            log.info("unregistering broker %d", broker_id)
            self._commit_partition_changes(
                [UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.broker_epoch)],
                self._leaders_without(broker_id))
            self._heartbeats.pop(broker_id, None)

    def extend_broker_sessions(self, stalled_ms: int, now_ms: int) -> None:
        """This controller could not run for ``stalled_ms`` (until ``now_ms``, the clock of
        :meth:`broker_heartbeat`): the brokers' heartbeats of that time wait unread in its sockets, so the time
        does not count against their sessions (Kafka's controller tracks contact times as heartbeats arrive and
        checks sessions behind the queued heartbeats). Every session is extended by the stall, never past
        ``now_ms``."""
        with self._lock:
            for broker_id, last in self._heartbeats.items():
                self._heartbeats[broker_id] = min(last + stalled_ms, now_ms)

    def fence_stale_brokers(self, now_ms: int, session_timeout_ms: int) -> list[int]:
        """On the active controller: fence every unfenced broker (other than this node) whose last heartbeat is
        older than ``session_timeout_ms`` (``broker.session.timeout.ms``), and move the leadership of its
        partitions to another live in-sync replica, or to none (-1: the partition is offline until the broker
        comes back). Returns the fenced ids."""
        fenced = []
        with self._lock:
            if not self.is_active:
                return fenced
            for b in self.latest_image.live_brokers():
                if b.node_id == self.node_id:
                    continue  # the active controller's own liveness is its leadership
                last = self._heartbeats.setdefault(b.node_id, now_ms)
                if now_ms - last <= session_timeout_ms:
                    continue
                log.info("fencing broker %d: no heartbeat for %d ms", b.node_id, now_ms - last)
                self._commit_partition_changes([FenceBrokerRecord(id=b.node_id, epoch=b.broker_epoch)],
                                               self._leaders_without(b.node_id))
                fenced.append(b.node_id)
        return fenced

    def balance_partition_leaders(self, limit: int = MAX_PREFERRED_ELECTIONS_PER_CHECK) -> int:
        """``auto.leader.rebalance.enable``, on the active controller: make the preferred (first) replica the
        leader of every partition it does not lead while it is unfenced, not shutting down and in the ISR (up
        to ``limit`` partitions per call; a partition being reassigned is left alone). Kafka's KRaft controller
        does the same every ``leader.imbalance.check.interval.seconds``, whatever the per-broker ratio.
        Returns the number of partitions whose leadership moved."""
        with self._lock:
            if self.raft_mode and not self.is_active:
                return 0
            image = self.latest_image
            eligible = {b.node_id for b in image.live_brokers() if not b.in_controlled_shutdown}
            changes = []
            for topic in image.topics_by_name.values():
                for p in topic.partitions.values():
                    preferred = p.replicas[0] if p.replicas else -1
                    if (p.leader != preferred and preferred in eligible and preferred in p.isr
                            and not p.adding_replicas and not p.removing_replicas):
                        changes.append(PartitionChangeRecord(topic_id=topic.topic_id, partition_id=p.partition_id,
                                                             leader=preferred))
                        if len(changes) >= limit:
                            break
                if len(changes) >= limit:
                    break
            if changes:
                log.info("moving the leadership of %d partitions back to their preferred replicas", len(changes))
                self._commit_partition_changes([], changes)
            return len(changes)

    def _leaders_without(self, broker_id: int, rejoining: bool = False) -> list[PartitionChangeRecord]:
        """Records that take a fenced or departing broker out of every ISR it is in (unless it is the last member:
        Kafka keeps the last in-sync replica so that it can lead again when it is back) and move the leadership
        of its partitions to another live in-sync replica (none: leader -1, the partition is offline).
        ``rejoining``: a new incarnation of the broker registers (it was not shut down cleanly, Kafka's
        ``handleBrokerUncleanShutdown``): where it is the last in-sync replica it leads again, in a new epoch."""
        image = self.latest_image
        live = {b.node_id for b in image.live_brokers()} - {broker_id}
        out = []
        for topic in image.topics_by_name.values():
            for p in topic.partitions.values():
                in_isr = broker_id in p.isr
                if p.leader != broker_id and not in_isr:
                    continue
                isr = [r for r in p.isr if r != broker_id] if in_isr and len(p.isr) > 1 else list(p.isr)
                rec = PartitionChangeRecord(topic_id=topic.topic_id, partition_id=p.partition_id)
                if isr != list(p.isr):
                    rec.isr = isr
                if p.leader == broker_id:
                    rec.leader = next((r for r in isr if r in live), broker_id if rejoining and isr == [broker_id] else -1)
                out.append(complete_reassignment(p, rec, live, self._default_dir))
        return out

    def _commit_partition_changes(self, first: list[Any], changes: list[PartitionChangeRecord]) -> None:
        """Commit ``first`` with as many of ``changes`` as fit one small batch, then the rest in batches of
        :data:`PARTITION_CHANGES_PER_BATCH` (a broker in thousands of ISRs must not make one batch larger than a
        metadata log segment). Every batch is valid on its own; they are not one atomic change."""
        n = PARTITION_CHANGES_PER_BATCH
        self._commit([*first, *changes[:n]])
        for i in range(n, len(changes), n):
            self._commit(changes[i:i + n])

    def alter_partition(self, broker_id: int, broker_epoch: int,
                        changes: Sequence[tuple[bytes, int, int, int, list[int]]]) -> list[tuple[int, Any]]:
        """AlterPartition (KIP-497): a partition leader asks to change its ISR. ``changes`` are (topic id,
        partition, leader epoch, partition epoch, new ISR); returns one (error code, PartitionImage after the
        change or None) per change, in order. The records are appended here and answered once committed.

        Per partition, as Kafka's controller: UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION; INVALID_REQUEST when
        the sender is not the leader or the ISR leaves out the leader or names a non-replica; FENCED_LEADER_EPOCH
        for an older leader epoch, NOT_CONTROLLER for a newer one (this controller is behind);
        INVALID_UPDATE_VERSION when the partition epoch is not the current one (another change came first);
        INELIGIBLE_REPLICA when a new member is fenced or not registered. Raises ``KafkaError``: NOT_CONTROLLER,
        BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH (the whole request)."""
        with self._lock:
            if self.raft_mode and not self.is_active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
            self._registration(broker_id, broker_epoch)
            image = self.latest_image
            live = {b.node_id for b in image.live_brokers()}
            records: list[PartitionChangeRecord] = []
            planned: list[tuple[int, Any]] = []
            for topic_id, partition_id, leader_epoch, partition_epoch, new_isr in changes:
                topic = image.topics_by_id.get(topic_id)
                p = topic.partitions.get(partition_id) if topic is not None else None
                if topic is None:
                    planned.append((ErrorCode.UNKNOWN_TOPIC_ID, None))
                elif p is None:
                    planned.append((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
                elif p.leader != broker_id:
                    planned.append((ErrorCode.INVALID_REQUEST, None))
                elif leader_epoch < p.leader_epoch:
                    planned.append((ErrorCode.FENCED_LEADER_EPOCH, None))
                elif leader_epoch > p.leader_epoch:
                    planned.append((ErrorCode.NOT_CONTROLLER, None))
                elif partition_epoch != p.partition_epoch:
                    planned.append((ErrorCode.INVALID_UPDATE_VERSION, None))
                elif (broker_id not in new_isr or len(set(new_isr)) != len(new_isr)
                      or any(r not in p.replicas for r in new_isr)):
                    planned.append((ErrorCode.INVALID_REQUEST, None))
                elif any(r not in p.isr and (image.brokers.get(r) is None or image.brokers[r].fenced)
                         for r in new_isr):
                    planned.append((ErrorCode.INELIGIBLE_REPLICA, None))
                elif sorted(new_isr) == sorted(p.isr):
                    planned.append((ErrorCode.NONE, p))
                else:
                    # an ISR that now holds every target replica completes a reassignment (KIP-455)
                    records.append(complete_reassignment(
                        p, PartitionChangeRecord(topic_id=topic_id, partition_id=partition_id, isr=list(new_isr)),
                        live, self._default_dir))
                    planned.append((ErrorCode.NONE, (topic_id, partition_id)))
            after = self._commit(records) if records else image
            out: list[tuple[int, Any]] = []
            for code, what in planned:
                if isinstance(what, tuple):
                    what = after.topics_by_id[what[0]].partitions[what[1]]
                out.append((code, what))
            return out

    def _leaders_for_unfenced(self, broker_id: int) -> list[PartitionChangeRecord]:
        """Records that make a broker coming back (unfenced) the leader of every leaderless partition it may lead:
        where it is in the ISR, or, where the ISR is empty, where it is an eligible leader replica (KIP-966: Kafka
        4.1+ empties the ISR of a partition whose last in-sync replica shut down cleanly and keeps that replica in
        ``eligibleLeaderReplicas``; it then leads again alone in the ISR, the ELR cleared, as Kafka elects it)."""
        image = self.latest_image
        out = []
        for topic in image.topics_by_name.values():
            for p in topic.partitions.values():
                if p.leader != -1:
                    continue
                if broker_id in p.isr:
                    out.append(PartitionChangeRecord(topic_id=topic.topic_id, partition_id=p.partition_id,
                                                     leader=broker_id))
                elif not p.isr and broker_id in p.eligible_leader_replicas:
                    out.append(PartitionChangeRecord(topic_id=topic.topic_id, partition_id=p.partition_id,
                                                     leader=broker_id, isr=[broker_id], eligible_leader_replicas=[],
                                                     last_known_elr=[]))
        return out

    # ---- broker registration ----
    def _security_protocol(self, listener: str) -> int:
        """The registration's security protocol code of ``listener`` (``listener.security.protocol.map``)."""
        return _SECURITY_PROTOCOLS.get(self.config.security_protocol(listener), 0)

    def _data_dir_ids(self) -> list[bytes]:
        """Directory ids of the data log directories (``log.dirs``), in configuration order."""
        wanted = {os.path.abspath(d) for d in self.config.log_dirs}
        return [dir_id for d, dir_id in self.directory_ids.items() if os.path.abspath(d) in wanted]

    def local_endpoints(self) -> list[Endpoint]:
        """This node's advertised listeners as registration endpoints."""
        return [Endpoint(l.name, l.host, l.port, self._security_protocol(l.name))
                for l in self.config.advertised_listeners]

    def register_broker(self, endpoints: Sequence[Endpoint] | None = None, *, broker_id: int | None = None,
                        incarnation_id: bytes | None = None, rack: str | None = None,
                        log_dirs: Sequence[bytes] | None = None, now_ms: int | None = None,
                        session_timeout_ms: int = 9000,
                        features: Mapping[str, tuple[int, int]] | None = None) -> BrokerRegistration:
        """(Re-)register a broker (this node by default) and unfence it; returns the registration.

        ``endpoints`` defaults to the configured advertised listeners; the server may call this again once
        its sockets are bound (e.g. with the real ports of listeners configured with port 0). The other
        arguments are those of a BrokerRegistration request from another node (raft mode), with ``now_ms`` (the
        clock of :meth:`broker_heartbeat`) and ``session_timeout_ms``. Raises ``KafkaError``: NOT_CONTROLLER on a
        node that is not the active controller, DUPLICATE_BROKER_REGISTRATION when another incarnation of the
        broker is unfenced and heartbeated within the session timeout.

        ``features``: the broker's supported range per feature (default: this node's :data:`SUPPORTED_FEATURES`),
        recorded in its registration for UpdateFeatures to check; a broker that names features but not a range
        holding every finalized level is refused with UNSUPPORTED_VERSION, as Kafka's controller does (one that
        names none, a kbroker node before features were registered, is let in).
        """
        with self._lock:
            remote = broker_id is not None and broker_id != self.node_id
            if features is None:
                features = SUPPORTED_FEATURES
            elif features:
                for name, level in sorted(self.latest_image.features.items()):
                    lo, hi = features.get(name, (0, 0))
                    if not lo <= level <= hi:
                        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                         f"Unable to register because the broker does not support finalized version "
                                         f"{level} of {name}. The broker wants a version between {lo} and {hi}, "
                                         f"inclusive.")
            if endpoints is None:
                endpoints = self.local_endpoints()
            if not remote:
                broker_id, incarnation_id = self.node_id, self.incarnation_id
                rack = self.config.get("broker.rack").strip() or None
                log_dirs = self._data_dir_ids()
            existing = self.latest_image.brokers.get(broker_id)
            unclean: list[Any] = []
            if existing is not None and existing.incarnation_id != incarnation_id:
                last = self._heartbeats.get(broker_id)
                if (self.raft_mode and remote and not existing.fenced and last is not None and now_ms is not None
                        and now_ms - last <= session_timeout_ms):
                    # another process with this node.id is alive (its session has not expired): Kafka refuses
                    # the newcomer until the old session ends (a restarted broker retries until then)
                    raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                                     f"another incarnation of broker {broker_id} is registered and heartbeating")
                log.info("broker %d registers again (new incarnation)", broker_id)
                if self.raft_mode:
                    # the old incarnation may have died holding leaderships and ISR places whose data the new one
                    # may not have (a wiped directory): out of every ISR, leaderships to other in-sync replicas,
                    # before the new registration, as Kafka does for a broker that did not shut down cleanly
                    unclean = self._leaders_without(broker_id, rejoining=True)
            # Kafka's broker epoch is the registration's offset
            broker_epoch = self.raft_end_offset() if self.raft_mode and self.raft_end_offset else \
                self._log.log_end_offset
            reg = RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=incarnation_id,
                broker_epoch=broker_epoch,
                end_points=[RegisterBrokerRecord.BrokerEndpoint(name=e.listener, host=e.host, port=e.port,
                                                                security_protocol=e.security_protocol)
                            for e in endpoints],
                features=[RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo,
                                                             max_supported_version=hi)
                          for n, (lo, hi) in features.items()],
                rack=rack,
                fenced=True,
                log_dirs=list(log_dirs or []),
                cordoned_log_dirs=[],
            )
            unfence = BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, fenced=-1)
            self._commit_partition_changes([], unclean)
            records: list[Any] = [reg, unfence]
            # a quorum of one never fences itself, but a metadata log written by another controller (Kafka's, which
            # fences a node at its controlled shutdown and leaves its partitions leaderless) may hold it fenced
            records += self._leaders_for_unfenced(broker_id)
            if self.raft_mode:
                self._heartbeats.pop(broker_id, None)
            image = self._commit(records)
            return image.brokers[broker_id]

    # ---- topics ----
    def _default_dir(self, broker_id: int) -> bytes:
        reg = self.latest_image.brokers.get(broker_id)
        if reg is not None and len(reg.log_dirs) == 1:
            return reg.log_dirs[0]
        return ZERO_UUID  # unassigned: the broker picks a directory

    def create_topics(self, topics: Sequence[CreateTopicSpec], validate_only: bool = False) -> list[CreateTopicResult]:
        """Create topics (Kafka's CreateTopics semantics). One result per distinct name, in request order.

        Per topic, in order: duplicate name in the request (INVALID_REQUEST), illegal name
        (INVALID_TOPIC_EXCEPTION), existing topic (TOPIC_ALREADY_EXISTS), name colliding with another
        topic over '.'/'_' (INVALID_TOPIC_EXCEPTION), configs (INVALID_CONFIG), manual assignment with
        counts set (INVALID_REQUEST), assignment problems (INVALID_REPLICA_ASSIGNMENT), partitions
        (INVALID_PARTITIONS), replication factor (INVALID_REPLICATION_FACTOR). Valid topics of the request
        are committed together in one batch; with ``validate_only`` nothing is written.
        """
        with self._lock:
            image = self.latest_image
            counts: dict[str, int] = {}
            for spec in topics:
                counts[spec.name] = counts.get(spec.name, 0) + 1
            results: list[CreateTopicResult] = []
            records: list[Any] = []
            seen: set[str] = set()
            taken = {_collision_key(n): n for n in image.topics_by_name}
            live = image.live_brokers()
            partitions_planned = 0
            for spec in topics:
                if spec.name in seen:
                    continue
                seen.add(spec.name)
                if counts[spec.name] > 1:
                    results.append(CreateTopicResult(spec.name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
                    continue
                wanted = (spec.num_partitions if spec.num_partitions > 0
                          else len(spec.assignments) if spec.assignments else self.config.num_partitions)
                if wanted > MAX_PARTITIONS_PER_REQUEST - partitions_planned:
                    # checked before anything is built: a huge count must not allocate or stall (Kafka's limit)
                    results.append(CreateTopicResult(spec.name, ErrorCode.POLICY_VIOLATION,
                                                     EXCESSIVE_BATCH_MESSAGE))
                    continue
                try:
                    result, topic_records = self._plan_topic(spec, image, taken, live)
                except KafkaError as exc:
                    results.append(CreateTopicResult(spec.name, exc.code, exc.message))
                    continue
                taken[_collision_key(spec.name)] = spec.name
                partitions_planned += wanted
                results.append(result)
                if not validate_only:
                    records.extend(topic_records)
                else:
                    result.topic_id = ZERO_UUID
            if records:
                self._commit(records)
            return results

    def _plan_topic(self, spec: CreateTopicSpec, image: MetadataImage, taken: dict[str, str],
                    live: list[BrokerRegistration]) -> tuple[CreateTopicResult, list[Any]]:
        name = spec.name
        if name == METADATA_TOPIC_NAME:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        why = validate_topic_name(name)
        if why:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
        if name in image.topics_by_name:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = taken.get(_collision_key(name))
        if other is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
        configs = dict(spec.configs or {})
        validate_topic_configs(configs,
                               remote_storage_enabled=self.config.get_bool("remote.log.storage.system.enable"))
        if spec.assignments:
            if spec.num_partitions != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                            "numPartitions was not set to -1.")
            if spec.replication_factor != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, but "
                                                            "replicationFactor was not set to -1.")
            assignment = self._check_manual_assignment(spec.assignments, image)
        else:
            num_partitions = spec.num_partitions
            if num_partitions == -1:
                num_partitions = self.config.num_partitions
            elif num_partitions <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions was set to an invalid non-positive value.")
            rf = spec.replication_factor
            if rf == -1:
                rf = self.config.get_int("default.replication.factor")
            elif rf <= 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
            if rf > len(live):
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Unable to replicate the partition {rf} time(s): The target replication factor "
                                 f"of {rf} cannot be reached because only {len(live)} broker(s) are registered.")
            if num_partitions <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Invalid default num.partitions {num_partitions}")
            assignment = place_replicas([(b.node_id, b.rack) for b in live], num_partitions, rf)
        topic_id = random_uuid()
        while topic_id in image.topics_by_id:
            topic_id = random_uuid()
        records: list[Any] = [TopicRecord(name=name, topic_id=topic_id)]
        unfenced = {b.node_id for b in live}
        for p, replicas in sorted(assignment.items()):
            isr = [b for b in replicas if b in unfenced]
            records.append(PartitionRecord(
                partition_id=p, topic_id=topic_id, replicas=list(replicas), isr=isr,
                removing_replicas=[], adding_replicas=[], leader=isr[0], leader_epoch=0, partition_epoch=0,
                directories=[self._default_dir(b) for b in replicas]))
        for key, value in sorted(configs.items()):
            records.append(ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=key, value=value))
        result = CreateTopicResult(name, ErrorCode.NONE, None, topic_id, len(assignment),
                                   len(next(iter(assignment.values()))), {k: v for k, v in configs.items() if v is not None})
        return result, records

    def _check_manual_assignment(self, assignments: dict[int, list[int]], image: MetadataImage) -> dict[int, list[int]]:
        bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if sorted(assignments) != list(range(len(assignments))):
            raise KafkaError(bad, "partitions should be a consecutive 0-based integer sequence")
        first_rf: int | None = None
        for p, replicas in sorted(assignments.items()):
            replicas = list(replicas)
            if not replicas:
                raise KafkaError(bad, "The manual partition assignment includes an empty replica list.")
            if len(set(replicas)) != len(replicas):
                dup = next(b for b in replicas if replicas.count(b) > 1)
                raise KafkaError(bad, f"The manual partition assignment includes the broker {dup} more than once.")
            for b in replicas:
                if b not in image.brokers:
                    raise KafkaError(bad, f"The manual partition assignment includes broker {b}, but no such "
                                          "broker is registered.")
            if first_rf is None:
                first_rf = len(replicas)
            elif len(replicas) != first_rf:
                raise KafkaError(bad, f"The manual partition assignment includes a partition with {len(replicas)} "
                                      f"replica(s), but this is not consistent with previous partitions, which have "
                                      f"{first_rf} replica(s).")
            if all(image.brokers[b].fenced for b in replicas):
                raise KafkaError(bad, f"All brokers specified in the manual partition assignment for partition {p} "
                                      "are fenced or in controlled shutdown.")
        return {p: list(r) for p, r in assignments.items()}

    def create_partitions(self, topics: Sequence[tuple[str, int, Sequence[Sequence[int]] | None]],
                          validate_only: bool = False) -> list[tuple[str, int, str | None]]:
        """Add partitions to existing topics (Kafka's CreatePartitions; rules in
        :mod:`kbroker.controller.replication_control`). ``topics``: (name, new total count, replica lists of the
        new partitions or None). One ``(name, error_code, error_message)`` per distinct name, in request order.
        The new PartitionRecords are committed together; replaying them makes brokers create the logs."""
        with self._lock:
            allowed: list[tuple[str, int, Sequence[Sequence[int]] | None]] = []
            refused: dict[str, tuple[str, int, str | None]] = {}
            planned = 0
            for name, count, assignments in topics:
                topic = self.latest_image.topics_by_name.get(name)
                extra = count - len(topic.partitions) if topic is not None else 0
                if extra > MAX_PARTITIONS_PER_REQUEST - planned:
                    refused[name] = (name, ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
                    continue
                planned += max(0, extra)
                allowed.append((name, count, assignments))
            records, results = plan_create_partitions(self.latest_image, allowed, self._default_dir)
            if refused:
                by_name = {r[0]: r for r in results}
                by_name.update(refused)
                order: list[str] = []
                for name, _, _ in topics:
                    if name not in order:
                        order.append(name)
                results = [by_name[n] for n in order]
            if records and not validate_only:
                self._commit(records)
            return results

    def elect_leaders(self, election_type: int, topic_partitions: Sequence[tuple[str, Sequence[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
        """ElectLeaders: PREFERRED (0) or UNCLEAN (1) for the given partitions (None: all). Raises
        ``KafkaError(INVALID_REQUEST)`` for an unknown election type."""
        with self._lock:
            records, results = plan_elect_leaders(self.latest_image, election_type, topic_partitions)
            if records:
                self._commit(records)
            return results

    def alter_partition_reassignments(self, topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]],
                                      allow_replication_factor_change: bool = True
                                      ) -> list[tuple[str, list[tuple[int, int, str | None]]]]:
        """AlterPartitionReassignments: ``topics`` maps names to (partition, target replicas or None = cancel)."""
        with self._lock:
            records, results = plan_alter_partition_reassignments(self.latest_image, topics, allow_replication_factor_change,
                                                                  self._default_dir)
            if records:
                self._commit(records)
            return results

    def list_partition_reassignments(self, topics: Sequence[tuple[str, Sequence[int]]] | None = None) -> list[Any]:
        """Ongoing reassignments as ``[(topic, [PartitionImage])]`` (see ``replication_control``)."""
        return list_partition_reassignments(self.latest_image, topics)

    def delete_topics(self, names_or_ids: Sequence[str | bytes]) -> list[DeleteTopicResult]:
        """Delete topics given by name (str) or topic id (16 bytes). One result per entry, in order.

        Errors: TOPIC_DELETION_DISABLED (``delete.topic.enable=false``), INVALID_REQUEST (the same topic
        twice, or the zero id), UNKNOWN_TOPIC_OR_PARTITION (unknown name), UNKNOWN_TOPIC_ID (unknown id).
        Each deleted topic gets a RemoveTopicRecord; replaying it also drops the topic's configs.
        """
        with self._lock:
            image = self.latest_image
            results: list[DeleteTopicResult] = []
            records: list[Any] = []
            counts: dict[str | bytes, int] = {}
            for item in names_or_ids:
                counts[item] = counts.get(item, 0) + 1
            enabled = self.config.get_bool("delete.topic.enable")
            removed: set[bytes] = set()
            for item in names_or_ids:
                if isinstance(item, (bytes, bytearray)):
                    topic = image.topics_by_id.get(bytes(item))
                    res = DeleteTopicResult(topic.name if topic else None, bytes(item))
                    if bytes(item) == ZERO_UUID:
                        res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Invalid topic id."
                    elif counts[item] > 1:
                        res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic id."
                    elif topic is None:
                        res.error_code, res.error_message = ErrorCode.UNKNOWN_TOPIC_ID, None
                else:
                    topic = image.topics_by_name.get(item)
                    res = DeleteTopicResult(item, topic.topic_id if topic else ZERO_UUID)
                    if counts[item] > 1:
                        res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic name."
                    elif topic is None:
                        res.error_code, res.error_message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
                if res.error_code == ErrorCode.NONE and not enabled:
                    res.error_code = ErrorCode.TOPIC_DELETION_DISABLED
                    res.error_message = "Topic deletion is disabled."
                if res.error_code == ErrorCode.NONE and topic is not None:
                    if topic.topic_id in removed:  # same topic by name and by id
                        res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic."
                    else:
                        removed.add(topic.topic_id)
                        records.append(RemoveTopicRecord(topic_id=topic.topic_id))
                results.append(res)
            if records:
                self._commit(records)
            return results

    # ---- configs ----
    def incremental_alter_configs(self, resources: Sequence[tuple[int, str, Sequence[tuple[str, int, str | None]]]],
                                  validate_only: bool = False) -> list[tuple[int, str | None]]:
        """IncrementalAlterConfigs: ``resources`` are (resource type, name, [(key, op, value)]) with op SET 0,
        DELETE 1, APPEND 2, SUBTRACT 3. Returns one ``(error_code, error_message)`` per resource; the
        ConfigRecords of the valid resources are committed together (rules in
        :mod:`kbroker.controller.config_control`)."""
        with self._lock:
            records, results = plan_incremental_alter_configs(
                self.latest_image, self.node_id, resources, self.config.get_bool("remote.log.storage.system.enable"),
                broker_props=self.config.props)
            if records and not validate_only:
                self._commit(records)
            return results

    def alter_configs(self, resources: Sequence[tuple[int, str, Sequence[tuple[str, str | None]]]],
                      validate_only: bool = False) -> list[tuple[int, str | None]]:
        """Legacy AlterConfigs: each resource's dynamic configs become exactly ``[(key, value)]``."""
        with self._lock:
            records, results = plan_legacy_alter_configs(
                self.latest_image, self.node_id, resources, self.config.get_bool("remote.log.storage.system.enable"),
                broker_props=self.config.props)
            if records and not validate_only:
                self._commit(records)
            return results

    # ---- SCRAM credentials (KIP-554) ----
    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[tuple[str, int, int, bytes, bytes]]
                                     ) -> list[tuple[str, int, str | None]]:
        """AlterUserScramCredentials: ``deletions`` are (user, mechanism code), ``upsertions`` (user, mechanism
        code, iterations, salt, salted password). Returns ``(user, error_code, error_message)`` per distinct user
        in order of first appearance; the records of the valid alterations are committed together (rules in
        :mod:`kbroker.controller.scram_control`). Raises ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        with self._lock:
            records, results = plan_alter_user_scram_credentials(self.latest_image, deletions, upsertions)
            if records:
                self._commit(records)
            return results

    # ---- delegation tokens (KIP-48) ----
    def create_delegation_token(self, requester: str, owner: str | None, renewers: Sequence[tuple[str, str]],
                                max_lifetime_ms: int) -> CreateResult:
        """CreateDelegationToken for ``requester`` (``User:<name>``) on behalf of ``owner`` (None: the requester);
        ``renewers`` are (principal type, name). Returns the answer (rules in
        :mod:`kbroker.controller.delegation_token_control`); the token's record is committed. Raises
        ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        cfg = self.config
        with self._lock:
            records, result = plan_create_delegation_token(
                self.latest_image, self._now_ms(), cfg.get("delegation.token.secret.key"),
                cfg.get_int("delegation.token.max.lifetime.ms"), cfg.get_int("delegation.token.expiry.time.ms"),
                requester, owner, renewers, max_lifetime_ms)
            if records:
                self._commit(records)
            return result

    def renew_delegation_token(self, principal: str, hmac: bytes, renew_period_ms: int) -> tuple[int, int]:
        """RenewDelegationToken by ``principal`` -> (error code, expiry timestamp ms); the new expiry is
        committed. Raises ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        cfg = self.config
        with self._lock:
            records, code, expiry = plan_renew_delegation_token(
                self.latest_image, self._now_ms(), cfg.get("delegation.token.secret.key"),
                cfg.get_int("delegation.token.expiry.time.ms"), principal, hmac, renew_period_ms)
            if records:
                self._commit(records)
            return code, expiry

    def expire_delegation_token(self, principal: str, hmac: bytes, expiry_time_period_ms: int) -> tuple[int, int]:
        """ExpireDelegationToken by ``principal`` -> (error code, expiry timestamp ms); a negative period removes
        the token. Raises ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        with self._lock:
            records, code, expiry = plan_expire_delegation_token(
                self.latest_image, self._now_ms(), self.config.get("delegation.token.secret.key"), principal, hmac,
                expiry_time_period_ms)
            if records:
                self._commit(records)
            return code, expiry

    def sweep_expired_delegation_tokens(self) -> int:
        """Remove the tokens past their max or expiry timestamp (Kafka's periodic
        ``sweepExpiredDelegationTokens``); returns how many. Nothing on a standby."""
        if not self.is_active:
            return 0
        with self._lock:
            records = expired_token_records(self.latest_image, self._now_ms())
            if records:
                self._commit(records)
            return len(records)

    # ---- ACLs (KIP-801) ----
    def create_acls(self, creations: Sequence[Any]) -> list[tuple[int, str | None]]:
        """CreateAcls: ``creations`` are ``StandardAcl`` values. Returns ``(error_code, error_message)`` per
        creation; the records of the new ACLs are committed together (rules in
        :mod:`kbroker.controller.acl_control`). Raises ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        with self._lock:
            records, results = plan_create_acls(self.latest_image, creations)
            if records:
                self._commit(records)
            return results

    def delete_acls(self, filters: Sequence[Any]) -> list[tuple[int, str | None, list[Any]]]:
        """DeleteAcls: ``filters`` are ``AclBindingFilter`` values. Returns ``(error_code, error_message, matched
        ACLs)`` per filter; the removals are committed together. Raises ``KafkaError(NOT_CONTROLLER)`` on a
        standby."""
        with self._lock:
            records, results = plan_delete_acls(self.latest_image, filters)
            if records:
                self._commit(records)
            return results

    # ---- client quotas (KIP-546) ----
    def alter_client_quotas(self, alterations: Sequence[Any], validate_only: bool = False
                            ) -> list[tuple[int, str | None]]:
        """AlterClientQuotas: ``alterations`` are (entity as (type, name) pairs, [(key, value or None to remove)]).
        Returns ``(error_code, error_message)`` per alteration; the records of the valid ones are committed together
        unless ``validate_only`` (rules in :mod:`kbroker.controller.client_quota_control`). Raises
        ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        with self._lock:
            records, results = plan_alter_client_quotas(self.latest_image, alterations)
            if records and not validate_only:
                self._commit(records)
            return results

    # ---- features ----
    def update_features(self, levels: dict[str, int]) -> MetadataImage:
        """Set finalized feature levels (0 removes a feature), each as an upgrade or a safe downgrade (rules in
        :mod:`kbroker.controller.feature_control`). Raises ``KafkaError(INVALID_UPDATE_VERSION)``."""
        from kbroker.controller.feature_control import SAFE_DOWNGRADE, UPGRADE

        with self._lock:
            current = self.latest_image.features
            updates = [(n, lvl, UPGRADE if lvl >= current.get(n, 0) else SAFE_DOWNGRADE) for n, lvl in levels.items()]
            error = self.apply_feature_updates(updates)
            if error is not None:
                raise KafkaError(error.code, error.message)
            return self.latest_image

    def apply_feature_updates(self, updates: Sequence[tuple[str, int, int]], validate_only: bool = False) -> Any:
        """UpdateFeatures (API 57): ``updates`` are ``(feature, level, upgrade type)`` (1 UPGRADE, 2 SAFE_DOWNGRADE,
        3 UNSAFE_DOWNGRADE). All are checked against this controller's :data:`SUPPORTED_FEATURES`, every
        registered broker's range and Kafka's rules (:func:`~kbroker.controller.feature_control.plan_update_features`);
        the FeatureLevelRecords are committed together unless ``validate_only``. Returns None, or the
        ``FeatureUpdateError`` of the first update that fails (nothing is written then). Raises
        ``KafkaError(NOT_CONTROLLER)`` on a standby."""
        from kbroker.controller.feature_control import elr_safety_records, plan_update_features

        with self._lock:
            if self.raft_mode and not self.is_active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
            records, error = plan_update_features(self.latest_image, self.node_id, SUPPORTED_FEATURES, updates)
            if error is None and not validate_only and any(
                    r.name == "eligible.leader.replicas.version" and r.feature_level > 0 for r in records):
                safety = elr_safety_records(self.latest_image, self._static_min_insync_replicas())
                if safety:
                    log.info("enabling eligible leader replicas: min.insync.replicas moves to the cluster level (%s)",
                             ", ".join(f"{r.resource_name or '<default>'}={r.value}" for r in safety))
                records = [*safety, *records]
            if error is None and records and not validate_only:
                log.warning("updating finalized features: %s", ", ".join(
                    f"{r.name}={r.feature_level}" for r in records if isinstance(r, FeatureLevelRecord)))
                self._commit(records)
            return error

    # ---- producer ids ----
    def allocate_producer_ids(self, block_size: int = PRODUCER_ID_BLOCK_SIZE, broker_id: int | None = None,
                              broker_epoch: int = -1) -> tuple[int, int]:
        """Reserve the next block of producer ids -> (first id, block size). Durable before it returns."""
        with self._lock:
            if block_size <= 0:
                raise ValueError("block_size must be positive")
            first = self.latest_image.producer_ids_next
            if first > _LONG_MAX - block_size:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds")
            if broker_id is None:
                broker_id = self.node_id
                reg = self.latest_image.brokers.get(broker_id)
                broker_epoch = reg.broker_epoch if reg is not None else -1
            self._commit([ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                            next_producer_id=first + block_size)])
            return first, block_size


def parse_quorum_voters(value: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` (``id@host:port,...``) -> {node id: (host, port)}. Raises ValueError with
    Kafka's kind of message for a malformed entry."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)@\[?([^\]@]*?)\]?:(\d+)", item)
        if m is None:
            raise ValueError(f"Invalid value {item} for controller.quorum.voters: expected id@host:port")
        voters[int(m.group(1))] = (m.group(2), int(m.group(3)))
    return voters


def parse_bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """``controller.quorum.bootstrap.servers`` (``host:port,...``) -> [(host, port)]. Raises ValueError."""
    out: list[tuple[str, int]] = []
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"\[?([^\]@]*?)\]?:(\d+)", item)
        if m is None:
            raise ValueError(f"Invalid value {item} for controller.quorum.bootstrap.servers: expected host:port")
        out.append((m.group(1), int(m.group(2))))
    return out


def _chunk(values: list[bytes]) -> list[list[bytes]]:
    chunks: list[list[bytes]] = [[]]
    size = 0
    for v in values:
        if chunks[-1] and (len(chunks[-1]) >= MAX_RECORDS_PER_BATCH or size + len(v) > _MAX_METADATA_BATCH_BYTES // 2):
            chunks.append([])
            size = 0
        chunks[-1].append(v)
        size += len(v) + 16
    return chunks


def _partitions_in(d: Path) -> str:
    """Partition directories (not the metadata log's) in ``d``, as a short list ("" for none)."""
    try:
        names = sorted(n for n in os.listdir(d) if _PARTITION_DIR_RE.fullmatch(n) and n != METADATA_PARTITION_DIR
                       and not n.endswith(("-stray", "-delete", "-future")))
    except (FileNotFoundError, NotADirectoryError):
        return ""
    if not names:
        return ""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _batch_problem(data: bytes, pos: int) -> tuple[str | None, int]:
    """``(None, size)`` when a whole, CRC-valid v2 batch starts at ``pos``, else ``(what is wrong, 0)``."""
    from kbroker.protocol.records import RecordBatch

    if len(data) - pos < 61:
        return f"{len(data) - pos} bytes, less than a batch header", 0
    (length,) = struct.unpack_from(">i", data, pos + 8)
    size = length + 12
    if length < 49:
        return f"impossible batch length {length}", 0
    if pos + size > len(data):
        return f"batch of {size} bytes runs past the end of the file", 0
    if data[pos + 16] != 2:
        return f"magic {data[pos + 16]}", 0
    try:
        ok = RecordBatch(data, pos).verify_crc()
    except Exception as exc:  # a malformed header
        return f"unreadable batch ({exc})", 0
    return (None, size) if ok else ("CRC mismatch", 0)


def _valid_batch_after(data: bytes, pos: int) -> int | None:
    """The first position after ``pos`` where a valid batch starts, if any."""
    start = pos + 1
    while True:
        i = data.find(b"\x02", start + 16)  # the magic byte sits 16 bytes into a batch
        if i < 0:
            return None
        cand = i - 16
        if cand > pos and _batch_problem(data, cand)[0] is None:
            return cand
        start = cand + 1


def _check_metadata_log(partition_dir: Path) -> None:
    """Refuse a metadata log that is damaged anywhere but its tail.

    A write cut short by a crash leaves a *torn* tail (a last batch that runs past the end of the file, or
    zeros): recovery truncates it (WARN), as Kafka does, since nothing past the last whole batch was committed.
    A whole batch that fails its CRC, or damage followed by valid batches (a flipped byte, a hole), is no crash's
    doing and replaying past it would lose committed topics, which would then be re-created under new ids;
    kbroker refuses to start instead (``MetadataStorageError``, one line)."""
    segments = sorted(partition_dir.glob("*.log"))
    for i, path in enumerate(segments):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            problem, size = _batch_problem(data, pos)
            if problem is None:
                pos += size
                continue
            later = _valid_batch_after(data, pos)
            torn = (problem.startswith(("batch of", "impossible batch length 0")) or "less than a batch header" in
                    problem or not data[pos:].strip(b"\x00"))
            if later is not None or i < len(segments) - 1 or not torn:
                where = (f"byte {later}" if later is not None else "the next segment" if i < len(segments) - 1
                         else "nothing: a whole batch is corrupt, which no crash leaves behind")
                raise MetadataStorageError(
                    f"{path} is damaged at byte {pos} ({problem}; after it: {where}): replaying this metadata log "
                    f"would lose committed metadata and re-create topics; restore {partition_dir} from a backup")
            log.warning("%s: damaged tail at byte %d (%s), %d bytes: truncated (a write cut short by a crash)",
                        path, pos, problem, len(data) - pos)
            return


def _data_in(d: Path) -> str:
    """What in ``d`` shows that it was used by a broker already ("" for a new or empty directory)."""
    try:
        names = sorted(os.listdir(d))
    except (FileNotFoundError, NotADirectoryError):
        return ""
    found = []
    for name in names:
        if name in (METADATA_PARTITION_DIR, QUORUM_STATE_FILE, ".kafka_cleanshutdown",
                    "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                    "log-start-offset-checkpoint") or _PARTITION_DIR_RE.fullmatch(name):
            found.append(name)
    if not found:
        return ""
    return ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")


_PARTITION_DIR_RE = re.compile(r".+-\d+")


def _write_file_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename (and fsync the directory)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
