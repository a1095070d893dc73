"""What a follower's fetcher needs from a leader broker, and nothing more (Kafka's ``LeaderEndPoint``):
fetch many partitions at once, ask where an epoch ends, ask where the log starts. Tests give a
fetcher a fake one; brokers give it :class:`FlightLeaderEndPoint`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.replication import fetch_request
from sparklog.broker.replication.fetch_request import FetchPosition
from sparklog.broker.replication.fetch_session_handler import FetchSessionHandler
from sparklog.errors import InvalidRecord, SparklogError, error_from_code
from sparklog.protocol import wire

FETCH_TIMEOUT_MARGIN_S = 5.0  # past max_wait_ms: a frozen leader must not hold the fetcher for long


@dataclasses.dataclass(frozen=True)
class FetchedItem:
    """One message of a replica fetch's answer: a batch, a new high watermark, or an error."""

    topic: str
    partition: int
    high_watermark: int = -1
    log_start_offset: int = -1
    batch: pa.RecordBatch | None = None
    header: BatchHeader | None = None
    error: SparklogError | None = None


class LeaderEndPoint(Protocol):
    def fetch(self, positions: list[FetchPosition], max_wait_ms: int, max_bytes: int) -> Iterator[FetchedItem]:
        """One round: ``positions`` are every partition fetched from this leader this round (an
        endpoint may send only what changed since its previous round: a fetch session)."""
        ...

    def offsets_for_leader_epoch(
        self, topic: str, partition: int, epoch: int, leader_epoch: int
    ) -> tuple[int, int, int]:
        """(the largest epoch <= ``epoch`` the leader has, where it ends there, its log start)."""
        ...

    def log_start_offset(self, topic: str, partition: int) -> int: ...


class FlightLeaderEndPoint:
    """A leader broker over Arrow Flight, for follower ``replica_id``."""

    def __init__(
        self,
        leader_id: int,
        replica_id: int,
        client: Callable[[], flight.FlightClient],
        call_action: Callable[[flight.FlightClient, str, dict[str, Any]], dict[str, Any]],
    ) -> None:
        self.leader_id = leader_id
        self.replica_id = replica_id
        self._client = client
        self._call_action = call_action
        self._session = FetchSessionHandler()  # one fetcher uses one endpoint: one session

    def fetch(self, positions: list[FetchPosition], max_wait_ms: int, max_bytes: int) -> Iterator[FetchedItem]:
        """Fetch ``positions`` (every partition fetched from this leader this round) in this
        endpoint's fetch session: the request lists only what changed since the previous one."""
        listed, session = self._session.build(positions)
        body = fetch_request.request(self.replica_id, listed, max_wait_ms, max_bytes, session)
        options = flight.FlightCallOptions(timeout=max_wait_ms / 1000 + FETCH_TIMEOUT_MARGIN_S)
        answered = False
        try:
            reader = self._client().do_get(flight.Ticket(wire.encode(body)), options)
            if len(reader.schema):  # its batches would be decoded (decompressed) before any check
                raise SparklogError(f"leader {self.leader_id} answered a replica fetch with record batch columns")
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    answered = True
                    return
                yield _item(chunk)
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc, f"leader {self.leader_id}") from None
        finally:  # also when the fetcher stops reading the answer half-way
            if answered:
                self._session.answered()
            else:
                self._session.reset()

    def offsets_for_leader_epoch(
        self, topic: str, partition: int, epoch: int, leader_epoch: int
    ) -> tuple[int, int, int]:
        body = {
            "topic": topic,
            "partition": partition,
            "epoch": epoch,
            "replica_id": self.replica_id,
            "leader_epoch": leader_epoch,
        }
        answer = self._call_action(self._client(), wire.OFFSETS_FOR_LEADER_EPOCH, body)
        return int(answer["epoch"]), int(answer["end_offset"]), int(answer["log_start_offset"])

    def log_start_offset(self, topic: str, partition: int) -> int:
        answer = self._call_action(self._client(), wire.LIST_OFFSETS, {"topic": topic, "partition": partition})
        # a follower copies the leader's local log (a lake-enabled partition's log start is in its table)
        return int(answer.get("local_log_start_offset", answer["log_start_offset"]))


def _item(chunk: flight.FlightStreamChunk) -> FetchedItem:
    """One response message (:class:`SparklogError` if it names no partition: the whole answer is
    unusable)."""
    if chunk.app_metadata is None:
        raise SparklogError("a replica fetch message came without its metadata")
    try:
        frame = fetch_request.read_frame(chunk.app_metadata)
        meta = frame.metadata
        topic, partition = str(meta["t"]), int(meta["p"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SparklogError(f"a replica fetch message names no partition: {exc!r}") from None
    if "error" in meta:
        return FetchedItem(topic, partition, error=error_from_code(str(meta["error"]), str(meta.get("message", ""))))
    try:
        hw, lso = int(meta["hw"]), int(meta["lso"])
        batch = frame.batch()
        if batch is None:
            return FetchedItem(topic, partition, hw, lso)
        header, _crc = BatchHeader.decode(meta["h"])
    except (KeyError, TypeError, ValueError) as exc:
        return FetchedItem(topic, partition, error=InvalidRecord(f"a replica fetch message lacks {exc!r}"))
    except SparklogError as exc:  # this partition's batch is unusable; the others are not
        return FetchedItem(topic, partition, error=exc)
    return FetchedItem(topic, partition, hw, lso, batch, header)
