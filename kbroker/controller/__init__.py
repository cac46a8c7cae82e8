"""Cluster metadata: KRaft-style metadata records, the immutable metadata image and the quorum controller.

See ``docs/metadata.md``. Nothing in this package uses asyncio; every call is synchronous and quick.
"""

from __future__ import annotations

from kbroker.controller.image import (
    BrokerRegistration,
    Endpoint,
    MetadataChanges,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TopicImage,
    is_internal,
)
from kbroker.controller.quorum_controller import (
    CreateTopicResult,
    CreateTopicSpec,
    DeleteTopicResult,
    MetadataStorageError,
    QuorumController,
)
from kbroker.controller.records import decode_metadata_record, encode_metadata_record

__all__ = [
    "BrokerRegistration",
    "CreateTopicResult",
    "CreateTopicSpec",
    "DeleteTopicResult",
    "Endpoint",
    "MetadataChanges",
    "MetadataDelta",
    "MetadataImage",
    "MetadataStorageError",
    "PartitionImage",
    "QuorumController",
    "TopicImage",
    "decode_metadata_record",
    "encode_metadata_record",
    "is_internal",
]
