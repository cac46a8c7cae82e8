"""Fetch (API key 1), versions 4-18.

Behavior:
* consumers read up to the high watermark (read_uncommitted) or the last stable offset (read_committed);
  only whole batches are returned, straight from the segment files (zero-copy ``FileRegion`` chunks);
* read_committed: ``AbortedTransactions`` lists (producer id, first offset) of every aborted transaction
  overlapping the returned batches, from the segments' ``.txnindex``; the client drops their records. Aborted
  data and markers stay in the log and keep their offsets;
* the first batch of the first non-empty partition is returned even above ``max_bytes`` /
  ``partition_max_bytes`` so consumers make progress (KIP-74);
* long polling: below ``min_bytes`` the request waits up to ``max_wait_ms`` and is woken as soon as a
  high watermark moves on one of its partitions;
* the response holds exactly the requested partitions; partitions without data or with an error carry an
  empty, non-null ``Records`` (librdkafka breaks on null, KAFKA-18646);
* fetch sessions (KIP-227, :mod:`kbroker.server.fetch_session`): ``SessionEpoch`` 0 opens a session (its id in
  the response), later requests name only the partitions whose position changed and get only the partitions with
  news; ``max.incremental.fetch.session.cache.slots`` sessions at most (then ``SessionId`` 0: full requests);
* a follower's Fetch (``ReplicaState.ReplicaId`` >= 0 from v15, ``ReplicaId`` before) reads up to the log end
  offset instead of the high watermark, tells the leader the follower's log end offset (its fetch offset),
  which moves the high watermark and may add it back to the ISR, and waits for appends rather than for high
  watermark changes. When the follower's ``LastFetchedEpoch`` ends in the leader's log before its fetch offset
  (or is not there), the answer is ``DivergingEpoch`` (the epoch and its end offset in the leader's log) and no
  records: the follower truncates there (KIP-320/KIP-595 style, Fetch v12+). A fetch offset outside the log is
  OFFSET_OUT_OF_RANGE; a node that is not a replica gets NOT_LEADER_OR_FOLLOWER;
* replication throttles (KIP-73, :mod:`kbroker.server.replication_quota`): a follower outside the ISR gets no
  records (an empty ``Records``, the other fields as usual) of a partition in ``leader.replication.throttled.replicas``
  for this leader while ``leader.replication.throttled.rate`` is exceeded; what the answer carries of such
  partitions counts against that rate (for in-sync followers too, as in Kafka). A follower's long poll is read
  again once the rate allows (the quota's throttle time), not only on appends or at ``max_wait_ms`` as in Kafka
  (whose throttled catch-up then moves in steps of ``replica.fetch.wait.max.ms``);
* fetching from the closest replica (KIP-392, Fetch v11+): a follower serves consumers as the leader does, up to
  its own high watermark (read_committed: its last stable offset), which its replica fetcher advances (waking long
  polls); the CurrentLeaderEpoch is checked against its own leader epoch; an offset between its high watermark
  and its log end offset gets no records, one outside its log OFFSET_OUT_OF_RANGE (the consumer then asks the
  leader). Before v11 a follower answers NOT_LEADER_OR_FOLLOWER. With ``replica.selector.class`` set, a leader
  answers a consumer's partition whose ``RackId`` another in-sync replica suits better
  (:mod:`kbroker.server.replica_selector`) with ``PreferredReadReplica``, its offsets and no records, at once;
Version notes:
* v9: CurrentLeaderEpoch checks (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), before the leadership, as Kafka
  (a follower ahead of its leader's metadata gets UNKNOWN_LEADER_EPOCH, not NOT_LEADER_OR_FOLLOWER); v13+: topic ids
  (UNKNOWN_TOPIC_ID); v15: ReplicaState; v18: HighWatermark tag (used by replication later).
"""

from __future__ import annotations

import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import FetchRequest, FetchResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.FETCH
VERSIONS = range(4, 19)

READ_COMMITTED = 1


def _is_raft_fetch(ctx, request: FetchRequest) -> bool:
    """A Fetch of ``__cluster_metadata`` on a controller listener (KRaft's replication of the metadata log)."""
    from kbroker.controller.uuids import METADATA_TOPIC_ID

    if ctx.listener_name.upper() not in ctx.broker.apis.controller_listeners or len(request.topics) != 1:
        return False
    t = request.topics[0]
    return t.topic_id == METADATA_TOPIC_ID or t.topic == "__cluster_metadata"


