"""DeleteShareGroupOffsets (API key 92), version 0: forget an empty share group's state of whole topics (KIP-932;
the Admin client's ``deleteShareGroupOffsets``, ``kafka-share-groups.sh --delete-offsets``).

Behavior: the group must be a share group without members (else NON_EMPTY_GROUP, or GROUP_ID_NOT_FOUND); the
state of every partition of each topic is deleted from ``__share_group_state`` (a tombstone), so the next
ShareFetch starts the partition again from ``share.auto.offset.reset``, and the topic leaves the group's
``ShareGroupStatePartitionMetadata``. Errors: top level
GROUP_AUTHORIZATION_FAILED (no READ on the group), the coordinator errors; per topic
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED (no READ on the topic), and the share coordinator's
errors.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DELETE_SHARE_GROUP_OFFSETS
VERSIONS = range(0, 1)

Resp = DeleteShareGroupOffsetsResponse


async def handle(ctx, request: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    broker = ctx.broker
    sc = broker.share_coordinator
    image = broker.controller.image
    gid = request.group_id
    code, message = common.share_offsets_refusal(ctx, gid, AclOperation.READ, need_empty=True)
    if code:
        return Resp(error_code=code, error_message=message)
    names = [t.topic_name for t in request.topics]
    denied: set[str] = set()
    if broker.authorizer is not None:
        denied = set(names) - common.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)
    resp = Resp()
    deleted: list[bytes] = []
    for rt in request.topics:
        t = image.topics_by_name.get(rt.topic_name)
        out = Resp.DeleteShareGroupOffsetsResponseTopic(topic_name=rt.topic_name,
                                                         topic_id=t.topic_id if t is not None else b"\0" * 16)
        resp.responses.append(out)
        if rt.topic_name in denied:
            out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if t is None:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if sc.topic_exists():
            try:
                for p in sorted(t.partitions):
                    await broker.share_persister.delete(gid, t.topic_id, p)  # here or on the node keeping it
            except KafkaError as exc:
                out.error_code, out.error_message = exc.code, exc.message
                continue
        broker.share_partitions.forget(gid, t.topic_id)
        deleted.append(t.topic_id)
    if deleted:  # they leave the group's ShareGroupStatePartitionMetadata
        broker.group_coordinator.share_group_state_deleted(gid, deleted)
    return resp
