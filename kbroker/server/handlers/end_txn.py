"""EndTxn (API key 26), versions 0-5.

Behavior:
* Committed true/false moves the producer's Ongoing transaction to PrepareCommit/PrepareAbort in
  ``__transaction_state``; the coordinator then writes the COMMIT/ABORT markers to every partition of the
  transaction (data partitions and ``__consumer_offsets``) and CompleteCommit/CompleteAbort, before answering
  (with ``kbroker.transaction.marker.delay.ms`` > 0, a test hook, the markers follow the answer);
* a retry after the transaction completed with the same result: NONE; while it is completing:
  CONCURRENT_TRANSACTIONS; Empty or the other result: INVALID_TXN_STATE; unknown id or another producer id:
  INVALID_PRODUCER_ID_MAPPING; another epoch: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2);
  INVALID_REQUEST for an empty transactional id.
* v5 (transactions version 2, KIP-890 part 2; the Java client sends it when ``transaction.version`` >= 2 is
  finalized): the epoch is bumped in PrepareCommit/PrepareAbort and the markers carry it; the answer holds the
  producer id and epoch to continue with (a new producer id with epoch 0 when the epoch was exhausted). A
  retry carries the epoch before the bump (NONE once completed, CONCURRENT_TRANSACTIONS while completing); an
  abort in Empty/CompleteCommit/CompleteAbort with the current epoch bumps it with no partitions; other
  epochs are PRODUCER_FENCED (Kafka 4.3's table, :meth:`TransactionCoordinatorShard._end_transaction_v2
  <kbroker.coordinator.transaction.shard.TransactionCoordinatorShard._end_transaction_v2>`).
Version notes:
* v2: PRODUCER_FENCED; v3: flexible; v5: ProducerId and ProducerEpoch in the answer, version 2 rules.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import EndTxnRequest, EndTxnResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.END_TXN
VERSIONS = range(0, 6)
#: the first version with the transactions-version-2 rules
TV2_VERSION = 5


async def handle(ctx, request: EndTxnRequest) -> EndTxnResponse:
    if not request.transactional_id:
        return EndTxnResponse(error_code=ErrorCode.INVALID_REQUEST)
    if ctx.broker.authorizer is not None and not common.authorize(ctx, AclOperation.WRITE,
                                                                  ResourceType.TRANSACTIONAL_ID,
                                                                  request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    tc = ctx.broker.transaction_coordinator
    v2 = ctx.api_version >= TV2_VERSION
    error = tc.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                               request.committed, client_transaction_version=2 if v2 else 0)
    if not error:
        error = await tc.replicated(request.transactional_id)
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    resp = EndTxnResponse(error_code=error)
    if v2 and not error:
        resp.producer_id, resp.producer_epoch = tc.producer_identity(request.transactional_id)
    return resp
