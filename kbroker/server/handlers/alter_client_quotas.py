"""AlterClientQuotas (API key 49), versions 0-1 (KIP-546).

Behavior: each entry names an entity (``user``, ``client-id``, both, or ``ip``; a null name is the type's default)
and ops (key, value, remove); the quota controller validates them as Kafka's ``ClientQuotaControlManager``
(``kbroker.controller.client_quota_control``: INVALID_REQUEST with Kafka's messages for an empty or unknown entity
type, a bad combination, an unknown key, a fraction for a byte rate, a key or entity altered twice) and writes a
ClientQuotaRecord per changed key; the valid entries are committed together, and take effect on every broker
when it applies the records (no restart). ``validate_only``: validated, nothing written. The caller needs
ALTER_CONFIGS on the CLUSTER resource (``authorizer.class.name``); otherwise every entry gets
CLUSTER_AUTHORIZATION_FAILED. In a cluster a node that is not the active controller forwards the request there.
Version notes: v1 is the flexible version.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import AlterClientQuotasRequest, AlterClientQuotasResponse as R

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
VERSIONS = range(0, 2)

ALTER_CONFIGS = 11  # AclOperation.ALTER_CONFIGS


def _entity(entry) -> list[R.EntityData]:  # noqa: ANN001
    return [R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]


async def handle(ctx, request: AlterClientQuotasRequest) -> R:
    from kbroker.server.handlers import common

    if not common.cluster_authorized(ctx, ALTER_CONFIGS):
        return R(entries=[R.EntryData(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      error_message="Cluster authorization failed.", entity=_entity(e))
                          for e in request.entries])
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    alterations = [([(e.entity_type, e.entity_name) for e in entry.entity],
                    [(op.key, None if op.remove else op.value) for op in entry.ops]) for entry in request.entries]
    controller = ctx.broker.controller

    def write() -> list[tuple[int, str | None]]:
        return controller.alter_client_quotas(alterations, request.validate_only)

    results = (await common.committed_results(ctx, write, len(alterations), request.validate_only)
               if alterations else [])
    return R(entries=[R.EntryData(error_code=code, error_message=message, entity=_entity(entry))
                      for entry, (code, message) in zip(request.entries, results)])
