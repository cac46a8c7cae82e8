"""CreateTopics (API key 19), versions 2-7.

Behavior: each topic goes to the quorum controller, which validates it as Kafka does
(INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
INVALID_CONFIG, INVALID_REPLICA_ASSIGNMENT) and writes TopicRecord, PartitionRecords and ConfigRecords
to the metadata log; ``validate_only`` checks without writing (and answers the configs the topic would have and a
fresh topic id that is not kept, as Kafka). A name listed twice in one request gets
INVALID_REQUEST for every occurrence. At most 10,000 partitions per request and 10,000 metadata records (Kafka's limits;
POLICY_VIOLATION "Excessively large number of partitions per request." / "Unable to perform excessively large
batch operation." for every topic of the request, checked before anything is built). The topics are written a few hundred partitions at a time, so that a request creating thousands of
partitions does not hold up other clients; their logs are created in a worker thread.
Version notes: v5 returns partitions, replication factor and configs; v7 the topic id.
"""

from __future__ import annotations

import uuid
from collections import Counter

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import CreateTopicsRequest, CreateTopicsResponse as R
from kbroker.server.handlers import common

API_KEY = ApiKey.CREATE_TOPICS
VERSIONS = range(2, 8)


TOO_MANY_PARTITIONS_MESSAGE = "Excessively large number of partitions per request."
SLICE_PARTITIONS = 500
FD_RESERVE = 512
"""Descriptors kept free for connections, segment rolls and the metadata log."""


def fd_shortage(new_partitions: int) -> str | None:
    """Why ``new_partitions`` more logs would not fit under the open-file limit (each holds its ``.log`` open),
    or None. Refusing up front keeps a topic from existing in the metadata without its logs."""
    import os
    import resource

    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        in_use = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or in_use + new_partitions + FD_RESERVE <= soft:
        return None
    return (f"this broker has {in_use} of its {soft} file descriptors in use; {new_partitions} more partitions "
            f"would exceed the open-file limit (raise it: ulimit -n / LimitNOFILE)")
"""Partitions committed per metadata write; the loop serves other clients between slices."""


async def create_in_slices(ctx, specs, validate_only: bool) -> dict:
    """Create the topics a few hundred partitions at a time, yielding to other requests between the writes,
    with Kafka's limit of 10,000 partitions for the whole request (POLICY_VIOLATION beyond it)."""
    import asyncio

    from kbroker.controller.quorum_controller import (
        EXCESSIVE_BATCH_MESSAGE,
        MAX_PARTITIONS_PER_REQUEST,
        MAX_RECORDS_PER_BATCH,
        CreateTopicResult,
    )

    controller = ctx.broker.controller
    default = ctx.broker.config.num_partitions
    results: dict = {}

    def create(batch: list) -> None:
        try:
            for r in controller.create_topics(batch, validate_only=validate_only):
                results[r.name] = r
        except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
            for spec in batch:
                results[spec.name] = CreateTopicResult(spec.name, exc.code, exc.message)

    def partitions_of(spec) -> int:  # noqa: ANN001
        return spec.num_partitions if spec.num_partitions > 0 else len(spec.assignments) if spec.assignments \
            else default

    # Kafka checks the whole request before anything is built, and refuses every topic of it: more than 10,000
    # partitions in all, or more than 10,000 metadata records (a TopicRecord, the PartitionRecords and the
    # ConfigRecords of each topic; kbroker counts every topic named, Kafka those that pass validation).
    total = sum(partitions_of(spec) for spec in specs)
    refusal = None
    if total > MAX_PARTITIONS_PER_REQUEST:
        refusal = TOO_MANY_PARTITIONS_MESSAGE
    elif total + sum(1 + len(spec.configs or ()) for spec in specs) > MAX_RECORDS_PER_BATCH:
        refusal = EXCESSIVE_BATCH_MESSAGE
    if refusal is not None:
        return {spec.name: CreateTopicResult(spec.name, ErrorCode.POLICY_VIOLATION, refusal) for spec in specs}

    batch: list = []
    batch_partitions = 0
    for spec in specs:
        n = partitions_of(spec)
        if not validate_only and (why := fd_shortage(n)):
            results[spec.name] = CreateTopicResult(spec.name, ErrorCode.KAFKA_STORAGE_ERROR, why)
            continue
        if batch and batch_partitions + n > SLICE_PARTITIONS:
            create(batch)
            batch, batch_partitions = [], 0
            await asyncio.sleep(0)
        batch.append(spec)
        batch_partitions += n
    if batch:
        create(batch)
    if not validate_only:  # in a cluster, answer once the quorum has committed the topics
        code, message = await common.metadata_committed(ctx.broker)
        if code:
            for name, r in list(results.items()):
                if r.error_code == ErrorCode.NONE:
                    results[name] = CreateTopicResult(name, code, message)
    return results


