"""The Consumer: pulls record batches by offset from partition leaders, alone or in a group.

Without a group it reads every partition of its topics (or the ones given). With a group, kazoo's
``SetPartitioner`` recipe shares the partitions among the live members (each partition read by
exactly one member; a member that dies loses its ephemeral node and its partitions move), and
positions start from the offsets committed in ZooKeeper. Commits are explicit (``commit()``) and
a member commits only the partitions it owns (:class:`sparklog.errors.CommitFailed` otherwise).

Given ``bootstrap_servers`` a consumer talks to brokers only: committed offsets are read and
written through them (the same znodes), and a group consumer's membership is hosted by a broker
(:mod:`sparklog.client.group_membership`, :mod:`sparklog.broker.group_members`): the same
``SetPartitioner`` party and locks in ZooKeeper, run by the broker on its session and driven by
the consumer's heartbeats, so members of one group share its partitions however each connects.
"""

from __future__ import annotations

import logging
import queue
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from kazoo.exceptions import KazooException
from kazoo.recipe.partitioner import SetPartitioner

from sparklog.client.broker_view import BrokerView
from sparklog.client.client_metrics import CONSUMER_PREFIX, ConsumerMetrics, default_client_id, register
from sparklog.client.cluster_address import resolve
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient, fetch_connection
from sparklog.client.fetch_session import FetchSession, Results
from sparklog.client.group_membership import BrokerGroupMembership
from sparklog.errors import BrokerNotAvailable, CommitFailed, InvalidRequest, OffsetOutOfRange, SparklogError
from sparklog.protocol import fetch_columns
from sparklog.protocol.multi_fetch import MultiFetchRequest
from sparklog.schemas.codec import encode_avro
from sparklog.schemas.projection import parse_fields

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
SessionKey = tuple[int, str, int]  # (broker id, topic, connection)
OFFSET = 2  # the offset column of a polled batch (after topic and partition)
RESETS = ("earliest", "latest", "none")
RETRY_BACKOFF_S = (0.05, 0.25)  # first and longest wait before a refused partition is fetched again
REFRESH_EVERY = 8  # a partition refused this many times in a row re-reads its leader from ZooKeeper
REFUSALS_APART_S = 5.0  # refusals further apart (plus max_wait_ms) are new trouble: retry_timeout_s starts again
# how long a group member's constructor waits for its first assignment: enough for a member that
# joins alone; a member whose share other members must first give up (on their next poll, as in
# Kafka) gets it on a later poll instead of holding its caller up
FIRST_ASSIGNMENT_WAIT_S = 5.0
ASSIGNMENT_WAIT_S = 0.5  # how long assignment() waits for the partitions while the group allocates
WAKEUP_CHECK_S = 0.1  # a wait for partitions looks this often whether wakeup() was called


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: Any
    key: bytes | None
    value: Any
    headers: list[tuple[str, bytes]] | None


