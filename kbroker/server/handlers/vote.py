"""Vote (API key 52): a (pre-)vote request from a voter that wants to lead (KIP-595, KIP-996).

Controller listeners only (``LISTENERS``); answered by this node's Raft replica
(kbroker/server/metadata_quorum.py), INCONSISTENT_VOTER_SET on a node that is not in a quorum with others,
INCONSISTENT_CLUSTER_ID for another cluster's request.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import VoteRequest, VoteResponse
from kbroker.server.handlers.raft_common import to_quorum

API_KEY = ApiKey.VOTE
VERSIONS = range(0, 3)
LISTENERS = ("controller",)


async def handle(ctx, request: VoteRequest) -> VoteResponse:
    return await to_quorum(ctx, request)
