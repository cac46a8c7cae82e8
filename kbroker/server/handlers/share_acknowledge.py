"""ShareAcknowledge (API key 79), versions 1-2: acknowledgements of a share group member's records (KIP-932).

Behavior: the request continues the member's share session on this broker (see ``share_fetch``): epoch 0 is
INVALID_SHARE_SESSION_EPOCH (a session is opened by ShareFetch only), an unknown session
SHARE_SESSION_NOT_FOUND, a wrong epoch INVALID_SHARE_SESSION_EPOCH; -1 applies the acknowledgements, then ends
the session and releases the member's other records here. Each partition's batches are applied in order
(AcknowledgeType 0 gap, 1 accept, 2 release, 3 reject, 4 renew); its ``ErrorCode`` is the first error:
INVALID_RECORD_STATE (records the member does not hold), INVALID_REQUEST (malformed batch), UNKNOWN_TOPIC_ID,
TOPIC_AUTHORIZATION_FAILED, NOT_LEADER_OR_FOLLOWER (with ``CurrentLeader`` and ``NodeEndpoints``).
Version notes: v2 adds ``IsRenewAck`` and ``AcquisitionLockTimeoutMs``.
"""

from __future__ import annotations

import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from kbroker.server.handlers import common
from kbroker.server.handlers.share_fetch import leader_hint, resolve_topics, top_level_error
from kbroker.server.share.manager import share_settings

API_KEY = ApiKey.SHARE_ACKNOWLEDGE
VERSIONS = range(1, 3)

Resp = ShareAcknowledgeResponse


async def handle(ctx, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    broker = ctx.broker
    mgr = broker.share_partitions
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    code = top_level_error(ctx, group_id, member_id)
    if code:
        return Resp(error_code=code)
    if epoch == 0:
        return Resp(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                    error_message="ShareAcknowledge cannot open a share session.")
    mgr.sweep_disconnected()
    try:
        session = mgr.session_for(group_id, member_id, epoch)
    except KafkaError as exc:
        return Resp(error_code=exc.code, error_message=exc.message)
    session.connection = ctx.connection
    resp = Resp(acquisition_lock_timeout_ms=share_settings(broker, group_id).record_lock_duration_ms)
    names, topic_errors = resolve_topics(ctx, [t.topic_id for t in request.topics])
    hinted: set[int] = set()
    now = int(time.time() * 1000)
    for t in request.topics:
        topic = Resp.ShareAcknowledgeTopicResponse(topic_id=t.topic_id)
        resp.responses.append(topic)
        for p in t.partitions:
            code = topic_errors.get(t.topic_id, ErrorCode.NONE) or mgr.acknowledge(
                group_id, member_id, t.topic_id, names[t.topic_id], p.partition_index,
                [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches],
                now)
            pd = Resp.PartitionData(partition_index=p.partition_index, error_code=code)
            if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                leader, leader_epoch = leader_hint(ctx, t.topic_id, p.partition_index, hinted)
                pd.current_leader = Resp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
            topic.partitions.append(pd)
    if epoch == -1:
        mgr.close_session(session)
    else:
        mgr.advance(session)
    if hinted:
        resp.node_endpoints = [Resp.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
                               for n, h, port, rack in common.broker_endpoints(ctx) if n in hinted]
    return resp
