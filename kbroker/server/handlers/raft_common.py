"""Shared by the handlers of the metadata quorum's own APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, the Raft
Fetch of ``__cluster_metadata``): hand the request to this node's Raft replica
(:class:`~kbroker.server.metadata_quorum.MetadataQuorum`), or, on a node whose quorum is itself alone, refuse
it with INCONSISTENT_VOTER_SET (the sender counts this node as a voter; this node does not). With an authorizer the
sender needs CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as Kafka's ``ControllerApis``."""

from __future__ import annotations

from typing import Any

from kbroker.protocol.errors import ErrorCode, KafkaError


async def to_quorum(ctx, request: Any) -> Any:
    from kbroker.server.raft_manager import _error_response

    if ctx.broker.authorizer is not None:
        from kbroker.server.authorizer import AclOperation
        from kbroker.server.handlers.common import cluster_authorized

        if not cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
            return _error_response(request, KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                       "Cluster authorization failed."))
    quorum = ctx.broker.metadata_quorum
    if quorum is None or quorum.manager is None:
        return _error_response(request, KafkaError(ErrorCode.INCONSISTENT_VOTER_SET,
                                                   f"node {ctx.broker.node_id} is not in a metadata quorum"))
    return await quorum.manager.handle_request(request, ctx.header.correlation_id)


async def voter_change(ctx, request: Any, change: Any) -> tuple[int, str | None]:
    """AddRaftVoter / RemoveRaftVoter: on the quorum's leader run ``change(quorum)``; elsewhere forward the request
    to the leader (once: a forwarded request that finds no leader gets NOT_LEADER_OR_FOLLOWER). Returns
    ``(error code, message)``."""
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    quorum = ctx.broker.metadata_quorum
    # checked first, as Kafka; only a null id is not checked ("" is another cluster's)
    if request.cluster_id is not None and request.cluster_id != ctx.broker.controller.cluster_id:
        return ErrorCode.INCONSISTENT_CLUSTER_ID, f"this is cluster {ctx.broker.controller.cluster_id}"
    if quorum is None or quorum.client is None:
        return ErrorCode.UNSUPPORTED_VERSION, (f"node {ctx.broker.node_id} is a quorum of one: its voters cannot "
                                               f"change (start the cluster with controller.quorum.voters)")
    if not quorum.client.is_leader:
        if ctx.client_id.startswith(FORWARDED_PREFIX):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {ctx.broker.node_id} is not the quorum's leader"
        try:
            resp = await quorum.forward(ctx.header.api_key, ctx.api_version, request, ctx.listener_name)
        except KafkaError as exc:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, exc.message
        return resp.error_code, resp.error_message
    try:
        await change(quorum)
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.NONE, None
