"""Encoder/decoder engine for the generated Kafka messages (sans-I/O).

For each (message class, version) pair the engine writes a small Python function specialised to that
version's field list and compiles it once with ``exec``: no per-field interpretation at run time. The wire
rules follow the protocol guide §1.4-1.5 (KIP-482 flexible versions and tagged fields).

Public functions:

* :func:`decode` ``(cls, buf, version, pos=0) -> (message, end_pos)``; raises :class:`DecodeError` on
  malformed input (truncated, negative lengths, invalid UTF-8).
* :func:`encode` ``(message, version) -> bytes``.
* :func:`encode_into` ``(message, version, out, chunks)``: appends to ``out`` (bytearray); a ``records``
  value that is not bytes-like (a :class:`~kbroker.protocol.send.FileRegion` or a list of them) is written
  as its length prefix followed by the regions themselves, flushed as separate entries in ``chunks``.

Decoded ``records`` fields are ``memoryview`` slices of the input buffer (no copy); ``bytes`` fields are
copied into ``bytes``; ``uuid`` fields are 16-byte ``bytes``.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from kbroker.protocol.schema import Field, default_for, in_range

__all__ = ["DecodeError", "decode", "encode", "encode_into", "is_flexible", "read_uvarint", "write_uvarint"]


class DecodeError(ValueError):
    """The bytes do not form a valid message of the requested type and version."""


def is_flexible(cls: type, version: int) -> bool:
    """True when ``version`` of ``cls`` uses compact encodings and tagged fields."""
    return in_range(cls.FLEXIBLE_VERSIONS, version)  # type: ignore[attr-defined]


# ---- primitives -------------------------------------------------------------------------------

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint at ``pos`` -> (value, new position). At most 5 bytes (int32 range)."""
    try:
        b = buf[pos]
    except IndexError:
        raise DecodeError("truncated varint") from None
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise DecodeError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long")


_UVARINT_CACHE = [bytes([i]) for i in range(128)]


def write_uvarint(value: int) -> bytes:
    """Unsigned LEB128 encoding of a non-negative ``value``."""
    if 0 <= value < 128:
        return _UVARINT_CACHE[value]
    if value < 0:
        value &= 0xFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip_tagged(buf: Any, pos: int) -> int:
    n, pos = read_uvarint(buf, pos)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise DecodeError("truncated tagged fields")
    return pos


def _read_str(buf: Any, pos: int, n: int) -> str:
    end = pos + n
    if end > len(buf):
        raise DecodeError("truncated string")
    try:
        return bytes(buf[pos:end]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"invalid UTF-8 string: {exc}") from None


def _read_bytes(buf: Any, pos: int, n: int) -> bytes:
    end = pos + n
    if end > len(buf):
        raise DecodeError("truncated bytes")
    return bytes(buf[pos:end])


def _read_records(buf: Any, pos: int, n: int) -> memoryview:
    end = pos + n
    if end > len(buf):
        raise DecodeError("truncated records")
    return memoryview(buf)[pos:end]


_ENV: dict[str, Any] = {
    "_i8": _I8.unpack_from, "_i16": _I16.unpack_from, "_u16": _U16.unpack_from, "_i32": _I32.unpack_from,
    "_u32": _U32.unpack_from, "_i64": _I64.unpack_from, "_f64": _F64.unpack_from,
    "_p8": _I8.pack, "_p16": _I16.pack, "_pu16": _U16.pack, "_p32": _I32.pack, "_pu32": _U32.pack,
    "_p64": _I64.pack, "_pf64": _F64.pack,
    "_uv": read_uvarint, "_wuv": write_uvarint, "_skip_tagged": _skip_tagged, "_str": _read_str,
    "_bytes": _read_bytes, "_records": _read_records, "DecodeError": DecodeError, "struct_error": struct.error,
    "_default_for": default_for,
}

_FIXED = {  # kind -> (unpack name, size, pack name)
    "int8": ("_i8", 1, "_p8"), "int16": ("_i16", 2, "_p16"), "uint16": ("_u16", 2, "_pu16"),
    "int32": ("_i32", 4, "_p32"), "uint32": ("_u32", 4, "_pu32"), "int64": ("_i64", 8, "_p64"),
    "float64": ("_f64", 8, "_pf64"),
}


# ---- decoder generation -----------------------------------------------------------------------

