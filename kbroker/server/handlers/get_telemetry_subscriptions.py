"""GetTelemetrySubscriptions (API key 71), version 0 (KIP-714).

Behavior: answered as a broker without client-metrics subscriptions: the client gets an instance id (a
new one when it sent the zero UUID), subscription id 0 and an empty list of requested metrics, so it
never pushes telemetry. PushTelemetry is therefore not offered.
"""

from __future__ import annotations

import uuid

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse
from kbroker.protocol.schema import ZERO_UUID

API_KEY = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS
VERSIONS = range(0, 1)


async def handle(ctx, request: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    instance = request.client_instance_id
    if instance == ZERO_UUID:
        instance = uuid.uuid4().bytes
    return GetTelemetrySubscriptionsResponse(
        client_instance_id=instance, subscription_id=0, accepted_compression_types=[],
        push_interval_ms=300000, telemetry_max_bytes=1048576, delta_temporality=True, requested_metrics=[])
