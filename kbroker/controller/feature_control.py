"""Finalized feature levels: Kafka 4.3.1's feature table and the UpdateFeatures rules (KIP-584, KIP-778, KIP-1022).

Pure planning, as Kafka's ``FeatureControlManager``: :func:`plan_update_features` checks a request's updates
against the metadata image and returns the ``FeatureLevelRecord``\\ s to commit, or the first error. The rules, in
Kafka's order, per feature:

* an upgrade type other than UPGRADE (1), SAFE_DOWNGRADE (2), UNSAFE_DOWNGRADE (3): INVALID_UPDATE_VERSION "The
  controller does not support the given upgrade type.";
* a level below 0: "A feature version cannot be less than 0.";
* the level must be inside the range this controller supports ("Local controller N does not support this
  feature." / "... only supports versions 0-1") and the range every registered broker supports ("Broker N ...");
* a lower level than the finalized one needs a downgrade type; a higher one must be an UPGRADE;
* ``metadata.version``: a known level (7 = 3.3-IV3 .. 30 = 4.3-IV0), and a downgrade only when no version between
  the two changed the metadata format ("Refusing to perform the requested downgrade because it might delete
  metadata information."; with UNSAFE_DOWNGRADE: "Unsafe metadata downgrade is not supported in this version.");
* any other feature at level >= 1 needs ``metadata.version`` >= 4 and its dependencies (e.g.
  ``eligible.leader.replicas.version=1`` needs ``metadata.version`` >= 23), checked against the levels the whole
  request leaves in place.

The first failing update fails the whole request (no record is written), as Kafka 4.x does. Messages are Kafka's:
"Invalid update version L for feature F. <reason>" and "Invalid metadata.version L. <reason>".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.metadata_records import ConfigRecord, FeatureLevelRecord

__all__ = [
    "FEATURE_LEVELS",
    "METADATA_VERSIONS",
    "SAFE_DOWNGRADE",
    "UNSAFE_DOWNGRADE",
    "UPGRADE",
    "FeatureLevel",
    "default_levels",
    "elr_safety_records",
    "metadata_version_level",
    "metadata_version_name",
    "plan_update_features",
]

METADATA_VERSION = "metadata.version"
ELR_VERSION = "eligible.leader.replicas.version"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
_BROKER_RESOURCE = 4

UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3
UPGRADE_TYPE_NAMES = {UPGRADE: "UPGRADE", SAFE_DOWNGRADE: "SAFE_DOWNGRADE", UNSAFE_DOWNGRADE: "UNSAFE_DOWNGRADE"}

#: ``metadata.version`` levels Kafka 4.3.1 can run -> (release, whether the level changed the metadata format);
#: from Kafka's ``MetadataVersion`` (IBP_3_3_IV3 = 7, the minimum, to IBP_4_3_IV0 = 30, the latest production).
METADATA_VERSIONS: dict[int, tuple[str, bool]] = {
    7: ("3.3-IV3", True), 8: ("3.4-IV0", True), 9: ("3.5-IV0", False), 10: ("3.5-IV1", False),
    11: ("3.5-IV2", True), 12: ("3.6-IV0", False), 13: ("3.6-IV1", True), 14: ("3.6-IV2", True),
    15: ("3.7-IV0", True), 16: ("3.7-IV1", False), 17: ("3.7-IV2", True), 18: ("3.7-IV3", False),
    19: ("3.7-IV4", False), 20: ("3.8-IV0", False), 21: ("3.9-IV0", False), 22: ("4.0-IV0", False),
    23: ("4.0-IV1", True), 24: ("4.0-IV2", False), 25: ("4.0-IV3", False), 26: ("4.1-IV0", False),
    27: ("4.1-IV1", False), 28: ("4.2-IV0", False), 29: ("4.2-IV1", False), 30: ("4.3-IV0", True),
}

#: ``FeatureLevelRecord`` exists from metadata.version 4 (3.3-IV0): a feature level >= 1 needs at least that.
_FEATURE_RECORDS_FROM = 4


@dataclass(frozen=True)
class FeatureLevel:
    """One level of a feature: the ``metadata.version`` from which it is the default for a new cluster or a
    ``--release-version`` upgrade, and the feature levels it needs (Kafka's ``FeatureVersion``)."""

    level: int
    bootstrap_metadata_version: int
    dependencies: Mapping[str, int]


#: The features of Kafka 4.3.1 besides ``metadata.version`` and their levels (``server-common``'s ``*Version``
#: enums); kbroker supports the subset in ``kbroker.controller.quorum_controller.SUPPORTED_FEATURES``.
FEATURE_LEVELS: dict[str, tuple[FeatureLevel, ...]] = {
    "kraft.version": (FeatureLevel(0, 1, {}), FeatureLevel(1, 21, {})),
    "transaction.version": (FeatureLevel(0, 1, {}), FeatureLevel(1, 24, {}), FeatureLevel(2, 24, {})),
    "group.version": (FeatureLevel(0, 1, {}), FeatureLevel(1, 22, {})),
    "eligible.leader.replicas.version": (FeatureLevel(0, 7, {}), FeatureLevel(1, 26, {METADATA_VERSION: 23})),
    "share.version": (FeatureLevel(0, 7, {}), FeatureLevel(1, 28, {METADATA_VERSION: 27})),
    "streams.version": (FeatureLevel(0, 7, {}), FeatureLevel(1, 29, {})),
}


def metadata_version_name(level: int) -> str:
    """``30`` -> ``"4.3-IV0"`` (Kafka's ``MetadataVersion.version()``); an unknown level -> ``"UNKNOWN 31"``."""
    known = METADATA_VERSIONS.get(level)
    return known[0] if known else f"UNKNOWN {level}"


def metadata_version_level(release: str) -> int | None:
    """A release version (``4.3``, ``4.3-IV0``, ``3.3``) -> its ``metadata.version`` level (the release's last
    IV when none is given, as Kafka's ``MetadataVersion.fromVersionString``), or None."""
    release = release.strip()
    found = None
    for level, (name, _) in sorted(METADATA_VERSIONS.items()):
        if name == release or name.split("-")[0] == release:
            found = level
    return found


def default_levels(metadata_version: int) -> dict[str, int]:
    """The level of every feature of :data:`FEATURE_LEVELS` at ``metadata_version`` (Kafka's
    ``Feature.defaultLevel``: the highest level whose bootstrap metadata version is not above it)."""
    out: dict[str, int] = {}
    for name, levels in FEATURE_LEVELS.items():
        out[name] = max((fl.level for fl in levels if fl.bootstrap_metadata_version <= metadata_version), default=0)
    return out


def _metadata_changed(a: int, b: int) -> bool:
    """Kafka's ``MetadataVersion.checkIfMetadataChanged``: a level in ``(low, high]`` changed the metadata."""
    low, high = min(a, b), max(a, b)
    return any(METADATA_VERSIONS.get(v, ("", True))[1] for v in range(low + 1, high + 1))


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _reason_not_supported(level: int, what: str, supported: tuple[int, int] | None) -> str | None:
    lo, hi = supported if supported is not None else (0, 0)
    if lo <= level <= hi:
        return None
    if hi == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {_range_text(lo, hi)}"


@dataclass(frozen=True)
class FeatureUpdateError:
    """Why an UpdateFeatures request fails: its (Kafka) error code and message."""

    code: int
    message: str


def plan_update_features(image: Any, node_id: int, local_supported: Mapping[str, tuple[int, int]],
                         updates: Sequence[tuple[str, int, int]]
                         ) -> tuple[list[FeatureLevelRecord], FeatureUpdateError | None]:
    """UpdateFeatures on ``image`` (a :class:`~kbroker.controller.image.MetadataImage`): ``updates`` are
    ``(feature, level, upgrade type)``, a later entry for the same feature replacing an earlier one. Returns the
    records to commit (in request order) and None, or ``([], error)`` for the first update that fails (rules
    in the module docstring). ``local_supported`` is this controller's range per feature."""
    wanted: dict[str, tuple[int, int]] = {}
    for name, level, upgrade_type in updates:
        wanted[name] = (level, upgrade_type)
    proposed = dict(image.features)
    proposed.update({name: level for name, (level, _) in wanted.items()})
    records: list[FeatureLevelRecord] = []
    for name, (level, upgrade_type) in wanted.items():
        error = _check_update(image, node_id, local_supported, name, level, upgrade_type, proposed)
        if error is not None:
            return [], error
        records.append(FeatureLevelRecord(name=name, feature_level=level))
    return records, None


def _check_update(image: Any, node_id: int, local_supported: Mapping[str, tuple[int, int]], name: str, level: int,
                  upgrade_type: int, proposed: Mapping[str, int]) -> FeatureUpdateError | None:
    def invalid(reason: str) -> FeatureUpdateError:
        return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION,
                                  f"Invalid update version {level} for feature {name}. {reason}")

    if upgrade_type not in UPGRADE_TYPE_NAMES:
        return invalid("The controller does not support the given upgrade type.")
    current = image.features.get(name, 0)
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    reason = _reason_not_supported(level, f"Local controller {node_id}", local_supported.get(name))
    for broker_id, reg in sorted(image.brokers.items()):
        if reason is not None:
            break
        reason = _reason_not_supported(level, f"Broker {broker_id}", reg.supported_features.get(name))
    if reason is not None:
        return invalid(reason)
    if level < current and upgrade_type == UPGRADE:
        return invalid("Can't downgrade the version of this feature without setting the upgrade type to either "
                       "safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    if name == METADATA_VERSION:
        return _check_metadata_version(current, level, upgrade_type)
    if level >= 1:
        deps = {METADATA_VERSION: _FEATURE_RECORDS_FROM}
        deps.update(next((fl.dependencies for fl in FEATURE_LEVELS.get(name, ()) if fl.level == level), {}))
        for dep, needed in deps.items():
            have = proposed.get(dep)
            if have is None or have < needed:
                if dep == METADATA_VERSION and needed == _FEATURE_RECORDS_FROM:
                    return invalid(f"{name} could not be set to {level} because it depends on metadata.version=4 "
                                   f"(3.3-IV0)")
                return invalid(f"{name} could not be set to {level} because it depends on {dep} level {needed}")
    return None


def _check_metadata_version(current: int, level: int, upgrade_type: int) -> FeatureUpdateError | None:
    def invalid(reason: str) -> FeatureUpdateError:
        return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION, f"Invalid metadata.version {level}. {reason}")

    if level not in METADATA_VERSIONS:
        return invalid("Unknown metadata.version.")
    if level < current and _metadata_changed(current, level):
        # Kafka 4.3 names both levels here: "Unsupported metadata.version downgrade from 30 to 29. <why>"
        why = ("Unsafe metadata downgrade is not supported in this version." if upgrade_type == UNSAFE_DOWNGRADE
               else "Refusing to perform the requested downgrade because it might delete metadata information.")
        return FeatureUpdateError(ErrorCode.INVALID_UPDATE_VERSION,
                                  f"Unsupported metadata.version downgrade from {current} to {level}. {why}")
    return None


