"""SCRAM credentials in the metadata image (KIP-554): replay of UserScramCredentialRecord /
RemoveUserScramCredentialRecord, snapshots, the bootstrap file, and the controller's AlterUserScramCredentials /
DescribeUserScramCredentials rules (kbroker.controller.scram_control), checked against Kafka's messages and against
``scramp``'s own SCRAM arithmetic."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import scramp

from kbroker.config import BrokerConfig
from kbroker.controller.bootstrap import BOOTSTRAP_FILE, BootstrapError, read_bootstrap_file, write_bootstrap_file
from kbroker.controller.image import MetadataDelta, MetadataImage, ScramCredential, diff_images
from kbroker.controller.quorum_controller import BOOTSTRAP_FEATURES, MetadataStorageError, QuorumController
from kbroker.controller.records import encode_metadata_record
from kbroker.controller.scram_control import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    credential_record,
    describe_user_scram_credentials,
    plan_alter_user_scram_credentials,
    salted_password,
    scram_keys,
)
from kbroker.controller.snapshot import decode_snapshot, encode_snapshot, image_records, load_image
from kbroker.protocol import metadata_records as mr
from kbroker.protocol.errors import ErrorCode

SALT = bytes(range(16))
NAMES = {SCRAM_SHA_256: "SCRAM-SHA-256", SCRAM_SHA_512: "SCRAM-SHA-512"}


def _image(metadata_version: int = 30) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.empty("c"))
    delta.replay(mr.FeatureLevelRecord(name="metadata.version", feature_level=metadata_version), 0)
    return delta.apply()


def _replay(image: MetadataImage, *records) -> tuple[MetadataImage, MetadataDelta]:
    delta = MetadataDelta(image)
    for i, r in enumerate(records):
        delta.replay(r, image.offset + 1 + i)
    return delta.apply(), delta


def _upsert(name: str, mechanism: int = SCRAM_SHA_256, iterations: int = 4096, password: str = "secret"):
    code = mechanism if mechanism in NAMES else SCRAM_SHA_256
    return name, mechanism, iterations, SALT, salted_password(code, password, SALT, max(iterations, 1))


# ---- the arithmetic ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_keys_match_an_independent_scram_implementation(mechanism):
    salt, stored_key, server_key, iterations = scramp.ScramMechanism(NAMES[mechanism]).make_auth_info(
        "pencil", iteration_count=4096, salt=SALT)
    assert scram_keys(mechanism, salted_password(mechanism, "pencil", SALT, 4096)) == (stored_key, server_key)
    rec = credential_record("alice", mechanism, password="pencil", salt=SALT)
    assert (rec.name, rec.mechanism, rec.salt, rec.stored_key, rec.server_key, rec.iterations) == (
        "alice", mechanism, salt, stored_key, server_key, iterations)
    assert len(credential_record("bob", mechanism, password="x").salt) == 32  # a fresh random salt


def test_credential_record_rejects_what_kafka_rejects():
    for kwargs in ({"password": "x", "iterations": MIN_ITERATIONS - 1}, {"password": "x", "iterations": 16385},
                   {}, {"password": "x", "salted": b"s", "salt": SALT}, {"salted": b"s"}):
        with pytest.raises(ValueError):
            credential_record("alice", SCRAM_SHA_256, **kwargs)
    with pytest.raises(ValueError):
        credential_record("alice", 3, password="x")


# ---- replay -----------------------------------------------------------------------------------------

def _record(name: str, mechanism: int = SCRAM_SHA_256, iterations: int = 4096, password: str = "pw"):
    return credential_record(name, mechanism, password=password, salt=SALT, iterations=iterations)


def test_replay_upserts_and_removes_credentials():
    base = _image()
    img, delta = _replay(base, _record("alice"), _record("alice", SCRAM_SHA_512, 8192), _record("bob"))
    assert set(img.scram_credentials) == {("alice", 1), ("alice", 2), ("bob", 1)}
    cred = img.scram_credentials[("alice", 2)]
    rec = _record("alice", SCRAM_SHA_512, 8192)
    assert cred == ScramCredential(rec.salt, rec.stored_key, rec.server_key, 8192)
    assert delta.changes().changed_scram_credentials == {("alice", 1), ("alice", 2), ("bob", 1)}
    assert not delta.changes().is_empty
    assert base.scram_credentials == {}  # the old image is untouched

    # a new password replaces the credential; a removal drops one mechanism only
    img2, delta2 = _replay(img, _record("alice", password="new"),
                           mr.RemoveUserScramCredentialRecord(name="bob", mechanism=SCRAM_SHA_256))
    assert img2.scram_credentials[("alice", 1)].stored_key == _record("alice", password="new").stored_key
    assert ("bob", 1) not in img2.scram_credentials and ("alice", 2) in img2.scram_credentials
    assert img2.scram_credentials[("alice", 2)] is img.scram_credentials[("alice", 2)]
    assert delta2.changes().changed_scram_credentials == {("alice", 1), ("bob", 1)}
    assert img.scram_credentials[("alice", 1)].stored_key == _record("alice").stored_key  # img is untouched
    assert diff_images(img, img2).changed_scram_credentials == {("alice", 1), ("bob", 1)}

    # removing what is not there changes nothing; other deltas share the unchanged map
    img3, delta3 = _replay(img2, mr.RemoveUserScramCredentialRecord(name="carol", mechanism=SCRAM_SHA_256),
                           mr.NoOpRecord())
    assert img3.scram_credentials == img2.scram_credentials
    assert delta3.changes().changed_scram_credentials == frozenset()
    img4, _ = _replay(img2, mr.ConfigRecord(resource_type=2, resource_name="t", name="k", value="v"))
    assert img4.scram_credentials is img2.scram_credentials


def test_credentials_are_immutable_and_keys_stay_out_of_repr():
    img, _ = _replay(_image(), _record("alice"))
    with pytest.raises(TypeError):
        img.scram_credentials[("mallory", 1)] = img.scram_credentials[("alice", 1)]  # type: ignore[index]
    cred = img.scram_credentials[("alice", 1)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cred.iterations = 1  # type: ignore[misc]
    assert repr(cred) == "ScramCredential(iterations=4096)"
    assert cred.stored_key.hex() not in repr(img)


def test_snapshot_round_trip_carries_the_credentials():
    img, _ = _replay(_image(), _record("bob", SCRAM_SHA_512, 16384), _record("alice"),
                     _record("alice", SCRAM_SHA_512, 5000))
    recs = image_records(img)
    scram = [r for r in recs if isinstance(r, mr.UserScramCredentialRecord)]
    assert [(r.name, r.mechanism) for r in scram] == [("alice", 1), ("alice", 2), ("bob", 2)]
    data = encode_snapshot([encode_metadata_record(r) for r in recs], 3, 1, 2)
    rebuilt = load_image("c", decode_snapshot(data), img.offset + 1)
    assert rebuilt.scram_credentials == img.scram_credentials
    assert dataclasses.replace(rebuilt, offset=img.offset) == img
    assert diff_images(img, rebuilt).is_empty


# ---- AlterUserScramCredentials ----------------------------------------------------------------------

def test_alter_upserts_with_the_keys_derived_from_the_salted_password():
    image = _image()
    records, results = plan_alter_user_scram_credentials(
        image, [], [_upsert("alice", SCRAM_SHA_256, 8192), _upsert("bob", SCRAM_SHA_512, 4096, "b")])
    assert results == [("alice", 0, None), ("bob", 0, None)]
    _, stored, server, _ = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info("secret", 8192, SALT)
    assert records[0] == mr.UserScramCredentialRecord(name="alice", mechanism=1, salt=SALT, stored_key=stored,
                                                      server_key=server, iterations=8192)
    assert (records[1].name, records[1].mechanism, records[1].iterations) == ("bob", 2, 4096)


def test_alter_errors_per_user_with_kafkas_codes_and_messages():
    image, _ = _replay(_image(), _record("dave", SCRAM_SHA_512))
    records, results = plan_alter_user_scram_credentials(
        image,
        [("dave", SCRAM_SHA_512), ("erin", SCRAM_SHA_256), ("", SCRAM_SHA_256), ("frank", 0), ("dave", SCRAM_SHA_256),
         ("erin", SCRAM_SHA_512)],
        [_upsert("alice", 3), _upsert("bob", iterations=MIN_ITERATIONS - 1), _upsert("carol", iterations=16385),
         _upsert(""), _upsert("gina", iterations=MAX_ITERATIONS), _upsert("gina", SCRAM_SHA_512),
         _upsert("erin"), _upsert("hank", iterations=MIN_ITERATIONS)])
    assert results == [
        ("dave", ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        ("erin", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        ("", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ("frank", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("alice", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ("bob", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        ("carol", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        ("gina", ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
        ("hank", 0, None),
    ]
    # only hank's credential is written: dave's deletion was cancelled by the duplicate, erin keeps her first error
    assert [(type(r).__name__, r.name) for r in records] == [("UserScramCredentialRecord", "hank")]


def test_alter_deletes_and_a_user_both_deleted_and_upserted_is_a_duplicate():
    image, _ = _replay(_image(), _record("alice"), _record("alice", SCRAM_SHA_512), _record("bob"))
    records, results = plan_alter_user_scram_credentials(image, [("alice", SCRAM_SHA_512), ("bob", SCRAM_SHA_256)],
                                                         [_upsert("bob", SCRAM_SHA_512)])
    assert results == [("alice", 0, None), ("bob", ErrorCode.DUPLICATE_RESOURCE,
                                            "A user credential cannot be altered twice in the same request")]
    assert records == [mr.RemoveUserScramCredentialRecord(name="alice", mechanism=SCRAM_SHA_512)]


def test_alter_needs_a_metadata_version_with_scram():
    records, results = plan_alter_user_scram_credentials(_image(10), [("a", 1)], [_upsert("b")])
    assert records == []
    assert results == [("a", ErrorCode.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM"),
                       ("b", ErrorCode.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM")]
    assert plan_alter_user_scram_credentials(_image(11), [], [_upsert("b")])[1] == [("b", 0, None)]


# ---- DescribeUserScramCredentials -------------------------------------------------------------------

def test_describe_all_named_missing_and_duplicate():
    image, _ = _replay(_image(), _record("bob", SCRAM_SHA_512, 8192), _record("alice"),
                       _record("alice", SCRAM_SHA_512, 5000))
    everyone = [("alice", 0, None, [(1, 4096), (2, 5000)]), ("bob", 0, None, [(2, 8192)])]
    assert describe_user_scram_credentials(image, None) == everyone
    assert describe_user_scram_credentials(image, []) == everyone
    assert describe_user_scram_credentials(image, ["bob", "zed", "alice", "zed"]) == [
        ("bob", 0, None, [(2, 8192)]),
        ("zed", ErrorCode.DUPLICATE_RESOURCE,
         "Cannot describe SCRAM credentials for the same user twice in a single request: zed", []),
        ("alice", 0, None, [(1, 4096), (2, 5000)]),
    ]
    assert describe_user_scram_credentials(image, ["nobody"]) == [
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: nobody",
         [])]
    assert describe_user_scram_credentials(_image(), None) == []


# ---- the controller: commit, restart, snapshot, bootstrap -------------------------------------------

def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / "data"), "num.partitions": "1",
                         "listeners": "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"})


def test_controller_commits_credentials_that_survive_a_restart(tmp_path: Path):
    qc = QuorumController(_config(tmp_path))
    qc.startup()
    try:
        seen = []
        qc.add_listener(lambda old, new, changes: seen.append(changes.changed_scram_credentials))
        assert qc.alter_user_scram_credentials([], [_upsert("alice", SCRAM_SHA_256, 8192),
                                                    _upsert("bob", SCRAM_SHA_512)]) == [("alice", 0, None),
                                                                                        ("bob", 0, None)]
        assert seen == [{("alice", 1), ("bob", 2)}]
        assert qc.alter_user_scram_credentials([("bob", SCRAM_SHA_512)], []) == [("bob", 0, None)]
        assert qc.alter_user_scram_credentials([("bob", SCRAM_SHA_512)], []) == [
            ("bob", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]
        assert len(seen) == 2  # nothing written for a request of errors only
        before = qc.image.scram_credentials
        assert set(before) == {("alice", 1)} and before[("alice", 1)].iterations == 8192
        snapshot = qc.snapshot_bytes(qc.leader_epoch)
    finally:
        qc.shutdown()
    again = QuorumController(_config(tmp_path))
    again.startup()
    try:
        assert again.image.scram_credentials == before
    finally:
        again.shutdown()
    assert load_image("c", decode_snapshot(snapshot), 10).scram_credentials == before


def test_bootstrap_file_credentials_are_committed_at_the_first_start(tmp_path: Path):
    config = _config(tmp_path)
    meta = Path(config.metadata_log_dir)
    meta.mkdir(parents=True)
    write_bootstrap_file(meta, BOOTSTRAP_FEATURES, [_record("alice"), _record("alice", SCRAM_SHA_512, 9000)])
    recs = read_bootstrap_file(meta)
    assert [type(r).__name__ for r in recs] == ["FeatureLevelRecord"] * len(BOOTSTRAP_FEATURES) + [
        "UserScramCredentialRecord"] * 2
    assert recs[0].name == "metadata.version"
    qc = QuorumController(config)
    qc.startup()
    try:
        assert set(qc.image.scram_credentials) == {("alice", 1), ("alice", 2)}
        assert qc.image.scram_credentials[("alice", 2)].iterations == 9000
        assert dict(qc.image.features) == BOOTSTRAP_FEATURES
        qc.alter_user_scram_credentials([("alice", SCRAM_SHA_256)], [])
    finally:
        qc.shutdown()
    # later starts replay the log and do not bootstrap again
    qc = QuorumController(config)
    qc.startup()
    try:
        assert set(qc.image.scram_credentials) == {("alice", 2)}
    finally:
        qc.shutdown()


def test_a_damaged_or_foreign_bootstrap_file_stops_the_first_start(tmp_path: Path):
    config = _config(tmp_path)
    meta = Path(config.metadata_log_dir)
    meta.mkdir(parents=True)
    path = write_bootstrap_file(meta, BOOTSTRAP_FEATURES, [_record("alice")])
    assert path == meta / BOOTSTRAP_FILE
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(BootstrapError, match="is damaged"):
        read_bootstrap_file(meta)
    with pytest.raises(MetadataStorageError, match="bootstrap.checkpoint is damaged"):
        QuorumController(config).startup()
    write_bootstrap_file(meta, BOOTSTRAP_FEATURES, [mr.TopicRecord(name="t", topic_id=b"\1" * 16)])
    with pytest.raises(BootstrapError, match="holds a TopicRecord"):
        read_bootstrap_file(meta)
    assert read_bootstrap_file(tmp_path / "nowhere") is None
