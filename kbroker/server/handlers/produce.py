"""Produce (API key 0), versions 3-13 (0-13 advertised, as Kafka 4.x does for librdkafka: KAFKA-18659).

Behavior:
* acks must be -1, 0 or 1 (else INVALID_REQUIRED_ACKS); acks=0 writes no response, and closes the
  connection instead when a partition failed, as Kafka does;
* each partition must carry exactly one magic-2 batch (INVALID_RECORD otherwise), checked from its 61-byte
  header and CRC-32C (CORRUPT_MESSAGE on a bad CRC, wrong magic or bad lengths); then every record's
  structure, after decompression for a compressed batch, in compiled code (``check_record_structure``):
  INVALID_RECORD with the bad record's index in the record errors (v8+), CORRUPT_MESSAGE for a payload
  that is not valid for its codec;
  zstd needs v7+ (UNSUPPORTED_COMPRESSION_TYPE); a batch above ``max.message.bytes`` is MESSAGE_TOO_LARGE;
* the batch is stored as sent; only its base offset and partition leader epoch are rewritten;
* idempotent batches (producer id >= 0; a negative base sequence is INVALID_RECORD) go through the
  partition's ProducerStateManager while offsets are assigned (kbroker/storage/producer_state.py, Kafka
  4.3 rules): a retry of one of the producer's last 5 batches is answered NONE with the offsets it got
  the first time and its original timestamp as log_append_time_ms, and is not written again; a gap or a
  new epoch not starting at 0 is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH
  (every version: Kafka stopped returning PRODUCER_FENCED to Produce in 2.7); an unknown or expired
  producer id is accepted at any sequence (Kafka 4.x never answers UNKNOWN_PRODUCER_ID here);
* a request holding a transactional batch fails as a whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  when it has no transactional id, as in Kafka;
* transactional batches (v3-11, transactions version 1): the first batch of a transaction in a partition is checked
  with the transaction coordinator (Kafka's transaction verification, the AddPartitionsToTxn verify-only
  question asked in-process): the partition must be in the producer's Ongoing transaction with this producer
  id and epoch, else INVALID_TXN_STATE (not added), INVALID_PRODUCER_EPOCH (fenced),
  INVALID_PRODUCER_ID_MAPPING, or NOT_ENOUGH_REPLICAS (retriable) while the coordinator is loading or the
  previous transaction completes. Later batches of the open transaction go straight to the log, whose
  producer state refuses an older epoch. In a cluster whose transaction coordinator for the id is another
  broker, that broker is asked with AddPartitionsToTxn v4 ``verify_only`` (KIP-890,
  :mod:`kbroker.server.txn_verification`); an unreachable coordinator is NOT_ENOUGH_REPLICAS (retriable);
* internal topics (``__consumer_offsets``, ``__transaction_state``) refuse client writes with
  INVALID_TOPIC_EXCEPTION, as Kafka does;
* with an authorizer (Kafka's ``handleProduceRequest``): a transactional batch needs WRITE on the transactional id
  (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request), each topic WRITE (else
  TOPIC_AUTHORIZATION_FAILED for its partitions, checked before the topic's existence so that it is not leaked);
  idempotent batches need nothing more (KIP-679);
* acks=-1: NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than ``min.insync.replicas``; then
  the answer waits until the high watermark passes the batch (every in-sync replica holds it): with one replica
  right after the append, with followers once they fetched it; REQUEST_TIMED_OUT after the request's
  ``timeout_ms``, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below the minimum meanwhile
  (:func:`wait_for_in_sync_replicas`). acks=1 answers after the leader's append;
* a partition this broker does not lead (or holds no replica of, while the metadata has it) is
  NOT_LEADER_OR_FOLLOWER, with the leader and epoch this broker knows in ``CurrentLeader`` and the leader's
  address in ``NodeEndpoints`` (KIP-951, v10+).
Version notes:
* v8: record errors and error message; v10: CurrentLeader and NodeEndpoints tags (KIP-951); v13: topic ids.
* v12 (transactions version 2, KIP-890 part 2): the first batch of a transaction in a partition adds the
  partition to the producer's transaction (the coordinator's AddPartitionsToTxn, in-process, or
  AddPartitionsToTxn v4 without ``verify_only`` to the coordinator's broker) instead of only verifying it; the
  same answers as above, so a producer whose epoch was bumped by the end of its transaction (a late batch of
  an earlier transaction) is INVALID_PRODUCER_EPOCH and never opens a transaction.
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Any

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import CorruptRecordError, ErrorCode, KafkaError, RecordErrors
from kbroker.protocol.messages import ProduceRequest, ProduceResponse
from kbroker.protocol.record_check import check_records
from kbroker.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG,
    RecordBatch,
    decompress,
    split_batches_strict,
)
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common
from kbroker.server.network import CloseConnection

log = logging.getLogger(__name__)

PRODUCER_ID_AND_EPOCH = struct.Struct(">qh")

API_KEY = ApiKey.PRODUCE
VERSIONS = range(3, 14)
ADVERTISED = range(0, 14)

COMPRESSION_ZSTD = 4
# Kafka lets only its own admin client write to internal topics.
ADMIN_CLIENT_ID = "__admin_client"


def validate_batches(records, api_version: int, max_message_bytes: int) -> memoryview:
    """Check the producer's data: exactly one valid magic-2 batch. Returns it as a memoryview."""
    if records is None or len(records) == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "no record batch")
    batches = split_batches_strict(records)
    if len(batches) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD, "produce requests must carry exactly one record batch")
    batch: RecordBatch = batches[0]
    batch.validate()
    if batch.compression == COMPRESSION_ZSTD and api_version < 7:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    if batch.compression > COMPRESSION_ZSTD:
        raise CorruptRecordError("unknown compression codec")
    if batch.records_count <= 0 or batch.last_offset_delta != batch.records_count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD, "record count does not match the last offset delta")
    if batch.is_control:
        raise KafkaError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if batch.has_producer_id and batch.base_sequence < 0:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                         f"invalid sequence {batch.base_sequence} in a batch of producer {batch.producer_id}")
    if batch.size > max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE)
    check_record_structure(batch)
    return memoryview(records)


