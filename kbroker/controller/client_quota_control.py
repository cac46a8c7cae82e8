"""Client quotas in the metadata log (KIP-546): AlterClientQuotas planned against a metadata image, DescribeClientQuotas
answered from one, as Kafka's ``ClientQuotaControlManager`` and ``ClientQuotasImage`` do (facts from Kafka 4.x; no
code copied).

Quotas are ``ClientQuotaRecord`` s in ``__cluster_metadata`` (one per entity and key; ``remove`` drops the key),
replayed into ``MetadataImage.client_quotas``: entity -> {key: value}. An entity is a tuple of ``(entity type,
name)`` pairs sorted by type (:func:`kbroker.controller.image.quota_entity`); a name of None is the type's default.

Entity types and their keys (Kafka's ``QuotaConfigs``):

* ``user``, ``user`` + ``client-id``: ``producer_byte_rate`` and ``consumer_byte_rate`` (whole numbers, bytes/s),
  ``request_percentage`` (percent of one thread's time), ``controller_mutation_rate`` (partitions/s), plus the
  SCRAM credentials kept elsewhere (``kbroker.controller.scram_control``);
* ``client-id``: the same four keys;
* ``ip``: ``connection_creation_rate`` (whole number, connections/s; KIP-612).

AlterClientQuotas, per entry (one result per entry, INVALID_REQUEST with Kafka's message):

1. an entity altered twice, or a key altered twice in one entry: "Ignoring duplicate entity <entity>" (Kafka
   records "Duplicate quota key ..." for the latter, then overwrites it with this);
2. no entity type: "Invalid empty client quota entity"; a type twice: "Invalid empty client quota entity, duplicate
   entity entry <type>"; an unknown type: "Unhandled client quota entity type: <type>"; an empty name: "Empty
   <type> not supported";
3. a combination other than user, client-id, user + client-id, ip: "Invalid empty client quota entity"; an ip
   name that is not an address or resolvable host: "<ip> is not a valid IP or resolvable host.";
4. a key not valid for the entity: "Invalid configuration key <k>"; a whole-number key with a fraction:
   "<k> cannot be a fractional value.";
5. removing a key that is not set writes nothing; setting a key to its current value writes nothing.

The records of the valid entries are committed together. Nothing here does I/O but the name resolution of an ip
entity that is not an address literal.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Iterable, Mapping, Sequence

from kbroker.controller.image import MetadataImage, QuotaEntity, quota_entity
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import ClientQuotaRecord

__all__ = [
    "CLIENT_ID",
    "CLIENT_KEYS",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "IP",
    "IP_KEYS",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "describe_client_quotas",
    "entity_str",
    "plan_alter_client_quotas",
]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: key -> whole number (Kafka's LONG / INT types) or not (DOUBLE)
CLIENT_KEYS: Mapping[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
                                   CONTROLLER_MUTATION_RATE: False}
IP_KEYS: Mapping[str, bool] = {CONNECTION_CREATION_RATE: True}

# DescribeClientQuotas match types
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2

#: an alteration: (entity as ``(type, name)`` pairs in request order, [(key, value or None to remove)])
Alteration = tuple[Sequence[tuple[str, "str | None"]], Sequence[tuple[str, "float | None"]]]
#: (error code, error message or None), one per alteration
AlterResult = tuple[int, "str | None"]


def entity_str(parts: Iterable[tuple[str, str | None]]) -> str:
    """An entity as Kafka's ``ClientQuotaEntity.toString`` prints it: ``ClientQuotaEntity(entries={user=alice})``."""
    inner = ", ".join(f"{t}={n if n is not None else 'null'}" for t, n in parts)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
        return True
    except (OSError, UnicodeError):
        return False


def _check_entity(parts: Sequence[tuple[str, str | None]]) -> tuple[str | None, Mapping[str, bool]]:
    """(error message or None, the valid keys)."""
    if not parts:
        return "Invalid empty client quota entity", {}
    seen: dict[str, str | None] = {}
    for etype, name in parts:
        if etype in seen:
            return f"Invalid empty client quota entity, duplicate entity entry {etype}", {}
        if etype not in (USER, CLIENT_ID, IP):
            return f"Unhandled client quota entity type: {etype}", {}
        seen[etype] = name
        if name is not None and name == "":
            return f"Empty {etype} not supported", {}
    types = set(seen)
    if types in ({USER}, {CLIENT_ID}, {USER, CLIENT_ID}):
        return None, CLIENT_KEYS
    if types == {IP}:
        if not _valid_ip(seen[IP]):
            return f"{seen[IP]} is not a valid IP or resolvable host.", {}
        return None, IP_KEYS
    return "Invalid empty client quota entity", {}


