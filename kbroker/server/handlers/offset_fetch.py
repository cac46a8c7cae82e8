"""OffsetFetch (API key 9), versions 1-10.

Behavior:
* returns the committed offset, leader epoch and metadata per partition; partitions (and groups) without a
  commit get offset -1 and empty metadata with no error; a null topic list (v2+) means every partition the
  group committed;
* v8+: several groups per request, each answered separately (with its own coordinator error);
* ``RequireStable`` (v7+): a partition with an offset pending in an open transaction gets UNSTABLE_OFFSET_COMMIT;
* answered once every in-sync replica of the group's ``__consumer_offsets`` partition holds what was read (no
  wait when nothing is pending): a client never sees a commit that a leader change could still lose;
  COORDINATOR_NOT_AVAILABLE after ``offsets.commit.timeout.ms``, NOT_COORDINATOR if the leadership moved;
* coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) go to the top-level error (v2-7), to
  every partition (v1) or to the group (v8+).
Version notes:
* v2: top-level error and null topics; v5: committed leader epoch; v6: flexible; v7: require stable;
  v8: groups; v9: member id / epoch, checked for consumer-protocol groups (UNKNOWN_MEMBER_ID,
  STALE_MEMBER_EPOCH); other groups ignore them; v10: topics by topic id, resolved through the metadata image
  (an unknown id gets UNKNOWN_TOPIC_ID on every requested partition) and the response carries the topic ids;
  fetching every partition (null topics) leaves out topics that no longer exist (they have no id).
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import OffsetFetchRequest, OffsetFetchResponse as R
from kbroker.protocol.schema import ZERO_UUID
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.OFFSET_FETCH
VERSIONS = range(1, 11)


def _group_topics(ctx, topics) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def _by_topic(offsets) -> dict[str, list]:
    out: dict[str, list] = {}
    for o in offsets:
        out.setdefault(o.topic, []).append(o)
    return out


def _group_topic(name: str, topic_id: bytes, items) -> R.OffsetFetchResponseTopics:
    return R.OffsetFetchResponseTopics(name=name, topic_id=topic_id, partitions=[
        R.OffsetFetchResponsePartitions(partition_index=o.partition, committed_offset=o.committed_offset,
                                        committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                        error_code=o.error_code) for o in items])


async def _fetch_group_by_ids(ctx, g, require_stable: bool) -> R.OffsetFetchResponseGroup:
    """v10: the requested topics are topic ids; the committed offsets are keyed by name."""
    image = ctx.broker.controller.image
    gc = ctx.broker.group_coordinator
    if g.topics is None:
        error, offsets = await gc.fetch_offsets(g.group_id, None, require_stable)
        out = R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error)
        if error == ErrorCode.NONE:
            for name, items in _by_topic(offsets).items():
                topic = image.topics_by_name.get(name)
                if topic is not None:
                    out.topics.append(_group_topic(name, topic.topic_id, items))
        return out
    resolved: list[tuple[bytes, str | None, list[int]]] = []
    for t in g.topics:
        topic = image.topics_by_id.get(t.topic_id)
        resolved.append((t.topic_id, topic.name if topic is not None else None, list(t.partition_indexes)))
    known = [(name, parts) for _, name, parts in resolved if name is not None]
    error, offsets = await gc.fetch_offsets(g.group_id, known, require_stable)
    out = R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error)
    if error != ErrorCode.NONE:
        return out
    by_topic = _by_topic(offsets)
    for topic_id, name, parts in resolved:
        if name is None:
            out.topics.append(R.OffsetFetchResponseTopics(topic_id=topic_id, partitions=[
                R.OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1, metadata="",
                                                error_code=ErrorCode.UNKNOWN_TOPIC_ID) for p in parts]))
        elif name in by_topic:
            out.topics.append(_group_topic(name, topic_id, by_topic.pop(name)))
    return out


async def handle(ctx, request: OffsetFetchRequest) -> R:
    if ctx.broker.authorizer is None:
        return await _handle(ctx, request)
    return await _handle_authorized(ctx, request)


async def _handle_authorized(ctx, request: OffsetFetchRequest) -> R:
    """As Kafka: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for it); of the listed topics, those the
    caller may not DESCRIBE are not read and answer TOPIC_AUTHORIZATION_FAILED per partition; with all topics
    asked for, those it may not DESCRIBE are left out."""
    version = ctx.api_version
    image = ctx.broker.controller.image
    groups = list(request.groups) if version >= 8 else [request]

    def name_of(t) -> str | None:  # noqa: ANN001
        if version >= 10:
            topic = image.topics_by_id.get(t.topic_id)
            return topic.name if topic is not None else None  # unknown ids answer UNKNOWN_TOPIC_ID
        return t.name

    plan: list[list | None] = []  # per group: None (denied) or the listed topics denied
    for g in groups:
        if not common.authorize(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            plan.append(None)
            continue
        denied: list = []
        if g.topics is not None:
            allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                              [n for t in g.topics if (n := name_of(t)) is not None])
            denied = [t for t in g.topics if (n := name_of(t)) is not None and n not in allowed]
            g.topics = [t for t in g.topics if not any(t is d for d in denied)]
        plan.append(denied)
    if version < 8:
        if plan[0] is None:
            resp = R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
            if version < 2:  # no top-level error: every requested partition carries it
                resp.topics = [R.OffsetFetchResponseTopic(name=t.name, partitions=[
                    R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                                   error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes]) for t in request.topics or []]
            return resp
        resp = await _handle(ctx, request)
        if resp.error_code == ErrorCode.NONE or version < 2:
            _filter_topics(ctx, resp, request.topics is None, plan[0], R.OffsetFetchResponseTopic,
                           R.OffsetFetchResponsePartition, False)
        return resp
    request.groups = [g for g, p in zip(groups, plan) if p is not None]
    answered = iter((await _handle(ctx, request)).groups)
    resp = R()
    for g, denied in zip(groups, plan):
        if denied is None:
            resp.groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id,
                                                          error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        out = next(answered)
        if out.error_code == ErrorCode.NONE:
            _filter_topics(ctx, out, g.topics is None, denied, R.OffsetFetchResponseTopics,
                           R.OffsetFetchResponsePartitions, version >= 10)
        resp.groups.append(out)
    return resp


def _filter_topics(ctx, out, all_topics: bool, denied: list, topic_cls, partition_cls, by_id: bool) -> None:  # noqa: ANN001
    if all_topics:
        allowed = common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                          [t.name for t in out.topics])
        out.topics = [t for t in out.topics if t.name in allowed]
        return
    for t in denied:
        entry = topic_cls(partitions=[partition_cls(partition_index=p, committed_offset=-1, metadata="",
                                                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                      for p in t.partition_indexes])
        if by_id:
            entry.topic_id = t.topic_id
        else:
            entry.name = t.name
        out.topics.append(entry)


async def _handle(ctx, request: OffsetFetchRequest) -> R:
    version = ctx.api_version
    gc = ctx.broker.group_coordinator
    if version >= 8:
        resp = R()
        for g in request.groups:
            error = ErrorCode.NONE
            if version >= 9 and g.group_id:
                # KIP-848: a consumer group member's id and epoch must be current
                error = gc.validate_offset_fetch_member(g.group_id, g.member_id, g.member_epoch)
            if error != ErrorCode.NONE:
                resp.groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error))
                continue
            if version >= 10:
                resp.groups.append(await _fetch_group_by_ids(ctx, g, request.require_stable))
                continue
            error, offsets = await gc.fetch_offsets(g.group_id, _group_topics(ctx, g.topics), request.require_stable)
            out = R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error)
            if error == ErrorCode.NONE:
                for topic, items in _by_topic(offsets).items():
                    out.topics.append(_group_topic(topic, ZERO_UUID, items))
            resp.groups.append(out)
        return resp
    topics = request.topics if version >= 2 else (request.topics or [])
    error, offsets = await gc.fetch_offsets(request.group_id, _group_topics(ctx, topics),
                                      request.require_stable if version >= 7 else False)
    resp = R(error_code=error)
    if error != ErrorCode.NONE:
        if version >= 2 or topics is None:
            return resp
        # v1 has no top-level error: every requested partition carries it
        for t in topics:
            resp.topics.append(R.OffsetFetchResponseTopic(name=t.name, partitions=[
                R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="", error_code=error)
                for p in t.partition_indexes]))
        return resp
    for topic, items in _by_topic(offsets).items():
        resp.topics.append(R.OffsetFetchResponseTopic(name=topic, partitions=[
            R.OffsetFetchResponsePartition(partition_index=o.partition, committed_offset=o.committed_offset,
                                           committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                           error_code=o.error_code) for o in items]))
    return resp
