"""UpdateFeatures (API key 57), versions 0-2 (KIP-584, KIP-778).

Behavior:
* the caller needs ALTER on the CLUSTER resource, else CLUSTER_AUTHORIZATION_FAILED (top level);
* a node that is not the active controller forwards the request there (as Kafka's brokers do); the active
  controller checks every update (``kbroker.controller.feature_control``: upgrade type, the range of this
  controller and of every registered broker, downgrade rules of ``metadata.version``, feature dependencies) and
  commits one FeatureLevelRecord per feature, all or none; ``validate_only`` (v1+) checks without writing;
* any failing update fails the request: top-level INVALID_UPDATE_VERSION with Kafka's message "The update failed
  for all features since the following feature had an error: ..." and no per-feature results; on success v0-1
  list every feature with NONE, v2 only the top-level NONE; the answer comes once the quorum committed the records
  (NOT_CONTROLLER or REQUEST_TIMED_OUT otherwise; the Admin client retries NOT_CONTROLLER).
Version notes:
* v0: ``AllowDowngrade`` instead of ``UpgradeType`` (true = SAFE_DOWNGRADE); v1 adds ``ValidateOnly``; v2 drops
  the per-feature results.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import UpdateFeaturesRequest, UpdateFeaturesResponse as R
from kbroker.server.authorizer import AclOperation
from kbroker.server.handlers import common

API_KEY = ApiKey.UPDATE_FEATURES
VERSIONS = range(0, 3)
LISTENERS = ("broker", "controller")

_FAILED_PREFIX = "The update failed for all features since the following feature had an error: "


async def handle(ctx, request: UpdateFeaturesRequest) -> R:
    if not common.cluster_authorized(ctx, AclOperation.ALTER):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=common.CLUSTER_DENIED_MESSAGE)
    if (forwarded := await common.maybe_forward(ctx, request)) is not None:
        return forwarded  # a standby in a cluster: the active controller answered
    from kbroker.controller.feature_control import SAFE_DOWNGRADE, UPGRADE

    updates = [(u.feature, u.max_version_level,
                (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if ctx.api_version == 0 else u.upgrade_type)
               for u in request.feature_updates]
    validate_only = ctx.api_version >= 1 and request.validate_only
    try:
        error = ctx.broker.controller.apply_feature_updates(updates, validate_only=validate_only)
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        return R(error_code=exc.code, error_message=exc.message)
    if error is not None:
        return R(error_code=error.code, error_message=_FAILED_PREFIX + error.message)
    if not validate_only and updates:
        code, message = await common.metadata_committed(ctx.broker)
        if code:
            return R(error_code=code, error_message=message)
    resp = R(error_code=ErrorCode.NONE, error_message=None)
    if ctx.api_version <= 1:
        seen: set[str] = set()
        resp.results = [R.UpdatableFeatureResult(feature=u.feature, error_code=ErrorCode.NONE, error_message=None)
                        for u in request.feature_updates if not (u.feature in seen or seen.add(u.feature))]
    return resp
