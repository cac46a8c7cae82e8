"""PushTelemetry (API key 72), version 0 (KIP-714).

Behavior: a client subscribed through GetTelemetrySubscriptions pushes its metrics as an OTLP
``ExportMetricsServiceRequest`` (compressed with one of the accepted types); the broker keeps the latest value of
each data point and exports it on its Prometheus endpoint (``metrics.port``). Errors as Kafka's
``ClientMetricsManager``: INVALID_REQUEST (zero instance id, a push after a terminating one),
UNKNOWN_SUBSCRIPTION_ID (the subscriptions changed: the client asks again), THROTTLING_QUOTA_EXCEEDED (sooner
than the push interval), UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE, INVALID_RECORD (the payload does not
decode). Rules in ``kbroker.server.client_telemetry``.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import PushTelemetryRequest, PushTelemetryResponse as R

API_KEY = ApiKey.PUSH_TELEMETRY
VERSIONS = range(0, 1)


async def handle(ctx, request: PushTelemetryRequest) -> R:
    from kbroker.server.client_telemetry import TelemetryError
    from kbroker.server.handlers.get_telemetry_subscriptions import client_attributes

    try:
        ctx.broker.client_telemetry.push(request.client_instance_id, request.subscription_id, request.terminating,
                                         request.compression_type, bytes(request.metrics or b""),
                                         client_attributes(ctx))
    except TelemetryError as exc:
        return R(error_code=exc.code)
    return R(error_code=ErrorCode.NONE)
