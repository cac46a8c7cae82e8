"""pytest plugin: run real Kafka clients against a real broker process.

Registered as the ``pytest11`` entry point ``kbroker`` (see pyproject.toml), so any pytest run in an
environment where kbroker is installed gets these fixtures and options:

Fixtures
    ``kafka_broker``      session-scoped broker for the selected target (see below). Has
                          ``.bootstrap``, ``.target``, ``.node_id`` (``None`` when unknown),
                          ``.log_path`` (``None`` for non-kbroker targets) and ``.is_running()``.
    ``bootstrap_servers`` ``kafka_broker.bootstrap`` as a string ("127.0.0.1:PORT").
    ``kbroker_factory``   function-scoped: ``kbroker_factory(overrides={...})`` starts a fresh kbroker
                          subprocess (own port, own data dir) and returns its ``KbrokerProcess``; all of
                          them are stopped at teardown. With the ``kafka`` target it starts Kafka nodes
                          (:class:`~kbroker.testing.kafka.KafkaProcess`) the same way; with ``external`` and
                          ``testcontainers`` the tests using it are skipped (no process of theirs to kill).

Targets (``KBROKER_TEST_TARGET`` or ``--kbroker-target``)
    ``kbroker``         default: ``python -m kbroker.cli.main server-start`` on a free port with a
                        temporary data dir.
    ``kafka``           the reference: Apache Kafka 4.3.1 (KRaft, combined mode) as a JVM process on free
                        ports, storage formatted by Kafka's StorageTool, the same server properties
                        (:mod:`kbroker.testing.kafka`; jars by coordinates, ``scripts/fetch_jars.sh``).
    ``external``        an already running broker at ``KBROKER_BOOTSTRAP`` (or ``--kbroker-bootstrap``).
    ``testcontainers``  Apache Kafka in Docker via testcontainers (imported lazily; image from
                        ``KBROKER_TEST_KAFKA_IMAGE``); skipped with "no Docker engine" when no Docker
                        engine answers.

Markers
    ``kbroker_only(reason)``  the test checks something only kbroker has (its own files, logs or tools):
                          skipped on the other targets with the reason (deselect with ``-m "not kbroker_only"``).
    ``kafka_reference``   in the slice that ``./dev.sh test`` (and CI) also runs against the reference Kafka
                          (``-m kafka_reference --kbroker-target=kafka``).

The selected target is also put into ``KBROKER_TEST_TARGET`` for the harness (``KbrokerCluster`` builds Kafka
nodes under ``kafka``).

Options
    ``--kbroker-log``            on failure, attach the broker log written during the test.
    ``--kbroker-log-lines N``    how many lines of it (default 200).
    ``--kbroker-override K=V``   extra server property for the session broker (repeatable).
    ``--kbroker-python PATH``    interpreter that runs the broker (default: this one; env KBROKER_PYTHON).

The session broker is watched: if it is found dead after a test, that test errors with the log tail
and the broker is restarted (same port and data) so the following tests still run.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest

TARGETS = ("kbroker", "kafka", "external", "testcontainers")
#: the targets whose brokers the harness starts itself with its server.properties (node.id=1, num.partitions=1,
#: auto.create.topics.enable=true, ...), so tests may rely on those settings
HARNESS_TARGETS = ("kbroker", "kafka")
DEFAULT_START_TIMEOUT = 60.0
DEFAULT_STOP_TIMEOUT = 30.0
DEFAULT_KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"

_REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------- helpers


_handed_out: collections.deque[int] = collections.deque(maxlen=4096)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0 and read it back), and not one this process was
    handed in its last 4,096 calls: the kernel may give the same free port to two binds in a row, and a cluster
    whose node 2 listens where node 1's controller does cannot start (a CI failure of the cluster tests)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.append(port)
            return port
    raise OSError("no free port that was not handed out already")


def free_port_run(width: int, host: str = "127.0.0.1") -> int:
    """A port P with P .. P + ``width`` all free a moment ago (``kbroker --processes N`` listens on consecutive
    ports: broker 1, the controller, brokers 2..N)."""
    for _ in range(500):
        base = free_port(host)
        if base + width > 65535:
            continue
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + width + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise OSError(f"no run of {width + 1} free ports")


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def tcp_connectable(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def api_versions_probe(host: str, port: int, timeout: float = 3.0) -> bool:
    """Send a hand-encoded ApiVersions v0 request; True if a well-formed response with our correlation id
    and error code 0 comes back. Independent of kbroker's own codec and of any client library."""
    corr = 0x4B42  # "KB"
    client_id = b"kbroker-testing-probe"
    body = struct.pack(">hhih", 18, 0, corr, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 10 or size > 1 << 20:
                return False
            payload = _recv_exact(s, size)
    except OSError:
        return False
    got_corr, error_code = struct.unpack_from(">ih", payload, 0)
    return got_corr == corr and error_code == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def metadata_probe(bootstrap: str, timeout: float = 3.0) -> bool:
    """A real client's Metadata round trip (confluent-kafka ``list_topics``), if confluent-kafka is there."""
    try:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415 (lazy: optional dependency)
    except ImportError:
        return True
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0, "logger": _SilentLogger()})
    try:
        md = admin.list_topics(timeout=timeout)
        return bool(md.brokers)
    except Exception:  # noqa: BLE001 - any failure means "not ready yet"
        return False