class _Compiler:
    def __init__(self) -> None:
        self.env: dict[str, Any] = dict(_ENV)
        self.lines: list[str] = []
        self.counter = 0

    def tmp(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> str:
        name = self.tmp("_c")
        self.env[name] = value
        return name


def _field_flexible(f: Field, flexible: bool, version: int) -> bool:
    if f.flexible is True:
        return flexible
    return in_range(f.flexible, version)  # type: ignore[arg-type]


def _emit_read_value(c: _Compiler, f: Field, kind: str, version: int, flexible: bool, target: str,
                     indent: str, nullable: bool) -> None:
    """Emit code reading one value of ``kind`` at ``pos`` into variable ``target``."""
    L = c.lines.append
    if kind in _FIXED:
        fn, size, _ = _FIXED[kind]
        L(f"{indent}{target} = {fn}(buf, pos)[0]; pos += {size}")
    elif kind == "bool":
        L(f"{indent}{target} = buf[pos] != 0; pos += 1")
    elif kind == "uuid":
        L(f"{indent}{target} = _bytes(buf, pos, 16); pos += 16")
    elif kind in ("string", "bytes", "records"):
        n = c.tmp("n")
        if flexible:
            L(f"{indent}{n}, pos = _uv(buf, pos); {n} -= 1")
        elif kind == "string":
            L(f"{indent}{n} = _i16(buf, pos)[0]; pos += 2")
        else:
            L(f"{indent}{n} = _i32(buf, pos)[0]; pos += 4")
        reader = {"string": "_str", "bytes": "_bytes", "records": "_records"}[kind]
        L(f"{indent}if {n} < 0:")
        if nullable:
            L(f"{indent}    {target} = None")
        else:
            L(f"{indent}    raise DecodeError('null or negative length for non-nullable {f.name}')")
        L(f"{indent}else:")
        L(f"{indent}    {target} = {reader}(buf, pos, {n}); pos += {n}")
    elif kind == "struct":
        assert f.struct is not None
        dec = c.const(_decoder(f.struct, version))
        if nullable and kind == "struct" and f.kind == "struct":
            L(f"{indent}if _i8(buf, pos)[0] < 0:")
            L(f"{indent}    pos += 1; {target} = None")
            L(f"{indent}else:")
            L(f"{indent}    {target}, pos = {dec}(buf, pos + 1)")
        else:
            L(f"{indent}{target}, pos = {dec}(buf, pos)")
    else:
        raise AssertionError(kind)


def _emit_read_field(c: _Compiler, f: Field, version: int, flexible: bool, target: str, indent: str) -> None:
    L = c.lines.append
    fflex = _field_flexible(f, flexible, version)
    nullable = in_range(f.nullable, version)
    if f.kind != "array":
        _emit_read_value(c, f, f.kind, version, fflex, target, indent, nullable)
        return
    n = c.tmp("n")
    if fflex:
        L(f"{indent}{n}, pos = _uv(buf, pos); {n} -= 1")
    else:
        L(f"{indent}{n} = _i32(buf, pos)[0]; pos += 4")
    L(f"{indent}if {n} < 0:")
    if nullable:
        L(f"{indent}    {target} = None")
    else:
        L(f"{indent}    raise DecodeError('null array for non-nullable {f.name}')")
    L(f"{indent}else:")
    L(f"{indent}    if {n} > len(buf) - pos: raise DecodeError('array length exceeds buffer')")
    lst = c.tmp("l")
    L(f"{indent}    {lst} = []")
    L(f"{indent}    for _ in range({n}):")
    item = c.tmp("e")
    _emit_read_value(c, f, f.elem or "", version, fflex, item, indent + "        ", False)
    L(f"{indent}        {lst}.append({item})")
    L(f"{indent}    {target} = {lst}")


_DECODERS: dict[tuple[type, int], Callable[[Any, int], tuple[Any, int]]] = {}
_ENCODERS: dict[tuple[type, int], Callable[[Any, bytearray, list], None]] = {}


def _decoder(cls: type, version: int) -> Callable[[Any, int], tuple[Any, int]]:
    key = (cls, version)
    fn = _DECODERS.get(key)
    if fn is not None:
        return fn
    # Placeholder for recursive structs (none exist in Kafka's specs, but be safe).
    c = _Compiler()
    fields: tuple[Field, ...] = cls.FIELDS  # type: ignore[attr-defined]
    flexible = _flexible_for_struct(cls, version)
    c.env["_cls"] = cls
    L = c.lines.append
    L("def decode(buf, pos):")
    L("  try:")
    args = []
    tagged: list[Field] = []
    for i, f in enumerate(fields):
        var = f"f{i}"
        args.append(var)
        present = in_range(f.versions, version)
        is_tagged = flexible and in_range(f.tagged, version)
        if present and not is_tagged:
            _emit_read_field(c, f, version, flexible, var, "    ")
        else:
            d = c.const(f)
            L(f"    {var} = _default_for({d})")
            if present and is_tagged:
                tagged.append(f)
    if flexible:
        if tagged:
            L("    ntag, pos = _uv(buf, pos)")
            L("    for _ in range(ntag):")
            L("      tag, pos = _uv(buf, pos)")
            L("      size, pos = _uv(buf, pos)")
            L("      end = pos + size")
            first = True
            for f in tagged:
                i = fields.index(f)
                L(f"      {'if' if first else 'elif'} tag == {f.tag}:")
                first = False
                _emit_read_field(c, f, version, True, f"f{i}", "        ")
                L("        if pos != end: raise DecodeError('tagged field size mismatch')")
            L("      else:")
            L("        pos = end")
            L("    if pos > len(buf): raise DecodeError('truncated tagged fields')")
        else:
            L("    pos = _skip_tagged(buf, pos)")
    L(f"    return _cls({', '.join(args)}), pos")
    L("  except (struct_error, IndexError):")
    L(f"    raise DecodeError('truncated {cls.__qualname__} v{version}') from None")
    exec("\n".join(c.lines), c.env)  # noqa: S102 - generated from our own schema tables
    fn = c.env["decode"]
    _DECODERS[key] = fn
    return fn


# Flexibility of nested structs follows the top-level message. The top-level class records it; nested
# structs are compiled through the message, so we thread the flag via this map.
_STRUCT_FLEX: dict[type, tuple[int, int] | None] = {}


def _flexible_for_struct(cls: type, version: int) -> bool:
    rng = getattr(cls, "FLEXIBLE_VERSIONS", None)
    if rng is None and not hasattr(cls, "VALID_VERSIONS"):
        rng = _STRUCT_FLEX.get(cls)
    return in_range(rng, version)


def _register_nested(cls: type) -> None:
    """Record the top-level flexible range on every nested struct class of ``cls``."""
    if getattr(cls, "_kb_registered", False):
        return
    rng = cls.FLEXIBLE_VERSIONS  # type: ignore[attr-defined]
    stack = [cls]
    while stack:
        k = stack.pop()
        for f in k.FIELDS:  # type: ignore[attr-defined]
            if f.struct is not None and f.struct not in _STRUCT_FLEX:
                _STRUCT_FLEX[f.struct] = rng
                stack.append(f.struct)
    type.__setattr__(cls, "_kb_registered", True)


# ---- encoder generation -----------------------------------------------------------------------

def _emit_write_value(c: _Compiler, f: Field, kind: str, version: int, flexible: bool, val: str,
                      indent: str, nullable: bool) -> None:
    L = c.lines.append
    if kind in _FIXED:
        _, _, pk = _FIXED[kind]
        L(f"{indent}out += {pk}({val})")
    elif kind == "bool":
        L(f"{indent}out += b'\\x01' if {val} else b'\\x00'")
    elif kind == "uuid":
        L(f"{indent}out += {val}")
    elif kind in ("string", "bytes", "records"):
        null = "b'\\x00'" if flexible else ("b'\\xff\\xff'" if kind == "string" else "b'\\xff\\xff\\xff\\xff'")
        L(f"{indent}if {val} is None:")
        L(f"{indent}    out += {null}")
        L(f"{indent}else:")
        b = c.tmp("b")
        if kind == "string":
            L(f"{indent}    {b} = {val}.encode('utf-8')")
        elif kind == "records":
            L(f"{indent}    if not isinstance({val}, (bytes, bytearray, memoryview)):")
            L(f"{indent}        _write_regions({val}, out, chunks, {flexible})")
            L(f"{indent}        {b} = None")
            L(f"{indent}    else:")
            L(f"{indent}        {b} = {val}")
        else:
            L(f"{indent}    {b} = {val}")
        ind2 = indent + "    "
        if kind == "records":
            L(f"{ind2}if {b} is not None:")
            ind2 += "    "
        if flexible:
            L(f"{ind2}out += _wuv(len({b}) + 1)")
        elif kind == "string":
            L(f"{ind2}out += _p16(len({b}))")
        else:
            L(f"{ind2}out += _p32(len({b}))")
        L(f"{ind2}out += {b}")
    elif kind == "struct":
        assert f.struct is not None
        enc = c.const(_encoder(f.struct, version))
        if nullable and f.kind == "struct":
            L(f"{indent}if {val} is None:")
            L(f"{indent}    out += b'\\xff'")
            L(f"{indent}else:")
            L(f"{indent}    out += b'\\x01'; {enc}({val}, out, chunks)")
        else:
            L(f"{indent}{enc}({val}, out, chunks)")
    else:
        raise AssertionError(kind)


def _emit_write_field(c: _Compiler, f: Field, version: int, flexible: bool, val: str, indent: str) -> None:
    L = c.lines.append
    fflex = _field_flexible(f, flexible, version)
    nullable = in_range(f.nullable, version)
    if f.kind != "array":
        _emit_write_value(c, f, f.kind, version, fflex, val, indent, nullable)
        return
    null = "b'\\x00'" if fflex else "b'\\xff\\xff\\xff\\xff'"
    L(f"{indent}if {val} is None:")
    L(f"{indent}    out += {null}")
    L(f"{indent}else:")
    if fflex:
        L(f"{indent}    out += _wuv(len({val}) + 1)")
    else:
        L(f"{indent}    out += _p32(len({val}))")
    item = c.tmp("e")
    L(f"{indent}    for {item} in {val}:")
    _emit_write_value(c, f, f.elem or "", version, fflex, item, indent + "        ", False)


def _encoder(cls: type, version: int) -> Callable[[Any, bytearray, list], None]:
    key = (cls, version)
    fn = _ENCODERS.get(key)
    if fn is not None:
        return fn
    c = _Compiler()
    c.env["_write_regions"] = _write_regions
    fields: tuple[Field, ...] = cls.FIELDS  # type: ignore[attr-defined]
    flexible = _flexible_for_struct(cls, version)
    L = c.lines.append
    L("def encode(o, out, chunks):")
    tagged: list[Field] = []
    for f in fields:
        if not in_range(f.versions, version):
            continue
        if flexible and in_range(f.tagged, version):
            tagged.append(f)
            continue
        _emit_write_field(c, f, version, flexible, f"o.{f.name}", "    ")
    if flexible:
        if not tagged:
            L("    out += b'\\x00'")
        else:
            L("    tf = []")
            for f in sorted(tagged, key=lambda x: x.tag or 0):
                d = c.const(f)
                L(f"    v = o.{f.name}")
                L(f"    if v != _default_for({d}):")
                L("        saved = out; out = bytearray()")
                _emit_write_field(c, f, version, True, "v", "        ")
                L(f"        tf.append(({f.tag}, out)); out = saved")
            L("    out += _wuv(len(tf))")
            L("    for tag, data in tf:")
            L("        out += _wuv(tag); out += _wuv(len(data)); out += data")
    else:
        L("    pass")
    exec("\n".join(c.lines), c.env)  # noqa: S102 - generated from our own schema tables
    fn = c.env["encode"]
    _ENCODERS[key] = fn
    return fn


def _write_regions(value: Any, out: bytearray, chunks: list, flexible: bool) -> None:
    """Write the length prefix of a file-backed records value, then flush ``out`` and add the regions."""
    regions = value if isinstance(value, (list, tuple)) else [value]
    size = sum(len(r) for r in regions)
    out += write_uvarint(size + 1) if flexible else _I32.pack(size)
    chunks.append(bytes(out))
    del out[:]
    chunks.extend(regions)


# ---- public API -------------------------------------------------------------------------------

def decode(cls: type, buf: Any, version: int, pos: int = 0) -> tuple[Any, int]:
    """Decode a ``cls`` message at ``version`` from ``buf[pos:]`` -> (message, end position)."""
    if hasattr(cls, "VALID_VERSIONS"):
        _register_nested(cls)
    return _decoder(cls, version)(buf, pos)


def encode_into(msg: Any, version: int, out: bytearray, chunks: list) -> None:
    """Append the encoding of ``msg`` at ``version`` to ``out``; file regions go to ``chunks``."""
    cls = type(msg)
    if hasattr(cls, "VALID_VERSIONS"):
        _register_nested(cls)
    _encoder(cls, version)(msg, out, chunks)


def encode(msg: Any, version: int) -> bytes:
    """Encode ``msg`` at ``version`` into bytes (records must be bytes-like, not file regions)."""
    out = bytearray()
    chunks: list = []
    encode_into(msg, version, out, chunks)
    if chunks:
        raise ValueError("message holds file regions; use encode_into")
    return bytes(out)