def elr_safety_records(image: Any, static_min_insync_replicas: int) -> list[ConfigRecord]:
    """Kafka's ``ConfigurationControlManager.maybeGenerateElrSafetyRecords`` (KIP-966): the ConfigRecords that make
    it safe to turn eligible leader replicas on. A cluster-level ``min.insync.replicas`` (BROKER resource ``""``)
    with the static value (``server.properties``, default 1) when the cluster has none, and the removal of every
    broker-level ``min.insync.replicas``, so that every node and the controller agree on one value.

    Kafka writes them with the bootstrap records of a new cluster whose bootstrap features enable ELR
    (``eligible.leader.replicas.version`` >= 1, the default from 4.1-IV0 on, so every new 4.1+ cluster has the
    cluster-level record: DescribeConfigs then reports ``min.insync.replicas`` with source
    DYNAMIC_DEFAULT_BROKER_CONFIG) and ahead of the FeatureLevelRecord of an UpdateFeatures that enables ELR."""
    records: list[ConfigRecord] = []
    if MIN_INSYNC_REPLICAS not in image.configs.get((_BROKER_RESOURCE, ""), {}):
        records.append(ConfigRecord(resource_type=_BROKER_RESOURCE, resource_name="", name=MIN_INSYNC_REPLICAS,
                                    value=str(static_min_insync_replicas)))
    for (rtype, name), configs in sorted(image.configs.items()):
        if rtype == _BROKER_RESOURCE and name != "" and MIN_INSYNC_REPLICAS in configs:
            records.append(ConfigRecord(resource_type=_BROKER_RESOURCE, resource_name=name, name=MIN_INSYNC_REPLICAS,
                                        value=None))
    return records
