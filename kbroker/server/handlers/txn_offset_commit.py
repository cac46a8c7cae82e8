"""TxnOffsetCommit (API key 28), versions 0-6.

Behavior:
* v5 (transactions version 2, KIP-890 part 2): the group's ``__consumer_offsets`` partition is added to the
  producer's transaction by the transaction coordinator (no AddOffsetsToTxn needed; AddPartitionsToTxn v4
  without ``verify_only`` when the coordinator is another broker), with the same errors as below;
* v0-4: the group's ``__consumer_offsets`` partition must already be in the producer's transaction
  (AddOffsetsToTxn): the transaction coordinator is asked, as Kafka's verification does; otherwise
  INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, or INVALID_PRODUCER_EPOCH / PRODUCER_FENCED (v3+) for an old
  epoch, with nothing written. In a cluster whose transaction coordinator for the id is another broker, that
  broker is asked with AddPartitionsToTxn v4 ``verify_only`` (KIP-890, :mod:`kbroker.server.txn_verification`;
  COORDINATOR_NOT_AVAILABLE when it cannot be reached);
* the group member is validated like an OffsetCommit (v3+: generation, member id, group instance id; for a
  consumer-protocol (KIP-848) group the generation field is the member epoch); a commit with generation -1
  and no member id is accepted for any group state (Kafka's rule for transactional commits) and creates a
  simple group when the transaction commits. An unknown group with a generation gets GROUP_ID_NOT_FOUND and
  a member's stale epoch STALE_MEMBER_EPOCH from v6; below v6 both are ILLEGAL_GENERATION (KIP-1319);
* per partition: UNKNOWN_TOPIC_OR_PARTITION for an unknown topic name (v0-5), UNKNOWN_TOPIC_ID for an unknown
  topic id (v6, on every partition of the topic), OFFSET_METADATA_TOO_LARGE; the others are
  written as one transactional batch of the producer; they are pending (invisible to OffsetFetch, which
  answers UNSTABLE_OFFSET_COMMIT with RequireStable) until the COMMIT marker reaches the partition, and dropped
  by an ABORT marker. The offset records carry the topic id (resolved from the name below v6), as in Kafka 4.4.
Version notes:
* v2: committed leader epoch; v3: generation, member id, group instance id, flexible; PRODUCER_FENCED;
  v5: the implicit add of transactions version 2; v6 (KIP-1319, Kafka 4.4): topics by topic id (the response
  carries the ids, no names), GenerationId renamed GenerationIdOrMemberEpoch, GROUP_ID_NOT_FOUND,
  STALE_MEMBER_EPOCH and UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from kbroker.coordinator.group.config import OFFSETS_TOPIC
from kbroker.coordinator.group.shard import CommitPartition
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse as R
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.TXN_OFFSET_COMMIT
VERSIONS = range(0, 7)
#: the first version that adds the group to the transaction (transactions version 2)
IMPLICIT_ADD_VERSION = 5
#: the first version with topic ids, GROUP_ID_NOT_FOUND and STALE_MEMBER_EPOCH (KIP-1319)
TOPIC_ID_VERSION = 6


def verification_error(code: int, version: int) -> int:
    """A verification answer as a data broker reports it to a transactions-v1 client."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.INVALID_TXN_STATE
    return code


