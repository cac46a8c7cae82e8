"""Runs the Raft state machine (:class:`~kbroker.controller.raft.client.RaftClient`) on the event loop.

The state machine does no I/O; this driver gives it time, a network and a way to wait:

* a task polls it at the times it asks for (or at once when something changed) and sends what it put in its
  outbox: requests go to the peers through one :class:`~kbroker.server.inter_node.NodeChannel` each, their
  answers are decoded (:mod:`kbroker.controller.raft.wire`) and handed back;
* :meth:`RaftManager.handle_request` takes a Raft request that arrived on a listener (Vote, BeginQuorumEpoch,
  EndQuorumEpoch, or a Fetch of ``__cluster_metadata`` by a replica) and returns the response to send;
* a Fetch that would come back empty is parked for up to ``fetch_max_wait_ms`` until the leader's log moves or
  its high watermark passes the one the fetcher knows (long polling, as Kafka's leader does), so idle followers
  do not spin and a commit reaches every replica at once. The fetcher's high watermark is the Fetch v18
  ``HighWatermark`` field (KAFKA-14145); for an older fetch it is the leader's own when the fetch arrived, so any
  move completes it.

The interface is narrow on purpose: peers are ``node id -> (host, port)`` (a mapping, or a function for voter
sets that change, KIP-853: channels are opened on first use and re-opened when a node's address changes), and
whoever owns the manager
(the controller) learns of commits through ``on_commit`` of the state machine and appends with
:meth:`RaftManager.append`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping, Union

from kbroker.controller.raft import messages as rm
from kbroker.controller.raft import wire
from kbroker.controller.raft.client import RaftClient
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.begin_quorum_epoch_response import BeginQuorumEpochResponse
from kbroker.protocol.messages.end_quorum_epoch_request import EndQuorumEpochRequest
from kbroker.protocol.messages.end_quorum_epoch_response import EndQuorumEpochResponse
from kbroker.protocol.messages.fetch_request import FetchRequest
from kbroker.protocol.messages.fetch_response import FetchResponse
from kbroker.protocol.messages.fetch_snapshot_request import FetchSnapshotRequest
from kbroker.protocol.messages.fetch_snapshot_response import FetchSnapshotResponse
from kbroker.protocol.messages.vote_response import VoteResponse
from kbroker.server.inter_node import NodeChannel, NodeRequestError
from kbroker.server.task_util import cancel_and_wait

log = logging.getLogger(__name__)

_RESPONSE_TYPES = {rm.VoteRequest: rm.VoteResponse, rm.BeginQuorumEpochRequest: rm.BeginQuorumEpochResponse,
                   rm.FetchRequest: rm.FetchResponse, rm.FetchSnapshotRequest: rm.FetchSnapshotResponse}


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


Peers = Union[Mapping[int, tuple[str, int]], Callable[[int], "tuple[str, int] | None"]]


class RaftManager:
    """Drives one :class:`RaftClient`. ``peers`` gives the ``(host, port)`` of every other voter's (and, for an
    observer, the voters' or bootstrap servers') controller listener: a mapping, or a function of the node id."""

    def __init__(self, client: RaftClient, cluster_id: str, peers: Peers, *,
                 clock_ms: Callable[[], int] = monotonic_ms, request_timeout_ms: int = 2000,
                 fetch_max_wait_ms: int = 500, own_endpoint: tuple[str, int] | None = None,
                 learned: dict[int, tuple[str, int]] | None = None, ssl_context: Any = None,
                 sasl: Any = None) -> None:
        self.client = client
        self.cluster_id = cluster_id
        self.clock_ms = clock_ms
        self.request_timeout_ms = request_timeout_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.endpoint_of: Callable[[int], tuple[str, int] | None] = (
            peers if callable(peers) else (lambda nid, m=dict(peers): m.get(nid)))  # type: ignore[misc]
        self.channels: dict[int, NodeChannel] = {}
        #: the controller listener is a TLS one: this node's connections to the other voters are TLS too
        self.ssl_context = ssl_context
        self.sasl = sasl
        #: this node's controller listener, named in Fetch answers when it leads (NodeEndpoints, KIP-853)
        self.own_endpoint = own_endpoint
        #: endpoints named in the Fetch answers this node got: how an observer that knows no voter (it asked a
        #: bootstrap server) reaches the leader
        self.learned = learned if learned is not None else {}
        self._wake = asyncio.Event()
        self._changed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._stopping = False
        #: ("from"|"to", peer) whose INCONSISTENT_CLUSTER_ID was logged: once per peer and direction until that
        #: peer's requests (or answers) agree again
        self._cluster_id_warned: set[tuple[str, int | str]] = set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-{self.client.node_id}")

    async def stop(self, graceful: bool = True) -> None:
        """Stop; a leader first resigns and sends EndQuorumEpoch (graceful shutdown) when ``graceful``."""
        if graceful and self.client.is_leader:
            self.client.resign(self.clock_ms())
            self._send_outbox()
            if self._sends:
                await asyncio.wait(list(self._sends), timeout=0.5)
        self._stopping = True
        self._wake.set()
        await cancel_and_wait(self._task)
        for t in list(self._sends):
            t.cancel()
        for ch in self.channels.values():
            await ch.close()
        self._notify_change()

    def _channel(self, node_id: int) -> NodeChannel | None:
        if node_id == self.client.node_id:
            return None
        ep = self.endpoint_of(node_id) or self.learned.get(node_id)
        if ep is None:
            return None
        ch = self.channels.get(node_id)
        if ch is not None and (ch.host, ch.port) != ep:
            old = ch
            asyncio.get_running_loop().create_task(old.close())
            ch = None
        if ch is None:
            ch = self.channels[node_id] = NodeChannel(node_id, ep[0], ep[1], f"kbroker-raft-{self.client.node_id}",
                                                      ssl_context=self.ssl_context, sasl=self.sasl)
        return ch

    # ------------------------------------------------------------------ leader API
    def changed(self) -> None:
        """The owner changed the state machine directly (a voter change): send what it has to send, now."""
        self._notify_change()
        self._wake.set()

    def append(self, records: list[bytes]) -> int:
        """Append records as one batch (leader only; raises ``NotLeaderError``); returns the last offset."""
        last = self.client.append(records, self.clock_ms())
        self._notify_change()
        self._wake.set()
        return last

    # ------------------------------------------------------------------ inbound requests
    async def handle_request(self, request: Any, correlation_id: int = 0) -> Any:
        """Answer a Raft request received on a listener; returns the generated response."""
        try:
            msg = wire.decode_request(request, self.cluster_id, correlation_id)
        except KafkaError as exc:
            if exc.code == ErrorCode.INCONSISTENT_CLUSTER_ID:
                self._refused_other_cluster(request)
            return _error_response(request, exc)
        self._cluster_id_warned.discard(("from", getattr(msg, "src", -1)))
        if isinstance(msg, rm.EndQuorumEpochRequest):
            self.client.handle(msg, self.clock_ms())
            self._wake.set()
            return EndQuorumEpochResponse(topics=[EndQuorumEpochResponse.TopicData(
                topic_name=wire.METADATA_TOPIC, partitions=[EndQuorumEpochResponse.PartitionData(
                    partition_index=0, leader_id=self.client.leader_id, leader_epoch=self.client.epoch)])])
        deadline = self.clock_ms() + (min(request.max_wait_ms, self.fetch_max_wait_ms)
                                      if isinstance(msg, rm.FetchRequest) else 0)
        # the high watermark the fetcher knows: its own word (Fetch v18), else this leader's when the fetch came
        known_hw = self.client.high_watermark
        if isinstance(msg, rm.FetchRequest) and msg.high_watermark is not None:
            known_hw = msg.high_watermark
        while True:
            changed = self._change_future()
            before = (self.client.log.end_offset, self.client.high_watermark)
            self.client.handle(msg, self.clock_ms())
            if (self.client.log.end_offset, self.client.high_watermark) != before:
                # e.g. this fetch moved the leader's high watermark: the other followers' parked fetches learn
                # it now instead of at the end of their long poll
                self._notify_change()
                changed = self._change_future()
            resp = self._take_response(msg)
            self._wake.set()
            if resp is None:  # cannot happen: the state machine answers every request it is given
                raise RuntimeError(f"no answer to {msg!r}")
            if (not isinstance(resp, rm.FetchResponse) or resp.entries or resp.error != "NONE"
                    or resp.diverging_epoch >= 0 or resp.snapshot_end_offset >= 0 or self.clock_ms() >= deadline
                    or resp.high_watermark > known_hw):
                # a fetcher behind on the high watermark learns it now, not at the next append or at the end of
                # its long poll (KAFKA-14145): followers and observers apply committed metadata at once
                return self._with_leader_endpoint(wire.encode_response(resp))
            try:  # long poll: wait for the log or the high watermark to move
                await asyncio.wait_for(asyncio.shield(changed), (deadline - self.clock_ms()) / 1000)
            except asyncio.TimeoutError:
                pass
            if self._stopping:
                return self._with_leader_endpoint(wire.encode_response(resp))

    def _with_leader_endpoint(self, resp: Any) -> Any:
        """Name the leader's controller listener in a Fetch / FetchSnapshot answer (v17+ / v1+ NodeEndpoints)."""
        if not isinstance(resp, (FetchResponse, FetchSnapshotResponse)):
            return resp
        leader = self.client.leader_id
        ep = self.own_endpoint if leader == self.client.node_id else (
            self.endpoint_of(leader) if leader >= 0 else None)
        if ep is not None:
            cls = type(resp).NodeEndpoint
            resp.node_endpoints = [cls(node_id=leader, host=ep[0], port=ep[1])]
        return resp

    def _take_response(self, req: Any) -> Any:
        want = _RESPONSE_TYPES[type(req)]
        out = self.client.outbox
        for i, (dst, m) in enumerate(out):
            if dst == req.src and type(m) is want:
                del out[i]
                return m
        return None

    # ------------------------------------------------------------------ the loop
    def _change_future(self) -> asyncio.Future[None]:
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _notify_change(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def _run(self) -> None:
        last_state = None
        while not self._stopping:
            self._wake.clear()
            now = self.clock_ms()
            before = (self.client.log.end_offset, self.client.high_watermark)
            nxt = self.client.poll(now)
            if (self.client.log.end_offset, self.client.high_watermark) != before:
                self._notify_change()
            state = (self.client.state, self.client.epoch, self.client.leader_id)
            if state != last_state:
                log.info("raft node %s: %s in epoch %s, leader %s", self.client.node_id, state[0].value,
                         state[1], state[2])
                last_state = state
            self._send_outbox()
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, (nxt - self.clock_ms()) / 1000))
            except asyncio.TimeoutError:
                pass

    def _send_outbox(self) -> None:
        out, self.client.outbox = self.client.outbox, []
        for dst, msg in out:
            if isinstance(msg, (rm.VoteResponse, rm.BeginQuorumEpochResponse, rm.FetchResponse,
                                rm.FetchSnapshotResponse)):
                continue  # answers to requests that were handled elsewhere and already returned
            channel = self._channel(dst)
            if channel is None:
                continue
            task = asyncio.get_running_loop().create_task(self._send(channel, msg))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, channel: NodeChannel, msg: Any) -> None:
        api_key, version, req = wire.encode_request(msg, self.cluster_id, channel.node_id)
        if isinstance(msg, rm.FetchRequest):
            req.max_wait_ms = self.fetch_max_wait_ms
        try:
            resp = await channel.request(api_key, version, req, self.request_timeout_ms / 1000)
        except NodeRequestError as exc:
            log.debug("raft node %s: %s", self.client.node_id, exc)
            if exc.peer_gone and isinstance(msg, (rm.FetchRequest, rm.FetchSnapshotRequest)) and not self._stopping:
                self.client.peer_gone(channel.node_id, self.clock_ms())
                self._wake.set()
            return
        if resp.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
            self._refused_by_other_cluster(channel.node_id, req)
        elif not resp.error_code:
            self._cluster_id_warned.discard(("to", channel.node_id))
        for ne in getattr(resp, "node_endpoints", None) or ():
            if ne.node_id >= 0 and ne.node_id != self.client.node_id:
                self.learned[ne.node_id] = (ne.host, ne.port)
        back = wire.decode_response(resp, msg, channel.node_id)
        if back is None:
            return
        before = (self.client.log.end_offset, self.client.high_watermark)
        self.client.handle(back, self.clock_ms())
        if (self.client.log.end_offset, self.client.high_watermark) != before:
            self._notify_change()
        self._wake.set()

    # ------------------------------------------------------------------ another cluster's nodes
    def _refused_other_cluster(self, request: Any) -> None:
        """A peer's request named another cluster id: WARN once per sender, with both ids."""
        sender = _sender_of(request)
        if ("from", sender) in self._cluster_id_warned:
            return
        self._cluster_id_warned.add(("from", sender))
        log.warning("raft node %s: refused %s from node %s with INCONSISTENT_CLUSTER_ID: it is of cluster %s, this "
                    "node of cluster %s (every node of a cluster needs the same cluster.id, or storage formatted with "
                    "`kbroker-storage format -t ID`; logged once per peer)", self.client.node_id,
                    _api_name(request), sender, request.cluster_id, self.cluster_id)

    def _refused_by_other_cluster(self, peer: int, request: Any) -> None:
        """A peer answered INCONSISTENT_CLUSTER_ID: WARN once per peer (its answer does not carry its id)."""
        if ("to", peer) in self._cluster_id_warned:
            return
        self._cluster_id_warned.add(("to", peer))
        log.warning("raft node %s: node %s refused this node's %s with INCONSISTENT_CLUSTER_ID: it is not of this "
                    "node's cluster %s (every node of a cluster needs the same cluster.id, or storage formatted with "
                    "`kbroker-storage format -t ID`; logged once per peer)", self.client.node_id, peer,
                    _api_name(request), self.cluster_id)

    @property
    def refused_by_other_cluster(self) -> list[int]:
        """Peers that last answered this node with INCONSISTENT_CLUSTER_ID."""
        return sorted(int(p) for d, p in self._cluster_id_warned if d == "to")


