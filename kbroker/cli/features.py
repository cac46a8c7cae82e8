"""``kbroker-features``: describe and change the cluster's finalized feature levels, like ``kafka-features.sh``.

    kbroker-features --bootstrap-server localhost:9092 describe
    kbroker-features --bootstrap-server localhost:9092 upgrade --feature group.version=1 [--dry-run]
    kbroker-features --bootstrap-server localhost:9092 upgrade --release-version 4.3 [--dry-run]
    kbroker-features --bootstrap-server localhost:9092 upgrade --metadata 4.3-IV0
    kbroker-features --bootstrap-server localhost:9092 downgrade --feature group.version=0 [--unsafe] [--dry-run]
    kbroker-features --bootstrap-server localhost:9092 disable --feature group.version [--unsafe] [--dry-run]
    kbroker-features version-mapping [--release-version 4.1]
    kbroker-features feature-dependencies --feature eligible.leader.replicas.version=1

``describe`` reads ApiVersions (v3+) as Kafka's ``Admin.describeFeatures`` does and prints Kafka's lines
(``Feature: group.version	SupportedMinVersion: 0	SupportedMaxVersion: 1	FinalizedVersionLevel: 1	Epoch: 42``;
``metadata.version`` levels as release names). ``upgrade`` / ``downgrade`` / ``disable`` send one UpdateFeatures
(API 57; the node forwards it to the active controller), with ``--dry-run`` as ``validate_only``, and print one
line per feature (``group.version was upgraded to 1.`` / ``Could not upgrade group.version to 2. <reason>``);
any failure makes the exit status 1 ("N out of M operation(s) failed."). ``--release-version`` sets
``metadata.version`` and every feature to its default at that release (``version-mapping`` prints them).
"""

from __future__ import annotations

import time
from typing import Any

from kbroker.cli._common import CliError, ToolParser, add_command_config, add_version, load_properties, run_tool, \
    wire_ssl_context

PROG = "kbroker-features"
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def build_parser() -> ToolParser:
    p = ToolParser(prog=PROG, description="This tool manages feature flags in Kafka.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="A comma-separated list of host:port pairs to use for establishing the connection to the "
                        "Kafka cluster.")
    p.add_argument("--bootstrap-controller", metavar="HOST:PORT",
                   help="A comma-separated list of host:port pairs to use for establishing the connection to the "
                        "KRaft quorum (kbroker's controllers answer on their listeners the same way).")
    add_command_config(p)
    add_version(p)
    sub = p.add_subparsers(dest="command", parser_class=ToolParser,
                           metavar="{describe,upgrade,downgrade,disable,version-mapping,feature-dependencies}")
    sub.add_parser("describe", help="Describes the current active feature flags.")
    for name, verb in (("upgrade", "upgrade"), ("downgrade", "downgrade")):
        s = sub.add_parser(name, help=f"{verb.capitalize()} one or more feature flags.")
        s.add_argument("--metadata", help=f"DEPRECATED -- The level to which we should {verb} the metadata. For "
                                          "example, 3.3-IV3.")
        s.add_argument("--release-version", help=f"The release version to {verb} all features to. For example, "
                                                 "3.9-IV0 will set metadata.version=21 and kraft.version=1.")
        s.add_argument("--feature", action="append", help=f"A feature {verb} we should perform, in feature=level "
                                                          "format. For example: `metadata.version=5`.")
        if name == "downgrade":
            s.add_argument("--unsafe", action="store_true",
                           help="Perform this downgrade even if it may irreversibly destroy metadata.")
        s.add_argument("--dry-run", action="store_true", help=f"Validate this {verb}, but do not perform it.")
    d = sub.add_parser("disable", help="Disable one or more feature flags. This is the same as downgrading the "
                                       "version to zero.")
    d.add_argument("--feature", action="append", help="A feature flag to disable.")
    d.add_argument("--unsafe", action="store_true",
                   help="Disable this feature flag even if it may irreversibly destroy metadata.")
    d.add_argument("--dry-run", action="store_true", help="Perform a dry-run of this disable operation.")
    v = sub.add_parser("version-mapping", help="Look up the corresponding features for a given metadata version.")
    v.add_argument("--release-version", help="The release version to use for the corresponding feature mapping "
                                             "(default: the latest, 4.3-IV0).")
    f = sub.add_parser("feature-dependencies", help="Look up dependencies for a given feature version.")
    f.add_argument("--feature", action="append", required=True,
                   help="The feature and version to look up dependencies for, in feature=version format.")
    return p


