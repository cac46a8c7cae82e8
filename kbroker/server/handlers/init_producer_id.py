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
* an empty transactional id is INVALID_REQUEST; any other transactional id needs the transaction
  coordinator (the transactions part of the exactly-once issue); until then such requests get
  NOT_COORDINATOR.
Version notes:
* v3: ProducerId/ProducerEpoch (KIP-360); v4: PRODUCER_FENCED (older versions get INVALID_PRODUCER_EPOCH
  instead, which matters once transactional ids are served).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = ApiKey.INIT_PRODUCER_ID
VERSIONS = range(0, 6)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class ProducerIdManager:
    """Hands out producer ids from blocks allocated by the controller."""

    def __init__(self, controller) -> None:
        self.controller = controller
        self.next_id = 0
        self.end = 0

    def generate(self) -> int:
        if self.next_id >= self.end:
            first, size = self.controller.allocate_producer_ids()
            self.next_id, self.end = first, first + size
        pid = self.next_id
        self.next_id += 1
        return pid


def _error(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


async def handle(ctx, request: InitProducerIdRequest) -> InitProducerIdResponse:
    broker = ctx.broker
    has_id = request.producer_id != NO_PRODUCER_ID
    has_epoch = request.producer_epoch != NO_PRODUCER_EPOCH
    if has_id != has_epoch:
        return _error(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is not None:
        return _error(ErrorCode.INVALID_REQUEST if request.transactional_id == "" else ErrorCode.NOT_COORDINATOR)
    manager = getattr(broker, "producer_id_manager", None)
    if manager is None:
        manager = broker.producer_id_manager = ProducerIdManager(broker.controller)
    try:
        producer_id = manager.generate()
    except KafkaError as exc:
        return _error(exc.code)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
