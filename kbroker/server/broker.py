"""The broker process: metadata (controller), logs, replica manager, listeners and periodic tasks.

Start-up order: the controller formats the data directories on first start and replays
``__cluster_metadata`` into the metadata image; the log manager loads (and, after an unclean shutdown,
recovers) every partition log; the replica manager applies the image; then the listeners open.
Shutdown (SIGTERM/SIGINT) closes the listeners, flushes every log, writes the checkpoints and the
clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from kbroker.config import BrokerConfig, Listener
from kbroker.server.apis import Apis
from kbroker.server.network import KafkaConnection
from kbroker.server.gc_policy import freeze_long_lived
from kbroker.server.fetch_session import FetchSessionCache
from kbroker.server.log_dir_mover import LogDirMover
from kbroker.server.replica_manager import ReplicaManager

if TYPE_CHECKING:
    from kbroker.controller.image import MetadataImage

log = logging.getLogger(__name__)

#: how long one step of :meth:`Broker.stop` may wait (for tasks to end, for other nodes) before it is left behind
STOP_STEP_TIMEOUT_S = 10.0


def _awaiting(task: asyncio.Future) -> str:
    """Where a pending task waits: the chain of coroutine frames it is suspended in, innermost last."""
    coro = getattr(task, "get_coro", lambda: None)()
    where = []
    while coro is not None and len(where) < 12:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            where.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})")
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if isinstance(nxt, asyncio.Task):
            where.append(f"task {nxt.get_name()}")
            coro = nxt.get_coro()
        else:
            coro = nxt if hasattr(nxt, "cr_frame") or hasattr(nxt, "gi_frame") else None
    return " -> ".join(where) or "unknown"


async def _stop_step(name: str, step: Any, timeout_s: float = STOP_STEP_TIMEOUT_S) -> None:
    """Await one shutdown step for at most ``timeout_s``; a step that fails or hangs is logged (once, at WARN, with
    where it waits) and the shutdown goes on."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        log.warning("shutdown: stopping %s took more than %.0f s; going on without it (waiting in %s)",
                    name, timeout_s, _awaiting(task))
        task.cancel()
        return
    if not task.cancelled() and task.exception() is not None:
        log.warning("shutdown: stopping %s failed: %r", name, task.exception())


#: how long a node of a cluster waits at start-up for its metadata quorum to elect a leader and commit
QUORUM_STARTUP_TIMEOUT_S = 120.0
#: how long a stopping broker of a cluster waits for the active controller to move its leaderships away
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0
#: a TLS client must complete its handshake within this time (the connection is closed otherwise)
TLS_HANDSHAKE_TIMEOUT_S = 10.0

class ListenerBindError(Exception):
    """A listener's address cannot be bound (in use, not an address of this machine, no permission)."""


CONFIG_RESOURCE_TOPIC = 2
CONFIG_RESOURCE_BROKER = 4


