"""ShareFetch (API key 78), versions 1-2: records for a share group member, with piggy-backed acknowledgements
(KIP-932).

Behavior (share partitions and sessions: ``kbroker.server.share``):
* the share session: ``ShareSessionEpoch`` 0 opens one for (group, member) with the request's partitions (no
  acknowledgements allowed then: INVALID_REQUEST), later requests carry the next epoch and add partitions
  (``Topics``) or drop them (``ForgottenTopicsData``); -1 applies the acknowledgements, ends the session and
  releases the member's other records on this broker, and fetches nothing (so does a closed connection, as in
  Kafka 4.1+). Errors (top level):
  SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED, INVALID_REQUEST (no group
  or member id), GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION (``share.version`` not finalized);
* acknowledgements are applied first, per partition (``AcknowledgeErrorCode``: INVALID_RECORD_STATE for records
  the member does not hold, INVALID_REQUEST for malformed batches);
* then every partition of the session acquires up to ``MaxRecords`` records in all (released records first) and
  answers the whole batches holding them with ``AcquiredRecords`` ranges and delivery counts; new records are
  acquired in whole log batches (``ShareAcquireMode`` 0, batch-optimized, Kafka's default and the only mode of
  v1: ``MaxRecords`` and the record-lock cap are soft, as in Kafka), or (mode 1, record-limit) exactly up to
  ``MaxRecords``;
  ``AcquisitionLockTimeoutMs`` is the group's record lock duration;
* long polling: with nothing acquired the request waits up to ``MaxWaitMs`` for new data (woken by a high
  watermark move) or a released or expired record (checked every 100 ms);
* partition errors: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED (no READ on the topic), NOT_LEADER_OR_FOLLOWER
  (with ``CurrentLeader`` and ``NodeEndpoints``), KAFKA_STORAGE_ERROR;
* the answer lists every session partition when the session opened, afterwards only partitions with records,
  acknowledgement results or errors.
Version notes: v2 adds ``ShareAcquireMode`` (KIP-1206) and ``IsRenewAck`` (AcknowledgeType 4 renews a lock).
"""

from __future__ import annotations

import asyncio
import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import ShareFetchRequest, ShareFetchResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.share.manager import share_groups_enabled, share_settings

API_KEY = ApiKey.SHARE_FETCH
VERSIONS = range(1, 3)

#: MaxRecords when the request gives none
DEFAULT_MAX_RECORDS = 500
#: how often a long poll looks for released or expired records, s
_RECHECK_S = 0.1

Resp = ShareFetchResponse


def _now_ms() -> int:
    return int(time.time() * 1000)


def resolve_topics(ctx, topic_ids) -> tuple[dict[bytes, str], dict[bytes, int]]:  # noqa: ANN001
    """(topic id -> name, topic id -> error) for the ids of a share request: UNKNOWN_TOPIC_ID, or
    TOPIC_AUTHORIZATION_FAILED without READ on the topic."""
    image = ctx.broker.controller.image
    names: dict[bytes, str] = {}
    errors: dict[bytes, int] = {}
    for tid in dict.fromkeys(topic_ids):
        t = image.topics_by_id.get(tid)
        if t is None:
            errors[tid] = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            names[tid] = t.name
    if ctx.broker.authorizer is not None and names:
        allowed = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, list(names.values()))
        for tid, name in list(names.items()):
            if name not in allowed:
                errors[tid] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                del names[tid]
    return names, errors


def leader_hint(ctx, topic_id: bytes, partition: int, hinted: set[int]) -> tuple[int, int]:  # noqa: ANN001
    """(leader id, leader epoch) of a partition this node does not lead, for ``CurrentLeader`` (-1, -1 unknown)."""
    t = ctx.broker.controller.image.topics_by_id.get(topic_id)
    p = t.partitions.get(partition) if t is not None else None
    if p is None or p.leader < 0:
        return -1, -1
    if p.leader != ctx.broker.node_id:
        hinted.add(p.leader)
    return p.leader, p.leader_epoch


def top_level_error(ctx, group_id, member_id) -> int:  # noqa: ANN001
    if not share_groups_enabled(ctx.broker):
        return ErrorCode.UNSUPPORTED_VERSION
    # READ on the group is checked before the ids, as Kafka does (a caller without it learns nothing more)
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP,
                                                                  group_id or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if not group_id or not member_id:
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.NONE


