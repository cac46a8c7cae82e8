"""BrokerHeartbeat (API key 63), versions 0-2: a registered broker tells the active controller it is alive
(KIP-631).

Controller listeners only. The active controller records the heartbeat; a fenced broker is unfenced (and gets
back the leadership of its partitions that had none) once the change is committed. A broker whose heartbeats
stop for ``broker.session.timeout.ms`` is fenced by the active controller (kbroker/server/metadata_quorum.py).
Errors as Kafka's: NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH (the broker registers again),
REQUEST_TIMED_OUT. Controlled shutdown: a heartbeat with ``want_shut_down`` fences the broker and moves the
leadership of its partitions to other in-sync replicas (none left: no leader until it is back); the answer,
once that is committed, has ``should_shut_down``. Not yet: ``want_fence``, offline log directories.
"""

from __future__ import annotations

import time

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import BrokerHeartbeatRequest, BrokerHeartbeatResponse

API_KEY = ApiKey.BROKER_HEARTBEAT
VERSIONS = range(0, 3)
LISTENERS = ("controller",)


async def handle(ctx, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    broker = ctx.broker
    resp = BrokerHeartbeatResponse(is_caught_up=True, is_fenced=True)
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
        resp.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return resp
    try:
        before = broker.controller.last_appended_offset
        if request.want_shut_down:  # controlled shutdown: fenced, its leaderships moved, then it may go
            broker.controller.controlled_shutdown(request.broker_id, request.broker_epoch)
            fenced = True
        else:
            fenced = broker.controller.broker_heartbeat(request.broker_id, request.broker_epoch,
                                                        int(time.monotonic() * 1000))
        if broker.metadata_quorum is not None and broker.controller.last_appended_offset != before:
            await broker.metadata_quorum.wait_committed()
        resp.is_fenced = fenced
        resp.should_shut_down = request.want_shut_down
    except KafkaError as exc:
        resp.error_code = exc.code
    return resp
