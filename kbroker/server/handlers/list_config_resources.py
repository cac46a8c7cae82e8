"""ListConfigResources (API key 74), versions 0-1 (KIP-714's ListClientMetricsResources, widened by KIP-1142).

Behavior:
* the caller needs DESCRIBE_CONFIGS on the CLUSTER resource, else CLUSTER_AUTHORIZATION_FAILED;
* v0 lists CLIENT_METRICS (16) resources only; v1 lists the types asked for (none: every type), among TOPIC (2),
  BROKER (4), BROKER_LOGGER (8), CLIENT_METRICS (16) and GROUP (32); any other type gets UNSUPPORTED_VERSION and
  no resources, as Kafka's brokers answer;
* answered from this node's metadata image, in Kafka's order: groups with dynamic configs, client metrics
  subscriptions, then for BROKER_LOGGER and BROKER every live broker reachable on the listener the request came
  in on (by id), then every topic (internal ones included), each group sorted by name.
Version notes:
* v0 was ListClientMetricsResources; v1 adds ``ResourceTypes`` to the request and ``ResourceType`` to each entry.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse as R
from kbroker.server.authorizer import AclOperation
from kbroker.server.handlers import common

API_KEY = ApiKey.LIST_CONFIG_RESOURCES
VERSIONS = range(0, 2)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_TYPES = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)}


async def handle(ctx, request: ListConfigResourcesRequest) -> R:
    if not common.cluster_authorized(ctx, AclOperation.DESCRIBE_CONFIGS):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    supported = SUPPORTED_TYPES[min(ctx.api_version, 1)]
    wanted = set(request.resource_types if ctx.api_version >= 1 and request.resource_types else supported)
    if not wanted <= set(supported):
        return R(error_code=ErrorCode.UNSUPPORTED_VERSION)
    image = ctx.broker.controller.image
    out: list[R.ConfigResource] = []

    def add(rtype: int, names) -> None:  # noqa: ANN001
        out.extend(R.ConfigResource(resource_name=n, resource_type=rtype) for n in names)

    for rtype in (GROUP, CLIENT_METRICS):
        if rtype in wanted:
            add(rtype, sorted(name for (t, name), cfg in image.configs.items() if t == rtype and cfg))
    brokers = [str(b.node_id) for b in image.live_brokers() if b.endpoint(ctx.listener_name) is not None]
    for rtype in (BROKER_LOGGER, BROKER):
        if rtype in wanted:
            add(rtype, brokers)
    if TOPIC in wanted:
        add(TOPIC, sorted(image.topics_by_name))
    return R(error_code=ErrorCode.NONE, config_resources=out)