class Broker:
    """One kbroker node, in the roles of ``process.roles`` (Kafka 4.x): ``broker,controller`` (combined; the
    embedded default), ``controller`` (a voter of the metadata quorum only: no client listener, no partitions, no
    coordinators) or ``broker`` (serves clients and partitions, follows the metadata log as an observer of the
    quorum named by ``controller.quorum.voters`` and registers with its active controller)."""

    def __init__(self, config: BrokerConfig) -> None:
        from kbroker.controller.quorum_controller import QuorumController
        from kbroker.coordinator.group.service import GroupCoordinator
        from kbroker.coordinator.transaction.service import TransactionCoordinator
        from kbroker.server.handlers.write_txn_markers import send_marker
        from kbroker.storage.log_manager import LogManager

        self.config = config
        self.node_id = config.node_id
        #: effective topic configs resolved for one committed metadata image (topic_config_int)
        self._config_cache_image: Any = None
        self._config_cache: dict[str, dict[str, str]] = {}
        #: this node serves clients and hosts partitions (``broker`` in ``process.roles``)
        self.is_broker = "broker" in config.process_roles
        self.controller = QuorumController(config)
        #: the controller on Raft when ``controller.quorum.voters`` names other nodes (else None: a quorum of one)
        self.metadata_quorum: Any = None
        if self.controller.raft_mode:
            from kbroker.server.metadata_quorum import MetadataQuorum

            self.metadata_quorum = MetadataQuorum(self.controller)
        self.log_manager = LogManager(
            config.log_dirs, self.default_log_config(),
            producer_id_expiration_ms=config.get_int("producer.id.expiration.ms"),
            producer_id_expiration_check_interval_ms=config.get_int("producer.id.expiration.check.interval.ms"))
        self.replica_manager = ReplicaManager(self)
        #: AlterReplicaLogDirs moves in progress
        self.log_dir_mover = LogDirMover(self.log_manager)
        #: incremental fetch sessions (KIP-227)
        self.fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
        from kbroker.server.replication_quota import ReplicationQuotas

        #: the leader and follower replication throttles (KIP-73), following the committed metadata once partitions
        #: are hosted (_start_partitions)
        self.replication_quotas = ReplicationQuotas.from_config(config)
        from kbroker.server.client_quotas import ClientQuotas

        #: the client quotas (KIP-13/55/124/219/599), following the committed metadata (start)
        self.client_quotas = ClientQuotas.from_config(config)
        from kbroker.server.client_telemetry import ClientTelemetry

        #: client instances and their pushed metrics (KIP-714: GetTelemetrySubscriptions, PushTelemetry)
        self.client_telemetry = ClientTelemetry(self.controller)
        self.group_coordinator = GroupCoordinator.for_broker(self)
        from kbroker.coordinator.share.service import ShareCoordinator
        from kbroker.server.share.manager import SharePartitionManager
        from kbroker.server.share.persister import SharePersister

        #: durable share-partition state in __share_group_state (KIP-932 share coordinator)
        self.share_coordinator = ShareCoordinator.for_broker(self)
        #: share partitions and share sessions of share groups (KIP-932). A member's acquired records are released
        #: when its share session ends (epoch -1, after that request's acknowledgements; or its connection
        #: closes) or their locks expire, never because its group heartbeat left: the leave heartbeat and the
        #: last ShareAcknowledge are sent together, and the acknowledgements must still apply
        self.share_persister = SharePersister(self.share_coordinator, self)
        self.share_partitions = SharePartitionManager.for_broker(self, self.share_persister)
        self.group_coordinator.share_group_deleted_hook = self._share_group_deleted
        self.group_coordinator.share_state_initializer = self._initialize_share_state
        self._share_state_tasks: set[asyncio.Task[None]] = set()
        #: markers for partitions led by other brokers, one WriteTxnMarkers per broker (a cluster only)
        self.marker_sender: Any = None
        #: transaction verification with a coordinator on another broker (a cluster only, KIP-890)
        self.txn_verifier: Any = None
        if self.metadata_quorum is not None:
            from kbroker.server.handlers.write_txn_markers import TransactionMarkerSender
            from kbroker.server.txn_verification import RemoteTxnVerifier

            self.marker_sender = TransactionMarkerSender(self)
            self.txn_verifier = RemoteTxnVerifier(self)
        self.transaction_coordinator = TransactionCoordinator.for_broker(
            self, lambda *args: send_marker(self, *args))
        self.apis = Apis(self)
        self.connections: set[KafkaConnection] = set()
        from kbroker.server.network import ConnectionLimits

        self.connection_limits = ConnectionLimits(config)
        self.servers: list[asyncio.AbstractServer] = []
        from kbroker.security.listener import ListenerSecurity

        #: listener name -> ListenerSecurity; built before anything is formatted or bound, so a TLS or SASL setting
        #: that cannot be used stops the start with nothing written
        self.listener_security: dict[str, Any] = {lst.name: ListenerSecurity.of(config, lst.name)
                                                   for lst in config.listeners}
        self.zero_copy = True
        self.stats_sendfile_bytes = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.bound_ports: dict[str, int] = {}
        self.log_cleaner: Any = None
        self.metrics: Any = None  # kbroker.server.metrics.BrokerMetrics when metrics.port is set
        from kbroker.storage.dir_lock import DirectoryLocks

        self.dir_locks = DirectoryLocks()
        from kbroker.server.authorizer import load_authorizer

        #: ``authorizer.class.name`` (None: every operation is allowed, Kafka's default without an authorizer)
        self.authorizer = load_authorizer(config.props)
        #: set when the broker cannot go on (its metadata directory or every log directory failed)
        self.fatal_error: asyncio.Future[str] | None = None
        self.controller.failure_channel = self.log_manager.failure_channel
        self.log_manager.failure_channel.add_listener(self._on_log_dir_failure)

    # ---- configuration helpers ----
    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config defaults derived from the broker's ``log.*`` keys (Kafka's synonyms)."""
        from kbroker.storage.config import TOPIC_CONFIG_DEFAULTS, topic_defaults_from_broker

        props = dict(TOPIC_CONFIG_DEFAULTS)
        props.update(topic_defaults_from_broker(self.broker_props()))
        return props

    def broker_props(self) -> dict[str, str]:
        """The broker's effective configs as set: ``server.properties`` overlaid with the dynamic broker configs
        (cluster default, then this node's) once the metadata image is loaded."""
        from kbroker.controller.broker_configs import effective_broker_props

        image = getattr(self.controller, "_image", None)
        if image is None:
            return dict(self.config.props)
        return effective_broker_props(self.config.props, image.broker_configs(), image.broker_configs(self.node_id))

    def default_log_config(self) -> Any:
        from kbroker.storage.config import LogConfig

        return LogConfig.from_props(self.topic_defaults())

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The dynamic configs of group ``group_id`` (ConfigResource GROUP, as set by IncrementalAlterConfigs):
        only what the group overrides; the share partitions fall back to the broker's ``group.share.*``."""
        from kbroker.controller.group_configs import GROUP_RESOURCE

        return dict(self.controller.image.configs.get((GROUP_RESOURCE, group_id), {}))

    def topic_configs(self, topic: str, image: MetadataImage | None = None) -> dict[str, str]:
        """Effective topic configs: broker-derived defaults overlaid with the topic's own ConfigRecords."""
        image = image or self.controller.image
        props = self.topic_defaults()
        props.update(image.configs.get((CONFIG_RESOURCE_TOPIC, topic), {}))
        return props

    def log_config_for(self, topic: str, image: MetadataImage | None = None) -> Any:
        from kbroker.storage.config import LogConfig

        return LogConfig.from_props(self.topic_configs(topic, image))

    def topic_config_int(self, topic: str, key: str) -> int:
        """One effective topic config as an int (0 when unset), for the request paths (``max.message.bytes``
        per produced partition, ``min.insync.replicas`` per acks=all append): resolved once per committed
        metadata image and topic, not rebuilt for every request."""
        image = self.controller.image
        if self._config_cache_image is not image:
            self._config_cache_image = image
            self._config_cache = {}
        props = self._config_cache.get(topic)
        if props is None:
            props = self._config_cache[topic] = self.topic_configs(topic, image)
        return int(props.get(key, "0"))

    def _apply_config_changes(self, old: MetadataImage | None, new: MetadataImage, changes: Any) -> None:
        """Metadata listener: give live logs their new config when ConfigRecords were replayed (a topic's own
        overrides, or dynamic broker configs, which change every topic's defaults)."""
        changed = getattr(changes, "changed_configs", ())
        if not changed:
            return
        if any(rtype == CONFIG_RESOURCE_BROKER for rtype, _ in changed):
            topics = {plog.topic for plog in self.log_manager.all_logs()}
        else:
            topics = {name for rtype, name in changed if rtype == CONFIG_RESOURCE_TOPIC}
        for topic in topics:
            if topic in new.topics_by_name:
                self.log_manager.update_topic_config(topic, self.log_config_for(topic, new))

    def advertised_listener(self, name: str) -> Listener | None:
        for lst in self.config.advertised_listeners:
            if lst.name == name:
                port = lst.port or self.bound_ports.get(name, 0)
                return Listener(lst.name, lst.host, port)
        return None

    # ---- lifecycle ----
    def _on_log_dir_failure(self, log_dir: Any, reason: str) -> None:
        """A log directory went offline (maybe from a flush thread): the broker goes down when it was the
        metadata directory or the last one online, as Kafka does."""
        import os

        metadata_dir = os.path.abspath(self.config.metadata_log_dir)
        if str(log_dir) == metadata_dir:
            why = f"the metadata log directory {log_dir} failed ({reason})"
        elif not self.log_manager.online_log_dirs():
            why = f"every log directory is offline (last: {log_dir}: {reason})"
        else:
            return
        fut = self.fatal_error
        if fut is not None and not fut.done():
            fut.get_loop().call_soon_threadsafe(lambda: fut.done() or fut.set_result(why))

    async def start(self) -> None:
        self.fatal_error = asyncio.get_running_loop().create_future()
        # One process per data directory (Kafka's .lock): taken before anything is written or formatted.
        self.dir_locks.acquire([*self.config.log_dirs, self.config.metadata_log_dir])
        self.controller.startup()
        self._follow_acls()
        controller_names = {n.upper() for n in self.config.get_list("controller.listener.names")}
        if self.metadata_quorum is not None:
            # The quorum first: its peers must reach this node's controller listener before anything else can
            # start, and nothing below may look at metadata that the quorum has not committed.
            for lst in self.config.listeners:
                if lst.name in controller_names:
                    await self._bind(lst)
            await self.metadata_quorum.start()
            await self.metadata_quorum.wait_caught_up(QUORUM_STARTUP_TIMEOUT_S)
        await asyncio.to_thread(self.log_manager.startup)
        image = self.controller.image

        def known(topic: str, partition: int, topic_id: bytes | None) -> bool:
            t = image.topics_by_name.get(topic)
            return t is not None and partition in t.partitions and (topic_id is None or topic_id == t.topic_id)

        self.log_manager.mark_strays(known)
        cluster_broker = self.is_broker and self.metadata_quorum is not None
        if self.is_broker and not cluster_broker:
            self._start_partitions()
        self.client_quotas.apply_image(self.controller.image)
        self.controller.add_listener(self.client_quotas.on_metadata_update)
        self.connection_limits.apply_image(self.controller.image)
        self.controller.add_listener(self.connection_limits.on_metadata_update)
        freeze_long_lived("start-up")  # partitions loaded at start-up stay out of full collections
        loop = asyncio.get_running_loop()
        await self._start_metrics()
        deferred = []
        for lst in self.config.listeners:
            if lst.name not in self.bound_ports:
                # a broker of a cluster serves clients only once registered (below), as Kafka's brokers do
                await self._bind(lst, start_serving=not cluster_broker)
                if cluster_broker:
                    deferred.append(self.servers[-1])
        from kbroker.controller.image import Endpoint

        endpoints = [Endpoint(lst.name, lst.host, lst.port,
                              self.controller._security_protocol(lst.name))
                     for lst in (self.advertised_listener(x.name) for x in self.config.advertised_listeners) if lst]
        if self.metadata_quorum is not None:
            if self.is_broker:
                self._tasks.append(loop.create_task(self.metadata_quorum.broker_lifecycle(endpoints)))
                # Until this incarnation is registered (a previous one may still hold a live session: the
                # controller answers DUPLICATE_BROKER_REGISTRATION until it expires, then fences it and moves its
                # leaderships and ISR memberships away) the image may name this broker a leader or in-sync
                # replica of data a wiped directory no longer has: nothing is hosted or served before that.
                await self.metadata_quorum.wait_registered()
                self._start_partitions()
                self._start_replication()
                for server in deferred:
                    await server.start_serving()
        elif any(lst.port == 0 for lst in self.config.advertised_listeners):
            # ephemeral ports are known only now: register the endpoints clients must use
            self.controller.register_broker(endpoints)
        self._tasks.append(loop.create_task(self._periodic()))
        self._tasks.append(loop.create_task(self._sweep_connections()))
        self._tasks.append(loop.create_task(self._clean_logs()))
        ports = ", ".join(f"{k}:{v}" for k, v in self.bound_ports.items())
        log.info("started (kbroker node %d, cluster %s, listeners %s)", self.node_id,
                 self.controller.image.cluster_id, ports)

    def _follow_acls(self) -> None:
        """kbroker's ACL authorizer (``authorizer.class.name`` naming ``StandardAuthorizer``) holds the ACLs of the
        committed metadata image: loaded now, then changed by every committed change of ``MetadataImage.acls``
        (as Kafka's ``AclPublisher`` feeds its authorizer). Another authorizer keeps its own rules."""
        from kbroker.security.acl import StandardAuthorizer

        authorizer = self.authorizer
        if not isinstance(authorizer, StandardAuthorizer):
            return
        authorizer.load(self.controller.image.acls)

        def on_update(old: Any, new: Any, changes: Any) -> None:
            if changes.changed_acls:
                authorizer.update(new.acls, changes.changed_acls)

        self.controller.add_listener(on_update)

    def _share_group_deleted(self, group_id: str, partitions: dict[bytes, frozenset[int]]) -> None:
        """DeleteGroups removed a share group: its share state goes too (after the group's records are written):
        the states kept here, and those of its initialized ``partitions`` wherever they are kept."""
        loop = asyncio.get_running_loop()
        loop.call_soon(self.share_partitions.forget_group, group_id)

        async def delete_elsewhere() -> None:
            for tid, ps in sorted(partitions.items()):
                for p in sorted(ps):
                    try:
                        await self.share_persister.delete(group_id, tid, p)
                    except Exception as exc:  # noqa: BLE001 - KafkaError, the node gone: the state stays
                        log.info("deleting share state of group %s, partition %d: %s", group_id, p, exc)

        if partitions and self.share_coordinator.topic_exists():
            task = loop.create_task(delete_elsewhere())
            self._share_state_tasks.add(task)
            task.add_done_callback(self._share_state_tasks.discard)

    async def _initialize_share_state(self, group_id: str,
                                      partitions: dict[bytes, frozenset[int]]) -> dict[bytes, frozenset[int]]:
        """The group coordinator's share-state initializer: InitializeShareGroupState for each partition without a
        state (:meth:`SharePersister.initialize`); the partitions that have one now."""
        done: dict[bytes, frozenset[int]] = {}
        for tid, ps in sorted(partitions.items()):
            ok = [p for p in sorted(ps) if await self.share_persister.initialize(group_id, tid, p)]
            if ok:
                done[tid] = frozenset(ok)
        return done

    def _start_partitions(self) -> None:
        """Host the partitions the image assigns to this broker, and the coordinators on them."""
        self.replica_manager.apply_image(self.controller.image)
        self.controller.add_listener(self.replica_manager.on_metadata_update)
        self.controller.add_listener(self._apply_config_changes)
        self.replication_quotas.apply_image(self.controller.image)
        self.controller.add_listener(self.replication_quotas.on_metadata_update)  # the throttles (KIP-73)
        self.group_coordinator.startup()  # loads __consumer_offsets partitions; follows metadata changes
        self.transaction_coordinator.startup()  # loads __transaction_state; finishes prepared transactions
        self.share_coordinator.startup()  # loads __share_group_state (share partitions' durable state)

    def _start_replication(self) -> None:
        """Followers fetch from their leaders; leaders send ISR changes to the active controller (a cluster)."""
        from kbroker.server.alter_partition_manager import AlterPartitionManager
        from kbroker.server.replica_fetcher import FetcherSettings, ReplicaFetcherManager

        channels = self.inter_broker_channels(f"kbroker-{self.node_id}-replica-fetcher")
        fetchers = ReplicaFetcherManager(self.node_id, channels, lambda: self.controller.image, self.broker_epoch,
                                         FetcherSettings.from_config(self.config),
                                         follower_quota=self.replication_quotas.follower)
        alter = AlterPartitionManager(self.node_id, self.broker_epoch, self._send_alter_partition,
                                      self._broker_epoch_of)
        self.replica_manager.start_replication(fetchers, alter)

    def _broker_epoch_of(self, node_id: int) -> int:
        reg = self.controller.image.brokers.get(node_id)
        return reg.broker_epoch if reg is not None else -1

    def broker_epoch(self) -> int:
        """This broker's epoch: its registration's, once the committed image shows this incarnation (else -1)."""
        reg = self.controller.image.brokers.get(self.node_id)
        if reg is None or reg.incarnation_id != self.controller.incarnation_id:
            return -1
        return reg.broker_epoch

    async def _send_alter_partition(self, request: Any) -> Any:
        """An AlterPartition to the active controller: in-process when it is this node."""
        from kbroker.protocol.api_keys import ApiKey
        from kbroker.server.alter_partition_manager import ALTER_PARTITION_VERSION
        from kbroker.server.handlers.alter_partition import alter_partition
        from kbroker.server.inter_node import NodeRequestError

        mq = self.metadata_quorum
        if self.controller.is_active:
            return await alter_partition(self, request)
        leader = mq.leader_id
        if leader < 0:
            raise NodeRequestError("no active controller known")
        return await mq._controller_channel(leader).request(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, request,
                                                          mq.request_timeout_s)

    @functools.cached_property
    def inter_broker_ssl_context(self) -> Any:
        """The TLS context of this node's connections to other brokers (None: the inter-broker listener is not a
        TLS one); built once."""
        from kbroker.security.listener import client_ssl_context

        return client_ssl_context(self.config, self.config.get("inter.broker.listener.name"))

    @functools.cached_property
    def inter_broker_sasl(self) -> Any:
        """This broker's SASL credentials on a SASL inter-broker listener (``sasl.mechanism.inter.broker.protocol``
        and the listener's JAAS username / password), None otherwise."""
        from kbroker.security.listener import client_sasl

        return client_sasl(self.config, self.config.get("inter.broker.listener.name"),
                           "sasl.mechanism.inter.broker.protocol")

    def inter_broker_channels(self, client_id: str) -> Any:
        """Channels to the other brokers on ``inter.broker.listener.name`` (TLS and SASL as that listener is)."""
        from kbroker.server.inter_node import BrokerChannels

        return BrokerChannels(client_id, self.config.get("inter.broker.listener.name"), self.inter_broker_ssl_context,
                              self.inter_broker_sasl)

    async def _bind(self, lst: Any, start_serving: bool = True) -> None:
        loop = asyncio.get_running_loop()
        security = self.listener_security[lst.name]
        tls: dict[str, Any] = {}
        if security.ssl_context is not None:
            tls = {"ssl": security.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        try:
            server = await loop.create_server(
                lambda name=lst.name: KafkaConnection(self, name), host=lst.host or None, port=lst.port,
                reuse_address=True, backlog=1024, start_serving=start_serving, **tls)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).rsplit(": ", 1)[-1].lower()
            raise ListenerBindError(f"listener {lst.name} cannot bind {lst.host or '0.0.0.0'}:{lst.port}: "
                                    f"{reason}") from None
        self.servers.append(server)
        sock = server.sockets[0]
        self.bound_ports[lst.name] = sock.getsockname()[1]

    @property
    def controller_id(self) -> int:
        """The controller id for Metadata / DescribeCluster. A quorum of one: this node. In a cluster this node
        too, as Kafka's brokers name any live broker: admin requests for the controller that reach a standby are
        forwarded to the active one (so a client never waits on a dead controller); -1 while no leader is known."""
        if self.metadata_quorum is not None and self.metadata_quorum.leader_id < 0:
            return -1
        return self.node_id

    async def _periodic(self) -> None:
        """Flush by time, retention, checkpoints, purge of deleted segments, and the sweep of expired delegation
        tokens (every ``delegation.token.expiry.check.interval.ms`` on the active controller, KIP-48)."""
        retention_interval = self.config.get_int("log.retention.check.interval.ms") / 1000
        checkpoint_interval = self.config.get_int("log.flush.offset.checkpoint.interval.ms") / 1000
        token_interval = self.config.get_int("delegation.token.expiry.check.interval.ms") / 1000
        tokens_enabled = bool(self.config.get("delegation.token.secret.key"))
        last_retention = last_checkpoint = last_token_sweep = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            now_ms = int(time.time() * 1000)
            try:
                self.log_manager.flush_dirty(now_ms)
                mono = time.monotonic()
                if mono - last_retention >= retention_interval:
                    last_retention = mono
                    self.log_manager.cleanup(now_ms)
                if mono - last_checkpoint >= checkpoint_interval:
                    last_checkpoint = mono
                    await asyncio.to_thread(self.log_manager.checkpoint)
                    self.client_quotas.expire(3600.0)  # rates of quota entities idle for an hour (Kafka's sensors)
                if tokens_enabled and mono - last_token_sweep >= token_interval:
                    last_token_sweep = mono
                    if self.controller.image.delegation_tokens:
                        self.controller.sweep_expired_delegation_tokens()
            except Exception:
                log.exception("periodic log maintenance failed")

    async def _sweep_connections(self) -> None:
        """Close idle connections and those trickling a request (``ConnectionLimits.sweep``)."""
        limits = self.connection_limits
        interval = max(0.05, min(1.0, min(limits.idle_ms, limits.read_timeout_ms) / 4000))
        while True:
            await asyncio.sleep(interval)
            try:
                limits.sweep(self.connections)
            except Exception:
                log.exception("connection sweep failed")

    async def _start_metrics(self) -> None:
        from kbroker.server.metrics import BrokerMetrics, metrics_port

        port = metrics_port(self)
        if port is None:
            return
        from prometheus_client import disable_created_metrics

        disable_created_metrics()
        self.metrics = BrokerMetrics(self)
        self.metrics.instrument(self.apis)
        await self.metrics.start(self.metrics_host(), port)

    def metrics_host(self) -> str:
        """Where the metrics endpoint binds: ``metrics.host``, else the host of the first listener (loopback for
        the embedded default), so metrics are never exposed wider than the broker itself; a listener bound to
        every interface (empty host or 0.0.0.0) means every interface here too."""
        host = self.config.get("metrics.host").strip()
        if host:
            return host
        listeners = self.config.listeners
        first = listeners[0].host if listeners else ""
        return first if first not in ("", "0.0.0.0", "::") else "0.0.0.0"

    async def _clean_logs(self) -> None:
        """The log cleaner: pick the filthiest compacted log, clean it in a worker thread, swap the result in
        here on the event loop (``kbroker.storage.cleaner``); sleep ``log.cleaner.backoff.ms`` when idle."""
        from kbroker.storage.cleaner import CleanerConfig, LogCleaner

        self.log_cleaner = cleaner = LogCleaner(self.log_manager, CleanerConfig.from_props(self.broker_props()))
        while True:
            cleaner.config = CleanerConfig.from_props(self.broker_props())  # dynamic log.cleaner.* keys
            task = None
            try:
                ltc = cleaner.grab_filthiest(int(time.time() * 1000))
                if ltc is None:
                    await asyncio.sleep(max(cleaner.config.backoff_ms, 10) / 1000)
                    continue
                task = cleaner.prepare(ltc, int(time.time() * 1000))
                result = await asyncio.to_thread(cleaner.clean, task)
                task = None
                cleaner.install(result)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner round failed")
                if task is not None:
                    cleaner.discard(task)
                await asyncio.sleep(max(cleaner.config.backoff_ms, 10) / 1000)

    def abort_start(self) -> None:
        """Undo a start that failed: close listeners and give the directory locks back. Nothing is flushed or
        checkpointed, so the next start recovers as after a crash."""
        for server in self.servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        self.dir_locks.release()

    async def stop(self) -> None:
        """Shut down: controlled shutdown, the quorum, listeners and connections, replication, coordinators, then
        flush and checkpoint every log. Each step that waits on other tasks or nodes is bounded
        (:data:`STOP_STEP_TIMEOUT_S`): one that hangs is logged once, with where it waits, and left behind, so a
        SIGTERM always ends with the logs flushed and the directories released."""
        if self.metadata_quorum is not None:
            if self.is_broker:
                # Kafka's controlled shutdown: fenced and leaderships moved while this node still answers
                await self.metadata_quorum.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
            # a leader resigns first (EndQuorumEpoch)
            await _stop_step("the metadata quorum", self.metadata_quorum.stop())
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
        if self.metrics is not None:
            await _stop_step("the metrics reporter", self.metrics.close())
        await _stop_step("replication", self.replica_manager.stop_replication())
        self.log_dir_mover.stop()
        if self.is_broker:
            self.transaction_coordinator.shutdown()
            self.share_coordinator.shutdown()
            self.group_coordinator.shutdown()
        await _stop_step("the share-state persister", self.share_persister.close())
        if self.marker_sender is not None:
            await _stop_step("the transaction marker sender", self.marker_sender.close())
        if self.txn_verifier is not None:
            await _stop_step("the transaction verifier", self.txn_verifier.close())
        self.log_manager.shutdown()
        self.controller.shutdown()
        self.dir_locks.release()
        self._stopped.set()
        log.info("stopped (kbroker node %d)", self.node_id)