def level_text(feature: str, level: int) -> str:
    """Kafka's ``levelToString``: ``metadata.version`` levels as release names."""
    from kbroker.controller.feature_control import metadata_version_name

    return metadata_version_name(level) if feature == "metadata.version" else str(level)


def parse_name_and_level(text: str) -> tuple[str, int]:
    name, eq, level = text.partition("=")
    if not eq:
        raise CliError(f"Can't parse feature=level string {text}: equals sign not found.")
    try:
        value = int(level.strip())
        if not -32768 <= value <= 32767:
            raise ValueError
    except ValueError:
        raise CliError(f"Can't parse feature=level string {text}: unable to parse {level.strip()} as a short.") \
            from None
    return name.strip(), value


def _release_level(text: str) -> int:
    from kbroker.controller.feature_control import METADATA_VERSIONS, metadata_version_level

    level = metadata_version_level(text)
    if level is None:
        raise CliError(f"Unknown metadata.version {text}. Supported metadata.version are "
                       + ", ".join(name for _, (name, _) in sorted(METADATA_VERSIONS.items())))
    return level


def describe_features(bootstrap: str, tls: Any = None) -> tuple[dict[str, tuple[int, int]], dict[str, int], int]:
    """(supported ranges, finalized levels, finalized epoch) from one node's ApiVersions (v3+)."""
    from kbroker.cli._wire import WireClient, error_name
    from kbroker.protocol.messages import ApiVersionsRequest

    with WireClient(bootstrap, ssl_context=tls) as wire:
        conn = wire.any_broker()
        version = min(conn.versions.get(ApiVersionsRequest.API_KEY, (0, 3))[1], 4)
        if version < 3:
            raise CliError(f"the broker at {conn.address} does not report features (ApiVersions v{version})")
        resp = conn.send(ApiVersionsRequest(client_software_name="kbroker-features", client_software_version="1"),
                         version)
    if resp.error_code:
        raise CliError(f"ApiVersions failed: {error_name(resp.error_code)}")
    supported = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    return supported, finalized, resp.finalized_features_epoch


def update_features(bootstrap: str, updates: dict[str, tuple[int, int]], validate_only: bool,
                    tls: Any = None) -> tuple[int, str | None]:
    """UpdateFeatures through the node at ``bootstrap`` (retried while the answer is NOT_CONTROLLER) ->
    (error code, message)."""
    from kbroker.cli._common import timeout_from_env
    from kbroker.cli._wire import WireClient
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import UpdateFeaturesRequest as Req

    req = Req(timeout_ms=30_000, validate_only=validate_only,
              feature_updates=[Req.FeatureUpdateKey(feature=n, max_version_level=lvl, upgrade_type=t,
                                                    allow_downgrade=t != UPGRADE)
                               for n, (lvl, t) in updates.items()])
    deadline = time.monotonic() + timeout_from_env()
    while True:
        with WireClient(bootstrap, ssl_context=tls) as wire:
            conn = wire.any_broker()
            version = conn.version_for(Req)
            if version == 0 and validate_only:
                raise CliError(f"the broker at {conn.address} does not support --dry-run (UpdateFeatures v0)")
            resp = conn.send(req, version)
        if resp.error_code != ErrorCode.NOT_CONTROLLER or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if resp.error_code:
        return resp.error_code, resp.error_message
    for r in resp.results:  # v0-1
        if r.error_code:
            return r.error_code, r.error_message
    return ErrorCode.NONE, None


def _updates_from_args(args: Any, upgrade_type: int) -> dict[str, tuple[int, int]]:
    from kbroker.controller.feature_control import default_levels

    updates: dict[str, tuple[int, int]] = {}
    if args.command == "disable":
        for name in args.feature or []:
            if name in updates:
                raise CliError(f"Feature {name} was specified more than once.")
            updates[name] = (0, upgrade_type)
        return updates
    if args.release_version and (args.metadata or args.feature):
        raise CliError("Can not specify `release-version` with other feature flags.")
    if args.release_version:
        level = _release_level(args.release_version)
        updates["metadata.version"] = (level, upgrade_type)
        for name, feature_level in default_levels(level).items():
            if upgrade_type != UPGRADE or feature_level > 0:  # an upgrade never asks for level 0
                updates[name] = (feature_level, upgrade_type)
        return updates
    if args.metadata:
        print(" `metadata` flag is deprecated and may be removed in a future release.")
        updates["metadata.version"] = (_release_level(args.metadata), upgrade_type)
    for text in args.feature or []:
        name, level = parse_name_and_level(text)
        if name in updates:
            raise CliError(f"Feature {name} was specified more than once.")
        updates[name] = (level, upgrade_type)
    return updates


