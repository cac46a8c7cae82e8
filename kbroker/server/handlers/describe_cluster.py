"""DescribeCluster (API key 60), versions 0-2.

Behavior: cluster id, this node as controller id (combined broker+controller), and the brokers
reachable on the request's listener. ``EndpointType`` 2 (controller endpoints) is answered with
MISMATCHED_ENDPOINT_TYPE on a broker listener, as Kafka does. ``ClusterAuthorizedOperations`` when asked:
the caller's operations on the cluster (``kbroker.server.authorizer``), else ``-2147483648``.
Version notes: v1 EndpointType; v2 IncludeFencedBrokers and IsFenced.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeClusterRequest, DescribeClusterResponse
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_CLUSTER
VERSIONS = range(0, 3)

ENDPOINT_TYPE_BROKER = 1


async def handle(ctx, request: DescribeClusterRequest) -> DescribeClusterResponse:
    image = ctx.broker.controller.image
    resp = DescribeClusterResponse(cluster_id=image.cluster_id, controller_id=ctx.broker.controller_id,
                                   endpoint_type=ENDPOINT_TYPE_BROKER,
                                   cluster_authorized_operations=common.authorized_ops(
                                       ctx, 4, "kafka-cluster", request.include_cluster_authorized_operations))
    if ctx.api_version >= 1 and request.endpoint_type not in (ENDPOINT_TYPE_BROKER,):
        resp.error_code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
        resp.error_message = "The request was sent to an endpoint of type BROKER"
        return resp
    resp.brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=n, host=h, port=p, rack=r)
                    for n, h, p, r in common.broker_endpoints(ctx)]
    return resp
