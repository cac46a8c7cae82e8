"""Immutable cluster metadata image and the delta that replays metadata records into a new image.

The controller never edits an image. It appends records to ``__cluster_metadata``, replays them into a
:class:`MetadataDelta` over the current image and publishes ``delta.apply()``; on restart the same replay
rebuilds the same image from the log. Readers (request handlers, coordinators, the log manager) may keep
any image they were handed: every field is a tuple, frozen dataclass or read-only mapping.

Replay semantics follow Kafka's metadata records (``metadata-specs/``):

* ``TopicRecord`` adds a topic without partitions; ``PartitionRecord`` adds or replaces one partition;
  ``PartitionChangeRecord`` changes the fields it carries (null / -2 / -1 sentinels mean "unchanged"),
  bumps the partition epoch always and the leader epoch when it names a leader.
* ``RemoveTopicRecord`` removes the topic and, with it, the topic's dynamic configs.
* ``ConfigRecord`` sets a key of a resource, or deletes it when the value is null.
* ``RegisterBrokerRecord`` replaces a broker registration; ``UnregisterBrokerRecord`` removes it;
  ``FenceBrokerRecord`` / ``UnfenceBrokerRecord`` / ``BrokerRegistrationChangeRecord`` toggle fencing.
* ``FeatureLevelRecord`` sets a finalized feature level; level 0 removes the feature.
* ``ProducerIdsRecord`` moves the next producer id block.
* ``UserScramCredentialRecord`` sets (adds or replaces) the SCRAM credential of a (user, mechanism);
  ``RemoveUserScramCredentialRecord`` removes it (KIP-554; a removal of a credential that is not there changes
  nothing).
* ``AccessControlEntryRecord`` adds the ACL with its id (or replaces it); ``RemoveAccessControlEntryRecord``
  removes the ACL with that id (KIP-801); removing an id that has no ACL is a MetadataReplayError, as Kafka's
  controller refuses to replay it.
* ``ClientQuotaRecord`` sets one quota key of a client-quota entity, or removes it when ``remove`` is set (KIP-546);
  an entity is the tuple of its ``(entity type, name)`` pairs sorted by type, a name of None being the type's
  default (``kbroker.controller.client_quota_control``); an entity whose last key goes is dropped.
* ``NoOpRecord`` and the metadata transaction markers change nothing here (the controller groups
  transactional records before they reach the delta). ZK-migration and controller-registration records are
  accepted and ignored for now.
* ``DelegationTokenRecord`` adds or replaces the delegation token with its id (KIP-48: created, renewed or given
  a new expiry); ``RemoveDelegationTokenRecord`` removes it (expired by a client or by the controller's sweep; a
  removal of a token that is not there changes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping, NamedTuple

from kbroker.protocol.metadata_records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from kbroker.security.acl import StandardAcl

__all__ = [
    "BROKER_RESOURCE",
    "TOPIC_RESOURCE",
    "INTERNAL_TOPICS",
    "BrokerRegistration",
    "DelegationToken",
    "QuotaEntity",
    "Endpoint",
    "MetadataChanges",
    "MetadataDelta",
    "MetadataImage",
    "MetadataReplayError",
    "diff_images",
    "PartitionImage",
    "ScramCredential",
    "TopicImage",
    "is_internal",
    "quota_entity",
]

#: ConfigResource types used as the first element of a configs key.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

#: Topics Kafka treats as internal (reported with ``IsInternal`` in Metadata responses).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

_EMPTY: Mapping[Any, Any] = MappingProxyType({})

# Sentinels of PartitionChangeRecord.
_NO_LEADER_CHANGE = -2
_NO_RECOVERY_CHANGE = -1


def is_internal(name: str) -> bool:
    """True for Kafka's internal topic names."""
    return name in INTERNAL_TOPICS


class MetadataReplayError(RuntimeError):
    """A record cannot be applied to the image (it contradicts earlier records)."""


