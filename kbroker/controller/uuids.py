"""Kafka-style 128-bit ids (topic ids, cluster id, directory ids, incarnation ids).

Kafka prints a Uuid as URL-safe base64 without padding (22 characters). Randomly generated ids avoid the
all-zero id, the metadata topic's id ``Uuid(0, 1)``, other small reserved values, and ids whose text
form starts with ``-`` (awkward on command lines).
"""

from __future__ import annotations

import base64
import os

ZERO_UUID = bytes(16)
#: ``Uuid(0, 1)``: the topic id of ``__cluster_metadata``.
METADATA_TOPIC_ID = bytes(15) + b"\x01"


def uuid_to_str(value: bytes) -> str:
    """16 bytes -> 22-character URL-safe base64 (Kafka's ``Uuid.toString``)."""
    if len(value) != 16:
        raise ValueError(f"a uuid has 16 bytes, got {len(value)}")
    return base64.urlsafe_b64encode(value).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    """Inverse of :func:`uuid_to_str`; raises ValueError on malformed input."""
    if len(text) != 22:
        raise ValueError(f"invalid uuid {text!r}: expected 22 base64url characters")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid uuid {text!r}") from exc
    if len(raw) != 16 or uuid_to_str(raw) != text:
        raise ValueError(f"invalid uuid {text!r}")
    return raw


def random_uuid() -> bytes:
    """A fresh random id that is not reserved (high 64 bits non-zero) and does not print with a leading '-'."""
    while True:
        value = os.urandom(16)
        if value[:8] != bytes(8) and not uuid_to_str(value).startswith("-"):
            return value
