"""Kafka's classic consumer group protocol, as a coordinator broker keeps it in memory: who the
members of each group are, which generation they are in, the protocol they chose, their leader
and the assignments the leader handed out (Kafka's ``ClassicGroup`` and the classic part of its
group coordinator).

A group moves through Kafka's states. ``Empty``: no members. ``PreparingRebalance``: the join
phase; every member must (re)send JoinGroup, and the phase ends once all known members have, or
when the group's rebalance timeout (the largest of its members') passes: members that did not
rejoin are removed. A group leaving ``Empty`` waits ``initial_rebalance_delay_ms`` first, longer
while new members keep arriving (Kafka's ``group.initial.rebalance.delay.ms``, 3 s there; 300 ms
here so that a group of consumers started together still forms in one generation, and tests stay
fast). ``CompletingRebalance``: the join phase ended in a new generation; every member got its
JoinGroup answer, the leader with every member's metadata, and the group waits for the leader's
SyncGroup carrying the assignments; members that do not send SyncGroup within the rebalance
timeout are removed. ``Stable``: assignments handed out; a JoinGroup from the leader or with
changed metadata, a member leaving or missing its session timeout (no Heartbeat, JoinGroup,
SyncGroup or OffsetCommit for ``session_timeout_ms``) starts the next rebalance. ``Dead``: the
group was removed (members that meet it look it up again).

Threads: the listener serves each connection on its own thread, and a JoinGroup or SyncGroup
waiting for its phase blocks that thread on the group's condition until the phase completes
(woken by the request that completes it, or at the phase's deadline). One reaper thread, alive
only while some group exists, removes members whose sessions expired and ends phases whose
deadline passed with nobody waiting; it sleeps until the next deadline, never polls.

What differs from Kafka: nothing here is persisted (a coordinator that stops or hands the group to
another broker loses it; members rejoin; committed offsets live elsewhere and survive). A group
that becomes ``Empty`` is forgotten at once (its generation numbering starts again with its next
member). ``group.instance.id`` (static membership) is accepted but members are treated as
dynamic: each JoinGroup without a member id gets a new one, and a new member with the instance id
of an existing one replaces it (the old one is fenced with FENCED_INSTANCE_ID), followed by a
rebalance, which Kafka's static membership would avoid. The chosen protocol is Kafka's vote (each
member votes for the first protocol of its own list that every member supports; the most votes
win), ties broken by the leader's preference order.

This module is the state machine only: the handlers (:mod:`sparklog.kafka.handlers`) decode the
requests, check that this broker coordinates the group, and store committed offsets.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from sparklog.kafka import error_codes as ec

log = logging.getLogger(__name__)

INITIAL_REBALANCE_DELAY_MS = 300  # Kafka's group.initial.rebalance.delay.ms is 3000
MIN_SESSION_TIMEOUT_MS = 6_000  # Kafka's group.min.session.timeout.ms
MAX_SESSION_TIMEOUT_MS = 1_800_000  # Kafka's group.max.session.timeout.ms
REAPER_MAX_SLEEP_S = 30.0  # the reaper looks at the groups at least this often


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass(frozen=True)
class JoinRequest:
    """One JoinGroup as the coordinator needs it (``protocols``: (name, metadata) in the member's
    order of preference; ``require_known_member_id``: JoinGroup v4+, where a member without an id
    is given one and asked to join again with it)."""

    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # -1: the session timeout (JoinGroup v0)
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True


@dataclasses.dataclass(frozen=True)
class JoinedMember:
    """A member as the leader's JoinGroup answer lists it: its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclasses.dataclass(frozen=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()  # the leader's answer only


