"""The request sequences of the protocol differential (:mod:`kbroker.testing.differential`).

* :func:`valid_sequences`: for every API key and every version that the reference Kafka advertises (its own
  ApiVersions answer, :func:`advertised_versions`), a valid request built from the spec: :func:`fill` gives every
  field of that version a sensible value (the shared topic, the sequence's own group, a transactional id, the
  producer id / member id / generation an earlier step captured), and :data:`BUILDERS` adds the steps an API needs
  before it (a JoinGroup before a SyncGroup, an InitProducerId before AddPartitionsToTxn, a topic of its own for
  DeleteTopics, ...).
* :func:`invalid_sequences`: unknown topics and groups, unsupported versions, bad acks, oversized, truncated and
  malformed frames, unknown API keys, wrong epochs and generations.
* :func:`refused_sequences`: every API key of the specs that the reference does not advertise on its client
  listener (controller-only and removed APIs): both brokers must refuse it the same way.
* :func:`sasl_sequences`: authentication failures and misuse on a SASL_PLAINTEXT listener; with
  :func:`~kbroker.testing.differential.differential_denied` the valid sequences sent by a user without ACLs.

:func:`setup` runs once per broker before the sequences: the shared topics (``T`` with 2 partitions and 3 records in
partition 0, ``TP`` for produce, ``TC`` for config changes), the group and transaction coordinators warmed up
(Kafka creates ``__consumer_offsets`` / ``__transaction_state`` on first use), and the topic ids.
"""

from __future__ import annotations

import dataclasses
import secrets
import struct
import threading
import time
from typing import Any, Callable

from kbroker.protocol import codec
from kbroker.protocol import messages as m
from kbroker.protocol.api_keys import REQUESTS, ApiKey
from kbroker.protocol.headers import encode_request_header
from kbroker.protocol.records import build_batch
from kbroker.protocol.schema import in_range
from kbroker.testing.differential import CLIENT_ID, Ctx, Sequence, Step, Target, Conn, decode_response, _one

K = ApiKey
#: record timestamps: the same batches on both brokers, and recent (midnight UTC of the day the module loads), so
#: that time-based retention (7 days by default; Kafka's first check runs 30 s after start) deletes nothing
TS = int(time.time() // 86_400) * 86_400_000


@dataclasses.dataclass
class Names:
    """Names a run uses: the same on both brokers. ``prefix`` keeps runs against long-lived brokers apart."""

    prefix: str = dataclasses.field(default_factory=lambda: "pd" + secrets.token_hex(3))

    @property
    def topic(self) -> str:
        return f"{self.prefix}-t"

    @property
    def produce_topic(self) -> str:
        return f"{self.prefix}-tp"

    @property
    def config_topic(self) -> str:
        return f"{self.prefix}-tc"

    def group(self, seq: str) -> str:
        return f"{self.prefix}-g-{seq}"

    def txn(self, seq: str) -> str:
        return f"{self.prefix}-x-{seq}"

    def own_topic(self, seq: str) -> str:
        return f"{self.prefix}-o-{seq}"


def batch(n: int = 1, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return build_batch([(f"k{i}".encode(), f"v{i}".encode(), None, TS + i) for i in range(n)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


# ------------------------------------------------------------------------------------------------ filler

_INTS = {"partition": 0, "partition_index": 0, "partition_id": 0, "timeout_ms": 5000, "session_timeout_ms": 30000,
         "rebalance_timeout_ms": 30000, "max_wait_ms": 10, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20,
         "num_partitions": 1, "replication_factor": 1, "acks": -1, "transaction_timeout_ms": 60000,
         "resource_type": 2, "resource_type_filter": 2, "pattern_type": 3, "pattern_type_filter": 3,
         "operation": 2, "permission_type": 3, "count": 2, "response_partition_limit": 2000,
         "max_records": 100, "batch_size": 100, "share_session_epoch": 0, "key_type": 0, "min_bytes": 1}
_VAR_FIELDS = ("producer_id", "producer_epoch", "member_id", "generation_id", "member_epoch",
               "generation_id_or_member_epoch")


def fill(cls: type, version: int, ctx: Ctx, n: Names, seq: str, **over: Any) -> Any:
    """``cls`` at ``version`` with every present field given a sensible value (see the module docstring); keyword
    arguments override top-level fields."""
    obj = cls()
    topicish = "Topic" in cls.__name__ or "Partition" in cls.__name__ and "name" in [f.name for f in cls.FIELDS]
    for f in cls.FIELDS:
        if not in_range(f.versions, version):
            continue
        if f.name in over:
            setattr(obj, f.name, over[f.name])
            continue
        v = _value(f, version, ctx, n, seq, topicish)
        if v is not _KEEP:
            setattr(obj, f.name, v)
    return obj


_KEEP = object()


def _value(f: Any, version: int, ctx: Ctx, n: Names, seq: str, topicish: bool) -> Any:
    name = f.name
    if name in _VAR_FIELDS and name in ctx.vars:
        return ctx.vars[name]
    if f.kind == "struct":
        return fill(f.struct, version, ctx, n, seq)
    if f.kind == "array":
        if f.elem == "struct":
            return [fill(f.struct, version, ctx, n, seq)]
        if name in ("partitions", "partition_indexes", "partition_ids", "partition_index"):
            return [0]
        if name in ("topics", "topic_names", "subscribed_topic_names"):
            return [n.topic]
        if name in ("groups", "group_ids", "coordinator_keys", "groups_to_delete"):
            return [n.group(seq)]
        if name in ("transactional_ids",):
            return [n.txn(seq)]
        return _KEEP
    if f.kind == "uuid":
        if name == "topic_id":
            return ctx.tid(n.topic)
        return _KEEP
    if f.kind == "string":
        if name in ("topic", "topic_name") or (name in ("name", "resource_name") and topicish):
            return n.topic
        if name == "resource_name":
            return n.topic
        if name in ("group_id", "group", "key"):
            return n.group(seq)
        if name == "transactional_id":
            return n.txn(seq)
        if name == "protocol_type":
            return "consumer"
        if name == "principal":
            return "User:alice"
        if name == "host":
            return "*"
        if name == "mechanism":
            return "PLAIN"
        return _KEEP
    if f.kind == "records":
        return batch(1)
    if f.kind.startswith("int") and name in _INTS:
        return _INTS[name]
    return _KEEP


def req(key: int, version: int, n: Names, seq: str, **over: Any) -> Callable[[Ctx], Any]:
    """A step body: :func:`fill` of ``key``'s request at ``version``, top-level fields overridden by ``over``
    (values may be ``ctx -> value``)."""
    def build(ctx: Ctx) -> Any:
        resolved = {k: (v(ctx) if callable(v) else v) for k, v in over.items()}
        return fill(REQUESTS[key], version, ctx, n, seq, **resolved)
    return build


def S(key: int, version: int, body: Any = None, **kw: Any) -> Step:
    return Step(int(key), version, body, **kw)


def _cap(**names: str) -> Callable[[Ctx, Any], None]:
    """A capture: ``ctx.vars[var] = response.<attribute>`` for each ``var=attribute``."""
    def capture(ctx: Ctx, resp: Any) -> None:
        for var, attr in names.items():
            ctx.vars[var] = getattr(resp, attr)
    return capture


# ------------------------------------------------------------------------------------------------ builders

def _produce(v: int, n: Names, seq: str) -> list[Step]:
    T = m.ProduceRequest

    def body(ctx: Ctx) -> Any:
        td = T.TopicProduceData(name=n.produce_topic, partition_data=[T.PartitionProduceData(index=0,
                                                                                            records=batch(2))])
        if v >= 13:
            td.topic_id = ctx.tid(n.produce_topic)
        return T(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[td])
    return [S(K.PRODUCE, v, body)]


def _fetch(v: int, n: Names, seq: str) -> list[Step]:
    return [S(K.FETCH, v, req(K.FETCH, v, n, seq, max_wait_ms=10, min_bytes=1, forgotten_topics_data=[])),
            S(K.FETCH, v, req(K.FETCH, v, n, seq, max_wait_ms=10, min_bytes=1, forgotten_topics_data=[],
                               topics=lambda ctx: [_fetch_topic(v, ctx, n, 2)]))]


def _fetch_topic(v: int, ctx: Ctx, n: Names, offset: int) -> Any:
    F = m.FetchRequest
    t = F.FetchTopic(topic=n.topic, partitions=[F.FetchPartition(partition=0, fetch_offset=offset,
                                                                 partition_max_bytes=1 << 20)])
    if v >= 13:
        t.topic_id = ctx.tid(n.topic)
    return t


def _list_offsets(v: int, n: Names, seq: str) -> list[Step]:
    L = m.ListOffsetsRequest
    stamps = [-1, -2, TS + 1] + ([-3] if v >= 7 else []) + ([-4] if v >= 8 else []) + ([-5] if v >= 9 else [])
    out = []
    for ts in stamps:
        def body(ctx: Ctx, ts: int = ts) -> Any:
            return fill(L, v, ctx, n, seq, replica_id=-1, topics=[L.ListOffsetsTopic(
                name=n.topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=ts,
                                                                 **({"max_num_offsets": 1} if v == 0 else {}))])])
        out.append(S(K.LIST_OFFSETS, v, body))
    return out


def _metadata(v: int, n: Names, seq: str) -> list[Step]:
    M = m.MetadataRequest
    steps = [S(K.METADATA, v, lambda ctx: fill(M, v, ctx, n, seq, allow_auto_topic_creation=False,
                                               topics=[M.MetadataRequestTopic(name=n.topic)]))]
    if v >= 1:
        steps.append(S(K.METADATA, v, lambda ctx: fill(M, v, ctx, n, seq, topics=None,
                                                       allow_auto_topic_creation=False)))
    return steps


def _commit(n: Names, seq: str, v: int = 8, offset: int = 1) -> Step:
    O = m.OffsetCommitRequest
    return S(K.OFFSET_COMMIT, v, lambda ctx: O(group_id=n.group(seq), generation_id_or_member_epoch=-1, topics=[
        O.OffsetCommitRequestTopic(name=n.topic, topic_id=ctx.tid(n.topic), partitions=[
            O.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="m")])]))


def _offset_commit(v: int, n: Names, seq: str) -> list[Step]:
    O = m.OffsetCommitRequest

    def body(ctx: Ctx) -> Any:
        return fill(O, v, ctx, n, seq, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                    topics=[O.OffsetCommitRequestTopic(name=n.topic, topic_id=ctx.tid(n.topic), partitions=[
                        O.OffsetCommitRequestPartition(partition_index=0, committed_offset=2,
                                                       committed_metadata="meta")])])
    return [S(K.OFFSET_COMMIT, v, body), _offset_fetch_all(n, seq)]


def _offset_fetch_all(n: Names, seq: str) -> Step:
    return S(K.OFFSET_FETCH, 8, lambda ctx: m.OffsetFetchRequest(groups=[
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=n.group(seq), topics=None)]))


