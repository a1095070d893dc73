"""The storage engine: a partition's log of Arrow IPC segments (see docs/architecture.md)."""

from sparklog.broker.log.batch_codec import BatchHeader, iter_segment
from sparklog.broker.log.log_cleaner import CleanResult, compact
from sparklog.broker.log.partition_log import AppendInfo, PartitionLog
from sparklog.broker.log.segment import LogSegment

__all__ = [
    "AppendInfo",
    "BatchHeader",
    "CleanResult",
    "LogSegment",
    "PartitionLog",
    "compact",
    "iter_segment",
]
