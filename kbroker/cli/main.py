"""Command-line entry points.

* ``kbroker`` with no arguments: the embedded default, one combined broker+controller on
  ``localhost:9092`` with data in ``./kbroker-data`` (formatted on first start).
* ``kbroker --processes N``: the same node as N processes, so it uses N cores (``kbroker.cli.node_processes``).
* ``kbroker-server-start FILE [--override key=value ...]`` (also ``kbroker server-start FILE``): start from
  a Kafka-style ``server.properties``.

SIGTERM and SIGINT shut down cleanly: listeners close, logs are flushed, checkpoints and the
clean-shutdown marker are written.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from kbroker.cli._common import add_version
from kbroker.config import BrokerConfig, ConfigException

EMBEDDED_DEFAULTS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "listeners": "PLAINTEXT://localhost:9092",
    "advertised.listeners": "PLAINTEXT://localhost:9092",
    "log.dirs": "./kbroker-data",
}


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def embedded_props(overrides: dict[str, str]) -> dict[str, str]:
    """The embedded node's properties: :data:`EMBEDDED_DEFAULTS` under the ``--override``s. Overridden
    ``listeners`` without ``advertised.listeners`` are advertised themselves, as Kafka defaults it."""
    props = dict(EMBEDDED_DEFAULTS)
    if "listeners" in overrides and "advertised.listeners" not in overrides:
        del props["advertised.listeners"]
    props.update(overrides)
    return props


def _install_loop_policy() -> None:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


#: how long a start interrupted by SIGTERM/SIGINT may take to unwind (its cancelled steps) before the process exits
STOP_DURING_START_TIMEOUT_S = 5.0


class StartupError(Exception):
    """The broker could not start; the message is the one line the operator sees."""


def describe_failure(exc: BaseException) -> str:
    """One line for a start-up failure: what failed and, for files, which one."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {exc.filename}"
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


async def run_broker(config: BrokerConfig) -> None:
    """Start a broker and run until SIGTERM/SIGINT. A failure to start raises :class:`StartupError` after
    releasing what was taken (listeners, directory locks); nothing is flushed or marked clean then. SIGTERM or
    SIGINT during start-up (say, while waiting for the quorum) abandons the start the same way and returns."""
    from kbroker.server.broker import Broker

    stop = asyncio.Event()
    signalled: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        signalled.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    stopping = loop.create_task(stop.wait())
    broker = None
    try:
        from kbroker.controller.config_def import validate_listeners, validate_server_config

        for warning in validate_server_config(config.props):
            logging.getLogger("kbroker.config").warning("%s", warning)
        validate_listeners(config.props)
        broker = Broker(config)
        starting = loop.create_task(broker.start())
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            await asyncio.wait([starting], timeout=STOP_DURING_START_TIMEOUT_S)
            await _abandon_start(broker)
            logging.getLogger("kbroker").info("%s during start-up: stopped before the start completed",
                                              signalled[0] if signalled else "stop signal")
            return
        starting.result()
    except Exception as exc:
        stopping.cancel()
        if broker is not None:
            await _abandon_start(broker)
        raise StartupError(describe_failure(exc)) from exc
    print(f"kbroker started (kbroker node {broker.node_id}) listening on "
          + ", ".join(f"{k}:{v}" for k, v in broker.bound_ports.items()), file=sys.stderr, flush=True)
    assert broker.fatal_error is not None
    await asyncio.wait([stopping, broker.fatal_error], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    await broker.stop()
    if broker.fatal_error.done():
        raise RuntimeError(f"shutting down: {broker.fatal_error.result()}")


async def _abandon_start(broker: Any) -> None:
    """Undo a start that failed or was interrupted: stop the metadata quorum's tasks (its Raft loop ends on its own
    flag, as a cancellation alone may be lost in a ``wait_for`` that completes at the same moment), then
    :meth:`Broker.abort_start` (listeners, tasks, directory locks)."""
    quorum = broker.metadata_quorum
    if quorum is not None:
        try:
            await asyncio.wait_for(quorum.stop(), STOP_DURING_START_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a half-started quorum: the process exits anyway
            logging.getLogger("kbroker").debug("stopping the metadata quorum of an abandoned start", exc_info=exc)
    broker.abort_start()


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _raise_open_file_limit() -> None:
    """Raise the soft limit of open files to the hard limit, as Kafka's docs ask operators to do (every segment
    of every partition keeps its ``.log`` open; index files are capped, see ``kbroker.storage.index``)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        logging.getLogger("kbroker").info("open file limit: %s (raise the hard limit, ulimit -Hn, for more "
                                          "partitions)", soft)
    except (ImportError, ValueError, OSError):
        pass


def _start(config: BrokerConfig, log_level: str) -> int:
    """Run the broker; a start-up failure is one ERROR line and exit code 1 (the traceback only at DEBUG)."""
    # Worker threads (log creation, flushes, the cleaner) hand the interpreter back to the event loop within
    # 1 ms instead of Python's default 5 ms, so their work does not show up as request latency.
    sys.setswitchinterval(0.001)
    _setup_logging(log_level)
    _raise_open_file_limit()
    _install_loop_policy()
    log = logging.getLogger("kbroker")
    try:
        asyncio.run(run_broker(config))
    except StartupError as exc:
        log.debug("start-up failure", exc_info=exc.__cause__)
        log.error("kbroker cannot start: %s", exc)
        return 1
    except KeyboardInterrupt:  # SIGINT before the broker's own handlers were installed
        log.info("SIGINT during start-up: stopped before the start completed")
        return 130
    except Exception as exc:  # a failure after start-up: still one line, the traceback at DEBUG
        log.debug("fatal error", exc_info=exc)
        log.error("kbroker stopped on a fatal error: %s", describe_failure(exc))
        return 1
    return 0


def server_start(argv: list[str] | None = None) -> int:
    """``kbroker-server-start server.properties [--override key=value ...]``."""
    ap = argparse.ArgumentParser(prog="kbroker-server-start", description="Start kbroker from a server.properties file")
    ap.add_argument("config", help="path to server.properties")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="override a property (repeatable)")
    ap.add_argument("--log-level", default="INFO")
    add_version(ap)
    args = ap.parse_args(argv)
    try:
        config = BrokerConfig.from_file(args.config, _parse_overrides(args.override))
    except OSError as exc:
        print(f"kbroker-server-start: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except (ConfigException, UnicodeDecodeError) as exc:
        print(f"kbroker-server-start: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    return _start(config, args.log_level)


def main(argv: list[str] | None = None) -> int:
    """``kbroker`` (embedded default) or ``kbroker server-start FILE``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "server-start":
        return server_start(argv[1:])
    ap = argparse.ArgumentParser(prog="kbroker", description="Run the embedded single-node kbroker "
                                 "(localhost:9092, data in ./kbroker-data)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--processes", type=int, default=1, metavar="N",
                    help="run the node as N broker processes (one per core) and a controller: broker 1 on the "
                    "listener's port, brokers 2..N on port+2.., the controller on port+1 (kbroker.cli.node_processes)")
    add_version(ap)
    args = ap.parse_args(argv)
    props = embedded_props(_parse_overrides(args.override))
    if args.processes < 1:
        ap.error("--processes must be 1 or more")
    if args.processes > 1:
        from kbroker.cli import node_processes

        return node_processes.run(props, args.processes, args.log_level)
    return _start(BrokerConfig(props), args.log_level)


if __name__ == "__main__":
    sys.exit(main())
