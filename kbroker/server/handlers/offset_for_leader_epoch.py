"""OffsetForLeaderEpoch (API key 23), versions 2-4 (KIP-101, KIP-279; v0-1 were removed in Kafka 4.0).

Behavior, per partition, on the partition's leader only (as Kafka's ``ReplicaManager.lastOffsetForLeaderEpoch``):
* ``CurrentLeaderEpoch`` checked first: FENCED_LEADER_EPOCH when it is older than the leader's, UNKNOWN_LEADER_EPOCH
  when newer (-1 skips the check); then NOT_LEADER_OR_FOLLOWER on a follower or on a broker holding no replica,
  UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not have;
* the answer is the leader's ``leader-epoch-checkpoint`` (:meth:`LeaderEpochCache.end_offset_for
  <kbroker.storage.leader_epoch.LeaderEpochCache.end_offset_for>`): ``LeaderEpoch`` the largest epoch <= the one
  asked for and ``EndOffset`` where it ends (the start of the next epoch, or the log end offset for the latest);
  an epoch older than every known one ends where the first known one starts; an epoch newer than every known
  one, or -1, gets ``(-1, -1)`` with no error, as Kafka's cache answers.

Clients use it to validate a fetch position after a leader change (KIP-320: the Java consumer, librdkafka 2.1+):
an end offset below the position, for the epoch of the last record consumed, means the log was truncated.
``ReplicaId`` (v3+; -1 for consumers, -2 by default) is not used: followers find divergence through Fetch.
Version notes: v3: ReplicaId; v4: flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
VERSIONS = range(2, 5)


def end_offset(part, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
    """``(leader epoch, end offset)`` for ``leader_epoch`` on the leader replica ``part``; KafkaError as above."""
    part.check_leader_epoch(current_leader_epoch)
    if not part.is_leader:
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    log = part.log
    cache = log.leader_epoch_cache
    if leader_epoch > cache.latest_epoch:
        return -1, -1  # newer than every epoch of this log (Kafka: "should never be hit")
    return cache.end_offset_for(leader_epoch, log.log_end_offset)


async def handle(ctx, request: OffsetForLeaderEpochRequest) -> R:
    rm = ctx.broker.replica_manager
    resp = R()
    allowed = None  # the topics the caller may ask about (None: all)
    if ctx.broker.authorizer is not None and not common.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION,
                                                                           log_denied=False):
        # a follower has CLUSTER_ACTION; a consumer (KIP-320) needs DESCRIBE on the topic, as in Kafka
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                          [t.topic for t in request.topics])
    for t in request.topics:
        out_t = R.OffsetForLeaderTopicResult(topic=t.topic)
        resp.topics.append(out_t)
        for p in t.partitions:
            out = R.EpochEndOffset(partition=p.partition)
            out_t.partitions.append(out)
            try:
                if allowed is not None and t.topic not in allowed:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                part = rm.get_partition(t.topic, p.partition)
                out.leader_epoch, out.end_offset = end_offset(part, p.current_leader_epoch, p.leader_epoch)
            except KafkaError as exc:
                out.error_code = exc.code
    return resp