async def handle(ctx, request: FetchRequest) -> FetchResponse:
    broker = ctx.broker
    version = ctx.api_version
    if broker.metadata_quorum is not None and _is_raft_fetch(ctx, request):
        from kbroker.server.handlers.raft_common import to_quorum

        return await to_quorum(ctx, request)  # a voter or observer replicating __cluster_metadata
    session, incremental = None, False
    if request.session_id != 0 or request.session_epoch != -1:
        session, incremental, request, code = _session_of(broker.fetch_sessions, request, version)
        if code:
            return FetchResponse(error_code=code, session_id=0)
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    follower = replica_id >= 0
    denied = None if broker.authorizer is None else _denied_topics(ctx, request, version, follower)
    quota = broker.replication_quotas.leader if follower else None
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    first = True
    while True:
        # a follower's position is recorded once per request, not again when a long poll reads again
        read = _read_all(ctx, request, version, replica_id, record=first, quota=quota, denied=denied,
                         session=session if incremental else None)
        resp, total, parts, _ = read
        first = False
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not parts or total < 0:
            return _answer(read, quota, session, incremental)
        if quota is not None and quota.is_quota_exceeded():  # read held-back replicas again once the rate allows
            remaining = min(remaining, max(0.01, quota.throttle_time_s()))
        await broker.replica_manager.wait_for_data(parts, remaining, appends=follower)
        if time.monotonic() >= deadline:
            return _answer(_read_all(ctx, request, version, replica_id, record=False, quota=quota, denied=denied,
                                     session=session if incremental else None), quota, session, incremental)


def _session_of(cache, request: FetchRequest, version: int):  # noqa: ANN001, ANN202
    """KIP-227 (:mod:`kbroker.server.fetch_session`): -> (session or None, incremental, the request to read — for
    an incremental one, every partition of the session —, error code)."""
    from dataclasses import replace

    from kbroker.server import fetch_session as fs

    ids = version >= 13
    if request.session_epoch == -1:  # (id, -1): the client closes its session and fetches without one
        cache.close(request.session_id)
        return None, False, request, ErrorCode.NONE
    if request.session_epoch == 0:  # a new session (closing the one named, if any)
        if request.session_id:
            cache.close(request.session_id)
        session = cache.create(ids)
        if session is not None:
            fs.add_all(session, request)
        return session, False, request, ErrorCode.NONE
    session, code = cache.lookup(request.session_id, request.session_epoch, ids)
    if session is None:
        return None, False, request, code
    fs.update(session, request)
    return session, True, replace(request, topics=fs.topics_of(session, FetchRequest)), ErrorCode.NONE


class _Everything:
    def __contains__(self, item: object) -> bool:
        return True


def _denied_topics(ctx, request: FetchRequest, version: int, follower: bool):  # noqa: ANN202
    """The topic names the caller may not fetch, as Kafka: a follower's fetch needs CLUSTER_ACTION on the cluster
    (else every partition is TOPIC_AUTHORIZATION_FAILED), a consumer's READ on each topic."""
    if follower:
        return None if common.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION) else _Everything()
    image = ctx.broker.controller.image
    if version >= 13:
        names = [t.name for ft in request.topics if (t := image.topics_by_id.get(ft.topic_id)) is not None]
    else:
        names = [ft.topic for ft in request.topics]
    allowed = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)
    return {n for n in names if n not in allowed} or None


def _answer(read, quota, session=None, incremental: bool = False) -> FetchResponse:  # noqa: ANN001
    """The response of the read that is answered; its bytes of throttled partitions count against the leader's
    replication quota once (Kafka records them when the response goes out, not for reads a long poll drops). In a
    fetch session it carries the session id, and an incremental one only the partitions with news."""
    if quota is not None and read[3]:
        quota.record(read[3])
    resp = read[0]
    if session is not None:
        from kbroker.server.fetch_session import record_sent

        record_sent(session, resp, incremental)
        resp.session_id = session.session_id
    return resp


_LEADER_HINT_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _unchanged(rm, topic: str, fp, sp, read_committed: bool):  # noqa: ANN001, ANN202
    """The partition of a consumer's incremental fetch session when it has nothing to send: this broker leads it
    at the client's epoch, the fetch offset is at or past what the consumer may read and within the log, and its
    high watermark, last stable offset and log start offset are what the last response told. Such a partition is
    left out of the response (KIP-227) without being read; else None (it is read as in a full fetch)."""
    if sp is None or sp.sent is None:
        return None
    part = rm.partitions.get((topic, fp.partition))
    if part is None or not part.is_leader or fp.current_leader_epoch not in (-1, part.leader_epoch):
        return None
    hw, lso, start, leo = part.log.fetch_offsets()
    sent = sp.sent
    if sent[0] != hw or sent[1] != lso or sent[2] != start:
        return None
    offset = fp.fetch_offset
    if (lso if read_committed else hw) <= offset <= leo and offset >= start:
        return part
    return None


