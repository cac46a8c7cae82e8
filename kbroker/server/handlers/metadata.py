"""Metadata (API key 3), versions 0-13.

Behavior:
* brokers: this listener's advertised endpoint of every registered, unfenced broker; ``ControllerId`` is
  this node (a combined broker+controller, so the Admin client can route controller requests here);
* topics: all (null list, or an empty list before v1) or the requested names/ids; unknown names are
  created when the request allows it (v4+, implicitly before) and ``auto.create.topics.enable`` is true,
  with ``num.partitions`` partitions; invalid names get INVALID_TOPIC_EXCEPTION;
* leader epochs (v7+) and topic ids (v10+) come from the metadata image;
* authorized operations (v8+) when asked: the caller's operations on each topic, and (v8-10) on the cluster
  (``kbroker.server.authorizer``; 0 for the cluster without DESCRIBE on it, as Kafka); ``-2147483648`` when not
  asked;
* with an authorizer (Kafka's ``handleTopicMetadataRequest``): an all-topics answer leaves out the topics the
  caller may not DESCRIBE; a named one is TOPIC_AUTHORIZATION_FAILED without telling whether it exists; a missing
  topic is auto-created only with CREATE on the cluster or on it, else TOPIC_AUTHORIZATION_FAILED.
Version notes:
* v10-11 may carry topic ids in the request but must not use them; v12+ may look up topics by id;
  v13 adds a top-level ErrorCode.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import MetadataRequest, MetadataResponse
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.METADATA
VERSIONS = range(0, 14)

AUTHORIZED_OPERATIONS_NOT_REQUESTED = -2147483648


async def handle(ctx, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    image = broker.controller.image
    asked_cluster_ops = 8 <= version <= 10 and request.include_cluster_authorized_operations
    resp = MetadataResponse(cluster_id=image.cluster_id, controller_id=broker.controller_id,
                            cluster_authorized_operations=common.authorized_ops(
                                ctx, 4, "kafka-cluster", asked_cluster_ops)
                            if not asked_cluster_ops or not common.cluster_denied(ctx, AclOperation.DESCRIBE) else 0)
    resp.brokers = [MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p, rack=r)
                    for n, h, p, r in common.broker_endpoints(ctx)]
    all_topics = request.topics is None or (version == 0 and not request.topics)
    if all_topics:
        wanted = [(t.name, None) for t in sorted(image.topics_by_name.values(), key=lambda t: t.name)]
    else:
        wanted = [(t.name, t.topic_id if version >= 12 else None) for t in request.topics]
    allow_auto = request.allow_auto_topic_creation if version >= 4 else True
    auto_create = not all_topics and allow_auto and broker.config.auto_create_topics_enable
    denied: dict[str, bool] = {}  # names answered TOPIC_AUTHORIZATION_FAILED -> whether their existence may show
    if broker.authorizer is not None:
        wanted, denied = _authorize(ctx, image, wanted, all_topics, auto_create)
    creating: set[str] = set()
    if auto_create:
        missing = [name for name, tid in wanted
                   if name is not None and (tid is None or tid == ZERO_UUID) and name not in image.topics_by_name
                   and name not in denied]
        if missing:
            creating = common.auto_create_topics(ctx, missing)
            image = broker.controller.image
    for name, topic_id in wanted:
        if denied and name in denied:
            resp.topics.append(_denied(image, name, topic_id, denied[name]))
            continue
        out = describe_topic(ctx, image, name, topic_id, version >= 8 and request.include_topic_authorized_operations)
        if name in creating and out.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            out.error_code = ErrorCode.LEADER_NOT_AVAILABLE
        resp.topics.append(out)
    return resp


def _authorize(ctx, image, wanted: list, all_topics: bool, auto_create: bool) -> tuple[list, dict[str, bool]]:
    """As Kafka's ``handleTopicMetadataRequest``: DESCRIBE on each topic. All topics asked for: those not
    authorized are left out. Named topics: those not authorized are TOPIC_AUTHORIZATION_FAILED (existence not
    told); a missing topic that would be auto-created needs CREATE on the cluster or on the topic, else it is
    TOPIC_AUTHORIZATION_FAILED too. Returns the topics to answer and the denied names (-> was it the CREATE
    check, i.e. the caller may know of it)."""
    def name_of(name, topic_id):  # noqa: ANN001, ANN202
        if topic_id is not None and topic_id != ZERO_UUID:
            topic = image.topics_by_id.get(topic_id)
            return topic.name if topic is not None else None  # an unknown id: UNKNOWN_TOPIC_ID
        return name

    names = [n for name, tid in wanted if (n := name_of(name, tid)) is not None]
    allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_denied=not all_topics)
    if all_topics:
        return [(n, tid) for n, tid in wanted if n in allowed], {}
    denied = {n: False for n in names if n not in allowed}
    if auto_create:
        missing = [n for n in names if n in allowed and n not in image.topics_by_name
                   and common.valid_topic_name(n)]
        if missing and not common.cluster_authorized(ctx, AclOperation.CREATE, log_denied=False):
            creatable = common.authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, missing)
            denied.update((n, True) for n in missing if n not in creatable)
    return [(n if tid is None or tid == ZERO_UUID else name_of(n, tid) or n, tid) for n, tid in wanted], denied


def _denied(image, name: str, topic_id: bytes | None, known: bool) -> MetadataResponse.MetadataResponseTopic:
    """A TOPIC_AUTHORIZATION_FAILED entry: no topic id for a topic asked by name, no name for one asked by id
    (Kafka: topic ids are not sensitive)."""
    by_id = topic_id is not None and topic_id != ZERO_UUID
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=None if by_id else name,
        topic_id=topic_id if by_id else ZERO_UUID, is_internal=known and common.is_internal_topic(name),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)


def describe_topic(ctx, image, name: str | None, topic_id: bytes | None,
                   asked: bool = False) -> MetadataResponse.MetadataResponseTopic:
    out = MetadataResponse.MetadataResponseTopic(name=name, topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)
    if topic_id is not None and topic_id != ZERO_UUID:
        topic = image.topics_by_id.get(topic_id)
        if topic is None:
            out.error_code = ErrorCode.UNKNOWN_TOPIC_ID
            out.topic_id = topic_id
            return out
    else:
        topic = image.topics_by_name.get(name) if name is not None else None
        if topic is None:
            if name is not None and not common.valid_topic_name(name):
                out.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
            else:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return out
    out.name = topic.name
    out.topic_id = topic.topic_id
    out.is_internal = common.is_internal_topic(topic.name)
    out.topic_authorized_operations = common.authorized_ops(ctx, 2, topic.name, asked)
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
        out.partitions.append(MetadataResponse.MetadataResponsePartition(
            error_code=ErrorCode.NONE if p.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p.partition_id, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr), offline_replicas=[]))
    return out
