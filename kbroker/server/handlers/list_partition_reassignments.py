"""ListPartitionReassignments (API key 46), version 0.

Behavior: the partitions whose replica set is being changed (adding or removing replicas in the metadata
image), all of them when ``Topics`` is null or only the named partitions; unknown topics and partitions
without a reassignment are left out. Without DESCRIBE on the cluster: CLUSTER_AUTHORIZATION_FAILED, with every named
partition echoed with empty replica lists (Kafka's error answer). In a cluster a broker that is not the active controller forwards the
request there (its own image may be behind).
Version notes: v0 is flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse as R

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
VERSIONS = range(0, 1)


async def handle(ctx, request: ListPartitionReassignmentsRequest) -> R:
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import CLUSTER_DENIED_MESSAGE, cluster_denied, maybe_forward

    if cluster_denied(ctx, AclOperation.DESCRIBE):
        # Kafka's error answer echoes every named partition with empty replica lists
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED_MESSAGE, topics=[
            R.OngoingTopicReassignment(name=t.name, partitions=[
                R.OngoingPartitionReassignment(partition_index=i, replicas=[], adding_replicas=[],
                                               removing_replicas=[]) for i in t.partition_indexes])
            for t in request.topics or ()])

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    wanted = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    ongoing = ctx.broker.controller.list_partition_reassignments(wanted)
    return R(error_message=None, topics=[
        R.OngoingTopicReassignment(name=name, partitions=[
            R.OngoingPartitionReassignment(partition_index=p.partition_id, replicas=list(p.replicas),
                                           adding_replicas=list(p.adding_replicas),
                                           removing_replicas=list(p.removing_replicas)) for p in parts])
        for name, parts in ongoing])
