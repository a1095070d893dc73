"""A leader's answers about its partitions' offsets: ``list_offsets`` (Kafka's ListOffsets: log
start and end, high watermark, leader epoch, the lake's offsets, an offset for a time; many
partitions in one request, each answered or refused alone) and ``offsets_for_leader_epoch``
(Kafka's OffsetForLeaderEpoch). What each call needs is checked before it comes here
(:mod:`sparklog.broker.call_authorization`); a many-partition ``list_offsets`` checks Describe per
partition, as Kafka does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparklog.broker.call_permissions import TOPIC, CallPermissions
from sparklog.broker.request_fields import int_field, topic_field
from sparklog.errors import InvalidRequest, SparklogError
from sparklog.protocol import wire
from sparklog.security.acls import Operation

if TYPE_CHECKING:
    from sparklog.broker.lake.union_read import UnionRead
    from sparklog.broker.partition import Partition

MAX_LIST_OFFSETS = 100_000  # partitions in one list_offsets action


class OffsetRequests:
    """Answers offset requests for the partitions ``leader_partition`` gives (NotLeader otherwise),
    through the lake's ``union_read`` where a partition's history is in its table."""

    def __init__(self, leader_partition: Callable[[str, int], Partition], union_read: UnionRead) -> None:
        self.leader_partition = leader_partition
        self.union_read = union_read

    def list_offsets(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        """One partition's offsets; or, with ``"partitions": [{"topic", "partition", "timestamp"?}, ...]``,
        ``{"results": [...]}`` with each partition's offsets or its own ``{"error", "message"}``
        (Kafka's ListOffsets: a consumer of many partitions asks each leader once)."""
        items = request.get("partitions")
        if items is None:  # Describe on its topic: checked by the call table
            return self.partition_offsets(request)
        if not isinstance(items, list) or len(items) > MAX_LIST_OFFSETS or not all(isinstance(i, dict) for i in items):
            raise InvalidRequest(f"'partitions' must be a list of at most {MAX_LIST_OFFSETS} objects")
        results: list[dict[str, Any]] = []
        for item in items:
            try:
                may.check(Operation.DESCRIBE, TOPIC, topic_field(item))
                results.append(self.partition_offsets(item))
            except SparklogError as exc:  # this partition only
                results.append({"error": exc.code, "message": str(exc)[: wire.MAX_ERROR_MESSAGE]})
        return {"results": results}

    def partition_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        topic, p = topic_field(request), int_field(request, "partition")
        partition = self.leader_partition(topic, p)
        plog = partition.log
        union = self.union_read
        result: dict[str, Any] = {
            "log_start_offset": union.earliest(partition),  # in the lake when the lake reaches the log
            "local_log_start_offset": plog.log_start_offset,
            "log_end_offset": plog.log_end_offset,
            "high_watermark": partition.high_watermark,
            "leader_epoch": partition.leader_epoch,
        }
        if plog.config.lake_enabled:
            result["lake_offset"] = plog.tiered_offset  # None until the tierer has read the table
            result["lake_table"] = union.lake_table(topic)  # None: this broker has no lake dir
        if "timestamp" in request:
            found = union.offset_for_time(partition, int_field(request, "timestamp"))
            result["offset_for_time"] = None if found is None or found >= partition.high_watermark else found
        return result

    def leader_epoch_end(self, request: dict[str, Any]) -> dict[str, Any]:
        """Kafka's OffsetForLeaderEpoch: where ``epoch`` ends in this leader's log (the start of the
        next epoch, or the log end for the current one): a follower truncates to it."""
        topic, p = topic_field(request), int_field(request, "partition")
        partition = self.leader_partition(topic, p)
        plog = partition.log
        with plog.lock:
            epoch, end = plog.epochs.end_offset_for(int_field(request, "epoch"), plog.log_end_offset)
        return {"epoch": epoch, "end_offset": end, "log_start_offset": plog.log_start_offset}
