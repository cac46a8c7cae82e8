"""Client quotas in the metadata image (KIP-546): replay of ClientQuotaRecord, snapshots, AlterClientQuotas'
validation (Kafka's ClientQuotaControlManager messages) and DescribeClientQuotas' filters."""

from __future__ import annotations

import dataclasses

from kbroker.controller.client_quota_control import describe_client_quotas, entity_str, plan_alter_client_quotas
from kbroker.controller.image import MetadataDelta, MetadataImage, diff_images
from kbroker.controller.records import encode_metadata_record
from kbroker.controller.snapshot import decode_snapshot, encode_snapshot, image_records, load_image
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.errors import ErrorCode

INVALID = ErrorCode.INVALID_REQUEST


def _replay(image: MetadataImage, *records) -> tuple[MetadataImage, MetadataDelta]:
    delta = MetadataDelta(image)
    for i, r in enumerate(records):
        delta.replay(r, image.offset + 1 + i)
    return delta.apply(), delta


def _rec(entity: list[tuple[str, str | None]], key: str, value: float = 0.0, remove: bool = False):
    return mr.ClientQuotaRecord(entity=[mr.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n)
                                        for t, n in entity], key=key, value=value, remove=remove)


def _alter(image: MetadataImage, *alterations):
    records, results = plan_alter_client_quotas(image, list(alterations))
    return _replay(image, *records)[0], records, results


def test_replay_sets_removes_and_drops_empty_entities_in_any_entity_order():
    img = MetadataImage.empty("c")
    img, delta = _replay(img, _rec([("user", "alice"), ("client-id", None)], "producer_byte_rate", 1024),
                         _rec([("client-id", None), ("user", "alice")], "consumer_byte_rate", 2048),
                         _rec([("ip", "10.0.0.1")], "connection_creation_rate", 5))
    entity = (("client-id", None), ("user", "alice"))
    assert dict(img.client_quotas[entity]) == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    assert delta.changes().changed_client_quotas == {entity, (("ip", "10.0.0.1"),)}
    img2, delta = _replay(img, _rec([("ip", "10.0.0.1")], "connection_creation_rate", remove=True),
                          _rec([("ip", "10.0.0.2")], "connection_creation_rate", remove=True))
    assert (("ip", "10.0.0.1"),) not in img2.client_quotas
    assert delta.changes().changed_client_quotas == {(("ip", "10.0.0.1"),)}
    assert diff_images(img, img2).changed_client_quotas == {(("ip", "10.0.0.1"),)}


def test_snapshot_round_trip_carries_the_quotas():
    img, _ = _replay(MetadataImage.empty("c"), _rec([("client-id", "c1")], "producer_byte_rate", 1048576),
                     _rec([("user", None)], "request_percentage", 12.5),
                     _rec([("user", "bob"), ("client-id", "c2")], "controller_mutation_rate", 3))
    recs = image_records(img)
    data = encode_snapshot([encode_metadata_record(r) for r in recs], 3, 1, 2)
    rebuilt = load_image("c", decode_snapshot(data), img.offset + 1)
    assert rebuilt.client_quotas == img.client_quotas
    assert dataclasses.replace(rebuilt, offset=img.offset) == img


def test_alter_writes_only_changes_and_answers_per_entry():
    img = MetadataImage.empty("c")
    img, records, results = _alter(img, ([("client-id", "c1")], [("producer_byte_rate", 1024.0),
                                                                 ("consumer_byte_rate", None)]),
                                   ([("user", None), ("client-id", None)], [("request_percentage", 50.5)]))
    assert results == [(0, None), (0, None)]
    assert len(records) == 2  # removing an unset key writes nothing
    _, records, results = _alter(img, ([("client-id", "c1")], [("producer_byte_rate", 1024.0)]))
    assert records == [] and results == [(0, None)]  # unchanged value
    img, records, _ = _alter(img, ([("client-id", "c1")], [("producer_byte_rate", None)]))
    assert records[0].remove and (("client-id", "c1"),) not in img.client_quotas


def test_alter_rejects_with_kafkas_messages():
    img = MetadataImage.empty("c")
    c1 = [("client-id", "c1")]
    _, records, results = _alter(
        img,
        ([], [("producer_byte_rate", 1.0)]),
        ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0)]),
        ([("group", "g")], [("producer_byte_rate", 1.0)]),
        ([("user", "")], [("producer_byte_rate", 1.0)]),
        ([("user", "a"), ("ip", "1.2.3.4")], [("producer_byte_rate", 1.0)]),
        ([("ip", "not a host name!")], [("connection_creation_rate", 1.0)]),
        ([("ip", "1.2.3.4")], [("producer_byte_rate", 1.0)]),
        (c1, [("producer_byte_rate", 1.5)]),
        ([("client-id", "c2")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
        (c1, [("request_percentage", 1.5)]),
        ([("ip", None)], [("connection_creation_rate", 10.0)]),
    )
    assert results == [
        (INVALID, "Invalid empty client quota entity"),
        (INVALID, "Invalid empty client quota entity, duplicate entity entry user"),
        (INVALID, "Unhandled client quota entity type: group"),
        (INVALID, "Empty user not supported"),
        (INVALID, "Invalid empty client quota entity"),
        (INVALID, "not a host name! is not a valid IP or resolvable host."),
        (INVALID, "Invalid configuration key producer_byte_rate"),
        (INVALID, "producer_byte_rate cannot be a fractional value."),
        (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c2})"),
        (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c1})"),
        (0, None),
    ]
    assert [(r.entity[0].entity_type, r.entity[0].entity_name, r.key) for r in records] == [
        ("ip", None, "connection_creation_rate")]
    assert entity_str([("user", None)]) == "ClientQuotaEntity(entries={user=null})"


def test_describe_filters():
    img, _ = _replay(MetadataImage.empty("c"),
                     _rec([("user", "alice")], "producer_byte_rate", 1),
                     _rec([("user", "alice"), ("client-id", "c1")], "producer_byte_rate", 2),
                     _rec([("user", None)], "producer_byte_rate", 3),
                     _rec([("client-id", "c1")], "producer_byte_rate", 4),
                     _rec([("ip", None)], "connection_creation_rate", 5))

    def names(components, strict=False):
        code, message, entries = describe_client_quotas(img, components, strict)
        assert code == 0, message
        return [dict(e) for e, _ in entries]

    assert len(names([])) == 5
    assert names([("user", 0, "alice")]) == [{"user": "alice", "client-id": "c1"}, {"user": "alice"}]
    assert names([("user", 0, "alice")], strict=True) == [{"user": "alice"}]
    assert names([("user", 1, None)]) == [{"user": None}]
    assert names([("user", 2, None)], strict=True) == [{"user": None}, {"user": "alice"}]
    assert names([("user", 2, None), ("client-id", 0, "c1")]) == [{"user": "alice", "client-id": "c1"}]
    assert names([("ip", 1, None)]) == [{"ip": None}]
    assert describe_client_quotas(img, [("user", 0, None)], False)[:2] == (
        INVALID, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert describe_client_quotas(img, [("user", 2, None), ("user", 1, None)], False)[:2] == (
        INVALID, "Entity type user cannot appear more than once in the filter.")
    assert describe_client_quotas(img, [("ip", 2, None), ("user", 2, None)], False)[0] == INVALID
    assert describe_client_quotas(img, [("user", 7, None)], False)[:2] == (INVALID, "Unknown match type 7")
