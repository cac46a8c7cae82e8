"""Shared by the handlers of the metadata quorum's own APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, the Raft
Fetch of ``__cluster_metadata``): hand the request to this node's Raft replica
(:class:`~kbroker.server.metadata_quorum.MetadataQuorum`), or, on a node whose quorum is itself alone, refuse
it with INCONSISTENT_VOTER_SET (the sender counts this node as a voter; this node does not)."""

from __future__ import annotations

from typing import Any

from kbroker.protocol.errors import ErrorCode, KafkaError


async def to_quorum(ctx, request: Any) -> Any:
    from kbroker.server.raft_manager import _error_response

    quorum = ctx.broker.metadata_quorum
    if quorum is None or quorum.manager is None:
        return _error_response(request, KafkaError(ErrorCode.INCONSISTENT_VOTER_SET,
                                                   f"node {ctx.broker.node_id} is not in a metadata quorum"))
    return await quorum.manager.handle_request(request, ctx.header.correlation_id)
