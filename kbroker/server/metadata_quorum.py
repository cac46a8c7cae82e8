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
* **forwarding**: a standby that receives a controller-bound request (CreateTopics, DeleteTopics,
  CreatePartitions, AlterConfigs, IncrementalAlterConfigs, AlterUserScramCredentials) forwards it to the active
  controller's listener of the same name and relays the answer, as Kafka's brokers do; so Metadata may name any
  live node (this one) as the controller, and clients never wait on a dead one;
* **producer ids**: blocks come from the active controller (AllocateProducerIds from a standby) and are used
  only once the quorum has committed them, so no id is handed out twice across a failover;
* **bootstrap**: the first active controller of a new cluster commits the bootstrap feature levels (and the
  SCRAM credentials its ``kbroker-storage format --add-scram`` wrote, ``kbroker.controller.bootstrap``);
* **registration**: a node with the broker role registers through the active controller: itself when it is
  active, else with a BrokerRegistration request to the leader, repeated until the committed image shows its
  incarnation (``broker.heartbeat.interval.ms`` apart);
* **heartbeats and fencing**: a registered broker sends BrokerHeartbeat to the leader every
  ``broker.heartbeat.interval.ms``; the active controller fences a broker that has not sent one for
  ``broker.session.timeout.ms`` (FenceBrokerRecord; its partitions move to another live in-sync replica or go
  leaderless) and unfences it at its next heartbeat or registration (leaderless partitions it holds return
  to it). Every broker gets a full session when a new controller becomes active.

* **controlled shutdown**: a broker that stops asks the active controller to fence it and move its
  leaderships first (:meth:`MetadataQuorum.controlled_shutdown`);
* **observers**: a node that is not in ``controller.quorum.voters`` (``process.roles=broker``) fetches the log
  from the leader without being counted for the high watermark.

* **snapshots** (KIP-630): every node, standby or active, writes a snapshot of its committed image
  (``<end offset>-<epoch>.checkpoint``) after ``metadata.log.max.record.bytes.between.snapshots`` bytes of committed
  records (or ``metadata.log.max.snapshot.interval.ms``), and drops the log below it once the log exceeds
  ``metadata.max.retention.bytes`` / ``.ms``. A node starts from its latest snapshot and the log after it; a node
  too far behind the leader's log start (a new or wiped node, a long outage) fetches the leader's snapshot
  (FetchSnapshot) and loads it.

* **voter changes** (KIP-853): AddRaftVoter / RemoveRaftVoter reach the leader (forwarded from any node) and
  it appends the new voter set to the log (:meth:`MetadataQuorum.add_voter`, :meth:`MetadataQuorum.remove_voter`);
  the answer comes once it is committed. The voters and their controller endpoints are then the log's, on every
  node (``controller.quorum.voters`` is only where a node starts from); a snapshot carries them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from kbroker.controller.quorum_controller import SUPPORTED_FEATURES
from kbroker.controller.raft.client import RaftClient, RaftConfig, VoterChangeError
from kbroker.controller.raft.log import Voter, VoterSet
from kbroker.controller.raft.partition_log import PartitionRaftLog
from kbroker.controller.raft.store import FileElectionStore
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.allocate_producer_ids_request import AllocateProducerIdsRequest
from kbroker.protocol.messages.broker_heartbeat_request import BrokerHeartbeatRequest
from kbroker.protocol.messages.broker_registration_request import BrokerRegistrationRequest
from kbroker.protocol.records import iter_batches
from kbroker.server.inter_node import NodeChannel, NodeRequestError
from kbroker.server.raft_manager import RaftManager
from kbroker.server.task_util import cancel_and_wait

if TYPE_CHECKING:
    from kbroker.controller.quorum_controller import QuorumController

log = logging.getLogger(__name__)

FENCING_CHECK_S = 0.1
"""How often the active controller looks for brokers whose session expired (a loop over the registered brokers)."""

STALL_REPORT_S = 1.0
"""A stall of the controller's event loop at least this long is logged (WARNING) when the fencing check sees it."""

#: client id prefix of requests a standby forwards to the active controller (never forwarded again)
FORWARDED_PREFIX = "kbroker-forward-"


