"""StreamsGroupHeartbeat (API key 88), version 0: membership of a streams group (KIP-1071, Kafka Streams'
``group.protocol=streams``).

Behavior (details in ``kbroker.coordinator.group.streams_group``): a member (one stream thread) joins with epoch 0,
its topology, process id and empty task lists; heartbeats with its member epoch and, when they changed, the tasks
it owns; leaves with -1. The coordinator keeps the group and topology epochs, configures the topology against the
topic metadata, assigns tasks with the sticky task assignor (active tasks and ``streams.num.standby.replicas``
standby replicas) and reconciles each member towards its target, revoking before assigning. Statuses:
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS (the broker then creates the missing repartition and changelog
topics with the partitions, replication factor and configs the topology gives, when the caller may CREATE them, as
Kafka 4.3 does), INCORRECTLY_PARTITIONED_TOPICS, STALE_TOPOLOGY. Errors: INVALID_REQUEST, GROUP_ID_NOT_FOUND (not
a streams group), UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, GROUP_AUTHORIZATION_FAILED,
TOPIC_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION (``streams.version`` not finalized), and the coordinator errors
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
Version notes: v0 is Kafka 4.3's only version.
"""

from __future__ import annotations

import logging

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.handlers.join_group import request_meta

API_KEY = ApiKey.STREAMS_GROUP_HEARTBEAT
VERSIONS = range(0, 1)
STREAMS_VERSION_FEATURE = "streams.version"

log = logging.getLogger(__name__)


def streams_groups_enabled(broker) -> bool:  # noqa: ANN001
    """Kafka serves streams groups when the ``streams.version`` feature is finalized at level 1 or above."""
    return broker.controller.image.features.get(STREAMS_VERSION_FEATURE, 0) >= 1


async def handle(ctx, request: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResponse:
    if not streams_groups_enabled(ctx.broker):
        return StreamsGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                             error_message="Streams groups are not enabled (streams.version).")
    if ctx.broker.authorizer is not None:
        if not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return StreamsGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if request.topology is not None:
            topics = {t for s in request.topology.subtopologies for t in s.source_topics}
            if topics and len(common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)) \
                    < len(topics):
                return StreamsGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    response, creatable = ctx.broker.group_coordinator.streams_group_heartbeat(request_meta(ctx), request)
    if creatable and response.error_code == ErrorCode.NONE:
        _create_internal_topics(ctx, request.group_id, creatable)
    return response


def _create_internal_topics(ctx, group_id: str, creatable: dict) -> None:  # noqa: ANN001
    """Create the missing internal topics (name -> (partitions, replication factor or -1, configs)) that the caller
    may create (CREATE on the cluster, else on the topic); in a cluster through the active controller. The outcome is
    only logged: the next heartbeat finds the topics in the metadata image, or reports them missing again."""
    from kbroker.controller.quorum_controller import CreateTopicSpec

    names = sorted(creatable)
    if ctx.broker.authorizer is not None and not common.cluster_authorized(ctx, AclOperation.CREATE,
                                                                            log_denied=False):
        names = sorted(common.authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, names))
    if not names:
        return
    broker = ctx.broker
    quorum = broker.metadata_quorum
    if quorum is not None and not broker.controller.is_active:
        for n in names:
            partitions, rf, configs = creatable[n]
            quorum.create_topic_soon(n, partitions, rf, configs)
        return
    specs = [CreateTopicSpec(name=n, num_partitions=creatable[n][0], replication_factor=creatable[n][1],
                             configs=dict(creatable[n][2])) for n in names]
    try:
        for r in broker.controller.create_topics(specs, validate_only=False):
            if r.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.info("streams group %s: creating internal topic %s: %s", group_id, r.name,
                         ErrorCode(r.error_code).name)
    except KafkaError as exc:
        log.info("creating internal topics %s: %s", ", ".join(names), exc)
