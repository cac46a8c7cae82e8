"""Request and response headers (protocol guide §1.2-1.3).

The request header version follows from the API version: v2 when the request version is flexible,
else v1. ``client_id`` always keeps the int16 length prefix. Response header v1 (tagged fields) is used
for flexible response versions, except ApiVersions, whose response always has header v0 (KIP-511).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kbroker.protocol.api_keys import REQUESTS, ApiKey
from kbroker.protocol.codec import DecodeError, _skip_tagged, is_flexible

_KEY_VERSION_CID = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_CID = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    """Decoded request header. ``body_offset`` is where the request body starts in the frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    body_offset: int


def peek_key_version(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < 8:
        raise DecodeError("request shorter than the header")
    return _KEY_VERSION_CID.unpack_from(frame, 0)


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, else 1. Unknown API keys count as non-flexible."""
    cls = REQUESTS.get(api_key)
    if cls is not None and is_flexible(cls, api_version):
        return 2
    return 1


def decode_request_header(frame: bytes) -> RequestHeader:
    """Parse the request header at the start of ``frame`` (the size prefix already removed).

    Raises :class:`DecodeError` when the header is truncated or malformed.
    """
    api_key, api_version, correlation_id = peek_key_version(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise DecodeError("truncated client id")
    n = _I16.unpack_from(frame, pos)[0]
    pos += 2
    client_id: str | None
    if n < 0:
        client_id = None
    else:
        if pos + n > len(frame):
            raise DecodeError("truncated client id")
        try:
            client_id = frame[pos:pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("client id is not UTF-8") from None
        pos += n
    hv = request_header_version(api_key, api_version)
    if hv == 2:
        pos = _skip_tagged(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, hv, pos)


def encode_request_header(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Encode a request header for ``api_key``/``api_version`` (used by kbroker's own clients and tests)."""
    out = bytearray(_KEY_VERSION_CID.pack(api_key, api_version, correlation_id))
    if client_id is None:
        out += _I16.pack(-1)
    else:
        b = client_id.encode()
        out += _I16.pack(len(b)) + b
    if request_header_version(api_key, api_version) == 2:
        out += b"\x00"
    return bytes(out)


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible response versions, else 0; ApiVersions always 0."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    cls = REQUESTS.get(api_key)
    return 1 if cls is not None and is_flexible(cls, api_version) else 0


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Response header bytes: correlation id, plus an empty tagged-field section for v1."""
    if header_version == 0:
        return _CID.pack(correlation_id)
    return _CID.pack(correlation_id) + b"\x00"
