"""AlterPartitionReassignments (API key 45), versions 0-1.

Behavior, per partition (rules in ``kbroker.controller.replication_control``): the target replica list is
checked as a manual assignment, so brokers that are not registered give INVALID_REPLICA_ASSIGNMENT ("The
manual partition assignment includes broker N, but no such broker is registered."), as do empty lists and
repeated brokers; a target equal to the current replicas succeeds at once; a null target (cancel) gets
NO_REASSIGNMENT_IN_PROGRESS when nothing is in progress; with ``AllowReplicationFactorChange`` false a
different length is INVALID_REPLICATION_FACTOR. Other targets start moving replicas (KIP-455: the new ones
catch up and join the ISR, then the removed ones leave; see ``replication_control``). In a cluster a broker
that is not the active controller forwards the request there; the answer comes once the change is committed
(REQUEST_TIMED_OUT otherwise, NOT_CONTROLLER when no controller can be reached).
Version notes: v0 flexible; v1 AllowReplicationFactorChange (KIP-860).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse as R

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
VERSIONS = range(0, 2)


async def handle(ctx, request: AlterPartitionReassignmentsRequest) -> R:
    from kbroker.protocol.errors import KafkaError
    from kbroker.server.handlers import common

    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.authorizer import AclOperation

    if common.cluster_denied(ctx, AclOperation.ALTER):  # as Kafka: the top level and every partition
        code, msg = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, common.CLUSTER_DENIED_MESSAGE
        return R(allow_replication_factor_change=request.allow_replication_factor_change if ctx.api_version >= 1
                 else True, error_code=code, error_message=msg, responses=[
                     R.ReassignableTopicResponse(name=t.name, partitions=[R.ReassignablePartitionResponse(
                         partition_index=p.partition_index, error_code=code, error_message=msg)
                         for p in t.partitions]) for t in request.topics])
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    topics = [(t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas)) for p in t.partitions])
              for t in request.topics]
    allow = request.allow_replication_factor_change if ctx.api_version >= 1 else True
    try:
        results = ctx.broker.controller.alter_partition_reassignments(topics, allow_replication_factor_change=allow)
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        return R(allow_replication_factor_change=allow, error_code=exc.code, error_message=exc.message)
    code, message = await common.metadata_committed(ctx.broker)
    if code:
        return R(allow_replication_factor_change=allow, error_code=code, error_message=message)
    return R(allow_replication_factor_change=allow, error_message=None, responses=[
        R.ReassignableTopicResponse(name=name, partitions=[
            R.ReassignablePartitionResponse(partition_index=pid, error_code=code, error_message=msg)
            for pid, code, msg in parts])
        for name, parts in results])
