"""Consumer group members a broker hosts for clients that talk to brokers only (Kafka's
JoinGroup/Heartbeat/LeaveGroup; the wire is in :mod:`sparklog.protocol.wire`).

Each remote member is a kazoo ``SetPartitioner`` on the broker's own ZooKeeper session, with the
member id as its identifier, at the same path and over the same items (``"<topic>:<partition>"``)
as a ZooKeeper-native consumer's (:meth:`~sparklog.coordination.zk_layout.ZkLayout.group_partitioner`):
broker-hosted and ZooKeeper-native members of one group share its partitions through the same
party and locks. The client drives it by heartbeats: each answers the partitioner's state (and the
partitions once acquired); the broker gives partitions up (``release_set()``) only when the
client says it reads none of them (``released``), so no partition is read by two members at once.

A member without a heartbeat for its session timeout is finished (its locks released, it leaves
the party), by one reaper thread that runs while there are members. If the broker dies, its
ZooKeeper session ends and every lock and party node it held for clients goes with it; a client
stops reading before that can happen (it knows the ZooKeeper session timeout: every answer
carries it). A broker that stops (:meth:`GroupMembers.close`) first asks its members to release,
and waits a little for them, before leaving ZooKeeper.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from kazoo.recipe.partitioner import SetPartitioner

from sparklog.errors import BrokerNotAvailable, CoordinatorNotAvailable, InvalidRequest, UnknownMemberId

log = logging.getLogger(__name__)

MIN_SESSION_TIMEOUT_MS = 1_000  # Kafka's group.min.session.timeout.ms is 6 s; tests want less
MAX_SESSION_TIMEOUT_MS = 300_000
MAX_MEMBERS = 10_000  # hosted by one broker
TIME_BOUNDARY_S = 0.5  # how long the party must be stable before partitions are allocated (as Consumer's)

ALLOCATING, ACQUIRED, RELEASE, FAILED = "allocating", "acquired", "release", "failed"

GroupPath = Callable[[str, Sequence[str]], str]  # (group, topics) -> the partitioner's znode


@dataclass
class _Member:
    group: str
    partitioner: SetPartitioner
    session_timeout_s: float
    last_seen: float = field(default_factory=time.monotonic)


class GroupMembers:
    """The group members this broker hosts. What it needs of the broker: its kazoo client, where a
    group's partitioner lives, and its ZooKeeper session timeout (told to clients)."""

    def __init__(self, zk: KazooClient, group_path: GroupPath, zookeeper_session_timeout_s: float) -> None:
        self.zk = zk
        self.group_path = group_path
        self.zookeeper_session_timeout_s = zookeeper_session_timeout_s
        self._members: dict[str, _Member] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._reaper: threading.Thread | None = None
        self._closing = False

    def _timeouts(self) -> dict[str, Any]:
        return {"zookeeper_session_timeout_ms": int(self.zookeeper_session_timeout_s * 1000)}

    # ----------------------------------------------------------------- requests
    def join(self, group: str, topics: Sequence[str], items: Sequence[str], session_timeout_ms: int) -> dict[str, Any]:
        """A new member of ``group`` sharing ``items`` (checked by the caller); it starts allocating."""
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidRequest(
                f"'session_timeout_ms' must be {MIN_SESSION_TIMEOUT_MS} to {MAX_SESSION_TIMEOUT_MS}, "
                f"got {session_timeout_ms}"
            )
        if not self.zk.connected:  # a partitioner made now would wait for ZooKeeper, its member gone by then
            raise CoordinatorNotAvailable("this broker cannot reach ZooKeeper now: join again (through any broker)")
        with self._lock:
            if self._closing:
                raise BrokerNotAvailable("the broker is shutting down: join the group through another one")
            if len(self._members) >= MAX_MEMBERS:
                raise BrokerNotAvailable(f"the broker hosts {MAX_MEMBERS} group members already: try another one")
        member_id = uuid.uuid4().hex  # a znode name component (kazoo's ShallowParty puts it in one)
        partitioner = SetPartitioner(
            self.zk, self.group_path(group, topics), list(items), identifier=member_id, time_boundary=TIME_BOUNDARY_S
        )
        with self._lock:
            self._members[member_id] = _Member(group, partitioner, session_timeout_ms / 1000)
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="group-member-reaper", daemon=True)
                self._reaper.start()
            self._wake.notify()
        log.info("member %s joined group %r (%d partitions)", member_id, group, len(items))
        return {"member_id": member_id, **self._timeouts()}

    def _member(self, group: str, member_id: object) -> _Member:
        member = self._members.get(member_id) if isinstance(member_id, str) else None
        if member is None or member.group != group:
            raise UnknownMemberId(f"this broker hosts no member {str(member_id)[:40]!r} of group {group!r}: join again")
        return member

    def heartbeat(self, group: str, member_id: object, released: bool) -> dict[str, Any]:
        """The member's state (and partitions once acquired); ``released``: the client reads none
        of its partitions, so a pending release may be done."""
        with self._lock:
            member = self._member(group, member_id)
            member.last_seen = time.monotonic()
            closing = self._closing
        part = member.partitioner
        if closing and not released:
            return {"state": RELEASE, **self._timeouts()}  # the client stops reading first
        if closing or part.failed:
            self._finish(member_id)  # type: ignore[arg-type]
            return {"state": FAILED, **self._timeouts()}
        if released and part.release and self.zk.connected:
            # kazoo asks for a release as soon as the connection drops; giving the locks up needs
            # ZooKeeper (a release_set() now would hold this call until it is back, and the
            # member's lease would run out): done by the first heartbeat once it is back
            part.release_set()
        if part.acquired:
            return {"state": ACQUIRED, "partitions": [str(i) for i in part], **self._timeouts()}
        return {"state": RELEASE if part.release else ALLOCATING, **self._timeouts()}

    def leave(self, group: str, member_id: object) -> None:
        with self._lock:
            self._member(group, member_id)
        self._finish(member_id)  # type: ignore[arg-type]

    # ----------------------------------------------------------------- ending members
    def _finish(self, member_id: str) -> None:
        with self._lock:
            member = self._members.pop(member_id, None)
            self._wake.notify()
        if member is not None:
            self._end(member_id, member)

    def _end(self, member_id: str, member: _Member) -> None:
        """(A member no longer in ``_members``: its heartbeats get UNKNOWN_MEMBER_ID.)"""
        part = member.partitioner
        try:
            part.finish()  # its locks released, out of the party: its partitions move
        except (KazooException, ValueError):  # ValueError: kazoo's own release racing this one after a lost session
            log.warning(
                "member %s of group %r could not leave cleanly; its nodes go with the session", member_id, member.group
            )
        # kazoo keeps a finished partitioner's session listener until the session is lost: a
        # long-lived broker hosting many members over time must not collect them
        self.zk.remove_listener(part._establish_sessionwatch)
        log.info("member %s of group %r finished", member_id, member.group)

    def _reap(self) -> None:
        """Finish members whose heartbeats stopped; ends when no member is left."""
        while True:
            with self._lock:
                if not self._members:
                    self._reaper = None
                    return
                now = time.monotonic()
                expired = {  # out at once: a heartbeat from now on is answered UNKNOWN_MEMBER_ID
                    m: self._members.pop(m)
                    for m, member in list(self._members.items())
                    if now - member.last_seen > member.session_timeout_s
                }
                if not expired:
                    due = min(member.last_seen + member.session_timeout_s for member in self._members.values())
                    self._wake.wait(max(due - now, 0.0) + 0.01)
                    continue
                self._wake.notify_all()
            for member_id, member in expired.items():
                log.info("member %s missed its heartbeats: finishing it", member_id)
                try:
                    self._end(member_id, member)
                except Exception:  # the reaper must outlive any one member's trouble
                    log.exception("could not finish member %s cleanly; its nodes go with the session", member_id)

    def close(self) -> None:
        """Before the broker leaves ZooKeeper (which drops every lock it holds for clients): ask
        every member to release, wait until they did or could no longer be reading (a client
        stops on its own within a quarter of the ZooKeeper session timeout of its last heartbeat),
        then finish them all."""
        with self._lock:
            self._closing = True
            members = list(self._members)
        if not members or self.zk.state != KazooState.CONNECTED:
            return  # cut off from ZooKeeper: its members answer release already, and kazoo calls would hang
        deadline = time.monotonic() + self.zookeeper_session_timeout_s / 3
        with self._lock:
            while self._members and time.monotonic() < deadline:
                self._wake.wait(0.05)
        for member_id in list(self._members):
            self._finish(member_id)
