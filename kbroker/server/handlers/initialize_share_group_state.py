"""InitializeShareGroupState (API key 83), version 0: the share coordinator's inter-broker API (KIP-932).

Behavior: each (topic id, partition) of the group gets a fresh state in ``__share_group_state`` at the given
state epoch and start offset (nothing in flight), answered once on the in-sync replicas. Errors per partition:
CLUSTER_AUTHORIZATION_FAILED (no CLUSTER_ACTION), NOT_COORDINATOR (the state's partition is not led here),
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, FENCED_STATE_EPOCH (an older state epoch).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse as R
from kbroker.server.share.state_api import per_partition

API_KEY = ApiKey.INITIALIZE_SHARE_GROUP_STATE
VERSIONS = range(0, 1)


async def handle(ctx, request: InitializeShareGroupStateRequest) -> R:
    sc = ctx.broker.share_coordinator
    return R(results=await per_partition(
        ctx, request, R.InitializeStateResult, R.PartitionResult,
        lambda g, tid, p: sc.initialize_state(g, tid, p.partition, p.state_epoch, p.start_offset), writes=True))