@dataclasses.dataclass(frozen=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclasses.dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # for the chosen protocol; empty unless the group is Stable (as Kafka describes it)
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupSummary:
    """A group as DescribeGroups and ListGroups show it (plus its generation and leader)."""

    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str  # "" unless Stable
    generation_id: int
    leader: str
    members: tuple[MemberSummary, ...]


class _Answer:
    """Where a blocked JoinGroup or SyncGroup finds its answer once its phase completes."""

    __slots__ = ("result",)

    def __init__(self) -> None:
        self.result: JoinResult | SyncResult | None = None


class _Member:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "protocol_type",
        "protocols",
        "session_s",
        "rebalance_s",
        "assignment",
        "expires_at",
        "join_waiters",
        "sync_waiters",
    )

    def __init__(self, member_id: str, request: JoinRequest, now: float) -> None:
        self.member_id = member_id
        self.group_instance_id = request.group_instance_id
        self.client_id = request.client_id
        self.client_host = request.client_host
        self.protocol_type = request.protocol_type
        self.protocols: tuple[tuple[str, bytes], ...] = ()
        self.session_s = 0.0
        self.rebalance_s = 0.0
        self.update(request)
        self.assignment = b""
        self.expires_at = now + self.session_s
        self.join_waiters: list[_Answer] = []
        self.sync_waiters: list[_Answer] = []

    def update(self, request: JoinRequest) -> None:
        self.protocols = request.protocols
        self.session_s = request.session_timeout_ms / 1000
        rebalance_ms = request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0 else request.session_timeout_ms
        self.rebalance_s = rebalance_ms / 1000

    @property
    def awaiting_join(self) -> bool:
        return bool(self.join_waiters)

    @property
    def awaiting_sync(self) -> bool:
        return bool(self.sync_waiters)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str | None:
        return next((name for name, _ in self.protocols if name in candidates), None)

    def answer_join(self, result: JoinResult) -> None:
        for waiter in self.join_waiters:
            waiter.result = result
        self.join_waiters.clear()

    def answer_sync(self, result: SyncResult) -> None:
        for waiter in self.sync_waiters:
            waiter.result = result
        self.sync_waiters.clear()


class _Group:
    """One group's state; every field is read and written under ``cond``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.cond = threading.Condition()
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, _Member] = {}  # in joining order (the next leader is the oldest)
        self.pending: dict[str, float] = {}  # ids handed out by MEMBER_ID_REQUIRED -> when they lapse
        self.pending_sync: set[str] = set()  # members yet to send SyncGroup in this generation
        self.sync_deadline: float | None = None
        self.join_deadline: float | None = None
        self.initial_delay = False  # the join phase of a group leaving Empty (InitialDelayedJoin)
        self.initial_remaining_s = 0.0
        self.new_member_added = False

    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_s for m in self.members.values()), default=0.0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def candidates(self) -> set[str]:
        """The protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        candidates = self.candidates()
        votes = Counter(vote for m in self.members.values() if (vote := m.vote(candidates)) is not None)
        leader = self.members[self.leader] if self.leader in self.members else next(iter(self.members.values()))
        most = max(votes.values(), default=0)
        return next((name for name in leader.protocol_names() if votes.get(name) == most), leader.protocols[0][0])

    def supports(self, protocol_type: str, names: Iterable[str]) -> bool:
        names = list(names)
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidates().intersection(names))

    def next_deadline(self) -> float | None:
        times = list(self.pending.values())
        times += [m.expires_at for m in self.members.values() if not (m.awaiting_join or m.awaiting_sync)]
        if self.state is GroupState.PREPARING_REBALANCE and self.join_deadline is not None:
            times.append(self.join_deadline)
        if self.sync_deadline is not None:
            times.append(self.sync_deadline)
        return min(times, default=None)

    def phase_deadline(self) -> float | None:
        if self.state is GroupState.PREPARING_REBALANCE:
            return self.join_deadline
        return self.sync_deadline

    def joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def current_join(self, member: _Member) -> JoinResult:
        """The answer of the current generation (a member that asks again gets it again)."""
        return JoinResult(
            ec.NONE,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader or "",
            self.joined_members() if member.member_id == self.leader else (),
        )


