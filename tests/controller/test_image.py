"""MetadataDelta replay semantics and MetadataImage immutability."""

from __future__ import annotations

import dataclasses

import pytest

from kbroker.controller.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    Endpoint,
    MetadataDelta,
    MetadataImage,
    MetadataReplayError,
    is_internal,
)
from kbroker.protocol import metadata_records as mr

T1 = b"\x11" * 16
T2 = b"\x22" * 16


def _replay(image: MetadataImage, *records) -> tuple[MetadataImage, MetadataDelta]:
    delta = MetadataDelta(image)
    for i, r in enumerate(records):
        delta.replay(r, image.offset + 1 + i)
    return delta.apply(), delta


def _topic(name="t", topic_id=T1, partitions=2):
    recs = [mr.TopicRecord(name=name, topic_id=topic_id)]
    for p in range(partitions):
        recs.append(mr.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=[1, 2], isr=[1, 2], leader=1,
                                       leader_epoch=0, partition_epoch=0))
    return recs


def test_topic_and_partitions():
    img, delta = _replay(MetadataImage.empty("c"), *_topic())
    t = img.topics_by_name["t"]
    assert img.topics_by_id[T1] is t
    assert t.topic_id == T1 and sorted(t.partitions) == [0, 1]
    p = img.partition("t", 1)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 2), (1, 2), 1, 0, 0)
    assert img.offset == 2
    ch = delta.changes()
    assert ch.created_topics == {T1}
    assert ch.changed_partitions == {(T1, 0), (T1, 1)}
    assert not ch.deleted_topics


def test_image_is_immutable():
    img, _ = _replay(MetadataImage.empty("c"), *_topic())
    with pytest.raises(TypeError):
        img.topics_by_name["x"] = None  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        img.offset = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        img.topics_by_name["t"].partitions[5] = None  # type: ignore[index]
    # the base image is untouched by later deltas
    img2, _ = _replay(img, mr.RemoveTopicRecord(topic_id=T1))
    assert "t" in img.topics_by_name and "t" not in img2.topics_by_name


def test_partition_change_semantics():
    img, _ = _replay(MetadataImage.empty("c"), *_topic())
    # ISR shrink only: partition epoch +1, leader epoch unchanged
    img, _ = _replay(img, mr.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1]))
    p = img.partition("t", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), 1, 0, 1)
    # a leader named (even the same one) bumps the leader epoch
    img, _ = _replay(img, mr.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=2, isr=[2]))
    p = img.partition("t", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((2,), 2, 1, 2)
    img, _ = _replay(img, mr.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1))
    p = img.partition("t", 0)
    assert (p.leader, p.leader_epoch, p.replicas) == (-1, 2, (1, 2))
    img, _ = _replay(img, mr.PartitionChangeRecord(partition_id=0, topic_id=T1, replicas=[3, 1], leader_recovery_state=1))
    p = img.partition("t", 0)
    assert (p.replicas, p.leader_recovery_state, p.leader_epoch) == ((3, 1), 1, 2)
    assert img.partition("t", 1).partition_epoch == 0  # other partitions untouched
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.PartitionChangeRecord(partition_id=9, topic_id=T1))


def test_remove_topic_drops_configs_and_allows_recreate_in_same_delta():
    img, _ = _replay(MetadataImage.empty("c"), *_topic(),
                     mr.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name="t", name="retention.ms", value="1"))
    assert img.topic_configs("t") == {"retention.ms": "1"}
    img2, delta = _replay(img, mr.RemoveTopicRecord(topic_id=T1), *_topic(topic_id=T2, partitions=1))
    assert img2.topics_by_name["t"].topic_id == T2
    assert T1 not in img2.topics_by_id and list(img2.topics_by_id) == [T2]
    assert img2.topic_configs("t") == {}
    assert (TOPIC_RESOURCE, "t") not in img2.configs
    ch = delta.changes()
    assert ch.created_topics == {T2}
    assert set(ch.deleted_topics) == {T1} and ch.deleted_topics[T1].name == "t"
    assert ch.changed_partitions == {(T2, 0)}
    assert ch.changed_configs == {(TOPIC_RESOURCE, "t")}


def test_create_then_remove_in_one_delta_is_invisible():
    img, delta = _replay(MetadataImage.empty("c"), *_topic(), mr.RemoveTopicRecord(topic_id=T1))
    assert not img.topics_by_name and not img.topics_by_id
    assert delta.changes().is_empty