def check_record_structure(batch: RecordBatch) -> None:
    """Kafka's LogValidator reads every record before anything is appended; so does this, in the compiled
    check of kbroker/protocol/record_check.py (a few ms per GB). A compressed batch is decompressed once
    (in its codec library) and its records checked after decompression; a payload that is not valid for its
    codec is CORRUPT_MESSAGE. A malformed record (length, varints, key/value/header lengths, offset delta
    not its index, fewer records than the header's count) is INVALID_RECORD naming that record's index in
    the record errors of Produce v8+ (KIP-467); bytes left after the last record are INVALID_RECORD.
    """
    payload = batch.buffer[BATCH_HEADER_SIZE:]
    if batch.compression:
        try:
            payload = decompress(batch.compression, payload)
        except CorruptRecordError:
            raise
        except Exception as exc:  # a codec library's own error type
            raise CorruptRecordError(f"records do not decompress: {exc}") from None
    fault = check_records(payload, batch.records_count)
    if fault is not None:
        index, message = fault
        if index < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, message)
        raise RecordErrors(ErrorCode.INVALID_RECORD, [(index, message)])


def has_transactional_records(request: ProduceRequest) -> bool:
    """Whether the first batch of any partition is transactional (Kafka's ``hasTransactionalRecords``)."""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            records = pdata.records
            if records is not None and len(records) >= BATCH_HEADER_SIZE:
                if memoryview(records)[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                    return True
    return False


#: how a data broker reports the coordinator's verification answer to a transactions-v1 producer
_VERIFICATION_ERRORS = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
}


#: the first Produce version whose transactional batches add their partition (transactions version 2)
IMPLICIT_ADD_VERSION = 12


