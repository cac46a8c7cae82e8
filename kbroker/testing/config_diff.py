"""DescribeConfigs key by key, Apache Kafka 4.3.1 against kbroker (issue 31, item 4).

The protocol differential (:mod:`kbroker.testing.differential`) compares whole DescribeConfigs answers and can only
say *that* a broker resource differs. This compares them per configuration key, for each resource type a client can
describe: a topic, a broker (by node id and the cluster-wide ``""`` defaults), a group (KIP-848 group configs), a
client-metrics subscription (KIP-714) and the broker's loggers. For every key: the value, ``config_source``,
``config_type``, ``read_only``, ``is_sensitive`` and the synonyms (name, value, source), after the differential's
normalisation (ports, data directories, node ids); plus the keys only one broker lists.

:func:`compare` gives one :class:`ResourceDiff` per resource; :func:`markdown` renders them as the generated part
of ``docs/describe-configs.md`` (``scripts/config_diff.py --write-docs``); ``compat_tests/test_protocol_differential.py``
checks that the page still says what the brokers answer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kbroker.protocol import messages as m
from kbroker.protocol.api_keys import ApiKey
from kbroker.testing import differential as d

__all__ = ["FIELDS", "RESOURCES", "KeyDiff", "ResourceDiff", "describe", "compare", "markdown"]

#: the per-key fields compared, in DescribeConfigs v4's names
FIELDS = ("value", "config_source", "config_type", "read_only", "is_sensitive", "synonyms")

#: (label, resource type, name, keys asked for or None for all): ``{topic}``/``{group}`` are filled from the run's
#: :class:`differential.Names`; ``{node}`` is each broker's own node id. Of the loggers only ``root`` is compared:
#: the others are Java classes on one side and Python modules on the other, and both create them as code loads
RESOURCES: tuple[tuple[str, int, str, tuple[str, ...] | None], ...] = (
    ("topic", 2, "{topic}", None),
    ("broker", 4, "{node}", None),
    ("broker defaults (\"\")", 4, "", None),
    ("group", 32, "{group}", None),
    ("client metrics (no subscription)", 16, "{cm}", None),
    ("broker logger root", 8, "{node}", ("root",)),
)

_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
            7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
_TYPES = {0: "UNKNOWN", 1: "BOOLEAN", 2: "STRING", 3: "INT", 4: "SHORT", 5: "LONG", 6: "DOUBLE", 7: "LIST",
          8: "CLASS", 9: "PASSWORD"}


@dataclasses.dataclass
class KeyDiff:
    """One key both brokers list, and its fields that differ: ``field -> (kafka, kbroker)`` (readable forms)."""

    name: str
    fields: dict[str, tuple[Any, Any]]


@dataclasses.dataclass
class ResourceDiff:
    """One resource described by both brokers."""

    label: str
    kafka_error: int
    kbroker_error: int
    kafka_keys: int
    kbroker_keys: int
    identical: int
    differing: list[KeyDiff]
    only_kafka: list[str]
    only_kbroker: list[str]


def describe(target: d.Target, rtype: int, rname: str, keys: tuple[str, ...] | None = None,
             timeout: float = d.STEP_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """DescribeConfigs v4 of one resource (its ``keys``, or all) with synonyms: ``(error_code, {key: normalised
    entry})``. Raises ConnectionError when the broker does not answer."""
    D = m.DescribeConfigsRequest
    req = D(resources=[D.DescribeConfigsResource(resource_type=rtype, resource_name=rname,
                                                 configuration_keys=list(keys) if keys else None)],
            include_synonyms=True, include_documentation=False)
    conn = d.Conn(target, timeout)
    try:
        conn.corr += 1
        status, frame, detail = conn.exchange(d.encode_request(ApiKey.DESCRIBE_CONFIGS, 4, req, conn.corr), None,
                                              True)
        if frame is None:
            raise ConnectionError(f"{target.label}: DescribeConfigs {rtype}/{rname!r}: {status} {detail}")
        plain = d.to_plain(d.decode_response(ApiKey.DESCRIBE_CONFIGS, 4, frame, conn.corr), 4)
    finally:
        conn.close()
    plain = d.normalise(plain, target, d.Ctx(target, {}), ApiKey.DESCRIBE_CONFIGS)
    result = plain["results"][0]
    return result["error_code"], {c["name"]: c for c in result.get("configs") or ()}


def _readable(field: str, v: Any) -> Any:
    if field == "config_source":
        return _SOURCES.get(v, v)
    if field == "config_type":
        return _TYPES.get(v, v)
    if field == "synonyms":
        return [f"{s['name']}={s['value']!r} ({_SOURCES.get(s['source'], s['source'])})" for s in v or ()]
    return v


def compare_entries(label: str, kafka: tuple[int, dict[str, Any]], kbroker: tuple[int, dict[str, Any]]) -> ResourceDiff:
    (ke, ka), (be, kb) = kafka, kbroker
    differing, identical = [], 0
    for name in sorted(ka.keys() & kb.keys()):
        fields = {f: (_readable(f, ka[name].get(f)), _readable(f, kb[name].get(f)))
                  for f in FIELDS if ka[name].get(f) != kb[name].get(f)}
        if fields:
            differing.append(KeyDiff(name, fields))
        else:
            identical += 1
    return ResourceDiff(label, ke, be, len(ka), len(kb), identical, differing,
                        sorted(ka.keys() - kb.keys()), sorted(kb.keys() - ka.keys()))


def compare(kafka: d.Target, kbroker: d.Target, names: Any = None) -> list[ResourceDiff]:
    """Run :func:`differential.setup` (a topic on both) and compare every resource of :data:`RESOURCES`."""
    n = names or d.Names()
    d.setup([kafka, kbroker], n)
    out = []
    for label, rtype, pattern, keys in RESOURCES:
        got = []
        for t in (kafka, kbroker):
            name = pattern.format(topic=n.topic, group=n.group("configs"), cm=f"{n.prefix}-cm", node=t.node_id)
            got.append(describe(t, rtype, name, keys))
        out.append(compare_entries(label, got[0], got[1]))
    return out


def _cell(v: Any) -> str:
    if isinstance(v, list):
        text = "; ".join(str(x) for x in v) if v else "(none)"
    elif v is None:
        text = "null"
    elif isinstance(v, str):
        text = repr(v)
    else:
        text = str(v)
    return text.replace("|", "\\|")


def markdown(diffs: list[ResourceDiff], notes: dict[str, str] | None = None) -> str:
    """The page body: a summary table, then per resource the differing keys (field by field) and the keys only
    one broker lists. ``notes``: ``label -> why`` lines printed under a resource's heading."""
    lines = ["| Resource | Kafka keys | kbroker keys | identical | differing | only Kafka | only kbroker | error code "
             "(Kafka / kbroker) |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in diffs:
        lines.append(f"| {r.label} | {r.kafka_keys} | {r.kbroker_keys} | {r.identical} | {len(r.differing)} | "
                     f"{len(r.only_kafka)} | {len(r.only_kbroker)} | {r.kafka_error} / {r.kbroker_error} |")
    for r in diffs:
        lines += ["", f"### {r.label}", ""]
        if notes and r.label in notes:
            lines += [notes[r.label], ""]
        if not (r.differing or r.only_kafka or r.only_kbroker) and r.kafka_error == r.kbroker_error:
            lines.append("Identical, key by key.")
            continue
        if r.differing:
            lines += ["| Key | Field | Kafka 4.3.1 | kbroker |", "|---|---|---|---|"]
            for k in r.differing:
                for f, (a, b) in k.fields.items():
                    lines.append(f"| `{k.name}` | {f} | {_cell(a)} | {_cell(b)} |")
            lines.append("")
        if r.only_kafka:
            lines += [f"Only Kafka lists ({len(r.only_kafka)}): " + ", ".join(f"`{k}`" for k in r.only_kafka), ""]
        if r.only_kbroker:
            lines += [f"Only kbroker lists ({len(r.only_kbroker)}): " + ", ".join(f"`{k}`" for k in r.only_kbroker),
                      ""]
        while lines and lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"
