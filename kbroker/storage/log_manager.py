"""``LogManager``: all partition logs across the broker's ``log.dirs``.

Per log directory root it owns ``meta.properties``, the three offset checkpoint files and the
``.kafka_cleanshutdown`` marker. Startup loads every ``<topic>-<partition>`` directory (recovering after an
unclean shutdown), shutdown flushes, checkpoints, closes and writes the marker.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterable, Mapping

from kbroker.config import parse_properties
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
)
from kbroker.storage.config import LogConfig
from kbroker.storage.log import PartitionLog, write_partition_metadata
from kbroker.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
)
from kbroker.storage.util import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    STRAY_DIR_SUFFIX,
    fsync_dir,
    future_dir_name,
    parse_topic_partition,
    partition_dir_name,
    random_uuid,
    uuid_to_str,
    write_atomically,
)

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES_FILE = "meta.properties"
METADATA_TOPIC = "__cluster_metadata"
"""The KRaft metadata log lives in a log dir too but is owned by the controller, not by the LogManager."""

TopicPartition = tuple[str, int]


# -- meta.properties ---------------------------------------------------------------------------------


def read_meta_properties(dir: Path) -> dict[str, str] | None:
    """Parse ``<dir>/meta.properties`` (Java properties, :func:`kbroker.config.parse_properties`) into a dict;
    None if the file does not exist. Keys: ``version``, ``cluster.id``, ``node.id``, ``directory.id``."""
    try:
        text = (Path(dir) / META_PROPERTIES_FILE).read_text("utf-8")
    except FileNotFoundError:
        return None
    return parse_properties(text)


def write_meta_properties(
    dir: Path, *, cluster_id: str, node_id: int, directory_id: str | None = None, version: int = 1
) -> dict[str, str]:
    """Write ``<dir>/meta.properties`` atomically; ``directory_id`` defaults to a fresh random uuid.
    Returns the properties written."""
    props = {
        "version": str(version),
        "cluster.id": cluster_id,
        "node.id": str(node_id),
        "directory.id": directory_id or uuid_to_str(random_uuid()),
    }
    body = "#\n#kbroker meta.properties\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    Path(dir).mkdir(parents=True, exist_ok=True)
    write_atomically(Path(dir) / META_PROPERTIES_FILE, body.encode("utf-8"))
    return props


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CheckpointError as exc:
        log.warning("ignoring unreadable checkpoint %s; the logs of that directory are recovered as after a "
                    "crash", exc)
        return {}


# -- LogManager --------------------------------------------------------------------------------------


class LogManager:
    """Owns the ``PartitionLog`` of every partition replica on this broker.

    ``log_dirs``: the broker's ``log.dirs`` roots (created if missing). ``default_config``: the config used for
    logs without a topic-specific one. ``producer_id_expiration_ms`` / ``producer_id_expiration_check_interval_ms``:
    ``producer.id.expiration.ms`` and how often ``cleanup`` looks for expired producer ids. Not thread-safe
    (call from the event loop), except that ``flush_dirty`` may be run in a worker thread.
    """

    def __init__(self, log_dirs: Iterable[Path], default_config: LogConfig, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 producer_id_expiration_check_interval_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
                 ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is required")
        self.default_config = default_config
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._started = False
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._last_producer_expiration_check_ms: int | None = None
        from kbroker.storage.log_dir_failure import LogDirFailureChannel

        #: log dirs that failed (I/O errors); their partitions answer KAFKA_STORAGE_ERROR
        self.failure_channel = LogDirFailureChannel()

    # -- lifecycle ----------------------------------------------------------------------------------

    def startup(self, topic_configs: Mapping[str, LogConfig] | None = None, now_ms: int | None = None) -> None:
        """Load every partition directory of every log dir.

        Removes ``*-delete`` directories, skips ``*-future``/``*-stray`` ones and ``__cluster_metadata-0``, reads the checkpoints, and
        recovers logs when ``.kafka_cleanshutdown`` is absent (the marker is removed once loading is done, so
        a crash while running counts as unclean). Raises ``KafkaError(KAFKA_STORAGE_ERROR)`` if one partition
        is found in two log dirs.
        """
        topic_configs = topic_configs or {}
        futures: list[tuple[Path, Path, bool]] = []
        for root in self.log_dirs:
            root.mkdir(parents=True, exist_ok=True)
            marker = root / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            self.had_clean_shutdown[root] = clean
            recovery_points = _read_checkpoint(root / RECOVERY_POINT_CHECKPOINT)
            hws = _read_checkpoint(root / REPLICATION_OFFSET_CHECKPOINT)
            start_offsets = _read_checkpoint(root / LOG_START_OFFSET_CHECKPOINT)
            for entry in sorted(os.scandir(root), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                name = entry.name
                if name.endswith(DELETE_DIR_SUFFIX):
                    log.info("removing partially deleted log %s", entry.path)
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX):
                    futures.append((root, Path(entry.path), clean))
                    continue
                if name.endswith(STRAY_DIR_SUFFIX):
                    log.warning("leaving %s alone", entry.path)
                    continue
                try:
                    tp = parse_topic_partition(name)
                except ValueError:
                    continue
                if tp[0] == METADATA_TOPIC:
                    continue
                if tp in self._logs:
                    raise KafkaError(
                        ErrorCode.KAFKA_STORAGE_ERROR, f"{name} exists in both {self._log_dir_of[tp]} and {root}"
                    )
                cfg = topic_configs.get(tp[0], self.default_config)
                plog = PartitionLog(
                    Path(entry.path),
                    cfg,
                    recovery_point=recovery_points.get(tp, 0),
                    clean_shutdown=clean,
                    high_watermark=hws.get(tp),
                    log_start_offset=start_offsets.get(tp),
                    now_ms=now_ms,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                    failure_channel=self.failure_channel,
                )
                self._logs[tp] = plog
                self._log_dir_of[tp] = root
            if clean:
                marker.unlink(missing_ok=True)
        for root, path, clean in futures:
            self._settle_future(root, path, clean, topic_configs, now_ms)
        self._started = True
        self.checkpoint()

    def _settle_future(self, root: Path, path: Path, clean: bool, topic_configs: Mapping[str, LogConfig],
                       now_ms: int | None) -> None:
        """A ``-future`` directory found at start-up (AlterReplicaLogDirs cut short by a stop or crash). With the
        partition's log loaded elsewhere the move had not finished: the copy is removed (the move is not resumed;
        the operator asks again). Without it the move had retired the source (``PartitionLog.adopt`` renames the
        source away only once the copy is complete and flushed): the copy becomes the log."""
        try:
            tp = parse_topic_partition(path.name)
        except ValueError:
            log.warning("leaving %s alone", path)
            return
        if tp in self._logs:
            log.info("removing %s: the move of %s-%d to %s did not finish", path, tp[0], tp[1], root)
            shutil.rmtree(path, ignore_errors=True)
            return
        target = root / partition_dir_name(*tp)
        os.replace(path, target)
        fsync_dir(root)
        log.info("completing the move of %s-%d to %s", tp[0], tp[1], root)
        self._logs[tp] = PartitionLog(target, topic_configs.get(tp[0], self.default_config), clean_shutdown=clean,
                                      now_ms=now_ms, producer_id_expiration_ms=self.producer_id_expiration_ms,
                                      failure_channel=self.failure_channel)
        self._log_dir_of[tp] = root

    def new_future_log(self, root: Path, plog: PartitionLog) -> PartitionLog:
        """An empty copy-to-be of ``plog`` in log dir ``root`` (``<topic>-<partition>.<uuid>-future``, not
        registered: the mover fills it and :meth:`complete_move` makes it the log). Raises
        ``KafkaError(KAFKA_STORAGE_ERROR)`` on an I/O error (``root`` goes offline)."""
        self.failure_channel.check(root, f"creating the future log of {plog.topic}-{plog.partition}")
        try:
            return PartitionLog(root / future_dir_name(plog.topic, plog.partition), plog.config,
                                topic_id=plog.topic_id, clean_shutdown=True,
                                producer_id_expiration_ms=self.producer_id_expiration_ms,
                                failure_channel=self.failure_channel)
        except OSError as exc:
            raise self.failure_channel.io_failed(root, f"creating a future log in {root}", exc) from exc

    def complete_move(self, plog: PartitionLog, future: PartitionLog, root: Path) -> Path:
        """Make ``future`` (caught up: same log end offset) the files of ``plog`` in ``root``
        (:meth:`PartitionLog.adopt`); returns the retired directory, which the caller removes
        (:func:`shutil.rmtree`, off the event loop)."""
        retired = plog.adopt(future, root / partition_dir_name(plog.topic, plog.partition))
        self._log_dir_of[(plog.topic, plog.partition)] = root
        return retired

    def mark_strays(self, is_known: Callable[[str, int, bytes | None], bool]) -> list[Path]:
        """Rename every loaded partition directory that ``is_known(topic, partition, topic_id)`` rejects to
        ``<topic>-<partition>.<uuid>-stray`` (as Kafka does), with a WARN line; such directories are never served
        and are skipped at every later start. Returns the new paths."""
        moved: list[Path] = []
        for tp, plog in list(self._logs.items()):
            if is_known(tp[0], tp[1], plog.topic_id):
                continue
            root = self._log_dir_of[tp]
            plog.close()
            new = plog.dir.with_name(f"{plog.dir.name}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}")
            os.rename(plog.dir, new)
            fsync_dir(root)
            del self._logs[tp]
            del self._log_dir_of[tp]
            log.warning("Found stray partition directory %s (its topic or topic id is not in the cluster metadata): "
                        "renamed to %s and not loaded. Delete it once you are sure it is not needed.", plog.dir, new)
            moved.append(new)
        return moved

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker in each dir.

        An offline directory (or one that fails now) gets no checkpoint and no marker: the next start recovers
        it as after a crash."""
        ch = self.failure_channel
        for tp, plog in self._logs.items():
            root = self._log_dir_of.get(tp)
            try:
                if root is not None and ch.is_offline(root):
                    plog.close_without_flush()
                else:
                    plog.close()
            except OSError as exc:
                if root is not None:
                    ch.mark_offline(root, f"closing {tp[0]}-{tp[1]} failed: {exc.strerror or exc}")
                plog.close_without_flush()
        self.checkpoint()
        for root in self.log_dirs:
            if ch.is_offline(root):
                continue
            try:
                write_atomically(root / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as exc:
                ch.mark_offline(root, f"writing the clean-shutdown marker failed: {exc.strerror or exc}")
        self._started = False

    # -- lookup / create / delete -------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def online_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failure_channel.is_offline(d)]

    def _pick_log_dir(self) -> Path:
        online = self.online_log_dirs()
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log directory is offline")
        counts = {d: 0 for d in online}
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        return min(online, key=lambda d: counts[d])

    def get_or_create_log(
        self, topic: str, partition: int, topic_id: bytes | None = None, config: LogConfig | None = None
    ) -> PartitionLog:
        """The existing log, or a new empty one in the log dir holding the fewest partitions.

        For an existing log a given ``config`` replaces its config; a ``topic_id`` that differs from the one
        in ``partition.metadata`` raises ``KafkaError(INCONSISTENT_TOPIC_ID)``. An I/O error creating the log
        takes its directory offline and raises ``KafkaError(KAFKA_STORAGE_ERROR)``."""
        tp = (topic, partition)
        plog = self._logs.get(tp)
        if plog is not None:
            if topic_id is not None and plog.topic_id is not None and plog.topic_id != topic_id:
                raise KafkaError(ErrorCode.INCONSISTENT_TOPIC_ID, f"{topic}-{partition} has another topic id")
            if topic_id is not None and plog.topic_id is None:
                write_partition_metadata(plog.dir, topic_id)
                plog.topic_id = topic_id
            if config is not None and config != plog.config:
                plog.update_config(config)
            return plog
        root = self._pick_log_dir()
        plog = self.new_log(root, topic, partition, topic_id, config)
        self.register(root, plog)
        return plog

    def plan_log_dirs(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Path]:
        """The log dir each new partition will go to (fewest partitions first, counting the ones planned)."""
        online = self.online_log_dirs()
        if not online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "every log directory is offline")
        counts = {d: 0 for d in online}
        for d in self._log_dir_of.values():
            if d in counts:
                counts[d] += 1
        plan: dict[TopicPartition, Path] = {}
        for tp in partitions:
            root = min(online, key=lambda d: counts[d])
            counts[root] += 1
            plan[tp] = root
        return plan

    def new_log(self, root: Path, topic: str, partition: int, topic_id: bytes | None,
                config: LogConfig | None) -> PartitionLog:
        """Create the files of a new empty log under ``root`` without registering it (safe in a worker thread:
        it touches no shared state). I/O errors take ``root`` offline: ``KafkaError(KAFKA_STORAGE_ERROR)``."""
        self.failure_channel.check(root, f"creating the log of {topic}-{partition}")
        try:
            return PartitionLog(
                root / partition_dir_name(topic, partition),
                config or self.default_config,
                topic_id=topic_id,
                clean_shutdown=True,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
                failure_channel=self.failure_channel,
            )
        except OSError as exc:
            raise self.failure_channel.io_failed(root, f"creating the log of {topic}-{partition}", exc) from exc

    def register(self, root: Path, plog: PartitionLog) -> None:
        """Make a log created by :meth:`new_log` part of this manager (event loop only)."""
        tp = (plog.topic, plog.partition)
        self._logs[tp] = plog
        self._log_dir_of[tp] = root

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and delete a partition's log directory. Returns False if there was no such log."""
        tp = (topic, partition)
        plog = self._logs.pop(tp, None)
        self._log_dir_of.pop(tp, None)
        if plog is None:
            return False
        plog.delete()
        return True

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        """Apply a new config to every loaded partition of ``topic``."""
        for (t, _), plog in self._logs.items():
            if t == topic:
                plog.update_config(config)

    # -- periodic work ------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write recovery points, high watermarks and log start offsets of every log to the checkpoint files
        of its log dir."""
        for root in self.log_dirs:
            if self.failure_channel.is_offline(root):
                continue
            rps: dict[TopicPartition, int] = {}
            hws: dict[TopicPartition, int] = {}
            starts: dict[TopicPartition, int] = {}
            for tp, plog in self._logs.items():
                if self._log_dir_of.get(tp) != root:
                    continue
                rps[tp] = plog.recovery_point
                hws[tp] = plog.high_watermark
                starts[tp] = plog.log_start_offset
            try:
                root.mkdir(parents=True, exist_ok=True)
                OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).write(rps)
                OffsetCheckpointFile(root / REPLICATION_OFFSET_CHECKPOINT).write(hws)
                OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).write(starts)
            except OSError as exc:
                self.failure_channel.mark_offline(root, f"writing checkpoints failed: {exc.strerror or exc}")

    def flush_dirty(self, now_ms: int) -> int:
        """``maybe_flush_by_time`` on every log (rolled segments and ``flush.ms``). Returns logs flushed."""
        flushed = 0
        for plog in list(self._logs.values()):
            if plog.closed or self.failure_channel.is_offline(plog.log_dir):
                continue
            try:
                if plog.maybe_flush_by_time(now_ms):
                    flushed += 1
            except KafkaError:
                pass  # the directory went offline (logged by the failure channel)
        return flushed

    def cleanup(self, now_ms: int) -> int:
        """Retention on every log plus purging of segments whose delete delay passed (and, every
        ``producer_id_expiration_check_interval_ms``, ``remove_expired_producers``). Returns segments deleted by
        retention."""
        deleted = 0
        for plog in list(self._logs.values()):
            if plog.closed or self.failure_channel.is_offline(plog.log_dir):
                continue
            try:
                deleted += plog.delete_retention(now_ms)
                plog.purge_deleted(now_ms)
            except KafkaError as exc:
                if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:
                    raise
        last = self._last_producer_expiration_check_ms
        if last is None or now_ms - last >= self.producer_id_expiration_check_interval_ms:
            self.remove_expired_producers(now_ms)
        return deleted

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producer ids idle for ``producer.id.expiration.ms`` from every log. Returns how many."""
        self._last_producer_expiration_check_ms = now_ms
        return sum(p.producer_state.remove_expired_producers(now_ms) for p in self._logs.values() if not p.closed)
