"""kbroker-storage: format produces what kbroker's controller accepts at start; info reports the directories."""

from __future__ import annotations

from pathlib import Path

from kbroker.cli import storage
from kbroker.config import BrokerConfig
from kbroker.controller.quorum_controller import QuorumController
from kbroker.controller.uuids import uuid_from_str
from kbroker.storage.log_manager import read_meta_properties


def write_config(tmp_path: Path, **extra: str) -> Path:
    props = {"process.roles": "broker,controller", "node.id": "3", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": f"{tmp_path / 'd1'},{tmp_path / 'd2'}", "metadata.log.dir": str(tmp_path / "meta")}
    props.update(extra)
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_random_uuid(run):
    status, out, _ = run(storage.main, "random-uuid")
    assert status == 0
    assert len(uuid_from_str(out.strip())) == 16


def test_format_then_the_controller_starts_with_that_cluster_id(tmp_path, run):
    cfg = write_config(tmp_path)
    status, out, _ = run(storage.main, "random-uuid")
    cluster_id = out.strip()
    status, out, err = run(storage.main, "format", "-t", cluster_id, "-c", cfg, "--standalone")
    assert status == 0, err
    assert out.splitlines() == [
        f"Formatting data directory {tmp_path / 'd1'} with metadata.version 4.3-IV0.",
        f"Formatting data directory {tmp_path / 'd2'} with metadata.version 4.3-IV0.",
        f"Formatting metadata directory {tmp_path / 'meta'} with metadata.version 4.3-IV0.",
    ]
    dir_ids = set()
    for d in ("d1", "d2", "meta"):
        props = read_meta_properties(tmp_path / d)
        assert props is not None
        assert (props["version"], props["cluster.id"], props["node.id"]) == ("1", cluster_id, "3")
        dir_ids.add(props["directory.id"])
    assert len(dir_ids) == 3

    ctl = QuorumController(BrokerConfig.from_file(cfg))
    ctl.startup()
    try:
        assert ctl.cluster_id == cluster_id
        assert ctl.image.cluster_id == cluster_id
        from kbroker.controller.uuids import uuid_to_str
        assert {uuid_to_str(v) for v in ctl.directory_ids.values()} == dir_ids  # kept, not rewritten
    finally:
        ctl.shutdown()

    status, out, err = run(storage.main, "info", "-c", cfg)
    assert status == 0, out
    assert out.startswith("Found log directories:\n")
    assert f"Found metadata: {{cluster.id={cluster_id}, directory.id=" in out
    assert "node.id=3, version=1}" in out


def test_format_refuses_formatted_directories(tmp_path, run):
    cfg = write_config(tmp_path)
    cluster_id = "MkU3OEVBNTcwNTJENDM2Qg"
    assert run(storage.main, "format", "-t", cluster_id, "-c", cfg)[0] == 0
    status, out, err = run(storage.main, "format", "-t", cluster_id, "-c", cfg)
    assert status == 1
    assert f"Log directory {tmp_path / 'd1'} is already formatted. Use --ignore-formatted" in err
    status, out, err = run(storage.main, "format", "-t", cluster_id, "-c", cfg, "--ignore-formatted")
    assert status == 0 and out.strip() == "All of the log directories are already formatted."


def test_format_argument_errors(tmp_path, run):
    cfg = write_config(tmp_path)
    status, _, err = run(storage.main, "format", "-t", "not-a-uuid", "-c", cfg)
    assert status == 1 and "Cluster ID string not-a-uuid does not appear to be a valid UUID" in err
    status, _, err = run(storage.main, "format", "-c", cfg)
    assert status == 1 and "--cluster-id" in err
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", tmp_path / "missing")
    assert status == 1 and "cannot read" in err
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg, "-r", "3.7-IV4")
    assert status == 1 and "not supported" in err
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg,
                         "--initial-controllers", "1@h:9093:4znU-ou9Taa06bmEJxsjnw,2@h:9094:4znU-ou9Taa06bmEJxsjnQ")
    assert status == 1 and "only" in err
    status, _, err = run(storage.main)
    assert status == 1
    assert not (tmp_path / "d1").exists()


