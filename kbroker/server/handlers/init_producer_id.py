"""InitProducerId (API key 22), versions 0-5 (v6, two-phase commit, is unstable in Kafka 4.3.1 and not
advertised).

Behavior:
* ProducerId/ProducerEpoch (v3+) must both be -1 or both be set, else INVALID_REQUEST (with producer id
  and epoch -1), as Kafka's KafkaApis checks before anything else;
* without a transactional id (idempotent producers, on by default in today's clients): a fresh producer
  id with epoch 0 every time, as Kafka's TransactionCoordinator does. That includes the KIP-360 epoch bump
  an idempotent producer asks for (v3+, its current id and epoch, e.g. after OUT_OF_ORDER_SEQUENCE_NUMBER):
  it gets a *new* producer id, not the old id with epoch + 1. Ids come from blocks recorded in the
  metadata log (ProducerIdsRecord);
* an empty transactional id is INVALID_REQUEST; any other goes to the transaction coordinator
  (``kbroker/coordinator/transaction``): NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while its
  ``__transaction_state`` partition is not served here; INVALID_TRANSACTION_TIMEOUT outside
  ``(0, transaction.max.timeout.ms]``; a new id gets a producer id with epoch 0, a known one an epoch bump
  (fencing older producers); an open transaction of the fenced producer is aborted first and the answer is
  CONCURRENT_TRANSACTIONS (the client retries); PRODUCER_FENCED for a KIP-360 request naming an older
  producer.
Version notes:
* v3: ProducerId/ProducerEpoch (KIP-360); v4: PRODUCER_FENCED (older versions get INVALID_PRODUCER_EPOCH
  instead).
"""

from __future__ import annotations

import logging

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

log = logging.getLogger(__name__)

API_KEY = ApiKey.INIT_PRODUCER_ID
VERSIONS = range(0, 6)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def _error(code: int) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


async def handle(ctx, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if ctx.broker.authorizer is not None:
        if request.transactional_id is not None:
            if not common.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                    request.transactional_id):
                return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not (common.cluster_authorized(ctx, AclOperation.IDEMPOTENT_WRITE, log_denied=False)
                  or common.authorize_any_topic(ctx, AclOperation.WRITE)):
            # KIP-679: IDEMPOTENT_WRITE or WRITE on a topic; the denial is logged once, for IDEMPOTENT_WRITE
            common.log_decision(ctx, False, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, ("kafka-cluster",))
            return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    tc = ctx.broker.transaction_coordinator
    quorum = ctx.broker.metadata_quorum
    if quorum is not None and tc.producer_id_manager.exhausted:
        # In a cluster, a block of ids is used only once the quorum committed it (AllocateProducerIds).
        try:
            tc.producer_id_manager.add_block(*await quorum.allocate_producer_ids())
        except KafkaError as exc:
            log.info("no producer id block yet: %s", exc)
            return _error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)  # retriable, as Kafka answers without a block
    has_id = request.producer_id != NO_PRODUCER_ID
    has_epoch = request.producer_epoch != NO_PRODUCER_EPOCH
    if has_id != has_epoch:
        return _error(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is None:
        try:
            producer_id = tc.producer_id_manager.generate()
        except KafkaError as exc:
            return _error(exc.code)
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
    if request.transactional_id == "":
        return _error(ErrorCode.INVALID_REQUEST)
    expected = (request.producer_id, request.producer_epoch) if has_id else None
    result = tc.init_producer_id(request.transactional_id, request.transaction_timeout_ms, expected)
    code = result.error_code
    if not code:
        code = await tc.replicated(request.transactional_id)  # the new epoch is on every in-sync replica
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    if code:
        return _error(code)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=result.producer_id,
                                  producer_epoch=result.producer_epoch)
