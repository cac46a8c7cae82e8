"""IncrementalAlterConfigs (API key 44), versions 0-1.

Behavior: per resource, SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) operations on its dynamic configs, written
by the quorum controller as ConfigRecords; TOPIC (2), GROUP (32, KIP-848 group configs:
``kbroker.controller.group_configs``) and BROKER (4, ``""`` = cluster default or this node's id) resources.
APPEND/SUBTRACT work on list keys (``cleanup.policy``) and start from the default when the key has no value. Errors
as Kafka's: INVALID_CONFIG for bad topic keys or values, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for
duplicates, null values, non-dynamic or badly typed broker keys and unsupported resource types; rules in
``kbroker.controller.config_control``. BROKER_LOGGER (8) resources change this node's logger levels at once
(``kbroker.server.broker_loggers``, KIP-412) and are not forwarded. ``validate_only`` checks without writing.
Live logs pick the new values up when the records are applied.
Version notes: v1 flexible.
"""

from __future__ import annotations

import logging

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse as R

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.authorizer import AclOperation
from kbroker.server.broker_loggers import alter_loggers
from kbroker.server.handlers import common
from kbroker.server.handlers.common import alter_configs_results

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
VERSIONS = range(0, 2)
BROKER_LOGGER = 8

log = logging.getLogger(__name__)


async def handle(ctx, request: IncrementalAlterConfigsRequest) -> R:
    """ALTER_CONFIGS on each topic (else TOPIC_AUTHORIZATION_FAILED), group (GROUP_AUTHORIZATION_FAILED) or the
    cluster for the broker, broker logger and client metrics resources (CLUSTER_AUTHORIZATION_FAILED), checked on
    the node the client sent it to, as Kafka."""
    answered = common.refused_config_resources(ctx, AclOperation.ALTER_CONFIGS, request.resources,
                                               R.AlterConfigsResourceResponse)
    for i, r in enumerate(request.resources):
        if i not in answered and r.resource_type == BROKER_LOGGER:
            code, msg = _alter_loggers(ctx, r, request.validate_only)
            answered[i] = R.AlterConfigsResourceResponse(error_code=code, error_message=msg,
                                                         resource_type=r.resource_type, resource_name=r.resource_name)
    return await common.answer_refused(ctx, request, "resources", "responses", answered, _alter, R)


def _alter_loggers(ctx, r, validate_only: bool) -> tuple[int, str | None]:
    """A BROKER_LOGGER resource is this node's own and never reaches the controller (as Kafka's brokers handle
    it): its name must be this node's id."""
    name = r.resource_name
    if not name.lstrip("-").isdigit():
        return ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
    if int(name) != ctx.broker.node_id:
        return ErrorCode.INVALID_REQUEST, f"Unexpected node id. Expected {ctx.broker.node_id}, but received {name}"
    try:
        alter_loggers([(c.name, c.config_operation, c.value) for c in r.configs], validate_only)
    except KafkaError as exc:
        return exc.code, exc.message
    if not validate_only:
        log.info("Broker loggers changed: %s", ", ".join(
            f"{c.name}={'(inherited)' if c.config_operation == 1 else c.value}" for c in r.configs))
    return ErrorCode.NONE, None


async def _alter(ctx, request: IncrementalAlterConfigsRequest) -> R:
    from kbroker.server.handlers.common import maybe_forward

    if (forwarded := await maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    resources = [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
                 for r in request.resources]
    controller = ctx.broker.controller
    results = await alter_configs_results(
        ctx, resources, lambda kept: controller.incremental_alter_configs(kept, validate_only=request.validate_only),
        request.validate_only)
    return R(responses=[R.AlterConfigsResourceResponse(error_code=code, error_message=msg,
                                                       resource_type=r.resource_type, resource_name=r.resource_name)
                        for r, (code, msg) in zip(request.resources, results)])