class Endpoint(NamedTuple):
    """One advertised listener of a broker."""

    listener: str
    host: str
    port: int
    security_protocol: int  # SecurityProtocol id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    incarnation_id: bytes
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    broker_epoch: int = 0
    in_controlled_shutdown: bool = False
    log_dirs: tuple[bytes, ...] = ()
    #: feature name -> (min supported, max supported) as registered by the broker
    supported_features: Mapping[str, tuple[int, int]] = field(default_factory=lambda: _EMPTY)

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint for ``listener`` (case-insensitive), or None."""
        want = listener.upper()
        for ep in self.endpoints:
            if ep.listener.upper() == want:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[bytes, ...] = ()
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: bytes
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: _EMPTY)

    @property
    def is_internal(self) -> bool:
        return is_internal(self.name)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """The SCRAM credential of one (user, mechanism), as ``UserScramCredentialRecord`` carries it (KIP-554,
    RFC 5802 section 3): ``salt``; ``stored_key`` = H(HMAC(SaltedPassword, "Client Key")); ``server_key`` =
    HMAC(SaltedPassword, "Server Key"), with the mechanism's hash (SHA-256 or SHA-512); ``iterations`` of
    Hi(). The password itself is never stored. The keys are left out of ``repr``."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """One delegation token as ``DelegationTokenRecord`` carries it (KIP-48): ``owner`` / ``requester`` /
    ``renewers`` as principal strings (``User:alice``); timestamps in epoch ms: issued, the latest the token can
    ever be renewed to (``max_timestamp``), and when it expires unless renewed (``expiry_timestamp``). The HMAC is
    not stored: each node derives it from the token id and ``delegation.token.secret.key``
    (:mod:`kbroker.controller.delegation_token_control`)."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int

    def owner_or_renewer(self, principal: str) -> bool:
        """Whether ``principal`` owns the token or is one of its renewers (Kafka's ``TokenInformation.ownerOrRenewer``;
        the requester of a token created for another owner is neither)."""
        return principal == self.owner or principal in self.renewers


QuotaEntity = tuple[tuple[str, "str | None"], ...]
"""A client-quota entity: ``(entity type, name)`` pairs sorted by type, a name of None for the type's default
(``(("client-id", None), ("user", "alice"))``: user alice with the default client id)."""


def quota_entity(parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The :data:`QuotaEntity` of ``(entity type, name)`` pairs, in any order."""
    return tuple(sorted(((t, n) for t, n in parts), key=lambda p: p[0]))


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    #: offset of the last record applied from ``__cluster_metadata`` (-1: nothing applied yet)
    offset: int = -1
    #: finalized feature levels (name -> level); features at level 0 are absent
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    topics_by_id: Mapping[bytes, TopicImage] = field(default_factory=lambda: _EMPTY)
    #: (resource type, resource name) -> dynamic config overrides; broker-wide defaults use name ""
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    #: first producer id of the next block the controller will hand out
    producer_ids_next: int = 0
    #: (user name, mechanism code) -> SCRAM credential; mechanism codes are Kafka's ``ScramMechanism`` types:
    #: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (``kbroker.controller.scram_control``)
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(default_factory=lambda: _EMPTY)
    #: ACL id (16-byte Uuid) -> ACL (``AccessControlEntryRecord``, KIP-801; ``kbroker.controller.acl_control``)
    acls: Mapping[bytes, StandardAcl] = field(default_factory=lambda: _EMPTY)
    #: client-quota entity -> {quota key: value} (KIP-546): an entity is a tuple of ``(entity type, name)`` sorted
    #: by type (types ``user``, ``client-id``, ``ip``; name None: that type's default entity)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)
    #: token id -> delegation token (``DelegationTokenRecord``, KIP-48; ``kbroker.controller.delegation_token_control``)
    delegation_tokens: Mapping[str, DelegationToken] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def empty(cls, cluster_id: str) -> MetadataImage:
        return cls(cluster_id=cluster_id)

    # ---- convenience lookups ----
    @property
    def metadata_version(self) -> int:
        return self.features.get("metadata.version", 0)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_by_id(self, topic_id: bytes) -> TopicImage | None:
        return self.topics_by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionImage | None:
        t = self.topics_by_name.get(topic)
        return None if t is None else t.partitions.get(partition)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        """Dynamic config overrides of topic ``name`` (empty if none)."""
        return self.configs.get((TOPIC_RESOURCE, name), _EMPTY)

    def broker_configs(self, node_id: int | None = None) -> Mapping[str, str]:
        """Dynamic broker configs of ``node_id``, or the cluster-wide defaults when ``node_id`` is None."""
        return self.configs.get((BROKER_RESOURCE, "" if node_id is None else str(node_id)), _EMPTY)

    def live_brokers(self) -> list[BrokerRegistration]:
        """Registered, unfenced brokers ordered by id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]


