"""CreatePartitions (API key 37), versions 0-3.

Behavior: each topic goes to the quorum controller, which adds PartitionRecords for the new partitions
(rules and messages as Kafka's: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS when the count is not an
increase, INVALID_REPLICA_ASSIGNMENT for a bad manual assignment, INVALID_REQUEST for a topic named twice);
``validate_only`` checks without writing. The broker creates the new partition logs when it applies the
committed records (in a worker thread when there are many; until then they answer NOT_LEADER_OR_FOLLOWER,
which clients retry). At most 10,000 new partitions per request (POLICY_VIOLATION), and none beyond what
the open-file limit allows (KAFKA_STORAGE_ERROR, so a partition never exists only in the metadata).
Version notes: v2 flexible; v3 may return THROTTLING_QUOTA_EXCEEDED in Kafka (kbroker has no quotas).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse as R

API_KEY = ApiKey.CREATE_PARTITIONS
VERSIONS = range(0, 4)


async def handle(ctx, request: CreatePartitionsRequest) -> R:
    """ALTER on each topic (else TOPIC_AUTHORIZATION_FAILED), checked on the node the client sent it to, before
    any forwarding, as Kafka."""
    if ctx.broker.authorizer is None:
        return await _create(ctx, request)
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.authorizer import AclOperation, ResourceType
    from kbroker.server.handlers import common

    names = list(dict.fromkeys(t.name for t in request.topics))
    allowed = common.authorized_names(ctx, AclOperation.ALTER, ResourceType.TOPIC, names)
    if len(allowed) == len(names):
        return await _create(ctx, request)
    request.topics = [t for t in request.topics if t.name in allowed]
    answered = {r.name: r for r in (await _create(ctx, request)).results} if request.topics else {}
    return R(results=[answered[n] if n in answered else R.CreatePartitionsTopicResult(
        name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        error_message=common.AUTHORIZATION_MESSAGES[ErrorCode.TOPIC_AUTHORIZATION_FAILED]) for n in names])


async def _create(ctx, request: CreatePartitionsRequest) -> R:
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.handlers import common

    refused: set[str] = set()
    if not request.validate_only:  # KIP-599: v3+ answer THROTTLING_QUOTA_EXCEEDED, older ones are throttled
        image = ctx.broker.controller.image
        items = []
        for t in request.topics:
            current = image.topics_by_name.get(t.name)
            items.append((t.name, t.count - len(current.partitions) if current is not None else 0))
        refused = common.mutation_quota(ctx, items, strict=ctx.api_version >= 3)
        request.topics = [t for t in request.topics if t.name not in refused]
    resp = await _handle(ctx, request)
    for name in sorted(refused):
        resp.results.append(R.CreatePartitionsTopicResult(name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                                          error_message=common.THROTTLING_QUOTA_MESSAGE))
    return resp


async def _handle(ctx, request: CreatePartitionsRequest) -> R:
    from kbroker.server.handlers.common import maybe_forward

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.handlers.create_topics import fd_shortage

    image = ctx.broker.controller.image
    topics, refused = [], {}
    for t in request.topics:
        current = image.topics_by_name.get(t.name)
        extra = t.count - len(current.partitions) if current is not None else 0
        why = fd_shortage(extra) if extra > 0 and not request.validate_only else None
        if why:
            refused[t.name] = (t.name, ErrorCode.KAFKA_STORAGE_ERROR, why)
            continue
        topics.append((t.name, t.count,
                       [list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None))
    from kbroker.protocol.errors import KafkaError
    from kbroker.server.handlers import common

    try:
        results = ctx.broker.controller.create_partitions(topics, validate_only=request.validate_only)
        code, message = (ErrorCode.NONE, None) if request.validate_only else \
            await common.metadata_committed(ctx.broker)  # in a cluster: once the quorum committed
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        results, code, message = [(name, exc.code, exc.message) for name, _, _ in topics], ErrorCode.NONE, None
    if code:
        results = [(r[0], code, message) if r[1] == ErrorCode.NONE else r for r in results]
    by_name = {r[0]: r for r in results}
    by_name.update(refused)
    names = list(dict.fromkeys(t.name for t in request.topics))
    return R(results=[R.CreatePartitionsTopicResult(name=name, error_code=by_name[name][1],
                                                    error_message=by_name[name][2]) for name in names])
