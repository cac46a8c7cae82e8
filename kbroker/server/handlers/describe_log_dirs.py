"""DescribeLogDirs (API key 35), versions 1-5.

Behavior: one result per ``log.dirs`` entry (absolute path) with the partitions stored there: size in bytes
of their live segments, ``OffsetLag`` 0 (a leader's log end offset is never behind its high watermark) and
``IsFutureKey`` false; a replica being moved to another directory (AlterReplicaLogDirs) is also listed under
its destination with ``IsFutureKey`` true, the size of its copy and, as ``OffsetLag``, how far the copy is
behind the log end offset. ``Topics`` null lists every
partition; otherwise only the named partitions found in a directory. A directory that is offline (an I/O
error took it down, see ``kbroker.storage.log_dir_failure``) or cannot be read gets KAFKA_STORAGE_ERROR and
no partitions, as Kafka reports an offline log dir.
Version notes: v2 flexible; v3 top-level ErrorCode; v4 TotalBytes/UsableBytes (from the file system);
v5 IsCordoned (always false).
"""

from __future__ import annotations

import os
import shutil

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse as R

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
VERSIONS = range(1, 6)


async def handle(ctx, request: DescribeLogDirsRequest) -> R:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.DESCRIBE):  # as Kafka: no results (and the error from v3)
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    lm = ctx.broker.log_manager
    wanted = None if request.topics is None else {(t.topic, p) for t in request.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list[R.DescribeLogDirsPartition]]] = {}
    for plog in lm.all_logs():
        if plog.closed or (wanted is not None and (plog.topic, plog.partition) not in wanted):
            continue
        root = lm.log_dir_of(plog.topic, plog.partition)
        if root is None:
            continue
        lag = max(0, plog.high_watermark - plog.log_end_offset)
        by_dir.setdefault(os.path.abspath(root), {}).setdefault(plog.topic, []).append(
            R.DescribeLogDirsPartition(partition_index=plog.partition, partition_size=plog.size_in_bytes,
                                       offset_lag=lag, is_future_key=False))
    for (topic, partition), move in ctx.broker.log_dir_mover.moves.items():
        if wanted is not None and (topic, partition) not in wanted:
            continue
        future = move.future
        by_dir.setdefault(os.path.abspath(move.root), {}).setdefault(topic, []).append(
            R.DescribeLogDirsPartition(partition_index=partition, partition_size=future.size_in_bytes,
                                       offset_lag=max(0, move.plog.log_end_offset - future.log_end_offset),
                                       is_future_key=True))
    resp = R()
    for root in lm.log_dirs:
        path = os.path.abspath(root)
        result = R.DescribeLogDirsResult(log_dir=path)
        if lm.failure_channel.is_offline(path):
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            resp.results.append(result)
            continue
        try:
            usage = shutil.disk_usage(path)
            result.total_bytes, result.usable_bytes = usage.total, usage.free
        except OSError:
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        topics = by_dir.get(path, {})
        result.topics = [R.DescribeLogDirsTopic(name=name, partitions=sorted(parts, key=lambda p: p.partition_index))
                         for name, parts in sorted(topics.items())]
        resp.results.append(result)
    return resp
