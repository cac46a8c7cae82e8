"""On-disk partition logs in Apache Kafka's directory layout (no asyncio). See docs/storage-format.md."""

from __future__ import annotations

from kbroker.storage.checkpoints import OffsetCheckpointFile
from kbroker.storage.config import BROKER_TO_TOPIC_KEYS, TOPIC_CONFIG_DEFAULTS, LogConfig
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log import AppendInfo, FetchDataInfo, PartitionLog
from kbroker.storage.log_manager import LogManager, read_meta_properties, write_meta_properties
from kbroker.storage.segment import LogSegment

__all__ = [
    "AppendInfo",
    "BROKER_TO_TOPIC_KEYS",
    "FetchDataInfo",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetCheckpointFile",
    "PartitionLog",
    "TOPIC_CONFIG_DEFAULTS",
    "read_meta_properties",
    "write_meta_properties",
]
