"""InitProducerId (API key 22), versions 0-5 (v6, two-phase commit, is unstable in Kafka 4.3.1 and not
advertised).

Behavior:
* without a transactional id (idempotent producers, on by default in today's clients): a fresh producer
  id with epoch 0 every time, as Kafka does; ids come from blocks recorded in the metadata log
  (ProducerIdsRecord);
* a transactional id needs the transaction coordinator (the exactly-once issue); until then such requests
  get NOT_COORDINATOR.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = ApiKey.INIT_PRODUCER_ID
VERSIONS = range(0, 6)


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


async def handle(ctx, request: InitProducerIdRequest) -> InitProducerIdResponse:
    broker = ctx.broker
    if request.transactional_id is not None:
        return InitProducerIdResponse(error_code=ErrorCode.NOT_COORDINATOR, producer_id=-1, producer_epoch=-1)
    manager = getattr(broker, "producer_id_manager", None)
    if manager is None:
        manager = broker.producer_id_manager = ProducerIdManager(broker.controller)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=manager.generate(), producer_epoch=0)
