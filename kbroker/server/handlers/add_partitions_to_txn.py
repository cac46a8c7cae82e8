"""AddPartitionsToTxn (API key 24), versions 0-5.

Behavior:
* v0-3 (clients): one transaction; the partitions join the producer's transaction (state Ongoing, written to
  ``__transaction_state``). Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION and, as in Kafka,
  every other partition OPERATION_NOT_ATTEMPTED; otherwise each partition gets the coordinator's answer:
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING (unknown id or another producer
  id), PRODUCER_FENCED (another epoch; INVALID_PRODUCER_EPOCH before v2), CONCURRENT_TRANSACTIONS (the
  previous transaction is still completing), INVALID_REQUEST for an empty transactional id;
* v4-5 (broker to coordinator, batched): ``Transactions`` answered one by one in ``ResultsByTransaction``;
  with ``VerifyOnly`` nothing is written and each partition is NONE if it is in the transaction,
  TRANSACTION_ABORTABLE if not (or the producer's error for all of them); without it the partitions are
  added as for v3, for a transactions-version-2 producer (another broker's implicit add of Produce v12 /
  TxnOffsetCommit v5: the transaction then ends and is fenced with the version 2 rules).
Version notes:
* v2: PRODUCER_FENCED; v3: flexible; v4: batched broker form, top-level ErrorCode; v5: TRANSACTION_ABORTABLE
  may be returned to clients.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
VERSIONS = range(0, 6)


def _results(partitions: list[tuple[str, int]], errors: dict[tuple[str, int], int]) -> list[R.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[R.AddPartitionsToTxnPartitionResult]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(R.AddPartitionsToTxnPartitionResult(
            partition_index=partition, partition_error_code=errors[(topic, partition)]))
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


async def add_or_verify(ctx, transactional_id: str, producer_id: int, producer_epoch: int, topics,
                        verify_only: bool, version: int) -> list[R.AddPartitionsToTxnTopicResult]:
    tc = ctx.broker.transaction_coordinator
    image = ctx.broker.controller.image
    partitions = list(dict.fromkeys((t.name, p) for t in topics for p in t.partitions))
    if not transactional_id:
        return _results(partitions, {tp: ErrorCode.INVALID_REQUEST for tp in partitions})
    if version < 4 and ctx.broker.authorizer is not None:
        # a client's request (v4+ come from brokers, authorized with CLUSTER_ACTION in handle()): WRITE on the
        # transactional id, then on each topic; internal topics are never authorized here, as in Kafka
        if not common.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return _results(partitions, {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions})
        writable = common.authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                           [t for t, _ in partitions if not common.is_internal_topic(t)])
        if any(t not in writable for t, _ in partitions):
            return _results(partitions, {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] not in writable
                                         else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                         if tp[0] not in image.topics_by_name
                                         or tp[1] not in image.topics_by_name[tp[0]].partitions
                                         else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions})
    unknown = {tp for tp in partitions
               if tp[0] not in image.topics_by_name or tp[1] not in image.topics_by_name[tp[0]].partitions}
    if unknown:
        return _results(partitions, {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                                     else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in partitions})
    if verify_only:
        errors = tc.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    else:
        # v4+ without VerifyOnly: another broker's implicit add for a transactions-version-2 producer
        code = tc.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                 client_transaction_version=2 if version >= 4 else 0)
        if not code:
            code = await tc.replicated(transactional_id)
        errors = {tp: code for tp in partitions}
    if version < 2:
        errors = {tp: ErrorCode.INVALID_PRODUCER_EPOCH if e == ErrorCode.PRODUCER_FENCED else e
                  for tp, e in errors.items()}
    return _results(partitions, errors)


async def handle(ctx, request: AddPartitionsToTxnRequest) -> R:
    version = ctx.api_version
    if version <= 3:
        return R(results_by_topic_v3_and_below=await add_or_verify(
            ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, request.v3_and_below_topics, False, version))
    if ctx.broker.authorizer is not None and not common.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)  # v4+ come from other brokers
    resp = R()
    for txn in request.transactions:
        resp.results_by_transaction.append(R.AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id,
            topic_results=await add_or_verify(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                                        txn.verify_only, version)))
    return resp
