"""DescribeShareGroupOffsets (API key 90), versions 0-1: the share-partition start offsets of share groups
(KIP-932; the Admin client's ``listShareGroupOffsets``, ``kafka-share-groups.sh --describe --offsets``).

Behavior: per group, per requested partition (``Topics`` null: every share partition of the group with a
state): ``StartOffset`` is the share-partition start offset from ``__share_group_state`` (-1 while the
partition has no state yet), ``LeaderEpoch`` the one written with it, and (v1) ``Lag`` the records between the
start offset and the high watermark not yet acknowledged or archived (the high watermark asked of the
partition leader with ListOffsets when that is another node; -1 when unknown). Errors: group level
GROUP_ID_NOT_FOUND (no share group of that id), GROUP_AUTHORIZATION_FAILED (no DESCRIBE on the group), the
coordinator errors; partition level UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_AUTHORIZATION_FAILED (no DESCRIBE on the topic). A state kept by another node (the leader of its
``__share_group_state`` partition) is read from it with ReadShareGroupStateSummary; with ``Topics`` null the
partitions are those with a state on this node and every partition of the topics the group's members subscribe to.
Version notes: v1 adds ``Lag``.
"""

from __future__ import annotations

from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode, KafkaError
from kbroker.protocol.messages import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse
from kbroker.server.authorizer import AclOperation, ResourceType
from kbroker.server.handlers import common

API_KEY = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
VERSIONS = range(0, 2)

Resp = DescribeShareGroupOffsetsResponse


async def _lag(ctx, topic: str, partition: int, state) -> int:  # noqa: ANN001
    """High watermark - start offset - delivery-complete records; the high watermark from this node's replica when
    it leads the partition, else from the leader (ListOffsets). -1 when not known."""
    if state is None:
        return -1
    broker = ctx.broker
    try:
        part = broker.replica_manager.get_partition(topic, partition)
    except KafkaError:
        part = None
    try:
        if part is not None and part.is_leader:
            end = part.high_watermark
        else:
            t = broker.controller.image.topics_by_name.get(topic)
            pr = t.partitions.get(partition) if t is not None else None
            if pr is None or pr.leader < 0 or pr.leader == broker.node_id:
                return -1
            end = await broker.share_persister.latest_offset(topic, partition, pr.leader)
    except KafkaError:
        return -1
    return max(0, end - state.start_offset - max(state.delivery_complete, 0))


async def handle(ctx, request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    broker = ctx.broker
    sc = broker.share_coordinator
    image = broker.controller.image
    resp = Resp()
    for g in request.groups:
        out = Resp.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id)
        resp.groups.append(out)
        code, message = common.share_offsets_refusal(ctx, g.group_id, AclOperation.DESCRIBE, need_empty=False)
        if code:
            out.error_code, out.error_message = code, message
            continue
        optional: set[tuple[bytes, int]] = set()
        if g.topics is None:
            wanted: list[tuple[str, bytes | None, list[int]]] = []
            by_topic: dict[bytes, list[int]] = {}
            for tid, p, _ in sc.states_of_group(g.group_id):
                by_topic.setdefault(tid, []).append(p)
            # states kept by other nodes: the partitions of the topics the members subscribe to (listed only
            # when they have a state)
            for name in broker.group_coordinator.share_group_subscribed_topics(g.group_id):
                t = image.topics_by_name.get(name)
                if t is not None:
                    known = set(by_topic.get(t.topic_id, []))
                    extra = [p for p in t.partitions if p not in known]
                    by_topic.setdefault(t.topic_id, []).extend(extra)
                    optional.update((t.topic_id, p) for p in extra)
            for tid, ps in by_topic.items():
                t = image.topics_by_id.get(tid)
                if t is not None:
                    wanted.append((t.name, tid, sorted(ps)))
        else:
            wanted = []
            for rt in g.topics:
                t = image.topics_by_name.get(rt.topic_name)
                wanted.append((rt.topic_name, t.topic_id if t is not None else None, list(rt.partitions)))
        denied: set[str] = set()
        if broker.authorizer is not None:
            names = [name for name, _, _ in wanted]
            denied = set(names) - common.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        for name, tid, partitions in wanted:
            topic = Resp.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid or b"\0" * 16)
            out.topics.append(topic)
            t = image.topics_by_id.get(tid) if tid is not None else None
            for p in partitions:
                pd = Resp.DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=-1,
                                                                     leader_epoch=-1, lag=-1)
                topic.partitions.append(pd)
                if name in denied:
                    pd.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    continue
                if t is None or p not in t.partitions:
                    pd.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:  # here, or from the node keeping the state (ReadShareGroupStateSummary)
                    state = await broker.share_persister.summary(g.group_id, tid, p) if sc.topic_exists() else None
                except KafkaError as exc:
                    pd.error_code = exc.code
                    continue
                if state is None and (tid, p) in optional:
                    topic.partitions.pop()
                    continue
                if state is not None:
                    pd.start_offset, pd.leader_epoch = state.start_offset, state.leader_epoch
                if ctx.api_version >= 1:
                    pd.lag = await _lag(ctx, name, p, state)
        if g.topics is None:
            out.topics = [t for t in out.topics if t.partitions]
    return resp
