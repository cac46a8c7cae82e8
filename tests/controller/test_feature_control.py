"""UpdateFeatures planning rules (kbroker.controller.feature_control), against Kafka 4.3.1's FeatureControlManager."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kbroker.controller.feature_control import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    default_levels,
    metadata_version_level,
    plan_update_features,
)
from kbroker.protocol.errors import ErrorCode

LOCAL = {"metadata.version": (7, 30), "group.version": (0, 1), "transaction.version": (0, 2),
         "eligible.leader.replicas.version": (0, 1)}


def image(features=None, brokers=None):
    regs = {i: SimpleNamespace(supported_features=r) for i, r in (brokers or {}).items()}
    return SimpleNamespace(features=features or {"metadata.version": 30, "group.version": 1}, brokers=regs)


def plan(updates, **kw):
    records, error = plan_update_features(kw.get("img") or image(), 1, LOCAL, updates)
    return [(r.name, r.feature_level) for r in records], error and (error.code, error.message)


def test_upgrade_and_safe_downgrade_write_one_record_per_feature():
    assert plan([("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 2, UPGRADE)]) == (
        [("group.version", 0), ("transaction.version", 2)], None)
    assert plan([("group.version", 1, UPGRADE)]) == ([("group.version", 1)], None)  # same level: no-op write


@pytest.mark.parametrize("update, reason", [
    (("group.version", 0, UPGRADE), "Can't downgrade the version of this feature without setting the upgrade type "
                                    "to either safe or unsafe downgrade."),
    (("transaction.version", 1, SAFE_DOWNGRADE), "Can't downgrade to a newer version."),
    (("group.version", 1, 4), "The controller does not support the given upgrade type."),
    (("group.version", -1, SAFE_DOWNGRADE), "A feature version cannot be less than 0."),
    (("group.version", 2, UPGRADE), "Local controller 1 only supports versions 0-1"),
    (("share.version", 1, UPGRADE), "Local controller 1 does not support this feature."),
])
def test_invalid_updates(update, reason):
    name, level, _ = update
    assert plan([update]) == ([], (ErrorCode.INVALID_UPDATE_VERSION,
                                   f"Invalid update version {level} for feature {name}. {reason}"))


def test_one_failure_fails_the_whole_request():
    records, error = plan([("transaction.version", 1, UPGRADE), ("group.version", 5, UPGRADE)])
    assert records == [] and error[0] == ErrorCode.INVALID_UPDATE_VERSION


def test_every_registered_broker_must_support_the_level():
    img = image(brokers={1: dict(LOCAL), 2: {"group.version": (0, 1)}, 3: dict(LOCAL)})
    assert plan([("transaction.version", 1, UPGRADE)], img=img)[1] == (
        ErrorCode.INVALID_UPDATE_VERSION,
        "Invalid update version 1 for feature transaction.version. Broker 2 does not support this feature.")
    img = image(brokers={1: dict(LOCAL), 2: {**LOCAL, "transaction.version": (0, 1)}})
    assert plan([("transaction.version", 2, UPGRADE)], img=img)[1][1].endswith("Broker 2 only supports versions 0-1")
    # disabling (level 0) is fine for a broker that does not know the feature
    assert plan([("group.version", 0, SAFE_DOWNGRADE)], img=image(brokers={2: {}}))[1] is None


def test_metadata_version_downgrade_rules():
    # 30 (4.3-IV0) changed the metadata format: no downgrade below it, safe or unsafe
    assert plan([("metadata.version", 29, SAFE_DOWNGRADE)])[1] == (
        ErrorCode.INVALID_UPDATE_VERSION, "Unsupported metadata.version downgrade from 30 to 29. Refusing to perform "
                                          "the requested downgrade because it might delete metadata information.")
    assert plan([("metadata.version", 29, UNSAFE_DOWNGRADE)])[1] == (
        ErrorCode.INVALID_UPDATE_VERSION, "Unsupported metadata.version downgrade from 30 to 29. Unsafe metadata "
                                          "downgrade is not supported in this version.")
    # 24..29 changed nothing: 29 -> 24 is a safe downgrade; 29 -> 23 is not (23, 4.0-IV1, changed it)
    img = image({"metadata.version": 29})
    assert plan([("metadata.version", 24, SAFE_DOWNGRADE)], img=img) == ([("metadata.version", 24)], None)
    assert "Refusing" in plan([("metadata.version", 22, SAFE_DOWNGRADE)], img=img)[1][1]
    assert plan([("metadata.version", 30, UPGRADE)], img=img) == ([("metadata.version", 30)], None)
    assert plan([("metadata.version", 6, SAFE_DOWNGRADE)], img=img)[1][1] == (
        "Invalid update version 6 for feature metadata.version. Local controller 1 only supports versions 7-30")


def test_dependencies_are_checked_against_the_levels_the_request_leaves():
    img = image({"metadata.version": 22})
    assert plan([("eligible.leader.replicas.version", 1, UPGRADE)], img=img)[1][1] == (
        "Invalid update version 1 for feature eligible.leader.replicas.version. eligible.leader.replicas.version "
        "could not be set to 1 because it depends on metadata.version level 23")
    assert plan([("metadata.version", 23, UPGRADE), ("eligible.leader.replicas.version", 1, UPGRADE)], img=img) == (
        [("metadata.version", 23), ("eligible.leader.replicas.version", 1)], None)


def test_release_version_defaults():
    assert metadata_version_level("4.3") == 30 and metadata_version_level("4.0-IV1") == 23
    assert metadata_version_level("3.3") == 7 and metadata_version_level("2.8") is None
    assert default_levels(22)["group.version"] == 1 and default_levels(21)["group.version"] == 0
    assert default_levels(30) == {"kraft.version": 1, "transaction.version": 2, "group.version": 1,
                                  "eligible.leader.replicas.version": 1, "share.version": 1, "streams.version": 1}


def test_elr_safety_records_move_min_insync_replicas_to_the_cluster_level():
    from kbroker.controller.feature_control import elr_safety_records

    img = SimpleNamespace(configs={(4, "1"): {"min.insync.replicas": "3", "log.retention.ms": "5"},
                                   (4, "2"): {"log.retention.ms": "5"}, (2, "t"): {"min.insync.replicas": "2"}})
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in elr_safety_records(img, 2)] == [
        (4, "", "min.insync.replicas", "2"), (4, "1", "min.insync.replicas", None)]
    img = SimpleNamespace(configs={(4, ""): {"min.insync.replicas": "1"}})
    assert elr_safety_records(img, 2) == []  # already safe: nothing to write
