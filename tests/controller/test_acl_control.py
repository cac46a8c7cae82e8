"""ACLs in the metadata image (KIP-801): replay of AccessControlEntryRecord / RemoveAccessControlEntryRecord,
snapshots, and the controller's CreateAcls / DeleteAcls / DescribeAcls rules (kbroker.controller.acl_control),
with Kafka's messages; committed ACLs survive a restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kbroker.config import BrokerConfig
from kbroker.controller.acl_control import acl_record, describe_acls, plan_create_acls, plan_delete_acls
from kbroker.controller.image import MetadataDelta, MetadataImage, MetadataReplayError, diff_images
from kbroker.controller.quorum_controller import QuorumController
from kbroker.controller.records import encode_metadata_record
from kbroker.controller.snapshot import decode_snapshot, encode_snapshot, image_records, load_image
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.errors import ErrorCode
from kbroker.security.acl import (
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as Pat,
    ResourceType as Res,
    StandardAcl,
)

INVALID = ErrorCode.INVALID_REQUEST


def acl(name: str = "t", op: int = Op.READ, perm: int = Perm.ALLOW, principal: str = "User:alice",
        host: str = "*", pattern: int = Pat.LITERAL, rtype: int = Res.TOPIC) -> StandardAcl:
    return StandardAcl(int(rtype), name, int(pattern), principal, host, int(op), int(perm))


def _apply(image: MetadataImage, records: list) -> MetadataImage:
    delta = MetadataDelta(image)
    for i, r in enumerate(records):
        delta.replay(r, image.offset + 1 + i)
    return delta.apply()


def test_create_validates_as_kafka():
    creations = [
        acl(),
        acl("other", rtype=Res.CLUSTER),
        acl("", pattern=Pat.PREFIXED),
        acl(rtype=Res.ANY), acl(rtype=99),
        acl(pattern=Pat.MATCH), acl(pattern=Pat.ANY),
        acl(op=Op.ANY), acl(op=Op.UNKNOWN),
        acl(perm=Perm.ANY),
        acl(principal="alice"),
        acl("kafka-cluster", Op.ALTER, rtype=Res.CLUSTER),
    ]
    records, results = plan_create_acls(MetadataImage.empty("c"), creations)
    assert results == [
        (0, None),
        (INVALID, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (INVALID, "Invalid empty resource name"),
        (INVALID, "Invalid resourceType ANY"), (INVALID, "Invalid resourceType UNKNOWN"),
        (INVALID, "Invalid patternType MATCH"), (INVALID, "Invalid patternType ANY"),
        (INVALID, "Invalid operation ANY"), (INVALID, "Invalid operation UNKNOWN"),
        (INVALID, "Invalid permissionType ANY"),
        (INVALID, "Could not parse principal from `alice` (no colon is present separating the principal type "
                  "from the principal name)"),
        (0, None),
    ]
    assert [r.resource_name for r in records] == ["t", "kafka-cluster"]
    assert len({r.id for r in records}) == 2 and all(len(r.id) == 16 for r in records)


def test_an_existing_acl_is_not_added_twice():
    image = _apply(MetadataImage.empty("c"), plan_create_acls(MetadataImage.empty("c"), [acl()])[0])
    records, results = plan_create_acls(image, [acl(), acl("u"), acl("u")])
    assert results == [(0, None)] * 3
    assert [r.resource_name for r in records] == ["u"]
    image = _apply(image, records)
    assert sorted(a.resource_name for a in image.acls.values()) == ["t", "u"]


def test_delete_filters_remove_what_they_match_once():
    acls = [acl("foo"), acl("fo", pattern=Pat.PREFIXED), acl("*"), acl("foo", Op.WRITE, principal="User:bob"),
            acl("foo", rtype=Res.GROUP)]
    image = _apply(MetadataImage.empty("c"), plan_create_acls(MetadataImage.empty("c"), acls)[0])
    filters = [
        AclBindingFilter(resource_type=Res.TOPIC, resource_name="foo", pattern_type=Pat.MATCH,
                         principal="User:alice"),
        AclBindingFilter(resource_type=Res.TOPIC, resource_name="foo", pattern_type=Pat.LITERAL),
        AclBindingFilter(resource_type=Res.UNKNOWN),
        AclBindingFilter(operation=Op.UNKNOWN),
        AclBindingFilter(resource_name="nothing"),
    ]
    records, results = plan_delete_acls(image, filters)
    assert [(c, m) for c, m, _ in results] == [(0, None), (0, None), (INVALID, "Unknown patternFilter."),
                                              (INVALID, "Unknown entryFilter."), (0, None)]
    assert [a.resource_name for a in results[0][2]] == ["*", "fo", "foo"]
    assert [(a.resource_name, a.principal) for a in results[1][2]] == [("foo", "User:alice"), ("foo", "User:bob")]
    assert results[4][2] == []
    assert len(records) == 4  # acl("foo") matched twice, removed once
    after = _apply(image, records)
    assert list(after.acls.values()) == [acl("foo", rtype=Res.GROUP)]
    assert diff_images(image, after).changed_acls == {r.id for r in records}


def test_describe_groups_by_resource_pattern():
    acls = [acl("b", Op.WRITE), acl("a"), acl("b"), acl("b", pattern=Pat.PREFIXED)]
    code, message, groups = describe_acls(acls, AclBindingFilter())
    assert (code, message) == (0, None)
    assert [(key, [a.operation for a in group]) for key, group in groups] == [
        ((Res.TOPIC, "a", Pat.LITERAL), [Op.READ]),
        ((Res.TOPIC, "b", Pat.LITERAL), [Op.READ, Op.WRITE]),
        ((Res.TOPIC, "b", Pat.PREFIXED), [Op.READ]),
    ]
    assert describe_acls(acls, AclBindingFilter(pattern_type=0)) == (INVALID, "Unknown patternFilter.", [])


def test_replay_and_snapshot_round_trip():
    image = MetadataImage.empty("c")
    records = [acl_record(bytes([i]) * 16, a) for i, a in enumerate([acl("x"), acl("y", pattern=Pat.PREFIXED)], 1)]
    image = _apply(image, records)
    delta = MetadataDelta(image)
    delta.replay(mr.RemoveAccessControlEntryRecord(id=bytes([1]) * 16), image.offset + 1)
    assert delta.changes().changed_acls == {bytes([1]) * 16}
    with pytest.raises(MetadataReplayError):
        delta.replay(mr.RemoveAccessControlEntryRecord(id=bytes([1]) * 16))
    recs = image_records(image)
    assert [r.id for r in recs if isinstance(r, mr.AccessControlEntryRecord)] == [bytes([1]) * 16, bytes([2]) * 16]
    data = encode_snapshot([encode_metadata_record(r) for r in recs], 3, 1, 2)
    rebuilt = load_image("c", decode_snapshot(data), image.offset + 1)
    assert rebuilt.acls == image.acls
    assert dataclasses.replace(rebuilt, offset=image.offset) == image
    assert diff_images(image, rebuilt).is_empty


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "num.partitions": "1",
                         "listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"})


def test_controller_commits_acls_that_survive_a_restart(tmp_path: Path):
    qc = QuorumController(_config(tmp_path))
    qc.startup()
    try:
        seen = []
        qc.add_listener(lambda old, new, changes: seen.append(len(changes.changed_acls)))
        assert qc.create_acls([acl("a"), acl("b"), acl("", Op.READ)]) == [
            (0, None), (0, None), (INVALID, "Invalid empty resource name")]
        assert qc.create_acls([acl("a")]) == [(0, None)]
        assert seen == [2]  # nothing written for a request that adds nothing
        results = qc.delete_acls([AclBindingFilter(resource_name="b")])
        assert [(c, [a.resource_name for a in m]) for c, _, m in results] == [(0, ["b"])]
        assert seen == [2, 1]
        before = dict(qc.image.acls)
        assert list(before.values()) == [acl("a")]
        snapshot = qc.snapshot_bytes(qc.leader_epoch)
    finally:
        qc.shutdown()
    again = QuorumController(_config(tmp_path))
    again.startup()
    try:
        assert dict(again.image.acls) == before
    finally:
        again.shutdown()
    assert dict(load_image("c", decode_snapshot(snapshot), 10).acls) == before
