"""Shared pieces of the Spark tests (compat_tests/test_spark_*.py).

* ``SparkCalls``: runs compat_tests/java/SparkCallsDriver.java (compiled into .cache/spark-calls-classes/)
  on kafka-clients 3.9.2 (the pinned Spark 4.2.0 connector's) from .cache/jars-3.9/
  (``scripts/fetch_jars.sh clients39``).
* ``connector_jars()``: Spark's Kafka connector for the installed pyspark, from .cache/spark-<version>/
  (``scripts/fetch_jars.sh spark``, run here when the directory is missing), or the jars listed in
  ``KBROKER_SPARK_JARS`` when set (an override, see examples/clickstream/session.py). The version is the
  pyspark pin of pyproject.toml, or ``KBROKER_SPARK_VERSION`` for a run on another release
  (bench/spark_versions.sh, which installs that pyspark in a venv of its own).
* ``spark_session()``: one local SparkSession per test process, bound to loopback, with those jars.
* ``require_pyspark()``: pyspark, or skip with the reason (never a skip in CI: ``./dev.sh test`` installs it,
  so a missing pyspark fails there).
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO_ROOT / "examples" / "clickstream"
DRIVER_SOURCE = REPO_ROOT / "compat_tests" / "java" / "SparkCallsDriver.java"
CLASSES_DIR = Path(os.environ.get("KBROKER_SPARK_CALLS_CLASSES", REPO_ROOT / ".cache" / "spark-calls-classes"))
CLIENT_JARS_DIR = Path(os.environ.get("KBROKER_SPARK_CLIENT_JARS_DIR", REPO_ROOT / ".cache" / "jars-3.9"))
CLIENT_JARS = ("kafka-clients-3.9.2.jar", ".resolved")  # scripts/fetch_jars.sh clients39 (java/pom.xml)
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch_jars.sh"

JARS_ENV = "KBROKER_SPARK_JARS"
VERSION_ENV = "KBROKER_SPARK_VERSION"
CONNECTOR_JAR = "spark-sql-kafka-0-10_2.13-{version}.jar"

if str(EXAMPLE_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_DIR))  # the example's modules: transforms, session, generator, ...


# ============================================================================================ Java driver


def _missing_client_jars() -> list[str]:
    return [j for j in CLIENT_JARS if not (CLIENT_JARS_DIR / j).is_file()]


def ensure_client_jars() -> None:
    """Run scripts/fetch_jars.sh clients39 when a jar is missing; a failure is an error, not a skip."""
    if not _missing_client_jars():
        return
    r = subprocess.run(["bash", str(FETCH_SCRIPT), "clients39"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or _missing_client_jars():
        pytest.fail(f"scripts/fetch_jars.sh clients39 could not provide {_missing_client_jars()} in {CLIENT_JARS_DIR} "
                    f"(exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}", pytrace=False)


def compile_driver(javac: str) -> None:
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = CLASSES_DIR / "SparkCallsDriver.class"
    with open(CLASSES_DIR / ".compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists() and target.stat().st_mtime >= DRIVER_SOURCE.stat().st_mtime:
            return
        r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                            str(CLIENT_JARS_DIR / "*"), str(DRIVER_SOURCE)], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            pytest.fail(f"javac SparkCallsDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)


class SparkCallsError(AssertionError):
    pass


class SparkCalls:
    """Runs SparkCallsDriver commands; each returns its JSON events."""

    def __init__(self, java: str) -> None:
        self.java = java
        self.classpath = os.pathsep.join([str(CLASSES_DIR), str(CLIENT_JARS_DIR / "*")])

    def command(self, args: list[str]) -> list[str]:
        return [self.java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.classpath,
                "SparkCallsDriver", *args]

    def run(self, args: list[str], *, timeout: float = 120.0, check: bool = True) -> list[dict[str, Any]]:
        r = subprocess.run(self.command(args), capture_output=True, text=True, timeout=timeout)
        events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        self.last_returncode = r.returncode
        self.last_stderr = r.stderr
        if check and r.returncode != 0:
            errs = [e for e in events if e.get("event") in ("error", "data_loss") or e.get("error")]
            raise SparkCallsError(f"SparkCallsDriver {args[0]} exited {r.returncode}: {errs[:3]}\n"
                                  f"stderr: {r.stderr[-3000:]}")
        return events


def make_spark_calls() -> SparkCalls:
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless (CI has it)")
    ensure_client_jars()
    compile_driver(javac)
    return SparkCalls(java)


def of(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == name]


def b64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def spark_record(tag: str, i: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of SparkCallsDriver's record i (must match its key()/value()/headers())."""
    key = None if i % 5 == 4 else f"{tag}-k{i}".encode()
    value = (f'{{"tag":"{tag}","i":{i}}}' + " " * (i % 13)).encode()
    return key, value, [("i", str(i).encode()), ("src", b"spark")]