def test_info_reports_problems(tmp_path, run):
    cfg = write_config(tmp_path)
    status, out, _ = run(storage.main, "info", "-c", cfg)
    assert status == 1
    assert "Found problems:" in out and f"{tmp_path / 'd1'} does not exist" in out
    assert run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg)[0] == 0
    (tmp_path / "d2" / "meta.properties").write_text(
        "version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAQ\nnode.id=3\ndirectory.id=4znU-ou9Taa06bmEJxsjnw\n")
    status, out, _ = run(storage.main, "info", "-c", cfg)
    assert status == 1 and "but other directories featured" in out


def test_initial_controllers_must_match_the_static_voters(tmp_path, run):
    cfg = write_config(tmp_path, **{"controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"})
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg,
                         "--initial-controllers", "1@h:9093:4znU-ou9Taa06bmEJxsjnw,2@h:9094:4znU-ou9Taa06bmEJxsjnQ")
    assert status == 1 and "controller.quorum.voters names 1, 2, 3" in err
    status, out, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg,
                           "--initial-controllers", "1@a:9093:x,2@b:9095:y,3@c:9097:z")
    assert status == 0, err


def _bootstrap_voters(meta: Path):
    from kbroker.controller.snapshot import SnapshotStore, decode_snapshot, decode_snapshot_voters

    store = SnapshotStore(meta / "__cluster_metadata-0")
    assert store.ids() == [(0, 0)]
    data = store.read((0, 0))
    assert decode_snapshot(data) == []  # no metadata yet: the voters only
    return decode_snapshot_voters(data)


def test_format_standalone_writes_the_bootstrap_voters_of_a_dynamic_quorum(tmp_path, run):
    cfg = write_config(tmp_path, **{"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
                                    "controller.listener.names": "CONTROLLER",
                                    "controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    status, out, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg, "--standalone")
    assert status == 0, err
    assert "Bootstrap voters of the metadata quorum: 3@127.0.0.1:9093" in out
    vs = _bootstrap_voters(tmp_path / "meta")
    own = uuid_from_str(read_meta_properties(tmp_path / "meta")["directory.id"])
    assert [(v.node_id, v.directory_id, v.endpoints) for v in vs.voters] == [
        (3, own, (("CONTROLLER", "127.0.0.1", 9093),))]


def test_format_initial_controllers_gives_this_node_its_directory_id(tmp_path, run):
    cfg = write_config(tmp_path, **{"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
                                    "controller.listener.names": "CONTROLLER",
                                    "controller.quorum.bootstrap.servers": "127.0.0.1:9093,127.0.0.1:9094"})
    voters = "3@127.0.0.1:9093:4znU-ou9Taa06bmEJxsjnw,4@127.0.0.1:9094:MvDxzVmcRsaTz33bUuRU6A"
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg, "--initial-controllers",
                         voters)
    assert status == 0, err
    assert read_meta_properties(tmp_path / "meta")["directory.id"] == "4znU-ou9Taa06bmEJxsjnw"
    assert sorted(_bootstrap_voters(tmp_path / "meta").ids) == [3, 4]
    for bad, why in [("4@h:9094:MvDxzVmcRsaTz33bUuRU6A", "does not name this node"),
                     ("3@h:9093", "expected id@host:port:directory-id")]:
        d = tmp_path / bad.replace(":", "_").replace("@", "_")
        d.mkdir()
        cfg2 = write_config(d, **{"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
                                  "controller.listener.names": "CONTROLLER",
                                  "controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
        status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg2,
                             "--initial-controllers", bad)
        assert status == 1 and why in err, err
    status, _, err = run(storage.main, "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", cfg, "--standalone",
                         "--no-initial-controllers", "-g")
    assert status == 1 and "Only one of" in err