def _offset_fetch(v: int, n: Names, seq: str) -> list[Step]:
    O = m.OffsetFetchRequest

    def body(ctx: Ctx) -> Any:
        if v >= 8:
            return O(require_stable=True, groups=[O.OffsetFetchRequestGroup(
                group_id=n.group(seq), member_id=None, member_epoch=-1, topics=[O.OffsetFetchRequestTopics(
                    name=n.topic, topic_id=ctx.tid(n.topic), partition_indexes=[0, 1])])])
        return fill(O, v, ctx, n, seq, topics=[O.OffsetFetchRequestTopic(name=n.topic, partition_indexes=[0, 1])])
    return [_commit(n, seq), S(K.OFFSET_FETCH, v, body)]


def _find_coordinator(v: int, n: Names, seq: str) -> list[Step]:
    F = m.FindCoordinatorRequest
    steps = [S(K.FIND_COORDINATOR, v, F(key=n.group(seq), key_type=0, coordinator_keys=[n.group(seq)]))]
    if v >= 1:
        steps.append(S(K.FIND_COORDINATOR, v, F(key=n.txn(seq), key_type=1, coordinator_keys=[n.txn(seq)])))
    return steps


def _join(n: Names, seq: str, v: int = 5, compare: bool = True) -> list[Step]:
    J = m.JoinGroupRequest

    def body(ctx: Ctx) -> Any:
        return J(group_id=n.group(seq), session_timeout_ms=30000, rebalance_timeout_ms=30000,
                 member_id=ctx.vars.get("member_id", ""), protocol_type="consumer",
                 protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")])

    def capture(ctx: Ctx, r: Any) -> None:
        if r.member_id:
            ctx.vars["member_id"] = r.member_id
        ctx.vars["generation_id"] = r.generation_id
    steps = [S(K.JOIN_GROUP, v, body, capture=capture, compare=compare)]
    if v >= 4:
        steps.append(S(K.JOIN_GROUP, v, body, capture=capture, compare=compare))
    return steps


def _sync(n: Names, seq: str, v: int = 3, compare: bool = True) -> Step:
    Y = m.SyncGroupRequest
    return S(K.SYNC_GROUP, v, lambda ctx: fill(Y, v, ctx, n, seq, group_instance_id=None, protocol_type="consumer",
                                               protocol_name="range", assignments=[Y.SyncGroupRequestAssignment(
                                                   member_id=ctx.vars.get("member_id", ""),
                                                   assignment=b"\x00\x02")]), compare=compare)


def _join_group(v: int, n: Names, seq: str) -> list[Step]:
    return _join(n, seq, v) + [S(K.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(groups=[n.group(seq)]))]


def _heartbeat(v: int, n: Names, seq: str) -> list[Step]:
    return _join(n, seq) + [_sync(n, seq), S(K.HEARTBEAT, v, req(K.HEARTBEAT, v, n, seq, group_instance_id=None))]


def _leave(v: int, n: Names, seq: str) -> list[Step]:
    L = m.LeaveGroupRequest
    return _join(n, seq) + [S(K.LEAVE_GROUP, v, lambda ctx: fill(L, v, ctx, n, seq, members=[L.MemberIdentity(
        member_id=ctx.vars.get("member_id", ""), group_instance_id=None)]))]


def _sync_group(v: int, n: Names, seq: str) -> list[Step]:
    return _join(n, seq) + [_sync(n, seq, v)]


def _describe_groups(v: int, n: Names, seq: str) -> list[Step]:
    return _join(n, seq) + [_sync(n, seq), S(K.DESCRIBE_GROUPS, v, req(K.DESCRIBE_GROUPS, v, n, seq,
                                                                          groups=[n.group(seq), n.group("none")]))]


def _list_groups(v: int, n: Names, seq: str) -> list[Step]:
    return _join(n, seq) + [S(K.LIST_GROUPS, v, req(K.LIST_GROUPS, v, n, seq, states_filter=["Stable",
                                                                                             "CompletingRebalance"],
                                                 types_filter=[]))]


def _api_versions(v: int, n: Names, seq: str) -> list[Step]:
    return [S(K.API_VERSIONS, v, m.ApiVersionsRequest(client_software_name="kbroker-differential",
                                                      client_software_version="1.0"))]


def _create_topics(v: int, n: Names, seq: str) -> list[Step]:
    C = m.CreateTopicsRequest
    name = n.own_topic(seq)

    def body(topic: str, validate: bool = False, **kw: Any) -> Callable[[Ctx], Any]:
        return lambda ctx: C(topics=[C.CreatableTopic(name=topic, num_partitions=kw.get("np", 2),
                                                      replication_factor=1, configs=[
                                                          C.CreatableTopicConfig(name="retention.ms",
                                                                                 value="3600000")])],
                             timeout_ms=10000, validate_only=validate)
    steps = [S(K.CREATE_TOPICS, v, body(name)), S(K.CREATE_TOPICS, v, body(name))]
    if v >= 1:
        steps.append(S(K.CREATE_TOPICS, v, body(name + "-v", validate=True)))
    if v >= 4:
        steps.append(S(K.CREATE_TOPICS, v, lambda ctx: C(topics=[C.CreatableTopic(
            name=name + "-d", num_partitions=-1, replication_factor=-1)], timeout_ms=10000)))
    return steps


def _create_own(n: Names, seq: str, partitions: int = 1) -> list[Step]:
    C = m.CreateTopicsRequest
    name = n.own_topic(seq)
    return [S(K.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(name=name, num_partitions=partitions,
                                                             replication_factor=1)], timeout_ms=10000)),
            S(K.METADATA, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=name)],
                                                allow_auto_topic_creation=False), compare=False,
              until=lambda r: all(p.leader_id >= 0 for t in r.topics for p in t.partitions) and
              all(t.error_code == 0 for t in r.topics))]


