"""What a new user gets from the package itself: ``--version`` on ``kbroker`` and every tool (one version, the
package metadata), ``python -m kbroker``, an Apache-2.0 LICENSE, and a wheel that runs without the clone."""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
VERSION = importlib.metadata.version("kbroker")


def run(args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update(kw.pop("env", {}))
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, **kw)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_command_has_version(script):
    module, func = SCRIPTS[script].split(":")
    res = run([sys.executable, "-c", f"import sys; sys.argv = [{script!r}, '--version']; "
                                     f"from {module} import {func}; sys.exit({func}())"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"kbroker {VERSION}"


def test_python_dash_m_kbroker():
    res = run([sys.executable, "-m", "kbroker", "--version"])
    assert res.returncode == 0 and res.stdout.strip() == f"kbroker {VERSION}"


def test_license_is_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()


def test_wheel_runs_without_the_clone(tmp_path):
    wheels = tmp_path / "wheels"
    res = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w", str(wheels)])
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = wheels.glob("kbroker-*.whl")
    target = tmp_path / "site"
    res = run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)])
    assert res.returncode == 0, res.stderr[-2000:]
    assert (target / "kbroker" / "protocol" / "messages" / "produce_request.py").exists()
    env = {"PYTHONPATH": str(target)}
    where = run([sys.executable, "-c", "import kbroker; print(kbroker.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(target)), where.stdout
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    p = port.getsockname()[1]
    port.close()
    proc = subprocess.Popen([sys.executable, "-m", "kbroker", "--override", f"log.dirs={tmp_path / 'data'}",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{p}",
                             "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{p}"],
                            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(target)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        out = ""
        while time.time() < deadline and "kbroker started" not in out and proc.poll() is None:
            out += proc.stdout.readline()
        assert "kbroker started" in out, out
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{p}"}).list_topics(timeout=10)
        assert list(md.brokers) == [1]
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
