"""EndQuorumEpoch (API key 54): a leader that resigns names its preferred successors (KIP-595).

Controller listeners only (``LISTENERS``); answered by this node's Raft replica
(kbroker/server/metadata_quorum.py), INCONSISTENT_VOTER_SET on a node that is not in a quorum with others,
INCONSISTENT_CLUSTER_ID for another cluster's request.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages import EndQuorumEpochRequest, EndQuorumEpochResponse
from kbroker.server.handlers.raft_common import to_quorum

API_KEY = ApiKey.END_QUORUM_EPOCH
VERSIONS = range(0, 2)
LISTENERS = ("controller",)


async def handle(ctx, request: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
    return await to_quorum(ctx, request)
