"""What a Flight request handler is given: the broker it serves (:class:`ServedBroker`, the few
calls handlers make) and the call itself (:class:`ServedCall`: its request, the caller's
permissions, what checks them again during an open stream, and its quota throttle). The server
(:mod:`sparklog.broker.server`) builds both; a handler module never sees the server."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow.flight as flight

from sparklog.broker.call_permissions import CallPermissions
from sparklog.broker.throttle import Kind

if TYPE_CHECKING:
    from sparklog.broker.cluster_requests import ClusterRequests
    from sparklog.broker.lake.union_read import UnionRead
    from sparklog.broker.partition import Partition
    from sparklog.broker.replication.fetch_session import FetchSessionCache
    from sparklog.broker.replication.partition_changes import PartitionChanges
    from sparklog.schemas.value_schema import ValueSchema

Throttled = Callable[[Kind, float], float]  # (kind, amount) -> the seconds the call was made to wait


def unthrottled(_kind: Kind, _amount: float) -> float:
    return 0.0


class CallMeter(Protocol):
    """Where served calls are counted (:class:`~sparklog.broker.metrics.BrokerMetrics`): once per
    request, and once per batch sent to a consumer, never per record."""

    def fetched(self, topic: str, records: int, size: int) -> None: ...

    def request(self, listener: str, name: str, version: str = "", elapsed_s: float | None = None) -> None: ...

    def produce_request(
        self, listener: str, local_s: float, remote_s: float, throttle_s: float, total_s: float, version: int = -1
    ) -> None: ...

    def throttled(self, listener: str, user: str, seconds: float) -> None: ...


class ServedBroker(Protocol):
    """What the Flight service needs of its broker (:class:`~sparklog.broker.broker.Broker`, or a
    fake): the partitions it leads, what waiting fetches wait on, the followers' fetch sessions,
    the lake's union read, the typed topics' schemas, the cluster actions' answers, and where calls
    are counted."""

    broker_id: int
    full_look_s: float
    union_read: UnionRead
    cluster_requests: ClusterRequests | None
    metrics: CallMeter

    @property
    def changes(self) -> PartitionChanges: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...

    @property
    def value_schemas(self) -> Mapping[str, Sequence[ValueSchema]]: ...

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition: ...


@dataclasses.dataclass(frozen=True)
class ServedCall:
    """One admitted and authorized call, as its handler sees it."""

    context: flight.ServerCallContext
    request: dict[str, Any]
    may: CallPermissions
    recheck: Callable[[], None]  # raises once the caller may no longer do this (an open stream's check)
    throttled: Throttled
    stopping: Callable[[], bool]  # the listener is shutting down
