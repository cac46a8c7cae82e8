"""DescribeClientQuotas (API key 48), versions 0-1 (KIP-546).

Behavior: answered from this node's metadata image (``MetadataImage.client_quotas``), as Kafka's brokers answer it
from their metadata cache. Each filter component names an entity type and a match: exact (match type 0, a name),
default (1: the type's default entity) or any (2: any name, the default included); an entity matches when every
component does, and with ``strict`` when it has no other types. INVALID_REQUEST (top-level, no entries) for a type
filtered twice, a match with default / any or none with exact, an unknown match type, or ip together with user or
client-id (``kbroker.controller.client_quota_control``). The caller needs DESCRIBE_CONFIGS on the CLUSTER resource
(``authorizer.class.name``); otherwise CLUSTER_AUTHORIZATION_FAILED. In a cluster a node answers from its
committed image, so a quota altered through another node shows once this node has applied the record.
Version notes: v1 is the flexible version.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse as R

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
VERSIONS = range(0, 2)

DESCRIBE_CONFIGS = 10  # AclOperation.DESCRIBE_CONFIGS


async def handle(ctx, request: DescribeClientQuotasRequest) -> R:
    from kbroker.controller.client_quota_control import describe_client_quotas
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, DESCRIBE_CONFIGS):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Cluster authorization failed.",
                 entries=None)
    components = [(c.entity_type, c.match_type, c.match) for c in request.components]
    code, message, entries = describe_client_quotas(ctx.broker.controller.image, components, request.strict)
    if code:
        return R(error_code=code, error_message=message, entries=None)
    return R(error_code=ErrorCode.NONE, error_message=None, entries=[
        R.EntryData(entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in entries])
