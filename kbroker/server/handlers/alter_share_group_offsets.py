"""AlterShareGroupOffsets (API key 91), version 0: set the share-partition start offsets of an empty share group
(KIP-932; the Admin client's ``alterShareGroupOffsets``, ``kafka-share-groups.sh --reset-offsets``).

Behavior: the group must be a share group without members (else NON_EMPTY_GROUP; GROUP_ID_NOT_FOUND "Group <id> is
not a share group." for a classic or consumer group); an unused group id becomes an empty share group (its
``ShareGroupMetadata`` record at epoch 0), as Kafka creates it; each
partition's state in ``__share_group_state`` becomes the given start offset with nothing in flight, and the
leader's share partition reads it again on the next ShareFetch. Errors: top level GROUP_AUTHORIZATION_FAILED
(no READ on the group), INVALID_GROUP_ID, the coordinator errors; per partition UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_AUTHORIZATION_FAILED (no READ on the topic), INVALID_REQUEST (a negative offset), and the share
coordinator's errors (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE). A state kept by another node (the
leader of its ``__share_group_state`` partition) is reset there with InitializeShareGroupState. The partitions set
are recorded as initialized in the group's ``ShareGroupStatePartitionMetadata`` (DescribeShareGroupOffsets without
topics lists them, from any node).
"""

from __future__ import annotations

import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.ALTER_SHARE_GROUP_OFFSETS
VERSIONS = range(0, 1)

Resp = AlterShareGroupOffsetsResponse


async def handle(ctx, request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    broker = ctx.broker
    sc = broker.share_coordinator
    image = broker.controller.image
    gid = request.group_id
    code, message = common.share_offsets_refusal(ctx, gid, AclOperation.READ, need_empty=True, create=True)
    if code:
        return Resp(error_code=code, error_message=message)
    names = [t.topic_name for t in request.topics]
    denied: set[str] = set()
    if broker.authorizer is not None:
        denied = set(names) - common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)
    if request.topics and not sc.topic_exists():
        broker.share_persister.ensure_topic()
    resp = Resp()
    now = int(time.time() * 1000)
    initialized: dict[bytes, set[int]] = {}
    for rt in request.topics:
        t = image.topics_by_name.get(rt.topic_name)
        out = Resp.AlterShareGroupOffsetsResponseTopic(topic_name=rt.topic_name,
                                                        topic_id=t.topic_id if t is not None else b"\0" * 16)
        resp.responses.append(out)
        for rp in rt.partitions:
            pd = Resp.AlterShareGroupOffsetsResponsePartition(partition_index=rp.partition_index)
            out.partitions.append(pd)
            if rt.topic_name in denied:
                pd.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif t is None or rp.partition_index not in t.partitions:
                pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif rp.start_offset < 0:
                pd.error_code = ErrorCode.INVALID_REQUEST
            else:
                leader_epoch = max(t.partitions[rp.partition_index].leader_epoch, 0)
                try:  # here, or on the node keeping the state (InitializeShareGroupState)
                    await broker.share_persister.reset(gid, t.topic_id, rp.partition_index, rp.start_offset,
                                                       leader_epoch, now)
                except KafkaError as exc:
                    pd.error_code, pd.error_message = exc.code, exc.message
                    continue
                broker.share_partitions.forget(gid, t.topic_id, rp.partition_index)
                initialized.setdefault(t.topic_id, set()).add(rp.partition_index)
    if initialized:  # the group coordinator records them (ShareGroupStatePartitionMetadata)
        broker.group_coordinator.share_group_state_initialized(
            gid, {tid: frozenset(ps) for tid, ps in initialized.items()})
    return resp
