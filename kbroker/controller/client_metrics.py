"""Client metrics subscriptions (KIP-714): the CLIENT_METRICS config resource (type 16) and client matching.

A subscription is a config resource named by the operator (``kbroker-client-metrics --alter --name N``), stored
as ConfigRecords like any dynamic config, with Kafka's three keys (``ClientMetricsConfigs``):

* ``metrics``: list of metric name prefixes to push (``*`` or an empty prefix: every metric; none: nothing);
* ``interval.ms``: push interval, 100 .. 3600000 (default 300000);
* ``match``: list of ``selector=regex`` pairs the client must all match in full, selectors
  ``client_instance_id``, ``client_id``, ``client_software_name``, ``client_software_version``,
  ``client_source_address``, ``client_source_port`` (none: every client).

Validation errors are Kafka's: INVALID_REQUEST "Subscription name can't be empty", "Unknown client metrics
configuration: <key>", "Invalid value <v> for interval.ms, interval must be between 100 and 3600000 (1 hour)";
INVALID_CONFIG "Illegal client matching pattern: <pattern>".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CLIENT_METRICS_KEYS",
    "CLIENT_METRICS_RESOURCE",
    "DEFAULT_INTERVAL_MS",
    "MATCH_SELECTORS",
    "Subscription",
    "parse_match",
    "subscriptions",
    "validate_client_metrics_configs",
]

CLIENT_METRICS_RESOURCE = 16
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
#: key -> (Kafka config type, default)
CLIENT_METRICS_KEYS: dict[str, tuple[str, str]] = {METRICS: ("list", ""), INTERVAL_MS: ("int", str(DEFAULT_INTERVAL_MS)),
                                                   MATCH: ("list", "")}
MATCH_SELECTORS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
                   "client_source_address", "client_source_port")


def _list(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def parse_match(patterns: list[str]) -> dict[str, re.Pattern[str]]:
    """``["client_id=app-.*", ...]`` -> selector -> compiled pattern. Raises ``KafkaError(INVALID_CONFIG)``."""
    out: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}") from None
    return out


def validate_client_metrics_configs(name: str, configs: Mapping[str, str | None]) -> None:
    """Check a subscription's configs (None values are being deleted). Raises ``KafkaError`` (module docstring)."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in CLIENT_METRICS_KEYS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    interval = configs.get(INTERVAL_MS)
    if interval is not None:
        try:
            value = int(interval.strip())
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Invalid value {interval} for configuration {INTERVAL_MS}: Not a number of type INT") \
                from None
        if not MIN_INTERVAL_MS <= value <= MAX_INTERVAL_MS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Invalid value {value} for {INTERVAL_MS}, interval must be between 100 and 3600000 "
                             f"(1 hour)")
    parse_match(_list(configs.get(MATCH)))


@dataclass(frozen=True)
class Subscription:
    """One client metrics subscription: its name, metric prefixes, push interval and match patterns."""

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]]

    def matches(self, client: Mapping[str, str]) -> bool:
        """Every pattern matches the client's value of its selector in full (Kafka's ``Pattern.matches``)."""
        return all(p.fullmatch(client.get(sel, "")) is not None for sel, p in self.match.items())


def subscriptions(image: Any) -> list[Subscription]:
    """The subscriptions in a metadata image's configs, by name (a damaged one, which validation keeps out of the
    log, is skipped)."""
    out = []
    for (rtype, name), cfg in sorted(image.configs.items()):
        if rtype != CLIENT_METRICS_RESOURCE or not cfg:
            continue
        try:
            match = parse_match(_list(cfg.get(MATCH)))
            interval = int(cfg.get(INTERVAL_MS) or DEFAULT_INTERVAL_MS)
        except (KafkaError, ValueError):
            continue
        out.append(Subscription(name, tuple(_list(cfg.get(METRICS))), interval, match))
    return out
