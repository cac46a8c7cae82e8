"""Schema objects used by the generated message modules (facts from the Kafka JSON specs).

The generator (``scripts/generate_messages.py``) turns each JSON spec into a module of slotted
dataclasses, one per struct, and attaches a ``FIELDS`` tuple of :class:`Field` to every class. The codec
(:mod:`kbroker.protocol.codec`) compiles per-version encoders and decoders from those tuples.

Version ranges are inclusive ``(low, high)`` tuples; ``high`` is :data:`MAX_VERSION` for an open range
("3+" in the specs). ``None`` means "never" (e.g. a field that is never nullable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_VERSION = 32767
ZERO_UUID = bytes(16)

VersionRange = tuple[int, int]


def in_range(rng: VersionRange | None, version: int) -> bool:
    """True when ``version`` lies inside the inclusive range ``rng`` (``None`` = empty)."""
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct.

    ``kind`` is a primitive name (``int8 int16 int32 int64 uint16 uint32 float64 bool string bytes
    records uuid``), ``"struct"`` (``struct`` names the class) or ``"array"`` (``elem`` names the
    element: a primitive name, or ``"struct"`` with ``struct`` set).
    """

    name: str
    kind: str
    versions: VersionRange
    nullable: VersionRange | None = None
    tagged: VersionRange | None = None
    tag: int | None = None
    default: Any = None
    elem: str | None = None
    struct: type | None = None
    flexible: VersionRange | None | bool = True  # True = follow the message; else a field override


def default_for(f: Field) -> Any:
    """A fresh default value for ``f`` (a new list / struct instance on each call).

    For arrays and structs the generator stores ``default=None`` when the spec's default is null and
    ``default=()`` otherwise (empty list / default-constructed struct).
    """
    if f.kind == "array":
        return None if f.default is None else []
    if f.kind == "struct":
        if f.default is None:
            return None
        assert f.struct is not None
        return f.struct()
    return f.default
