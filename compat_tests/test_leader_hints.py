"""KIP-951 against three combined nodes: a Produce (v11) or a consumer's Fetch (v16) for a partition sent to a broker
that holds no replica of it is answered NOT_LEADER_OR_FOLLOWER with the leader and its epoch in ``CurrentLeader``
and the leader's address in ``NodeEndpoints`` (the client goes there without a metadata round trip); librdkafka
and the Java client then produce and consume through the hint as they do against Kafka."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.wire import Rec, encode_batch
from kbroker.protocol.api_keys import ApiKey
from kbroker.protocol.errors import ErrorCode
from kbroker.protocol.messages import (FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest,
                                       ProduceResponse)
from kbroker.testing.cluster import KbrokerCluster, ask, wait_until

pytestmark = pytest.mark.timeout(300)


def test_not_leader_answers_name_the_leader(tmp_path):
    with KbrokerCluster(tmp_path, nodes=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("hinted", num_partitions=1, replica_assignment=[[1]])])["hinted"].result(30)
        leader = cluster.nodes[1]
        other = cluster.nodes[2]

        def metadata_has_topic() -> bool:
            # asked of node 2 itself: an AdminClient bootstrapped there may send its Metadata to another node,
            # and a node that has not replayed the topic yet answers UNKNOWN_TOPIC_OR_PARTITION, as Kafka's does
            md = ask(other.host, other.port, ApiKey.METADATA, 12,
                     MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="hinted")]), MetadataResponse)
            return md.topics[0].error_code == 0 and [p.partition_index for p in md.topics[0].partitions] == [0]

        wait_until(metadata_has_topic, 30, "node 2 knows the topic")
        produce = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
            name="hinted", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=encode_batch([Rec(None, b"v")]))])])
        resp = ask(other.host, other.port, ApiKey.PRODUCE, 11, produce, ProduceResponse)
        pr = resp.responses[0].partition_responses[0]
        assert pr.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (pr.current_leader.leader_id, pr.current_leader.leader_epoch) == (1, 0)
        assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [(1, leader.host, leader.port)]

        md = ask(other.host, other.port, ApiKey.METADATA, 12,
                 MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="hinted")]), MetadataResponse)
        topic_id = md.topics[0].topic_id
        for version, topic in ((12, {"topic": "hinted"}), (16, {"topic_id": topic_id})):
            fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[
                FetchRequest.FetchTopic(**topic, partitions=[FetchRequest.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
            resp = ask(other.host, other.port, ApiKey.FETCH, version, fetch, FetchResponse)
            pd = resp.responses[0].partitions[0]
            assert pd.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, version
            # Kafka fills CurrentLeader of a Fetch answer from v16 (KIP-951) only, although the field exists from v12
            want_leader = (1, 0) if version >= 16 else (-1, -1)
            assert (pd.current_leader.leader_id, pd.current_leader.leader_epoch) == want_leader, version
            want = [(1, leader.host, leader.port)] if version >= 16 else []
            assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == want, version

        # real clients, bootstrapped at the broker that is not the leader
        p = Producer({"bootstrap.servers": other.bootstrap, "acks": "all"})
        for i in range(20):
            p.produce("hinted", value=f"h-{i}".encode(), partition=0)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": other.bootstrap, "group.id": "hints", "enable.auto.commit": False})
        c.assign([TopicPartition("hinted", 0, 0)])
        got: list[bytes] = []
        wait_until(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if m.error() is None) or len(got) >= 20,
                   30, "the records back")
        c.close()
        assert got == [f"h-{i}".encode() for i in range(20)]
