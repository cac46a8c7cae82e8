"""AlterReplicaLogDirs (API key 34), versions 1-2 (KIP-113): move replicas of this broker to another of its
``log.dirs`` while they are written.

Behavior: per partition, ``Path`` must be one of this broker's ``log.dirs`` (compared as absolute paths) else
LOG_DIR_NOT_FOUND; an offline directory gives KAFKA_STORAGE_ERROR; a partition the metadata does not have
UNKNOWN_TOPIC_OR_PARTITION (as Kafka); one this broker does not host NOT_LEADER_OR_FOLLOWER (as Kafka, which also answers so for a replica it will only create later). Otherwise NONE
and the move runs in the background (``kbroker.server.log_dir_mover``): nothing to do when the replica is there
already, a move to another directory in progress is replaced. DescribeLogDirs shows the copy as a future replica
with its lag until the swap. Without ALTER on the cluster every partition gets CLUSTER_AUTHORIZATION_FAILED.
Version notes: v2 flexible.
"""

from __future__ import annotations

import os
from pathlib import Path

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse as R

API_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS
VERSIONS = range(1, 3)


async def handle(ctx, request: AlterReplicaLogDirsRequest) -> R:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    denied = cluster_denied(ctx, AclOperation.ALTER)
    broker = ctx.broker
    lm = broker.log_manager
    roots = {os.path.abspath(str(d)): Path(d) for d in lm.log_dirs}
    results: dict[str, R.AlterReplicaLogDirTopicResult] = {}
    for d in request.dirs:
        root = roots.get(os.path.abspath(d.path)) if d.path else None
        for t in d.topics:
            result = results.setdefault(t.name, R.AlterReplicaLogDirTopicResult(topic_name=t.name))
            for p in t.partitions:
                if denied:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif root is None:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                elif lm.failure_channel.is_offline(root):
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                else:
                    part = broker.replica_manager.partitions.get((t.name, p))
                    if part is None and not _in_metadata(broker, t.name, p):
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif part is None or part.log.closed:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        try:
                            broker.log_dir_mover.request(part.log, root)
                            code = ErrorCode.NONE
                        except KafkaError as exc:
                            code = exc.code
                result.partitions.append(R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code))
    return R(results=list(results.values()))


def _in_metadata(broker, topic: str, partition: int) -> bool:  # noqa: ANN001
    known = broker.controller.image.topics_by_name.get(topic)
    return known is not None and partition in known.partitions
