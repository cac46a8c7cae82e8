"""UnregisterBroker (API key 64), version 0: remove a broker's registration (KIP-631; ``kafka-cluster.sh
unregister``, here ``kbroker-cluster unregister``).

Behavior: the active controller commits an UnregisterBrokerRecord and moves the leadership of the broker's
partitions to another live in-sync replica (leader -1 where there is none); the broker leaves Metadata and
DescribeCluster. Meant for a broker that is gone for good: a live broker registers again at its next
heartbeat, as in Kafka. A node that is not the active controller forwards the request to it. Errors:
BROKER_ID_NOT_REGISTERED for an id that is not registered; NOT_CONTROLLER when no active controller is
reachable (clients retry); REQUEST_TIMED_OUT when the quorum does not commit in time; INVALID_REQUEST for this
node itself when it is a quorum of one (it is the cluster's only broker, and nothing would register it again).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import UnregisterBrokerRequest, UnregisterBrokerResponse as R
from kbroker.server.handlers import common

API_KEY = ApiKey.UNREGISTER_BROKER
VERSIONS = range(0, 1)
LISTENERS = ("broker", "controller")


async def handle(ctx, request: UnregisterBrokerRequest) -> R:
    from kbroker.server.authorizer import AclOperation

    if common.cluster_denied(ctx, AclOperation.ALTER):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=common.CLUSTER_DENIED_MESSAGE)
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded
    broker = ctx.broker
    try:
        if broker.metadata_quorum is None and request.broker_id == broker.node_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"broker {request.broker_id} is this node, the only broker of its quorum of one")
        broker.controller.unregister_broker(request.broker_id)
    except KafkaError as exc:
        return R(error_code=exc.code, error_message=exc.message or None)
    code, message = await common.metadata_committed(broker)
    return R(error_code=code, error_message=message)
