"""Framing of KRaft metadata records (the values stored in ``__cluster_metadata``).

Every metadata record is stored as an ordinary record of a v2 batch with a null key. Its value is::

    uvarint frame_version   (always 1)
    uvarint record_type     (the spec's apiKey, e.g. 2 = TopicRecord)
    uvarint record_version
    body                    (the record encoded at record_version; all metadata records are flexible)

This module owns the type -> class registry, built from the generated
:mod:`kbroker.protocol.metadata_records` package, and the encode/decode pair used by the controller.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from kbroker.protocol import codec
from kbroker.protocol import metadata_records as _generated

__all__ = [
    "FRAME_VERSION",
    "METADATA_RECORD_TYPES",
    "MetadataRecordError",
    "decode_metadata_record",
    "decode_metadata_record_with_version",
    "encode_metadata_record",
    "record_type_of",
]

FRAME_VERSION = 1


class MetadataRecordError(ValueError):
    """A metadata record value could not be framed or unframed."""


def _build_registry() -> Mapping[int, type]:
    registry: dict[int, type] = {}
    for name in _generated.__all__:
        cls = getattr(_generated, name)
        if getattr(cls, "SPEC_TYPE", None) != "metadata" or getattr(cls, "API_KEY", None) is None:
            continue  # e.g. QuorumStateData is a "data" schema, not a log record
        key = cls.API_KEY
        if key in registry:  # pragma: no cover - would be a generator bug
            raise RuntimeError(f"duplicate metadata record type {key}: {registry[key].__name__}, {cls.__name__}")
        registry[key] = cls
    return MappingProxyType(dict(sorted(registry.items())))


#: record type (apiKey) -> generated dataclass, for every metadata record of the specs.
METADATA_RECORD_TYPES: Mapping[int, type] = _build_registry()


def record_type_of(msg: Any) -> int:
    """The record type (apiKey) of a generated metadata record instance."""
    cls = type(msg)
    key = getattr(cls, "API_KEY", None)
    if key is None or METADATA_RECORD_TYPES.get(key) is not cls:
        raise MetadataRecordError(f"{cls.__name__} is not a metadata record")
    return key


def encode_metadata_record(msg: Any, version: int | None = None) -> bytes:
    """Frame ``msg`` as a metadata record value. ``version`` defaults to the highest valid version."""
    key = record_type_of(msg)
    lo, hi = type(msg).VALID_VERSIONS
    if version is None:
        version = hi
    elif not lo <= version <= hi:
        raise MetadataRecordError(f"{type(msg).__name__} has no version {version} (valid {lo}-{hi})")
    return b"".join((codec.write_uvarint(FRAME_VERSION), codec.write_uvarint(key),
                     codec.write_uvarint(version), codec.encode(msg, version)))


def decode_metadata_record_with_version(value: Any) -> tuple[Any, int]:
    """Unframe a metadata record value -> (record, record version).

    Raises :class:`MetadataRecordError` on an unknown frame version, record type or record version,
    on malformed bodies and on trailing bytes.
    """
    if value is None:
        raise MetadataRecordError("metadata record has a null value")
    try:
        frame, pos = codec.read_uvarint(value, 0)
        if frame != FRAME_VERSION:
            raise MetadataRecordError(f"unsupported metadata record frame version {frame}")
        key, pos = codec.read_uvarint(value, pos)
        version, pos = codec.read_uvarint(value, pos)
        cls = METADATA_RECORD_TYPES.get(key)
        if cls is None:
            raise MetadataRecordError(f"unknown metadata record type {key}")
        lo, hi = cls.VALID_VERSIONS
        if not lo <= version <= hi:
            raise MetadataRecordError(f"{cls.__name__} version {version} is not supported (valid {lo}-{hi})")
        msg, end = codec.decode(cls, value, version, pos)
    except codec.DecodeError as exc:
        raise MetadataRecordError(f"malformed metadata record: {exc}") from exc
    if end != len(value):
        raise MetadataRecordError(f"{len(value) - end} trailing byte(s) after {cls.__name__}")
    return msg, version


def decode_metadata_record(value: Any) -> Any:
    """Unframe a metadata record value -> the generated record instance."""
    return decode_metadata_record_with_version(value)[0]