def run_update(args: Any, bootstrap: str, tls: Any) -> int:
    if args.command == "upgrade":
        upgrade_type = UPGRADE
    else:
        upgrade_type = UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    updates = _updates_from_args(args, upgrade_type)
    if getattr(args, "release_version", None):
        # kbroker finalizes only the features it supports: leave out the release's other features when the
        # cluster does not support a level above 0 (Kafka's tool sends them all; a Kafka cluster supports them all)
        supported, _, _ = describe_features(bootstrap, tls)
        updates = {n: u for n, u in updates.items() if supported.get(n, (0, 0))[1] > 0 or n == "metadata.version"}
    if not updates:
        raise CliError(f"You must specify at least one feature to {args.command}")
    code, message = update_features(bootstrap, updates, args.dry_run, tls)
    failures = 0
    for name in sorted(updates):
        level = updates[name][0]
        if code:
            from kbroker.cli._wire import error_text

            what = f"disable {name}" if args.command == "disable" else f"{args.command} {name} to {level}"
            print(f"{'Can not' if args.dry_run else 'Could not'} {what}. {error_text(code, message)}")
            failures += 1
        else:
            done = "disabled." if args.command == "disable" else f"{args.command}d to {level}."
            print(f"{name}{' can be ' if args.dry_run else ' was '}{done}")
    if failures:
        raise CliError(f"{failures} out of {len(updates)} operation(s) failed.")
    return 0


def version_mapping(release: str | None) -> None:
    from kbroker.controller.feature_control import METADATA_VERSIONS, default_levels, metadata_version_level

    release = release or METADATA_VERSIONS[max(METADATA_VERSIONS)][0]
    level = metadata_version_level(release)
    if level is None:
        raise CliError(f"Unknown release version '{release}'. Supported versions are: "
                       f"{METADATA_VERSIONS[min(METADATA_VERSIONS)][0]} to {METADATA_VERSIONS[max(METADATA_VERSIONS)][0]}")
    print(f"metadata.version={level} ({release})")
    for name, feature_level in default_levels(level).items():
        print(f"{name}={feature_level}")


def feature_dependencies(features: list[str]) -> None:
    from kbroker.controller.feature_control import FEATURE_LEVELS, METADATA_VERSIONS, metadata_version_name

    for text in features:
        name, level = parse_name_and_level(text)
        if name == "metadata.version":
            if level not in METADATA_VERSIONS:
                raise CliError(f"Unknown metadata.version {level}")
            print(f"{name}={level} ({metadata_version_name(level)}) has no dependencies.")
            continue
        if name not in FEATURE_LEVELS:
            raise CliError(f"Unknown feature: {name}")
        found = next((fl for fl in FEATURE_LEVELS[name] if fl.level == level), None)
        if found is None:
            raise CliError(f"No feature:{name} with feature level {level}")
        if not found.dependencies:
            print(f"{name}={level} has no dependencies.")
            continue
        print(f"{name}={level} requires:")
        for dep, dep_level in found.dependencies.items():
            suffix = f" ({metadata_version_name(dep_level)})" if dep == "metadata.version" else ""
            print(f"    {dep}={dep_level}{suffix}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is required: describe, upgrade, downgrade, disable, version-mapping or "
                     "feature-dependencies")
    bootstrap = args.bootstrap_server or args.bootstrap_controller
    if args.bootstrap_server and args.bootstrap_controller:
        parser.error("only one of --bootstrap-server or --bootstrap-controller must be specified")
    if not bootstrap and args.command not in ("version-mapping", "feature-dependencies"):
        parser.error("one of --bootstrap-server or --bootstrap-controller must be specified")

    def body() -> int:
        if args.command == "version-mapping":
            version_mapping(args.release_version)
            return 0
        if args.command == "feature-dependencies":
            feature_dependencies(args.feature)
            return 0
        tls = wire_ssl_context(load_properties(args.command_config), PROG)
        if args.command == "describe":
            supported, finalized, epoch = describe_features(bootstrap, tls)
            for name in sorted(supported):
                lo, hi = supported[name]
                print(f"Feature: {name}\tSupportedMinVersion: {level_text(name, lo)}\t"
                      f"SupportedMaxVersion: {level_text(name, hi)}\t"
                      f"FinalizedVersionLevel: {level_text(name, finalized.get(name, 0))}\t"
                      f"Epoch: {epoch if epoch >= 0 else '-'}")
            return 0
        return run_update(args, bootstrap, tls)

    return run_tool(PROG, body)


if __name__ == "__main__":
    raise SystemExit(main())
