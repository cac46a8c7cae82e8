"""AddRaftVoter (API key 80, KIP-853): make a controller that follows the metadata log as an observer a voter.

On the leader of the metadata quorum the new voter set is appended to the log and the answer waits until it is
committed (``timeout_ms``; ``ack_when_committed`` false answers at once); any other node forwards the request to
the leader's controller listener, as Kafka's brokers forward it to the controller. Errors: INCONSISTENT_CLUSTER_ID
(another cluster's id), DUPLICATE_VOTER, REQUEST_TIMED_OUT (another voter change or the leader's first commit is
pending, or the node has not caught up with the leader), INVALID_REQUEST (no listener),
NOT_LEADER_OR_FOLLOWER (no leader reachable), UNSUPPORTED_VERSION on a node that is a quorum of one.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.messages.add_raft_voter_request import AddRaftVoterRequest
from kbroker.protocol.messages.add_raft_voter_response import AddRaftVoterResponse
from kbroker.server.handlers.raft_common import voter_change

API_KEY = ApiKey.ADD_RAFT_VOTER
VERSIONS = range(0, 2)


async def handle(ctx, request: AddRaftVoterRequest) -> AddRaftVoterResponse:
    from kbroker.protocol.errors import ErrorCode
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import CLUSTER_DENIED_MESSAGE, cluster_denied

    if cluster_denied(ctx, AclOperation.ALTER):  # as Kafka's ControllerApis
        return AddRaftVoterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED_MESSAGE)

    async def change(quorum) -> None:  # noqa: ANN001
        listeners = [(lst.name, lst.host, lst.port) for lst in request.listeners]
        await quorum.add_voter(request.voter_id, bytes(request.voter_directory_id), listeners,
                               max(1, request.timeout_ms) / 1000, wait_commit=request.ack_when_committed)

    code, message = await voter_change(ctx, request, change)
    return AddRaftVoterResponse(error_code=code, error_message=message)