async def verify_transaction(broker, transactional_id: str, part, records: memoryview, add: bool = False) -> None:
    """Before the first batch of a transaction lands in a partition, make sure the coordinator added the
    partition to that transaction (raises KafkaError otherwise). With ``add`` (Produce v12+, transactions
    version 2) the coordinator adds it (an implicit AddPartitionsToTxn) instead."""
    if not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
        return
    producer_id, producer_epoch = PRODUCER_ID_AND_EPOCH.unpack_from(records, PRODUCER_ID_OFFSET)
    entry = part.log.producer_state.last_entry(producer_id)
    if entry is not None and entry.current_txn_first_offset >= 0 and entry.producer_epoch == producer_epoch:
        return  # the transaction is already open here
    tp = (part.topic, part.partition_index)
    tc = broker.transaction_coordinator
    if add:
        code = tc.add_partitions(transactional_id, producer_id, producer_epoch, [tp], client_transaction_version=2)
        if not code:
            code = await tc.replicated(transactional_id)
    else:
        code = tc.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
    if code == ErrorCode.NOT_COORDINATOR and broker.txn_verifier is not None:
        # the coordinator is another broker of the cluster: ask it (KIP-890)
        code = await broker.txn_verifier.verify(transactional_id, producer_id, producer_epoch, tp, add=add)
        if code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            code = ErrorCode.NOT_ENOUGH_REPLICAS
    if code:
        code = _VERIFICATION_ERRORS.get(code, code)
        raise KafkaError(ErrorCode(code), f"transaction verification of {tp[0]}-{tp[1]} failed: "
                                          f"{ErrorCode(code).name}")


async def wait_for_in_sync_replicas(rm: Any, delayed: list[tuple[Any, int, Any]], timeout_s: float) -> None:
    """Kafka's delayed produce for acks=-1: answer once every in-sync replica holds the batch (the partition's
    high watermark passed its last offset), or when ``timeout_s`` (the request's ``timeout_ms``) has passed:
    REQUEST_TIMED_OUT for those still short (the records stay in the log; a retry of an idempotent producer is
    recognised as a duplicate), NOT_LEADER_OR_FOLLOWER when the leadership moved meanwhile, and
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the batch is replicated but the ISR shrank below
    ``min.insync.replicas`` meanwhile (as Kafka's ``checkEnoughReplicasReachOffset``). No polling: the wait is on
    the partitions' high watermark changes (and leadership changes, which wake the same waiters)."""
    deadline = time.monotonic() + timeout_s
    pending = delayed
    while True:
        pending = [(p, last, pr) for p, last, pr in pending if p.high_watermark <= last and p.is_leader]
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        await rm.wait_for_data([p for p, _, _ in pending], left)
    for part, last, pr in delayed:
        code = acks_all_outcome(part, last, rm.broker.topic_config_int(part.topic, "min.insync.replicas"))
        pr.error_code = ErrorCode.REQUEST_TIMED_OUT if code is None else code
        if pr.error_code:
            pr.base_offset = -1


def acks_all_outcome(part: Any, last_offset: int, min_insync_replicas: int) -> int | None:
    """The answer to an acks=-1 append ending at ``last_offset``: None while it waits (the high watermark has
    not passed it), NOT_LEADER_OR_FOLLOWER when this replica no longer leads, NOT_ENOUGH_REPLICAS_AFTER_APPEND
    when it is replicated but the ISR is below ``min.insync.replicas``, else NONE (acknowledged)."""
    if not part.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if part.high_watermark <= last_offset:
        return None
    if len(part.isr) < min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    return ErrorCode.NONE