async def handle(ctx, request: CreateTopicsRequest) -> R:
    """As Kafka's ControllerApis: CREATE on the cluster, else on each topic (TOPIC_AUTHORIZATION_FAILED); the
    configs of a created topic the caller may not DESCRIBE_CONFIGS are left out (``topic_config_error_code``
    TOPIC_AUTHORIZATION_FAILED). Checked on the node the client sent it to, before any forwarding."""
    if ctx.broker.authorizer is None:
        return await _create(ctx, request)
    from kbroker.server.authorizer import AclOperation, ResourceType

    counts = Counter(t.name for t in request.topics)
    refused = {}
    if not common.cluster_authorized(ctx, AclOperation.CREATE, log_denied=False):
        single = [t.name for t in request.topics if counts[t.name] == 1 and t.name != "__cluster_metadata"]
        creatable = common.authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, single)
        refused = {i: R.CreatableTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                             error_message="Authorization failed.", num_partitions=-1,
                                             replication_factor=-1, configs=[])
                   for i, t in enumerate(request.topics) if t.name in single and t.name not in creatable}
    resp = await common.answer_refused(ctx, request, "topics", "topics", refused, _create, R)
    created = [t for t in resp.topics if t.error_code == ErrorCode.NONE]
    describable = common.authorized_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                          [t.name for t in created])
    for t in created:
        if t.name not in describable:
            t.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            t.configs = []
    return resp


async def _create(ctx, request: CreateTopicsRequest) -> R:
    from kbroker.server.handlers import common

    refused: set[str] = set()
    if not request.validate_only:  # KIP-599: v6+ answer THROTTLING_QUOTA_EXCEEDED, older ones are throttled
        default = ctx.broker.config.get_int("num.partitions")
        refused = common.mutation_quota(ctx, [(t.name, len(t.assignments) if t.assignments else
                                               t.num_partitions if t.num_partitions > 0 else default)
                                              for t in request.topics], strict=ctx.api_version >= 6)
        request.topics = [t for t in request.topics if t.name not in refused]
    resp = await _handle(ctx, request)
    for name in sorted(refused):
        resp.topics.append(R.CreatableTopicResult(
            name=name, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED, error_message=None,  # Kafka sends no message
            num_partitions=-1, replication_factor=-1, configs=[]))
    return resp


async def _handle(ctx, request: CreateTopicsRequest) -> R:
    from kbroker.server.handlers.common import maybe_forward

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    from kbroker.controller.quorum_controller import CreateTopicSpec
    from kbroker.server.handlers.describe_configs import _topic_entries

    counts = Counter(t.name for t in request.topics)
    specs = []
    for t in request.topics:
        if counts[t.name] > 1:
            continue
        specs.append(CreateTopicSpec(
            name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
            configs={c.name: c.value for c in t.configs if c.value is not None}))
    results = await create_in_slices(ctx, specs, request.validate_only)
    resp = R()
    for t in request.topics:
        if counts[t.name] > 1:
            resp.topics.append(R.CreatableTopicResult(name=t.name, error_code=ErrorCode.INVALID_REQUEST,
                                                      error_message=f"Duplicate topic name {t.name} in request",
                                                      num_partitions=-1, replication_factor=-1))
            continue
        r = results[t.name]
        out = R.CreatableTopicResult(name=t.name, topic_id=r.topic_id or bytes(16), error_code=r.error_code,
                                     error_message=r.error_message, num_partitions=r.num_partitions,
                                     replication_factor=r.replication_factor)
        if r.error_code == ErrorCode.NONE:
            # validate_only: as Kafka, the configs the topic would have and an id that is not kept
            would_be = {c.name: c.value for c in t.configs if c.value is not None} if request.validate_only else None
            if request.validate_only:
                out.topic_id = uuid.uuid4().bytes
            out.configs = [R.CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                                   config_source=e.config_source, is_sensitive=e.is_sensitive)
                           for e in _topic_entries(ctx, t.name, None, False, would_be)]
        else:
            out.num_partitions = out.replication_factor = -1
            out.configs = []  # as Kafka: an empty list, not null
        resp.topics.append(out)
    return resp
