"""AllocateProducerIds (API key 67), version 0: a broker asks the active controller for a block of producer ids
(KIP-730).

Controller listeners only. The active controller commits a ProducerIdsRecord for the next block and answers
once the quorum has committed it, so no block is ever handed out twice, whatever controller fails over.
Errors as Kafka's: NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH, REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse

API_KEY = ApiKey.ALLOCATE_PRODUCER_IDS
VERSIONS = range(0, 1)
LISTENERS = ("controller",)


async def handle(ctx, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
    broker = ctx.broker
    controller = broker.controller
    resp = AllocateProducerIdsResponse()
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
        resp.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return resp
    try:
        if not controller.is_active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"node {broker.node_id} is not the active controller")
        reg = controller.latest_image.brokers.get(request.broker_id)
        if reg is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {request.broker_id} is not registered")
        if reg.broker_epoch != request.broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH, f"broker {request.broker_id} has epoch {reg.broker_epoch}")
        first, size = controller.allocate_producer_ids(broker_id=request.broker_id, broker_epoch=request.broker_epoch)
        if broker.metadata_quorum is not None:
            await broker.metadata_quorum.wait_committed()
        resp.producer_id_start, resp.producer_id_len = first, size
    except KafkaError as exc:
        resp.error_code = exc.code
    return resp
