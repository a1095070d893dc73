"""The leader's fetch sessions (Kafka's KIP-227 ``FetchSession`` and ``FetchSessionCache``): what a
follower's fetcher fetches here and where it stands in each partition, kept between its requests.
A request then lists only the partitions whose position changed, and a response looks only at
the partitions that need it: those listed, those changed since the session's previous look
(:class:`PartitionChanges`), and those a previous response left out (its time budget). Every
``full_look_s`` a response looks at all of them: that notes an in-sync follower's caught-up time on
its idle partitions (``Partition.fetch_range_end``) well within ``replica.lag.time.max.ms``.

A session is named by its follower (replica id) and a random id the follower picks (the wire is in
:mod:`sparklog.broker.replication.fetch_request`). A request with epoch 0 opens it, replacing any
session of that id; a request with epoch n > 0 must come after the request n - 1 and while no other
request uses the session. Otherwise :class:`FetchSessionInvalid`: the follower opens a new one. The
cache holds at most ``MAX_SESSIONS`` (``MAX_SESSIONS_PER_REPLICA`` per follower), drops a session
unused for ``SESSION_IDLE_S`` and makes room by dropping the least recently used idle one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable

from sparklog.broker.replication.fetch_request import FetchPosition
from sparklog.errors import FetchSessionInvalid, InvalidRequest, TooManyRequests

TopicPartition = tuple[str, int]
MAX_SESSIONS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
MAX_SESSIONS_PER_REPLICA = 64
MAX_SESSION_PARTITIONS = 100_000
SESSION_IDLE_S = 120.0
FULL_LOOK_S = 1.0  # at most; a broker with a shorter replica.lag.time.max.ms passes a tenth of it


@dataclasses.dataclass(eq=False)
class FetchSession:
    """One follower fetcher's session: its positions and what its next response must look at."""

    replica_id: int
    session_id: int
    positions: dict[TopicPartition, FetchPosition] = dataclasses.field(default_factory=dict)
    next_epoch: int = 1
    version: int = 0  # the PartitionChanges version up to which changes were looked at
    unseen: set[TopicPartition] = dataclasses.field(default_factory=set)  # left out by the last response
    full_look_at: float = 0.0  # when a response looks at every partition again (0: the first one does)
    used_at: float = 0.0
    busy: bool = False

    def update(self, listed: Iterable[FetchPosition], forget: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Take a request's partitions: forget some, add or move others; the keys listed."""
        for key in forget:
            self.positions.pop(key, None)
            self.unseen.discard(key)
        keys = set()
        for position in listed:
            key = (position.topic, position.partition)
            self.positions[key] = position
            keys.add(key)
        if len(self.positions) > MAX_SESSION_PARTITIONS:
            raise InvalidRequest(f"a fetch session may hold at most {MAX_SESSION_PARTITIONS} partitions")
        return keys

    def due(
        self, listed: set[TopicPartition], changed: set[TopicPartition] | None, now: float, full_look_s: float
    ) -> list[FetchPosition]:
        """The positions a response must look at: every one when a full look is due (or too many
        partitions changed to tell which), else the listed, the changed and the left out."""
        if changed is None or now >= self.full_look_at:
            self.full_look_at = now + full_look_s
            return list(self.positions.values())
        keys = listed | self.unseen | changed
        return [self.positions[key] for key in keys if key in self.positions]


class FetchSessionCache:
    """A broker's fetch sessions, as leader (thread-safe)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
        max_per_replica: int = MAX_SESSIONS_PER_REPLICA,
        idle_s: float = SESSION_IDLE_S,
    ) -> None:
        self._clock = clock
        self._max_sessions = max_sessions
        self._max_per_replica = max_per_replica
        self._idle_s = idle_s
        self._sessions: dict[tuple[int, int], FetchSession] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def acquire(self, replica_id: int, session_id: int, epoch: int) -> FetchSession:
        """The session a request of ``epoch`` uses (epoch 0: a new one), marked busy until
        :meth:`release`; FetchSessionInvalid if the request does not follow the session's previous
        one, TooManyRequests if the cache is full of sessions in use."""
        now = self._clock()
        key = (replica_id, session_id)
        with self._lock:
            if epoch == 0:
                self._sessions.pop(key, None)
                self._make_room(replica_id, now)
                session = self._sessions[key] = FetchSession(replica_id, session_id)
            else:
                found = self._sessions.get(key)
                if found is None:
                    raise FetchSessionInvalid(f"no fetch session {session_id} of broker {replica_id} here")
                if found.busy or found.next_epoch != epoch:
                    raise FetchSessionInvalid(
                        f"fetch session {session_id} of broker {replica_id} expects epoch {found.next_epoch}"
                        f"{' (and is in use)' if found.busy else ''}, not {epoch}"
                    )
                session = found
            session.next_epoch = epoch + 1
            session.busy = True
            session.used_at = now
            return session

    def release(self, session: FetchSession) -> None:
        with self._lock:
            session.busy = False
            session.used_at = self._clock()

    def _make_room(self, replica_id: int, now: float) -> None:
        """(Under the lock.) Drop idle-for-long sessions, then the least recently used idle ones,
        until a new session of ``replica_id`` fits."""
        for key, session in list(self._sessions.items()):
            if not session.busy and now - session.used_at > self._idle_s:
                del self._sessions[key]
        own = [s for s in self._sessions.values() if s.replica_id == replica_id]
        while len(own) >= self._max_per_replica:
            own.remove(self._drop_least_recently_used(own))
        while len(self._sessions) >= self._max_sessions:
            self._drop_least_recently_used(list(self._sessions.values()))

    def _drop_least_recently_used(self, sessions: list[FetchSession]) -> FetchSession:
        idle = [s for s in sessions if not s.busy]
        if not idle:
            raise TooManyRequests("the fetch session cache is full of sessions in use: retry")
        oldest = min(idle, key=lambda s: s.used_at)
        del self._sessions[(oldest.replica_id, oldest.session_id)]
        return oldest