@dataclass(frozen=True, slots=True)
class MetadataChanges:
    """What one applied delta changed, relative to the image it started from (for listeners)."""

    created_topics: frozenset[bytes] = frozenset()
    #: topics of the old image that are gone, with their last state (names and partitions)
    deleted_topics: Mapping[bytes, TopicImage] = field(default_factory=lambda: _EMPTY)
    #: (topic id, partition id) of every partition added or changed, including those of created topics
    changed_partitions: frozenset[tuple[bytes, int]] = frozenset()
    changed_configs: frozenset[tuple[int, str]] = frozenset()
    changed_brokers: frozenset[int] = frozenset()
    features_changed: bool = False
    producer_ids_changed: bool = False
    #: (user name, mechanism code) of every SCRAM credential added, replaced or removed
    changed_scram_credentials: frozenset[tuple[str, int]] = frozenset()
    #: ids of every ACL added or removed
    changed_acls: frozenset[bytes] = frozenset()
    #: every client-quota entity whose quotas were set or removed
    changed_client_quotas: frozenset[QuotaEntity] = frozenset()
    #: ids of every delegation token added, changed or removed
    changed_delegation_tokens: frozenset[str] = frozenset()

    @property
    def is_empty(self) -> bool:
        return not (self.created_topics or self.deleted_topics or self.changed_partitions or self.changed_configs
                    or self.changed_brokers or self.features_changed or self.producer_ids_changed
                    or self.changed_scram_credentials or self.changed_acls or self.changed_client_quotas
                    or self.changed_delegation_tokens)


