"""kbroker-storage format --feature transaction.version=N (kafka-storage.sh's flag): a new cluster finalizes
transaction.version 2 by default, as Kafka 4.3 formats its latest release, or the level the flag chose; a
cluster whose metadata log was written before keeps its levels."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbroker.cli import storage
from kbroker.config import BrokerConfig
from kbroker.controller.bootstrap import BOOTSTRAP_FILE
from kbroker.controller.quorum_controller import QuorumController
from tests.cli.test_storage_add_scram import CLUSTER_ID, write_config


def first_start_features(cfg: Path) -> dict[str, int]:
    qc = QuorumController(BrokerConfig.from_file(cfg))
    qc.startup()
    try:
        return dict(qc.image.features)
    finally:
        qc.shutdown()


@pytest.mark.parametrize("level", [None, 0, 1, 2])
def test_format_chooses_the_transaction_version(tmp_path, run, level) -> None:
    cfg = write_config(tmp_path)
    extra = [] if level is None else ["--feature", f"transaction.version={level}"]
    status, out, err = run(storage.main, "format", "-t", CLUSTER_ID, "-c", cfg, *extra)
    assert status == 0, err
    assert (tmp_path / "meta" / BOOTSTRAP_FILE).exists() == (level is not None)
    features = first_start_features(cfg)
    expected = 2 if level is None else level
    assert features.get("transaction.version", 0) == expected
    assert features["metadata.version"] == 30 and features["group.version"] == 1
    # a restart reads the levels from the metadata log, not from the bootstrap file
    assert first_start_features(cfg) == features


@pytest.mark.parametrize("feature", ["transaction.version=3", "transaction.version=-1", "transaction.version=x",
                                     "group.version=2", "nope=1"])
def test_unsupported_levels_are_refused(tmp_path, run, feature) -> None:
    status, out, err = run(storage.main, "format", "-t", CLUSTER_ID, "-c", write_config(tmp_path),
                           "--feature", feature)
    assert status != 0 and "unsupported feature level" in out + err
    assert not (tmp_path / "meta" / "meta.properties").exists()
