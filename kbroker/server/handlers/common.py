"""Helpers shared by several handlers (topic name rules, endpoints, auto-creation, authorization checks)."""

from __future__ import annotations

import logging
import re
import time

from kbroker.log_limit import LogLimiter
from kbroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)
#: the authorizer's decisions (Kafka's ``kafka.authorizer.logger``): a denial at INFO, an allowed operation at DEBUG
authorizer_log = logging.getLogger("kbroker.authorizer")
#: an identical denial (same principal, operation, host, resource and request type) is logged at most once per this
#: many seconds; the next line says how many were left out (a client retrying a refused request is no flood)
DENIAL_LOG_INTERVAL_S = 10.0
#: identical denial lines, one per interval
_recent_denials = LogLimiter(DENIAL_LOG_INTERVAL_S)

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def valid_topic_name(name: str) -> bool:
    """Kafka's topic name rule: 1-249 chars of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    return (0 < len(name) <= MAX_TOPIC_NAME_LENGTH and name not in (".", "..")
            and _LEGAL_TOPIC.fullmatch(name) is not None)


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


def broker_endpoints(ctx) -> list[tuple[int, str, int, str | None]]:
    """(node id, host, port, rack) of every unfenced broker on the listener the request came in on."""
    image = ctx.broker.controller.image
    out = []
    for reg in sorted(image.brokers.values(), key=lambda b: b.node_id):
        if reg.fenced:
            continue
        if reg.node_id == ctx.broker.node_id:
            lst = ctx.broker.advertised_listener(ctx.listener_name)
            if lst is not None:
                out.append((reg.node_id, lst.host, lst.port, reg.rack))
                continue
        for ep in reg.endpoints:
            if ep.listener == ctx.listener_name:
                out.append((reg.node_id, ep.host, ep.port, reg.rack))
                break
    return out


def add_produce_leader_hints(ctx, resp) -> None:  # noqa: ANN001
    """KIP-951 (Produce v10+): every partition answered NOT_LEADER_OR_FOLLOWER gets the leader and leader epoch
    this broker's metadata knows (when another broker leads it) in ``CurrentLeader``, and the response those
    leaders' addresses on the request's listener in ``NodeEndpoints``, so that the producer goes to the new leader
    without a metadata round trip."""
    from kbroker.protocol.errors import ErrorCode
    from kbroker.protocol.messages import ProduceResponse

    image = ctx.broker.controller.image
    hinted: set[int] = set()
    for t in resp.responses:
        topic = None
        for pr in t.partition_responses:
            if pr.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                continue
            if topic is None:
                topic = image.topics_by_name.get(t.name) if t.name else image.topics_by_id.get(t.topic_id)
                if topic is None:
                    break
            p = topic.partitions.get(pr.index)
            if p is None or p.leader < 0 or p.leader == ctx.broker.node_id:
                continue
            pr.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=p.leader, leader_epoch=p.leader_epoch)
            hinted.add(p.leader)
    if hinted:
        resp.node_endpoints = [ProduceResponse.NodeEndpoint(node_id=n, host=h, port=port, rack=rack)
                               for n, h, port, rack in broker_endpoints(ctx) if n in hinted]


def auto_create_topics(ctx, names: list[str]) -> set[str]:
    """Create ``names`` with the broker defaults (``num.partitions``, ``default.replication.factor``); returns the
    names whose creation is under way but not yet in this node's committed image (Metadata answers
    LEADER_NOT_AVAILABLE for them, as Kafka's brokers do while auto-creating; clients retry). In a cluster a node
    that is not the active controller has the active one create them (a forwarded CreateTopics)."""
    from kbroker.controller.quorum_controller import CreateTopicSpec
    from kbroker.protocol.errors import KafkaError

    wanted = [n for n in names if valid_topic_name(n) and not is_internal_topic(n) and n != "__cluster_metadata"]
    if not wanted:
        return set()
    broker = ctx.broker
    quorum = broker.metadata_quorum
    if quorum is not None and not broker.controller.is_active:
        for n in wanted:
            quorum.create_topic_soon(n, -1, -1, {})
    else:
        specs = [CreateTopicSpec(name=n, num_partitions=-1, replication_factor=-1, assignments=None, configs={})
                 for n in wanted]
        try:
            broker.controller.create_topics(specs, validate_only=False)
        except KafkaError as exc:  # leadership lost meanwhile: the client asks again
            log.info("auto-creating %s: %s", ", ".join(wanted), exc)
    image = broker.controller.image
    return {n for n in wanted if n not in image.topics_by_name}


def error_message(code: int) -> str | None:
    return None if code == ErrorCode.NONE else ErrorCode(code).name


def client_host(ctx) -> str:  # noqa: ANN001
    """The client's IP address as a string (``""`` when unknown): the ``host`` an authorizer is asked with."""
    peer = getattr(ctx.connection, "peer", None)
    return str(peer[0]) if peer else ""