def _api_name(request: Any) -> str:
    """``VoteRequest`` -> ``Vote request``."""
    name = type(request).__name__
    return name[:-len("Request")] + " request" if name.endswith("Request") else name


def _sender_of(request: Any) -> int | str:
    """The node id a Raft request names as its sender (candidate, leader or fetching replica); ``"?"`` if none."""
    try:
        if isinstance(request, FetchRequest):
            return request.replica_state.replica_id if request.replica_state.replica_id >= 0 else request.replica_id
        if isinstance(request, FetchSnapshotRequest):
            return request.replica_id
        part = request.topics[0].partitions[0]
        return part.replica_id if hasattr(part, "replica_id") else part.leader_id
    except (AttributeError, IndexError):
        return "?"


def _error_response(request: Any, exc: KafkaError) -> Any:
    code = int(exc.code)
    if isinstance(request, FetchRequest):
        return FetchResponse(error_code=code)
    if isinstance(request, EndQuorumEpochRequest):
        return EndQuorumEpochResponse(error_code=code)
    if isinstance(request, FetchSnapshotRequest):
        return FetchSnapshotResponse(error_code=code)
    if type(request).__name__ == "VoteRequest":
        return VoteResponse(error_code=code)
    return BeginQuorumEpochResponse(error_code=code)
