"""Round trips of every request and response of every API and version, plus primitive encodings."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbroker.protocol import codec
from kbroker.protocol.api_keys import REQUESTS, RESPONSES
from kbroker.protocol.schema import Field, default_for, in_range

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}


def value_strategy(f: Field, kind: str, version: int, flexible: bool, nullable: bool, depth: int):
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        s = st.integers(lo, hi)
    elif kind == "float64":
        s = st.floats(allow_nan=False)
    elif kind == "bool":
        s = st.booleans()
    elif kind == "uuid":
        s = st.binary(min_size=16, max_size=16)
    elif kind == "string":
        s = st.text(max_size=8)
    elif kind in ("bytes", "records"):
        s = st.binary(max_size=12)
    elif kind == "struct":
        s = struct_strategy(f.struct, version, flexible, depth + 1)
    else:
        raise AssertionError(kind)
    return st.one_of(st.none(), s) if nullable else s


def field_strategy(f: Field, version: int, flexible: bool, depth: int):
    nullable = in_range(f.nullable, version)
    if f.kind == "array":
        elem = value_strategy(f, f.elem, version, flexible, False, depth)
        s = st.lists(elem, max_size=2 if depth < 3 else 0)
        return st.one_of(st.none(), s) if nullable else s
    return value_strategy(f, f.kind, version, flexible, nullable, depth)


def struct_strategy(cls, version: int, flexible: bool, depth: int = 0):
    kwargs = {}
    for f in cls.FIELDS:
        if in_range(f.versions, version):
            kwargs[f.name] = field_strategy(f, version, flexible, depth)
        else:
            kwargs[f.name] = st.builds(lambda f=f: default_for(f))
    return st.builds(cls, **kwargs)


CASES = [
    (cls, v)
    for table in (REQUESTS, RESPONSES)
    for cls in table.values()
    for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]


@pytest.mark.parametrize("cls,version", CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_round_trip(cls, version):
    flexible = codec.is_flexible(cls, version)

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(msg=struct_strategy(cls, version, flexible))
    def check(msg):
        data = codec.encode(msg, version)
        decoded, end = codec.decode(cls, data, version)
        assert end == len(data)
        assert decoded == msg
        assert codec.encode(decoded, version) == data

    check()


def test_truncated_input_raises_decode_error():
    from kbroker.protocol.messages import MetadataRequest

    msg = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="abc")])
    data = codec.encode(msg, 12)
    for cut in range(len(data)):
        with pytest.raises(codec.DecodeError):
            codec.decode(MetadataRequest, data[:cut], 12)


@pytest.mark.parametrize("value,encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                           (300, b"\xac\x02"), (2**31 - 1, b"\xff\xff\xff\xff\x07")])
def test_uvarint(value, encoded):
    assert codec.write_uvarint(value) == encoded
    assert codec.read_uvarint(encoded, 0) == (value, len(encoded))


def test_unknown_tagged_fields_are_skipped():
    from kbroker.protocol.messages import ApiVersionsRequest

    body = codec.encode(ApiVersionsRequest(client_software_name="a", client_software_version="1"), 3)
    # replace the empty tagged section with one unknown tag (99) of 2 bytes
    patched = body[:-1] + b"\x01\x63\x02zz"
    decoded, end = codec.decode(ApiVersionsRequest, patched, 3)
    assert end == len(patched) and decoded.client_software_name == "a"
