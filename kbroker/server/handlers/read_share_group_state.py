"""ReadShareGroupState (API key 84), version 0: the share coordinator's inter-broker API (KIP-932); a partition
leader reads a share partition's state when it starts serving it.

Behavior: per (topic id, partition): the state epoch, start offset and state batches (first and last offset,
delivery state, delivery count) from ``__share_group_state``. Errors per partition: UNKNOWN_TOPIC_OR_PARTITION
(no state yet), CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ReadShareGroupStateRequest, ReadShareGroupStateResponse as R
from kbroker.server.share.state_api import per_partition

API_KEY = ApiKey.READ_SHARE_GROUP_STATE
VERSIONS = range(0, 1)


async def handle(ctx, request: ReadShareGroupStateRequest) -> R:
    sc = ctx.broker.share_coordinator

    def read(group: str, tid: bytes, p):  # noqa: ANN001, ANN202
        state = sc.read_state(group, tid, p.partition)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset, "state_batches": [
            R.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.delivery_state,
                         delivery_count=b.delivery_count) for b in state.state_batches]}

    return R(results=await per_partition(ctx, request, R.ReadStateResult, R.PartitionResult, read, writes=False))