class _SilentLogger:
    """Swallows librdkafka log lines during readiness polling (connection refused noise)."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Callable[..., None]:
        return self.log


def wait_for_broker(bootstrap: str, timeout: float, alive: Callable[[], bool] | None = None,
                    describe: Callable[[], str] | None = None) -> None:
    """Poll until a TCP connect, a raw ApiVersions round trip and a client Metadata call all succeed."""
    host, port = split_bootstrap(bootstrap)
    deadline = time.monotonic() + timeout
    stage = "tcp connect"
    while True:
        if alive is not None and not alive():
            raise BrokerStartError(f"broker process exited during startup (waiting for {stage})"
                                   + (f"\n{describe()}" if describe else ""))
        if stage == "tcp connect" and tcp_connectable(host, port, timeout=1.0):
            stage = "ApiVersions"
        if stage == "ApiVersions" and api_versions_probe(host, port):
            stage = "Metadata"
        if stage == "Metadata" and metadata_probe(bootstrap):
            return
        if time.monotonic() > deadline:
            raise BrokerStartError(f"broker at {bootstrap} not ready after {timeout:.0f}s (stuck at {stage})"
                                   + (f"\n{describe()}" if describe else ""))
        time.sleep(0.1)


class BrokerStartError(RuntimeError):
    pass


def _tail(path: Path | None, lines: int, start: int = 0) -> str:
    if path is None or not path.exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    text = data.decode("utf-8", "replace").splitlines()
    cut = len(text) - lines
    head = [f"... ({cut} earlier lines omitted, full log: {path})"] if cut > 0 else []
    return "\n".join(head + text[-lines:])


# --------------------------------------------------------------------------------------------- kbroker


class KbrokerProcess:
    """One kbroker broker+controller subprocess with its own data directory.

    ``KbrokerProcess(data_dir, port=None, overrides={...})``; ``start()`` / ``stop()`` (SIGTERM, wait)
    / ``kill()`` (SIGKILL) / ``restart()``. Data, ``server.properties`` and the process output
    (``log_path``) all live under ``data_dir``; restarts reuse the same port and data.
    """

    target = "kbroker"
    _instances: "weakref.WeakSet[KbrokerProcess]" = weakref.WeakSet()

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None,
                 overrides: Mapping[str, Any] | None = None, *, host: str = "127.0.0.1",
                 node_id: int = 1, python: str | None = None, log_path: str | os.PathLike[str] | None = None,
                 start_timeout: float | None = None, log_level: str | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self._port_was_picked = port is None
        self.port = port if port is not None else free_port(host)
        self.node_id = node_id
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.python = python or os.environ.get("KBROKER_PYTHON") or sys.executable
        self.config_path = self.data_dir / "server.properties"
        self.log_dirs = self.data_dir / "logs"
        self.log_path = Path(log_path) if log_path else self.data_dir / "kbroker.out"
        self.start_timeout = start_timeout or float(os.environ.get("KBROKER_START_TIMEOUT", DEFAULT_START_TIMEOUT))
        self.log_level = log_level or os.environ.get("KBROKER_TEST_LOG_LEVEL") or None
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.last_exit_code: int | None = None
        #: the group id the process runs with (None: this process's); the cluster harness's iptables partitions
        #: (:mod:`kbroker.testing.firewall`) tell the nodes apart by it
        self.group: int | None = None
        KbrokerProcess._instances.add(self)

    # ---- addresses / config
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def base_properties(self) -> dict[str, str]:
        listener = f"PLAINTEXT://{self.host}:{self.port}"
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "listeners": listener,
            "advertised.listeners": listener,
            "log.dirs": str(self.log_dirs),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }

    def write_config(self) -> Path:
        lines = ["# written by kbroker.testing.plugin.KbrokerProcess; overrides are passed with --override"]
        lines += [f"{k}={v}" for k, v in self.base_properties().items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "kbroker.cli.main", "server-start", str(self.config_path)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        if self.log_level:
            cmd += ["--log-level", self.log_level]
        return cmd

    # ---- lifecycle
    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float | None = None) -> KbrokerProcess:
        if self.is_running():
            return self
        timeout = timeout or self.start_timeout
        for attempt in range(3):
            self._spawn()
            try:
                self.wait_ready(timeout)
                return self
            except BrokerStartError:
                if self.is_running():
                    self.kill()
                port_clash = "address already in use" in self.log_tail(60, since=self._start_offset).lower()
                if port_clash and self._port_was_picked and self.starts == 1 and attempt < 2:
                    self.port = free_port(self.host)  # someone grabbed the picked port meanwhile
                    self.starts = 0
                    continue
                raise
        raise AssertionError("unreachable")

    def wait_ready(self, timeout: float) -> None:
        """Wait until the process serves clients (:func:`wait_for_broker`); raises BrokerStartError."""
        wait_for_broker(self.bootstrap, timeout, alive=self.is_running,
                        describe=lambda: self.log_tail(60, since=self._start_offset))

    def _spawn(self) -> None:
        self.write_config()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("PYTHONFAULTHANDLER", "1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            self._start_offset = log.tell()
            log.write(f"===== kbroker start #{self.starts + 1} at {time.strftime('%H:%M:%S')}: "
                      f"{' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=str(self.data_dir), env=env, start_new_session=True,
                                         group=self.group)
        self.starts += 1
        self.last_exit_code = None

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int | None:
        """SIGTERM and wait for a clean exit; SIGKILL (the whole process group) after ``timeout``.
        Returns the exit code (``-9`` means it had to be killed)."""
        if self.proc is None:
            return self.last_exit_code
        if self.proc.poll() is not None and self.last_exit_code is not None:
            return self.last_exit_code  # already stopped/killed and reaped
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._note(f"did not exit {timeout:.0f}s after SIGTERM; sending SIGKILL")
                self._kill_group()
                self.proc.wait(10)
        self.last_exit_code = self.proc.returncode
        self._note(f"stopped, exit code {self.last_exit_code}")
        return self.last_exit_code

    def kill(self) -> int | None:
        """SIGKILL (a crash, from the broker's point of view) and reap. The broker runs in its own
        session, so any helper processes it started die with it."""
        if self.proc is None:
            return self.last_exit_code
        if self.proc.poll() is None:
            self._kill_group()
            self.proc.wait(10)
        self.last_exit_code = self.proc.returncode
        self._note(f"killed, exit code {self.last_exit_code}")
        return self.last_exit_code

    def _kill_group(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group we created with start_new_session
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def restart(self, timeout: float | None = None) -> KbrokerProcess:
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Stop if running (used at teardown); never raises."""
        with contextlib.suppress(Exception):
            self.stop()

    def __enter__(self) -> KbrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- logs
    def _note(self, msg: str) -> None:
        with contextlib.suppress(OSError), open(self.log_path, "ab") as log:
            log.write(f"===== [{time.strftime('%H:%M:%S')}] kbroker pid {self.pid}: {msg}\n".encode())

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_text(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 100, since: int = 0) -> str:
        return _tail(self.log_path, lines, since)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited({self.last_exit_code})"
        return f"<KbrokerProcess {self.bootstrap} pid={self.pid} {state} data={self.data_dir}>"


@atexit.register
def _reap_leftover_brokers() -> None:
    for proc in list(KbrokerProcess._instances):
        if proc.is_running():
            proc.kill()


# --------------------------------------------------------------------------------------------- other targets


class ExternalBroker:
    """A broker someone else runs (``KBROKER_TEST_TARGET=external``)."""

    target = "external"
    log_path: Path | None = None
    node_id: int | None = None

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def is_running(self) -> bool:
        return True

    def log_tail(self, lines: int = 100, since: int = 0) -> str:
        return "(external broker: no log)"

    def __repr__(self) -> str:
        return f"<ExternalBroker {self.bootstrap}>"


class ContainerBroker(ExternalBroker):
    """Apache Kafka in Docker through testcontainers (``KBROKER_TEST_TARGET=testcontainers``)."""

    target = "testcontainers"

    def __init__(self, container: Any) -> None:
        self.container = container
        super().__init__(container.get_bootstrap_server())

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.container.stop()

    def log_tail(self, lines: int = 100, since: int = 0) -> str:
        try:
            out, err = self.container.get_logs()
            return "\n".join((out + err).decode("utf-8", "replace").splitlines()[-lines:])
        except Exception as exc:  # noqa: BLE001
            return f"(no container log: {exc})"


def docker_unavailable_reason() -> str | None:
    """``None`` if a Docker engine answers ``/_ping``, else why not. Plain sockets, no docker SDK needed."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            path = host[len("unix://"):]
            if not os.path.exists(path):
                return f"{path} does not exist"
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(3)
            s.connect(path)
        elif host.startswith(("tcp://", "http://", "https://")):
            h, port = split_bootstrap(host)
            s = socket.create_connection((h, port), timeout=3)
            if host.startswith("https://") or os.environ.get("DOCKER_TLS_VERIFY"):
                s.close()
                return None  # TLS engine: reachable; let testcontainers do the handshake
        else:
            return f"unsupported DOCKER_HOST {host!r}"
        with s:
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = s.recv(4096)
    except OSError as exc:
        return f"cannot reach {host}: {exc}"
    if b" 200 " not in reply.split(b"\r\n", 1)[0]:
        return f"{host} answered {reply[:60]!r}"
    return None


def start_testcontainers_kafka() -> ContainerBroker:
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"no Docker engine ({reason}); KBROKER_TEST_TARGET=testcontainers needs one")
    try:
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415 (lazy, optional dependency)
    except ImportError:
        pytest.skip("testcontainers is not installed: pip install 'testcontainers[kafka]'")
    image = os.environ.get("KBROKER_TEST_KAFKA_IMAGE", DEFAULT_KAFKA_IMAGE)
    container = KafkaContainer(image).with_kraft()
    container.start()
    broker = ContainerBroker(container)
    broker.node_id = 1  # testcontainers' KRaft setup uses KAFKA_NODE_ID=1
    wait_for_broker(broker.bootstrap, 120)
    return broker


# --------------------------------------------------------------------------------------------- pytest wiring


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("kbroker", "kbroker compat testing")
    g.addoption("--kbroker-target", choices=TARGETS, default=None,
                help="broker to test against (default: $KBROKER_TEST_TARGET or 'kbroker')")
    g.addoption("--kbroker-bootstrap", default=None,
                help="bootstrap servers for --kbroker-target=external (default: $KBROKER_BOOTSTRAP)")
    g.addoption("--kbroker-log", action="store_true", default=False,
                help="on test failure, show the broker log written during that test")
    g.addoption("--kbroker-log-lines", type=int, default=200, help="max broker log lines shown per failure")
    g.addoption("--kbroker-override", action="append", default=[], metavar="KEY=VALUE",
                help="extra server property for the session kbroker (repeatable)")
    g.addoption("--kbroker-python", default=None,
                help="python interpreter that runs kbroker (default: $KBROKER_PYTHON or this interpreter)")


def selected_target(config: pytest.Config) -> str:
    target = config.getoption("--kbroker-target") or os.environ.get("KBROKER_TEST_TARGET") or "kbroker"
    if target not in TARGETS:
        raise pytest.UsageError(f"KBROKER_TEST_TARGET={target!r}: expected one of {', '.join(TARGETS)}")
    return target


def pytest_configure(config: pytest.Config) -> None:
    target = selected_target(config)
    os.environ["KBROKER_TEST_TARGET"] = target  # KbrokerCluster and subprocesses follow the same target
    config.addinivalue_line("markers", "kbroker_only(reason): checks what only kbroker has; skipped on other targets")
    config.addinivalue_line("markers", "kafka_reference: in the slice that CI also runs against Apache Kafka itself")
    if target == "external" and not (config.getoption("--kbroker-bootstrap") or os.environ.get("KBROKER_BOOTSTRAP")):
        raise pytest.UsageError("KBROKER_TEST_TARGET=external needs KBROKER_BOOTSTRAP=host:port "
                                "(or --kbroker-bootstrap)")


def pytest_report_header(config: pytest.Config) -> list[str]:
    target = selected_target(config)
    extra = ""
    if target == "external":
        extra = f" at {config.getoption('--kbroker-bootstrap') or os.environ.get('KBROKER_BOOTSTRAP')}"
    elif target == "kafka":
        from kbroker.testing.kafka import KAFKA_VERSION  # noqa: PLC0415

        extra = f" (Apache Kafka {KAFKA_VERSION}, JVM)"
    elif target == "testcontainers":
        extra = f" image {os.environ.get('KBROKER_TEST_KAFKA_IMAGE', DEFAULT_KAFKA_IMAGE)}"
    return [f"kbroker target: {target}{extra}"]


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise pytest.UsageError(f"--kbroker-override expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's broker: a kbroker subprocess, an external broker, or Kafka in a container."""
    config = request.config
    target = selected_target(config)
    if target == "external":
        bootstrap = config.getoption("--kbroker-bootstrap") or os.environ["KBROKER_BOOTSTRAP"]
        broker: Any = ExternalBroker(bootstrap)
        wait_for_broker(bootstrap, 30)
        yield broker
        return
    if target == "testcontainers":
        cbroker = start_testcontainers_kafka()
        try:
            yield cbroker
        finally:
            cbroker.stop()
        return
    node_class = process_class(target)
    proc = node_class(tmp_path_factory.mktemp(f"{target}-session"),
                      overrides=_parse_overrides(config.getoption("--kbroker-override")),
                      python=config.getoption("--kbroker-python"))
    try:
        proc.start()
    except BrokerStartError as exc:
        proc.close()
        pytest.fail(f"could not start the session {target}: {exc}", pytrace=False)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker: Any) -> str:
    return kafka_broker.bootstrap


