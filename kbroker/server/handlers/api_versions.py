"""ApiVersions (API key 18), versions 0-5.

Behavior:
* answers from the handler table (``kbroker.server.apis``), so advertised ranges match the handlers;
* a request newer than v5 gets a v0-format UNSUPPORTED_VERSION response listing our range (KIP-511,
  handled in ``apis.Apis.handle_frame``);
* v5 (KIP-1242, misrouted connections): ClusterId and NodeId are given both or neither, else
  INVALID_REQUEST; when given (and the software name/version below are valid), they must be this node's
  cluster id and node id, else REBOOTSTRAP_REQUIRED (the client goes back to its bootstrap servers). Both
  errors carry no API keys, as in Kafka 4.4;
* v3+: ClientSoftwareName/Version must match ``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`` or the
  answer is INVALID_REQUEST; finalized features come from the metadata image.
Version notes:
* v3: flexible body (the response header stays v0); v4: features with min level 0 are listed;
  v5: ClusterId/NodeId checks, REBOOTSTRAP_REQUIRED (KIP-1242, Kafka 4.4).
"""

from __future__ import annotations

import re

from kbroker.controller.quorum_controller import SUPPORTED_FEATURES
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

API_KEY = ApiKey.API_VERSIONS
VERSIONS = range(0, 6)

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")



async def handle(ctx, request: ApiVersionsRequest) -> ApiVersionsResponse:
    broker = ctx.broker
    if ctx.api_version >= 5 and (request.cluster_id is None) != (request.node_id == -1):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in broker.apis.supported_versions(ctx.listener_name)]
    resp = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=keys)
    if ctx.api_version >= 3:
        name, version = request.client_software_name, request.client_software_version
        if not (_SOFTWARE.fullmatch(name or "") and _SOFTWARE.fullmatch(version or "")):
            resp.error_code = ErrorCode.INVALID_REQUEST
            return resp
    if ctx.api_version >= 5 and request.cluster_id is not None and (
            request.cluster_id != broker.controller.cluster_id or request.node_id != broker.node_id):
        return ApiVersionsResponse(error_code=ErrorCode.REBOOTSTRAP_REQUIRED)
    if ctx.api_version >= 3:
        ctx.connection.client_software = (name, version)
        image = broker.controller.image
        resp.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, (lo, hi) in SUPPORTED_FEATURES.items() if ctx.api_version >= 4 or lo > 0]
        resp.finalized_features_epoch = image.offset
        resp.finalized_features = [
            ApiVersionsResponse.FinalizedFeatureKey(name=n, max_version_level=lvl, min_version_level=lvl)
            for n, lvl in sorted(image.features.items()) if ctx.api_version >= 4 or lvl > 0]
    return resp