def _delete_topics(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DeleteTopicsRequest
    name = n.own_topic(seq)
    return _create_own(n, seq) + [
        S(K.DELETE_TOPICS, v, lambda ctx: D(topic_names=[name], topics=[D.DeleteTopicState(name=name)],
                                            timeout_ms=10000)),
        S(K.DELETE_TOPICS, v, lambda ctx: D(topic_names=[name], topics=[D.DeleteTopicState(name=name)],
                                            timeout_ms=10000))]


def _produce_to(topic: str, v: int = 9, n_records: int = 3, partition: int = 0, **kw: Any) -> Step:
    P = m.ProduceRequest
    return S(K.PRODUCE, v, lambda ctx: P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=partition,
                                                                              records=batch(n_records, **kw))])]))


def _delete_records(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DeleteRecordsRequest
    name = n.own_topic(seq)
    body = lambda off: (lambda ctx: D(topics=[D.DeleteRecordsTopic(name=name, partitions=[  # noqa: E731
        D.DeleteRecordsPartition(partition_index=0, offset=off)])], timeout_ms=5000))
    return _create_own(n, seq) + [_produce_to(name), S(K.DELETE_RECORDS, v, body(1)),
                                  S(K.DELETE_RECORDS, v, body(-1)), S(K.DELETE_RECORDS, v, body(10))]


def _init_pid(v: int, n: Names, seq: str) -> list[Step]:
    I = m.InitProducerIdRequest
    return [S(K.INIT_PRODUCER_ID, v, I(transactional_id=None, transaction_timeout_ms=60000)),
            S(K.INIT_PRODUCER_ID, v, I(transactional_id=n.txn(seq), transaction_timeout_ms=60000))]


def _init_txn(n: Names, seq: str, compare: bool = True) -> Step:
    return S(K.INIT_PRODUCER_ID, 5, m.InitProducerIdRequest(transactional_id=n.txn(seq), transaction_timeout_ms=60000),
             capture=_cap(producer_id="producer_id", producer_epoch="producer_epoch"), compare=compare,
             until=lambda r: r.error_code == 0, tries=40)


def _add_partitions(n: Names, seq: str, v: int = 3, topic: str | None = None) -> Step:
    A = m.AddPartitionsToTxnRequest
    topic = topic or n.topic

    def body(ctx: Ctx) -> Any:
        t = A.AddPartitionsToTxnTopic(name=topic, partitions=[0])
        if v >= 4:
            return A(transactions=[A.AddPartitionsToTxnTransaction(
                transactional_id=n.txn(seq), producer_id=ctx.vars.get("producer_id", -1),
                producer_epoch=ctx.vars.get("producer_epoch", -1), verify_only=False, topics=[t])])
        return A(v3_and_below_transactional_id=n.txn(seq), v3_and_below_producer_id=ctx.vars.get("producer_id", -1),
                 v3_and_below_producer_epoch=ctx.vars.get("producer_epoch", -1), v3_and_below_topics=[t])
    return S(K.ADD_PARTITIONS_TO_TXN, v, body)


def _add_partitions_to_txn(v: int, n: Names, seq: str) -> list[Step]:
    return [_init_txn(n, seq), _add_partitions(n, seq, v)]


def _add_offsets_to_txn(v: int, n: Names, seq: str) -> list[Step]:
    return [_init_txn(n, seq), S(K.ADD_OFFSETS_TO_TXN, v, req(K.ADD_OFFSETS_TO_TXN, v, n, seq))]


def _end_txn(v: int, n: Names, seq: str) -> list[Step]:
    return [_init_txn(n, seq), _add_partitions(n, seq, 3, n.produce_topic),
            S(K.END_TXN, v, req(K.END_TXN, v, n, seq, committed=True)),
            S(K.END_TXN, v, req(K.END_TXN, v, n, seq, committed=False), pause=1.0)]


def _txn_offset_commit(v: int, n: Names, seq: str) -> list[Step]:
    T = m.TxnOffsetCommitRequest
    return [_init_txn(n, seq), S(K.ADD_OFFSETS_TO_TXN, 3, req(K.ADD_OFFSETS_TO_TXN, 3, n, seq)),
            S(K.TXN_OFFSET_COMMIT, v, lambda ctx: fill(T, v, ctx, n, seq, generation_id_or_member_epoch=-1, member_id="",
                                                       group_instance_id=None, topics=[T.TxnOffsetCommitRequestTopic(
                                                           name=n.topic, partitions=[
                                                               T.TxnOffsetCommitRequestPartition(
                                                                   partition_index=0, committed_offset=1,
                                                                   committed_leader_epoch=-1,
                                                                   committed_metadata="")])]))]


def _describe_configs(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DescribeConfigsRequest
    out = []
    for rtype, rname in ((2, n.topic), (4, "1"), (4, ""), (32, n.group(seq)), (16, "cm"), (8, "1")):
        out.append(S(K.DESCRIBE_CONFIGS, v, D(resources=[D.DescribeConfigsResource(
            resource_type=rtype, resource_name=rname, configuration_keys=None)], include_synonyms=True,
            include_documentation=False)))
    return out


def _alter_configs(v: int, n: Names, seq: str) -> list[Step]:
    A = m.AlterConfigsRequest
    body = lambda cfgs, validate=False: A(validate_only=validate, resources=[  # noqa: E731
        A.AlterConfigsResource(resource_type=2, resource_name=n.config_topic, configs=[
            A.AlterableConfig(name=k, value=val) for k, val in cfgs])])
    return [S(K.ALTER_CONFIGS, v, body([("retention.ms", "86400000")])),
            S(K.ALTER_CONFIGS, v, body([("no.such.config", "1")], True)),
            S(K.ALTER_CONFIGS, v, body([("retention.ms", "abc")], True))]


def _incremental_alter_configs(v: int, n: Names, seq: str) -> list[Step]:
    I = m.IncrementalAlterConfigsRequest
    body = lambda cfgs, validate=False, rtype=2, rname=n.config_topic: I(validate_only=validate, resources=[  # noqa
        I.AlterConfigsResource(resource_type=rtype, resource_name=rname, configs=[
            I.AlterableConfig(name=k, config_operation=op, value=val) for k, op, val in cfgs])])
    return [S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("retention.ms", 0, "7200000")])),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("cleanup.policy", 2, "compact")], True)),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("retention.ms", 1, None)], True)),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("log.cleaner.threads", 0, "1")], True, 4, "1")),
            # the broker's loggers (KIP-412), validated only: a level, a bad level, APPEND, DELETE of the root
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("root", 0, "INFO")], True, 8, "1")),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("root", 0, "LOUD")], True, 8, "1")),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("root", 2, "INFO")], True, 8, "1")),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("root", 1, None)], True, 8, "1")),
            S(K.INCREMENTAL_ALTER_CONFIGS, v, body([("root", 0, "INFO")], True, 8, "7"))]


