"""A follower's fetcher for one leader broker (Kafka's ``ReplicaFetcherThread``): one thread keeps
every local replica whose partition that broker leads in step with it.

Each round sends one request for all of them (:mod:`sparklog.broker.replication.fetch_request`):
the leader answers with the partitions that have new batches, a new high watermark or an error,
or waits up to ``FETCH_WAIT_MS`` for one. Batches are appended as the leader stored them (offsets,
epochs, producer ids; each checked first: a follower never stores what it could not read back).

Whenever a replica starts following a new leader epoch it first asks the leader where its own
latest epoch ended there and truncates to that point (KIP-101), so a replica that comes back never
keeps records the new leader does not have. A partition the leader refuses (another epoch, not
the leader) has its state re-read (at most every ``STATE_REREAD_S``) and sits out a round or two;
the others go on.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparklog.broker.replication.fetch_request import FetchPosition
from sparklog.broker.replication.leader_endpoint import FetchedItem, LeaderEndPoint
from sparklog.errors import InvalidRecord, LogClosed, NotLeader, OffsetOutOfRange, SparklogError

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 16 << 20  # per partition and round
FETCH_WAIT_MS = 500
STATE_REREAD_S = 2.0
PARTITION_BACKOFF_S = 0.5  # a partition the leader refused sits out this long
TopicPartition = tuple[str, int]


@dataclasses.dataclass
class _Followed:
    partition: Partition
    reconciled_epoch: int | None = None  # the leader epoch truncation was done for
    retry_at: float = 0.0
    state_read_at: float = 0.0


class LeaderFetcher(threading.Thread):
    """Follows the partitions :meth:`add`-ed to it, all led by ``leader_id``, until :meth:`stop`."""

    def __init__(
        self,
        leader_id: int,
        endpoint: LeaderEndPoint,
        reread_state: Callable[[str, int], None],
        name: str,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.reread_state = reread_state
        self._followed: dict[TopicPartition, _Followed] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._wake = threading.Event()

    # ----------------------------------------------------------------- membership
    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        with self._lock:
            if key not in self._followed or self._followed[key].partition is not partition:
                self._followed[key] = _Followed(partition)
        self._wake.set()

    def remove(self, key: TopicPartition) -> None:
        with self._lock:
            self._followed.pop(key, None)

    def keys(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._followed)

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    # ----------------------------------------------------------------- the loop
    def run(self) -> None:
        backoff = 0.05
        while not self._stopped.is_set():
            ready = self._ready()
            if not ready:
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            try:
                self._round(ready)
                backoff = 0.05
            except (SparklogError, OSError) as exc:
                log.debug("fetch from leader %s failed: %s", self.leader_id, exc)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)
            except Exception:  # a bug must not end replication from this leader: log it, go on
                log.exception("fetch from leader %s failed unexpectedly", self.leader_id)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 1.0)

    def _ready(self) -> list[_Followed]:
        """The followed partitions to fetch this round: this leader's, in its epoch, reconciled."""
        now = time.monotonic()
        with self._lock:
            followed = list(self._followed.values())
        ready = []
        for item in followed:
            state = item.partition.state
            if state is None or state.leader != self.leader_id or item.retry_at > now or item.partition.log.closed:
                continue
            if item.reconciled_epoch != state.leader_epoch:
                try:
                    self._truncate_to_leader(item.partition, state.leader_epoch)
                    item.reconciled_epoch = state.leader_epoch
                except SparklogError as exc:
                    self._refused(item, exc)
                    continue
                except OSError as exc:
                    log.debug("%s: truncation failed: %s", _name(item.partition), exc)
                    item.retry_at = now + PARTITION_BACKOFF_S
                    continue
            ready.append(item)
        return ready

    def _round(self, ready: list[_Followed]) -> None:
        positions = []
        by_key: dict[TopicPartition, _Followed] = {}
        for item in ready:
            p = item.partition
            state = p.state
            if state is None:
                continue
            positions.append(
                FetchPosition(p.topic, p.partition, p.log.log_end_offset, state.leader_epoch, p.high_watermark)
            )
            by_key[(p.topic, p.partition)] = item
        for fetched in self.endpoint.fetch(positions, FETCH_WAIT_MS, FETCH_MAX_BYTES):
            if self._stopped.is_set():
                return
            item = by_key.get((fetched.topic, fetched.partition))
            if item is None or self._followed.get((fetched.topic, fetched.partition)) is not item:
                continue  # not asked for, or no longer followed here
            try:
                self._take(item, fetched)
            except LogClosed:
                continue  # deleted or moved meanwhile
            except InvalidRecord as exc:
                log.warning("%s: refused a batch from leader %s: %s", _name(item.partition), self.leader_id, exc)
                item.retry_at = time.monotonic() + PARTITION_BACKOFF_S
            except SparklogError as exc:
                self._refused(item, exc)

    def _take(self, item: _Followed, fetched: FetchedItem) -> None:
        partition = item.partition
        if fetched.error is not None:
            raise fetched.error
        if fetched.batch is not None and fetched.header is not None:
            if fetched.header.base_offset < partition.log.log_end_offset:
                return  # already have it (an answer to an older position)
            partition.append_as_follower(fetched.batch, fetched.header, fetched.high_watermark)
        else:
            partition.follower_hw(fetched.high_watermark)

    def _refused(self, item: _Followed, error: SparklogError) -> None:
        """The leader would not serve this partition: sit it out, and find out why."""
        now = time.monotonic()
        item.retry_at = now + PARTITION_BACKOFF_S
        if isinstance(error, OffsetOutOfRange):
            item.reconciled_epoch = None  # reconcile with the leader's log again
            item.retry_at = now + 0.05
        elif isinstance(error, NotLeader) and now - item.state_read_at >= STATE_REREAD_S:
            # our view of the partition may be stale (a notification that never arrived)
            item.state_read_at = now
            try:
                self.reread_state(item.partition.topic, item.partition.partition)
            except Exception as exc:  # ZooKeeper unreachable: the reconnect re-reads every state anyway
                log.debug("could not re-read the state of %s: %r", _name(item.partition), exc)
        else:
            log.debug("%s: leader %s refused: %s", _name(item.partition), self.leader_id, error)

    # ----------------------------------------------------------------- truncation (KIP-101)
    def _truncate_to_leader(self, partition: Partition, leader_epoch: int) -> None:
        plog = partition.log
        for _ in range(64):  # each round settles one epoch of divergence
            epoch = plog.epochs.latest_epoch
            if epoch < 0:
                break
            leader_has, end, log_start = self.endpoint.offsets_for_leader_epoch(
                partition.topic, partition.partition, epoch, leader_epoch
            )
            if leader_has < 0:  # the leader has nothing of our epochs: keep nothing
                plog.truncate_fully(log_start)
                break
            if end < plog.log_end_offset:
                log.info(
                    "%s: truncating from %s to %s (epoch %s ends there on the leader)",
                    _name(partition),
                    plog.log_end_offset,
                    end,
                    leader_has,
                )
                plog.truncate_to(end)
            if leader_has == epoch or plog.epochs.latest_epoch == epoch:
                break
        start = self.endpoint.log_start_offset(partition.topic, partition.partition)
        if plog.log_end_offset < start:  # retention on the leader passed us by: start over there
            plog.truncate_fully(start)


def _name(partition: Partition) -> str:
    return f"{partition.topic}-{partition.partition}"