def principal_of(ctx) -> str:  # noqa: ANN001
    from kbroker.server.authorizer import ANONYMOUS

    return getattr(ctx.connection, "principal", ANONYMOUS)


def authorized_ops(ctx, resource_type: int, name: str, requested: bool) -> int:
    """``*_authorized_operations`` for a response: the caller's operations on the resource when the request
    asked for them, INT32_MIN otherwise (``kbroker.server.authorizer``)."""
    from kbroker.server.authorizer import NOT_REQUESTED, ResourceType, authorized_operations

    if not requested:
        return NOT_REQUESTED
    return authorized_operations(ctx.broker.authorizer, principal_of(ctx), ResourceType(resource_type), name,
                                 client_host(ctx))


def _forwarded_by_node(ctx, authorizer) -> bool:  # noqa: ANN001
    """A request another node forwarded to the active controller (client id ``kbroker-forward-<id>``) was
    authorized there with the client's principal; it passes here when the forwarding node's principal has
    CLUSTER_ACTION, which is what Kafka's controller asks of the sender of an EnvelopeRequest."""
    from kbroker.server.authorizer import CLUSTER_NAME, AclOperation, ResourceType
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    return ctx.client_id.startswith(FORWARDED_PREFIX) and authorizer.authorize(
        principal_of(ctx), AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, client_host(ctx))


def _camel(name: str) -> str:
    """``TRANSACTIONAL_ID`` -> ``TransactionalId`` (Kafka's names of resource types and request types)."""
    return "".join(word.capitalize() for word in name.split("_"))


def log_decision(ctx, allowed: bool, operation: int, resource_type: int, names,  # noqa: ANN001
                 log_denied: bool = True) -> None:
    """One line per resource on the ``kbroker.authorizer`` logger, in the shape of Kafka's authorizer log:
    ``Principal = User:alice is Denied operation = WRITE from host = 127.0.0.1 on resource = Topic:LITERAL:t for
    request = Produce``; a denial at INFO (unless ``log_denied`` is False: a check with a fallback, or a listing
    that only filters), an allowed operation at DEBUG."""
    if allowed:
        if not authorizer_log.isEnabledFor(logging.DEBUG):
            return
        level = logging.DEBUG
    else:
        if not log_denied or not authorizer_log.isEnabledFor(logging.INFO):
            return
        level = logging.INFO
    from kbroker.protocol.api_keys import ApiKey
    from kbroker.server.authorizer import AclOperation, ResourceType

    try:
        request = _camel(ApiKey(ctx.header.api_key).name)
    except ValueError:
        request = str(ctx.header.api_key)
    for name in sorted(names):
        line = (f"Principal = {principal_of(ctx)} is {'Allowed' if allowed else 'Denied'} operation = "
                f"{AclOperation(operation).name} from host = {client_host(ctx) or '?'} on resource = "
                f"{_camel(ResourceType(resource_type).name)}:LITERAL:{name} for request = {request}")
        if not allowed:
            line = _rate_limited(line)
            if line is None:
                continue
        authorizer_log.log(level, "%s", line)


def _rate_limited(line: str) -> str | None:
    """``line`` to log now (with how many identical ones were left out before it), or None within
    ``DENIAL_LOG_INTERVAL_S`` of the last identical one."""
    allowed = _recent_denials.allow(line, time.monotonic())
    if allowed is None:
        return None
    left_out = allowed[0]
    return f"{line} ({left_out} identical denials not logged since the last one)" if left_out else line


