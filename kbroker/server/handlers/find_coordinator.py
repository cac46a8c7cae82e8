"""FindCoordinator (API key 10), versions 0-6.

Behavior:
* key type 0 (group): the group coordinator of every group is this node (a single node leads every partition
  of ``__consumer_offsets``). The first lookup creates ``__consumer_offsets`` through the controller
  (``offsets.topic.num.partitions`` partitions, compacted); if that fails the answer is
  COORDINATOR_NOT_AVAILABLE, which clients retry;
* key type 1 (transaction): this node as well; the first lookup creates ``__transaction_state``
  (``transaction.state.log.num.partitions`` partitions, compacted), COORDINATOR_NOT_AVAILABLE if that fails;
* other key types (2 = share groups, not served): INVALID_REQUEST;
* the endpoint is this node's advertised address on the listener the request came in on.
Version notes:
* v1: KeyType, ErrorMessage; v3: flexible; v4+: batched ``CoordinatorKeys`` answered per key.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse as R

API_KEY = ApiKey.FIND_COORDINATOR
VERSIONS = range(0, 7)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _find(ctx, key_type: int, key: str) -> tuple[int, int, str, int]:
    """(error, node id, host, port) for one key."""
    if key_type == KEY_TYPE_GROUP:
        error = ctx.broker.group_coordinator.ensure_offsets_topic()
        if error:
            return error, -1, "", -1
    elif key_type == KEY_TYPE_TRANSACTION:
        error = ctx.broker.transaction_coordinator.ensure_topic()
        if error:
            return error, -1, "", -1
    else:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    listener = ctx.broker.advertised_listener(ctx.listener_name)
    if listener is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, ctx.broker.node_id, listener.host, listener.port


async def handle(ctx, request: FindCoordinatorRequest) -> R:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else KEY_TYPE_GROUP
    if version >= 4:
        resp = R()
        for key in request.coordinator_keys:
            error, node, host, port = _find(ctx, key_type, key)
            resp.coordinators.append(R.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=error,
                error_message=None if error == ErrorCode.NONE else ErrorCode(error).name))
        return resp
    error, node, host, port = _find(ctx, key_type, request.key)
    return R(error_code=error, error_message=None if error == ErrorCode.NONE else ErrorCode(error).name,
             node_id=node, host=host, port=port)