def _create_partitions(v: int, n: Names, seq: str) -> list[Step]:
    C = m.CreatePartitionsRequest
    name = n.own_topic(seq)
    body = lambda count, validate=False: C(topics=[C.CreatePartitionsTopic(  # noqa: E731
        name=name, count=count, assignments=None)], timeout_ms=10000, validate_only=validate)
    return _create_own(n, seq) + [S(K.CREATE_PARTITIONS, v, body(3, True)), S(K.CREATE_PARTITIONS, v, body(2)),
                                  S(K.CREATE_PARTITIONS, v, body(1))]


def _delete_groups(v: int, n: Names, seq: str) -> list[Step]:
    return [_commit(n, seq), S(K.DELETE_GROUPS, v, m.DeleteGroupsRequest(groups_names=[n.group(seq),
                                                                                         n.group("none")]))]


def _offset_delete(v: int, n: Names, seq: str) -> list[Step]:
    O = m.OffsetDeleteRequest
    return [_commit(n, seq), S(K.OFFSET_DELETE, v, O(group_id=n.group(seq), topics=[O.OffsetDeleteRequestTopic(
        name=n.topic, partitions=[O.OffsetDeleteRequestPartition(partition_index=0)])])), _offset_fetch_all(n, seq)]


def _describe_log_dirs(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DescribeLogDirsRequest
    return [S(K.DESCRIBE_LOG_DIRS, v, D(topics=[D.DescribableLogDirTopic(topic=n.topic, partitions=[0, 1])]))]


def _alter_scram(v: int, n: Names, seq: str) -> list[Step]:
    A = m.AlterUserScramCredentialsRequest
    return [S(K.ALTER_USER_SCRAM_CREDENTIALS, v, A(deletions=[A.ScramCredentialDeletion(name="alice", mechanism=1)],
                                                    upsertions=[]))]


def _client_quotas(v: int, n: Names, seq: str) -> list[Step]:
    A, D = m.AlterClientQuotasRequest, m.DescribeClientQuotasRequest
    return [S(K.ALTER_CLIENT_QUOTAS, v if seq.startswith("AlterClientQuotas") else 1, A(validate_only=False, entries=[
        A.EntryData(entity=[A.EntityData(entity_type="user", entity_name=n.prefix + "-alice")], ops=[
            A.OpData(key="consumer_byte_rate", value=1024.0, remove=False)])])),
        S(K.DESCRIBE_CLIENT_QUOTAS, v if seq.startswith("DescribeClientQuotas") else 1, D(components=[
            D.ComponentData(entity_type="user", match_type=0, match=n.prefix + "-alice")], strict=False),
          # Kafka's broker answers from its metadata image, which has the new quota a moment after AlterClientQuotas
          until=lambda msg: bool(msg.entries))]


def _describe_quorum(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DescribeQuorumRequest
    return [S(K.DESCRIBE_QUORUM, v, D(topics=[D.TopicData(topic_name="__cluster_metadata", partitions=[
        D.PartitionData(partition_index=0)])]))]


def _consumer_hb(n: Names, seq: str, v: int, compare: bool = True) -> list[Step]:
    C = m.ConsumerGroupHeartbeatRequest
    member = ("M" + seq.replace(" ", "").replace("-", ""))[:22].ljust(22, "x")

    def body(ctx: Ctx) -> Any:
        return fill(C, v, ctx, n, seq, member_id=member, member_epoch=ctx.vars.get("member_epoch", 0),
                    instance_id=None, rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=[n.topic],
                    subscribed_topic_regex=None, server_assignor=None, topic_partitions=[])
    return [S(K.CONSUMER_GROUP_HEARTBEAT, v, body, capture=_cap(member_epoch="member_epoch"), compare=compare),
            S(K.CONSUMER_GROUP_HEARTBEAT, v, body, capture=_cap(member_epoch="member_epoch"), compare=compare)]


def _consumer_group_heartbeat(v: int, n: Names, seq: str) -> list[Step]:
    return _consumer_hb(n, seq, v)


def _consumer_group_describe(v: int, n: Names, seq: str) -> list[Step]:
    return _consumer_hb(n, seq, 1) + [S(K.CONSUMER_GROUP_DESCRIBE, v, m.ConsumerGroupDescribeRequest(
        group_ids=[n.group(seq), n.group("none")], include_authorized_operations=False))]


def _share_hb(n: Names, seq: str, v: int, compare: bool = True) -> list[Step]:
    C = m.ShareGroupHeartbeatRequest
    member = ("S" + seq.replace(" ", "").replace("-", ""))[:22].ljust(22, "x")

    def body(ctx: Ctx) -> Any:
        return fill(C, v, ctx, n, seq, member_id=member, member_epoch=ctx.vars.get("member_epoch", 0),
                    rack_id=None, subscribed_topic_names=[n.topic])
    return [S(K.SHARE_GROUP_HEARTBEAT, v, body, capture=_cap(member_epoch="member_epoch"), compare=compare)]


def _share_group_heartbeat(v: int, n: Names, seq: str) -> list[Step]:
    return _share_hb(n, seq, v) + _share_hb(n, seq, v)


def _share_group_describe(v: int, n: Names, seq: str) -> list[Step]:
    return _share_hb(n, seq, 1) + [S(K.SHARE_GROUP_DESCRIBE, v, m.ShareGroupDescribeRequest(
        group_ids=[n.group(seq), n.group("none")]))]


def _streams_hb(n: Names, seq: str, v: int, compare: bool = True) -> list[Step]:
    """A StreamsGroupHeartbeat of one member whose topology reads ``n.topic`` (no internal topics): it joins (epoch
    0, the topology, empty task lists), then heartbeats with the epoch it was given."""
    H = m.StreamsGroupHeartbeatRequest
    member = ("T" + seq.replace(" ", "").replace("-", ""))[:22].ljust(22, "x")

    def body(ctx: Ctx) -> Any:
        epoch = ctx.vars.get("streams_epoch", 0)
        joining = epoch == 0
        topology = H.Topology(epoch=0, subtopologies=[H.Subtopology(subtopology_id="0", source_topics=[n.topic])])
        return H(group_id=n.group(seq), member_id=member, member_epoch=epoch,
                 rebalance_timeout_ms=30_000 if joining else -1, topology=topology if joining else None,
                 process_id="process-" + member if joining else None, active_tasks=[] if joining else None,
                 standby_tasks=[] if joining else None, warmup_tasks=[] if joining else None)
    return [S(K.STREAMS_GROUP_HEARTBEAT, v, body, capture=_cap(streams_epoch="member_epoch"), compare=compare)]


def _streams_group_heartbeat(v: int, n: Names, seq: str) -> list[Step]:
    return _streams_hb(n, seq, v) + _streams_hb(n, seq, v)


def _streams_group_describe(v: int, n: Names, seq: str) -> list[Step]:
    return _streams_hb(n, seq, 0) + [S(K.STREAMS_GROUP_DESCRIBE, v, m.StreamsGroupDescribeRequest(
        group_ids=[n.group(seq), n.group("none")], include_authorized_operations=False))]


def _telemetry(v: int, n: Names, seq: str) -> list[Step]:
    return [S(K.GET_TELEMETRY_SUBSCRIPTIONS, v, m.GetTelemetrySubscriptionsRequest())]


def _describe_transactions(v: int, n: Names, seq: str) -> list[Step]:
    return [_init_txn(n, seq), S(K.DESCRIBE_TRANSACTIONS, v, m.DescribeTransactionsRequest(
        transactional_ids=[n.txn(seq), n.txn("none")]))]


def _list_transactions(v: int, n: Names, seq: str) -> list[Step]:
    L = m.ListTransactionsRequest
    return [_init_txn(n, seq), S(K.LIST_TRANSACTIONS, v, lambda ctx: L(
        state_filters=["Empty"], producer_id_filters=[ctx.vars.get("producer_id", -1)], duration_filter=-1,
        transactional_id_pattern=None if v < 2 else n.txn(seq)))]


def _describe_topic_partitions(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DescribeTopicPartitionsRequest
    return [S(K.DESCRIBE_TOPIC_PARTITIONS, v, D(topics=[D.TopicRequest(name=n.topic),
                                                        D.TopicRequest(name=n.own_topic("none"))],
                                                response_partition_limit=2000, cursor=None))]


def _describe_producers(v: int, n: Names, seq: str) -> list[Step]:
    D = m.DescribeProducersRequest
    return [S(K.DESCRIBE_PRODUCERS, v, D(topics=[D.TopicRequest(name=n.topic, partition_indexes=[0, 1, 7])]))]


def _elect_leaders(v: int, n: Names, seq: str) -> list[Step]:
    return [S(K.ELECT_LEADERS, v, req(K.ELECT_LEADERS, v, n, seq, election_type=0, timeout_ms=5000))]


def _update_features(v: int, n: Names, seq: str) -> list[Step]:
    U = m.UpdateFeaturesRequest
    return [S(K.UPDATE_FEATURES, v, U(timeout_ms=5000, validate_only=True, feature_updates=[U.FeatureUpdateKey(
        feature="group.version", max_version_level=1, allow_downgrade=False, upgrade_type=1)]))]


BUILDERS: dict[int, Callable[[int, Names, str], list[Step]]] = {
    K.PRODUCE: _produce, K.FETCH: _fetch, K.LIST_OFFSETS: _list_offsets, K.METADATA: _metadata,
    K.OFFSET_COMMIT: _offset_commit, K.OFFSET_FETCH: _offset_fetch, K.FIND_COORDINATOR: _find_coordinator,
    K.JOIN_GROUP: _join_group, K.HEARTBEAT: _heartbeat, K.LEAVE_GROUP: _leave, K.SYNC_GROUP: _sync_group,
    K.DESCRIBE_GROUPS: _describe_groups, K.LIST_GROUPS: _list_groups, K.API_VERSIONS: _api_versions,
    K.CREATE_TOPICS: _create_topics, K.DELETE_TOPICS: _delete_topics, K.DELETE_RECORDS: _delete_records,
    K.INIT_PRODUCER_ID: _init_pid, K.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    K.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn, K.END_TXN: _end_txn, K.TXN_OFFSET_COMMIT: _txn_offset_commit,
    K.DESCRIBE_CONFIGS: _describe_configs, K.ALTER_CONFIGS: _alter_configs,
    K.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs, K.CREATE_PARTITIONS: _create_partitions,
    K.DELETE_GROUPS: _delete_groups, K.OFFSET_DELETE: _offset_delete, K.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    K.ALTER_USER_SCRAM_CREDENTIALS: _alter_scram, K.ALTER_CLIENT_QUOTAS: _client_quotas,
    K.DESCRIBE_CLIENT_QUOTAS: _client_quotas, K.DESCRIBE_QUORUM: _describe_quorum,
    K.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat, K.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    K.SHARE_GROUP_HEARTBEAT: _share_group_heartbeat, K.SHARE_GROUP_DESCRIBE: _share_group_describe,
    K.STREAMS_GROUP_HEARTBEAT: _streams_group_heartbeat, K.STREAMS_GROUP_DESCRIBE: _streams_group_describe,
    K.GET_TELEMETRY_SUBSCRIPTIONS: _telemetry, K.DESCRIBE_TRANSACTIONS: _describe_transactions,
    K.LIST_TRANSACTIONS: _list_transactions, K.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    K.DESCRIBE_PRODUCERS: _describe_producers, K.ELECT_LEADERS: _elect_leaders,
    K.UPDATE_FEATURES: _update_features,
}


#: the share coordinator's own APIs (KIP-932): answered once the coordinator has loaded its partition of
#: __share_group_state, which a broker creates on the first share group's use (COORDINATOR_LOAD_IN_PROGRESS or
#: NOT_COORDINATOR until then, for a moment that depends on what ran before)
_SHARE_STATE_KEYS = frozenset({K.INITIALIZE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE, K.WRITE_SHARE_GROUP_STATE,
                               K.DELETE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE_SUMMARY})


def _coordinator_settled(msg: Any) -> bool:
    """No partition of the answer is COORDINATOR_LOAD_IN_PROGRESS (14) or NOT_COORDINATOR (16)."""
    return not any(p.error_code in (14, 16) for r in getattr(msg, "results", None) or ()
                   for p in getattr(r, "partitions", None) or ())


def _generic(key: int) -> Callable[[int, Names, str], list[Step]]:
    if key in _SHARE_STATE_KEYS:
        return lambda v, n, seq: [S(key, v, req(key, v, n, seq), until=_coordinator_settled, tries=200)]
    return lambda v, n, seq: [S(key, v, req(key, v, n, seq))]


# ------------------------------------------------------------------------------------------------ catalogues

def valid_sequences(advertised: dict[int, tuple[int, int]], n: Names,
                    versions: Callable[[int, int, int], list[int]] | None = None) -> list[Sequence]:
    """One sequence per (API key, version) that the reference advertises; ``versions(key, lo, hi)`` may pick a
    subset (the CI slice)."""
    out = []
    for key, (lo, hi) in sorted(advertised.items()):
        if key not in REQUESTS:
            continue
        build = BUILDERS.get(key) or _generic(key)
        for v in (versions(key, lo, hi) if versions else range(lo, hi + 1)):
            name = f"{_api(key)} v{v}"
            out.append(Sequence(name, key, build(v, n, name.replace(" ", "-")), "valid"))
    return out


def _api(key: int) -> str:
    from kbroker.testing.differential import api_name  # noqa: PLC0415
    return api_name(key)


def _raw(key: int, version: int, body: bytes = b"", corr: int = 7) -> Callable[[Ctx], bytes]:
    return lambda ctx: struct.pack(">hhi", key, version, corr) + struct.pack(">h", len(CLIENT_ID)) + \
        CLIENT_ID.encode() + body


def invalid_sequences(advertised: dict[int, tuple[int, int]], n: Names) -> list[Sequence]:
    out: list[Sequence] = []

    def add(name: str, key: int, *steps: Step) -> None:
        out.append(Sequence(name, int(key), list(steps), "invalid"))
    M, P, F = m.MetadataRequest, m.ProduceRequest, m.FetchRequest
    unknown = n.own_topic("unknown")
    add("invalid: Metadata unknown topic", K.METADATA, S(K.METADATA, 12, M(
        topics=[M.MetadataRequestTopic(name=unknown)], allow_auto_topic_creation=False)))
    add("invalid: Metadata unknown topic id", K.METADATA, S(K.METADATA, 12, M(
        topics=[M.MetadataRequestTopic(name=None, topic_id=b"\x01" * 16)], allow_auto_topic_creation=False)))
    add("invalid: Metadata invalid topic name", K.METADATA, S(K.METADATA, 12, M(
        topics=[M.MetadataRequestTopic(name="bad/name")], allow_auto_topic_creation=True)))
    add("invalid: Produce unknown topic", K.PRODUCE, S(K.PRODUCE, 11, P(acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=unknown, partition_data=[P.PartitionProduceData(index=0, records=batch(1))])])))
    add("invalid: Produce unknown partition", K.PRODUCE, _produce_to(n.produce_topic, 11, partition=9))
    for acks in (2, -2, 5):
        add(f"invalid: Produce acks={acks}", K.PRODUCE, S(K.PRODUCE, 11, P(acks=acks, timeout_ms=5000, topic_data=[
            P.TopicProduceData(name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0,
                                                                                          records=batch(1))])])))
    add("invalid: Produce acks=0 then Metadata", K.PRODUCE,
        S(K.PRODUCE, 11, P(acks=0, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0, records=batch(1))])]),
          response=False),
        S(K.LIST_OFFSETS, 9, lambda ctx: m.ListOffsetsRequest(replica_id=-1, topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(name=n.produce_topic, partitions=[
                m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), pause=0.3))
    add("invalid: Produce corrupt batch crc", K.PRODUCE, S(K.PRODUCE, 11, P(acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=n.produce_topic, partition_data=[P.PartitionProduceData(
            index=0, records=batch(2)[:-1] + b"\x00")])])))
    add("invalid: Produce wrong producer epoch", K.PRODUCE,
        S(K.INIT_PRODUCER_ID, 5, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
          capture=_cap(producer_id="producer_id", producer_epoch="producer_epoch")),
        S(K.PRODUCE, 11, lambda ctx: P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0, records=batch(
                1, pid=ctx.vars["producer_id"], epoch=ctx.vars["producer_epoch"], seq=0))])])),
        S(K.PRODUCE, 11, lambda ctx: P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0, records=batch(
                1, pid=ctx.vars["producer_id"], epoch=ctx.vars["producer_epoch"], seq=5))])])),
        S(K.PRODUCE, 11, lambda ctx: P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0, records=batch(
                1, pid=ctx.vars["producer_id"], epoch=ctx.vars["producer_epoch"] + 3, seq=0))])])),
        S(K.PRODUCE, 11, lambda ctx: P(acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
            name=n.produce_topic, partition_data=[P.PartitionProduceData(index=0, records=batch(
                1, pid=ctx.vars["producer_id"] + 1000, epoch=0, seq=0))])])))

    def fetch(ctx: Ctx, **kw: Any) -> Any:
        t = F.FetchTopic(topic=n.topic, topic_id=kw.pop("topic_id", ctx.tid(n.topic)), partitions=[F.FetchPartition(
            partition=kw.pop("partition", 0), fetch_offset=kw.pop("offset", 0),
            current_leader_epoch=kw.pop("epoch", -1), partition_max_bytes=1 << 20)])
        return F(max_wait_ms=10, min_bytes=1, topics=[t], **kw)
    add("invalid: Fetch unknown topic id", K.FETCH, S(K.FETCH, 17, lambda c: fetch(c, topic_id=b"\x02" * 16)))
    add("invalid: Fetch unknown partition", K.FETCH, S(K.FETCH, 17, lambda c: fetch(c, partition=9)))
    add("invalid: Fetch offset out of range", K.FETCH, S(K.FETCH, 17, lambda c: fetch(c, offset=1000)))
    add("invalid: Fetch future leader epoch", K.FETCH, S(K.FETCH, 17, lambda c: fetch(c, epoch=7)))
    add("invalid: Fetch unknown session", K.FETCH, S(K.FETCH, 17, lambda c: fetch(c, session_id=12345,
                                                                                      session_epoch=3)))
    add("invalid: Fetch unknown topic name v12", K.FETCH, S(K.FETCH, 12, F(max_wait_ms=10, min_bytes=1, topics=[
        F.FetchTopic(topic=unknown, partitions=[F.FetchPartition(partition=0, partition_max_bytes=1 << 20)])])))
    L = m.ListOffsetsRequest
    add("invalid: ListOffsets unknown topic", K.LIST_OFFSETS, S(K.LIST_OFFSETS, 9, L(replica_id=-1, topics=[
        L.ListOffsetsTopic(name=unknown, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])])))
    add("invalid: ListOffsets fenced epoch", K.LIST_OFFSETS, S(K.LIST_OFFSETS, 9, L(replica_id=-1, topics=[
        L.ListOffsetsTopic(name=n.topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1,
                                                                            current_leader_epoch=9)])])))
    O = m.OffsetForLeaderEpochRequest
    add("invalid: OffsetForLeaderEpoch future epoch", K.OFFSET_FOR_LEADER_EPOCH, S(
        K.OFFSET_FOR_LEADER_EPOCH, 4, O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic=n.topic, partitions=[
            O.OffsetForLeaderPartition(partition=0, current_leader_epoch=5, leader_epoch=0)])])))
    add("invalid: OffsetFetch unknown group", K.OFFSET_FETCH, S(K.OFFSET_FETCH, 9, m.OffsetFetchRequest(groups=[
        m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=n.group("unknown"), topics=None)])))
    add("invalid: DescribeGroups unknown group", K.DESCRIBE_GROUPS, S(K.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(
        groups=[n.group("unknown")])))
    add("invalid: Heartbeat unknown group", K.HEARTBEAT, S(K.HEARTBEAT, 4, m.HeartbeatRequest(
        group_id=n.group("unknown"), generation_id=1, member_id="nobody")))
    seq = "invalid-generation"
    add("invalid: Heartbeat wrong generation", K.HEARTBEAT, *_join(n, seq), _sync(n, seq), S(
        K.HEARTBEAT, 4, lambda ctx: m.HeartbeatRequest(group_id=n.group(seq), generation_id=ctx.vars[
            "generation_id"] + 5, member_id=ctx.vars["member_id"])), S(
        K.HEARTBEAT, 4, lambda ctx: m.HeartbeatRequest(group_id=n.group(seq), generation_id=ctx.vars[
            "generation_id"], member_id="unknown-member")))
    seq = "invalid-commit-generation"
    add("invalid: OffsetCommit wrong generation", K.OFFSET_COMMIT, *_join(n, seq), _sync(n, seq), S(
        K.OFFSET_COMMIT, 9, lambda ctx: m.OffsetCommitRequest(group_id=n.group(seq), generation_id_or_member_epoch=ctx.vars[
            "generation_id"] + 1, member_id=ctx.vars["member_id"], topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(
                name=n.topic, partitions=[m.OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0,
                                                                                               committed_offset=1)])])))
    add("invalid: JoinGroup unknown member", K.JOIN_GROUP, S(K.JOIN_GROUP, 9, m.JoinGroupRequest(
        group_id=n.group("invalid-join"), session_timeout_ms=30000, rebalance_timeout_ms=30000,
        member_id="not-a-member", protocol_type="consumer", protocols=[
            m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])))
    add("invalid: JoinGroup session timeout too small", K.JOIN_GROUP, S(K.JOIN_GROUP, 9, m.JoinGroupRequest(
        group_id=n.group("invalid-join2"), session_timeout_ms=10, rebalance_timeout_ms=30000,
        member_id="", protocol_type="consumer", protocols=[
            m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])))
    add("invalid: JoinGroup empty group id", K.JOIN_GROUP, S(K.JOIN_GROUP, 9, m.JoinGroupRequest(
        group_id="", session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="", protocol_type="consumer",
        protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])))
    seq = "invalid-txn-epoch"
    add("invalid: EndTxn wrong epoch", K.END_TXN, _init_txn(n, seq), S(K.END_TXN, 4, lambda ctx: m.EndTxnRequest(
        transactional_id=n.txn(seq), producer_id=ctx.vars["producer_id"], producer_epoch=ctx.vars[
            "producer_epoch"] + 1, committed=True)), S(K.END_TXN, 4, lambda ctx: m.EndTxnRequest(
        transactional_id=n.txn(seq), producer_id=ctx.vars["producer_id"], producer_epoch=ctx.vars[
            "producer_epoch"], committed=True)))
    add("invalid: AddPartitionsToTxn unknown txn", K.ADD_PARTITIONS_TO_TXN, S(
        K.ADD_PARTITIONS_TO_TXN, 3, m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=n.txn("unknown"), v3_and_below_producer_id=424242,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=n.topic, partitions=[0])])))
    add("invalid: DeleteTopics unknown", K.DELETE_TOPICS, S(K.DELETE_TOPICS, 6, m.DeleteTopicsRequest(
        topics=[m.DeleteTopicsRequest.DeleteTopicState(name=unknown)], timeout_ms=5000)))
    add("invalid: DeleteTopics unknown id", K.DELETE_TOPICS, S(K.DELETE_TOPICS, 6, m.DeleteTopicsRequest(
        topics=[m.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=b"\x03" * 16)], timeout_ms=5000)))
    C = m.CreateTopicsRequest
    for label, topic in (("replication factor 3", C.CreatableTopic(name=n.own_topic("rf3"), num_partitions=1,
                                                                   replication_factor=3)),
                         ("zero partitions", C.CreatableTopic(name=n.own_topic("p0"), num_partitions=0,
                                                              replication_factor=1)),
                         ("bad name", C.CreatableTopic(name="bad name!", num_partitions=1, replication_factor=1)),
                         ("unknown config", C.CreatableTopic(name=n.own_topic("cfg"), num_partitions=1,
                                                             replication_factor=1, configs=[
                                                                 C.CreatableTopicConfig(name="no.such", value="1")])),
                         ("bad config value", C.CreatableTopic(name=n.own_topic("cfg2"), num_partitions=1,
                                                               replication_factor=1, configs=[
                                                                   C.CreatableTopicConfig(name="retention.ms",
                                                                                          value="x")]))):
        add(f"invalid: CreateTopics {label}", K.CREATE_TOPICS, S(K.CREATE_TOPICS, 7, C(topics=[topic],
                                                                                     timeout_ms=5000)))
    D = m.DescribeConfigsRequest
    add("invalid: DescribeConfigs unknown topic", K.DESCRIBE_CONFIGS, S(K.DESCRIBE_CONFIGS, 4, D(resources=[
        D.DescribeConfigsResource(resource_type=2, resource_name=unknown, configuration_keys=None)])))
    add("invalid: DescribeConfigs other broker", K.DESCRIBE_CONFIGS, S(K.DESCRIBE_CONFIGS, 4, D(resources=[
        D.DescribeConfigsResource(resource_type=4, resource_name="7", configuration_keys=None)])))
    # unsupported versions: one past the highest the reference advertises
    for key, (lo, hi) in sorted(advertised.items()):
        if key not in REQUESTS:
            continue
        spec_hi = REQUESTS[key].VALID_VERSIONS[1]
        if key == K.API_VERSIONS:
            add(f"invalid: {_api(key)} v{hi + 1}", key, S(key, hi + 1, raw=_raw(key, hi + 1, b"\x00\x00"),
                                                        decode_version=0, timeout=3))
            continue
        body_v = min(hi, spec_hi)
        add(f"invalid: {_api(key)} v{hi + 1} (unsupported)", key, S(
            key, hi + 1, raw=lambda ctx, key=key, body_v=body_v, hi=hi: _unsupported(key, hi + 1, body_v, ctx, n),
            timeout=3, decode_version=body_v))
    # frames
    mv = m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=n.topic)])
    good = encode_request_header(3, 12, 9, CLIENT_ID) + codec.encode(mv, 12)
    add("invalid: frame truncated body", K.METADATA, S(K.METADATA, 12, raw=lambda c: good[:-3], timeout=3))
    add("invalid: frame trailing garbage", K.METADATA, S(K.METADATA, 12, raw=lambda c: good + b"\x01\x02\x03",
                                                         timeout=3))
    add("invalid: frame header only", K.METADATA, S(K.METADATA, 12, raw=_raw(3, 12, b""), timeout=3))
    add("invalid: frame shorter than header", K.METADATA, S(K.METADATA, 12, raw=lambda c: b"\x00\x03\x00", timeout=3))
    add("invalid: frame oversized (200 MB prefix)", K.METADATA, S(K.METADATA, 12, raw=lambda c: good,
                                                                  size=200 << 20, timeout=3))
    add("invalid: frame negative size", K.METADATA, S(K.METADATA, 12, raw=lambda c: good, size=-5, timeout=3))
    add("invalid: frame empty", K.METADATA, S(K.METADATA, 12, raw=lambda c: b"", timeout=3))
    add("invalid: unknown api key 200", K.METADATA, S(200, 0, raw=_raw(200, 0, b""), timeout=3))
    add("invalid: negative api version", K.METADATA, S(K.METADATA, -1, raw=_raw(3, -1, b""), timeout=3))
    add("invalid: client id length past the frame", K.METADATA, S(
        K.METADATA, 1, raw=lambda c: struct.pack(">hhih", 3, 1, 5, 300) + b"abc", timeout=3))
    add("invalid: bad array length", K.METADATA, S(K.METADATA, 1, raw=_raw(3, 1, struct.pack(">i", 1 << 30)),
                                                   timeout=3))
    add("invalid: bad compact string length", K.METADATA, S(
        K.METADATA, 12, raw=lambda c: encode_request_header(3, 12, 11, CLIENT_ID) + b"\x02\x00" * 2 + b"\xff\xff\xff\x0f",
        timeout=3))
    add("invalid: SaslAuthenticate without handshake", K.SASL_AUTHENTICATE, S(
        K.SASL_AUTHENTICATE, 2, m.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00secret"), timeout=3),
        S(K.METADATA, 12, mv, timeout=3, outcome_only=True))
    add("invalid: SaslHandshake unknown mechanism", K.SASL_HANDSHAKE, S(
        K.SASL_HANDSHAKE, 1, m.SaslHandshakeRequest(mechanism="NOPE"), timeout=3),
        S(K.METADATA, 12, mv, timeout=3, outcome_only=True))
    return out


def _unsupported(key: int, version: int, body_v: int, ctx: Ctx, n: Names) -> bytes:
    body = fill(REQUESTS[key], body_v, ctx, n, "unsupported")
    hdr = struct.pack(">hhi", key, version, 3) + struct.pack(">h", len(CLIENT_ID)) + CLIENT_ID.encode()
    if codec.is_flexible(REQUESTS[key], body_v):
        hdr += b"\x00"
    return hdr + codec.encode(body, body_v)


def refused_sequences(advertised: dict[int, tuple[int, int]], n: Names) -> list[Sequence]:
    """Every API key of the 4.3.1 specs that the reference does not advertise on its client listener, sent at
    the spec's highest version (then ApiVersions on the same connection, to see whether it is still open)."""
    out = []
    for key, cls in sorted(REQUESTS.items()):
        if key in advertised or cls.VALID_VERSIONS is None:
            continue
        v = cls.VALID_VERSIONS[1]
        name = f"refused: {_api(key)} v{v}"
        out.append(Sequence(name, key, [S(key, v, req(key, v, n, name.replace(" ", "-")), timeout=3),
                                        S(K.API_VERSIONS, 3, m.ApiVersionsRequest(
                                            client_software_name="kbroker-differential",
                                            client_software_version="1.0"), timeout=3, outcome_only=True)],
                                "refused"))
    return out


def sasl_sequences(n: Names) -> list[Sequence]:
    """Authentication on a fresh, unauthenticated connection to a SASL_PLAINTEXT listener with the PLAIN users
    ``admin`` and ``alice`` (:class:`~kbroker.testing.differential.AuthBrokerPair`): unsupported mechanisms,
    wrong and malformed credentials, requests before or without a handshake, a second handshake, and the good
    path at every SaslAuthenticate version; each ends with an ApiVersions that shows whether the connection is
    still open (KIP-43, KIP-152)."""
    H, A = m.SaslHandshakeRequest, m.SaslAuthenticateRequest
    good = b"\0alice\0alice-secret"
    out: list[Sequence] = []

    def add(name: str, key: int, *steps: Step) -> None:
        out.append(Sequence(f"sasl: {name}", int(key), list(steps), "sasl"))

    def open_() -> Step:  # is the connection still open, and what does it answer
        return S(K.API_VERSIONS, 3, m.ApiVersionsRequest(client_software_name="kbroker-differential",
                                                         client_software_version="1.0"), timeout=3, outcome_only=True)

    def hs(mech: str = "PLAIN", v: int = 1) -> Step:
        return S(K.SASL_HANDSHAKE, v, H(mechanism=mech), timeout=5)

    def auth(token: bytes, v: int = 2) -> Step:
        return S(K.SASL_AUTHENTICATE, v, A(auth_bytes=token), timeout=5)

    meta = S(K.METADATA, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=n.topic)],
                                                allow_auto_topic_creation=False), timeout=5)
    add("unsupported mechanism", K.SASL_HANDSHAKE, hs("SCRAM-SHA-999"), open_())
    add("mechanism in lower case", K.SASL_HANDSHAKE, hs("plain"), open_())
    add("wrong password", K.SASL_AUTHENTICATE, hs(), auth(b"\0alice\0wrong"), open_())
    add("unknown user", K.SASL_AUTHENTICATE, hs(), auth(b"\0mallory\0alice-secret"), open_())
    add("malformed PLAIN token", K.SASL_AUTHENTICATE, hs(), auth(b"alice-without-separators"), open_())
    add("authorization id of another user", K.SASL_AUTHENTICATE, hs(), auth(b"admin\0alice\0alice-secret"),
        open_())
    add("empty token", K.SASL_AUTHENTICATE, hs(), auth(b""), open_())
    add("Metadata before authentication", K.METADATA, meta, open_())
    add("SaslAuthenticate without a handshake", K.SASL_AUTHENTICATE, auth(good), open_())
    add("a second handshake after authentication", K.SASL_HANDSHAKE, hs(), auth(good), hs(), open_())
    add("a second SaslAuthenticate", K.SASL_AUTHENTICATE, hs(), auth(good), auth(good), open_())
    add("ApiVersions before the handshake", K.API_VERSIONS, open_(), hs(), auth(good), meta)
    for v in (0, 1, 2):
        add(f"PLAIN with SaslAuthenticate v{v}", K.SASL_AUTHENTICATE, hs(), auth(good, v), meta)
    add("PLAIN with SaslHandshake v0 then a framed SaslAuthenticate", K.SASL_HANDSHAKE, hs(v=0), auth(good), open_())
    return out


