"""AlterPartitionReassignments (API key 45), versions 0-1.

Behavior, per partition (rules in ``kbroker.controller.replication_control``): the target replica list is
checked as a manual assignment, so brokers that are not registered give INVALID_REPLICA_ASSIGNMENT ("The
manual partition assignment includes broker N, but no such broker is registered."), as do empty lists and
repeated brokers; a target equal to the current replicas succeeds at once; a null target (cancel) gets
NO_REASSIGNMENT_IN_PROGRESS when nothing is in progress; with ``AllowReplicationFactorChange`` false a
different length is INVALID_REPLICATION_FACTOR. Moving replicas to other brokers needs replication, which
kbroker does not have yet (INVALID_REPLICA_ASSIGNMENT); on a single node no other target is valid anyway.
In a cluster a standby forwards the request to the active controller, which answers once the quorum
committed the change (NOT_CONTROLLER / REQUEST_TIMED_OUT otherwise).
Version notes: v0 flexible; v1 AllowReplicationFactorChange (KIP-860).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse as R

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
VERSIONS = range(0, 2)


async def handle(ctx, request: AlterPartitionReassignmentsRequest) -> R:
    from kbroker.protocol.errors import ErrorCode, KafkaError
    from kbroker.server.handlers.common import maybe_forward, metadata_committed

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    topics = [(t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas)) for p in t.partitions])
              for t in request.topics]
    allow = request.allow_replication_factor_change if ctx.api_version >= 1 else True
    try:
        results = ctx.broker.controller.alter_partition_reassignments(topics, allow_replication_factor_change=allow)
        code, message = await metadata_committed(ctx.broker)  # in a cluster: once the quorum committed
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        results, code, message = [(name, [(pid, ErrorCode.NONE, None) for pid, _ in parts]) for name, parts in topics], \
            exc.code, exc.message
    if code:
        results = [(name, [(pid, code, message) if c == ErrorCode.NONE else (pid, c, m) for pid, c, m in parts])
                   for name, parts in results]
    return R(allow_replication_factor_change=allow, error_message=None, responses=[
        R.ReassignableTopicResponse(name=name, partitions=[
            R.ReassignablePartitionResponse(partition_index=pid, error_code=code, error_message=msg)
            for pid, code, msg in parts])
        for name, parts in results])
