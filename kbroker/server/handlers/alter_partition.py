"""AlterPartition (API key 56), versions 2-3: a partition leader asks the active controller to change the ISR
(KIP-497; topic ids from v2, KIP-841; ``NewIsrWithEpochs`` from v3, KIP-903).

Controller listeners only; sent by brokers (:mod:`kbroker.server.alter_partition_manager`). The active controller
checks the sender's broker epoch (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED) and every partition's leader
epoch and partition epoch (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, ...; see
``QuorumController.alter_partition``), commits a PartitionChangeRecord per changed ISR and answers, once
committed, with each partition's leader, leader epoch, ISR and partition epoch. NOT_CONTROLLER from a node that
is not the active controller; REQUEST_TIMED_OUT when the quorum does not commit in time. With v3 a new member
whose broker epoch is not its registered one is INELIGIBLE_REPLICA (it restarted meanwhile).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import AlterPartitionRequest, AlterPartitionResponse as R

API_KEY = ApiKey.ALTER_PARTITION
VERSIONS = range(2, 4)
LISTENERS = ("controller",)


async def handle(ctx, request: AlterPartitionRequest) -> R:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return await alter_partition(ctx.broker, request, ctx.api_version)


async def alter_partition(broker, request: AlterPartitionRequest, version: int = 3) -> R:
    """Apply ``request`` on this node's controller and wait for the commit (also called in-process by a broker
    that is itself the active controller)."""
    from kbroker.server.handlers import common

    image = broker.controller.latest_image
    changes = []
    stale: set[tuple[bytes, int]] = set()
    for t in request.topics:
        for p in t.partitions:
            if version >= 3:
                isr = [b.broker_id for b in p.new_isr_with_epochs]
                for b in p.new_isr_with_epochs:
                    reg = image.brokers.get(b.broker_id)
                    if b.broker_epoch >= 0 and reg is not None and reg.broker_epoch != b.broker_epoch:
                        stale.add((t.topic_id, p.partition_index))
            else:
                isr = list(p.new_isr)
            changes.append((t.topic_id, p.partition_index, p.leader_epoch, p.partition_epoch, isr))
    try:
        results = broker.controller.alter_partition(request.broker_id, request.broker_epoch,
                                                    [c for c in changes if (c[0], c[1]) not in stale])
    except KafkaError as exc:
        return R(error_code=exc.code)
    code, _ = await common.metadata_committed(broker)
    if code:
        return R(error_code=code)
    it = iter(results)
    resp = R()
    by_topic: dict[bytes, R.TopicData] = {}
    for topic_id, partition, *_ in changes:
        td = by_topic.get(topic_id)
        if td is None:
            td = by_topic[topic_id] = R.TopicData(topic_id=topic_id)
            resp.topics.append(td)
        if (topic_id, partition) in stale:
            td.partitions.append(R.PartitionData(partition_index=partition, error_code=ErrorCode.INELIGIBLE_REPLICA))
            continue
        err, p = next(it)
        pd = R.PartitionData(partition_index=partition, error_code=err)
        if not err and p is not None:
            pd.leader_id, pd.leader_epoch = p.leader, p.leader_epoch
            pd.isr, pd.partition_epoch = list(p.isr), p.partition_epoch
            pd.leader_recovery_state = max(0, p.leader_recovery_state)
        td.partitions.append(pd)
    return resp
