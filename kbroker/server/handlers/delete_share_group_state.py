"""DeleteShareGroupState (API key 86), version 0: the share coordinator's inter-broker API (KIP-932).

Behavior: per (topic id, partition): the state is removed from ``__share_group_state`` (a tombstone), answered
once on the in-sync replicas; a state that does not exist is no error. Errors per partition:
CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse as R
from kbroker.server.share.state_api import per_partition

API_KEY = ApiKey.DELETE_SHARE_GROUP_STATE
VERSIONS = range(0, 1)


async def handle(ctx, request: DeleteShareGroupStateRequest) -> R:
    sc = ctx.broker.share_coordinator

    def delete(group: str, tid: bytes, p):  # noqa: ANN001, ANN202
        sc.delete_state(group, tid, p.partition)
        return ErrorCode.NONE

    return R(results=await per_partition(ctx, request, R.DeleteStateResult, R.PartitionResult, delete,
                                         writes=True))
