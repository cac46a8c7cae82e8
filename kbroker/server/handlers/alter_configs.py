"""AlterConfigs (API key 33), versions 0-2 (deprecated by Kafka in favour of IncrementalAlterConfigs).

Behavior: each resource's dynamic configs are replaced by the ones in the request (keys not named are deleted),
through the quorum controller as ConfigRecords; TOPIC (2), GROUP (32, KIP-848 group configs:
``kbroker.controller.group_configs``) and BROKER (4, named ``""`` for the cluster default or this node's id)
resources. Topic values are validated as Kafka does (INVALID_CONFIG; UNKNOWN_TOPIC_OR_PARTITION), broker values
against the dynamic broker configs (INVALID_REQUEST); rules in ``kbroker.controller.config_control``.
``validate_only`` checks without writing. Live logs pick the new values up when the records are applied.
Version notes: v2 flexible.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import AlterConfigsRequest, AlterConfigsResponse as R

API_KEY = ApiKey.ALTER_CONFIGS
VERSIONS = range(0, 3)


from kbroker.server.authorizer import AclOperation
from kbroker.server.handlers import common
from kbroker.server.handlers.common import alter_configs_results


async def handle(ctx, request: AlterConfigsRequest) -> R:
    """ALTER_CONFIGS on each topic (else TOPIC_AUTHORIZATION_FAILED), group (GROUP_AUTHORIZATION_FAILED) or the
    cluster for the broker, broker logger and client metrics resources (CLUSTER_AUTHORIZATION_FAILED), checked on
    the node the client sent it to, as Kafka."""
    refused = common.refused_config_resources(ctx, AclOperation.ALTER_CONFIGS, request.resources,
                                              R.AlterConfigsResourceResponse)
    return await common.answer_refused(ctx, request, "resources", "responses", refused, _alter, R)


async def _alter(ctx, request: AlterConfigsRequest) -> R:
    from kbroker.server.handlers.common import maybe_forward

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    resources = [(r.resource_type, r.resource_name, [(c.name, c.value) for c in r.configs]) for r in request.resources]
    results = await alter_configs_results(
        ctx, resources, lambda kept: ctx.broker.controller.alter_configs(kept, validate_only=request.validate_only),
        request.validate_only)
    return R(responses=[R.AlterConfigsResourceResponse(error_code=code, error_message=msg,
                                                       resource_type=r.resource_type, resource_name=r.resource_name)
                        for r, (code, msg) in zip(request.resources, results)])
