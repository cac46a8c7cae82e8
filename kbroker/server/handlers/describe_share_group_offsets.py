"""DescribeShareGroupOffsets (API key 90), versions 0-1: the share-partition start offsets of share groups
(KIP-932; the Admin client's ``listShareGroupOffsets``, ``kafka-share-groups.sh --describe --offsets``).

Behavior: per group, per requested partition (``Topics`` null: every share partition of the group with a
state): ``StartOffset`` is the share-partition start offset from ``__share_group_state`` (-1 while the
partition has no state yet), ``LeaderEpoch`` the one written with it, and (v1) ``Lag`` the records between the
start offset and the high watermark not yet acknowledged or archived (the high watermark asked of the
partition leader with ListOffsets when that is another node; -1 when unknown or the start offset is -1). Errors: group level
GROUP_AUTHORIZATION_FAILED (no DESCRIBE on the group), the coordinator errors (a group id that is no share group
is answered as one without state, as Kafka does: -1 per named partition, no topics otherwise); partition level UNKNOWN_TOPIC_OR_PARTITION,
TOPIC_AUTHORIZATION_FAILED (no DESCRIBE on the topic). A state kept by another node (the leader of its
``__share_group_state`` partition) is read from it with ReadShareGroupStateSummary; with ``Topics`` null the
partitions are those the group coordinator recorded as initialized (``ShareGroupStatePartitionMetadata``, as
Kafka), and any with a state kept on this node.
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
    if state is None or state.start_offset < 0:
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
        if code and code != ErrorCode.GROUP_ID_NOT_FOUND:  # Kafka answers for any group id (no state: -1)
            out.error_code, out.error_message = code, message
            continue
        if g.topics is None:
            wanted: list[tuple[str, bytes | None, list[int]]] = []
            try:  # the group coordinator's record of the partitions with share state (record 15)
                by_topic = {tid: set(ps) for tid, ps in
                            broker.group_coordinator.share_group_initialized_partitions(g.group_id).items()}
            except KafkaError as exc:
                out.error_code, out.error_message = exc.code, exc.message
                continue
            for tid, p, _ in sc.states_of_group(g.group_id):  # states kept here from before record 15 was written
                by_topic.setdefault(tid, set()).add(p)
            for tid, ps in sorted(by_topic.items()):
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
                if state is not None:
                    pd.start_offset, pd.leader_epoch = state.start_offset, state.leader_epoch
                else:
                    pd.leader_epoch = 0  # Kafka's default leader epoch of a partition without state
                if ctx.api_version >= 1:
                    pd.lag = await _lag(ctx, name, p, state)
        if g.topics is None:
            out.topics = [t for t in out.topics if t.partitions]
    return resp