def authorize(ctx, operation: int, resource_type: int, name: str, log_denied: bool = True) -> bool:  # noqa: ANN001
    """Whether the caller may perform ``operation`` (an ``AclOperation`` code) on the resource (``ResourceType``
    code, name; ``kafka-cluster`` for the cluster), asked of ``authorizer.class.name`` with the connection's
    principal and the client's IP address. Always true without an authorizer, as in Kafka. A request forwarded
    by another node passes when that node's principal has CLUSTER_ACTION (:func:`_forwarded_by_node`). A denial
    is logged (:func:`log_decision`) unless ``log_denied`` is False (the caller falls back to another check)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    from kbroker.server.authorizer import AclOperation, ResourceType

    allowed = authorizer.authorize(principal_of(ctx), AclOperation(operation), ResourceType(resource_type), name,
                                   client_host(ctx)) or _forwarded_by_node(ctx, authorizer)
    log_decision(ctx, allowed, operation, resource_type, (name,), log_denied)
    return allowed


def authorized_names(ctx, operation: int, resource_type: int, names,  # noqa: ANN001
                     log_denied: bool = True) -> set[str]:
    """The names among ``names`` on which the caller may perform ``operation`` (Kafka's ``filterByAuthorized``;
    each distinct name is asked once). Without an authorizer: all of them. Each denied name is logged
    (:func:`log_decision`) unless ``log_denied`` is False (a listing of everything, filtered to what the caller
    may see, as Kafka's Metadata of all topics and ListGroups do not log)."""
    wanted = set(names)
    authorizer = ctx.broker.authorizer
    if authorizer is None or not wanted:
        return wanted
    from kbroker.server.authorizer import AclOperation, ResourceType

    principal, host = principal_of(ctx), client_host(ctx)
    op, rtype = AclOperation(operation), ResourceType(resource_type)
    allowed = {n for n in wanted if authorizer.authorize(principal, op, rtype, n, host)}
    if len(allowed) < len(wanted) and _forwarded_by_node(ctx, authorizer):
        allowed = wanted
    log_decision(ctx, True, operation, resource_type, allowed)
    if len(allowed) < len(wanted):
        log_decision(ctx, False, operation, resource_type, wanted - allowed, log_denied)
    return allowed


#: Kafka's messages of the authorization errors (``Errors.*.message()``)
AUTHORIZATION_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}

