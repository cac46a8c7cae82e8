"""ElectLeaders (API key 43), versions 0-2.

Behavior: the quorum controller elects the preferred (first) replica (PREFERRED, 0) or, for leaderless
partitions, any live replica (UNCLEAN, 1), writing a PartitionChangeRecord when the leader changes. A
partition whose leader is already the wanted one gets ELECTION_NOT_NEEDED, which on a single node is the
answer for every partition; null ``TopicPartitions`` means every partition, and then those results are left
out. Unknown topics/partitions get UNKNOWN_TOPIC_OR_PARTITION; an unknown election type fails the request
with INVALID_REQUEST. In a cluster a broker that is not the active controller forwards the request there; the
answer comes once the elections are committed.
Version notes: v1 ElectionType and top-level ErrorCode; v2 flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import ElectLeadersRequest, ElectLeadersResponse as R

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = range(0, 3)


async def handle(ctx, request: ElectLeadersRequest) -> R:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers import common

    if common.cluster_denied(ctx, AclOperation.ALTER):  # as Kafka: the top level and every partition named
        code, msg = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, common.CLUSTER_DENIED_MESSAGE
        return R(error_code=code, replica_election_results=[
            R.ReplicaElectionResult(topic=t.topic, partition_result=[
                R.PartitionResult(partition_id=p, error_code=code, error_message=msg) for p in t.partitions])
            for t in request.topic_partitions or []])
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    wanted = None if request.topic_partitions is None else [(t.topic, list(t.partitions))
                                                             for t in request.topic_partitions]
    try:
        results = ctx.broker.controller.elect_leaders(request.election_type, wanted)
    except KafkaError as exc:  # INVALID_REQUEST, or NOT_CONTROLLER: this node does not lead the metadata quorum
        return R(error_code=exc.code)
    code, _ = await common.metadata_committed(ctx.broker)
    if code:
        return R(error_code=code)
    return R(replica_election_results=[
        R.ReplicaElectionResult(topic=topic, partition_result=[
            R.PartitionResult(partition_id=pid, error_code=code, error_message=msg) for pid, code, msg in parts])
        for topic, parts in results])
