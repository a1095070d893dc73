"""Consumer group membership through brokers, for a consumer given ``bootstrap.servers``.

A broker hosts the member (:mod:`sparklog.broker.group_members`: kazoo's ``SetPartitioner`` on the
broker's ZooKeeper session, sharing partitions with every other member of the group, hosted or
ZooKeeper-native); :class:`BrokerGroupMembership` drives it by heartbeats, on one thread, and
offers the consumer the part of ``SetPartitioner`` it uses: the states ``failed``, ``release``,
``allocating`` and ``acquired``, ``release_set()``, ``wait_for_acquire()``, iteration over the
acquired ``"<topic>:<partition>"`` items, and ``finish()``.

Safety: the broker gives partitions up only after the client said it reads none of them, and a
client whose heartbeats stop being answered stops reading before anyone else could get them. Its
partitions are *leased*: ``acquired`` holds until a lease past the sending of the last heartbeat
answered ``acquired``: half the member's session timeout (the broker finishes a member a session
timeout after its last heartbeat) and at most a quarter of the broker's ZooKeeper session timeout
(a broker cut off from ZooKeeper may take two thirds of it to notice, and its locks go after all
of it). A lease that runs out turns ``acquired`` into ``release`` by itself, however long a
heartbeat call hangs. The member rejoins (through any broker) when its broker no longer knows it
(``UNKNOWN_MEMBER_ID``: it missed its session timeout, or the broker restarted), when the broker
says ``failed`` (its ZooKeeper session ended), or when its broker cannot be reached for longer
than the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sparklog.client.broker_view import BrokerView
from sparklog.errors import SparklogError, UnknownMemberId

log = logging.getLogger(__name__)

ALLOCATING, ACQUIRED, RELEASE, FAILED = "allocating", "acquired", "release", "failed"
MAX_HEARTBEAT_INTERVAL_S = 1.0
REJOIN_BACKOFF_S = (0.1, 2.0)  # first and longest wait between failed joins


def lease_s(session_timeout_s: float, zookeeper_session_timeout_s: float) -> float:
    """How long after sending a heartbeat answered ``acquired`` the partitions may still be read."""
    return min(session_timeout_s / 2, zookeeper_session_timeout_s / 4)


class BrokerGroupMembership:
    """One consumer's membership of ``group`` through brokers, sharing ``items``
    (``"<topic>:<partition>"``) of ``topics``. ``on_change`` is called (from the heartbeat thread)
    when the state changes, e.g. to wake up a waiting poll."""

    def __init__(
        self,
        view: BrokerView,
        group: str,
        topics: Sequence[str],
        items: Sequence[str],
        session_timeout_s: float,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.view = view
        self.group = group
        self.topics = sorted(topics)
        self.items = sorted(items)
        self.session_timeout_s = session_timeout_s
        self.on_change = on_change
        self.error: SparklogError | None = None  # why the membership failed (it will not rejoin)
        self._state = ALLOCATING
        self._acquired: list[str] = []
        self._lease_until = 0.0
        self._lease_s = session_timeout_s / 2  # until the broker tells its ZooKeeper session timeout
        self._member: tuple[str, str] | None = None  # (member id, location of the broker hosting it)
        self._changed = threading.Condition()
        self._prompt = False  # a heartbeat is due at once (the consumer released)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"group-heartbeat-{group}", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- what the consumer uses
    def _current(self) -> str:
        with self._changed:
            if self._state == ACQUIRED and time.monotonic() >= self._lease_until:
                log.warning(
                    "group %r: no heartbeat answered for the lease (%.1f s): stop reading", self.group, self._lease_s
                )
                self._state = RELEASE
            return self._state

    @property
    def failed(self) -> bool:
        return self._current() == FAILED

    @property
    def release(self) -> bool:
        return self._current() == RELEASE

    @property
    def allocating(self) -> bool:
        return self._current() == ALLOCATING

    @property
    def acquired(self) -> bool:
        return self._current() == ACQUIRED

    def __iter__(self) -> Iterator[str]:
        with self._changed:
            return iter(list(self._acquired) if self._state == ACQUIRED else [])

    def release_set(self) -> None:
        """The consumer reads none of its partitions any more: the broker may give them up."""
        with self._changed:
            if self._state == RELEASE:
                self._set(ALLOCATING, tell=False)
        self._wake()

    def wait_for_acquire(self, timeout: float = 30) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._state in (ACQUIRED, FAILED), timeout)

    def finish(self) -> None:
        """Leave the group (its partitions go to the other members at once)."""
        self._stop.set()
        self._wake()
        with self._changed:
            self._set(FAILED, tell=False)
        self._thread.join(2 * self._lease_s + 1.0)  # its calls time out after a lease; then it leaves

    # ----------------------------------------------------------------- the heartbeat thread
    def _set(self, state: str, tell: bool = True) -> None:
        """(Holding ``_changed``.) ``tell``: call ``on_change`` (not for the consumer's own calls)."""
        if state != self._state:
            self._state = state
            self._changed.notify_all()
            if tell:
                self.on_change()

    def _wake(self) -> None:
        """The next heartbeat goes now."""
        with self._changed:
            self._prompt = True
            self._changed.notify_all()

    def _interval(self) -> float:
        return min(MAX_HEARTBEAT_INTERVAL_S, self.session_timeout_s / 3, self._lease_s / 3)

    def _run(self) -> None:
        try:
            self._beat()
        except SparklogError as exc:
            log.warning("group %r: membership failed: %s", self.group, exc)
            self._fail(exc)
        except Exception as exc:  # a bug must not leave the consumer waiting for partitions forever
            log.exception("group %r: the heartbeat thread failed", self.group)
            self._fail(SparklogError(f"group membership failed: {exc!r}"))
        finally:
            self._leave()

    def _fail(self, error: SparklogError) -> None:
        with self._changed:
            self.error = error
            self._set(FAILED)

    def _beat(self) -> None:
        """Join, heartbeat, join again, until ``finish()`` or an error that joining again cannot mend
        (e.g. no Read on the group: ``error``, state ``failed``)."""
        backoff = REJOIN_BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                if self._member is None:
                    self._join()
                    backoff = REJOIN_BACKOFF_S[0]
                self._heartbeat()
            except SparklogError as exc:
                if not exc.retriable:
                    raise
                if not self._stop.is_set():
                    log.info("group %r: %s; joining again in %.1f s", self.group, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, REJOIN_BACKOFF_S[1])
                continue
            with self._changed:  # woken early by release_set() or finish()
                self._changed.wait_for(lambda: self._prompt or self._stop.is_set(), self._interval())
                self._prompt = False

    def _leave(self) -> None:
        with self._changed:
            member, self._member = self._member, None
        if member is None:
            return
        try:
            self.view.leave_group(member[1], self.group, member[0], self._lease_s)
        except SparklogError as exc:  # the broker finishes it after its session timeout
            log.info("group %r: could not leave cleanly (%s)", self.group, exc)

    def _join(self) -> None:
        answer, location = self.view.join_group(self.group, self.topics, self.items, int(self.session_timeout_s * 1000))
        self._learn(answer)
        with self._changed:
            self._member = (str(answer["member_id"]), location)
        log.info("group %r: joined as %s through %s", self.group, answer["member_id"], location)

    def _learn(self, answer: dict[str, Any]) -> None:
        zookeeper_ms = answer.get("zookeeper_session_timeout_ms")
        if isinstance(zookeeper_ms, int) and zookeeper_ms > 0:
            self._lease_s = lease_s(self.session_timeout_s, zookeeper_ms / 1000)

    def _heartbeat(self) -> None:
        """One heartbeat, and what its answer means; a broker out of reach for longer than the
        lease (the partitions are no longer read by then) is left for a join through any broker."""
        assert self._member is not None
        member_id, location = self._member
        deadline = time.monotonic() + self._lease_s
        while True:
            sent = time.monotonic()
            released = self._current() == ALLOCATING  # nothing is read (the consumer released)
            try:
                answer = self.view.group_heartbeat(location, self.group, member_id, released, self._lease_s)
                break
            except UnknownMemberId:
                self._lose()
                return
            except SparklogError as exc:
                if not exc.retriable or self._stop.is_set():
                    raise
                if time.monotonic() >= deadline:
                    log.info(
                        "group %r: broker %s did not answer heartbeats (%s): joining elsewhere",
                        self.group,
                        location,
                        exc,
                    )
                    self._lose()
                    return
                self._stop.wait(min(self._interval() / 2, max(deadline - time.monotonic(), 0.0)))
        self._learn(answer)
        state = answer.get("state")
        with self._changed:
            if state == ACQUIRED and self._state in (ALLOCATING, ACQUIRED):
                items = [str(i) for i in answer.get("partitions", [])]
                if self._state == ACQUIRED and items != self._acquired:
                    self._set(RELEASE)  # cannot happen without a release in between: be safe
                    return
                self._acquired = items
                self._lease_until = sent + self._lease_s
                self._set(ACQUIRED)
            elif state != ACQUIRED and self._state == ACQUIRED:
                self._set(RELEASE)  # stop reading; released on the consumer's release_set()
        if state == FAILED:
            self._lose()

    def _lose(self) -> None:
        """The broker no longer hosts this member: stop reading, and join again."""
        with self._changed:
            self._member = None
            if self._state == ACQUIRED:
                self._set(RELEASE)