def current_target() -> str:
    """The selected target once the plugin is configured (it puts it into ``KBROKER_TEST_TARGET``), for test modules
    deciding at import, e.g. ``pytest.mark.xfail(current_target() == "kbroker", strict=True, reason=...)``."""
    return os.environ.get("KBROKER_TEST_TARGET") or "kbroker"


def process_class(target: str | None = None) -> type[KbrokerProcess]:
    """The node class of ``target`` (default: :func:`current_target`): :class:`KbrokerProcess`, or
    :class:`~kbroker.testing.kafka.KafkaProcess` for ``kafka``."""
    target = target or current_target()
    if target == "kafka":
        from kbroker.testing.kafka import KafkaProcess  # noqa: PLC0415 (the plugin does not need it otherwise)

        return KafkaProcess
    return KbrokerProcess


class KbrokerFactory:
    """Callable returned by the ``kbroker_factory`` fixture: starts nodes of ``node_class``."""

    def __init__(self, base_dir: Path, python: str | None, node_class: type[KbrokerProcess] = KbrokerProcess) -> None:
        self.base_dir = base_dir
        self.python = python
        self.node_class = node_class
        self.brokers: list[KbrokerProcess] = []

    def __call__(self, overrides: Mapping[str, Any] | None = None, *, start: bool = True,
                 port: int | None = None, **kwargs: Any) -> KbrokerProcess:
        data_dir = self.base_dir / f"broker{len(self.brokers)}"
        proc = self.node_class(data_dir, port=port, overrides=overrides, python=kwargs.pop("python", self.python),
                               **kwargs)
        self.brokers.append(proc)
        if start:
            proc.start()
        return proc

    def close(self) -> None:
        for proc in self.brokers:
            proc.close()


