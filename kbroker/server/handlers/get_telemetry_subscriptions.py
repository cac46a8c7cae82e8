"""GetTelemetrySubscriptions (API key 71), version 0 (KIP-714).

Behavior: the client's instance (a new instance id when it sends the zero UUID) gets the metric prefixes of
the client metrics subscriptions it matches (``kbroker-client-metrics``; matched on its client id, the client
software name and version of its ApiVersions, its address and port and instance id), the shortest of their
push intervals, a subscription id that changes with them, the accepted compression types (ZSTD, LZ4, GZIP,
SNAPPY), ``telemetry_max_bytes`` 1 MiB and cumulative temporality (``delta_temporality`` false: the broker
exports the values as they come). No matching subscription: no requested metrics, so the client pushes nothing,
and ``delta_temporality`` is Kafka's default answer, true.
A second request within the push interval (subscriptions unchanged) gets THROTTLING_QUOTA_EXCEEDED. Rules in
``kbroker.server.client_telemetry``.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse as R

API_KEY = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS
VERSIONS = range(0, 1)


def client_attributes(ctx) -> dict[str, str]:  # noqa: ANN001
    """The client's values of the subscriptions' ``match`` selectors (KIP-714)."""
    conn = ctx.connection
    name, version = getattr(conn, "client_software", None) or ("", "")
    peer = getattr(conn, "peer", None) or ()
    return {"client_id": ctx.client_id, "client_software_name": name or "", "client_software_version": version or "",
            "client_source_address": str(peer[0]) if len(peer) > 0 else "",
            "client_source_port": str(peer[1]) if len(peer) > 1 else ""}


async def handle(ctx, request: GetTelemetrySubscriptionsRequest) -> R:
    from kbroker.server.client_telemetry import ACCEPTED_COMPRESSION_TYPES, TelemetryError

    telemetry = ctx.broker.client_telemetry
    try:
        inst = telemetry.get_subscriptions(request.client_instance_id, client_attributes(ctx))
    except TelemetryError as exc:
        return R(error_code=exc.code, client_instance_id=request.client_instance_id)
    return R(error_code=ErrorCode.NONE, client_instance_id=inst.instance_id, subscription_id=inst.subscription_id,
             accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES), push_interval_ms=inst.interval_ms,
             telemetry_max_bytes=telemetry.max_bytes, delta_temporality=not inst.metrics,
             requested_metrics=list(inst.metrics))