def test_replay_rejects_inconsistent_records():
    img, _ = _replay(MetadataImage.empty("c"), *_topic())
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.TopicRecord(name="t", topic_id=T2))  # same name
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.TopicRecord(name="u", topic_id=T1))  # same id
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.PartitionRecord(partition_id=0, topic_id=T2))  # unknown topic
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.RemoveTopicRecord(topic_id=T2))


def test_configs_set_and_delete():
    img, _ = _replay(MetadataImage.empty("c"),
                     mr.ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="a", value="1"),
                     mr.ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="1", name="b", value="2"))
    assert img.broker_configs() == {"a": "1"} and img.broker_configs(1) == {"b": "2"}
    img, delta = _replay(img, mr.ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="a", value=None))
    assert img.broker_configs() == {} and (BROKER_RESOURCE, "") not in img.configs
    assert delta.changes().changed_configs == {(BROKER_RESOURCE, "")}


def test_features_and_producer_ids():
    img, delta = _replay(MetadataImage.empty("c"),
                         mr.FeatureLevelRecord(name="metadata.version", feature_level=30),
                         mr.FeatureLevelRecord(name="group.version", feature_level=1),
                         mr.ProducerIdsRecord(broker_id=1, broker_epoch=3, next_producer_id=1000))
    assert dict(img.features) == {"metadata.version": 30, "group.version": 1}
    assert img.metadata_version == 30 and img.producer_ids_next == 1000
    assert delta.changes().features_changed and delta.changes().producer_ids_changed
    img, _ = _replay(img, mr.FeatureLevelRecord(name="group.version", feature_level=0))
    assert dict(img.features) == {"metadata.version": 30}
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.ProducerIdsRecord(next_producer_id=10))


def test_broker_registration_and_fencing():
    reg = mr.RegisterBrokerRecord(
        broker_id=1, incarnation_id=T1, broker_epoch=7, rack=None, fenced=True,
        end_points=[mr.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
        features=[mr.RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=7,
                                                        max_supported_version=30)])
    img, delta = _replay(MetadataImage.empty("c"), reg)
    b = img.brokers[1]
    assert b.fenced and b.broker_epoch == 7 and b.rack is None
    assert b.endpoints == (Endpoint("PLAINTEXT", "h", 9092, 0),)
    assert b.endpoint("plaintext").port == 9092 and b.endpoint("SSL") is None
    assert b.supported_features == {"metadata.version": (7, 30)}
    assert img.live_brokers() == []
    assert delta.changes().changed_brokers == {1}
    img, _ = _replay(img, mr.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=7, fenced=-1))
    assert not img.brokers[1].fenced and [x.node_id for x in img.live_brokers()] == [1]
    img, _ = _replay(img, mr.FenceBrokerRecord(id=1, epoch=7))
    assert img.brokers[1].fenced
    img, _ = _replay(img, mr.UnfenceBrokerRecord(id=1, epoch=7))
    assert not img.brokers[1].fenced
    with pytest.raises(MetadataReplayError):
        _replay(img, mr.FenceBrokerRecord(id=1, epoch=6))  # stale epoch
    img, _ = _replay(img, mr.UnregisterBrokerRecord(broker_id=1, broker_epoch=7))
    assert 1 not in img.brokers


def test_noop_and_transaction_markers_only_move_the_offset():
    img, delta = _replay(MetadataImage.empty("c"), mr.NoOpRecord(), mr.BeginTransactionRecord(name="x"),
                         mr.EndTransactionRecord(), mr.AbortTransactionRecord())
    assert img.offset == 3 and delta.changes().is_empty
    assert img == dataclasses.replace(MetadataImage.empty("c"), offset=3)


def test_offsets_never_go_backwards():
    delta = MetadataDelta(MetadataImage.empty("c"))
    delta.replay(mr.NoOpRecord(), 5)
    with pytest.raises(MetadataReplayError):
        delta.replay(mr.NoOpRecord(), 4)
    delta.advance_offset(9)
    assert delta.apply().offset == 9


def test_internal_names():
    assert is_internal("__consumer_offsets") and is_internal("__transaction_state")
    assert not is_internal("orders") and not is_internal("__cluster_metadata")
    img, _ = _replay(MetadataImage.empty("c"), *_topic(name="__consumer_offsets"))
    assert img.topics_by_name["__consumer_offsets"].is_internal