@pytest.fixture
def kbroker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KbrokerFactory]:
    """Start fresh kbroker subprocesses with custom overrides; all stopped at teardown."""
    target = selected_target(request.config)
    if target not in ("kbroker", "kafka"):
        pytest.skip(f"needs its own broker subprocess (kill -9 / restart); target is {target!r}")
    factory = KbrokerFactory(tmp_path, request.config.getoption("--kbroker-python"), process_class(target))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(autouse=True)
def _kbroker_session_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """For tests on the session broker: restart it if an earlier test left it dead, and make the test
    during which it died error out with the log tail."""
    if "kafka_broker" not in request.fixturenames:
        yield
        return
    broker = request.getfixturevalue("kafka_broker")
    if isinstance(broker, KbrokerProcess) and not broker.is_running():
        broker.start()
    yield
    if isinstance(broker, KbrokerProcess) and not broker.is_running():
        code = broker.proc.poll() if broker.proc else None
        tail = broker.log_tail(80)
        with contextlib.suppress(Exception):
            broker.start()
        pytest.fail(f"the session kbroker died during this test (exit code {code}); restarted it.\n"
                    f"--- broker log tail ---\n{tail}", pytrace=False)


_LOG_MARKS = pytest.StashKey[dict]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # ``@pytest.mark.kbroker_only("why")``: skipped on every target but kbroker, saying why, before any fixture
    # (a session broker of the other target) is set up for it
    mark = item.get_closest_marker("kbroker_only")
    target = selected_target(item.config)
    if mark is not None and target != "kbroker":
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason", "kbroker-only")
        pytest.skip(f"kbroker only ({reason}); target is {target!r}")
    item.stash[_LOG_MARKS] = {id(p): p.log_size() for p in list(KbrokerProcess._instances)}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    brokers = list(KbrokerProcess._instances)
    if not brokers:
        return
    marks = item.stash.get(_LOG_MARKS, {})
    show = item.config.getoption("--kbroker-log")
    lines = item.config.getoption("--kbroker-log-lines")
    for proc in brokers:
        since = marks.get(id(proc), 0)
        if id(proc) in marks and proc.log_size() <= since:
            continue  # existed before the test and wrote nothing during it
        title = f"kbroker {proc.bootstrap} log ({proc.log_path})"
        if show:
            rep.sections.append((title, proc.log_tail(lines, since=since)))
        else:
            rep.sections.append((title, "(run pytest with --kbroker-log to include the broker log here)"))