def _read_all(ctx, request: FetchRequest, version: int, replica_id: int = -1, record: bool = True, quota=None,
              denied=None, session=None):
    """Read every requested partition once -> (response, bytes read or -1 on errors, partitions, bytes read of
    partitions throttled by ``quota``). ``replica_id`` >= 0: a follower's fetch (``record``: its position is
    recorded, see :func:`follower_position`); ``quota``: the leader's replication quota (KIP-73) for it; ``denied``:
    the topic names answered TOPIC_AUTHORIZATION_FAILED (:func:`_denied_topics`); ``session``: the KIP-227 session
    of an incremental fetch, whose partitions with nothing new are waited on but neither read nor answered."""
    broker = ctx.broker
    image = broker.controller.image
    rm = broker.replica_manager
    resp = FetchResponse(session_id=0)
    budget = request.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    throttled_bytes = 0
    had_error = False  # or a consumer sent to a preferred read replica: answered at once either way (as Kafka)
    parts = []
    hinted: set[int] = set()  # leaders named in CurrentLeader (KIP-951)
    read_committed = request.isolation_level == READ_COMMITTED and replica_id < 0
    now_ms = int(time.time() * 1000)
    for ft in request.topics:
        if version >= 13:
            topic = image.topics_by_id.get(ft.topic_id)
            topic_error = ErrorCode.UNKNOWN_TOPIC_ID if topic is None else ErrorCode.NONE
        else:
            topic = image.topics_by_name.get(ft.topic)
            topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.NONE
        if denied is not None and (version < 13 or topic is not None or isinstance(denied, _Everything)) \
                and (topic.name if topic is not None else ft.topic) in denied:
            topic_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # before UNKNOWN_TOPIC_OR_PARTITION, as in Kafka
        out_topic = FetchResponse.FetchableTopicResponse(topic=ft.topic, topic_id=ft.topic_id)
        resp.responses.append(out_topic)
        # an incremental session's partitions with nothing to send are only waited on (see _unchanged)
        cached = session.partitions if session is not None and topic is not None and not topic_error \
            and replica_id < 0 and not request.rack_id else None
        session_key = ft.topic_id if version >= 13 else ft.topic
        for fp in ft.partitions:
            if cached is not None:
                part = _unchanged(rm, topic.name, fp, cached.get((session_key, fp.partition)), read_committed)
                if part is not None:
                    parts.append(part)
                    continue
            pd = FetchResponse.PartitionData(partition_index=fp.partition, high_watermark=-1,
                                             last_stable_offset=-1, log_start_offset=-1,
                                             preferred_read_replica=-1, records=b"",
                                             aborted_transactions=[] if read_committed else None)
            out_topic.partitions.append(pd)
            try:
                if topic_error:
                    raise KafkaError(topic_error)
                part = rm.get_partition(topic.name, fp.partition)
                # the epoch first, as Kafka: a follower that learned of a new leadership before its leader did
                # gets UNKNOWN_LEADER_EPOCH (and asks again soon), not NOT_LEADER_OR_FOLLOWER
                part.check_leader_epoch(fp.current_leader_epoch)
                if (replica_id >= 0 or version < 11) and not part.is_leader:  # KIP-392: consumers may use followers
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                if replica_id < 0 and version >= 11 and request.rack_id and _redirect(ctx, part, fp, pd,
                                                                                     request.rack_id, now_ms):
                    had_error = True
                    continue
                if replica_id >= 0:
                    if not follower_position(rm, part, replica_id, fp, pd, version, now_ms, record):
                        continue  # diverging: the follower truncates first
                    upper = part.log_end_offset
                parts.append(part)
                pd.high_watermark = part.high_watermark
                pd.last_stable_offset = part.last_stable_offset
                pd.log_start_offset = part.log_start_offset
                if replica_id < 0:
                    upper = part.last_stable_offset if read_committed else part.high_watermark
                max_bytes = min(fp.partition_max_bytes, budget)
                if max_bytes <= 0 and total > 0:
                    continue
                if quota is not None and quota.should_throttle(topic.name, fp.partition, replica_id in part.isr):
                    continue  # KIP-73: an out-of-sync follower of a throttled replica gets no records for now
                info = part.log.read(fp.fetch_offset, max(max_bytes, 0), upper, min_one_message=(total == 0))
                if info.size:
                    pd.records = info.regions
                    total += info.size
                    budget -= info.size
                    if quota is not None and quota.is_throttled(topic.name, fp.partition):
                        throttled_bytes += info.size
                    if read_committed:
                        pd.aborted_transactions = [
                            FetchResponse.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                            for t in part.log.collect_aborted_transactions(fp.fetch_offset, info.next_offset)]
            except KafkaError as exc:
                pd.error_code = exc.code
                had_error = True
                # as Kafka's answer for a partition in error: no offsets; for a topic or partition it does not
                # know, an empty list of aborted transactions, for a partition whose read failed (not the leader,
                # offset out of range, epochs) null, also when read_committed
                pd.high_watermark = pd.last_stable_offset = pd.log_start_offset = -1
                pd.aborted_transactions = [] if exc.code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                             ErrorCode.UNKNOWN_TOPIC_ID,
                                                             ErrorCode.TOPIC_AUTHORIZATION_FAILED) else None
                if exc.code in _LEADER_HINT_ERRORS and version >= 16 and topic is not None:
                    # KIP-951: the leader this broker knows and its address save the client a metadata round
                    # trip; as Kafka's, only from v16 (CurrentLeader exists from v12 but stays -1 before v16)
                    p = topic.partitions.get(fp.partition)
                    if p is not None and p.leader >= 0 and p.leader != broker.node_id:
                        pd.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=p.leader,
                                                                           leader_epoch=p.leader_epoch)
                        hinted.add(p.leader)
            except OSError:
                pd.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                had_error = True
    if hinted and version >= 16:
        from kbroker.server.handlers.common import broker_endpoints

        resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
                               for n, h, port, rack in broker_endpoints(ctx) if n in hinted]
    return resp, (-1 if had_error and total == 0 else total), parts, throttled_bytes