async def handle(ctx, request: ShareFetchRequest) -> ShareFetchResponse:
    broker = ctx.broker
    mgr = broker.share_partitions
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    code = top_level_error(ctx, group_id, member_id)
    if code:
        return Resp(error_code=code)
    if epoch == 0 and any(p.acknowledgement_batches for t in request.topics for p in t.partitions):
        return Resp(error_code=ErrorCode.INVALID_REQUEST,
                    error_message="Acknowledge data present on initial share fetch request.")
    mgr.sweep_disconnected()
    try:
        session = mgr.session_for(group_id, member_id, epoch)
    except KafkaError as exc:
        return Resp(error_code=exc.code, error_message=exc.message)
    session.connection = ctx.connection
    settings = share_settings(broker, group_id)
    resp = Resp(acquisition_lock_timeout_ms=settings.record_lock_duration_ms)
    names, topic_errors = resolve_topics(ctx, [t.topic_id for t in request.topics]
                                         + [tid for tid, _ in session.partitions])
    out: dict[tuple[bytes, int], Resp.PartitionData] = {}
    hinted: set[int] = set()

    def pd_for(tid: bytes, partition: int) -> Resp.PartitionData:
        pd = out.get((tid, partition))
        if pd is None:
            pd = out[(tid, partition)] = Resp.PartitionData(partition_index=partition, records=b"")
        return pd

    def fail(pd: Resp.PartitionData, tid: bytes, code: int, ack: bool) -> None:
        if ack:
            pd.acknowledge_error_code = code
        else:
            pd.error_code = code
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            leader, leader_epoch = leader_hint(ctx, tid, pd.partition_index, hinted)
            pd.current_leader = Resp.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)

    now = _now_ms()
    for t in request.topics:  # acknowledgements first
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            pd = pd_for(t.topic_id, p.partition_index)
            code = topic_errors.get(t.topic_id, ErrorCode.NONE) or mgr.acknowledge(
                group_id, member_id, t.topic_id, names[t.topic_id], p.partition_index,
                [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches],
                now)
            if code:
                fail(pd, t.topic_id, code, ack=True)
    if epoch == -1:
        mgr.close_session(session)
        return _finish(ctx, resp, out, hinted)
    for t in request.topics:
        for p in t.partitions:
            session.partitions[(t.topic_id, p.partition_index)] = None
    for f in request.forgotten_topics_data:
        for partition in f.partitions:
            session.partitions.pop((f.topic_id, partition), None)
    mgr.advance(session)
    if epoch == 0:
        for tid, partition in session.partitions:
            pd_for(tid, partition)
    keys = []
    for tid, partition in session.partitions:
        code = topic_errors.get(tid, ErrorCode.NONE)
        if code:
            fail(pd_for(tid, partition), tid, code, ack=False)
        else:
            keys.append((tid, names[tid], partition))
    max_records = request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    while True:
        got = _acquire(ctx, group_id, member_id, keys, max_records, request.max_bytes, pd_for, fail,
                       request.share_acquire_mode)
        remaining = deadline - time.monotonic()
        if got or remaining <= 0 or not keys or any(out[(tid, p)].error_code for tid, _, p in keys
                                                    if (tid, p) in out):
            break
        parts = mgr.log_partitions(keys)
        wait = min(remaining, _RECHECK_S)
        if parts:
            await broker.replica_manager.wait_for_data(parts, wait)
        else:
            await asyncio.sleep(wait)
        mgr.sweep_disconnected()
        if session is not mgr.sessions.get((group_id, member_id)):
            break  # the session was replaced or closed meanwhile
    return _finish(ctx, resp, out, hinted)


def _acquire(ctx, group_id: str, member_id: str, keys, max_records: int, max_bytes: int, pd_for, fail,  # noqa: ANN001
             acquire_mode: int = 0) -> int:
    """One acquisition round over ``keys``; the number of records acquired."""
    mgr = ctx.broker.share_partitions
    total = 0
    budget = max_bytes
    now = _now_ms()
    for tid, name, partition in keys:
        if total >= max_records or budget <= 0:
            break
        try:
            fetched = mgr.fetch(group_id, member_id, tid, name, partition, now, max_records - total, budget,
                                acquire_mode)
        except KafkaError as exc:
            if exc.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # its state is still being read: wait
                fail(pd_for(tid, partition), tid, exc.code, ack=False)
            continue
        except OSError:
            fail(pd_for(tid, partition), tid, ErrorCode.KAFKA_STORAGE_ERROR, ack=False)
            continue
        if not fetched.ranges:
            continue
        pd = pd_for(tid, partition)
        pd.records = fetched.records
        pd.acquired_records = [Resp.AcquiredRecords(first_offset=r.first_offset, last_offset=r.last_offset,
                                                    delivery_count=r.delivery_count) for r in fetched.ranges]
        total += sum(r.last_offset - r.first_offset + 1 for r in fetched.ranges)
        budget -= len(fetched.records)
    return total


def _finish(ctx, resp: Resp, out: dict, hinted: set[int]) -> Resp:  # noqa: ANN001
    by_topic: dict[bytes, Resp.ShareFetchableTopicResponse] = {}
    for (tid, _), pd in out.items():
        topic = by_topic.get(tid)
        if topic is None:
            topic = by_topic[tid] = Resp.ShareFetchableTopicResponse(topic_id=tid)
            resp.responses.append(topic)
        topic.partitions.append(pd)
    if hinted:
        resp.node_endpoints = [Resp.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
                               for n, h, port, rack in common.broker_endpoints(ctx) if n in hinted]
    return resp