class GroupCoordinator:
    """The classic groups this broker coordinates, in memory (see the module's docstring).

    Every call takes the group's lock; JoinGroup and SyncGroup may block (bounded by the group's
    rebalance timeout) until their phase completes. :meth:`stop` wakes every blocked call (its
    answer is NOT_COORDINATOR) and ends the reaper."""

    def __init__(
        self,
        initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS,
        min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS,
    ) -> None:
        self.initial_delay_s = initial_rebalance_delay_ms / 1000
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._lock = threading.Lock()  # the group table and the reaper; taken after a group's, never before
        self._groups: dict[str, _Group] = {}
        self._stopped = False
        self._wake = threading.Event()
        self._reaper: threading.Thread | None = None

    # ----------------------------------------------------------------- the table
    def _lookup(self, group_id: str, create: bool = False) -> _Group | None:
        with self._lock:
            group = self._groups.get(group_id)
            if group is None and create and not self._stopped:
                group = self._groups[group_id] = _Group(group_id)
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, name="sparklog-kafka-groups", daemon=True)
                    self._reaper.start()
            return group

    def _live(self, group_id: str, create: bool = False) -> _Group | None:
        """The group, its lock held by the caller afterwards (``with group.cond``); a group found
        dead (removed meanwhile) is looked up again."""
        while True:
            group = self._lookup(group_id, create)
            if group is None:
                return None
            group.cond.acquire()
            if group.state is not GroupState.DEAD:
                return group
            group.cond.release()

    def _drop_if_empty(self, group: _Group) -> None:
        if group.state is GroupState.EMPTY and not group.members and not group.pending:
            self._kill(group)

    def _kill(self, group: _Group) -> None:
        group.state = GroupState.DEAD
        for member in group.members.values():
            member.answer_join(JoinResult(ec.NOT_COORDINATOR, member.member_id))
            member.answer_sync(SyncResult(ec.NOT_COORDINATOR))
        group.cond.notify_all()
        with self._lock:
            if self._groups.get(group.group_id) is group:
                del self._groups[group.group_id]

    def group_ids(self) -> list[str]:
        with self._lock:
            return list(self._groups)

    @property
    def reaper_alive(self) -> bool:
        with self._lock:
            return self._reaper is not None

    # ----------------------------------------------------------------- JoinGroup
    def join(self, request: JoinRequest) -> JoinResult:
        """JoinGroup: blocks until the join phase completes (or answers at once: errors,
        MEMBER_ID_REQUIRED, a member asking again for the generation it is in)."""
        if self._stopped:
            return JoinResult(ec.NOT_COORDINATOR, request.member_id)
        if not request.group_id:
            return JoinResult(ec.INVALID_GROUP_ID, request.member_id)
        if not self.min_session_timeout_ms <= request.session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(ec.INVALID_SESSION_TIMEOUT, request.member_id)
        new = request.member_id == ""
        group = self._live(request.group_id, create=new)
        if group is None:
            return JoinResult(ec.UNKNOWN_MEMBER_ID, request.member_id)
        try:
            if not group.supports(request.protocol_type, (name for name, _ in request.protocols)):
                return JoinResult(ec.INCONSISTENT_GROUP_PROTOCOL, request.member_id)
            now = time.monotonic()
            waiting = self._join_new(group, request, now) if new else self._join_known(group, request, now)
            if isinstance(waiting, JoinResult):
                return waiting
            result = self._await(group, waiting, JoinResult(ec.NOT_COORDINATOR, request.member_id))
            assert isinstance(result, JoinResult)
            return result
        finally:
            self._drop_if_empty(group)
            group.cond.release()

    def _join_new(self, group: _Group, request: JoinRequest, now: float) -> JoinResult | _Answer:
        prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
        member_id = f"{prefix}-{uuid.uuid4()}"
        if request.group_instance_id is not None:
            for old in list(group.members.values()):
                if old.group_instance_id == request.group_instance_id:
                    log.info(
                        "group %s: member %s replaces %s (group.instance.id %s)",
                        group.group_id,
                        member_id,
                        old.member_id,
                        request.group_instance_id,
                    )
                    self._forget_member(group, old, ec.FENCED_INSTANCE_ID)  # the join below rebalances
        elif request.require_known_member_id:
            group.pending[member_id] = now + request.session_timeout_ms / 1000
            self._wake.set()
            return JoinResult(ec.MEMBER_ID_REQUIRED, member_id)
        return self._add_member(group, member_id, request, now)

    def _join_known(self, group: _Group, request: JoinRequest, now: float) -> JoinResult | _Answer:
        member_id = request.member_id
        if member_id in group.pending:
            del group.pending[member_id]
            return self._add_member(group, member_id, request, now)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ec.UNKNOWN_MEMBER_ID, member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member(group, member, request, now)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == request.protocols:  # it missed its JoinGroup answer
                return group.current_join(member)
            return self._update_member(group, member, request, now)
        if state is GroupState.STABLE:
            if member_id == group.leader or member.protocols != request.protocols:
                return self._update_member(group, member, request, now)
            return group.current_join(member)
        return JoinResult(ec.UNKNOWN_MEMBER_ID, member_id)

    def _add_member(self, group: _Group, member_id: str, request: JoinRequest, now: float) -> _Answer:
        member = _Member(member_id, request, now)
        if not group.members:
            group.protocol_type = request.protocol_type
        if group.leader is None:
            group.leader = member_id
        group.members[member_id] = member
        answer = _Answer()
        member.join_waiters.append(answer)
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_delay:
            group.new_member_added = True
        self._prepare_rebalance(group, now, f"member {member_id} joined")
        self._maybe_complete_join(group, now)
        return answer

    def _update_member(self, group: _Group, member: _Member, request: JoinRequest, now: float) -> _Answer:
        member.update(request)
        answer = _Answer()
        member.join_waiters.append(answer)
        self._prepare_rebalance(group, now, f"member {member.member_id} rejoined")
        self._maybe_complete_join(group, now)
        return answer

    def _prepare_rebalance(self, group: _Group, now: float, reason: str) -> None:
        """Start a join phase (nothing if one is under way)."""
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                member.answer_sync(SyncResult(ec.REBALANCE_IN_PROGRESS))
        group.pending_sync.clear()
        group.sync_deadline = None
        rebalance_s = group.rebalance_timeout_s()
        if group.state is GroupState.EMPTY:
            group.initial_delay = True
            group.new_member_added = False
            group.join_deadline = now + self.initial_delay_s
            group.initial_remaining_s = max(rebalance_s - self.initial_delay_s, 0.0)
        else:
            group.initial_delay = False
            group.join_deadline = now + rebalance_s
        log.info("group %s: preparing to rebalance (generation %d, %s)", group.group_id, group.generation, reason)
        group.state = GroupState.PREPARING_REBALANCE
        group.cond.notify_all()
        self._wake.set()

    def _maybe_complete_join(self, group: _Group, now: float) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self._complete_join(group, now)

    def _join_deadline_passed(self, group: _Group, now: float) -> None:
        if group.initial_delay and group.new_member_added and group.initial_remaining_s > 0:
            delay = min(self.initial_delay_s, group.initial_remaining_s)  # newcomers: wait a little more
            group.initial_remaining_s -= delay
            group.new_member_added = False
            group.join_deadline = now + delay
            return
        self._complete_join(group, now)

    def _complete_join(self, group: _Group, now: float) -> None:
        """End the join phase: members that did not rejoin leave, a new generation begins."""
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            self._forget_member(group, member, ec.UNKNOWN_MEMBER_ID)
        group.join_deadline = None
        group.initial_delay = False
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.state = GroupState.EMPTY
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            group.cond.notify_all()
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        log.info(
            "group %s: generation %d with %d member(s), protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader,
        )
        for member in group.members.values():
            member.answer_join(group.current_join(member))
            member.expires_at = now + member.session_s
            group.pending_sync.add(member.member_id)
        group.sync_deadline = now + group.rebalance_timeout_s()
        group.cond.notify_all()
        self._wake.set()

    # ----------------------------------------------------------------- SyncGroup
    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        """SyncGroup: the leader's carries every member's assignment; a member's blocks until the
        leader's arrives (or a rebalance starts)."""
        group = self._live(group_id)
        if group is None:
            return SyncResult(ec.UNKNOWN_MEMBER_ID)
        try:
            member = group.members.get(member_id)
            if self._stopped:
                return SyncResult(ec.NOT_COORDINATOR)
            if member is None:
                return SyncResult(ec.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation:
                return SyncResult(ec.ILLEGAL_GENERATION)
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                return SyncResult(ec.INCONSISTENT_GROUP_PROTOCOL)
            now = time.monotonic()
            if group.state is GroupState.PREPARING_REBALANCE:
                return SyncResult(ec.REBALANCE_IN_PROGRESS)
            if group.state is GroupState.STABLE:
                self._synced(group, member_id)
                member.expires_at = now + member.session_s
                return SyncResult(ec.NONE, group.protocol_type, group.protocol_name, member.assignment)
            if group.state is not GroupState.COMPLETING_REBALANCE:
                return SyncResult(ec.UNKNOWN_MEMBER_ID)
            answer = _Answer()
            member.sync_waiters.append(answer)
            self._synced(group, member_id)
            if member_id == group.leader:
                for each in group.members.values():
                    each.assignment = bytes(assignments.get(each.member_id, b""))
                group.state = GroupState.STABLE
                if not group.pending_sync:
                    group.sync_deadline = None
                log.info("group %s: generation %d is stable", group.group_id, group.generation)
                for each in group.members.values():
                    if each.awaiting_sync:
                        each.answer_sync(SyncResult(ec.NONE, group.protocol_type, group.protocol_name, each.assignment))
                        each.expires_at = now + each.session_s
                group.cond.notify_all()
                self._wake.set()
            result = self._await(group, answer, SyncResult(ec.NOT_COORDINATOR))
            assert isinstance(result, SyncResult)
            return result
        finally:
            group.cond.release()

    def _synced(self, group: _Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync and group.state is GroupState.STABLE:
            group.sync_deadline = None

    # ----------------------------------------------------------------- waiting
    def _await(self, group: _Group, answer: _Answer, stopped: JoinResult | SyncResult) -> JoinResult | SyncResult:
        """Wait (the group's lock held) until ``answer`` is given; the phase's deadline is acted
        on here too, so it never depends on the reaper being scheduled."""
        while answer.result is None:
            if self._stopped:
                return stopped
            deadline = group.phase_deadline()
            now = time.monotonic()
            if deadline is not None and deadline <= now:
                self._advance(group, now)
                continue
            group.cond.wait(None if deadline is None else deadline - now)
        return answer.result

    # ----------------------------------------------------------------- Heartbeat, LeaveGroup
    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> int:
        """Heartbeat: keeps the member's session; REBALANCE_IN_PROGRESS asks it to rejoin."""
        group = self._live(group_id)
        if group is None:
            return ec.UNKNOWN_MEMBER_ID
        try:
            member = group.members.get(member_id)
            if member is None:
                return ec.UNKNOWN_MEMBER_ID
            if generation_id != group.generation:
                return ec.ILLEGAL_GENERATION
            member.expires_at = time.monotonic() + member.session_s
            if group.state is GroupState.PREPARING_REBALANCE:
                return ec.REBALANCE_IN_PROGRESS
            return ec.NONE
        finally:
            group.cond.release()

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup: each (member id, group instance id) leaves; an error per member (a member
        named by its instance id alone is found by it)."""
        group = self._live(group_id)
        if group is None:
            return [ec.UNKNOWN_MEMBER_ID] * len(members)
        try:
            now = time.monotonic()
            errors = []
            for member_id, instance_id in members:
                if not member_id and instance_id is not None:
                    member_id = next(
                        (m.member_id for m in group.members.values() if m.group_instance_id == instance_id), ""
                    )
                if member_id in group.pending:
                    del group.pending[member_id]
                    self._maybe_complete_join(group, now)
                    errors.append(ec.NONE)
                elif member_id in group.members:
                    log.info("group %s: member %s left", group.group_id, member_id)
                    self._remove_member(group, group.members[member_id], now, ec.UNKNOWN_MEMBER_ID)
                    errors.append(ec.NONE)
                else:
                    errors.append(ec.UNKNOWN_MEMBER_ID)
            return errors
        finally:
            self._drop_if_empty(group)
            group.cond.release()

    def _forget_member(self, group: _Group, member: _Member, error: int) -> None:
        """Take ``member`` out (its blocked calls answered with ``error``), no state change."""
        member.answer_join(JoinResult(error, ""))
        member.answer_sync(SyncResult(error))
        del group.members[member.member_id]
        group.pending_sync.discard(member.member_id)
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)
        group.cond.notify_all()

    def _remove_member(self, group: _Group, member: _Member, now: float, error: int) -> None:
        """A member leaves, is fenced or its session expired: the others rebalance."""
        self._forget_member(group, member, error)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, f"member {member.member_id} left")
        self._maybe_complete_join(group, now)

    # ----------------------------------------------------------------- offsets and administration
    def validate_commit(self, group_id: str, generation_id: int, member_id: str, api_version: int) -> int:
        """Whether an OffsetCommit may store its offsets (NONE) or the error to answer. Generation
        -1 without a member is a commit from outside group management (a simple consumer, an
        admin): allowed while the group has no members. A member's commit counts as its heartbeat
        while Stable or rebalancing."""
        group = self._live(group_id)
        if group is None:
            if generation_id < 0:
                return ec.NONE
            return ec.GROUP_ID_NOT_FOUND if api_version >= 9 else ec.ILLEGAL_GENERATION
        try:
            if generation_id < 0 and not group.members:
                return ec.NONE
            if generation_id >= 0 or member_id:
                member = group.members.get(member_id)
                if member is None:
                    return ec.UNKNOWN_MEMBER_ID
                if generation_id != group.generation:
                    return ec.ILLEGAL_GENERATION
                if group.state is GroupState.COMPLETING_REBALANCE:
                    return ec.REBALANCE_IN_PROGRESS
                member.expires_at = time.monotonic() + member.session_s
                return ec.NONE
            return ec.UNKNOWN_MEMBER_ID  # no member id, and the group has members
        finally:
            group.cond.release()

    def describe(self, group_id: str) -> GroupSummary | None:
        """The group as DescribeGroups shows it; None if this coordinator has no such group."""
        group = self._live(group_id)
        if group is None:
            return None
        try:
            stable = group.state is GroupState.STABLE
            members = tuple(
                MemberSummary(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            return GroupSummary(
                group.group_id,
                group.state,
                group.protocol_type or "",
                (group.protocol_name or "") if stable else "",
                group.generation,
                group.leader or "",
                members,
            )
        finally:
            group.cond.release()

    def delete(self, group_id: str) -> int:
        """DeleteGroups' check: NON_EMPTY_GROUP while the group has members, else NONE (and the
        group, if known here, is removed)."""
        group = self._live(group_id)
        if group is None:
            return ec.NONE
        try:
            if group.members:
                return ec.NON_EMPTY_GROUP
            self._kill(group)
            return ec.NONE
        finally:
            group.cond.release()

    def subscribed_topics(self, group_id: str) -> frozenset[str] | None:
        """The topics the members of a group subscribe to, read from their metadata for the
        chosen protocol as Kafka's ConsumerProtocolSubscription (whose version 0 prefixes every
        later one): none for a group without members; None (every topic, as far as anyone can
        tell) when a subscription cannot be read or no protocol is chosen yet."""
        group = self._live(group_id)
        if group is None:
            return frozenset()
        try:
            topics: set[str] = set()
            for member in group.members.values():
                names = _subscription_topics(member.metadata(group.protocol_name)) if group.protocol_name else None
                if names is None:
                    return None
                topics.update(names)
            return frozenset(topics)
        finally:
            group.cond.release()

    def forget(self, group_id: str) -> None:
        """Drop a group another broker now coordinates (its members are told NOT_COORDINATOR)."""
        group = self._live(group_id)
        if group is None:
            return
        try:
            log.info("group %s: coordinated elsewhere now; forgotten here", group_id)
            self._kill(group)
        finally:
            group.cond.release()

    # ----------------------------------------------------------------- expiry
    def _advance(self, group: _Group, now: float) -> None:
        """Act on every deadline of ``group`` that passed (its lock held)."""
        for member_id, lapses in list(group.pending.items()):
            if lapses <= now:
                del group.pending[member_id]
        for member in list(group.members.values()):
            expired = member.expires_at <= now and not (member.awaiting_join or member.awaiting_sync)
            if expired and group.members.get(member.member_id) is member:
                log.info(
                    "group %s: member %s missed its session timeout (%.1f s)",
                    group.group_id,
                    member.member_id,
                    member.session_s,
                )
                self._remove_member(group, member, now, ec.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            if group.join_deadline is not None and group.join_deadline <= now:
                self._join_deadline_passed(group, now)
            else:
                self._maybe_complete_join(group, now)
        if group.sync_deadline is not None and group.sync_deadline <= now:
            group.sync_deadline = None
            late = [group.members[m] for m in group.pending_sync if m in group.members]
            if late and group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                for member in late:
                    log.info("group %s: member %s sent no SyncGroup in time", group.group_id, member.member_id)
                    self._forget_member(group, member, ec.UNKNOWN_MEMBER_ID)
                self._prepare_rebalance(group, now, "members missed SyncGroup")
                self._maybe_complete_join(group, now)
        group.cond.notify_all()
        self._drop_if_empty(group)

    def _reap(self) -> None:
        while True:
            self._wake.clear()
            with self._lock:
                if self._stopped or not self._groups:
                    self._reaper = None
                    return
                groups = list(self._groups.values())
            next_at: float | None = None
            for group in groups:
                with group.cond:
                    if group.state is GroupState.DEAD:
                        continue
                    now = time.monotonic()
                    due = group.next_deadline()
                    if due is not None and due <= now:
                        self._advance(group, now)
                        due = group.next_deadline() if group.state is not GroupState.DEAD else None
                if due is not None:
                    next_at = due if next_at is None else min(next_at, due)
            sleep = REAPER_MAX_SLEEP_S if next_at is None else next_at - time.monotonic()
            self._wake.wait(min(max(sleep, 0.0), REAPER_MAX_SLEEP_S))

    def stop(self, timeout_s: float = 2.0) -> None:
        """Wake every blocked JoinGroup and SyncGroup (answered NOT_COORDINATOR), end the reaper."""
        with self._lock:
            self._stopped = True
            groups = list(self._groups.values())
            reaper = self._reaper
        for group in groups:
            with group.cond:
                group.cond.notify_all()
        self._wake.set()
        if reaper is not None and reaper is not threading.current_thread():
            reaper.join(timeout_s)


def _subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (version, then an array of strings), None if
    ``metadata`` is not one."""
    try:
        view = memoryview(metadata)
        if len(view) < 6:
            return None
        count = int.from_bytes(view[2:6], "big", signed=True)
        if count < 0:
            return None
        at, topics = 6, []
        for _ in range(count):
            size = int.from_bytes(view[at : at + 2], "big", signed=True)
            if size < 0 or at + 2 + size > len(view):
                return None
            topics.append(bytes(view[at + 2 : at + 2 + size]).decode())
            at += 2 + size
        return topics
    except (UnicodeDecodeError, ValueError):
        return None
