"""One partition as a broker sees it: its local log plus its replication role.

As **leader** it appends produced batches in its leader epoch, tracks how far each follower has
fetched, keeps the in-sync replica set (ISR) in ZooKeeper, and advances the high watermark (HW) to
the offset every in-sync replica has; consumers read below the HW, and ``acks=all`` returns once
the HW covers the batch. As **follower** it only takes batches from its replica fetcher.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from sparklog.broker.log import AppendInfo, PartitionLog
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.coordination.cluster import PartitionState
from sparklog.errors import NotEnoughReplicas, NotLeader, OffsetOutOfRange

if TYPE_CHECKING:
    from collections.abc import Sequence

DEFAULT_REPLICA_LAG_MS = 10_000
ACK_TIMEOUT_S = 15.0
WAIT_SLICE_S = 0.25  # how often a waiting fetch asks whether its client went away


class ProduceMeter(Protocol):
    """Where a leader counts what it appends (:class:`~sparklog.broker.metrics.BrokerMetrics`):
    once per batch, never per record."""

    def produced(self, topic: str, records: int, size: int) -> None: ...


class Partition:
    """Replication state of one local partition replica (thread-safe)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log: PartitionLog,
        update_isr: Callable[[Partition, list[int]], bool],
        replica_lag_ms: int = DEFAULT_REPLICA_LAG_MS,
        on_change: Callable[[], None] = lambda: None,
        meter: ProduceMeter | None = None,
    ) -> None:
        """``meter``: counts each batch appended as leader (None: nothing counted)."""
        self.topic = topic
        self.meter = meter
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.update_isr = update_isr  # writes a new ISR to ZooKeeper (compare-and-set); False if fenced
        self.replica_lag_ms = replica_lag_ms
        self.state: PartitionState | None = None
        self.state_version = -1
        self.replicas: list[int] = [broker_id]
        self.high_watermark = 0  # learnt from the leader as a follower, recomputed as a leader
        self._follower_end: dict[int, int] = {}
        self._follower_caught_up_ms: dict[int, float] = {}
        self._previous_fetch: dict[int, tuple[int, float]] = {}  # follower -> (leader's end, when)
        self._epoch_start_offset = 0  # the log end when this broker became leader
        # followers whose return to the ISR is being written to ZooKeeper: the HW already waits for
        # them (Kafka's "maximal ISR"), or it could pass a replica that is in the ISR a moment later
        self._joining: set[int] = set()
        self.changed = threading.Condition()  # notified when the HW or the role changes
        self.on_change = on_change  # also called then (the broker's wake-up for replica fetches)

    # ----------------------------------------------------------------- role
    @property
    def is_leader(self) -> bool:
        return self.state is not None and self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state else -1

    def apply_state(self, state: PartitionState, version: int, replicas: Sequence[int]) -> None:
        """A new state from ZooKeeper (leader, epoch, ISR)."""
        with self.changed:
            became_leader = state.leader == self.broker_id and (
                self.state is None
                or self.state.leader != self.broker_id
                or self.state.leader_epoch != state.leader_epoch
            )
            self.state = state
            self.state_version = version
            self.replicas = list(replicas)
            if became_leader:
                now = time.monotonic() * 1000
                self._follower_end = {r: -1 for r in self.replicas if r != self.broker_id}
                self._follower_caught_up_ms = {r: now for r in self.replicas if r != self.broker_id}
                self._previous_fetch = {}
                self._joining = set()
                self._epoch_start_offset = self.log.log_end_offset
                self.high_watermark = max(self.high_watermark, 0)
            self._advance_hw()
            self.changed.notify_all()
            self.on_change()

    def _require_leader(self) -> PartitionState:
        state = self.state
        if state is None or state.leader != self.broker_id:
            leader = state.leader if state else None
            raise NotLeader(f"broker {self.broker_id} does not lead {self.topic}-{self.partition} (leader: {leader})")
        return state

    # ----------------------------------------------------------------- leader: produce
    def append_as_leader(
        self, batch: pa.RecordBatch, acks: str, producer_id: int, sequence: int, min_isr: int, wait: bool = True
    ) -> AppendInfo:
        """Append as the leader; with ``acks=all`` refused below ``min_isr`` in-sync replicas, and
        (unless not ``wait``: the caller then calls :meth:`await_high_watermark`) returns once the
        high watermark covers the batch."""
        state = self._require_leader()
        if acks == "all" and len(state.isr) < min_isr:
            raise NotEnoughReplicas(
                f"{self.topic}-{self.partition} has {len(state.isr)} in-sync replicas {state.isr}, "
                f"min.insync.replicas={min_isr}: write refused"
            )
        info = self.log.append(batch, leader_epoch=state.leader_epoch, producer_id=producer_id, producer_seq=sequence)
        if self.meter is not None:
            self.meter.produced(self.topic, batch.num_rows, batch.nbytes)
        with self.changed:
            self._advance_hw()
            self.changed.notify_all()
            self.on_change()
        if acks == "all" and wait:
            self.await_high_watermark(info.last_offset + 1, min_isr, info.leader_epoch)
        return info

    def await_high_watermark(self, offset: int, min_isr: int, leader_epoch: int, deadline: float | None = None) -> None:
        """Wait until the high watermark reaches ``offset``, for a write appended as leader in
        ``leader_epoch`` (NotLeader, NotEnoughReplicas if it cannot by ``deadline``, a
        ``time.monotonic()`` value: ``ACK_TIMEOUT_S`` from now by default).

        The write counts as replicated only while this broker still leads in that epoch: once it
        follows, its high watermark is the new leader's, whose log may not hold the write (the
        follower truncates it away), so a high watermark past it proves nothing (Kafka's
        ``DelayedProduce`` likewise answers NOT_LEADER once the leader is not local)."""
        if deadline is None:
            deadline = time.monotonic() + ACK_TIMEOUT_S
        with self.changed:
            while True:
                state = self.state
                if state is None or state.leader != self.broker_id or state.leader_epoch != leader_epoch:
                    raise NotLeader(f"{self.topic}-{self.partition} lost leadership before the write was replicated")
                if self.high_watermark >= offset:
                    return
                if len(state.isr) < min_isr:
                    raise NotEnoughReplicas(
                        f"{self.topic}-{self.partition}: in-sync replicas {state.isr} fell below "
                        f"min.insync.replicas={min_isr} before the write was replicated"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise NotEnoughReplicas(
                        f"{self.topic}-{self.partition}: the write was not replicated to {state.isr} in time"
                    )
                self.changed.wait(min(remaining, 0.5))

    # ----------------------------------------------------------------- leader: fetch
    def await_records(
        self,
        offset: int,
        timeout_s: float,
        to_log_end: bool,
        interrupted: Callable[[], bool],
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        """Wait up to ``timeout_s`` until a fetch at ``offset`` has records to read (below the log
        end for a follower, ``to_log_end``; below the high watermark for a consumer), or until
        waiting has no point: this broker stops leading, the log is closed, ``interrupted()``
        (asked on every wake-up), ``cancelled()`` (a costlier check: every ``WAIT_SLICE_S``)."""
        deadline = time.monotonic() + timeout_s

        def ready() -> bool:
            end = self.log.log_end_offset if to_log_end else self.high_watermark
            return interrupted() or self.log.closed or not self.is_leader or end > offset

        while not ready():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (cancelled is not None and cancelled()):
                return
            with self.changed:
                self.changed.wait_for(ready, timeout=min(remaining, WAIT_SLICE_S))

    def fetch_range_end(self, replica_id: int, offset: int, leader_epoch: int | None) -> int:
        """The offset below which a fetch may read: the log end for a follower (whose position is
        recorded), the high watermark for a consumer."""
        state = self._require_leader()
        if replica_id < 0:
            return self.high_watermark
        if replica_id not in self.replicas:
            raise NotLeader(f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")
        if leader_epoch is not None and leader_epoch != state.leader_epoch:
            raise NotLeader(
                f"{self.topic}-{self.partition}: follower fetch for epoch {leader_epoch}, "
                f"the leader's epoch is {state.leader_epoch}"
            )
        end = self.log.log_end_offset
        if offset > end:
            raise OffsetOutOfRange(f"follower {replica_id} fetches at {offset}, past the leader's end {end}")
        with self.changed:
            now = time.monotonic() * 1000
            moved = self._follower_end.get(replica_id) != offset
            self._follower_end[replica_id] = offset
            # Caught up: at the log end now, or at least where the log ended at its previous fetch
            # (then it was caught up as of that fetch). Under a steady stream of writes a follower
            # is never exactly at the end, and must not be dropped from the ISR for that.
            previous_end, previous_at = self._previous_fetch.get(replica_id, (None, now))
            if offset >= end:
                self._follower_caught_up_ms[replica_id] = now
            elif previous_end is not None and offset >= previous_end:
                self._follower_caught_up_ms[replica_id] = max(
                    self._follower_caught_up_ms.get(replica_id, 0.0), previous_at
                )
            self._previous_fetch[replica_id] = (end, now)
            # an in-sync follower standing where it stood, at or below the high watermark, changes
            # nothing another fetch or a producer waits for (so it is with every idle partition,
            # every round): the high watermark is the smallest end among the in-sync replicas
            if moved or replica_id not in state.isr or offset > self.high_watermark:
                hw_before = self.high_watermark
                self._advance_hw()
                self.changed.notify_all()
                if self.high_watermark != hw_before:  # a fetch that moved nothing must not wake other fetches
                    self.on_change()
            # rejoin once it has everything visible and everything of earlier leader epochs
            # (like Kafka: it need not reach a log end that moves with every write)
            rejoin = (
                replica_id not in state.isr
                and replica_id in self.replicas
                and replica_id not in self._joining
                and offset >= self.high_watermark
                and offset >= self._epoch_start_offset
            )
            if rejoin:
                self._joining.add(replica_id)
        if rejoin:  # a follower that caught up rejoins the ISR (written to ZooKeeper outside the lock)
            try:
                self.update_isr(self, sorted({*state.isr, replica_id}))
            finally:
                with self.changed:
                    self._joining.discard(replica_id)  # in the ISR now, or the write failed
        return end

    def _advance_hw(self) -> None:
        """HW = the smallest log end among the in-sync replicas and those joining them (only while
        enough are in sync)."""
        state = self.state
        if state is None or state.leader != self.broker_id:
            return
        ends = [self.log.log_end_offset]
        for replica in {*state.isr, *self._joining}:
            if replica != self.broker_id:
                ends.append(self._follower_end.get(replica, -1))
        if len(state.isr) < self.log.config.min_insync_replicas:
            return  # too few in sync: nothing new becomes visible (or acknowledged)
        new_hw = min(ends)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw

    def maybe_shrink_isr(self) -> None:
        """Drop followers that have not caught up for ``replica.lag.time.max.ms`` from the ISR."""
        state = self.state
        if state is None or state.leader != self.broker_id:
            return
        now = time.monotonic() * 1000
        with self.changed:
            laggards = [
                r
                for r in state.isr
                if r != self.broker_id and now - self._follower_caught_up_ms.get(r, now) > self.replica_lag_ms
            ]
        if laggards:
            self.update_isr(self, [r for r in state.isr if r not in laggards])

    # ----------------------------------------------------------------- follower
    def append_as_follower(self, batch: pa.RecordBatch, header: BatchHeader, leader_hw: int) -> None:
        self.log.append_replica(batch, header)
        with self.changed:
            self.high_watermark = min(leader_hw, self.log.log_end_offset)

    def follower_hw(self, leader_hw: int) -> None:
        with self.changed:
            self.high_watermark = max(self.high_watermark, min(leader_hw, self.log.log_end_offset))
