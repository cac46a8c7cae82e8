"""FindCoordinator (API key 10), versions 0-6.

Behavior:
* key type 0 (group): the coordinator of a group is the leader of its partition of ``__consumer_offsets``
  (Java's ``abs(hashCode) % partitions`` of the group id), at its advertised address on the listener the
  request came in on (a single node leads them all). The first lookup creates ``__consumer_offsets``
  (``offsets.topic.num.partitions`` partitions, compacted): through the controller here, or, on a cluster node
  that is not the active controller, with a CreateTopics forwarded to it, answering COORDINATOR_NOT_AVAILABLE
  (clients retry) until the topic is committed; also while the partition has no live leader;
* key type 1 (transaction): the same for ``__transaction_state`` (``transaction.state.log.num.partitions``
  partitions, compacted) and the transactional id;
* key type 2 (share, KIP-932, v6+): the same for ``__share_group_state`` and a share partition's key
  ``group:topicId:partition`` (brokers find the share coordinator; needs CLUSTER_ACTION); a key of another form,
  or an older version, is INVALID_REQUEST;
* other key types: INVALID_REQUEST;
Version notes:
* v1: KeyType, ErrorMessage; v3: flexible; v4+: batched ``CoordinatorKeys`` answered per key.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.coordinator.runtime import partition_for
from kbroker.coordinator.service_support import create_internal_topic, internal_topic_replication
from kbroker.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse as R
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.FIND_COORDINATOR
VERSIONS = range(0, 7)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def _valid_share_key(key: str) -> bool:
    """``group:topicId:partition`` with a base64 topic id and a partition number (Kafka's SharePartitionKey)."""
    import base64

    group, _, rest = key.partition(":")
    tid, _, partition = rest.partition(":")
    try:
        return bool(group) and len(base64.urlsafe_b64decode(tid + "==")) == 16 and int(partition) >= 0
    except ValueError:
        return False


def _find(ctx, key_type: int, key: str) -> tuple[int, int, str, int]:
    """(error, node id, host, port) for one key: the leader of the key's partition of the coordinator's topic,
    at its address on the listener the request came in on."""
    broker = ctx.broker
    if broker.authorizer is not None:  # DESCRIBE on the group / transactional id, as Kafka's getCoordinator
        if key_type == KEY_TYPE_GROUP and not common.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, "", -1
        if key_type == KEY_TYPE_TRANSACTION and not common.authorize(ctx, AclOperation.DESCRIBE,
                                                                     ResourceType.TRANSACTIONAL_ID, key):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "", -1
        if key_type == KEY_TYPE_SHARE and not common.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1, "", -1
    if key_type == KEY_TYPE_GROUP:
        coordinator = broker.group_coordinator
    elif key_type == KEY_TYPE_TRANSACTION:
        coordinator = broker.transaction_coordinator
    elif key_type == KEY_TYPE_SHARE and ctx.api_version >= 6 and _valid_share_key(key):
        coordinator = broker.share_coordinator
    else:
        return ErrorCode.INVALID_REQUEST, -1, "", -1
    name, partitions, replication, configs = coordinator.internal_topic_spec()
    controller = broker.controller
    quorum = broker.metadata_quorum
    if name not in controller.image.topics_by_name:
        if quorum is not None and not controller.is_active:
            # a cluster node that is not the active controller: the active one creates it (forwarded
            # CreateTopics); meanwhile the client retries, as with Kafka's brokers
            quorum.create_topic_soon(name, partitions, internal_topic_replication(controller, replication), configs)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        error = create_internal_topic(controller, name, partitions, replication, configs)
        if error:
            return error, -1, "", -1
    topic = controller.image.topics_by_name.get(name)
    if topic is None or not topic.partitions:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1  # created, not yet committed
    part = topic.partitions.get(partition_for(key, len(topic.partitions)))
    leader = part.leader if part is not None else -1
    if leader == broker.node_id:
        listener = broker.advertised_listener(ctx.listener_name)
        if listener is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        return ErrorCode.NONE, leader, listener.host, listener.port
    reg = controller.image.brokers.get(leader) if leader >= 0 else None
    ep = reg.endpoint(ctx.listener_name) if reg is not None and not reg.fenced else None
    if ep is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return ErrorCode.NONE, leader, ep.host, ep.port


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