def _check_value(keys: Mapping[str, bool], key: str, value: float) -> str | None:
    whole = keys.get(key)
    if whole is None:
        return f"Invalid configuration key {key}"
    if whole and abs(int(value + 1e-6) - value) > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def plan_alter_client_quotas(image: MetadataImage, alterations: Sequence[Alteration]
                             ) -> tuple[list[ClientQuotaRecord], list[AlterResult]]:
    """AlterClientQuotas against ``image`` (the controller's latest): the records to commit and one ``(error code,
    message)`` per alteration, in request order (rules in the module docstring)."""
    records: list[ClientQuotaRecord] = []
    results: list[AlterResult] = []
    seen: set[tuple[tuple[str, str | None], ...]] = set()
    for parts, ops in alterations:
        key_of_entity = tuple(parts)
        ops_by_key: dict[str, float | None] = {}
        problem: str | None = None
        for key, value in ops:
            if key in ops_by_key:
                # Kafka notes "Duplicate quota key <k> not updating quota for this entity <entity>", and then, the
                # entity having a result already, answers the one below instead
                problem = f"Ignoring duplicate entity {entity_str(parts)}"
            else:
                ops_by_key[key] = value
        if key_of_entity in seen:
            problem = f"Ignoring duplicate entity {entity_str(parts)}"
        seen.add(key_of_entity)
        if problem is None:
            problem, keys = _check_entity(parts)
            entity = quota_entity(parts) if problem is None else ()
            current = image.client_quotas.get(entity, {}) if problem is None else {}
            new: list[ClientQuotaRecord] = []
            for key, value in ops_by_key.items():
                if problem is not None:
                    break
                data = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity]
                if value is None:
                    if key in current:
                        new.append(ClientQuotaRecord(entity=data, key=key, remove=True))
                    continue
                problem = _check_value(keys, key, value)
                if problem is None and current.get(key) != value:
                    new.append(ClientQuotaRecord(entity=data, key=key, value=float(value)))
            if problem is None:
                records += new
        results.append((ErrorCode.NONE, None) if problem is None else (ErrorCode.INVALID_REQUEST, problem))
    return records, results


#: (entity, {key: value}) as DescribeClientQuotas answers it
DescribeEntry = tuple[QuotaEntity, Mapping[str, float]]


def describe_client_quotas(image: MetadataImage, components: Sequence[tuple[str, int, str | None]], strict: bool
                           ) -> tuple[int, str | None, list[DescribeEntry]]:
    """DescribeClientQuotas from ``image`` (Kafka's ``ClientQuotasImage.describe``): ``components`` are (entity type,
    match type 0 exact / 1 default / 2 any, match). An entity matches when every component does: exact, the type
    with that name; default, the type's default entity; any, the type with any name or the default. ``strict``: the
    entity has no other types than the components name. Returns (error code, message, entries sorted by entity);
    INVALID_REQUEST for a type named twice, a match given with default / any or missing with exact, an unknown
    match type, or ip filtered together with user or client-id."""
    wanted: dict[str, tuple[int, str | None]] = {}
    for etype, match_type, match in components:
        if etype in wanted:
            return ErrorCode.INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter.", []
        if match_type == MATCH_EXACT and match is None:
            return ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.", []
        if match_type == MATCH_DEFAULT and match is not None:
            return (ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match "
                    "string.", [])
        if match_type == MATCH_ANY and match is not None:
            return (ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match "
                    "string.", [])
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}", []
        wanted[etype] = (match_type, match)
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        return (ErrorCode.INVALID_REQUEST, "Invalid entity filter component combination, IP filter component should "
                "not be used with user or clientId filter component.", [])
    out: list[DescribeEntry] = []
    for entity, values in image.client_quotas.items():
        names = dict(entity)
        if strict and set(names) != set(wanted):
            continue
        ok = True
        for etype, (match_type, match) in wanted.items():
            if etype not in names:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = names[etype] == match
            elif match_type == MATCH_DEFAULT:
                ok = names[etype] is None
            if not ok:
                break
        if ok:
            out.append((entity, values))
    out.sort(key=lambda e: tuple((t, n is not None, n or "") for t, n in e[0]))
    return ErrorCode.NONE, None, out
