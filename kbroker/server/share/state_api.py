"""What the share coordinator's inter-broker APIs (KIP-932: Initialize/Read/Write/DeleteShareGroupState,
ReadShareGroupStateSummary, keys 83-87) have in common: CLUSTER_ACTION authorization, and answering per
(topic id, partition) with the share coordinator's errors once the writes are on the in-sync replicas."""

from __future__ import annotations

from typing import Any, Callable

from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.server.authorizer import AclOperation


def denied(ctx) -> bool:  # noqa: ANN001
    from kbroker.server.handlers import common

    return ctx.broker.authorizer is not None and not common.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)


async def per_partition(ctx, request: Any, result_cls: Any, partition_cls: Any,  # noqa: ANN001
                        op: Callable[[str, bytes, Any], Any], writes: bool) -> list[Any]:
    """``op(group, topic id, partition data)`` for each partition of ``request.topics``; returns
    ``result_cls(topic_id, partitions=[partition_cls(...)])`` lists. ``op`` returns an error code or a dict of
    fields to set; KafkaError becomes that partition's error. With ``writes`` each partition's answer waits for
    the replication of its state (COORDINATOR_NOT_AVAILABLE after a timeout)."""
    sc = ctx.broker.share_coordinator
    no_access = denied(ctx)
    out = []
    for t in request.topics:
        res = result_cls(topic_id=t.topic_id)
        out.append(res)
        for p in t.partitions:
            pr = partition_cls(partition=p.partition)
            res.partitions.append(pr)
            if no_access:
                pr.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                continue
            try:
                got = op(request.group_id, t.topic_id, p)
            except KafkaError as exc:
                pr.error_code, pr.error_message = exc.code, exc.message
                continue
            if isinstance(got, dict):
                for name, value in got.items():
                    setattr(pr, name, value)
            elif got:
                pr.error_code = got
                continue
            if writes:
                code = await sc.replicated(request.group_id, t.topic_id, p.partition)
                if code:
                    pr.error_code = code
    return out
