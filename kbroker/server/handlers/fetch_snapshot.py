"""FetchSnapshot (API key 59): a replica of the metadata quorum whose fetch offset is below the leader's log start
offset fetches the leader's latest snapshot of ``__cluster_metadata`` in chunks (KIP-630).

Controller listeners only (``LISTENERS``); answered by this node's Raft replica
(kbroker/server/metadata_quorum.py): NOT_LEADER_OR_FOLLOWER off the leader, FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH for another epoch, SNAPSHOT_NOT_FOUND for a snapshot the leader no longer has,
POSITION_OUT_OF_RANGE past its end, INCONSISTENT_CLUSTER_ID for another cluster's request,
INCONSISTENT_VOTER_SET on a node that is not in a quorum with others.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages.fetch_snapshot_request import FetchSnapshotRequest
from kbroker.protocol.messages.fetch_snapshot_response import FetchSnapshotResponse
from kbroker.server.handlers.raft_common import to_quorum

API_KEY = ApiKey.FETCH_SNAPSHOT
VERSIONS = range(0, 2)
LISTENERS = ("controller",)


async def handle(ctx, request: FetchSnapshotRequest) -> FetchSnapshotResponse:
    return await to_quorum(ctx, request)
