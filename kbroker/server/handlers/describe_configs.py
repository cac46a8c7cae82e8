"""DescribeConfigs (API key 32), versions 1-4.

Behavior:
* TOPIC resources (type 2): every topic-level key kbroker knows, with the effective value and its source:
  DYNAMIC_TOPIC_CONFIG (set on the topic), STATIC_BROKER_CONFIG (inherited from a ``log.*`` key in
  server.properties) or DEFAULT_CONFIG; synonyms (``IncludeSynonyms``) list each level in precedence order;
* BROKER resources (type 4) named after this node id (or ``""`` for the cluster default): the broker keys
  with STATIC_BROKER_CONFIG / DEFAULT_CONFIG sources;
* ``ConfigurationKeys`` restricts the keys; unknown topics get UNKNOWN_TOPIC_OR_PARTITION, other brokers'
  ids or other resource types INVALID_REQUEST.
Version notes: v3 ConfigType and documentation (documentation is not carried: null).
"""

from __future__ import annotations

from kbroker.config import BROKER_DEFAULTS
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse as R
from kbroker.storage.config import BROKER_TO_TOPIC_KEYS, TOPIC_CONFIG_DEFAULTS

API_KEY = ApiKey.DESCRIBE_CONFIGS
VERSIONS = range(1, 5)

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7

_TYPES = {
    "segment.bytes": TYPE_INT, "segment.index.bytes": TYPE_INT, "index.interval.bytes": TYPE_INT,
    "max.message.bytes": TYPE_INT, "min.insync.replicas": TYPE_INT, "cleanup.policy": TYPE_LIST,
    "message.timestamp.type": TYPE_STRING, "compression.type": TYPE_STRING,
}


def _topic_entries(ctx, topic: str, keys, synonyms: bool) -> list[R.DescribeConfigsResourceResult]:
    broker = ctx.broker
    overrides = broker.controller.image.configs.get((TOPIC, topic), {})
    static = broker.config.props
    out = []
    for key in sorted(TOPIC_CONFIG_DEFAULTS):
        if keys is not None and key not in keys:
            continue
        chain = []
        if key in overrides:
            chain.append((key, overrides[key], DYNAMIC_TOPIC_CONFIG))
        for bkey, mult in BROKER_TO_TOPIC_KEYS.get(key, ()):
            if bkey in static and static[bkey] != "":
                chain.append((bkey, static[bkey], STATIC_BROKER_CONFIG))
        default_name = BROKER_TO_TOPIC_KEYS[key][0][0] if key in BROKER_TO_TOPIC_KEYS else key
        chain.append((default_name, TOPIC_CONFIG_DEFAULTS[key], DEFAULT_CONFIG))
        effective = broker.topic_configs(topic).get(key, TOPIC_CONFIG_DEFAULTS[key])
        entry = R.DescribeConfigsResourceResult(
            name=key, value=effective, read_only=False, config_source=chain[0][2], is_sensitive=False,
            config_type=_TYPES.get(key, TYPE_LONG), documentation=None)
        if synonyms:
            entry.synonyms = [R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in chain]
        out.append(entry)
    return out


def _broker_entries(ctx, keys, synonyms: bool) -> list[R.DescribeConfigsResourceResult]:
    cfg = ctx.broker.config
    out = []
    for key in sorted(set(BROKER_DEFAULTS) | set(cfg.props)):
        if keys is not None and key not in keys:
            continue
        source = STATIC_BROKER_CONFIG if key in cfg.props else DEFAULT_CONFIG
        value = cfg.get(key)
        entry = R.DescribeConfigsResourceResult(
            name=key, value=value if value != "" else None, read_only=True, config_source=source,
            is_sensitive=False, config_type=TYPE_STRING, documentation=None)
        if synonyms:
            entry.synonyms = [R.DescribeConfigsSynonym(name=key, value=entry.value, source=source)]
        out.append(entry)
    return out


async def handle(ctx, request: DescribeConfigsRequest) -> R:
    image = ctx.broker.controller.image
    resp = R()
    for res in request.resources:
        result = R.DescribeConfigsResult(resource_type=res.resource_type, resource_name=res.resource_name)
        resp.results.append(result)
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if res.resource_type == TOPIC:
            if res.resource_name not in image.topics_by_name:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"Topic {res.resource_name} does not exist"
                continue
            result.configs = _topic_entries(ctx, res.resource_name, keys, request.include_synonyms)
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(ctx.broker.node_id)):
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Unexpected broker id {res.resource_name}"
                continue
            result.configs = _broker_entries(ctx, keys, request.include_synonyms)
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unsupported resource type {res.resource_type}"
    return resp
