"""ElectLeaders (API key 43), versions 0-2.

Behavior: the quorum controller elects the preferred (first) replica (PREFERRED, 0) or, for leaderless
partitions, any live replica (UNCLEAN, 1), writing a PartitionChangeRecord when the leader changes. A
partition whose leader is already the wanted one gets ELECTION_NOT_NEEDED, which on a single node is the
answer for every partition; null ``TopicPartitions`` means every partition, and then those results are left
out. Unknown topics/partitions get UNKNOWN_TOPIC_OR_PARTITION; an unknown election type fails the request
with INVALID_REQUEST. In a cluster a standby forwards the request to the active controller, which answers once
the quorum committed the new leaders.
Version notes: v1 ElectionType and top-level ErrorCode; v2 flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import KafkaError
from kbroker.protocol.messages import ElectLeadersRequest, ElectLeadersResponse as R

API_KEY = ApiKey.ELECT_LEADERS
VERSIONS = range(0, 3)


async def handle(ctx, request: ElectLeadersRequest) -> R:
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.handlers.common import maybe_forward, metadata_committed

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    wanted = None if request.topic_partitions is None else [(t.topic, list(t.partitions))
                                                             for t in request.topic_partitions]
    try:
        results = ctx.broker.controller.elect_leaders(request.election_type, wanted)
        code, message = await metadata_committed(ctx.broker)  # in a cluster: once the quorum committed
    except KafkaError as exc:  # INVALID_REQUEST (election type), NOT_CONTROLLER
        return R(error_code=exc.code)
    if code:
        results = [(topic, [(pid, code, message) if c == ErrorCode.NONE else (pid, c, m) for pid, c, m in parts])
                   for topic, parts in results]
    return R(replica_election_results=[
        R.ReplicaElectionResult(topic=topic, partition_result=[
            R.PartitionResult(partition_id=pid, error_code=code, error_message=msg) for pid, code, msg in parts])
        for topic, parts in results])