def _redirect(ctx, part, fp, pd, client_rack: str, now_ms: int) -> bool:
    """KIP-392 on the leader: True (and ``pd`` holds the preferred read replica, the offsets and no records) when
    ``replica.selector.class`` picks another replica for this consumer's rack."""
    if not part.is_leader:
        return False
    from kbroker.server.replica_selector import preferred_read_replica

    broker = ctx.broker
    chosen = preferred_read_replica(broker.replica_manager.replica_selector, part, client_rack, fp.fetch_offset,
                                    broker.controller.image, ctx.listener_name, now_ms)
    if chosen < 0:
        return False
    pd.preferred_read_replica = chosen
    pd.high_watermark = part.high_watermark
    pd.last_stable_offset = part.last_stable_offset
    pd.log_start_offset = part.log_start_offset
    return True


def follower_position(rm, part, replica_id: int, fp, pd, version: int, now_ms: int, record: bool = True) -> bool:
    """A follower's fetch position: check it against the leader's log and (``record``) record it, moving the high
    watermark and maybe expanding the ISR. False (and ``pd.diverging_epoch`` set) when the follower's log
    diverged from the leader's at its last fetched epoch. Raises KafkaError NOT_LEADER_OR_FOLLOWER /
    OFFSET_OUT_OF_RANGE."""
    if replica_id not in part.replicas or replica_id == part.local_id:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {replica_id} is not a follower of this partition")
    log = part.log
    if fp.last_fetched_epoch >= 0 and version >= 12:
        # a last epoch older than any this log has "ends" where this log's first epoch starts, and the follower
        # truncates there (see LeaderEpochCache.end_offset_for)
        epoch, end_offset = log.leader_epoch_cache.end_offset_for(fp.last_fetched_epoch, log.log_end_offset)
        if epoch != fp.last_fetched_epoch or end_offset < fp.fetch_offset:
            pd.diverging_epoch.epoch = epoch
            pd.diverging_epoch.end_offset = end_offset
            pd.high_watermark = part.high_watermark
            pd.log_start_offset = part.log_start_offset
            pd.last_stable_offset = part.last_stable_offset
            return False
    if fp.fetch_offset < log.log_start_offset or fp.fetch_offset > log.log_end_offset:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"fetch offset {fp.fetch_offset} is outside {log.log_start_offset}..{log.log_end_offset}")
    if record:
        part.update_follower_fetch(replica_id, fp.fetch_offset, now_ms, fp.log_start_offset)
        rm.maybe_expand_isr(part, replica_id)
    return True
