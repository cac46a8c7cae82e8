"""UpdateRaftVoter (API key 82, KIP-853): a voter that restarted with other controller listeners asks the leader
to record its new endpoints in the voter set (sent by kbroker's own controllers, see
:meth:`kbroker.server.metadata_quorum.MetadataQuorum._announce_endpoints`).

Controller listeners only. On the leader the changed voter set is appended and the answer waits until it is
committed; elsewhere NOT_LEADER_OR_FOLLOWER naming the leader this node knows (the voter asks it directly).
Errors: INCONSISTENT_CLUSTER_ID, FENCED_LEADER_EPOCH for an older epoch, VOTER_NOT_FOUND (not a voter, or another
directory id), REQUEST_TIMED_OUT (another change pending), INVALID_REQUEST (no listener), UNSUPPORTED_VERSION on a
quorum of one.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages.update_raft_voter_request import UpdateRaftVoterRequest
from kbroker.protocol.messages.update_raft_voter_response import UpdateRaftVoterResponse

API_KEY = ApiKey.UPDATE_RAFT_VOTER
VERSIONS = range(0, 1)
LISTENERS = ("controller",)


async def handle(ctx, request: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    from kbroker.server.authorizer import AclOperation
    from kbroker.server.handlers.common import cluster_denied

    if cluster_denied(ctx, AclOperation.CLUSTER_ACTION):  # as Kafka's ControllerApis
        return UpdateRaftVoterResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    quorum = ctx.broker.metadata_quorum
    resp = UpdateRaftVoterResponse()
    if quorum is None or quorum.client is None:
        resp.error_code = ErrorCode.UNSUPPORTED_VERSION
        return resp
    cl = quorum.client
    resp.current_leader = UpdateRaftVoterResponse.CurrentLeader(leader_id=cl.leader_id, leader_epoch=cl.epoch)
    ep = quorum.endpoint(cl.leader_id) if cl.leader_id >= 0 and cl.leader_id != quorum.node_id else (
        quorum._own_controller_endpoint() if cl.leader_id == quorum.node_id else None)
    if ep is not None:
        resp.current_leader.host, resp.current_leader.port = ep
    if request.cluster_id and request.cluster_id != ctx.broker.controller.cluster_id:
        resp.error_code = ErrorCode.INCONSISTENT_CLUSTER_ID
    elif request.current_leader_epoch < cl.epoch:
        resp.error_code = ErrorCode.FENCED_LEADER_EPOCH
    elif not cl.is_leader:
        resp.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    else:
        try:
            await quorum.update_voter(request.voter_id, bytes(request.voter_directory_id),
                                      [(lst.name, lst.host, lst.port) for lst in request.listeners],
                                      quorum.request_timeout_s)
        except KafkaError as exc:
            resp.error_code = exc.code
    return resp
