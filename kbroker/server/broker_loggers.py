"""The broker's loggers as a config resource (BROKER_LOGGER, resource type 8; KIP-412).

Kafka lets an operator read and change the level of each of a broker's loggers at run time
(``kafka-configs --entity-type broker-loggers``): DescribeConfigs lists every logger with its effective level, and
IncrementalAlterConfigs SETs a logger's level or DELETEs it (back to inheriting its parent's). The change is the
node's own (not written to the metadata log) and is lost on restart, as in Kafka. kbroker's loggers are Python's:
``root`` and every ``kbroker.*`` logger its modules created; levels use Kafka's (log4j) names.

Errors, as Kafka 4.3: a level that is not a log4j level is INVALID_CONFIG; APPEND and SUBTRACT, and DELETE of the
root logger, are INVALID_REQUEST; a resource name other than this node's id is INVALID_REQUEST (the caller checks).
"""

from __future__ import annotations

import logging

from kbroker.protocol.errors import ErrorCode, KafkaError

__all__ = ["ROOT_LOGGER", "LEVELS", "describe_loggers", "alter_loggers"]

ROOT_LOGGER = "root"

#: log4j level name -> Python level (TRACE and OFF have no Python name: below DEBUG and above CRITICAL)
LEVELS: dict[str, int] = {"ALL": 1, "TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                          "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
                          "OFF": logging.CRITICAL + 10}
_NAMES = {v: k for k, v in LEVELS.items()}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _level_name(level: int) -> str:
    return _NAMES.get(level) or next(n for lv, n in sorted(_NAMES.items(), reverse=True) if lv <= level)


def _loggers() -> dict[str, logging.Logger]:
    out = {ROOT_LOGGER: logging.getLogger()}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and (name == "kbroker" or name.startswith("kbroker.")):
            out[name] = logger
    return out


def describe_loggers(keys: set[str] | None = None) -> list[tuple[str, str]]:
    """``(logger name, effective level)`` of every logger (or those named in ``keys``), sorted by name."""
    return sorted((name, _level_name(logger.getEffectiveLevel())) for name, logger in _loggers().items()
                  if keys is None or name in keys)


def alter_loggers(changes: list[tuple[str, int, str | None]], validate_only: bool = False) -> None:
    """Apply ``(logger name, operation, level)`` changes (operations as IncrementalAlterConfigs': 0 SET, 1 DELETE,
    2 APPEND, 3 SUBTRACT) all or none. Raises KafkaError (INVALID_CONFIG, INVALID_REQUEST) for the first bad one."""
    plan: list[tuple[logging.Logger, int]] = []
    for name, op, value in changes:
        if op in _OP_NAMES:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"{_OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource")
        logger = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
        if op == DELETE:
            if name == ROOT_LOGGER:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "The root logger's level cannot be removed, only set")
            plan.append((logger, logging.NOTSET))
        elif op == SET:
            level = LEVELS.get((value or "").strip().upper())
            if level is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"{value!r} is not a log level for logger {name}: use one of {', '.join(LEVELS)}")
            plan.append((logger, level))
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    if not validate_only:
        for logger, level in plan:
            logger.setLevel(level)
