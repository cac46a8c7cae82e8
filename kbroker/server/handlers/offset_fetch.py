"""OffsetFetch (API key 9), versions 1-9 (v10, topic ids, is not advertised).

Behavior:
* returns the committed offset, leader epoch and metadata per partition; partitions (and groups) without a
  commit get offset -1 and empty metadata with no error; a null topic list (v2+) means every partition the
  group committed;
* v8+: several groups per request, each answered separately (with its own coordinator error);
* ``RequireStable`` (v7+) never waits: there are no pending transactional offsets yet;
* coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) go to the top-level error (v2-7), to
  every partition (v1) or to the group (v8+).
Version notes:
* v2: top-level error and null topics; v5: committed leader epoch; v6: flexible; v7: require stable;
  v8: groups; v9: member id / epoch, checked for consumer-protocol groups (UNKNOWN_MEMBER_ID,
  STALE_MEMBER_EPOCH); other groups ignore them.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import OffsetFetchRequest, OffsetFetchResponse as R

API_KEY = ApiKey.OFFSET_FETCH
VERSIONS = range(1, 10)


def _group_topics(ctx, topics) -> list[tuple[str, list[int]]] | None:
    if topics is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in topics]


def _by_topic(offsets) -> dict[str, list]:
    out: dict[str, list] = {}
    for o in offsets:
        out.setdefault(o.topic, []).append(o)
    return out


async def handle(ctx, request: OffsetFetchRequest) -> R:
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
            error, offsets = gc.fetch_offsets(g.group_id, _group_topics(ctx, g.topics), request.require_stable)
            out = R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error)
            if error == ErrorCode.NONE:
                for topic, items in _by_topic(offsets).items():
                    out.topics.append(R.OffsetFetchResponseTopics(name=topic, partitions=[
                        R.OffsetFetchResponsePartitions(partition_index=o.partition, committed_offset=o.committed_offset,
                                                        committed_leader_epoch=o.leader_epoch, metadata=o.metadata,
                                                        error_code=o.error_code) for o in items]))
            resp.groups.append(out)
        return resp
    topics = request.topics if version >= 2 else (request.topics or [])
    error, offsets = gc.fetch_offsets(request.group_id, _group_topics(ctx, topics),
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
