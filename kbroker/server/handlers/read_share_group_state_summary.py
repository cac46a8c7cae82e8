"""ReadShareGroupStateSummary (API key 87), versions 0-1: the share coordinator's inter-broker API (KIP-932);
the group coordinator reads start offsets for DescribeShareGroupOffsets.

Behavior: per (topic id, partition): state epoch, leader epoch, start offset and (v1) the number of records
between the start offset and the end of the state that are acknowledged or archived. Errors per partition:
UNKNOWN_TOPIC_OR_PARTITION (no state yet), CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS.
Version notes: v1 adds ``DeliveryCompleteCount``.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse as R
from kbroker.server.share.state_api import per_partition

API_KEY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
VERSIONS = range(0, 2)
_DONE = (2, 4)  # Acknowledged, Archived


async def handle(ctx, request: ReadShareGroupStateSummaryRequest) -> R:
    sc = ctx.broker.share_coordinator

    def read(group: str, tid: bytes, p):  # noqa: ANN001, ANN202
        state = sc.read_state(group, tid, p.partition)
        if state is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        done = sum(b.last_offset - b.first_offset + 1 for b in state.state_batches if b.delivery_state in _DONE)
        return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset, "delivery_complete_count": done}

    return R(results=await per_partition(ctx, request, R.ReadStateSummaryResult, R.PartitionResult, read,
                                         writes=False))
