"""A follower's replica fetcher: keeps one local replica in step with its partition's leader.

It fetches with the same Flight ``do_get`` consumers use, marked with its broker id (so the leader
records its position), appends the leader's batches as they are (offsets, epochs, producer ids),
and learns the high watermark (each batch is checked first: a follower never stores what it could
not read back, ``PartitionLog.append_replica``). Whenever it starts following a new leader epoch it
first asks the leader where its own latest epoch ended there and truncates to that point (KIP-101),
so a replica that comes back never keeps records the new leader does not have.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import pyarrow.flight as flight

from sparklog import wire
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.errors import InvalidRecord, NotLeader, OffsetOutOfRange, SparklogError

if TYPE_CHECKING:
    from sparklog.broker.broker import Broker
    from sparklog.broker.partition import Partition

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 16 << 20
FETCH_WAIT_MS = 500
FETCH_TIMEOUT_MARGIN_S = 1.5
STATE_REREAD_S = 2.0  # while the leader refuses us, re-read the partition state at most this often


class ReplicaFetcher(threading.Thread):
    """Follows the leader named in the partition's state until ``stop()``."""

    def __init__(self, broker: Broker, partition: Partition) -> None:
        super().__init__(name=f"fetcher-{partition.topic}-{partition.partition}", daemon=True)
        self.broker = broker
        self.partition = partition
        self._stopped = threading.Event()
        self._truncated_for: tuple[int, int] | None = None  # (leader, epoch) already reconciled
        self._state_read_at = 0.0

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        backoff = 0.05
        while not self._stopped.is_set():
            state = self.partition.state
            if state is None or state.leader < 0 or state.leader == self.broker.broker_id:
                self._stopped.wait(0.1)
                continue
            try:
                client = self.broker.flight_client(state.leader)
                if self._truncated_for != (state.leader, state.leader_epoch):
                    self._truncate_to_leader(client, state.leader_epoch)
                    self._truncated_for = (state.leader, state.leader_epoch)
                self._fetch_once(client, state.leader_epoch)
                backoff = 0.05
            except OffsetOutOfRange:
                self._truncated_for = None  # reconcile again with the leader's log
                self._stopped.wait(backoff)
            except (SparklogError, flight.FlightError, OSError) as exc:
                error = (
                    wire.from_flight_error(exc, f"leader {state.leader}")
                    if isinstance(exc, flight.FlightError)
                    else exc
                )
                if isinstance(error, OffsetOutOfRange):
                    self._truncated_for = None
                elif isinstance(error, NotLeader):
                    self._reread_state()
                elif isinstance(error, InvalidRecord):  # the leader sent what this replica cannot store
                    log.warning(
                        "%s-%s: refused a batch from the leader: %s",
                        self.partition.topic,
                        self.partition.partition,
                        error,
                    )
                else:
                    log.debug("fetch for %s-%s failed: %s", self.partition.topic, self.partition.partition, error)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)

    def _reread_state(self) -> None:
        """The leader refused us (another epoch, or it does not lead): our view of the partition
        may be stale (a notification that never arrived), so read it again, now and then."""
        now = time.monotonic()
        if now - self._state_read_at < STATE_REREAD_S:
            return
        self._state_read_at = now
        try:
            self.broker.read_state(self.partition.topic, self.partition.partition)
        except Exception as exc:  # ZooKeeper unreachable: the reconnect re-reads every state anyway
            log.debug("could not re-read the state of %s-%s: %r", self.partition.topic, self.partition.partition, exc)

    def _truncate_to_leader(self, client: flight.FlightClient, leader_epoch: int) -> None:
        plog = self.partition.log
        for _ in range(64):  # each round settles one epoch of divergence
            epoch = plog.epochs.latest_epoch
            if epoch < 0:
                break
            answer = self.broker.call_action(
                client,
                wire.OFFSETS_FOR_LEADER_EPOCH,
                {
                    "topic": self.partition.topic,
                    "partition": self.partition.partition,
                    "epoch": epoch,
                    "replica_id": self.broker.broker_id,
                    "leader_epoch": leader_epoch,
                },
            )
            leader_has, end = int(answer["epoch"]), int(answer["end_offset"])
            if leader_has < 0:  # the leader has nothing of our epochs: keep nothing
                plog.truncate_fully(int(answer["log_start_offset"]))
                break
            if end < plog.log_end_offset:
                log.info(
                    "%s-%s: truncating from %s to %s (epoch %s ends there on the leader)",
                    self.partition.topic,
                    self.partition.partition,
                    plog.log_end_offset,
                    end,
                    leader_has,
                )
                plog.truncate_to(end)
            if leader_has == epoch or plog.epochs.latest_epoch == epoch:
                break
        start = int(self._list_offsets(client)["log_start_offset"])
        if plog.log_end_offset < start:  # retention on the leader passed us by: start over there
            plog.truncate_fully(start)

    def _list_offsets(self, client: flight.FlightClient) -> dict:
        body = {"topic": self.partition.topic, "partition": self.partition.partition}
        return self.broker.call_action(client, wire.LIST_OFFSETS, body)

    def _fetch_once(self, client: flight.FlightClient, leader_epoch: int) -> None:
        plog = self.partition.log
        request = {
            "topic": self.partition.topic,
            "partition": self.partition.partition,
            "offset": plog.log_end_offset,
            "max_bytes": FETCH_MAX_BYTES,
            "max_wait_ms": FETCH_WAIT_MS,
            "replica_id": self.broker.broker_id,
            "leader_epoch": leader_epoch,
        }
        # a leader that froze (or whose host vanished) never answers: bound every fetch, so that the
        # follower notices a new leader in the partition state and moves on
        options = flight.FlightCallOptions(timeout=FETCH_WAIT_MS / 1000 + FETCH_TIMEOUT_MARGIN_S)
        try:
            reader = client.do_get(flight.Ticket(wire.encode(request)), options)
            while not self._stopped.is_set():
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                meta = wire.decode(chunk.app_metadata) if chunk.app_metadata is not None else {}
                leader_hw = int(meta.get("hw", 0))
                if chunk.data is not None and chunk.data.num_rows and "h" in meta:
                    header, _crc = BatchHeader.decode(meta["h"])
                    if header.base_offset < plog.log_end_offset:
                        continue  # already have it (a retried fetch)
                    self.partition.append_as_follower(chunk.data, header, leader_hw)
                else:
                    self.partition.follower_hw(leader_hw)
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc, "leader") from None
