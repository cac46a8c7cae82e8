"""Fixtures for the real-client compatibility suite.

The broker itself comes from the ``kbroker.testing.plugin`` pytest plugin (``kafka_broker``,
``bootstrap_servers``, ``kbroker_factory``; target chosen by ``KBROKER_TEST_TARGET``). This file adds the
clients: ``get_client(name)`` (skips with the reason when a client is not installed), the compiled Java
driver, and ``topic_factory`` for unique, pre-created topics.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from compat_tests.clients import (
    CLASSES_DIR,
    DRIVER_SOURCE,
    JARS_DIR,
    JAVA_CLIENT_PROFILE,
    REPO_ROOT,
    REQUIRED_JARS,
    Client,
    ClientUnavailable,
    JavaDriver,
    admin_client,
    create_topic,
    delete_topic,
    make_client,
)

FETCH_JARS = REPO_ROOT / "scripts" / "fetch_jars.sh"


def _missing_jars() -> list[str]:
    return [j for j in REQUIRED_JARS if not (JARS_DIR / j).is_file()]


def ensure_jars() -> None:
    """Run scripts/fetch_jars.sh when a jar is missing. A failure here is an error, not a skip: CI must
    have the Java client."""
    if not _missing_jars():
        return
    r = subprocess.run(["bash", str(FETCH_JARS), JAVA_CLIENT_PROFILE], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0 or _missing_jars():
        pytest.fail(f"scripts/fetch_jars.sh {JAVA_CLIENT_PROFILE} could not provide {_missing_jars()} in {JARS_DIR} "
                    f"(exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}", pytrace=False)


def compile_driver(javac: str) -> None:
    """javac KafkaDriver.java into compat_tests/java/classes/ unless the classes are up to date."""
    CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = CLASSES_DIR / "KafkaDriver.class"
    with open(CLASSES_DIR / ".compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel pytest workers compile once
        if target.exists() and target.stat().st_mtime >= DRIVER_SOURCE.stat().st_mtime:
            return
        r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(CLASSES_DIR), "-cp",
                            str(JARS_DIR / "*"), str(DRIVER_SOURCE)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            pytest.fail(f"javac KafkaDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)


@pytest.fixture(scope="session")
def java_driver() -> JavaDriver:
    """The compiled Java driver (kafka-clients 4.3.1, or ``KBROKER_JAVA_CLIENT``'s version). Skipped only when
    no JDK is installed."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): the Java-client tests compile and run "
                    "compat_tests/java/KafkaDriver.java; install openjdk-17-jdk-headless (CI has it)")
    ensure_jars()
    compile_driver(javac)
    return JavaDriver(java, os.pathsep.join([str(CLASSES_DIR), str(JARS_DIR / "*")]))


#: Kafka Streams 4.3.1 and its runtime jars (kafka-clients 4.3.1, RocksDB): scripts/fetch_jars.sh streams
STREAMS_JARS_DIR = REPO_ROOT / ".cache" / "streams-4.3.1"
STREAMS_SOURCE = REPO_ROOT / "compat_tests" / "java" / "StreamsDriver.java"
#: compiled apart from the client drivers: its classpath is the Streams jars, whatever KBROKER_JAVA_CLIENT says
STREAMS_CLASSES_DIR = REPO_ROOT / "compat_tests" / "java" / "classes" / "streams"


@pytest.fixture(scope="session")
def streams_driver() -> list[str]:
    """The command prefix that runs compat_tests/java/StreamsDriver.java (Kafka Streams 4.3.1 apps; heap 256 MiB),
    compiled on first use; the jars are resolved by ``scripts/fetch_jars.sh streams`` when missing. Skipped only
    when no JDK is installed."""
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("no JDK on PATH (java and javac): install openjdk-17-jdk-headless")
    if not (STREAMS_JARS_DIR / ".resolved").is_file():
        r = subprocess.run(["bash", str(FETCH_JARS), "streams"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not (STREAMS_JARS_DIR / ".resolved").is_file():
            pytest.fail(f"scripts/fetch_jars.sh streams could not resolve {STREAMS_JARS_DIR} (exit {r.returncode}):\n"
                        f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}", pytrace=False)
    STREAMS_CLASSES_DIR.mkdir(parents=True, exist_ok=True)
    target = STREAMS_CLASSES_DIR / "StreamsDriver.class"
    with open(STREAMS_CLASSES_DIR / ".compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists() or target.stat().st_mtime < STREAMS_SOURCE.stat().st_mtime:
            r = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(STREAMS_CLASSES_DIR), "-cp",
                                str(STREAMS_JARS_DIR / "*"), str(STREAMS_SOURCE)], capture_output=True, text=True,
                               timeout=300)
            if r.returncode != 0:
                pytest.fail(f"javac StreamsDriver.java failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return [java, "-Xmx256m", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp",
            os.pathsep.join([str(STREAMS_CLASSES_DIR), str(STREAMS_JARS_DIR / "*")]), "StreamsDriver"]


@pytest.fixture(scope="session")
def get_client(request: pytest.FixtureRequest) -> Callable[[str], Client]:
    """``get_client("confluent" | "kcat" | "kafka-python" | "aiokafka" | "java")``; skips the calling test
    with the reason when that client is not installed."""

    def get(name: str) -> Client:
        java = request.getfixturevalue("java_driver") if name == "java" else None
        client = make_client(name, java)
        try:
            client.check_available()
        except ClientUnavailable as exc:
            pytest.skip(str(exc))
        return client

    return get


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest, bootstrap_servers: str,
                  kafka_broker: Any) -> Iterator[Callable[..., str]]:
    """``topic_factory(partitions=3, configs=None, create=True)`` -> a unique topic name, created (and
    ready: every partition has a leader) unless ``create=False``."""
    created: list[str] = []

    def make(partitions: int = 3, configs: dict[str, str] | None = None, create: bool = True) -> str:
        base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:120]
        name = f"compat-{base}-{uuid.uuid4().hex[:8]}"
        if create:
            create_topic(bootstrap_servers, name, partitions, configs)
            created.append(name)
        return name

    yield make
    if kafka_broker.target != "kbroker":  # keep shared clusters tidy; a kbroker session dir is thrown away
        for name in created:
            try:
                delete_topic(bootstrap_servers, name, timeout=10)
            except Exception:  # noqa: BLE001 - best effort
                pass


@pytest.fixture(scope="session")
def broker_node_id(kafka_broker: Any, bootstrap_servers: str) -> int:
    """The node id the single broker should report (node.id=1 for kbroker)."""
    if getattr(kafka_broker, "node_id", None) is not None:
        return kafka_broker.node_id
    md = admin_client(bootstrap_servers).list_topics(timeout=10)
    if len(md.brokers) != 1:
        pytest.skip(f"these checks assume a single-broker cluster; {bootstrap_servers} has {len(md.brokers)}")
    return next(iter(md.brokers))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python loads its protocol schemas with deprecated importlib.resources calls: pure noise here
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that need their own broker (kill -9, restarts) last, so a session-broker failure shows first.
    here = Path(__file__).parent
    own = [i for i in items if "kbroker_factory" in getattr(i, "fixturenames", ()) and here in Path(i.path).parents]
    rest = [i for i in items if i not in own]
    items[:] = rest + own
