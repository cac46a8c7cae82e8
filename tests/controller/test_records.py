"""Metadata record framing (frame version, type, version, body) for every metadata record type."""

from __future__ import annotations

import pytest

from kbroker.controller.records import (
    FRAME_VERSION,
    METADATA_RECORD_TYPES,
    MetadataRecordError,
    decode_metadata_record,
    decode_metadata_record_with_version,
    encode_metadata_record,
)
from kbroker.controller.uuids import random_uuid, uuid_from_str, uuid_to_str
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.schema import Field, in_range

_EXPECTED_TYPES = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord", 3: "PartitionRecord",
    4: "ConfigRecord", 5: "PartitionChangeRecord", 7: "FenceBrokerRecord", 8: "UnfenceBrokerRecord",
    9: "RemoveTopicRecord", 10: "DelegationTokenRecord", 11: "UserScramCredentialRecord",
    12: "FeatureLevelRecord", 14: "ClientQuotaRecord", 15: "ProducerIdsRecord",
    17: "BrokerRegistrationChangeRecord", 18: "AccessControlEntryRecord", 19: "RemoveAccessControlEntryRecord",
    20: "NoOpRecord", 21: "ZkMigrationStateRecord", 22: "RemoveUserScramCredentialRecord",
    23: "BeginTransactionRecord", 24: "EndTransactionRecord", 25: "AbortTransactionRecord",
    26: "RemoveDelegationTokenRecord", 27: "RegisterControllerRecord", 28: "ClearElrRecord",
    29: "UnregisterControllerRecord",  # Kafka 4.4
}


def test_registry_has_every_metadata_record_type():
    assert {k: c.__name__ for k, c in METADATA_RECORD_TYPES.items()} == _EXPECTED_TYPES


def _sample(f: Field, version: int, seed: int):
    """A non-default value for field ``f`` present at ``version``."""
    kind = f.kind
    if kind == "array":
        if f.elem == "struct":
            return [_fill(f.struct, version, seed + i) for i in range(2)]
        return [_primitive(f.elem, seed + i) for i in range(3)]
    if kind == "struct":
        return _fill(f.struct, version, seed)
    return _primitive(kind, seed)


def _primitive(kind: str, seed: int):
    return {
        "int8": 7 + seed % 50, "int16": 300 + seed, "int32": 70000 + seed, "int64": 2**40 + seed,
        "uint16": 65000 - seed, "uint32": 2**31 + seed, "float64": 1.5 + seed, "bool": True,
        "string": f"s{seed}-é", "bytes": bytes([seed % 256]) * 3, "uuid": bytes([seed % 256 or 1]) * 16,
    }[kind]


def _fill(cls, version: int, seed: int):
    obj = cls()
    for i, f in enumerate(cls.FIELDS):
        if in_range(f.versions, version):
            setattr(obj, f.name, _sample(f, version, seed * 31 + i))
    return obj


@pytest.mark.parametrize("record_type", sorted(METADATA_RECORD_TYPES))
def test_round_trip_every_type_and_version(record_type):
    cls = METADATA_RECORD_TYPES[record_type]
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, hi + 1):
        msg = _fill(cls, version, record_type + version)
        value = encode_metadata_record(msg, version)
        assert value[0] == FRAME_VERSION
        assert value[1] == record_type  # all types < 128: one-byte varint
        assert value[2] == version
        decoded, got_version = decode_metadata_record_with_version(value)
        assert got_version == version
        assert decoded == msg
    # default: highest valid version
    msg = _fill(cls, hi, 1)
    assert encode_metadata_record(msg)[2] == hi
    assert decode_metadata_record(encode_metadata_record(msg)) == msg


def test_known_bytes_of_a_topic_record():
    # frame 1, type 2, version 0, compact string "foo" (len+1), uuid, empty tagged fields
    value = encode_metadata_record(mr.TopicRecord(name="foo", topic_id=bytes(range(16))))
    assert value == bytes([1, 2, 0, 4]) + b"foo" + bytes(range(16)) + b"\x00"


def test_decode_rejects_bad_frames():
    good = encode_metadata_record(mr.NoOpRecord())
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(b"\x00" + good[1:])  # frame version 0
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(bytes([1, 6, 0, 0]))  # type 6 is unused
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(bytes([1, 20, 5, 0]))  # NoOpRecord has only version 0
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(good + b"\x00")  # trailing byte
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(encode_metadata_record(mr.TopicRecord(name="x"))[:-5])  # truncated
    with pytest.raises(MetadataRecordError):
        decode_metadata_record(None)
    with pytest.raises(MetadataRecordError):
        encode_metadata_record(mr.TopicRecord(), version=1)
    with pytest.raises(MetadataRecordError):
        encode_metadata_record(mr.QuorumStateData())  # not a log record


def test_uuid_text_form():
    assert uuid_to_str(bytes(15) + b"\x01") == "AAAAAAAAAAAAAAAAAAAAAQ"
    for _ in range(100):
        u = random_uuid()
        s = uuid_to_str(u)
        assert len(s) == 22 and not s.startswith("-") and uuid_from_str(s) == u
        assert u[:8] != bytes(8)
    with pytest.raises(ValueError):
        uuid_from_str("short")
