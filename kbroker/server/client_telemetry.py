"""Client telemetry (KIP-714) on the broker: the client instances, their subscriptions and the pushed metrics.

As Kafka's ``ClientMetricsManager``:

* GetTelemetrySubscriptions gives a client (a new instance id when it sends the zero UUID) the union of the metric
  prefixes of every subscription (``kbroker.controller.client_metrics``) whose ``match`` patterns it matches
  (``client_id``, ``client_software_name`` / ``_version`` from its ApiVersions, source address and port, instance
  id), the shortest of their push intervals (no subscription: nothing requested, interval 300000 ms), and a
  subscription id derived from both, which changes whenever its subscriptions change. A second request before
  the interval passed (and with no change) gets THROTTLING_QUOTA_EXCEEDED.
* PushTelemetry: the zero instance id is INVALID_REQUEST; a push after the client's terminating push is
  INVALID_REQUEST; a subscription id other than the current one is UNKNOWN_SUBSCRIPTION_ID (the client asks
  again); a push sooner than the interval since its last request (unless the first after a Get, or terminating)
  is THROTTLING_QUOTA_EXCEEDED; a compression type other than ZSTD, LZ4, GZIP, SNAPPY or none is
  UNSUPPORTED_COMPRESSION_TYPE; a payload above ``telemetry.max.bytes`` (1 MiB) is TELEMETRY_TOO_LARGE; a
  payload that does not decompress or decode as an OTLP ``ExportMetricsServiceRequest`` is INVALID_RECORD.
* The decoded data points (gauges and sums; histograms and summaries as their count and sum) are kept, the latest
  value per client instance, metric and attributes (the broker asks for cumulative values), and exported on the
  Prometheus endpoint (``kbroker.server.metrics``) as gauges named after the metric with dots as underscores
  (``org.apache.kafka.producer.record.queue.time.avg`` -> ``org_apache_kafka_producer_record_queue_time_avg``),
  labelled ``client_instance_id``, ``client_id``, ``client_software_name`` plus the data point's attributes.
  An instance silent for three push intervals and a minute (a terminated one included) drops its series.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from kbroker.controller.client_metrics import DEFAULT_INTERVAL_MS, subscriptions
from kbroker.controller.uuids import uuid_to_str
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

ZERO_UUID = bytes(16)
#: CompressionType ids the broker accepts, in Kafka's order of preference (the client picks the first it has)
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)  # ZSTD, LZ4, GZIP, SNAPPY
TELEMETRY_MAX_BYTES = 1024 * 1024
_PROM_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_PROM_LABEL = re.compile(r"[^a-zA-Z0-9_]")


@dataclass
class ClientInstance:
    """One client instance's subscription and request times (ms, monotonic)."""

    instance_id: bytes
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    version: int
    client: dict[str, str]
    last_get_ms: float = 0.0
    last_push_ms: float = 0.0
    terminating: bool = False
    #: (metric name, attribute items) -> value
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


