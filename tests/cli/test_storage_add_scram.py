"""kbroker-storage format --add-scram (kafka-storage.sh's flag, KIP-554): the credentials go into the bootstrap
metadata, which a controller formatted with it commits at its first start; Kafka's messages for each mistake."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import scramp

from kbroker.cli import storage
from kbroker.config import BrokerConfig
from kbroker.controller.bootstrap import BOOTSTRAP_FILE, read_bootstrap_file
from kbroker.controller.quorum_controller import QuorumController
from kbroker.controller.scram_control import salted_password

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def write_config(tmp_path: Path) -> Path:
    props = {"process.roles": "broker,controller", "node.id": "3", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(tmp_path / "d1"), "metadata.log.dir": str(tmp_path / "meta")}
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_add_scram_credentials_reach_the_image_at_the_first_start(tmp_path, run):
    cfg = write_config(tmp_path)
    salt = b"0123456789abcdef"
    salted = salted_password(2, "bob-secret", salt, 8192)
    status, out, err = run(storage.main, "format", "-t", CLUSTER_ID, "-c", cfg,
                           "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]",
                           "-S", 'SCRAM-SHA-512=[name="bob",iterations=8192,'
                                 f'salt="{base64.b64encode(salt).decode()}",'
                                 f'saltedpassword={base64.b64encode(salted).decode()}]')
    assert status == 0, err
    assert (tmp_path / "meta" / BOOTSTRAP_FILE).is_file() and not (tmp_path / "d1" / BOOTSTRAP_FILE).exists()
    assert [type(r).__name__ for r in read_bootstrap_file(tmp_path / "meta")][-2:] == [
        "UserScramCredentialRecord", "UserScramCredentialRecord"]

    qc = QuorumController(BrokerConfig.from_file(cfg))
    qc.startup()
    try:
        creds = qc.image.scram_credentials
        assert set(creds) == {("alice", 1), ("bob", 2)}
        alice = creds[("alice", 1)]
        assert alice.iterations == 4096 and len(alice.salt) == 32
        assert scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
            "alice-secret", 4096, alice.salt) == (alice.salt, alice.stored_key, alice.server_key, 4096)
        bob = creds[("bob", 2)]
        assert scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
            "bob-secret", 8192, salt) == (bob.salt, bob.stored_key, bob.server_key, 8192)
    finally:
        qc.shutdown()


def test_format_without_add_scram_writes_no_bootstrap_file(tmp_path, run):
    assert run(storage.main, "format", "-t", CLUSTER_ID, "-c", write_config(tmp_path))[0] == 0
    assert not (tmp_path / "meta" / BOOTSTRAP_FILE).exists()


@pytest.mark.parametrize("argument,message", [
    ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument 'SCRAM-SHA-256'"),
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-256=name=a,password=b]", "Expected configuration string to start with ["),
    ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with ]"),
    ("SCRAM-SHA-256=[name=a,password]", "No equals sign found in SCRAM component: password"),
    ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,saltedpassword=AAAA]", "You must supply 'salt' with 'saltedpassword' to add-scram"),
    ("SCRAM-SHA-256=[name=a,password=b,salt=!!]", "Failed to decode given salt: !!"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
    ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
    ("SCRAM-SHA-256=[name=a,password=b,iterations=4095]",
     "The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-256"),
    ("SCRAM-SHA-512=[name=a,password=b,iterations=16385]",
     "The 'iterations' value must be <= 16384 for add-scram using SCRAM-SHA-512"),
])
def test_add_scram_mistakes_are_refused_before_anything_is_written(tmp_path, run, argument, message):
    cfg = write_config(tmp_path)
    status, out, err = run(storage.main, "format", "-t", CLUSTER_ID, "-c", cfg, "--add-scram", argument)
    assert status == 1 and message in err, err
    assert not (tmp_path / "meta").exists() and not (tmp_path / "d1").exists()
