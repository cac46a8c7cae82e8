"""BrokerRegistration (API key 62), versions 0-4: a broker registers with the active controller (KIP-631).

Controller listeners only. The active controller commits a RegisterBrokerRecord (broker epoch = its offset) and
an unfencing BrokerRegistrationChangeRecord through the quorum and answers once they are committed, with the
broker epoch. Errors as Kafka's: NOT_CONTROLLER on any other node (or when leadership is lost before the
commit), INCONSISTENT_CLUSTER_ID for another cluster, DUPLICATE_BROKER_REGISTRATION when another live
incarnation holds the id, REQUEST_TIMED_OUT when the quorum does not commit in time.
"""

from __future__ import annotations

import time

from kbroker.controller.image import Endpoint
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import BrokerRegistrationRequest, BrokerRegistrationResponse

API_KEY = ApiKey.BROKER_REGISTRATION
VERSIONS = range(0, 5)
LISTENERS = ("controller",)


async def handle(ctx, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
    broker = ctx.broker
    controller = broker.controller
    quorum = broker.metadata_quorum
    resp = BrokerRegistrationResponse(broker_epoch=-1)
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
        resp.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return resp
    try:
        if request.cluster_id != controller.cluster_id:
            raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                             f"cluster id {request.cluster_id} is not this cluster's ({controller.cluster_id})")
        if quorum is None and request.broker_id != broker.node_id:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node's metadata quorum has no other members")
        reg = controller.register_broker(
            [Endpoint(lst.name, lst.host, lst.port, lst.security_protocol) for lst in request.listeners],
            broker_id=request.broker_id, incarnation_id=request.incarnation_id, rack=request.rack or None,
            log_dirs=list(request.log_dirs), now_ms=int(time.monotonic() * 1000),
            session_timeout_ms=broker.config.get_int("broker.session.timeout.ms"),
            features={f.name: (f.min_supported_version, f.max_supported_version) for f in request.features})
        if quorum is not None:
            await quorum.wait_committed()
        resp.broker_epoch = reg.broker_epoch
    except KafkaError as exc:
        resp.error_code = exc.code
    return resp
