"""DeleteTopics (API key 20), versions 1-6.

Behavior: each named topic (or, v6+, topic id) is removed through the quorum controller (a
RemoveTopicRecord); the partition logs are then deleted. Unknown names get UNKNOWN_TOPIC_OR_PARTITION,
unknown ids UNKNOWN_TOPIC_ID; internal topics cannot be deleted (INVALID_TOPIC_EXCEPTION);
``delete.topic.enable=false`` gives TOPIC_DELETION_DISABLED.
Version notes: v5 error messages; v6 topics by name or id.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse as R
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.handlers import common

API_KEY = ApiKey.DELETE_TOPICS
VERSIONS = range(1, 7)


async def handle(ctx, request: DeleteTopicsRequest) -> R:
    """As Kafka's ControllerApis: DELETE on the cluster, else DESCRIBE and DELETE on each topic. A name the caller
    may not DESCRIBE, or an existing topic it may not DELETE, is TOPIC_AUTHORIZATION_FAILED (a topic asked by id
    that it may not DESCRIBE without its name); a describable name that does not exist is
    UNKNOWN_TOPIC_OR_PARTITION. Checked on the node the client sent it to, before any forwarding."""
    if ctx.broker.authorizer is None or common.cluster_authorized(ctx, 6, log_denied=False):  # AclOperation.DELETE
        return await _delete(ctx, request)
    from kbroker.server.authorizer import AclOperation, ResourceType

    image = ctx.broker.controller.image
    field = "topics" if ctx.api_version >= 6 else "topic_names"
    items = list(getattr(request, field))
    resolved = []  # (name or None when an unknown id, topic id or None when asked by name)
    for item in items:
        if ctx.api_version >= 6 and item.topic_id != ZERO_UUID:
            topic = image.topics_by_id.get(item.topic_id)
            resolved.append((topic.name if topic is not None else None, item.topic_id))
        else:
            resolved.append((item.name if ctx.api_version >= 6 else item, None))
    names = [n for n, _ in resolved if n is not None]
    describable = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    deletable = common.authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, names)
    refused = {}
    for i, (name, topic_id) in enumerate(resolved):
        if name is None or name in deletable:
            continue
        if topic_id is not None:  # asked by id: the name only when the caller may describe the topic
            refused[i] = (name if name in describable else None, topic_id)
        elif name not in describable or name in image.topics_by_name:
            refused[i] = (name, ZERO_UUID)
    entries = {i: R.DeletableTopicResult(name=name, topic_id=topic_id, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                         error_message=(common.AUTHORIZATION_MESSAGES[ErrorCode.TOPIC_AUTHORIZATION_FAILED]
                                                        if ctx.api_version >= 5 else None))
               for i, (name, topic_id) in refused.items()}
    return await common.answer_refused(ctx, request, field, "responses", entries, _delete, R)


async def _delete(ctx, request: DeleteTopicsRequest) -> R:
    image = ctx.broker.controller.image
    if ctx.api_version >= 6:
        items = [((t.name, t.topic_id), image.topics_by_id.get(t.topic_id) if t.topic_id != ZERO_UUID
                  else image.topics_by_name.get(t.name or "")) for t in request.topics]
    else:
        items = [((n, ZERO_UUID), image.topics_by_name.get(n)) for n in request.topic_names]
    # KIP-599: v5+ answer THROTTLING_QUOTA_EXCEEDED, older ones are throttled
    refused = common.mutation_quota(ctx, [(key, len(t.partitions) if t is not None else 0) for key, t in items],
                                    strict=ctx.api_version >= 5)
    if refused:
        if ctx.api_version >= 6:
            request.topics = [t for t in request.topics if (t.name, t.topic_id) not in refused]
        else:
            request.topic_names = [n for n in request.topic_names if (n, ZERO_UUID) not in refused]
    resp = await _handle(ctx, request)
    for name, topic_id in refused:
        resp.responses.append(R.DeletableTopicResult(name=name, topic_id=topic_id,
                                                     error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                                     error_message=common.THROTTLING_QUOTA_MESSAGE))
    return resp


async def _handle(ctx, request: DeleteTopicsRequest) -> R:
    from kbroker.server.handlers.common import maybe_forward

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    broker = ctx.broker
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id if t.topic_id != ZERO_UUID else None) for t in request.topics]
    else:
        wanted = [(n, None) for n in request.topic_names]
    resp = R()
    image = broker.controller.image
    to_delete = []
    for name, topic_id in wanted:
        out = R.DeletableTopicResult(name=name, topic_id=topic_id or ZERO_UUID)
        resp.responses.append(out)
        topic = image.topics_by_id.get(topic_id) if topic_id is not None else image.topics_by_name.get(name)
        if not broker.config.get_bool("delete.topic.enable"):
            out.error_code = ErrorCode.TOPIC_DELETION_DISABLED
        elif topic is None:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_ID if topic_id is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif common.is_internal_topic(topic.name):
            out.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
            out.error_message = f"Internal topic {topic.name} cannot be deleted"
        else:
            out.name, out.topic_id = topic.name, topic.topic_id
            if topic.topic_id not in to_delete:
                to_delete.append(topic.topic_id)
        if out.error_code and ctx.api_version >= 5 and out.error_message is None:
            out.error_message = common.error_message(out.error_code)
    if to_delete:
        try:
            broker.controller.delete_topics(to_delete)
            code, message = await common.metadata_committed(broker)  # in a cluster: once the quorum committed
        except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
            code, message = exc.code, exc.message
        if code:
            for out in resp.responses:
                if out.error_code == ErrorCode.NONE:
                    out.error_code, out.error_message = code, message if ctx.api_version >= 5 else None
    return resp
