"""WriteShareGroupState (API key 85), versions 0-1: the share coordinator's inter-broker API (KIP-932); a
partition leader persists a share partition's state changes.

Behavior: per (topic id, partition): the state batches replace the offsets they cover, the start offset (-1:
unchanged) moves the start and drops what lies below it; written as a ``ShareSnapshot`` record and answered
once on the in-sync replicas. Errors per partition: FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH (older than the
stored epochs), CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE.
Version notes: v1 adds ``DeliveryCompleteCount`` (not used: the count follows from the batches).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import WriteShareGroupStateRequest, WriteShareGroupStateResponse as R
from kbroker.server.share.state_api import per_partition

API_KEY = ApiKey.WRITE_SHARE_GROUP_STATE
VERSIONS = range(0, 2)


async def handle(ctx, request: WriteShareGroupStateRequest) -> R:
    sc = ctx.broker.share_coordinator
    return R(results=await per_partition(
        ctx, request, R.WriteStateResult, R.PartitionResult,
        lambda g, tid, p: sc.write_update(g, tid, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
                                          [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                           for b in p.state_batches]), writes=True))