def all_sequences(advertised: dict[int, tuple[int, int]], n: Names,
                  versions: Callable[[int, int, int], list[int]] | None = None) -> list[Sequence]:
    return valid_sequences(advertised, n, versions) + invalid_sequences(advertised, n) + \
        refused_sequences(advertised, n)


# ------------------------------------------------------------------------------------------------ setup

def advertised_versions(target: Target) -> dict[int, tuple[int, int]]:
    """The API keys and version ranges ``target`` advertises (its ApiVersions answer)."""
    conn = Conn(target)
    try:
        step = S(K.API_VERSIONS, 3, m.ApiVersionsRequest(client_software_name="kbroker-differential",
                                                         client_software_version="1.0"))
        out, _ = _one(conn, Ctx(target, {}), step, float("inf"))
    finally:
        conn.close()
    if out.message is None:
        raise RuntimeError(f"no ApiVersions answer from {target.host}:{target.port}: {out.status} {out.detail}")
    return {k.api_key: (k.min_version, k.max_version) for k in out.message.api_keys}


def _setup_steps(n: Names) -> list[Step]:
    C, M = m.CreateTopicsRequest, m.MetadataRequest
    names = [n.topic, n.produce_topic, n.config_topic]
    F = m.FindCoordinatorRequest
    return [
        S(K.CREATE_TOPICS, 7, C(topics=[C.CreatableTopic(name=n.topic, num_partitions=2, replication_factor=1),
                                        C.CreatableTopic(name=n.produce_topic, num_partitions=1,
                                                         replication_factor=1),
                                        C.CreatableTopic(name=n.config_topic, num_partitions=1,
                                                         replication_factor=1)], timeout_ms=30000)),
        S(K.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=t) for t in names], allow_auto_topic_creation=False),
          until=lambda r: len(r.topics) == 3 and all(t.error_code == 0 and t.partitions and all(
              p.leader_id >= 0 for p in t.partitions) for t in r.topics), tries=200),
        dataclasses.replace(_produce_to(n.topic, 9, 3), until=lambda r: all(
            p.error_code == 0 for t in r.responses for p in t.partition_responses), tries=200),
        S(K.FIND_COORDINATOR, 4, F(key_type=0, coordinator_keys=[n.group("warm")]),
          until=lambda r: all(c.error_code == 0 for c in r.coordinators), tries=300),
        S(K.FIND_COORDINATOR, 4, F(key_type=1, coordinator_keys=[n.txn("warm")]),
          until=lambda r: all(c.error_code == 0 for c in r.coordinators), tries=300),
        S(K.INIT_PRODUCER_ID, 5, m.InitProducerIdRequest(transactional_id=n.txn("warm"), transaction_timeout_ms=60000),
          until=lambda r: r.error_code == 0, tries=300),
        S(K.METADATA, 12, M(topics=[M.MetadataRequestTopic(name=t) for t in names],
                            allow_auto_topic_creation=False)),
    ]


