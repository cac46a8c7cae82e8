"""Transaction coordinator settings: Kafka's broker keys, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TRANSACTION_STATE_TOPIC = "__transaction_state"

#: Kafka's defaults (facts from Kafka's broker configuration docs).
DEFAULTS: dict[str, int] = {
    "transaction.state.log.num.partitions": 50,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.segment.bytes": 104857600,
    "transaction.max.timeout.ms": 900000,
    "transactional.id.expiration.ms": 604800000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    # kbroker only, for tests: pause between the markers of one transaction (0: all written at once)
    "kbroker.transaction.marker.delay.ms": 0,
}


@dataclass(frozen=True)
class TransactionCoordinatorConfig:
    num_partitions: int = DEFAULTS["transaction.state.log.num.partitions"]
    replication_factor: int = DEFAULTS["transaction.state.log.replication.factor"]
    segment_bytes: int = DEFAULTS["transaction.state.log.segment.bytes"]
    transaction_max_timeout_ms: int = DEFAULTS["transaction.max.timeout.ms"]
    transactional_id_expiration_ms: int = DEFAULTS["transactional.id.expiration.ms"]
    abort_timed_out_transactions_interval_ms: int = DEFAULTS[
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"]
    remove_expired_transactional_ids_interval_ms: int = DEFAULTS[
        "transaction.remove.expired.transaction.cleanup.interval.ms"]
    marker_delay_ms: int = 0

    @classmethod
    def from_broker_config(cls, config: Any) -> TransactionCoordinatorConfig:
        """From a :class:`~kbroker.config.BrokerConfig` (keys the operator did not set keep Kafka's default)."""

        def get(key: str) -> int:
            value = config.props.get(key) if hasattr(config, "props") else None
            if value is None or str(value).strip() == "":
                return DEFAULTS[key]
            return int(str(value).strip())

        return cls(
            num_partitions=get("transaction.state.log.num.partitions"),
            replication_factor=get("transaction.state.log.replication.factor"),
            segment_bytes=get("transaction.state.log.segment.bytes"),
            transaction_max_timeout_ms=get("transaction.max.timeout.ms"),
            transactional_id_expiration_ms=get("transactional.id.expiration.ms"),
            abort_timed_out_transactions_interval_ms=get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            remove_expired_transactional_ids_interval_ms=get(
                "transaction.remove.expired.transaction.cleanup.interval.ms"),
            marker_delay_ms=get("kbroker.transaction.marker.delay.ms"),
        )
