"""RemoveRaftVoter (API key 81, KIP-853): remove a voter (node id and directory id) from the metadata quorum.

On the leader the new voter set is appended to the log and the answer waits until it is committed (the request
timeout of the quorum); a leader that removed itself resigns once it is. Any other node forwards the request to
the leader. Errors: INCONSISTENT_CLUSTER_ID, VOTER_NOT_FOUND (not a voter, or another directory id),
REQUEST_TIMED_OUT (another change pending, or no commit in time), INVALID_REQUEST (the last voter, or the leader
of a quorum of two removing itself), NOT_LEADER_OR_FOLLOWER, UNSUPPORTED_VERSION on a quorum of one.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages.remove_raft_voter_request import RemoveRaftVoterRequest
from kbroker.protocol.messages.remove_raft_voter_response import RemoveRaftVoterResponse
from kbroker.server.handlers.raft_common import voter_change

API_KEY = ApiKey.REMOVE_RAFT_VOTER
VERSIONS = range(0, 1)


async def handle(ctx, request: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import CLUSTER_DENIED_MESSAGE, cluster_denied

    if cluster_denied(ctx, AclOperation.ALTER):  # as Kafka's ControllerApis
        return RemoveRaftVoterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED_MESSAGE)

    async def change(quorum) -> None:  # noqa: ANN001
        await quorum.remove_voter(request.voter_id, bytes(request.voter_directory_id), quorum.request_timeout_s)

    code, message = await voter_change(ctx, request, change)
    return RemoveRaftVoterResponse(error_code=code, error_message=message)