class MetadataQuorum:
    """Drives the controller's Raft replica; see the module docstring."""

    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        config = controller.config
        self.node_id = controller.node_id
        #: ``controller.quorum.voters``: the voters until the log names others
        self.static_voters = dict(controller.quorum_voters)
        names = config.get_list("controller.listener.names")
        self.controller_listener = names[0].upper() if names else "CONTROLLER"
        from kbroker.security.listener import client_sasl, client_ssl_context

        #: TLS to the voters when the controller listener is a TLS one (the same ``ssl.*`` keys, per listener), SASL
        #: when it is a SASL one (``sasl.mechanism.controller.protocol``)
        self.ssl_context = client_ssl_context(config, self.controller_listener)
        self.sasl = client_sasl(config, self.controller_listener, "sasl.mechanism.controller.protocol")
        #: ``controller.quorum.bootstrap.servers`` under ids -1, -2, ... (where an observer with no voters asks)
        self.bootstrap = {-(i + 1): hp for i, hp in enumerate(controller.bootstrap_servers)}
        #: node endpoints learnt from the leader's Fetch answers (NodeEndpoints, KIP-853)
        self.learned_endpoints: dict[int, tuple[str, int]] = {}
        self.raft_config = RaftConfig(
            election_timeout_ms=config.get_int("controller.quorum.election.timeout.ms"),
            fetch_timeout_ms=config.get_int("controller.quorum.fetch.timeout.ms"),
            election_backoff_max_ms=config.get_int("controller.quorum.election.backoff.max.ms"),
            request_timeout_ms=config.get_int("controller.quorum.request.timeout.ms"),
            retry_backoff_ms=config.get_int("controller.quorum.retry.backoff.ms"),
        )
        self.request_timeout_s = config.get_int("controller.quorum.request.timeout.ms") / 1000
        self.heartbeat_interval_s = config.get_int("broker.heartbeat.interval.ms") / 1000
        self.session_timeout_ms = config.get_int("broker.session.timeout.ms")
        #: ``metadata.max.idle.interval.ms`` (KIP-835): the active controller commits a NoOpRecord when it has
        #: written nothing for this long, so every node sees the committed offset move (0: never)
        self.idle_interval_s = config.get_int("metadata.max.idle.interval.ms") / 1000
        self._applied = 0  # the next offset to apply
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._leader_epoch_seen = -1
        self.manager: RaftManager | None = None
        self.client: RaftClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: connections to other nodes: (node id, host, port, client id) -> channel, closed by stop()
        self._channels: dict[tuple[int, str, int, str], NodeChannel] = {}
        #: internal topics being created through the active controller (create_topic_soon)
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._closing = False
        self._shutting_down = False  # controlled shutdown began

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the Raft replica (the controller listener must already be bound)."""
        c = self.controller
        loop = asyncio.get_running_loop()
        raft_log = PartitionRaftLog(c._log, self.node_id, sorted(self.static_voters), snapshots=c.snapshots)
        store = FileElectionStore(c.partition_dir, cluster_id=c.cluster_id)
        now = int(time.monotonic() * 1000)
        self._applied = c.loaded_snapshot_end
        static = VoterSet.of([Voter(i, bytes(16), ((self.controller_listener, h, p),))
                              for i, (h, p) in self.static_voters.items()])
        self.client = RaftClient(self.node_id, static, raft_log, store, random.Random(), now,
                                 self.raft_config, on_commit=self._on_commit, on_snapshot=self._on_snapshot,
                                 bootstrap=tuple(sorted(self.bootstrap, reverse=True)),
                                 directory_id=self.own_voter().directory_id)
        self.manager = RaftManager(self.client, c.cluster_id, self.endpoint,
                                   request_timeout_ms=self.raft_config.request_timeout_ms,
                                   own_endpoint=self._own_controller_endpoint(),
                                   learned=self.learned_endpoints, ssl_context=self.ssl_context, sasl=self.sasl)
        c.raft_append = self.manager.append
        c.raft_end_offset = lambda: raft_log.end_offset
        await self.manager.start()
        self._tasks.append(loop.create_task(self._watch_leadership(), name="metadata-quorum-leadership"))
        self._tasks.append(loop.create_task(self._fence_stale_brokers(), name="metadata-quorum-fencing"))
        if c.config.get_bool("auto.leader.rebalance.enable"):
            self._tasks.append(loop.create_task(self._balance_partition_leaders(), name="metadata-quorum-balancing"))
        if self.idle_interval_s > 0:
            self._tasks.append(loop.create_task(self._write_no_ops(), name="metadata-quorum-no-op"))
        self._tasks.append(loop.create_task(self._announce_endpoints(), name="metadata-quorum-endpoints"))

    async def stop(self) -> None:
        self._closing = True
        pending = [*self._tasks, *self._creating.values()]
        for t in pending:
            t.cancel()
        for t in pending:
            await cancel_and_wait(t)
        self._tasks.clear()
        self._creating.clear()
        if self.manager is not None:
            await self.manager.stop(graceful=True)
        self._fail_waiters(ErrorCode.NOT_CONTROLLER)
        self.controller.renounce()
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

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
        other = self.manager.refused_by_other_cluster if self.manager is not None else []
        if other:
            raise TimeoutError(f"the metadata quorum {sorted(self.voters)} did not elect a leader and commit the "
                               f"cluster's metadata within {timeout_s:.0f} s: nodes {other} refused this node's "
                               f"requests with INCONSISTENT_CLUSTER_ID (this node is of cluster "
                               f"{self.controller.cluster_id}; give every node the same cluster.id)")
        raise TimeoutError(f"the metadata quorum {sorted(self.voters)} did not elect a leader and commit the "
                           f"cluster's metadata within {timeout_s:.0f} s (are a majority of the voters running "
                           f"and reachable on their controller listeners?)")

    @property
    def leader_id(self) -> int:
        return self.client.leader_id if self.client is not None else -1

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        """The voters in force and the ``(host, port)`` of their controller listener: the log's set (KIP-853),
        else ``controller.quorum.voters``."""
        if self.client is None:
            return dict(self.static_voters)
        out: dict[int, tuple[str, int]] = {}
        for v in self.client.voter_set.voters:
            eps = [e for e in v.endpoints if e[0].upper() == self.controller_listener] or list(v.endpoints)
            if eps:
                out[v.node_id] = (eps[0][1], eps[0][2])
            elif v.node_id in self.static_voters:
                out[v.node_id] = self.static_voters[v.node_id]
        return out

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        """The controller listener of ``node_id``: a voter's, a bootstrap server's (negative ids) or one the leader
        named in a Fetch answer."""
        return self.voters.get(node_id) or self.bootstrap.get(node_id) or self.learned_endpoints.get(node_id)

    def _own_controller_endpoint(self) -> tuple[str, int] | None:
        c = self.controller
        for e in c.config.listeners:
            if e.name.upper() == self.controller_listener:
                host = e.host or "localhost"
                return host, e.port
        return None

    def voter_directory_id(self, node_id: int) -> bytes:
        v = self.client.voter_set.get(node_id) if self.client is not None else None
        return v.directory_id if v is not None else bytes(16)

    # ------------------------------------------------------------------ voter changes (KIP-853)
    async def add_voter(self, voter_id: int, directory_id: bytes, listeners: list[tuple[str, str, int]],
                        timeout_s: float, wait_commit: bool = True) -> None:
        """On the leader: make observer ``voter_id`` a voter and wait until that is committed (or only appended,
        without ``wait_commit``: AddRaftVoter v1 ``ack_when_committed`` false). Raises
        ``KafkaError``: NOT_LEADER_OR_FOLLOWER, DUPLICATE_VOTER, REQUEST_TIMED_OUT (another change pending, or the
        node has not caught up, or no commit in time), INVALID_REQUEST (no listener)."""
        if not listeners:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the new voter names no listener")
        await self._change_voters(lambda cl, now: cl.add_voter(Voter(voter_id, directory_id, tuple(listeners)), now),
                                  timeout_s, wait_commit)

    async def remove_voter(self, voter_id: int, directory_id: bytes, timeout_s: float) -> None:
        """On the leader: remove voter ``voter_id`` (whose directory id must match when it is recorded) and wait
        until that is committed. Raises ``KafkaError``: NOT_LEADER_OR_FOLLOWER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT,
        INVALID_REQUEST (the last voter, or the leader of two)."""
        await self._change_voters(lambda cl, now: cl.remove_voter(voter_id, directory_id if any(directory_id)
                                                                    else None, now), timeout_s)

    async def update_voter(self, voter_id: int, directory_id: bytes, listeners: list[tuple[str, str, int]],
                           timeout_s: float) -> None:
        """On the leader: record a voter's new controller endpoints (UpdateRaftVoter) and wait until committed.
        Raises ``KafkaError`` (NOT_LEADER_OR_FOLLOWER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT, INVALID_REQUEST)."""
        if not listeners:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the voter names no listener")
        await self._change_voters(
            lambda cl, now: cl.update_voter(Voter(voter_id, directory_id, tuple(listeners)), now), timeout_s)

    def own_voter(self) -> Voter:
        """This node as a voter: its id, its metadata directory's id and its controller listener."""
        import os

        c = self.controller
        wanted = os.path.abspath(c.metadata_dir)
        dir_id = next((d_id for d, d_id in c.directory_ids.items() if os.path.abspath(d) == wanted), bytes(16))
        ep = self._own_controller_endpoint()
        if ep is not None and ep[0] in ("0.0.0.0", "::", "localhost"):
            ep = None  # a wildcard or default host says nothing about where the others reach this node
        return Voter(self.node_id, dir_id, ((self.controller_listener, ep[0], ep[1]),) if ep else ())

    async def _announce_endpoints(self) -> None:
        """A voter whose recorded controller endpoint (the log's voter set) is not the one it listens on now (it
        restarted with another address) asks the leader to record the new one (UpdateRaftVoter), every
        ``broker.heartbeat.interval.ms`` until it is."""
        from kbroker.protocol.messages.update_raft_voter_request import UpdateRaftVoterRequest

        while True:
            await asyncio.sleep(max(0.5, self.heartbeat_interval_s))
            cl = self.client
            if cl is None or cl.log.voters() is None or not cl.is_voter:
                continue  # static voters (controller.quorum.voters) are not in the log
            me = self.own_voter()
            recorded = cl.voter_set.get(self.node_id)
            if recorded is None or not me.endpoints or recorded.endpoints == me.endpoints:
                continue
            if any(recorded.directory_id) and recorded.directory_id != me.directory_id:
                continue  # another incarnation of this node id is the voter
            try:
                if cl.is_leader:
                    await self.update_voter(me.node_id, me.directory_id, list(me.endpoints), self.request_timeout_s)
                    continue
                leader = cl.leader_id
                if leader < 0 or self._applied < cl.high_watermark:
                    continue
                req = UpdateRaftVoterRequest(
                    cluster_id=self.controller.cluster_id, current_leader_epoch=cl.epoch, voter_id=me.node_id,
                    voter_directory_id=me.directory_id,
                    listeners=[UpdateRaftVoterRequest.Listener(name=n, host=h, port=p) for n, h, p in me.endpoints],
                    k_raft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(
                        min_supported_version=0, max_supported_version=1))
                resp = await self._controller_channel(leader).request(ApiKey.UPDATE_RAFT_VOTER, 0, req,
                                                                     self.request_timeout_s * 2)
                if resp.error_code:
                    log.info("UpdateRaftVoter to %d: %s", leader, ErrorCode(resp.error_code).name)
                else:
                    log.info("the leader %d recorded this voter's endpoints %s", leader, list(me.endpoints))
            except (KafkaError, NodeRequestError) as exc:
                log.info("announcing this voter's endpoints: %s", exc)

    async def _change_voters(self, change: Any, timeout_s: float, wait_commit: bool = True) -> None:
        cl = self.client
        if cl is None or self.manager is None or not cl.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is not the quorum's leader")
        deadline = time.monotonic() + timeout_s
        while True:  # a change right after the previous one (or the election) waits for that to commit
            try:
                offset = change(cl, int(time.monotonic() * 1000))
                if offset < 0:
                    return  # nothing to change
                break
            except VoterChangeError as exc:
                if exc.error != "REQUEST_TIMED_OUT" or time.monotonic() >= deadline:
                    raise KafkaError(ErrorCode[exc.error], str(exc)) from None
            await asyncio.sleep(0.05)
        self.manager.changed()
        if not wait_commit:
            return
        epoch = cl.epoch
        while cl.high_watermark <= offset:
            if not cl.is_leader or cl.epoch != epoch:  # the next leader may still commit it: describe the quorum
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership changed before the voter change "
                                                                   "was committed")
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the voter change was not committed in time")
            await asyncio.sleep(0.02)

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
            self._maybe_snapshot(sum(b.size for b in batches), batches[-1].max_timestamp)
        self._wake_waiters()
        self._check_active()

    def _maybe_snapshot(self, applied_bytes: int, last_contained_ms: int) -> None:
        c, cl = self.controller, self.client
        if cl is None or not c.snapshot_due(applied_bytes) or self._applied <= cl.log.log_start_offset:
            return
        try:
            epoch = cl.log.epoch_at(self._applied - 1)
            snap = cl.create_snapshot(self._applied, c.snapshot_bytes(epoch, last_contained_ms=last_contained_ms,
                                                                      voters=cl.log.voters_at(self._applied)))
            c.snapshot_written()
            log.info("metadata snapshot %s written (end offset %d, epoch %d)", c.snapshots.path(snap).name
                     if c.snapshots else "", *snap)
            if c.log_over_retention() and cl.delete_before_snapshot():
                log.info("metadata log now starts at offset %d (the snapshot)", cl.log.log_start_offset)
        except (OSError, ValueError) as exc:  # committed metadata is safe in the log; the next one can try again
            log.warning("writing a metadata snapshot at offset %d failed: %s", self._applied, exc)

    def _on_snapshot(self, snapshot_id: tuple[int, int]) -> None:
        """This replica's log was replaced by a snapshot fetched from the leader: load it."""
        self.controller.load_snapshot(snapshot_id)
        self._applied = snapshot_id[0]
        self.controller.snapshot_written()
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
        elif c.is_active and (not cl.is_leader or cl.epoch != c.leader_epoch):
            # deposed, or leader again in a later epoch without this loop seeing the change: what was appended
            # in the old epoch and not committed is forgotten either way
            c.renounce()
            self._fail_waiters(ErrorCode.NOT_CONTROLLER)
            self._check_active()

    def _bootstrap(self) -> None:
        """Commit the bootstrap metadata (feature levels, and the SCRAM credentials of ``format --add-scram``)."""
        try:
            self.controller._commit(self.controller.bootstrap_records())
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

    # ------------------------------------------------------------------ forwarding to the active controller
    async def forward(self, api_key: int, version: int, request: Any, listener: str,
                      principal: str | None = None) -> Any:
        """Send a controller-bound request (CreateTopics, DeleteTopics, ...) that reached this node to the active
        controller and return its answer, as Kafka's brokers forward admin requests to the controller: over the
        active controller's controller listener (``controller.quorum.voters``), so it works whether that node is
        combined or controller-only (``listener``: where the request came in, for the log). Raises
        ``KafkaError(NOT_CONTROLLER)`` when no active controller is known or reachable (the client retries).
        ``principal``: the client's principal, for a request whose answer depends on who asks (the delegation
        token APIs, as Kafka's EnvelopeRequest carries it); sent in the client id,
        ``kbroker-forward-<node id>/<principal>``, which the controller trusts only on its controller listener
        (:mod:`kbroker.server.delegation_tokens`)."""
        leader = self.leader_id
        ep = self.endpoint(leader) if leader >= 0 and leader != self.node_id else None
        if ep is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no active controller to forward to")
        host, port = ep
        suffix = f"/{principal}" if principal else ""
        ch = self._channel(leader, host, port, f"{FORWARDED_PREFIX}{self.node_id}{suffix}")
        try:
            return await ch.request(api_key, version, request, self.request_timeout_s * 2)
        except NodeRequestError as exc:
            log.debug("forwarding %s from listener %s to controller %d failed: %s", api_key, listener, leader, exc)
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"forwarding to controller {leader} failed: {exc}") from None

    def create_topic_soon(self, name: str, num_partitions: int, replication_factor: int,
                          configs: dict[str, str]) -> None:
        """Have the active controller create topic ``name`` (an internal topic a coordinator needs), with a
        CreateTopics forwarded in the background; at most one such request per topic at a time. Its outcome is
        only logged: the caller looks for the topic in the committed image."""
        if name in self._creating or self._closing:
            return
        from kbroker.protocol.messages import CreateTopicsRequest as Req

        req = Req(topics=[Req.CreatableTopic(name=name, num_partitions=num_partitions,
                                             replication_factor=replication_factor,
                                             configs=[Req.CreatableTopicConfig(name=k, value=v)
                                                      for k, v in sorted(configs.items())])],
                  timeout_ms=int(self.request_timeout_s * 1000))

        async def create() -> None:
            try:
                resp = await self.forward(ApiKey.CREATE_TOPICS, 5, req, "internal")
                err = resp.topics[0].error_code if resp.topics else ErrorCode.UNKNOWN_SERVER_ERROR
                if err not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.info("creating %s through the active controller: %s", name, ErrorCode(err).name)
            except KafkaError as exc:
                log.info("creating %s through the active controller: %s", name, exc)
            finally:
                self._creating.pop(name, None)

        self._creating[name] = asyncio.get_running_loop().create_task(create(), name=f"create-{name}")

    # ------------------------------------------------------------------ producer ids
    async def allocate_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids committed by the quorum -> (first id, size): from this node's controller when
        it is active, else with AllocateProducerIds to the leader (KIP-730). Raises ``KafkaError``."""
        c = self.controller
        if c.is_active:
            block = c.allocate_producer_ids()
            await self.wait_committed()
            return block
        leader = self.leader_id
        reg = c.image.brokers.get(self.node_id)
        if leader < 0 or self.endpoint(leader) is None or reg is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "no active controller to allocate producer ids")
        try:
            resp = await self._controller_channel(leader).request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, AllocateProducerIdsRequest(
                broker_id=self.node_id, broker_epoch=reg.broker_epoch), self.request_timeout_s * 2)
        except NodeRequestError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"controller {leader}: {exc}") from None
        if resp.error_code:
            raise KafkaError(ErrorCode(resp.error_code), "allocating producer ids failed")
        return resp.producer_id_start, resp.producer_id_len

    # ------------------------------------------------------------------ broker registration and heartbeats
    async def broker_lifecycle(self, endpoints: list[Any]) -> None:
        """A broker's life with the active controller: register (BrokerRegistration, or directly when this node
        is active) until the committed image shows this incarnation, then send BrokerHeartbeat every
        ``broker.heartbeat.interval.ms``; register again when the controller answers STALE_BROKER_EPOCH or
        BROKER_ID_NOT_REGISTERED. Runs until cancelled."""
        while True:
            await self._register(endpoints)
            await self._heartbeat_until_stale()

    async def wait_registered(self) -> None:
        """Until the committed image holds this incarnation's registration (:meth:`broker_lifecycle` registers;
        while a previous incarnation's session lives the controller refuses it). Logs every 10 s while waiting."""
        c = self.controller
        started = last_log = time.monotonic()
        while True:
            reg = c.image.brokers.get(self.node_id)
            if reg is not None and reg.incarnation_id == c.incarnation_id:
                return
            if time.monotonic() - last_log >= 10:
                last_log = time.monotonic()
                log.info("broker %d not registered yet after %.0f s (a previous incarnation's session may still "
                         "be alive)", self.node_id, last_log - started)
            await asyncio.sleep(0.05)

    def _channel(self, node_id: int, host: str, port: int, client_id: str) -> NodeChannel:
        key = (node_id, host, port, client_id)
        ch = self._channels.get(key)
        if ch is None:
            ch = self._channels[key] = NodeChannel(node_id, host, port, client_id, ssl_context=self.ssl_context,
                                                   sasl=self.sasl)
        return ch

    def _controller_channel(self, leader: int) -> NodeChannel:
        """To a voter's controller listener (``controller.quorum.voters``)."""
        ep = self.endpoint(leader)
        if ep is None:
            raise NodeRequestError(f"no controller listener known for node {leader}")
        host, port = ep
        return self._channel(leader, host, port, f"kbroker-{self.node_id}")

    async def _register(self, endpoints: list[Any]) -> None:
        c = self.controller
        while True:
            reg = c.image.brokers.get(self.node_id)
            if reg is not None and reg.incarnation_id == c.incarnation_id and not reg.fenced:
                log.info("registered as broker %d (broker epoch %d) with the active controller %d",
                         self.node_id, reg.broker_epoch, self.leader_id)
                return
            leader = self.leader_id
            try:
                if self._shutting_down:
                    pass
                elif c.is_active:
                    c.register_broker(endpoints)
                    await self.wait_committed()
                elif leader >= 0 and self.endpoint(leader) is not None:
                    req = BrokerRegistrationRequest(
                        broker_id=self.node_id, cluster_id=c.cluster_id, incarnation_id=c.incarnation_id,
                        listeners=[BrokerRegistrationRequest.Listener(
                            name=e.listener, host=e.host, port=e.port, security_protocol=e.security_protocol)
                            for e in endpoints],
                        features=[BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo,
                                                                    max_supported_version=hi)
                                  for n, (lo, hi) in SUPPORTED_FEATURES.items()],
                        rack=c.config.get("broker.rack").strip() or None,
                        is_migrating_zk_broker=False, log_dirs=c._data_dir_ids(), previous_broker_epoch=-1)
                    resp = await self._controller_channel(leader).request(ApiKey.BROKER_REGISTRATION, 4, req,
                                                                         self.request_timeout_s)
                    if resp.error_code:
                        log.info("broker registration with controller %d: %s", leader,
                                 ErrorCode(resp.error_code).name)
                    else:
                        # the answer comes once committed; this node applies it with its next fetch
                        await self._wait_for(lambda: (r := c.image.brokers.get(self.node_id)) is not None
                                             and r.incarnation_id == c.incarnation_id, self.request_timeout_s)
                        continue
            except (KafkaError, NodeRequestError) as exc:
                log.info("broker registration of node %d not done yet: %s", self.node_id, exc)
            except Exception:  # keep trying: a broker that never registers serves nothing
                log.exception("broker registration of node %d failed", self.node_id)
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _wait_for(self, cond: Any, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not cond():
            await asyncio.sleep(0.02)

    async def _heartbeat_until_stale(self) -> None:
        c = self.controller
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            reg = c.image.brokers.get(self.node_id)
            if reg is None or reg.incarnation_id != c.incarnation_id:
                return  # replaced or removed: register again
            leader = self.leader_id
            try:
                if c.is_active or self._shutting_down:
                    continue  # the active controller's liveness is its leadership
                if leader < 0 or self.endpoint(leader) is None:
                    continue
                req = BrokerHeartbeatRequest(broker_id=self.node_id, broker_epoch=reg.broker_epoch,
                                             current_metadata_offset=c.image.offset)
                resp = await self._controller_channel(leader).request(ApiKey.BROKER_HEARTBEAT, 2, req,
                                                                     self.request_timeout_s)
                if resp.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                    log.info("controller %d: %s; registering again", leader, ErrorCode(resp.error_code).name)
                    return
            except NodeRequestError as exc:
                log.debug("heartbeat to controller %d: %s", leader, exc)
            except Exception:  # a bug here must not end the broker's heartbeats for good
                log.exception("heartbeat to controller %d failed", leader)

    async def controlled_shutdown(self, timeout_s: float = 10.0) -> bool:
        """Before a broker stops: ask the active controller to fence it and move its leaderships elsewhere
        (BrokerHeartbeat with ``want_shut_down``; directly when this node is the active controller), so clients
        move to other brokers before this one goes away and a restart registers at once. Retried until the
        controller says ``should_shut_down`` or ``timeout_s`` passes; returns whether it did."""
        c = self.controller
        self._shutting_down = True  # no more heartbeats or registrations: they would unfence this broker
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reg = c.image.brokers.get(self.node_id)
            if reg is None or reg.incarnation_id != c.incarnation_id or reg.fenced:
                return reg is not None and reg.fenced
            leader = self.leader_id
            try:
                if c.is_active:
                    if c.controlled_shutdown(self.node_id, reg.broker_epoch):
                        await self.wait_committed()
                    return True
                if leader >= 0 and self.endpoint(leader) is not None:
                    req = BrokerHeartbeatRequest(broker_id=self.node_id, broker_epoch=reg.broker_epoch,
                                                 current_metadata_offset=c.image.offset, want_shut_down=True)
                    left = max(0.1, deadline - time.monotonic())
                    resp = await self._controller_channel(leader).request(ApiKey.BROKER_HEARTBEAT, 2, req,
                                                                         min(self.request_timeout_s, left))
                    if resp.error_code == ErrorCode.NONE and resp.should_shut_down:
                        log.info("controlled shutdown: controller %d fenced broker %d and moved its leaderships",
                                 leader, self.node_id)
                        return True
            except (KafkaError, NodeRequestError) as exc:
                log.info("controlled shutdown of broker %d not done yet: %s", self.node_id, exc)
            await asyncio.sleep(0.1)
        log.warning("controlled shutdown of broker %d did not complete within %.0f s", self.node_id, timeout_s)
        return False

    async def _write_no_ops(self) -> None:
        """On the active controller: a NoOpRecord after ``metadata.max.idle.interval.ms`` without a write."""
        from kbroker.protocol.metadata_records import NoOpRecord

        last = (-1, time.monotonic())  # (log end offset seen, when)
        while True:
            await asyncio.sleep(self.idle_interval_s / 2)
            c, cl = self.controller, self.client
            if cl is None or not c.is_active:
                last = (-1, time.monotonic())
                continue
            end = cl.log.end_offset
            if end != last[0]:
                last = (end, time.monotonic())
                continue
            if time.monotonic() - last[1] < self.idle_interval_s:
                continue
            try:
                c._commit([NoOpRecord()])
            except KafkaError as exc:
                log.debug("no-op record: %s", exc)
            last = (cl.log.end_offset, time.monotonic())

    async def _balance_partition_leaders(self) -> None:
        """``auto.leader.rebalance.enable``: on the active controller, every ``leader.imbalance.check.interval.seconds``
        move leadership back to preferred replicas (:meth:`QuorumController.balance_partition_leaders`)."""
        interval = self.controller.config.get_int("leader.imbalance.check.interval.seconds")
        while True:
            await asyncio.sleep(interval)
            c = self.controller
            if not c.is_active:
                continue
            try:
                if c.balance_partition_leaders():
                    await self.wait_committed()
            except KafkaError as exc:
                log.info("balancing partition leaders: %s", exc)
            except Exception:  # try again at the next check
                log.exception("balancing partition leaders failed")

    async def _fence_stale_brokers(self) -> None:
        """On the active controller: fence brokers whose heartbeats stopped (``broker.session.timeout.ms``), checked
        every :data:`FENCING_CHECK_S` (a failover waits the session timeout plus at most that).

        A check that wakes up late measures a stall of this node's event loop (a long blocking call, the process
        stopped): heartbeats sent meanwhile wait unread in the sockets. As Kafka's controller applies queued
        heartbeats before its session check, the stall does not count against any broker's session
        (:meth:`QuorumController.extend_broker_sessions`) and this round checks nothing: the next one comes after
        the queued heartbeats were read."""
        due = time.monotonic() + FENCING_CHECK_S
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            stalled = now - due
            due = now + FENCING_CHECK_S
            c = self.controller
            if not c.is_active:
                continue
            if stalled > FENCING_CHECK_S:
                if stalled >= STALL_REPORT_S:
                    log.warning("the controller did not run for %.1f s: broker sessions are extended by that long "
                                "(heartbeats sent meanwhile are still unread)", stalled)
                c.extend_broker_sessions(int(stalled * 1000), int(now * 1000))
                continue
            try:
                if c.fence_stale_brokers(int(time.monotonic() * 1000), self.session_timeout_ms):
                    await self.wait_committed()
            except KafkaError as exc:
                log.info("fencing brokers: %s", exc)
            except Exception:  # keep fencing whatever one round hit
                log.exception("fencing brokers failed")