# ============================================================================================ Spark


def require_pyspark() -> Any:
    """pyspark, or skip with the reason outside CI (in CI, where ./dev.sh installs it, fail instead)."""
    try:
        import pyspark
    except ImportError as exc:
        msg = f"pyspark is not installed ({exc}): pip install -e '.[spark]' (./dev.sh test installs it)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    if not shutil.which("java"):
        pytest.skip("no Java on PATH: pyspark needs a JDK 17+ (openjdk-17-jdk-headless)")
    return pyspark


def pinned_spark_version() -> str:
    """The pyspark version pyproject.toml's spark extra pins (``pyspark==<v>``); scripts/fetch_jars.sh
    resolves the connector of this version."""
    text = (REPO_ROOT / "pyproject.toml").read_text()
    m = re.search(r'"pyspark==([0-9][0-9A-Za-z.+-]*)"', text)
    if not m:
        pytest.fail("pyproject.toml has no pyspark==<version> pin", pytrace=False)
    return m.group(1)


def spark_version_under_test() -> str:
    """The Spark release the tests run: ``KBROKER_SPARK_VERSION`` when set (a run on another release,
    bench/spark_versions.sh; scripts/fetch_jars.sh reads the same variable), else the pin."""
    return os.environ.get(VERSION_ENV) or pinned_spark_version()


def connector_jars_dir(version: str) -> Path:
    return REPO_ROOT / ".cache" / f"spark-{version}"


def _cached_connector_jars() -> list[str]:
    """.cache/spark-<pyspark version>/*.jar, running scripts/fetch_jars.sh spark when it is not there yet.
    The installed pyspark must be the pinned one (or ``KBROKER_SPARK_VERSION``'s): the cache is resolved
    for that version."""
    installed, pinned = require_pyspark().__version__, spark_version_under_test()
    if installed != pinned:
        source = VERSION_ENV if os.environ.get(VERSION_ENV) else "pyproject.toml's pin"
        pytest.fail(f"pyspark {installed} is installed but {source} is {pinned}: "
                    "pip install -e '.[spark]' (./dev.sh test does)", pytrace=False)
    directory = connector_jars_dir(pinned)
    if not (directory / ".resolved").is_file():
        r = subprocess.run(["bash", str(FETCH_SCRIPT), "spark"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not (directory / ".resolved").is_file():
            pytest.fail(f"scripts/fetch_jars.sh spark could not provide {directory} (exit {r.returncode}):\n"
                        f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}", pytrace=False)
    return sorted(str(p) for p in directory.glob("*.jar"))


def connector_jars() -> list[str]:
    """The Kafka connector's jars: ``KBROKER_SPARK_JARS`` when set, else the cached ones of the installed
    pyspark. Fails when a listed path does not exist or the connector jar is not the installed Spark's."""
    import session as example_session  # examples/clickstream/session.py

    if os.environ.get(JARS_ENV):
        try:
            jars = example_session.local_jars(None)
        except FileNotFoundError as exc:
            pytest.fail(f"{JARS_ENV}: {exc}", pytrace=False)
    else:
        jars = _cached_connector_jars()
    want = CONNECTOR_JAR.format(version=require_pyspark().__version__)
    if not any(Path(j).name == want for j in jars):
        pytest.fail(f"no {want} among the connector jars {jars}", pytrace=False)
    return jars


_SESSION: Any = None


def spark_session() -> Any:
    """The test process's SparkSession (local[2], loopback, UTC, 2 shuffle partitions, no UI), with the
    Kafka connector's jars (``connector_jars()``). Created once; stopped at exit."""
    global _SESSION
    require_pyspark()
    if _SESSION is None:
        import session as example_session

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        jars = connector_jars()
        _SESSION = example_session.build_session(
            "kbroker-tests", jars=jars, packages="", master="local[2]", shuffle_partitions=2,
            extra={"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
                   "spark.driver.memory": "1g"})
        _SESSION.sparkContext.setLogLevel("ERROR")
        atexit.register(_stop_session)
    return _SESSION


def _stop_session() -> None:
    global _SESSION
    if _SESSION is not None:
        try:
            _SESSION.stop()
        finally:
            _SESSION = None
