"""DescribeQuorum (API key 55), versions 0-2.

Behavior, cluster (``controller.quorum.voters`` names other nodes): the leader answers with its epoch, high
watermark and each voter's and observer's (broker's) log end offset and last fetch as it last heard them (lag
is the client's to compute); any other node forwards the request to the leader's controller listener, as
Kafka's brokers forward it to the controller, and answers NOT_LEADER_OR_FOLLOWER naming the leader it knows
when that fails (or the request was already forwarded once). The
``Nodes`` list (v2) gives every voter's controller endpoint and the voters their directory ids, from the voter
set in force (the log's, KIP-853, else ``controller.quorum.voters``).

Behavior, a quorum of one (the embedded default, see :mod:`kbroker.controller.quorum_controller`): this node is
the leader and the only voter, in the controller's current leader epoch; like the voters of Kafka's static
quorums (``controller.quorum.voters``) it is reported without a directory id (zero UUID). The high watermark is the metadata log end offset (a quorum of one commits on its own
fsync), which is also the voter's log end offset; its fetch and caught-up timestamps are "now", as Kafka's
leader reports for itself. There are no observers. Only ``__cluster_metadata`` partition 0 exists: any other
topic or partition in the request gets UNKNOWN_TOPIC_OR_PARTITION.
Version notes: v1 adds the voters' last fetch / last caught-up timestamps; v2 adds the voters' directory ids,
error messages and the ``Nodes`` list with each voter's controller listeners (none when the node has no
listener named in ``controller.listener.names``).
"""

from __future__ import annotations

import socket
import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_QUORUM
VERSIONS = range(0, 3)

METADATA_TOPIC = "__cluster_metadata"


def _controller_listeners(ctx) -> list[DescribeQuorumResponse.Listener]:
    broker = ctx.broker
    names = {n.upper() for n in broker.config.get_list("controller.listener.names")}
    out = []
    for lst in broker.config.listeners:
        if lst.name not in names:
            continue
        host = lst.host if lst.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
        port = broker.bound_ports.get(lst.name, lst.port)
        out.append(DescribeQuorumResponse.Listener(name=lst.name, host=host, port=port))
    return out


async def handle(ctx, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    from kbroker.server.authorizer import AclOperation

    if common.cluster_denied(ctx, AclOperation.DESCRIBE):  # as Kafka
        return DescribeQuorumResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      error_message=common.CLUSTER_DENIED_MESSAGE if ctx.api_version >= 2 else "")
    quorum = ctx.broker.metadata_quorum
    if quorum is not None and not (quorum.client is not None and quorum.client.is_leader):
        forwarded = await common.maybe_forward(ctx, request)  # as Kafka's brokers forward it to the controller
        if forwarded is not None:
            return forwarded
    v2 = ctx.api_version >= 2
    controller = ctx.broker.controller
    node_id = ctx.broker.node_id
    now_ms = int(time.time() * 1000)
    end_offset = controller.image.offset + 1
    resp = DescribeQuorumResponse(error_code=ErrorCode.NONE, error_message=None if v2 else "")
    for t in request.topics:
        topic = DescribeQuorumResponse.TopicData(topic_name=t.topic_name)
        for p in t.partitions:
            part = DescribeQuorumResponse.PartitionData(partition_index=p.partition_index,
                                                        error_message=None if v2 else "")
            if t.topic_name != METADATA_TOPIC or p.partition_index != 0:
                part.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                part.leader_id = -1
                part.leader_epoch = -1
                part.high_watermark = -1
                if v2:
                    part.error_message = "This is not the metadata topic partition"
            elif ctx.broker.metadata_quorum is not None:
                _fill_from_quorum(ctx.broker.metadata_quorum, part, now_ms, v2)
            else:
                part.leader_id = node_id
                part.leader_epoch = controller.leader_epoch
                part.high_watermark = end_offset
                part.current_voters = [DescribeQuorumResponse.ReplicaState(
                    replica_id=node_id, replica_directory_id=ZERO_UUID,  # a static quorum's voter, as Kafka
                    log_end_offset=end_offset, last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)]
                part.observers = []
            topic.partitions.append(part)
        resp.topics.append(topic)
    if v2:
        if ctx.broker.metadata_quorum is not None:
            resp.nodes = [DescribeQuorumResponse.Node(node_id=v, listeners=[DescribeQuorumResponse.Listener(
                name=_first_controller_listener(ctx), host=host, port=port)])
                for v, (host, port) in sorted(ctx.broker.metadata_quorum.voters.items())]
        else:
            resp.nodes = [DescribeQuorumResponse.Node(node_id=node_id, listeners=_controller_listeners(ctx))]
    return resp


def _first_controller_listener(ctx) -> str:
    names = ctx.broker.config.get_list("controller.listener.names")
    return names[0] if names else "CONTROLLER"


def _fill_from_quorum(quorum, part, now_ms: int, v2: bool) -> None:
    """A cluster's quorum as its leader sees it (Kafka answers only on the leader: NOT_LEADER_OR_FOLLOWER
    elsewhere): each voter's log end offset and last fetch as the leader last heard, lag is the client's to
    compute from the high watermark. Timestamps are this node's wall clock."""
    client = quorum.client
    if client is None or not client.is_leader:
        part.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        part.leader_id = client.leader_id if client is not None else -1
        part.leader_epoch = client.epoch if client is not None else -1
        part.high_watermark = -1
        if v2:
            part.error_message = "This node is not the leader of the metadata quorum"
        return
    mono_now = int(time.monotonic() * 1000)
    part.leader_id = client.node_id
    part.leader_epoch = client.epoch
    part.high_watermark = client.high_watermark
    voters = []
    for v in sorted(client.voters):
        if v == client.node_id:
            end, fetched = client.log.end_offset, now_ms
        else:
            r = client._replicas.get(v)
            end = r.end_offset if r is not None else -1
            fetched = now_ms - (mono_now - r.last_fetch_ms) if r is not None and r.end_offset >= 0 else -1
        voters.append(DescribeQuorumResponse.ReplicaState(
            replica_id=v, replica_directory_id=quorum.voter_directory_id(v), log_end_offset=end,
            last_fetch_timestamp=fetched,
            last_caught_up_timestamp=fetched if end >= client.high_watermark else -1))
    part.current_voters = voters
    observers = []
    for o, r in sorted(client._replicas.items()):
        if o in client.voters or r.end_offset < 0:
            continue
        fetched = now_ms - (mono_now - r.last_fetch_ms)
        observers.append(DescribeQuorumResponse.ReplicaState(
            replica_id=o, replica_directory_id=r.directory_id, log_end_offset=r.end_offset,
            last_fetch_timestamp=fetched,
            last_caught_up_timestamp=fetched if r.end_offset >= client.high_watermark else -1))
    part.observers = observers
