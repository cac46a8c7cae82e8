"""EndTxn (API key 26), versions 0-4 (v5, the transactions-version-2 epoch bump, is not advertised:
``transaction.version`` stays 0).

Behavior:
* Committed true/false moves the producer's Ongoing transaction to PrepareCommit/PrepareAbort in
  ``__transaction_state``; the coordinator then writes the COMMIT/ABORT markers to every partition of the
  transaction (data partitions and ``__consumer_offsets``) and CompleteCommit/CompleteAbort, before answering
  (with ``kbroker.transaction.marker.delay.ms`` > 0, a test hook, the markers follow the answer);
* a retry after the transaction completed with the same result: NONE; while it is completing:
  CONCURRENT_TRANSACTIONS; Empty or the other result: INVALID_TXN_STATE; unknown id or another producer id:
  INVALID_PRODUCER_ID_MAPPING; another epoch: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2);
  INVALID_REQUEST for an empty transactional id.
Version notes:
* v2: PRODUCER_FENCED; v3: flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import EndTxnRequest, EndTxnResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.END_TXN
VERSIONS = range(0, 5)


async def handle(ctx, request: EndTxnRequest) -> EndTxnResponse:
    if not request.transactional_id:
        return EndTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.WRITE,
                                                                  ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = ctx.broker.transaction_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if not error:
        error = await ctx.broker.transaction_coordinator.replicated(request.transactional_id)
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(error_code=error)
