"""The metadata quorum of a kbroker cluster: the :class:`QuorumController` on Raft (KRaft's shape).

Used when ``controller.quorum.voters`` names voters besides this node. This node runs a
:class:`~kbroker.controller.raft.client.RaftClient` (a voter when it is in the voter set, an observer
otherwise) over the ``__cluster_metadata`` log through a :class:`~kbroker.server.raft_manager.RaftManager`:

* **commit**: whenever the high watermark moves, the batches below it are read back from the log and
  replayed into the controller's committed image (``QuorumController.apply_committed``); listeners (replica
  manager, coordinators) hear of a change only once a majority holds it. Leader and standbys take the same
  path, so every node's image is the replay of the same committed log;
* **the active controller** is the Raft leader once its high watermark has passed the LeaderChange batch that
  opened its epoch (everything before is then applied). Only it plans writes; they are appended to the Raft
  log and a request that wrote is answered once :meth:`MetadataQuorum.wait_committed` sees them committed
  (``NOT_CONTROLLER`` if leadership was lost first, ``REQUEST_TIMED_OUT`` after the request timeout). A
  leader that loses its epoch forgets what it appended but did not commit (``QuorumController.renounce``);
* **bootstrap**: the first active controller of a new cluster commits the bootstrap feature levels;
* **registration**: a node with the broker role registers through the active controller: itself when it is
  active, else with a BrokerRegistration request to the leader, repeated until the committed image shows its
  incarnation (``broker.heartbeat.interval.ms`` apart).

Not yet here (issue 9): broker heartbeats and fencing, observers that are not voters' peers, snapshots,
dynamic voters.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from kbroker.controller.raft.client import RaftClient, RaftConfig
from kbroker.controller.raft.partition_log import PartitionRaftLog
from kbroker.controller.raft.store import FileElectionStore
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.broker_registration_request import BrokerRegistrationRequest
from kbroker.protocol.records import iter_batches
from kbroker.server.inter_node import NodeChannel, NodeRequestError
from kbroker.server.raft_manager import RaftManager

if TYPE_CHECKING:
    from kbroker.controller.quorum_controller import QuorumController

log = logging.getLogger(__name__)


class MetadataQuorum:
    """Drives the controller's Raft replica; see the module docstring."""

    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        config = controller.config
        self.node_id = controller.node_id
        self.voters = dict(controller.quorum_voters)
        self.raft_config = RaftConfig(
            election_timeout_ms=config.get_int("controller.quorum.election.timeout.ms"),
            fetch_timeout_ms=config.get_int("controller.quorum.fetch.timeout.ms"),
            election_backoff_max_ms=config.get_int("controller.quorum.election.backoff.max.ms"),
            request_timeout_ms=config.get_int("controller.quorum.request.timeout.ms"),
            retry_backoff_ms=config.get_int("controller.quorum.retry.backoff.ms"),
        )
        self.request_timeout_s = config.get_int("controller.quorum.request.timeout.ms") / 1000
        self.heartbeat_interval_s = config.get_int("broker.heartbeat.interval.ms") / 1000
        self._applied = 0  # the next offset to apply
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._leader_epoch_seen = -1
        self.manager: RaftManager | None = None
        self.client: RaftClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._registered = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the Raft replica (the controller listener must already be bound)."""
        c = self.controller
        loop = asyncio.get_running_loop()
        raft_log = PartitionRaftLog(c._log, self.node_id, sorted(self.voters))
        store = FileElectionStore(c.partition_dir, cluster_id=c.cluster_id)
        now = int(time.monotonic() * 1000)
        self.client = RaftClient(self.node_id, set(self.voters), raft_log, store, random.Random(), now,
                                 self.raft_config, on_commit=self._on_commit)
        self.manager = RaftManager(self.client, c.cluster_id, self.voters,
                                   request_timeout_ms=self.raft_config.request_timeout_ms)
        c.raft_append = self.manager.append
        c.raft_end_offset = lambda: raft_log.end_offset
        await self.manager.start()
        self._tasks.append(loop.create_task(self._watch_leadership(), name="metadata-quorum-leadership"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        if self.manager is not None:
            await self.manager.stop(graceful=True)
        self._fail_waiters(ErrorCode.NOT_CONTROLLER)
        self.controller.renounce()

    async def wait_caught_up(self, timeout_s: float) -> None:
        """Wait until a leader is known, its committed records are applied here and the cluster is bootstrapped
        (``metadata.version`` finalized). Raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            cl = self.client
            if (cl is not None and cl.leader_id >= 0 and cl.high_watermark > 0 and self._applied >= cl.high_watermark
                    and "metadata.version" in self.controller.image.features):
                return
            await asyncio.sleep(0.02)
        raise TimeoutError(f"the metadata quorum {sorted(self.voters)} did not elect a leader and commit the "
                           f"cluster's metadata within {timeout_s:.0f} s (are a majority of the voters running "
                           f"and reachable on their controller listeners?)")

    @property
    def leader_id(self) -> int:
        return self.client.leader_id if self.client is not None else -1

    # ------------------------------------------------------------------ commit
    def _on_commit(self, high_watermark: int) -> None:
        assert self.client is not None
        raft_log = self.client.log
        batches = []
        pos = self._applied
        while pos < high_watermark:
            info = raft_log.partition_log.read(pos, 8 * 1024 * 1024)
            got = False
            for batch in iter_batches(info.read_bytes()):
                if batch.base_offset >= high_watermark:
                    break
                batches.append(batch)
                pos = batch.last_offset + 1
                got = True
            if not got:
                break
        if batches:
            self.controller.apply_committed(batches)
            self._applied = pos
        self._wake_waiters()
        self._check_active()

    def _check_active(self) -> None:
        cl = self.client
        if cl is None:
            return
        c = self.controller
        if cl.is_leader and not c.is_active and self._applied > cl._epoch_start_offset \
                and self._applied >= cl.high_watermark:
            c.activate(cl.epoch)
            if "metadata.version" not in c.image.features:
                self._bootstrap()
        elif not cl.is_leader and c.is_active:
            c.renounce()
            self._fail_waiters(ErrorCode.NOT_CONTROLLER)

    def _bootstrap(self) -> None:
        from kbroker.controller.quorum_controller import BOOTSTRAP_FEATURES
        from kbroker.protocol.metadata_records import FeatureLevelRecord

        try:
            self.controller._commit([FeatureLevelRecord(name=n, feature_level=lvl)
                                     for n, lvl in BOOTSTRAP_FEATURES.items()])
        except KafkaError as exc:
            log.warning("bootstrapping the cluster metadata failed: %s", exc)

    async def _watch_leadership(self) -> None:
        """Leadership changes that no commit reports (a leader deposed by a newer epoch)."""
        while True:
            await asyncio.sleep(0.05)
            self._check_active()

    # ------------------------------------------------------------------ waiting for commits
    async def wait_committed(self, offset: int | None = None) -> None:
        """Wait until the record at ``offset`` (default: the last this controller appended) is committed and
        applied here. Raises ``KafkaError(NOT_CONTROLLER)`` if leadership is lost first,
        ``KafkaError(REQUEST_TIMED_OUT)`` after ``controller.quorum.request.timeout.ms``."""
        if offset is None:
            offset = self.controller.last_appended_offset
        if offset < self._applied:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.request_timeout_s)
        except asyncio.TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the metadata quorum did not commit the write in time") \
                from None
        finally:
            self._waiters = [(o, f) for o, f in self._waiters if f is not fut]

    def _wake_waiters(self) -> None:
        for off, fut in self._waiters:
            if off < self._applied and not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, code: ErrorCode) -> None:
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(KafkaError(code, "leadership of the metadata quorum was lost"))

    # ------------------------------------------------------------------ broker registration
    async def register(self, endpoints: list[Any]) -> None:
        """Register this node as a broker through the active controller, until the committed image shows it."""
        c = self.controller
        channels: dict[int, NodeChannel] = {}
        try:
            while True:
                reg = c.image.brokers.get(self.node_id)
                if reg is not None and reg.incarnation_id == c.incarnation_id and not reg.fenced:
                    self._registered.set()
                    return
                leader = self.leader_id
                try:
                    if c.is_active:
                        c.register_broker(endpoints)
                        await self.wait_committed()
                    elif leader >= 0 and leader in self.voters:
                        ch = channels.get(leader)
                        if ch is None:
                            host, port = self.voters[leader]
                            ch = channels[leader] = NodeChannel(leader, host, port, f"kbroker-{self.node_id}")
                        req = BrokerRegistrationRequest(
                            broker_id=self.node_id, cluster_id=c.cluster_id, incarnation_id=c.incarnation_id,
                            listeners=[BrokerRegistrationRequest.Listener(
                                name=e.listener, host=e.host, port=e.port, security_protocol=e.security_protocol)
                                for e in endpoints],
                            features=[], rack=c.config.get("broker.rack").strip() or None,
                            is_migrating_zk_broker=False, log_dirs=c._data_dir_ids(), previous_broker_epoch=-1)
                        resp = await ch.request(ApiKey.BROKER_REGISTRATION, 4, req, self.request_timeout_s)
                        if resp.error_code:
                            log.info("broker registration with controller %d: %s", leader,
                                     ErrorCode(resp.error_code).name)
                except (KafkaError, NodeRequestError) as exc:
                    log.info("broker registration of node %d not done yet: %s", self.node_id, exc)
                await asyncio.sleep(self.heartbeat_interval_s)
        finally:
            for ch in channels.values():
                await ch.close()
