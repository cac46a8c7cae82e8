"""Dynamic configs: IncrementalAlterConfigs and (legacy) AlterConfigs planned against a metadata image.

As Kafka's ``ConfigurationControlManager`` (plus the broker-side preprocessing of ``ConfigAdminManager``
that a combined node does in the same place), each function returns the ConfigRecords to commit and one
``(error_code, error_message)`` per resource of the request, in request order. Nothing is written here;
:class:`~kbroker.controller.quorum_controller.QuorumController` commits the records (unless
``validate_only``) and replay updates ``MetadataImage.configs``.

Per resource, in Kafka's order:

1. a resource named twice in one request: INVALID_REQUEST for every occurrence;
2. a key named twice: INVALID_REQUEST "Error due to duplicate config keys";
3. a null value for anything but DELETE: INVALID_REQUEST "Null value not supported for : <keys>";
4. resource type: TOPIC (2), BROKER (4) and GROUP (32, :mod:`kbroker.controller.group_configs`) are supported; BROKER names must be ``""`` (cluster default), this
   node's id or, in a cluster, the id of a registered broker (the request was forwarded by that broker, which
   checked that it names itself: ``kbroker.server.handlers.common.misdirected_broker_resources``, Kafka's
   ``ConfigAdminManager``); CLIENT_METRICS (16) subscriptions (KIP-714, ``kbroker.controller.client_metrics``);
   other types get INVALID_REQUEST;
5. operations (incremental): SET (0), DELETE (1), APPEND (2) and SUBTRACT (3); APPEND/SUBTRACT only on list
   keys (topics: INVALID_CONFIG "Can't APPEND to key ... because its type is not LIST."; brokers:
   INVALID_REQUEST) and starting from the key's default when it has no value yet;
6. validation of the configs the resource would end up with: topics with
   :func:`~kbroker.controller.topic_configs.validate_topic_configs` (INVALID_CONFIG), then the topic must exist
   (UNKNOWN_TOPIC_OR_PARTITION); brokers with
   :func:`~kbroker.controller.broker_configs.validate_broker_configs` (INVALID_REQUEST); groups with
   :func:`~kbroker.controller.group_configs.validate_group_configs` against the broker's bounds (INVALID_CONFIG; the
   group need not exist, as Kafka); client metrics with
   :func:`~kbroker.controller.client_metrics.validate_client_metrics_configs`.

Legacy AlterConfigs replaces the resource's whole set: keys not named are deleted.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kbroker.controller.broker_configs import DYNAMIC_BROKER_CONFIGS, is_list_config, validate_broker_configs
from kbroker.controller.group_configs import GROUP_CONFIG_KEYS, GROUP_RESOURCE, validate_group_configs
from kbroker.controller.client_metrics import (
    CLIENT_METRICS_KEYS,
    CLIENT_METRICS_RESOURCE,
    validate_client_metrics_configs,
)
from kbroker.controller.image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage
from kbroker.controller.topic_configs import TOPIC_CONFIG_KEYS, validate_topic_configs
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.metadata_records import ConfigRecord

__all__ = ["APPEND", "DELETE", "SET", "SUBTRACT", "plan_incremental_alter_configs", "plan_legacy_alter_configs"]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
BROKER_LOGGER_RESOURCE = 8

#: (error code, error message) for one resource
Result = tuple[int, "str | None"]
IncrementalResource = tuple[int, str, Sequence[tuple[str, int, "str | None"]]]
LegacyResource = tuple[int, str, Sequence[tuple[str, "str | None"]]]


def _check_resource(rtype: int, name: str, node_id: int, image: MetadataImage) -> None:
    if rtype in (TOPIC_RESOURCE, GROUP_RESOURCE, CLIENT_METRICS_RESOURCE):
        return
    if rtype == BROKER_RESOURCE:
        if name == "":
            return
        try:
            nid = int(name)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
        if nid != node_id and nid not in image.brokers:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")
        return
    if rtype == BROKER_LOGGER_RESOURCE:
        # each node changes its own loggers (IncrementalAlterConfigs answers them before the controller); the
        # legacy AlterConfigs cannot (its BROKER_LOGGER resources reach here)
        raise KafkaError(ErrorCode.INVALID_REQUEST, "BROKER_LOGGER resources are changed with IncrementalAlterConfigs")
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {rtype}")


def _default_parts(rtype: int, key: str) -> list[str]:
    if rtype == CLIENT_METRICS_RESOURCE:
        return []
    spec = TOPIC_CONFIG_KEYS.get(key) if rtype == TOPIC_RESOURCE else GROUP_CONFIG_KEYS.get(key) \
        if rtype == GROUP_RESOURCE else DYNAMIC_BROKER_CONFIGS.get(key)
    default = spec.default if spec is not None else None
    return [p for p in (default or "").split(",") if p]


def _validate(image: MetadataImage, rtype: int, name: str, configs: Mapping[str, str | None],
              remote_storage_enabled: bool, broker_props: Mapping[str, str]) -> None:
    if rtype == GROUP_RESOURCE:
        validate_group_configs(name, {k: v for k, v in configs.items() if v is not None}, broker_props)
    elif rtype == TOPIC_RESOURCE:
        from kbroker.controller.quorum_controller import validate_topic_name

        why = validate_topic_name(name)
        if why:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
        validate_topic_configs({k: v for k, v in configs.items() if v is not None},
                               remote_storage_enabled=remote_storage_enabled)
        if name not in image.topics_by_name:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    elif rtype == CLIENT_METRICS_RESOURCE:
        validate_client_metrics_configs(name, configs)
    else:
        validate_broker_configs(configs)


def _records(rtype: int, name: str, current: Mapping[str, str], new: Mapping[str, str | None],
             keys: Sequence[str]) -> list[ConfigRecord]:
    out = []
    for key in keys:
        value = new.get(key)
        if value != current.get(key) or rtype == BROKER_RESOURCE:
            # Kafka writes broker records even when unchanged so that brokers reload (KAFKA-14136)
            out.append(ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=value))
    return out


def _duplicate_resources(resources: Sequence[tuple[int, str, Any]]) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    dups: set[tuple[int, str]] = set()
    for rtype, name, _ in resources:
        (dups if (rtype, name) in seen else seen).add((rtype, name))
    return dups


def plan_incremental_alter_configs(image: MetadataImage, node_id: int, resources: Sequence[IncrementalResource],
                                   remote_storage_enabled: bool = False, broker_props: Mapping[str, str] | None = None
                                   ) -> tuple[list[ConfigRecord], list[Result]]:
    """Records and per-resource results for IncrementalAlterConfigs (see the module docstring); ``broker_props``
    are the broker's configs (group config bounds)."""
    dups = _duplicate_resources(resources)
    records: list[ConfigRecord] = []
    results: list[Result] = []
    for rtype, name, ops in resources:
        try:
            if (rtype, name) in dups:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            keys = [k for k, _, _ in ops]
            if len(set(keys)) != len(keys):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            nulls = [k for k, op, v in ops if op != DELETE and v is None]
            if nulls:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
            _check_resource(rtype, name, node_id, image)
            current = dict(image.configs.get((rtype, name), {}))
            new: dict[str, str | None] = dict(current)
            for key, op, value in ops:
                if op == SET:
                    new[key] = value
                elif op == DELETE:
                    new[key] = None
                elif op in (APPEND, SUBTRACT):
                    if rtype == CLIENT_METRICS_RESOURCE:
                        is_list = CLIENT_METRICS_KEYS.get(key, ("",))[0] == "list"
                    else:
                        specs = TOPIC_CONFIG_KEYS if rtype == TOPIC_RESOURCE else GROUP_CONFIG_KEYS
                        is_list = (specs[key].type == "list" if key in specs else False) \
                            if rtype in (TOPIC_RESOURCE, GROUP_RESOURCE) else is_list_config(key)
                    if not is_list:
                        if rtype in (TOPIC_RESOURCE, GROUP_RESOURCE):
                            raise KafkaError(ErrorCode.INVALID_CONFIG,
                                             f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.")
                        verb = "append" if op == APPEND else "subtract"
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"Config value {verb} is not allowed for config key: {key}")
                    old = new.get(key)
                    parts = [p for p in old.split(",") if p] if old is not None else _default_parts(rtype, key)
                    for item in (value or "").split(","):
                        if op == APPEND and item not in parts:
                            parts.append(item)
                        elif op == SUBTRACT and item in parts:
                            parts.remove(item)
                    new[key] = ",".join(parts)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}")
            _validate(image, rtype, name, new, remote_storage_enabled, broker_props or {})
            records.extend(_records(rtype, name, current, new, keys))
            results.append((ErrorCode.NONE, None))
        except KafkaError as exc:
            results.append((exc.code, exc.message))
    return records, results


def plan_legacy_alter_configs(image: MetadataImage, node_id: int, resources: Sequence[LegacyResource],
                              remote_storage_enabled: bool = False, broker_props: Mapping[str, str] | None = None
                              ) -> tuple[list[ConfigRecord], list[Result]]:
    """Records and per-resource results for the legacy AlterConfigs: each resource's set is replaced."""
    dups = _duplicate_resources(resources)
    records: list[ConfigRecord] = []
    results: list[Result] = []
    for rtype, name, entries in resources:
        try:
            if (rtype, name) in dups:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            keys = [k for k, _ in entries]
            if len(set(keys)) != len(keys):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            nulls = [k for k, v in entries if v is None]
            if nulls:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
            _check_resource(rtype, name, node_id, image)
            current = dict(image.configs.get((rtype, name), {}))
            new: dict[str, str | None] = dict(entries)
            _validate(image, rtype, name, new, remote_storage_enabled, broker_props or {})
            records.extend(_records(rtype, name, current, new, keys))
            records.extend(ConfigRecord(resource_type=rtype, resource_name=name, name=k, value=None)
                           for k in sorted(current) if k not in new)
            results.append((ErrorCode.NONE, None))
        except KafkaError as exc:
            results.append((exc.code, exc.message))
    return records, results