async def handle(ctx, request: TxnOffsetCommitRequest) -> R:
    version = ctx.api_version
    broker = ctx.broker
    image = broker.controller.image
    gc = broker.group_coordinator
    parts: list[CommitPartition] = []
    layout: list[tuple[str, bytes, list[CommitPartition]]] = []
    by_id = version >= TOPIC_ID_VERSION
    # (name, topic id, known) per request topic: v6 names come from the ids, v0-5 ids from the names
    topics = []
    for t in request.topics:
        topic = image.topics_by_id.get(t.topic_id) if by_id else image.topics_by_name.get(t.name)
        if by_id:
            topics.append((topic.name if topic is not None else "", t.topic_id, topic is not None))
        else:
            topics.append((t.name, topic.topic_id if topic is not None else ZERO_UUID, topic is not None))
    denied = None  # the whole request's authorization error, as Kafka's getErrorResponse
    readable = None  # the topics the caller may READ (None: no authorizer)
    if broker.authorizer is not None and request.transactional_id and request.group_id:
        if not common.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            readable = common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC,
                                               [name for name, _, known in topics if known or not by_id])
    for t, (name, topic_id, known) in zip(request.topics, topics):
        if known:
            error = ErrorCode.NONE
        else:
            error = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if denied is not None:
            error = denied
        elif readable is not None and (known or not by_id) and name not in readable:
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # (an unknown id stays UNKNOWN_TOPIC_ID, as in Kafka)
        tps = [CommitPartition(topic=name, partition=p.partition_index, offset=p.committed_offset,
                               leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
                               metadata=p.committed_metadata, topic_id=topic_id, error_code=error)
               for p in t.partitions]
        parts.extend(tps)
        layout.append((name, topic_id, tps))
    if denied is not None or (readable is not None and not any(p.error_code == ErrorCode.NONE for p in parts)):
        # answered without the coordinators, as Kafka does
        return _response(layout)
    if not request.transactional_id:
        error = ErrorCode.INVALID_REQUEST
    elif not request.group_id:
        error = ErrorCode.INVALID_GROUP_ID
    else:
        error = gc.coordinator_state(request.group_id)
    if not error:
        tp = (OFFSETS_TOPIC, gc.partition_for(request.group_id))
        tc = broker.transaction_coordinator
        add = version >= IMPLICIT_ADD_VERSION
        if add:
            found = tc.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch, [tp],
                                      client_transaction_version=2)
            if not found:
                found = await tc.replicated(request.transactional_id)
            if found == ErrorCode.CONCURRENT_TRANSACTIONS:
                # the previous transaction is completing: retriable for the client (Kafka reports the
                # coordinator's retriable answers as COORDINATOR_NOT_AVAILABLE here)
                found = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            found = tc.verify_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                         [tp])[tp]
        if found == ErrorCode.NOT_COORDINATOR and broker.txn_verifier is not None:
            # the transaction coordinator is another broker: ask it (KIP-890, kbroker/server/txn_verification.py)
            found = await broker.txn_verifier.verify(request.transactional_id, request.producer_id,
                                                     request.producer_epoch, tp, add=add)
        error = verification_error(found, version)
    if error:
        for p in parts:
            if p.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                p.error_code = error
    else:
        gc.txn_offset_commit(request.group_id, request.producer_id, request.producer_epoch,
                             request.generation_id_or_member_epoch if version >= 3 else -1,
                             request.member_id if version >= 3 else "",
                             request.group_instance_id if version >= 3 else None, parts)
        if any(p.error_code == ErrorCode.NONE for p in parts):
            code = await gc.replicated(request.group_id)
            for p in parts:
                if code and p.error_code == ErrorCode.NONE:
                    p.error_code = code
    for p in parts:
        if version < 3 and p.error_code == ErrorCode.PRODUCER_FENCED:
            p.error_code = ErrorCode.INVALID_PRODUCER_EPOCH
        elif version < TOPIC_ID_VERSION and p.error_code in (ErrorCode.GROUP_ID_NOT_FOUND,
                                                             ErrorCode.STALE_MEMBER_EPOCH):
            p.error_code = ErrorCode.ILLEGAL_GENERATION
    return _response(layout)


def _response(layout: list[tuple[str, bytes, list[CommitPartition]]]) -> R:
    return R(topics=[R.TxnOffsetCommitResponseTopic(name=name, topic_id=topic_id, partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=p.partition, error_code=p.error_code) for p in tps])
        for name, topic_id, tps in layout])