class TelemetryError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ClientTelemetry:
    """The broker's client instances (by instance id) and their pushed metrics."""

    def __init__(self, controller: Any, clock: Any = time.monotonic, max_bytes: int = TELEMETRY_MAX_BYTES) -> None:
        self.controller = controller
        self.clock = clock
        self.max_bytes = max_bytes
        self.instances: dict[bytes, ClientInstance] = {}
        self._subs_key: Any = None
        self._subs: list[Any] = []
        self._image: Any = None

    def _now_ms(self) -> float:
        return self.clock() * 1000.0

    def _subscriptions(self) -> tuple[int, list[Any]]:
        """(a version that changes with the subscriptions, the subscriptions) of the committed image."""
        image = self.controller.image
        if image is not self._image:
            key = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in image.configs.items() if k[0] == 16))
            if key != self._subs_key:
                self._subs_key, self._subs = key, subscriptions(image)
            self._image = image
        return hash(self._subs_key), self._subs

    def _instance(self, instance_id: bytes, client: dict[str, str]) -> ClientInstance:
        version, subs = self._subscriptions()
        found = self.instances.get(instance_id)
        if found is not None and found.version == version:
            return found
        attrs = {**client, "client_instance_id": uuid_to_str(instance_id)}
        matched = [s for s in subs if s.matches(attrs)]
        metrics = sorted({m for s in matched for m in s.metrics})
        if "*" in metrics:
            metrics = [""]  # an empty prefix: every metric
        interval = min((s.interval_ms for s in matched), default=DEFAULT_INTERVAL_MS)
        sub_id = zlib.crc32(f"{','.join(metrics)}|{interval}|{instance_id.hex()}".encode())
        sub_id = sub_id - (1 << 32) if sub_id >= 1 << 31 else sub_id
        inst = ClientInstance(instance_id, sub_id, tuple(metrics), interval, version, dict(client))
        if found is not None:
            inst.values = found.values
        self.instances[instance_id] = inst
        return inst

    def get_subscriptions(self, instance_id: bytes, client: dict[str, str]) -> ClientInstance:
        """GetTelemetrySubscriptions -> the client's instance (``instance_id`` zero: a new one). Raises
        :class:`TelemetryError` (THROTTLING_QUOTA_EXCEEDED)."""
        self.expire()
        if instance_id == ZERO_UUID:
            instance_id = uuid.uuid4().bytes
        inst = self._instance(instance_id, client)
        now = self._now_ms()
        if inst.last_get_ms and now - max(inst.last_get_ms, inst.last_push_ms) < inst.interval_ms:
            raise TelemetryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                 f"Request from the client [{uuid_to_str(instance_id)}] arrived before the next push "
                                 f"interval time")
        inst.last_get_ms = now
        return inst

    def push(self, instance_id: bytes, subscription_id: int, terminating: bool, compression_type: int,
             payload: bytes, client: dict[str, str]) -> None:
        """PushTelemetry: check the push (module docstring) and keep its data points. Raises
        :class:`TelemetryError`."""
        if instance_id == ZERO_UUID:
            raise TelemetryError(ErrorCode.INVALID_REQUEST, "Invalid request from the client, invalid client "
                                                            "instance id")
        inst = self._instance(instance_id, client)
        name = uuid_to_str(instance_id)
        if inst.terminating:
            raise TelemetryError(ErrorCode.INVALID_REQUEST,
                                 f"Client {name} sent the previous request with state terminating to TRUE, can not "
                                 f"accept any requests after that")
        if subscription_id != inst.subscription_id:
            raise TelemetryError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                                 f"Unknown client subscription id for the client: {name}")
        now = self._now_ms()
        accept = inst.last_get_ms > inst.last_push_ms or now - max(inst.last_get_ms, inst.last_push_ms) >= \
            inst.interval_ms
        if not accept and not terminating:
            raise TelemetryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                 f"Request from the client [{name}] arrived before the next push interval time")
        inst.last_push_ms = now
        if compression_type not in (0, *ACCEPTED_COMPRESSION_TYPES):
            raise TelemetryError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                                 f"Unknown compression type [{compression_type}] received for telemetry request "
                                 f"from [{name}]")
        if len(payload) > self.max_bytes:
            raise TelemetryError(ErrorCode.TELEMETRY_TOO_LARGE,
                                 f"Telemetry request from [{name}] is larger than the maximum allowed size "
                                 f"[{self.max_bytes}]")
        if terminating:
            inst.terminating = True
        if payload:
            points = decode_otlp(compression_type, payload, self.max_bytes * 16)
            inst.values.update(points)

    def expire(self) -> None:
        """Forget instances silent for three push intervals."""
        now = self._now_ms()
        for key, inst in list(self.instances.items()):
            if now - max(inst.last_get_ms, inst.last_push_ms) > 3 * inst.interval_ms + 60_000:
                del self.instances[key]

    def collect(self) -> list[tuple[str, dict[str, str], float]]:
        """Every kept data point as (Prometheus name, labels, value)."""
        self.expire()
        out = []
        for inst in self.instances.values():
            base = {"client_instance_id": uuid_to_str(inst.instance_id),
                    "client_id": inst.client.get("client_id", ""),
                    "client_software_name": inst.client.get("client_software_name", "")}
            for (metric, attrs), value in inst.values.items():
                labels = dict(base)
                for k, v in attrs:
                    label = _PROM_LABEL.sub("_", k)
                    if label and not label.startswith("__"):
                        labels.setdefault("_" + label if label[0].isdigit() else label, v)
                name = _PROM_NAME.sub("_", metric)
                if name and not name[0].isdigit():
                    out.append((name, labels, value))
        return out


def decode_otlp(compression_type: int, payload: bytes, max_uncompressed: int
                ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """An OTLP ``ExportMetricsServiceRequest`` (compressed with ``compression_type``) -> {(metric name, sorted
    attribute items): value}: gauge and sum data points by value, histograms and summaries as ``<name>.count`` and
    ``<name>.sum``. Raises :class:`TelemetryError` (INVALID_RECORD) for a payload that does not decode."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from kbroker.protocol.records import decompress

    try:
        data = decompress(compression_type, payload) if compression_type else bytes(payload)
        if len(data) > max_uncompressed:
            raise ValueError("decompressed telemetry is too large")
        req = ExportMetricsServiceRequest()
        req.ParseFromString(data)
    except Exception as exc:  # DecodeError, ValueError, and the codecs' own errors
        raise TelemetryError(ErrorCode.INVALID_RECORD, f"Failed to decode the telemetry payload: {exc}") from None
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def attrs(dp: Any) -> tuple[tuple[str, str], ...]:
        items = []
        for kv in dp.attributes:
            v = kv.value
            kind = v.WhichOneof("value")
            items.append((kv.key, str(getattr(v, kind)) if kind else ""))
        return tuple(sorted(items))

    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind in ("gauge", "sum"):
                    for dp in getattr(m, kind).data_points:
                        value = dp.as_double if dp.WhichOneof("value") == "as_double" else float(dp.as_int)
                        out[(m.name, attrs(dp))] = value
                elif kind in ("histogram", "exponential_histogram", "summary"):
                    for dp in getattr(m, kind).data_points:
                        out[(m.name + ".count", attrs(dp))] = float(dp.count)
                        out[(m.name + ".sum", attrs(dp))] = float(dp.sum)
    return out
