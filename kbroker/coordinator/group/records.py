"""Builders for the ``__consumer_offsets`` records the group coordinator writes (protocol guide §5.2).

Value versions follow what Apache Kafka 4.3 writes: ``OffsetCommitValue`` v4 (flexible, with the topic id
tag), or v1 when the commit carries an explicit expire timestamp (OffsetCommit v2-4 ``RetentionTimeMs``);
``GroupMetadataValue`` v3.
"""

from __future__ import annotations

from kbroker.coordinator.runtime import CoordinatorRecord, CoordinatorRecordSerde
from kbroker.protocol import coordinator_records as cr
from kbroker.protocol.coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from kbroker.protocol.schema import ZERO_UUID

OFFSET_COMMIT_VALUE_VERSION = 4
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

#: Record types of ``__consumer_offsets`` known here (protocol guide §5.2): classic, consumer (KIP-848) and share
#: (KIP-932) and streams (KIP-1071) group records.
GROUP_COORDINATOR_RECORD_CLASSES = (
    cr.LegacyOffsetCommitKey, cr.LegacyOffsetCommitValue,
    cr.OffsetCommitKey, cr.OffsetCommitValue,
    cr.GroupMetadataKey, cr.GroupMetadataValue,
    cr.ConsumerGroupMetadataKey, cr.ConsumerGroupMetadataValue,
    cr.ConsumerGroupPartitionMetadataKey, cr.ConsumerGroupPartitionMetadataValue,
    cr.ConsumerGroupMemberMetadataKey, cr.ConsumerGroupMemberMetadataValue,
    cr.ConsumerGroupTargetAssignmentMetadataKey, cr.ConsumerGroupTargetAssignmentMetadataValue,
    cr.ConsumerGroupTargetAssignmentMemberKey, cr.ConsumerGroupTargetAssignmentMemberValue,
    cr.ConsumerGroupCurrentMemberAssignmentKey, cr.ConsumerGroupCurrentMemberAssignmentValue,
    cr.ConsumerGroupRegularExpressionKey, cr.ConsumerGroupRegularExpressionValue,
    cr.ShareGroupMemberMetadataKey, cr.ShareGroupMemberMetadataValue,
    cr.ShareGroupMetadataKey, cr.ShareGroupMetadataValue,
    cr.ShareGroupTargetAssignmentMetadataKey, cr.ShareGroupTargetAssignmentMetadataValue,
    cr.ShareGroupTargetAssignmentMemberKey, cr.ShareGroupTargetAssignmentMemberValue,
    cr.ShareGroupCurrentMemberAssignmentKey, cr.ShareGroupCurrentMemberAssignmentValue,
    cr.ShareGroupStatePartitionMetadataKey, cr.ShareGroupStatePartitionMetadataValue,
    cr.StreamsGroupMetadataKey, cr.StreamsGroupMetadataValue,
    cr.StreamsGroupTopologyKey, cr.StreamsGroupTopologyValue,
    cr.StreamsGroupMemberMetadataKey, cr.StreamsGroupMemberMetadataValue,
    cr.StreamsGroupTargetAssignmentMetadataKey, cr.StreamsGroupTargetAssignmentMetadataValue,
    cr.StreamsGroupTargetAssignmentMemberKey, cr.StreamsGroupTargetAssignmentMemberValue,
    cr.StreamsGroupCurrentMemberAssignmentKey, cr.StreamsGroupCurrentMemberAssignmentValue,
)
GROUP_COORDINATOR_SERDE = CoordinatorRecordSerde(GROUP_COORDINATOR_RECORD_CLASSES)


def offset_commit_record(group_id: str, topic: str, partition: int, offset: int, leader_epoch: int,
                         metadata: str, commit_timestamp_ms: int, expire_timestamp_ms: int | None = None,
                         topic_id: bytes = ZERO_UUID) -> CoordinatorRecord:
    key = OffsetCommitKey(group=group_id, topic=topic, partition=partition)
    if expire_timestamp_ms is not None:
        value = OffsetCommitValue(offset=offset, metadata=metadata, commit_timestamp=commit_timestamp_ms,
                                  expire_timestamp=expire_timestamp_ms)
        return CoordinatorRecord(key, value, OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
    value = OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                              commit_timestamp=commit_timestamp_ms, topic_id=topic_id)
    return CoordinatorRecord(key, value, OFFSET_COMMIT_VALUE_VERSION)


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group=group_id, topic=topic, partition=partition), None)


def group_metadata_record(group_id: str, value: GroupMetadataValue) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group=group_id), value, GROUP_METADATA_VALUE_VERSION)


def group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group=group_id), None)