def _tup(values: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(values) if values else ()


class MetadataDelta:
    """Accumulates replayed records on top of ``image``; :meth:`apply` returns the resulting image.

    A delta can be applied more than once; each call returns a new image reflecting every record replayed
    so far.
    """

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._offset = image.offset
        self._features: dict[str, int] | None = None
        self._brokers: dict[int, BrokerRegistration] | None = None
        # topic id -> (name, topic_id, partitions dict) for changed/created topics; None = removed
        self._topics: dict[bytes, tuple[str, bytes, dict[int, PartitionImage]] | None] = {}
        self._names: dict[str, bytes | None] = {}  # name -> id overlay (None = removed)
        self._configs: dict[tuple[int, str], dict[str, str] | None] = {}
        self._producer_ids_next: int | None = None
        self._changed_partitions: set[tuple[bytes, int]] = set()
        self._changed_brokers: set[int] = set()
        self._scram: dict[tuple[str, int], ScramCredential] | None = None
        self._changed_scram: set[tuple[str, int]] = set()
        self._acls: dict[bytes, StandardAcl] | None = None
        self._changed_acls: set[bytes] = set()
        self._quotas: dict[QuotaEntity, Mapping[str, float]] | None = None
        self._changed_quotas: set[QuotaEntity] = set()
        self._tokens: dict[str, DelegationToken] | None = None
        self._changed_tokens: set[str] = set()

    # ---- lookups through the overlay ----
    def _topic_id_by_name(self, name: str) -> bytes | None:
        if name in self._names:
            return self._names[name]
        t = self.image.topics_by_name.get(name)
        return None if t is None else t.topic_id

    def _topic_exists(self, topic_id: bytes) -> bool:
        if topic_id in self._topics:
            return self._topics[topic_id] is not None
        return topic_id in self.image.topics_by_id

    def _mutable_topic(self, topic_id: bytes) -> tuple[str, bytes, dict[int, PartitionImage]]:
        if topic_id in self._topics:
            entry = self._topics[topic_id]
            if entry is None:
                raise MetadataReplayError(f"topic {topic_id.hex()} was removed")
            return entry
        base = self.image.topics_by_id.get(topic_id)
        if base is None:
            raise MetadataReplayError(f"unknown topic id {topic_id.hex()}")
        entry = (base.name, base.topic_id, dict(base.partitions))
        self._topics[topic_id] = entry
        return entry

    def _mutable_brokers(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        return self._brokers

    def _mutable_scram(self) -> dict[tuple[str, int], ScramCredential]:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        return self._scram

    def _mutable_acls(self) -> dict[bytes, StandardAcl]:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        return self._acls

    def _mutable_config(self, key: tuple[int, str]) -> dict[str, str]:
        if key in self._configs:
            cur = self._configs[key]
            if cur is None:  # removed earlier in this delta: start from nothing
                cur = self._configs[key] = {}
            return cur
        cur = self._configs[key] = dict(self.image.configs.get(key, _EMPTY))
        return cur

    # ---- replay ----
    def replay(self, record: Any, offset: int | None = None) -> None:
        """Apply one metadata record. ``offset`` (its log offset) becomes the image's ``offset``."""
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            handler(self, record)
        if offset is not None:
            if offset < self._offset:
                raise MetadataReplayError(f"offset {offset} goes backwards (last {self._offset})")
            self._offset = offset

    def advance_offset(self, offset: int) -> None:
        """Record that the log was read up to ``offset`` (e.g. a control batch) without changing state."""
        if offset > self._offset:
            self._offset = offset

    def _replay_topic(self, r: TopicRecord) -> None:
        if self._topic_exists(r.topic_id):
            raise MetadataReplayError(f"topic id {r.topic_id.hex()} already exists")
        if self._topic_id_by_name(r.name) is not None:
            raise MetadataReplayError(f"topic {r.name!r} already exists")
        self._topics[r.topic_id] = (r.name, r.topic_id, {})
        self._names[r.name] = r.topic_id

    def _replay_partition(self, r: PartitionRecord) -> None:
        _, topic_id, parts = self._mutable_topic(r.topic_id)
        parts[r.partition_id] = PartitionImage(
            partition_id=r.partition_id,
            replicas=_tup(r.replicas),
            isr=_tup(r.isr),
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            removing_replicas=_tup(r.removing_replicas),
            adding_replicas=_tup(r.adding_replicas),
            leader_recovery_state=r.leader_recovery_state,
            directories=_tup(r.directories),
            eligible_leader_replicas=_tup(r.eligible_leader_replicas),
            last_known_elr=_tup(r.last_known_elr),
        )
        self._changed_partitions.add((topic_id, r.partition_id))

    def _replay_partition_change(self, r: PartitionChangeRecord) -> None:
        _, topic_id, parts = self._mutable_topic(r.topic_id)
        old = parts.get(r.partition_id)
        if old is None:
            raise MetadataReplayError(f"unknown partition {r.partition_id} of topic {topic_id.hex()}")
        leader, leader_epoch = old.leader, old.leader_epoch
        if r.leader != _NO_LEADER_CHANGE:
            leader, leader_epoch = r.leader, old.leader_epoch + 1
        parts[r.partition_id] = PartitionImage(
            partition_id=old.partition_id,
            replicas=old.replicas if r.replicas is None else _tup(r.replicas),
            isr=old.isr if r.isr is None else _tup(r.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=old.partition_epoch + 1,
            removing_replicas=old.removing_replicas if r.removing_replicas is None else _tup(r.removing_replicas),
            adding_replicas=old.adding_replicas if r.adding_replicas is None else _tup(r.adding_replicas),
            leader_recovery_state=(old.leader_recovery_state if r.leader_recovery_state == _NO_RECOVERY_CHANGE
                                   else r.leader_recovery_state),
            directories=old.directories if r.directories is None else _tup(r.directories),
            eligible_leader_replicas=(old.eligible_leader_replicas if r.eligible_leader_replicas is None
                                      else _tup(r.eligible_leader_replicas)),
            last_known_elr=old.last_known_elr if r.last_known_elr is None else _tup(r.last_known_elr),
        )
        self._changed_partitions.add((topic_id, r.partition_id))

    def _replay_remove_topic(self, r: RemoveTopicRecord) -> None:
        name, _, _ = self._mutable_topic(r.topic_id)
        self._topics[r.topic_id] = None
        self._names[name] = None
        self._changed_partitions = {tp for tp in self._changed_partitions if tp[0] != r.topic_id}
        # Removing a topic also drops its dynamic configs.
        self._configs[(TOPIC_RESOURCE, name)] = None

    def _replay_config(self, r: ConfigRecord) -> None:
        key = (r.resource_type, r.resource_name)
        cfg = self._mutable_config(key)
        if r.value is None:
            cfg.pop(r.name, None)
        else:
            cfg[r.name] = r.value

    def _replay_register_broker(self, r: RegisterBrokerRecord) -> None:
        brokers = self._mutable_brokers()
        brokers[r.broker_id] = BrokerRegistration(
            node_id=r.broker_id,
            incarnation_id=r.incarnation_id,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            rack=r.rack,
            fenced=r.fenced,
            broker_epoch=r.broker_epoch,
            in_controlled_shutdown=r.in_controlled_shutdown,
            log_dirs=_tup(r.log_dirs),
            supported_features=MappingProxyType({f.name: (f.min_supported_version, f.max_supported_version)
                                                 for f in r.features}),
        )
        self._changed_brokers.add(r.broker_id)

    def _broker_for_change(self, broker_id: int, epoch: int) -> BrokerRegistration:
        cur = self._mutable_brokers().get(broker_id)
        if cur is None:
            raise MetadataReplayError(f"broker {broker_id} is not registered")
        if cur.broker_epoch != epoch:
            raise MetadataReplayError(f"broker {broker_id} epoch {epoch} does not match registered epoch "
                                      f"{cur.broker_epoch}")
        return cur

    def _set_broker(self, reg: BrokerRegistration, **changes: Any) -> None:
        self._mutable_brokers()[reg.node_id] = replace(reg, **changes)
        self._changed_brokers.add(reg.node_id)

    def _replay_unregister_broker(self, r: UnregisterBrokerRecord) -> None:
        brokers = self._mutable_brokers()
        if brokers.pop(r.broker_id, None) is not None:
            self._changed_brokers.add(r.broker_id)

    def _replay_fence(self, r: FenceBrokerRecord) -> None:
        self._set_broker(self._broker_for_change(r.id, r.epoch), fenced=True)

    def _replay_unfence(self, r: UnfenceBrokerRecord) -> None:
        self._set_broker(self._broker_for_change(r.id, r.epoch), fenced=False)

    def _replay_registration_change(self, r: BrokerRegistrationChangeRecord) -> None:
        reg = self._broker_for_change(r.broker_id, r.broker_epoch)
        changes: dict[str, Any] = {}
        if r.fenced == 1:
            changes["fenced"] = True
        elif r.fenced == -1:
            changes["fenced"] = False
        elif r.fenced != 0:
            raise MetadataReplayError(f"invalid fenced change {r.fenced}")
        if r.in_controlled_shutdown == 1:
            changes["in_controlled_shutdown"] = True
        if r.log_dirs:
            changes["log_dirs"] = _tup(r.log_dirs)
        self._set_broker(reg, **changes)

    def _replay_feature(self, r: FeatureLevelRecord) -> None:
        if self._features is None:
            self._features = dict(self.image.features)
        if r.feature_level == 0:
            self._features.pop(r.name, None)
        else:
            self._features[r.name] = r.feature_level

    def _replay_producer_ids(self, r: ProducerIdsRecord) -> None:
        current = self.image.producer_ids_next if self._producer_ids_next is None else self._producer_ids_next
        if r.next_producer_id < current:
            raise MetadataReplayError(f"producer id block moves backwards: {r.next_producer_id} < {current}")
        self._producer_ids_next = r.next_producer_id

    def _replay_scram_credential(self, r: UserScramCredentialRecord) -> None:
        key = (r.name, r.mechanism)
        self._mutable_scram()[key] = ScramCredential(salt=bytes(r.salt), stored_key=bytes(r.stored_key),
                                                     server_key=bytes(r.server_key), iterations=r.iterations)
        self._changed_scram.add(key)

    def _replay_remove_scram_credential(self, r: RemoveUserScramCredentialRecord) -> None:
        key = (r.name, r.mechanism)
        if self._mutable_scram().pop(key, None) is not None:
            self._changed_scram.add(key)

    def _replay_acl(self, r: AccessControlEntryRecord) -> None:
        self._mutable_acls()[r.id] = StandardAcl(
            resource_type=r.resource_type, resource_name=r.resource_name, pattern_type=r.pattern_type,
            principal=r.principal, host=r.host, operation=r.operation, permission_type=r.permission_type)
        self._changed_acls.add(r.id)

    def _replay_remove_acl(self, r: RemoveAccessControlEntryRecord) -> None:
        if self._mutable_acls().pop(r.id, None) is None:
            raise MetadataReplayError(f"no ACL with id {r.id.hex()} to remove")
        self._changed_acls.add(r.id)

    def _replay_client_quota(self, r: ClientQuotaRecord) -> None:
        entity = quota_entity((e.entity_type, e.entity_name) for e in r.entity)
        if self._quotas is None:
            self._quotas = dict(self.image.client_quotas)
        values = dict(self._quotas.get(entity, {}))
        if r.remove:
            if values.pop(r.key, None) is None:
                return
        else:
            values[r.key] = float(r.value)
        if values:
            self._quotas[entity] = MappingProxyType(values)
        else:
            self._quotas.pop(entity, None)
        self._changed_quotas.add(entity)

    def _mutable_tokens(self) -> dict[str, DelegationToken]:
        if self._tokens is None:
            self._tokens = dict(self.image.delegation_tokens)
        return self._tokens

    def _replay_delegation_token(self, r: DelegationTokenRecord) -> None:
        self._mutable_tokens()[r.token_id] = DelegationToken(
            token_id=r.token_id, owner=r.owner, requester=r.requester, renewers=_tup(r.renewers),
            issue_timestamp=r.issue_timestamp, max_timestamp=r.max_timestamp,
            expiry_timestamp=r.expiration_timestamp)
        self._changed_tokens.add(r.token_id)

    def _replay_remove_delegation_token(self, r: RemoveDelegationTokenRecord) -> None:
        if self._mutable_tokens().pop(r.token_id, None) is not None:
            self._changed_tokens.add(r.token_id)

    def _replay_clear_elr(self, r: ClearElrRecord) -> None:
        topic_ids: list[bytes]
        if r.topic_name:
            tid = self._topic_id_by_name(r.topic_name)
            topic_ids = [] if tid is None else [tid]
        else:
            topic_ids = [tid for tid in set(self.image.topics_by_id) | set(self._topics) if self._topic_exists(tid)]
        for tid in topic_ids:
            _, _, parts = self._mutable_topic(tid)
            for pid, p in list(parts.items()):
                if p.eligible_leader_replicas or p.last_known_elr:
                    parts[pid] = replace(p, eligible_leader_replicas=(), last_known_elr=())
                    self._changed_partitions.add((tid, pid))

    # ---- result ----
    def changes(self) -> MetadataChanges:
        """Summary of what the records replayed so far change relative to ``self.image``."""
        created = frozenset(tid for tid, e in self._topics.items()
                            if e is not None and tid not in self.image.topics_by_id)
        deleted = {tid: self.image.topics_by_id[tid] for tid, e in self._topics.items()
                   if e is None and tid in self.image.topics_by_id}
        changed_configs = frozenset(k for k, v in self._configs.items()
                                    if (dict(v) if v else {}) != dict(self.image.configs.get(k, _EMPTY)))
        return MetadataChanges(
            created_topics=created,
            deleted_topics=MappingProxyType(deleted),
            changed_partitions=frozenset(self._changed_partitions),
            changed_configs=changed_configs,
            changed_brokers=frozenset(self._changed_brokers),
            features_changed=self._features is not None and self._features != dict(self.image.features),
            producer_ids_changed=(self._producer_ids_next is not None
                                  and self._producer_ids_next != self.image.producer_ids_next),
            changed_scram_credentials=frozenset(
                k for k in self._changed_scram
                if self._scram is not None and self._scram.get(k) != self.image.scram_credentials.get(k)),
            changed_acls=frozenset(k for k in self._changed_acls
                                   if self._acls is not None and self._acls.get(k) != self.image.acls.get(k)),
            changed_client_quotas=frozenset(
                k for k in self._changed_quotas
                if self._quotas is not None and self._quotas.get(k) != self.image.client_quotas.get(k)),
            changed_delegation_tokens=frozenset(
                k for k in self._changed_tokens
                if self._tokens is not None and self._tokens.get(k) != self.image.delegation_tokens.get(k)),
        )

    def apply(self) -> MetadataImage:
        """A new image: the base image with every replayed record applied."""
        img = self.image
        topics_by_id: Mapping[bytes, TopicImage] = img.topics_by_id
        topics_by_name: Mapping[str, TopicImage] = img.topics_by_name
        if self._topics:
            by_id = dict(img.topics_by_id)
            by_name = dict(img.topics_by_name)
            for tid, entry in self._topics.items():
                old = by_id.pop(tid, None)
                if old is not None and by_name.get(old.name) is old:
                    del by_name[old.name]
                if entry is not None:
                    name, topic_id, parts = entry
                    t = TopicImage(name, topic_id, MappingProxyType(dict(sorted(parts.items()))))
                    by_id[tid] = t
                    by_name[name] = t
            topics_by_id = MappingProxyType(by_id)
            topics_by_name = MappingProxyType(by_name)
        configs: Mapping[tuple[int, str], Mapping[str, str]] = img.configs
        if self._configs:
            merged = dict(img.configs)
            for key, cfg in self._configs.items():
                if cfg:
                    merged[key] = MappingProxyType(dict(cfg))
                else:
                    merged.pop(key, None)
            configs = MappingProxyType(merged)
        return MetadataImage(
            cluster_id=img.cluster_id,
            offset=self._offset,
            features=img.features if self._features is None else MappingProxyType(dict(self._features)),
            brokers=img.brokers if self._brokers is None else MappingProxyType(dict(self._brokers)),
            topics_by_name=topics_by_name,
            topics_by_id=topics_by_id,
            configs=configs,
            producer_ids_next=img.producer_ids_next if self._producer_ids_next is None else self._producer_ids_next,
            scram_credentials=(img.scram_credentials if self._scram is None
                               else MappingProxyType(dict(self._scram))),
            acls=img.acls if self._acls is None else MappingProxyType(dict(self._acls)),
            client_quotas=(img.client_quotas if self._quotas is None else MappingProxyType(dict(self._quotas))),
            delegation_tokens=(img.delegation_tokens if self._tokens is None
                               else MappingProxyType(dict(self._tokens))),
        )


def diff_images(old: MetadataImage, new: MetadataImage) -> MetadataChanges:
    """What differs between two images that are not one delta apart (an image loaded from a snapshot replaces
    another): topics created and deleted (by id), partitions whose state differs, configs, brokers, features,
    the producer id block, SCRAM credentials, ACLs, client quotas and delegation tokens."""
    created = frozenset(tid for tid in new.topics_by_id if tid not in old.topics_by_id)
    deleted = {tid: t for tid, t in old.topics_by_id.items() if tid not in new.topics_by_id}
    changed_partitions = frozenset(
        (tid, pid) for tid, t in new.topics_by_id.items() for pid, p in t.partitions.items()
        if (o := old.topics_by_id.get(tid)) is None or o.partitions.get(pid) != p)
    changed_configs = frozenset(k for k in set(old.configs) | set(new.configs)
                                if dict(old.configs.get(k, _EMPTY)) != dict(new.configs.get(k, _EMPTY)))
    changed_brokers = frozenset(b for b in set(old.brokers) | set(new.brokers)
                                if old.brokers.get(b) != new.brokers.get(b))
    return MetadataChanges(
        created_topics=created,
        deleted_topics=MappingProxyType(deleted),
        changed_partitions=changed_partitions,
        changed_configs=changed_configs,
        changed_brokers=changed_brokers,
        features_changed=dict(old.features) != dict(new.features),
        producer_ids_changed=old.producer_ids_next != new.producer_ids_next,
        changed_scram_credentials=frozenset(
            k for k in set(old.scram_credentials) | set(new.scram_credentials)
            if old.scram_credentials.get(k) != new.scram_credentials.get(k)),
        changed_acls=frozenset(k for k in set(old.acls) | set(new.acls) if old.acls.get(k) != new.acls.get(k)),
        changed_client_quotas=frozenset(
            k for k in set(old.client_quotas) | set(new.client_quotas)
            if old.client_quotas.get(k) != new.client_quotas.get(k)),
        changed_delegation_tokens=frozenset(
            k for k in set(old.delegation_tokens) | set(new.delegation_tokens)
            if old.delegation_tokens.get(k) != new.delegation_tokens.get(k)),
    )


def _ignore(delta: MetadataDelta, record: Any) -> None:
    return None


_HANDLERS: dict[type, Any] = {
    TopicRecord: MetadataDelta._replay_topic,
    PartitionRecord: MetadataDelta._replay_partition,
    PartitionChangeRecord: MetadataDelta._replay_partition_change,
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ConfigRecord: MetadataDelta._replay_config,
    RegisterBrokerRecord: MetadataDelta._replay_register_broker,
    UnregisterBrokerRecord: MetadataDelta._replay_unregister_broker,
    FenceBrokerRecord: MetadataDelta._replay_fence,
    UnfenceBrokerRecord: MetadataDelta._replay_unfence,
    BrokerRegistrationChangeRecord: MetadataDelta._replay_registration_change,
    FeatureLevelRecord: MetadataDelta._replay_feature,
    ProducerIdsRecord: MetadataDelta._replay_producer_ids,
    ClearElrRecord: MetadataDelta._replay_clear_elr,
    UserScramCredentialRecord: MetadataDelta._replay_scram_credential,
    RemoveUserScramCredentialRecord: MetadataDelta._replay_remove_scram_credential,
    AccessControlEntryRecord: MetadataDelta._replay_acl,
    RemoveAccessControlEntryRecord: MetadataDelta._replay_remove_acl,
    ClientQuotaRecord: MetadataDelta._replay_client_quota,
    DelegationTokenRecord: MetadataDelta._replay_delegation_token,
    RemoveDelegationTokenRecord: MetadataDelta._replay_remove_delegation_token,
    NoOpRecord: _ignore,
    BeginTransactionRecord: _ignore,
    EndTransactionRecord: _ignore,
    AbortTransactionRecord: _ignore,
}