def setup(targets: list[Target], n: Names, timeout: float = 60.0) -> dict[str, dict[str, bytes]]:
    """Run the setup on every target at once; its topic ids per target label. Raises RuntimeError when a step
    fails on one."""
    ids: dict[str, dict[str, bytes]] = {}
    errors: list[str] = []

    def go(t: Target) -> None:
        ctx = Ctx(t, {})
        conn = Conn(t)
        import time as _t  # noqa: PLC0415
        deadline = _t.monotonic() + timeout
        try:
            for step in _setup_steps(n):
                out, _ = _one(conn, ctx, step, deadline)
                if out.message is None:
                    errors.append(f"{t.label}: setup {step.label()}: {out.status} {out.detail}")
                    return
                for topic in getattr(out.message, "topics", None) or ():
                    tid = getattr(topic, "topic_id", None)
                    if tid and getattr(topic, "name", None):
                        ctx.topic_ids[topic.name] = bytes(tid)
                if _t.monotonic() > deadline:
                    errors.append(f"{t.label}: setup over {timeout:.0f} s")
                    return
        finally:
            conn.close()
        ids[t.label] = ctx.topic_ids

    threads = [threading.Thread(target=go, args=(t,), daemon=True) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout + 10)
    if errors or len(ids) != len(targets):
        raise RuntimeError("differential setup failed: " + "; ".join(errors or ["a setup did not finish"]))
    return ids
