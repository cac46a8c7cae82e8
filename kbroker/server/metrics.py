"""Prometheus metrics with the names Kafka's metrics get through the Prometheus JMX exporter.

Enabled by ``metrics.port`` (a kbroker key, unset by default: no endpoint; ``0`` picks a free port) and
``metrics.host`` (default: the host of the first listener, loopback for the embedded default); ``GET /metrics`` on that port returns the text exposition format.
Metrics are kept per broker in their own registry (``prometheus_client``):

Counters, updated once per request (never per record):
* ``kafka_server_brokertopicmetrics_messagesin_total{topic}``: records appended by Produce (from the batch
  header's record count);
* ``kafka_server_brokertopicmetrics_bytesin_total{topic}`` / ``..._bytesout_total{topic}``: record bytes
  accepted by Produce / returned by Fetch;
* ``kbroker_fetch_follower_bytesout_total{topic}``: of those, the bytes this broker returned to consumers as a
  follower of the partition (KIP-392); ``kbroker_fetch_preferred_read_replica_total{topic}``: partitions of
  consumers' fetches this leader answered with another preferred read replica (kbroker's own names: Kafka has no
  such meters);
* ``kafka_network_requestmetrics_requests_total{request,version}``: requests per API and version;
* ``kafka_network_requestmetrics_totaltimems{request}``: histogram of request time in milliseconds, from the
  frame's arrival at the handler to its response being ready (long-polling fetches included, as in Kafka).

Gauges, computed when scraped from the broker's own state (so the hot path pays nothing):
* ``kafka_server_replicamanager_partitioncount`` / ``..._leadercount`` /
  ``..._underreplicatedpartitions`` (led partitions whose ISR is smaller than their replica set);
* ``kafka_log_log_size{topic,partition}``, ``kafka_log_log_logendoffset``, ``kafka_log_log_logstartoffset``,
  ``kafka_log_log_numlogsegments``;
* ``kafka_server_socketservermetrics_connection_count{listener}``: open client connections;
* ``kafka_controller_kafkacontroller_activecontrollercount``;
* ``kafka_log_logcleaner_cleaner_rounds_total`` (rounds completed by the log cleaner);
* ``kafka_server_leaderreplication_byte_rate`` / ``kafka_server_followerreplication_byte_rate``: the replication
  throttles' measured rates, bytes/s of throttled replicas' traffic (Kafka's ``byte-rate`` of the
  ``LeaderReplication`` / ``FollowerReplication`` quotas, KIP-73; ``kbroker/server/replication_quota.py``);
* client quotas (``kbroker/server/client_quotas.py``): ``kafka_server_produce_byte_rate{user,client_id}`` /
  ``kafka_server_fetch_byte_rate`` (the measured rate of each quota entity with a producer / consumer byte-rate
  quota), and ``kafka_server_{produce,fetch,request,controllermutation}_throttle_time_ms_total{user,client_id}``
  (throttle time handed out; Kafka has an average ``throttle-time`` instead); ``kbroker_connection_accept_throttle_
  seconds_total`` (the acceptors' waits for ``max.connection.creation.rate``) and
  ``kbroker_connection_ip_rate_closed_total`` (connections closed for an ip ``connection_creation_rate``).

Client metrics (KIP-714): the metrics clients push with PushTelemetry when a client metrics subscription asks
for them, as gauges named after the metric with dots as underscores (``org_apache_kafka_producer_record_send_total``)
labelled ``client_instance_id``, ``client_id``, ``client_software_name`` and the data point's attributes
(``kbroker/server/client_telemetry.py``).

The endpoint is served on the broker's event loop, so scrapes read consistent state without locks.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.headers import peek_key_version

if TYPE_CHECKING:
    from kbroker.server.broker import Broker

log = logging.getLogger(__name__)

LATENCY_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
_RECORDS_COUNT = struct.Struct(">i")  # batch header bytes 57..60
_API_NAMES = {k.value: "".join(p.capitalize() for p in k.name.split("_")) for k in ApiKey}


class _StateCollector:
    """Gauges read from the broker when scraped."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        b = self.broker
        parts = list(b.replica_manager.partitions.values())
        led = [p for p in parts if p.leader == b.node_id]
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions on this broker",
                                value=len(parts))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions this broker leads",
                                value=len(led))
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Led partitions whose ISR is smaller than their replica set",
                                value=sum(1 for p in led if len(p.isr) < len(p.replicas)))
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes in the partition's log segments",
                                 labels=["topic", "partition"])
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset", labels=["topic", "partition"])
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments", labels=["topic", "partition"])
        for plog in b.log_manager.all_logs():
            if plog.closed:
                continue
            labels = [plog.topic, str(plog.partition)]
            size.add_metric(labels, plog.size_in_bytes)
            leo.add_metric(labels, plog.log_end_offset)
            start.add_metric(labels, plog.log_start_offset)
            segments.add_metric(labels, plog.num_segments)
        yield from (size, leo, start, segments)
        conns = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count", "Open client connections",
                                  labels=["listener"])
        counts: dict[str, int] = {}
        for conn in list(b.connections):
            counts[conn.listener_name] = counts.get(conn.listener_name, 0) + 1
        for listener in sorted({lst.name for lst in b.config.listeners} | set(counts)):
            conns.add_metric([listener], counts.get(listener, 0))
        yield conns
        sessions = getattr(b, "fetch_sessions", None)
        if sessions is not None:  # KIP-227 (Kafka's FetchSessionCache metrics, and kbroker's counters)
            yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                    "Incremental fetch sessions kept", value=len(sessions.sessions))
            yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                    "Partitions in the incremental fetch sessions", value=sessions.partitions_cached())
            yield CounterMetricFamily("kbroker_fetch_sessions_created", "Incremental fetch sessions opened",
                                      value=sessions.created)
            yield CounterMetricFamily("kbroker_fetch_session_incremental_requests",
                                      "Incremental fetch requests answered", value=sessions.incremental_requests)
            yield CounterMetricFamily("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                      "Sessions evicted for new ones", value=sessions.evictions)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 if this node is the active controller", value=1 if b.controller.is_active else 0)
        quotas = getattr(b, "replication_quotas", None)
        if quotas is not None:
            for quota in (quotas.leader, quotas.follower):
                yield GaugeMetricFamily(f"kafka_server_{quota.replication_type.lower()}_byte_rate",
                                        f"Bytes/s of throttled replicas' traffic ({quota.replication_type} quota)",
                                        value=quota.rate())
        client_quotas = getattr(b, "client_quotas", None)
        if client_quotas is not None:
            groups = {"producer_byte_rate": "produce", "consumer_byte_rate": "fetch", "request_percentage": "request",
                      "controller_mutation_rate": "controllermutation"}
            throttled: dict[str, Any] = {}
            for key, user, client, ms in client_quotas.throttle_totals():
                fam = throttled.get(key)
                if fam is None:
                    fam = throttled[key] = CounterMetricFamily(
                        f"kafka_server_{groups[key]}_throttle_time_ms",
                        f"Milliseconds of throttle time handed out for {key} (KIP-219)", labels=["user", "client_id"])
                fam.add_metric([user, client], ms)
            yield from throttled.values()
            for key in ("producer_byte_rate", "consumer_byte_rate"):
                rate = GaugeMetricFamily(f"kafka_server_{groups[key]}_byte_rate",
                                         f"Measured rate against {key} quotas, bytes/s", labels=["user", "client_id"])
                manager = client_quotas.managers[key]
                for user, client in list(manager._rates):
                    rate.add_metric([user, client], manager.measure((user, client)))
                yield rate
        limits = getattr(b, "connection_limits", None)
        if limits is not None:
            yield CounterMetricFamily("kbroker_connection_accept_throttle_seconds",
                                      "Seconds the acceptors waited for max.connection.creation.rate (KIP-612)",
                                      value=limits.accept_throttle_s)
            yield CounterMetricFamily("kbroker_connection_ip_rate_closed",
                                      "Connections closed for their address's connection_creation_rate quota",
                                      value=limits.ip_throttled)
        cleaner = getattr(b, "log_cleaner", None)
        if cleaner is not None:
            yield CounterMetricFamily("kafka_log_logcleaner_cleaner_rounds", "Log cleaner rounds completed",
                                      value=cleaner.rounds)