class Consumer:
    """Reads topics as Arrow record batches (``poll_batches``) or records (``poll``).

    For typed topics values arrive as Arrow structs in the latest schema version (older records are
    evolved by the broker); ``fields`` (e.g. ``["user", "address.zip"]``) asks the broker for only
    those columns, and ``value_format="avro"`` gives Avro single-object encoded bytes instead.

    ``session_timeout_s`` is the ZooKeeper session: a member that dies is noticed (and its
    partitions reassigned) after about that long (ZooKeeper enforces at least 2 ticks, 4 s by default);
    with bootstrap servers it is the member's session at the broker hosting it (heartbeats).
    A partition whose fetch fails with a retriable error (no leader, leader moved, broker down)
    is retried (with backoff, re-reading its leader) while the other partitions are read, as
    Kafka's consumer does; once it has failed for ``retry_timeout_s`` it is reported: a warning
    in the log, and in :meth:`stalled` until records are read from it again. Other errors end the
    poll.

    A group member returns from its constructor with its first assignment, or after
    ``FIRST_ASSIGNMENT_WAIT_S`` without one when other members must first give partitions up
    (they do on their next poll); ``poll`` then waits for it within its own timeout.

    The assigned partitions that one broker leads are fetched together, on one open stream per
    topic and connection to that broker (:mod:`sparklog.client.fetch_session`, one thread each:
    ``FETCH_CONNECTIONS`` per topic in all and at least one per broker, whatever the partition
    count; :func:`~sparklog.client.cluster_client.fetch_connection`), which
    sends new records as they are appended; ``max_bytes`` bounds what one partition puts in one
    response and how far a stream is read ahead of ``poll_batches``; ``max_wait_ms`` is how long
    an open fetch waits for new records before it is renewed.
    """

    def __init__(
        self,
        topics: str | Iterable[str],
        group: str | None = None,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        auto_offset_reset: str = "latest",
        partitions: Iterable[int] | None = None,
        max_bytes: int = 8 << 20,
        max_wait_ms: int = 500,
        session_timeout_s: float = 10.0,
        retry_timeout_s: float = 30.0,
        fields: str | Sequence[str] | None = None,
        value_format: str = "arrow",
        *,
        bootstrap_servers: str | None = None,
        config: Mapping[str, Any] | None = None,
        client_id: str | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """``config``: client settings with librdkafka's names (security: ``security.protocol``,
        ``ssl.*``, ``sasl.*``; see :mod:`sparklog.security.client_config`). ``metrics_registry``:
        a ``prometheus_client`` registry to collect :meth:`metrics` in too (labelled ``client_id``,
        default ``consumer-N``), until ``close()``."""
        if auto_offset_reset not in RESETS:
            raise InvalidRequest(f"auto_offset_reset must be one of {', '.join(RESETS)}, got {auto_offset_reset!r}")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise InvalidRequest("a consumer needs at least one topic")
        if value_format not in ("arrow", "avro"):
            raise InvalidRequest(f"value_format must be 'arrow' or 'avro', got {value_format!r}")
        self.fields = parse_fields(fields) if fields else None
        if self.fields and value_format == "avro":
            raise InvalidRequest("value_format='avro' returns whole values: it cannot be combined with fields")
        self.value_format = value_format
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        address = resolve(zookeeper, bootstrap_servers, config)
        self._client = ClusterClient.connect(
            address, session_timeout_s=session_timeout_s, retry_timeout_s=retry_timeout_s
        )
        self.client_id = client_id or default_client_id("consumer")
        self._metrics = ConsumerMetrics()
        self._registry = metrics_registry
        self._collector = register(metrics_registry, CONSUMER_PREFIX, self.client_id, self._metrics)
        self._positions: dict[TopicPartition, int] = {}
        self._assigned: list[TopicPartition] = []
        self._partition_columns = _PartitionColumns()
        self._restorer = fetch_columns.Restorer()
        self._sessions: dict[SessionKey, FetchSession] = {}  # the open fetches, per broker, topic, connection
        self._session_of: dict[TopicPartition, FetchSession] = {}  # where each assigned partition is fetched
        self._generation: dict[TopicPartition, int] = {}  # bumped by a seek: what was read before is dropped
        self._unrouted: dict[TopicPartition, float] = {}  # partitions to give a session, and from when
        self._refused: dict[TopicPartition, tuple[float, int, float]] = {}  # (first, count, last) refusals
        self._awaiting_reset: set[TopicPartition] = set()  # assigned, no position yet (leader unreachable)
        self._stalled: dict[TopicPartition, SparklogError] = {}  # refused for retry_timeout_s: why
        self._results: Results = queue.SimpleQueue()
        self._woken = False  # wakeup() was called and no poll has returned for it yet
        self._failed: BaseException | None = None  # a fetch's error, raised by the next poll
        self._partitioner: SetPartitioner | BrokerGroupMembership | None = None
        all_partitions = [
            (t, p)
            for t in self.topics
            for p in range(self._client.topic(t).partitions)
            if partitions is None or p in set(partitions)
        ]
        items = self._items = [f"{t}:{p}" for t, p in all_partitions]
        view = self._client.view
        if group is None:
            self._assign(all_partitions)
            return
        if isinstance(view, BrokerView):
            self._partitioner = BrokerGroupMembership(
                view, group, self.topics, items, session_timeout_s, on_change=self._membership_changed
            )
        else:
            self._partitioner = self._zookeeper_member()
        self._follow_group(FIRST_ASSIGNMENT_WAIT_S)

    def _zookeeper_member(self) -> SetPartitioner:
        """A new member of the group's ``SetPartitioner`` party on this consumer's ZooKeeper session."""
        assert self.group is not None
        path = self._client.cluster.layout.group_partitioner(self.group, self.topics)
        # a member id of its own: kazoo's default (host and pid) is the same for every member in
        # one process, and members with one id compute the same share and wait forever for each
        # other's locks
        return SetPartitioner(
            self._client.cluster.zk, path, self._items, identifier=uuid.uuid4().hex, time_boundary=0.5
        )

    # ----------------------------------------------------------------- assignment
    def _follow_group(self, wait: float = ASSIGNMENT_WAIT_S) -> None:
        """Take up the group's current assignment, waiting up to ``wait`` s for one while the group
        allocates and this consumer has none."""
        part = self._membership()
        if part is None:
            return
        if part.release:
            self._assigned, self._positions, self._awaiting_reset = [], {}, set()
            self._close_sessions()
            if self._may_release(part):
                part.release_set()
        if part.allocating and not self._assigned:
            self._await_assignment(part, wait)
            part = self._membership()
            if part is None:
                return
        if part.acquired and not self._assigned:
            owned = []
            for item in part:
                topic, p = str(item).rsplit(":", 1)
                owned.append((topic, int(p)))
            self._assign(owned)

    def _await_assignment(self, part: SetPartitioner | BrokerGroupMembership, wait: float) -> None:
        """Wait up to ``wait`` s for the group to give this member its partitions, or until ``wakeup()``."""
        until = time.monotonic() + wait
        while part.allocating and not self._woken:
            left = until - time.monotonic()
            if left <= 0:
                return
            part.wait_for_acquire(timeout=min(left, WAKEUP_CHECK_S))

    def _may_release(self, part: SetPartitioner | BrokerGroupMembership) -> bool:
        """Whether the group's partitions can be given up now. kazoo's ``SetPartitioner`` asks for
        a release as soon as its ZooKeeper connection drops (it cannot tell whether its locks
        outlive that), but giving locks up needs ZooKeeper: a ``release_set()`` while it is away
        would hold the poll until it is back (or fail the partitioner: the consumer would lose its
        membership). So the consumer stops reading at once and releases once it is connected again
        (the session, and the locks, lived on if it was back within the session timeout)."""
        return isinstance(part, BrokerGroupMembership) or self._client.cluster.zk.connected

    def _membership(self) -> SetPartitioner | BrokerGroupMembership | None:
        """The group membership to follow (None: no group, or none until ZooKeeper is back). A
        membership through brokers joins again by itself: failed, it failed for good (e.g. no Read
        on the group). A ZooKeeper-native one that failed is replaced (:meth:`_join_again`)."""
        part = self._partitioner
        if part is None or not part.failed:
            return part
        if isinstance(part, BrokerGroupMembership):
            if part.error is not None:
                raise part.error  # e.g. AuthorizationFailed: no Read on the group
            raise InvalidRequest(f"lost membership of group {self.group!r}")
        return self._join_again(part)

    def _join_again(self, failed: SetPartitioner) -> SetPartitioner | None:
        """Join the group anew after kazoo's ``SetPartitioner`` failed, for good: the session
        expired (ZooKeeper away for longer than the session timeout), or ZooKeeper went away while
        it took its locks. A Kafka consumer that lost its session joins again too. Nothing is read
        meanwhile; the partitions the group gives this member start from the committed offsets.
        None while ZooKeeper cannot be reached (the next poll tries again)."""
        self._assigned, self._positions, self._awaiting_reset = [], {}, set()
        self._close_sessions()
        zk = self._client.cluster.zk
        if not zk.connected:
            return None
        log.warning("group %r: lost this member's ZooKeeper session or locks: joining the group again", self.group)
        zk.remove_listener(failed._establish_sessionwatch)  # kazoo keeps it until a session is lost
        try:
            failed.finish()  # the locks it still holds on this session, if any, and its party node
            self._partitioner = self._zookeeper_member()
        except KazooException as exc:
            log.warning("group %r: could not join again yet (%s); retrying", self.group, type(exc).__name__)
            return None
        return self._partitioner

    def _assign(self, partitions: list[TopicPartition]) -> None:
        """Take these partitions from their committed offsets, or where ``auto_offset_reset`` puts
        them; a partition whose leader cannot say where that is now waits for it (it is asked
        again as the partition is routed) while the others are read."""
        self._assigned = sorted(partitions)
        self._metrics.forget(set(self._assigned))
        committed = self._client.view.committed_offsets(self.group) if self.group else {}
        reset, unreachable = self._reset_positions([tp for tp in self._assigned if tp not in committed])
        now = time.monotonic()
        self._awaiting_reset = set()
        for tp in self._assigned:
            self._positions.pop(tp, None)
            if tp in committed or tp in reset:
                self._positions[tp] = committed[tp] if tp in committed else reset[tp]
            else:
                self._awaiting_reset.add(tp)
            self._generation[tp] = self._generation.get(tp, 0) + 1
            self._unrouted[tp] = now
        for tp, error in unreachable.items():
            self._refuse(tp, error)

    @property
    def _reset_key(self) -> str:
        """The list_offsets field ``auto_offset_reset`` starts a partition at."""
        return "log_start_offset" if self.auto_offset_reset == "earliest" else "high_watermark"

    def _reset_positions(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, SparklogError]]:
        """Where partitions without a committed offset start (``auto_offset_reset``), asked of each
        leader once for all its partitions: (the positions, why the others have none yet)."""
        if tps and self.auto_offset_reset == "none":
            tp = tps[0]
            raise OffsetOutOfRange(f"no committed offset for {tp[0]}-{tp[1]} and auto_offset_reset=none")
        answers, failed = self._client.list_offsets_once(tps)
        return {tp: offsets[self._reset_key] for tp, offsets in answers.items()}, failed

    def assignment(self) -> list[TopicPartition]:
        """The (topic, partition) pairs this consumer reads now."""
        self._follow_group()
        return list(self._assigned)

    # ----------------------------------------------------------------- fetching
    def _request(self) -> MultiFetchRequest:
        """The settings of every fetch (a session fills in its partitions)."""
        return MultiFetchRequest(
            topic="",
            positions={},
            max_bytes=self.max_bytes,
            max_response_bytes=self.max_bytes,
            max_wait_ms=self.max_wait_ms,
            compact=True,  # columns with nothing in them travel empty (sparklog.protocol.fetch_columns)
            fields=self.fields,
        )

    def _route(self) -> float | None:
        """Give the partitions waiting for a fetch (new, moved, refused) to the session of their
        leader; returns when the next one waiting is due (None: none waits)."""
        if not self._unrouted:
            return None
        now = time.monotonic()
        groups: dict[SessionKey, dict[int, tuple[int, int]]] = {}
        brokers = {}
        spread: dict[str, int] = {}  # topic -> how many brokers lead its partitions
        waiting = [tp for tp, due in self._unrouted.items() if due <= now and tp in self._awaiting_reset]
        if waiting:
            reset, unreachable = self._reset_positions(waiting)
            for tp, position in reset.items():
                self._positions[tp] = position
                self._awaiting_reset.discard(tp)
            for tp, error in unreachable.items():
                self._refuse(tp, error)
        for tp, due in list(self._unrouted.items()):
            if due > now:
                continue
            del self._unrouted[tp]
            refusals = self._refused.get(tp, (now, 0, now))[1]
            try:
                broker = self._client.leader(*tp, refresh=refusals > 0 and refusals % REFRESH_EVERY == 0)
                leaders = spread.get(tp[0])
                if leaders is None:
                    leaders = spread[tp[0]] = self._client.topic(tp[0]).preferred_leaders
            except SparklogError as exc:
                self._refuse(tp, exc)
                continue
            key = (broker.broker_id, tp[0], fetch_connection(tp[1], leaders))
            brokers[key] = broker
            groups.setdefault(key, {})[tp[1]] = (self._positions[tp], self._generation[tp])
        for key, entries in groups.items():
            session = self._sessions.get(key)
            if session is None or not session.update(entries):
                broker = brokers[key]
                session = self._sessions[key] = FetchSession(
                    key[1],
                    broker,
                    self._client.flight(broker, key[2]),
                    entries,
                    self._request(),
                    self._restorer,
                    self._partition_columns,
                    self._results,
                    self.max_bytes,
                )
            for p in entries:
                self._session_of[(key[1], p)] = session
        return min(self._unrouted.values(), default=None)

    def _refuse(self, tp: TopicPartition, error: BaseException, session: FetchSession | None = None) -> None:
        """A partition's fetch failed: a retriable error is retried after a backoff (and reported
        once the partition has been refused for ``retry_timeout_s``), any other is raised."""
        now = time.monotonic()
        since, refusals, last = self._refused.get(tp, (now, 0, now))
        if now - last > self.max_wait_ms / 1000 + REFUSALS_APART_S:
            since, refusals = now, 0  # served in between (a refused partition is refused again at once)
        if not isinstance(error, SparklogError) or not error.retriable:
            self._refused.pop(tp, None)
            self._stalled.pop(tp, None)
            self._unrouted[tp] = now  # fetched again if the caller goes on polling
            raise error
        if isinstance(error, BrokerNotAvailable) and session is not None:
            self._client.forget(session.broker)  # the next session connects anew
        if now - since > self._client.retry_timeout_s:
            if tp not in self._stalled:
                log.warning(
                    "%s-%s could not be read for %.0f s (%s); reading the other partitions and retrying it",
                    tp[0],
                    tp[1],
                    now - since,
                    error,
                )
            self._stalled[tp] = error
        self._refused[tp] = (since, refusals + 1, now)
        self._unrouted[tp] = now + min(RETRY_BACKOFF_S[0] * 2**refusals, RETRY_BACKOFF_S[1])

    def stalled(self) -> dict[TopicPartition, SparklogError]:
        """The assigned partitions that could not be read for ``retry_timeout_s`` or more, each
        with its last error. They are retried; a partition leaves this when records are read from
        it again (one that recovered with nothing new to read stays until it has some)."""
        return dict(self._stalled)

    def poll_batches(self, timeout: float = 1.0) -> list[pa.RecordBatch]:
        """Record batches from the current positions (columns ``topic``, ``partition``, ``offset``,
        ``timestamp``, ``key``, ``value``, ``headers``), waiting up to ``timeout`` s for new data;
        positions move past what is returned.

        The assigned partitions always have fetches open at their leaders (streams the brokers
        keep sending new records on), read ahead on their own threads by up to ``max_bytes``, so
        new records are returned as soon as any partition has them.

        In a group, what was read while the partitions were being taken away (a rebalance, a
        lost lease) is dropped: the next owner reads it from the committed offsets.
        """
        deadline = time.monotonic() + timeout
        self._metrics.polls += 1
        self._follow_group(max(timeout, ASSIGNMENT_WAIT_S))
        part = self._partitioner
        out = self._poll_batches(max(deadline - time.monotonic(), 0.0))
        if out and part is not None and not part.acquired:
            self._follow_group()  # positions start again from the committed offsets
            return []
        return out

    def _poll_batches(self, timeout: float) -> list[pa.RecordBatch]:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        deadline = time.monotonic() + timeout
        out: list[pa.RecordBatch] = []
        while True:
            try:
                due = self._route()
            except SparklogError as exc:
                if out:
                    self._failed = exc
                    return out
                raise
            now = time.monotonic()
            remaining = deadline - now
            try:  # wait for the first batch only (or until a refused partition is due); then take what is there
                if remaining > 0 and not out:
                    wait = remaining if due is None else max(min(remaining, due - now), 0.001)
                    delivery, batch = self._results.get(timeout=wait)
                else:
                    delivery, batch = self._results.get_nowait()
            except queue.Empty:
                if out or time.monotonic() >= deadline:
                    return out
                continue
            if delivery is _WAKEUP:
                self._woken = False
                return out
            if delivery is _MEMBERSHIP:
                if out:  # poll_batches looks at the group before handing them out
                    return out
                self._follow_group(max(deadline - time.monotonic(), 0.0))
                continue
            if batch is not None:
                delivery.session.taken(batch)
            tp = delivery.tp
            if self._session_of.get(tp) is not delivery.session or self._generation.get(tp) != delivery.generation:
                continue  # a seek or reassignment replaced this fetch: drop what it read
            if batch is None:
                del self._session_of[tp]
                try:
                    error = delivery.error or BrokerNotAvailable(f"the fetch of {tp[0]}-{tp[1]} ended")
                    self._refuse(tp, error, delivery.session)
                except SparklogError as exc:
                    if out:  # the batches read before it are returned first
                        self._failed = exc
                        return out
                    raise
                continue
            if self._refused:
                self._refused.pop(tp, None)
            if self._stalled and self._stalled.pop(tp, None) is not None:
                log.warning("%s-%s is read again", tp[0], tp[1])
            position = self._positions[tp]
            batch = self._trim(batch, position)
            if batch.num_rows:
                if self.value_format == "avro":
                    batch = self._as_avro(tp[0], batch)
                out.append(batch)
                self._positions[tp] = end = batch.column(OFFSET)[-1].as_py() + 1
                hw = delivery.high_watermark
                self._metrics.consumed(tp, batch.num_rows, batch.nbytes, None if hw is None else hw - end)

    def wakeup(self) -> None:
        """Make a waiting ``poll_batches`` (or the next one) return at once with what it has
        (Kafka's ``wakeup()``); safe to call from another thread or a signal handler."""
        self._woken = True  # ends a wait for partitions too
        self._results.put((_WAKEUP, None))  # SimpleQueue.put is reentrant

    def _membership_changed(self) -> None:
        """The group's assignment changed: a poll waiting for records takes it up at once and
        goes on waiting (a poll returns early only for records or ``wakeup()``)."""
        self._results.put((_MEMBERSHIP, None))

    def _close_sessions(self) -> list[FetchSession]:
        """End every open fetch (what they read is dropped); partitions wait for new ones."""
        sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
        self._sessions, self._session_of = {}, {}
        self._unrouted, self._refused, self._stalled = {}, {}, {}
        return sessions

    def _as_avro(self, topic: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Values of a typed topic as Avro single-object encoded bytes (for existing Avro tooling)."""
        schema = self._client.value_schema(topic)
        if schema is None:
            return batch
        i = batch.schema.get_field_index("value")
        return batch.set_column(i, pa.field("value", pa.binary()), encode_avro(batch.column(i), schema))

    @staticmethod
    def _trim(batch: pa.RecordBatch, position: int) -> pa.RecordBatch:
        first = batch.column(OFFSET)[0].as_py() if batch.num_rows else position
        if first >= position:
            return batch
        return batch.filter(pc.greater_equal(batch.column(OFFSET), position))

    def poll(self, timeout: float = 1.0) -> list[Record]:
        """Like ``poll_batches`` but as :class:`Record` tuples (convenient, not the fast path)."""
        out = []
        for batch in self.poll_batches(timeout):
            for row in batch.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"]] if row["headers"] else None
                out.append(
                    Record(
                        row["topic"],
                        row["partition"],
                        row["offset"],
                        row["timestamp"],
                        row["key"],
                        row["value"],
                        headers,
                    )
                )
        return out

    # ----------------------------------------------------------------- positions
    def _tp(self, partition: int, topic: str | None) -> TopicPartition:
        tp = (topic or self.topics[0], partition)
        if tp not in self._positions and tp not in self._awaiting_reset:
            raise InvalidRequest(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return tp

    def position(self, partition: int, topic: str | None = None) -> int:
        """The offset of the next record this consumer will read from the partition (for one
        still waiting for its leader to say where ``auto_offset_reset`` puts it, asked now, with
        the client's retries)."""
        tp = self._tp(partition, topic)
        if tp in self._awaiting_reset:
            self._positions[tp] = self._client.list_offsets(*tp)[self._reset_key]
            self._awaiting_reset.discard(tp)
        return self._positions[tp]

    def positions(self) -> dict[TopicPartition, int]:
        """The positions of the assigned partitions that have one (without waiting: a partition
        whose leader could not yet say where ``auto_offset_reset`` puts it has none)."""
        return {tp: self._positions[tp] for tp in self._assigned if tp in self._positions}

    def seek(self, partition: int, offset: int, topic: str | None = None) -> None:
        if offset < 0:
            raise InvalidRequest(f"offset must be >= 0, got {offset}")
        self._move(self._tp(partition, topic), offset)

    def _move(self, tp: TopicPartition, offset: int) -> None:
        self._move_all({tp: offset})

    def _move_all(self, offsets: dict[TopicPartition, int]) -> None:
        """New positions; the fetches open from the old ones end (what they read is dropped), so
        the next poll fetches from here at once (one new call per session, however many moved)."""
        moved: dict[FetchSession, dict[int, tuple[int, int]]] = {}
        for tp, offset in offsets.items():
            self._positions[tp] = offset
            self._awaiting_reset.discard(tp)
            self._generation[tp] = self._generation.get(tp, 0) + 1
            session = self._session_of.get(tp)
            if session is not None:
                moved.setdefault(session, {})[tp[1]] = (offset, self._generation[tp])
        for session, entries in moved.items():
            if not session.update(entries):  # it ended meanwhile: its partitions look for a new one
                for p in entries:
                    self._session_of.pop((session.topic, p), None)
                    self._unrouted[(session.topic, p)] = time.monotonic()

    def seek_to_beginning(self) -> None:
        offsets = self._client.list_offsets_many(self._assigned)
        self._move_all({tp: found["log_start_offset"] for tp, found in offsets.items()})

    def seek_to_end(self) -> None:
        offsets = self._client.list_offsets_many(self._assigned)
        self._move_all({tp: found["high_watermark"] for tp, found in offsets.items()})

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Every assigned partition to its first record at or after the time (its end if none)."""
        offsets = self._client.list_offsets_many(self._assigned, timestamp=timestamp_ms)
        self._move_all(
            {
                tp: found["high_watermark"] if found.get("offset_for_time") is None else found["offset_for_time"]
                for tp, found in offsets.items()
            }
        )

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit the current positions (or the given offsets) of the group (to ZooKeeper, or
        through a broker that writes them there).

        A group member commits only partitions it owns now: :class:`CommitFailed` (nothing
        committed) for a partition the group gave to another member since (a rebalance this
        consumer took part in: its positions went with it) or after it lost its membership (its
        ZooKeeper session, or its broker-held lease, ended: the partitions may already be read by
        another member, whose commits must not be overwritten with older positions)."""
        if self.group is None:
            raise InvalidRequest("commit() needs a consumer group (group=...)")
        chosen = offsets if offsets is not None else dict(self._positions)
        if not chosen:  # nothing to write (Kafka's commitSync of nothing): no ZooKeeper, which may be away
            return
        part = self._partitioner
        if part is not None:
            if part.failed:
                raise CommitFailed(f"lost membership of group {self.group!r}: nothing committed")
            owned = set(self._assigned)
            foreign = sorted(tp for tp in chosen if tp not in owned)
            if foreign:
                names = ", ".join(f"{t}-{p}" for t, p in foreign[:5])
                raise CommitFailed(
                    f"{names} not assigned to this member of group {self.group!r} (the group rebalanced): "
                    "nothing committed"
                )
        self._client.view.commit_offsets(self.group, chosen)

    def committed(self) -> dict[TopicPartition, int]:
        return self._client.view.committed_offsets(self.group) if self.group else {}

    def metrics(self) -> dict[str, float]:
        """This consumer's figures so far, by Kafka's consumer metric names: records and bytes
        handed out, batches, polls, and ``records-lag-max``: the most records any of its partitions
        had still to read (its leader's high watermark minus the position) when last read."""
        return self._metrics.snapshot()

    def close(self) -> None:
        if self._registry is not None and self._collector is not None:
            self._registry.unregister(self._collector)
            self._registry = None
        self._assigned = []
        if self._partitioner is not None:
            self._partitioner.finish()
            self._partitioner = None
        for session in self._close_sessions():
            session.join(5.0)
        self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_WAKEUP: Any = object()  # queued by wakeup()
_MEMBERSHIP: Any = object()  # queued when the group's assignment of this member changed


class _PartitionColumns:
    """The ``topic`` (dictionary-encoded: one string, not one per row) and ``partition`` columns
    put in front of fetched batches. Both are constant per partition, so they are built once
    (grown when a longer batch comes) and sliced for each batch: no per-batch allocation."""

    FIELDS = (pa.field("topic", pa.dictionary(pa.int32(), pa.string())), pa.field("partition", pa.int32()))

    def __init__(self) -> None:
        self._columns: dict[TopicPartition, tuple[pa.Array, pa.Array]] = {}

    def __call__(self, tp: TopicPartition, n: int) -> list[pa.Array]:
        """The ``topic`` and ``partition`` columns of ``n`` rows of ``tp``."""
        columns = self._columns.get(tp)
        if columns is None or len(columns[0]) < n:
            size = max(n, 2 * len(columns[0]) if columns else 0)
            topic = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(size, dtype=np.int32)), pa.array([tp[0]], pa.string())
            )
            columns = self._columns[tp] = (topic, pa.array(np.full(size, tp[1], dtype=np.int32)))
        topic, partition = columns
        return [topic.slice(0, n), partition.slice(0, n)]
