"""The reference broker: Apache Kafka 4.3.1 as a JVM process, for running the same tests against Kafka itself.

``KafkaProcess`` has :class:`~kbroker.testing.plugin.KbrokerProcess`'s interface (``start`` / ``stop`` / ``kill`` /
``restart``, ``bootstrap``, ``overrides``, ``log_path``, ``data_dir``), so the pytest plugin's
``--kbroker-target=kafka`` and :class:`~kbroker.testing.cluster.KbrokerCluster` run it where they would run a kbroker
node. It is Kafka in KRaft combined mode (``process.roles=broker,controller``) with the same ``server.properties``
keys as the kbroker target, plus the CONTROLLER listener that Kafka's combined nodes need on a port of their own
(``controller_port``). Before the first start, and after a wiped data directory, storage is formatted with Kafka's
own StorageTool (``kafka.tools.StorageTool format``) with the cluster id of ``cluster.id`` (a kbroker key; a random id
without it), which Kafka itself reads only from ``meta.properties``.

The jars come by Maven coordinates (``scripts/fetch_jars.sh kafka``, java/pom.xml) into ``.cache/kafka-4.3.1``.
The JVM gets the flags of Kafka's own ``kafka-server-start.sh`` / ``kafka-run-class.sh`` (G1, 20 ms pause target,
headless) with the heap capped at ``KBROKER_KAFKA_HEAP_OPTS`` (default ``-Xms256m -Xmx768m``, instead of the script's
1 GiB fixed heap, so a 3-node cluster fits beside the tests on 2 cores / 24 GiB).

``python -m kbroker.testing.kafka [--port N] [--dir DIR]`` (``./dev.sh kafka``) starts one reference broker for a
person to poke at and prints its address.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from kbroker.testing.plugin import _REPO_ROOT, BrokerStartError, KbrokerProcess, free_port

__all__ = ["KAFKA_VERSION", "KafkaControllerProcess", "KafkaProcess", "kafka_classpath", "kafka_libs", "run_kafka_tool"]

KAFKA_VERSION = "4.3.1"
#: where scripts/fetch_jars.sh puts the broker, StorageTool and the tools (profile ``kafka`` of java/pom.xml)
KAFKA_LIBS = Path(os.environ.get("KBROKER_KAFKA_LIBS", _REPO_ROOT / ".cache" / f"kafka-{KAFKA_VERSION}"))
FETCH_JARS = _REPO_ROOT / "scripts" / "fetch_jars.sh"
#: kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS and kafka-server-start.sh's heap, the heap capped lower
JVM_PERFORMANCE_OPTS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                        "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")
DEFAULT_HEAP_OPTS = "-Xms256m -Xmx768m"
CONTROLLER_LISTENER = "CONTROLLER"
#: the internal user of an authenticated controller listener (see KafkaProcess._authenticated_controller_listener)
CONTROLLER_USER = "kbroker-test-controller"
_PROTOCOL_MAP = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
#: kbroker's own keys that Kafka does not have (Kafka would only warn; they are left out of its file)
KBROKER_ONLY_KEYS = frozenset({"cluster.id"})

_LOG4J2 = """\
# written by kbroker.testing.kafka: Kafka's server log to stdout (the process output, log_path)
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
"""


def kafka_libs() -> Path:
    """The directory of Kafka 4.3.1's jars, resolved first (``scripts/fetch_jars.sh kafka``) when missing.
    Raises RuntimeError with mvn's output when they cannot be had."""
    if not (KAFKA_LIBS / ".resolved").is_file():
        r = subprocess.run(["bash", str(FETCH_JARS), "kafka"], capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not (KAFKA_LIBS / ".resolved").is_file():
            raise RuntimeError(f"scripts/fetch_jars.sh kafka failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n"
                               f"{r.stderr[-3000:]}")
    return KAFKA_LIBS


def kafka_classpath() -> str:
    return str(kafka_libs() / "*")


def java_bin() -> str:
    java = shutil.which("java")
    if not java:
        raise RuntimeError("no java on PATH: the reference Kafka needs a JDK 17+ (./dev.sh test installs one)")
    return java


def tool_command(main_class: str, *args: str, heap: str = "-Xmx256m") -> list[str]:
    """The command line of one of Kafka's tools (``org.apache.kafka.tools.TopicCommand``, ``kafka.tools.StorageTool``,
    ...) as its ``bin/kafka-*.sh`` script runs it: ``java -cp <the jars> MAIN ARGS``, with log4j2 quiet."""
    return [java_bin(), heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            "-Dlog4j2.level=WARN", "-cp", kafka_classpath(), main_class, *args]


def run_kafka_tool(main_class: str, *args: str, timeout: float = 120.0, input: str | None = None,
                   env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to completion (see :func:`tool_command`); its CompletedProcess (text)."""
    return subprocess.run(tool_command(main_class, *args), capture_output=True, text=True, timeout=timeout,
                          input=input, env={**os.environ, **(env or {})}, stdin=None if input is not None else
                          subprocess.DEVNULL)


def _escape_key(key: str) -> str:
    out = []
    for ch in key:
        out.append("\\" + ch if ch in " =:#!\\" else ch)
    return "".join(out)


def _escape_value(value: str) -> str:
    """A value as java.util.Properties.load reads it back unchanged: backslashes doubled, a leading space kept,
    line breaks escaped."""
    value = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if value.startswith(" "):
        value = "\\" + value
    return value


def properties_text(props: Mapping[str, str], header: str) -> str:
    return "".join([f"# {header}\n"] + [f"{_escape_key(k)}={_escape_value(v)}\n" for k, v in props.items()])


class KafkaProcess(KbrokerProcess):
    """One Apache Kafka 4.3.1 node (KRaft, combined broker+controller unless ``process.roles`` says otherwise) with its
    own data directory; see the module docstring. ``controller_port``: its CONTROLLER listener (a free port when not
    given). ``heap_opts``: the JVM's heap flags (default ``KBROKER_KAFKA_HEAP_OPTS`` or ``-Xms256m -Xmx768m``)."""

    target = "kafka"

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None,
                 overrides: Mapping[str, Any] | None = None, *, controller_port: int | None = None,
                 heap_opts: str | None = None, **kwargs: Any) -> None:
        kwargs.pop("python", None)
        kwargs.pop("log_level", None)
        kwargs.setdefault("start_timeout", float(os.environ.get("KBROKER_KAFKA_START_TIMEOUT", 120)))
        super().__init__(data_dir, port, overrides, **kwargs)
        self.log_path = Path(kwargs["log_path"]) if kwargs.get("log_path") else self.data_dir / "kafka.out"
        self.controller_port = controller_port if controller_port is not None else free_port(self.host)
        self.heap_opts = heap_opts or os.environ.get("KBROKER_KAFKA_HEAP_OPTS", DEFAULT_HEAP_OPTS)
        #: JVM system properties for the broker (``-Dname=value``), as KAFKA_OPTS passes them: e.g. Kafka 4's
        #: ``org.apache.kafka.sasl.oauthbearer.allowed.urls``, which only a system property can set
        self.system_properties: dict[str, str] = {}
        self.cluster_id = self.overrides.get("cluster.id") or _random_cluster_id()
        self.log4j_path = self.data_dir / "log4j2.properties"

    # ---- configuration
    def base_properties(self) -> dict[str, str]:
        props = super().base_properties()
        props.update({
            "listeners": f"PLAINTEXT://{self.host}:{self.port},{CONTROLLER_LISTENER}://{self.host}:{self.controller_port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "controller.quorum.voters": f"{self.node_id}@{self.host}:{self.controller_port}",
            "listener.security.protocol.map": _PROTOCOL_MAP,
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        })
        return props

    def properties(self) -> dict[str, str]:
        """Every property Kafka's file gets: the base ones, then the overrides, with the controller listener added
        where an override of ``listeners`` / ``listener.security.protocol.map`` left it out."""
        props = {**self.base_properties(), **self.overrides}
        roles = props.get("process.roles", "")
        if "controller" in roles:
            names = [entry.split("://", 1)[0] for entry in props["listeners"].split(",") if entry]
            if CONTROLLER_LISTENER not in names:
                props["listeners"] += f",{CONTROLLER_LISTENER}://{self.host}:{self.controller_port}"
        mapping = props.get("listener.security.protocol.map", "")
        if f"{CONTROLLER_LISTENER}:" not in mapping:
            props["listener.security.protocol.map"] = f"{CONTROLLER_LISTENER}:PLAINTEXT," + mapping
        if "controller.quorum.bootstrap.servers" in self.overrides and "controller.quorum.voters" not in self.overrides:
            props.pop("controller.quorum.voters", None)  # a dynamic quorum (KIP-853) names no static voters
        if props.get("authorizer.class.name") and f"{CONTROLLER_LISTENER}:PLAINTEXT" in props["listener.security.protocol.map"]:
            self._authenticated_controller_listener(props)
        for key in KBROKER_ONLY_KEYS:
            props.pop(key, None)
        return props

    def _authenticated_controller_listener(self, props: dict[str, str]) -> None:
        """With an authorizer, Kafka's controllers authorize their own CONTROLLER connections (registration, Raft
        fetches) and need CLUSTER_ACTION: an anonymous PLAINTEXT controller listener cannot start. As Kafka's docs
        have it, the controller listener authenticates (SASL/PLAIN with an internal user) and that user is a super
        user; client listeners keep what the test configured. kbroker's nodes talk to their controller through no
        authorizer, so this exists only here."""
        props["listener.security.protocol.map"] = props["listener.security.protocol.map"].replace(
            f"{CONTROLLER_LISTENER}:PLAINTEXT", f"{CONTROLLER_LISTENER}:SASL_PLAINTEXT")
        props["sasl.mechanism.controller.protocol"] = "PLAIN"
        prefix = f"listener.name.{CONTROLLER_LISTENER.lower()}"
        props[f"{prefix}.sasl.enabled.mechanisms"] = "PLAIN"
        props[f"{prefix}.plain.sasl.jaas.config"] = (
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{CONTROLLER_USER}" password="{CONTROLLER_USER}-secret" '
            f'user_{CONTROLLER_USER}="{CONTROLLER_USER}-secret";')
        supers = [s for s in props.get("super.users", "").split(";") if s]
        props["super.users"] = ";".join(supers + [f"User:{CONTROLLER_USER}"])

    def write_config(self) -> Path:
        self.config_path.write_text(properties_text(self.properties(), "written by kbroker.testing.kafka.KafkaProcess"))
        self.log4j_path.write_text(_LOG4J2)
        return self.config_path

    def command(self) -> list[str]:
        return [java_bin(), *self.heap_opts.split(), *JVM_PERFORMANCE_OPTS,
                *(f"-D{k}={v}" for k, v in self.system_properties.items()),
                f"-Dlog4j2.configurationFile={self.log4j_path}", f"-Dkafka.logs.dir={self.data_dir / 'kafka-logs'}",
                "-cp", kafka_classpath(), "kafka.Kafka", str(self.config_path)]

    # ---- storage
    def is_formatted(self) -> bool:
        log_dirs = self.properties().get("log.dirs") or self.properties().get("log.dir") or str(self.log_dirs)
        return all((Path(d) / "meta.properties").is_file() for d in log_dirs.split(","))

    def format(self, *flags: str) -> str:
        """``kafka-storage format -t <cluster id> -c <server.properties>`` (Kafka's StorageTool); its output.
        Raises BrokerStartError with the tool's output when it fails."""
        self.write_config()
        r = run_kafka_tool("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(self.config_path),
                           *flags, timeout=120)
        if r.returncode != 0:
            raise BrokerStartError(f"kafka-storage format of node {self.node_id} failed (exit {r.returncode}):\n"
                                   f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        return r.stdout

    def _spawn(self) -> None:
        if not self.is_formatted():
            self.format()
        super()._spawn()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, as ``kafka-server-stop.sh``, and wait. The JVM ends a clean shutdown (its shutdown hooks run)
        with exit code 143 (128 + SIGTERM); that is reported as 0, a clean stop, like kbroker's."""
        code = super().stop(timeout)
        if code == 143:
            self.last_exit_code = code = 0
        return code

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited({self.last_exit_code})"
        return f"<KafkaProcess {self.bootstrap} pid={self.pid} {state} data={self.data_dir}>"


class KafkaControllerProcess(KafkaProcess):
    """A controller-only Kafka node (``process.roles=controller``): its one listener is the CONTROLLER listener on
    ``port``; ready once that answers ApiVersions (as :class:`~kbroker.testing.cluster.ControllerProcess`)."""

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None,
                 overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(data_dir, port, overrides, **kwargs)
        self.controller_port = self.port

    def base_properties(self) -> dict[str, str]:
        props = super().base_properties()
        props.update({"process.roles": "controller", "listeners": f"{CONTROLLER_LISTENER}://{self.host}:{self.port}"})
        props.pop("advertised.listeners", None)
        return props

    def wait_ready(self, timeout: float) -> None:
        from kbroker.testing.cluster import ControllerProcess  # noqa: PLC0415 (cluster imports this module lazily)

        ControllerProcess.wait_ready(self, timeout)  # type: ignore[arg-type]


def _random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it (22 characters of URL-safe base64, not starting with
    ``-``, which a command line would take for an option)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def main(argv: list[str] | None = None) -> int:
    """``./dev.sh kafka``: start one Apache Kafka 4.3.1 node on loopback (KRaft combined mode, the test target's
    settings), print its address, run until Ctrl-C."""
    import argparse
    import signal
    import tempfile

    ap = argparse.ArgumentParser(prog="dev.sh kafka", description=main.__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=None, help="client port (default: a free one)")
    ap.add_argument("--dir", default=None, help="data directory (default: a temporary one, removed at exit)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a server property")
    args = ap.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.override)
    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="kafka-reference-")
    root = args.dir or tmp.name  # type: ignore[union-attr]
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    node = KafkaProcess(root, port=args.port, overrides=overrides)
    try:
        print(f"starting Apache Kafka {KAFKA_VERSION} (log: {node.log_path})", flush=True)
        node.start()
        print(f"bootstrap.servers={node.bootstrap}", flush=True)
        print(f"ready: pid {node.pid}, data {node.data_dir}; Ctrl-C stops it", flush=True)
        while not stop["now"] and node.is_running():
            time.sleep(0.2)
        if not node.is_running():
            print(f"Kafka exited (code {node.proc.poll() if node.proc else None}); log tail:\n{node.log_tail(40)}",
                  flush=True)
            return 1
    finally:
        node.stop()
        if tmp is not None:
            tmp.cleanup()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