#: config resource type (DescribeConfigs / AlterConfigs codes) -> (ACL resource type, error when denied); the
#: cluster stands for BROKER (4), BROKER_LOGGER (8) and CLIENT_METRICS (16), as in Kafka's ConfigHelper /
#: ControllerApis
_CONFIG_RESOURCES = {2: (2, ErrorCode.TOPIC_AUTHORIZATION_FAILED), 4: (4, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     8: (4, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), 16: (4, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     32: (3, ErrorCode.GROUP_AUTHORIZATION_FAILED)}


def config_resource_denied(ctx, operation: int, config_resource_type: int, name: str) -> int:  # noqa: ANN001
    """The authorization error for DESCRIBE_CONFIGS / ALTER_CONFIGS (``operation``) on a config resource (its
    DescribeConfigs resource type code and name): NONE when allowed (or the type is unknown: the handler answers
    that), else TOPIC_/CLUSTER_/GROUP_AUTHORIZATION_FAILED."""
    from kbroker.server.authorizer import CLUSTER_NAME

    kind = _CONFIG_RESOURCES.get(config_resource_type)
    if kind is None or ctx.broker.authorizer is None:
        return ErrorCode.NONE
    rtype, error = kind
    return ErrorCode.NONE if authorize(ctx, operation, rtype, CLUSTER_NAME if rtype == 4 else name) else error


def refused_config_resources(ctx, operation: int, resources, result_type) -> dict:  # noqa: ANN001
    """AlterConfigs / IncrementalAlterConfigs (``operation`` ALTER_CONFIGS): request index -> ``result_type`` answer
    (error code and Kafka's message, resource type and name) of each resource the caller may not alter
    (:func:`config_resource_denied`); empty without an authorizer. For :func:`answer_refused`."""
    refused = {}
    if ctx.broker.authorizer is not None:
        for i, r in enumerate(resources):
            if code := config_resource_denied(ctx, operation, r.resource_type, r.resource_name):
                refused[i] = result_type(error_code=code, error_message=AUTHORIZATION_MESSAGES[code],
                                         resource_type=r.resource_type, resource_name=r.resource_name)
    return refused


def cluster_authorized(ctx, operation: int, log_denied: bool = True) -> bool:  # noqa: ANN001
    """Whether the caller may perform ``operation`` (an ``AclOperation`` code) on the CLUSTER resource
    (``kafka-cluster``): :func:`authorize` on the cluster (``log_denied`` False for a check with a fallback)."""
    from kbroker.server.authorizer import CLUSTER_NAME

    return authorize(ctx, operation, 4, CLUSTER_NAME, log_denied)


def cluster_denied(ctx, operation: int) -> bool:  # noqa: ANN001
    """True when an authorizer refuses ``operation`` on the cluster to the caller (the handler then answers
    CLUSTER_AUTHORIZATION_FAILED); False at once without an authorizer."""
    return ctx.broker.authorizer is not None and not cluster_authorized(ctx, operation)


CLUSTER_DENIED_MESSAGE = "Cluster authorization failed."


def authorize_any_topic(ctx, operation: int) -> bool:  # noqa: ANN001
    """Whether the caller may perform ``operation`` on some topic (Kafka's ``authorizeByResourceType``, asked by
    InitProducerId without a transactional id; :func:`kbroker.server.authorizer.authorize_any`)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    from kbroker.server.authorizer import AclOperation, ResourceType, authorize_any

    return authorize_any(authorizer, principal_of(ctx), AclOperation(operation), ResourceType.TOPIC,
                         client_host(ctx), ctx.broker.controller.image.topics_by_name)


THROTTLING_QUOTA_MESSAGE = "The throttling quota has been exceeded."


def mutation_quota(ctx, items, strict: bool) -> set:  # noqa: ANN001
    """KIP-599: count the partitions of ``items`` ((key, partitions) in request order) against the caller's
    ``controller_mutation_rate`` (``kbroker.server.client_quotas``); returns the keys refused with
    THROTTLING_QUOTA_EXCEEDED (``strict``: the request version knows that error) and sets the request's throttle
    time. Nothing for a request forwarded by another node (counted there)."""
    quotas = ctx.broker.client_quotas
    if not quotas.has("controller_mutation_rate") or quotas.exempt(ctx, ctx.header.api_key):
        return set()
    principal = getattr(ctx.connection, "principal", "User:ANONYMOUS")
    refused = set()
    for key, partitions in items:
        accepted, ms = quotas.record_mutations(principal, ctx.client_id, max(0, partitions), strict)
        ctx.mutation_throttle_ms = max(ctx.mutation_throttle_ms, ms)
        if not accepted:
            refused.add(key)
    return refused


async def metadata_committed(broker) -> tuple[int, str | None]:
    """In a cluster (``controller.quorum.voters`` with other voters), wait until the metadata this request wrote
    is committed by the quorum; returns ``(error code, message)``: NONE, NOT_CONTROLLER (leadership lost first)
    or REQUEST_TIMED_OUT. A quorum of one commits on its own fsync: always NONE at once."""
    from kbroker.protocol.errors import ErrorCode, KafkaError

    quorum = broker.metadata_quorum
    if quorum is None:
        return ErrorCode.NONE, None
    try:
        await quorum.wait_committed()
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.NONE, None


async def committed_results(ctx, write, n: int, validate_only: bool) -> list[tuple[int, str | None]]:
    """Run a controller write returning ``[(error code, message)]`` per resource and, in a cluster, wait for the
    quorum to commit it; a NOT_CONTROLLER or REQUEST_TIMED_OUT replaces the NONE results."""
    from kbroker.protocol.errors import ErrorCode, KafkaError

    try:
        results = list(write())
    except KafkaError as exc:  # NOT_CONTROLLER: this node does not lead the metadata quorum
        return [(exc.code, exc.message)] * n
    if validate_only:
        return results
    code, message = await metadata_committed(ctx.broker)
    if code:
        results = [(code, message) if c == ErrorCode.NONE else (c, m) for c, m in results]
    return results


async def forward_to_controller(ctx, request):  # noqa: ANN001, ANN201
    """In a cluster, a request for the controller that reached a standby is forwarded to the active controller
    and its answer returned (kbroker/server/metadata_quorum.py); None when this node handles it itself (the
    active controller, a quorum of one, or a request that was already forwarded once: that one gets
    NOT_CONTROLLER from the handler, and the client retries). Raises ``KafkaError(NOT_CONTROLLER)``."""
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    broker = ctx.broker
    quorum = broker.metadata_quorum
    if quorum is None or broker.controller.is_active or ctx.client_id.startswith(FORWARDED_PREFIX):
        return None
    return await quorum.forward(ctx.header.api_key, ctx.api_version, request, ctx.listener_name)


async def answer_refused(ctx, request, field: str, out_field: str, refused: dict, run, empty):  # noqa: ANN001, ANN201
    """Answer a request whose items (``request.<field>``) were authorized here, before any forwarding: ``run(ctx,
    request)`` (which may forward to the active controller) sees only the items not ``refused`` (index -> that
    item's response entry), and the refused entries go back into ``response.<out_field>`` in request order.
    ``run`` must answer one entry per item, in order; ``empty()`` is the response when every item is refused."""
    if not refused:
        return await run(ctx, request)
    items = list(getattr(request, field))
    setattr(request, field, [x for i, x in enumerate(items) if i not in refused])
    resp = await run(ctx, request) if len(refused) < len(items) else empty()
    answered = iter(getattr(resp, out_field))
    setattr(resp, out_field, [refused[i] if i in refused else next(answered) for i in range(len(items))])
    return resp


async def maybe_forward(ctx, request):  # noqa: ANN001, ANN201
    """:func:`forward_to_controller`, or None when it cannot forward (the handler then answers NOT_CONTROLLER
    per resource itself)."""
    from kbroker.protocol.errors import KafkaError

    try:
        return await forward_to_controller(ctx, request)
    except KafkaError:
        return None


def receiving_node(ctx) -> int:  # noqa: ANN001
    """The node a client sent this request to: this one, or for a request another node forwarded to the active
    controller (client id ``kbroker-forward-<node id>``, :meth:`MetadataQuorum.forward`) that node."""
    from kbroker.server.metadata_quorum import FORWARDED_PREFIX

    if ctx.client_id.startswith(FORWARDED_PREFIX):
        tail = ctx.client_id[len(FORWARDED_PREFIX):]
        if tail.isdigit():
            return int(tail)
    return ctx.broker.node_id


async def alter_configs_results(ctx, resources, write,  # noqa: ANN001
                                validate_only: bool) -> list[tuple[int, str | None]]:
    """``(error code, message)`` per resource of an AlterConfigs / IncrementalAlterConfigs, in request order.

    As Kafka's brokers do before they forward such a request (``ConfigAdminManager``), a BROKER resource must name
    the cluster default (``""``) or the broker the client sent it to (:func:`receiving_node`): another id gets
    INVALID_REQUEST "Unexpected broker id, expected <receiver>, but received <name>" (a non-integer name is left
    to the controller: "Node id must be an integer ..."). The other resources go to ``write(kept resources)``
    (the quorum controller's plan; committed as :func:`committed_results`). ``resources``: ``(resource type,
    name, ops)`` tuples."""
    from kbroker.controller.image import BROKER_RESOURCE
    from kbroker.protocol.errors import ErrorCode

    receiver = receiving_node(ctx)
    errors: list[tuple[int, str | None] | None] = []
    for rtype, name, _ in resources:
        if rtype == BROKER_RESOURCE and name.lstrip("-").isdigit() and int(name) != receiver:
            errors.append((ErrorCode.INVALID_REQUEST,
                           f"Unexpected broker id, expected {receiver}, but received {name}"))
        else:
            errors.append(None)
    kept = [r for r, e in zip(resources, errors) if e is None]
    results = iter(await committed_results(ctx, lambda: write(kept), len(kept), validate_only) if kept else ())
    return [e if e is not None else next(results) for e in errors]


def share_offsets_refusal(ctx, group_id: str, operation: int,  # noqa: ANN001
                          need_empty: bool, create: bool = False) -> tuple[int, str | None]:
    """Why the share-group offset APIs (Describe/Alter/DeleteShareGroupOffsets) refuse ``group_id``, checked in
    Kafka's order: UNSUPPORTED_VERSION (``share.version`` not finalized), GROUP_AUTHORIZATION_FAILED (no
    ``operation`` on the group), then the group coordinator's answer (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP when
    ``need_empty``, the coordinator errors); ``(NONE, None)`` when the request may go on. ``create``
    (AlterShareGroupOffsets): an unknown group id becomes an empty share group first, as in Kafka."""
    from kbroker.server.authorizer import ResourceType
    from kbroker.server.share.manager import share_groups_enabled

    broker = ctx.broker
    if not share_groups_enabled(broker):
        return ErrorCode.UNSUPPORTED_VERSION, None
    if broker.authorizer is not None and not authorize(ctx, operation, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if create:
        return broker.group_coordinator.share_group_create_for_offsets(group_id)
    return broker.group_coordinator.share_group_admin_check(group_id, need_empty=need_empty)