async def handle(ctx, request: ProduceRequest) -> ProduceResponse | None:
    broker = ctx.broker
    version = ctx.api_version
    rm = broker.replica_manager
    image = broker.controller.image
    acks = request.acks
    resp = ProduceResponse()
    #: acks=-1 appends the in-sync replicas do not all hold yet: (partition, last offset, response)
    delayed: list[tuple[Any, int, ProduceResponse.PartitionProduceResponse]] = []
    had_not_leader = False  # some partition answered NOT_LEADER_OR_FOLLOWER: KIP-951 hints
    # like Kafka: transactional data without a transactional id fails the whole request
    request_error = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                     if request.transactional_id is None and has_transactional_records(request) else ErrorCode.NONE)
    denied = None  # topic names the caller may not WRITE (None: no authorizer)
    if broker.authorizer is not None:
        if (not request_error and request.transactional_id is not None and has_transactional_records(request)
                and not common.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                         request.transactional_id)):
            request_error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if version >= 13:
            names = [t.name for td in request.topic_data if (t := image.topics_by_id.get(td.topic_id)) is not None]
        else:
            names = [td.name for td in request.topic_data]
        allowed = common.authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
        denied = {n for n in names if n not in allowed}
    for topic_data in request.topic_data:
        out_topic = ProduceResponse.TopicProduceResponse(name=topic_data.name, topic_id=topic_data.topic_id)
        resp.responses.append(out_topic)
        if version >= 13:
            topic = image.topics_by_id.get(topic_data.topic_id)
            topic_error = ErrorCode.UNKNOWN_TOPIC_ID if topic is None else ErrorCode.NONE
        else:
            topic = image.topics_by_name.get(topic_data.name)
            topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.NONE
        if denied and (topic.name if topic is not None else topic_data.name) in denied \
                and (topic is not None or version < 13):
            topic_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # an unknown topic too: existence is not leaked
        for pdata in topic_data.partition_data:
            pr = ProduceResponse.PartitionProduceResponse(index=pdata.index, base_offset=-1,
                                                          log_append_time_ms=-1, log_start_offset=-1)
            out_topic.partition_responses.append(pr)
            part = None
            try:
                if acks not in (-1, 0, 1):
                    raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS)
                if request_error:
                    raise KafkaError(request_error)
                if topic_error:
                    raise KafkaError(topic_error)
                if common.is_internal_topic(topic.name) and ctx.client_id != ADMIN_CLIENT_ID:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot append to internal topic {topic.name}")
                part = rm.get_leader_partition(topic.name, pdata.index)
                max_bytes = broker.topic_config_int(topic.name, "max.message.bytes")
                records = validate_batches(pdata.records, version, max_bytes)
                if request.transactional_id is not None:
                    await verify_transaction(broker, request.transactional_id, part, records,
                                             add=version >= IMPLICIT_ADD_VERSION)
                info = rm.append_records(part, records, acks)
                pr.base_offset = info.first_offset
                pr.log_append_time_ms = info.log_append_time
                pr.log_start_offset = part.log_start_offset
                if acks == -1 and part.high_watermark <= info.last_offset:
                    delayed.append((part, info.last_offset, pr))
            except KafkaError as exc:
                pr.error_code = exc.code
                if part is not None:  # refused by the partition itself (its batch): Kafka answers its start offset
                    pr.log_start_offset = part.log_start_offset
                had_not_leader = had_not_leader or exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                if version >= 8 and exc.message:
                    pr.error_message = exc.message
                if version >= 8 and isinstance(exc, RecordErrors):  # KIP-467: which records, and why
                    pr.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(
                        batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors]
            except OSError as exc:
                log.error("append to %s-%d failed: %s", topic_data.name, pdata.index, exc)
                pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
    if delayed:
        await wait_for_in_sync_replicas(rm, delayed, request.timeout_ms / 1000)
        had_not_leader = had_not_leader or any(pr.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                                               for _, _, pr in delayed)
    if version >= 10 and had_not_leader:  # KIP-951: where the partitions went
        from kbroker.server.handlers.common import add_produce_leader_hints

        add_produce_leader_hints(ctx, resp)
    if acks == 0:
        # No response is due; like the Apache broker, close the connection when a partition failed so the
        # producer notices (it reconnects and refreshes metadata).
        if any(pr.error_code for t in resp.responses for pr in t.partition_responses):
            raise CloseConnection("acks=0 produce failed")
        return None
    return resp
