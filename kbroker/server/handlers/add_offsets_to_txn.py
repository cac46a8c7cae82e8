"""AddOffsetsToTxn (API key 25), versions 0-4.

Behavior:
* adds the ``__consumer_offsets`` partition of ``GroupId`` to the producer's transaction (the topic is
  created if needed), so that the TxnOffsetCommit that follows and its marker belong to the transaction;
  errors as for AddPartitionsToTxn (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS,
  NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), INVALID_REQUEST for an empty transactional id.
Version notes:
* v2: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before); v3: flexible.
"""

from __future__ import annotations

from kbroker.coordinator.group.config import OFFSETS_TOPIC
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
VERSIONS = range(0, 5)


async def handle(ctx, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not request.transactional_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
    if ctx.broker.authorizer is not None:
        if not common.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not common.authorize(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gc = ctx.broker.group_coordinator
    error = gc.ensure_offsets_topic()
    if not error:
        partition = gc.partition_for(request.group_id)
        error = ctx.broker.transaction_coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [(OFFSETS_TOPIC, partition)])
        if not error:
            error = await ctx.broker.transaction_coordinator.replicated(request.transactional_id)
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return AddOffsetsToTxnResponse(error_code=error)