class _ClientTelemetryCollector:
    """The metrics clients pushed (KIP-714, ``kbroker.server.client_telemetry``), one gauge family per name."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        telemetry = getattr(self.broker, "client_telemetry", None)
        if telemetry is None:
            return
        points: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, labels, value in telemetry.collect():
            points.setdefault(name, []).append((labels, value))
        for name, samples in points.items():
            # one family per name: the union of the label names, "" where a sample has no such label
            keys = sorted({k for labels, _ in samples for k in labels})
            fam = GaugeMetricFamily(name, "Client metric pushed with PushTelemetry (KIP-714)", labels=keys)
            for labels, value in samples:
                fam.add_metric([labels.get(k, "") for k in keys], value)
            yield fam


class _InstrumentedHandler:
    """A handler-table entry that counts record bytes around the real handler module."""

    def __init__(self, module: Any, after: Any) -> None:
        self._module = module
        self._after = after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    async def handle(self, ctx: Any, request: Any) -> Any:
        response = await self._module.handle(ctx, request)
        try:
            self._after(ctx, request, response)
        except Exception:  # metrics must never fail a request
            log.exception("metrics hook failed")
        return response


class BrokerMetrics:
    """The broker's registry, the per-request hooks and the HTTP endpoint."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("kafka_server_brokertopicmetrics_messagesin", "Records appended by Produce",
                                   ["topic"], registry=r)
        self.bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "Record bytes accepted by Produce",
                                ["topic"], registry=r)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout", "Record bytes returned by Fetch",
                                 ["topic"], registry=r)
        self.follower_bytes_out = Counter("kbroker_fetch_follower_bytesout",
                                          "Record bytes returned to consumers as a follower (KIP-392)", ["topic"],
                                          registry=r)
        self.redirects = Counter("kbroker_fetch_preferred_read_replica",
                                 "Consumer fetch partitions answered with another preferred read replica (KIP-392)",
                                 ["topic"], registry=r)
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests per API and version",
                                ["request", "version"], registry=r)
        self.request_time = Histogram("kafka_network_requestmetrics_totaltimems", "Request time in milliseconds",
                                      ["request"], buckets=LATENCY_BUCKETS_MS, registry=r)
        r.register(_StateCollector(broker))
        r.register(_ClientTelemetryCollector(broker))
        self.server: asyncio.AbstractServer | None = None
        self.port: int | None = None

    # ---- hooks ----
    def instrument(self, apis: Any) -> None:
        """Wrap ``apis.handle_frame`` (request counts and times) and the Produce/Fetch handlers (bytes)."""
        inner = apis.handle_frame

        async def handle_frame(conn: Any, frame: bytes) -> Any:
            started = time.monotonic()
            try:
                return await inner(conn, frame)
            finally:
                try:
                    key, version, _ = peek_key_version(frame)
                    name = _API_NAMES.get(key, str(key))
                    self.requests.labels(name, str(version)).inc()
                    self.request_time.labels(name).observe((time.monotonic() - started) * 1000)
                except Exception:  # noqa: BLE001 - a frame too short to name
                    pass

        apis.handle_frame = handle_frame
        if ApiKey.PRODUCE in apis.handlers:
            apis.handlers[ApiKey.PRODUCE] = _InstrumentedHandler(apis.handlers[ApiKey.PRODUCE], self._after_produce)
        if ApiKey.FETCH in apis.handlers:
            apis.handlers[ApiKey.FETCH] = _InstrumentedHandler(apis.handlers[ApiKey.FETCH], self._after_fetch)

    def _after_produce(self, ctx: Any, request: Any, response: Any) -> None:
        if response is None:  # acks=0: nothing tells which partitions failed; count what was sent
            sent = {(t.name, p.index): None for t in request.topic_data for p in t.partition_data}
            errors: dict[tuple[str, int], int] = {k: 0 for k in sent}
        else:
            errors = {(t.name, p.index): p.error_code for t in response.responses for p in t.partition_responses}
        image = self.broker.controller.image
        for t in request.topic_data:
            name = t.name
            if not name and t.topic_id:
                topic = image.topics_by_id.get(t.topic_id)
                name = topic.name if topic is not None else ""
            for p in t.partition_data:
                if errors.get((t.name, p.index), 1) != 0 or not p.records:
                    continue
                records = p.records
                self.bytes_in.labels(name).inc(len(records))
                if len(records) >= 61:
                    self.messages_in.labels(name).inc(_RECORDS_COUNT.unpack_from(records, 57)[0])

    def _after_fetch(self, ctx: Any, request: Any, response: Any) -> None:
        if response is None:
            return
        replica_id = request.replica_state.replica_id if ctx.api_version >= 15 else request.replica_id
        if replica_id >= 0:  # a follower's fetch (ReplicaState from v15) is replication, not bytes out
            return
        image = self.broker.controller.image
        partitions = self.broker.replica_manager.partitions
        node_id = self.broker.node_id
        for t in response.responses:
            total = follower_total = redirects = 0
            name = t.topic
            if not name and t.topic_id:
                topic = image.topics_by_id.get(t.topic_id)
                name = topic.name if topic is not None else ""
            for p in t.partitions:
                records = p.records
                size = sum(len(r) for r in records) if isinstance(records, list) else len(records or b"")
                total += size
                if p.preferred_read_replica >= 0:
                    redirects += 1
                if size:
                    part = partitions.get((name, p.partition_index))
                    if part is not None and part.leader != node_id:
                        follower_total += size
            if total:
                self.bytes_out.labels(name).inc(total)
            if follower_total:
                self.follower_bytes_out.labels(name).inc(follower_total)
            if redirects:
                self.redirects.labels(name).inc(redirects)

    # ---- endpoint ----
    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host or None, port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            parts = head.split(b"\r\n", 1)[0].split()
            path = parts[1].split(b"?", 1)[0] if len(parts) >= 2 else b""
            if len(parts) >= 2 and parts[0] in (b"GET", b"HEAD") and path in (b"/metrics", b"/"):
                body = self.render()
                status, ctype = b"200 OK", CONTENT_TYPE_LATEST.encode()
            else:
                body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            if parts and parts[0] != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            try:
                await asyncio.wait_for(self.server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
            self.server = None


def metrics_port(broker: Broker) -> int | None:
    """``metrics.port`` as an int, or None when the endpoint is off."""
    raw = broker.config.get("metrics.port").strip()
    return int(raw) if raw else None
