"""The controller: one broker, elected through an ephemeral ZooKeeper node, that chooses partition
leaders.

It watches broker membership and topics. When a leader's broker is gone it makes the first live
in-sync replica the leader in a new leader epoch (no unclean election unless the topic says
``unclean.leader.election.enable=true``); it drops dead brokers from in-sync sets; and it gives
leadership back to a partition's preferred replica (the first one) once that is in sync again.
Every state change is a compare-and-set on the partition's state znode, so a controller that was
deposed, or a leader that changed the ISR meanwhile, never gets overwritten blindly.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Protocol

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.coordination.cluster import PartitionState
from sparklog.errors import UnknownTopic

if TYPE_CHECKING:
    from sparklog.coordination.cluster import ClusterMetadata

log = logging.getLogger(__name__)

# Rounds are driven by watches (brokers, topics, reassignments, ISR expansions); this periodic
# round only catches what a lost notification would have missed. Each round reads every partition's
# state: at 2 s that was most of an idle 1000-partition cluster's CPU.
RECONCILE_INTERVAL_S = 30.0


def choose_state(state: PartitionState, replicas: list[int], live: set[int], unclean: bool) -> PartitionState:
    """The state a partition should have given the live brokers (the controller's whole policy)."""
    isr_live = [b for b in state.isr if b in live and b in replicas]  # a moved-away replica is no member
    if state.leader >= 0 and state.leader in live:
        preferred = replicas[0]
        if preferred != state.leader and preferred in isr_live:
            return PartitionState(preferred, state.leader_epoch + 1, isr_live)
        if isr_live != state.isr:
            return PartitionState(state.leader, state.leader_epoch, isr_live or [state.leader])
        return state
    candidates = [r for r in replicas if r in isr_live]
    if candidates:
        return PartitionState(candidates[0], state.leader_epoch + 1, isr_live)
    if unclean:
        alive = [r for r in replicas if r in live]
        if alive:
            return PartitionState(alive[0], state.leader_epoch + 1, [alive[0]])
    # offline: keep the last ISR so that the first of them to come back is elected
    return PartitionState(-1, state.leader_epoch, state.isr)


class ControllerHost(Protocol):
    """What the controller needs of the broker it runs in: its id, its ZooKeeper access and whether
    its ZooKeeper session is connected."""

    broker_id: int
    zk_connected: bool

    @property
    def cluster(self) -> ClusterMetadata | None: ...


class Controller:
    """Runs inside every broker; acts only while this broker holds the ``controller`` znode."""

    def __init__(self, broker: ControllerHost) -> None:
        self.broker = broker
        self.active = False
        self.offline_partitions = 0  # partitions left without a leader by the last reconcile (a metric)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

    @property
    def _cluster(self):  # noqa: ANN202
        assert self.broker.cluster is not None
        return self.broker.cluster

    def start(self) -> None:
        cluster = self._cluster
        DataWatch(cluster.zk, cluster.layout.controller, self._on_controller_node)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def _on_controller_node(self, data: bytes | None, _stat: object) -> bool | None:
        if self._stopped.is_set():
            return False
        if data is None:
            self.active = False
            self._wake.set()  # try to take over in the controller thread
        return None

    def _still_controller(self) -> bool:
        """Whether the controller znode is still held by this broker's current ZooKeeper session
        (after a session expiry another broker may hold it, or a new session of ours never did)."""
        cluster = self._cluster
        if not self.broker.zk_connected:
            return False
        try:
            _data, stat = cluster.zk.get(cluster.layout.controller)
        except NoNodeError:
            return False
        return stat.ephemeralOwner == cluster.zk.client_id[0]

    def _try_elect(self) -> None:
        cluster = self._cluster
        try:
            cluster.zk.create(
                cluster.layout.controller, json.dumps({"broker_id": self.broker.broker_id}).encode(), ephemeral=True
            )
        except NodeExistsError:
            self.active = self._still_controller()  # held by our own session already (a re-election)
            return
        log.info("broker %s is the controller", self.broker.broker_id)
        self.active = True
        ChildrenWatch(cluster.zk, cluster.layout.broker_ids, lambda _c: self._wake.set())
        ChildrenWatch(cluster.zk, cluster.layout.topics, lambda _c: self._wake.set())
        cluster.zk.ensure_path(cluster.layout.reassignments)
        ChildrenWatch(cluster.zk, cluster.layout.reassignments, lambda _c: self._wake.set())
        DataWatch(cluster.zk, cluster.layout.isr_change, lambda _d, _s: self._wake.set())

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(RECONCILE_INTERVAL_S)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                if self.active and not self._still_controller():
                    log.warning("broker %s is no longer the controller", self.broker.broker_id)
                    self.active = False
                if not self.active:
                    self._try_elect()
                if self.active:
                    self.reconcile()
            except Exception:  # ZooKeeper trouble: try again on the next round
                log.exception("controller round failed")
                self._stopped.wait(0.2)
                self._wake.set()

    def reconcile(self) -> None:
        """One pass over every partition: move reassigned replicas, elect, shrink, or restore
        preferred leaders as needed."""
        cluster = self._cluster
        for topic in cluster.zk.get_children(cluster.layout.reassignments):
            self._advance_reassignment(topic)
        offline = 0
        for topic in cluster.topics():
            try:
                meta = cluster.topic(topic)
            except UnknownTopic:
                continue
            unclean = meta.config.unclean_leader_election_enable
            states = cluster.partition_states(topic, range(meta.partitions))
            # the live brokers after the states: a broker a leader put back in an ISR registered
            # before that, so a stale view of them never drops it (the writes are compare-and-set)
            live = set(cluster.brokers())
            for p, replicas in enumerate(meta.replicas):
                if p not in states:
                    continue
                state, version = states[p]
                wanted = choose_state(state, replicas, live, unclean)
                offline += wanted.leader < 0
                if wanted == state:
                    continue
                path = cluster.layout.partition_state(topic, p)
                try:
                    cluster.zk.set(path, wanted.to_json(), version=version)
                    log.info("controller: %s-%s %s -> %s", topic, p, state, wanted)
                except BadVersionError:
                    self._wake.set()  # someone changed it meanwhile: look again
        self.offline_partitions = offline

    def _advance_reassignment(self, topic: str) -> None:
        """Move a topic's partitions towards their requested replicas, one safe step per round:
        first add the new replicas (they start following and catching up), then, once every new
        replica is in sync, drop the old ones (leadership moves to a new replica if needed)."""
        cluster = self._cluster
        targets = cluster.pending_reassignment(topic)
        if targets is None:
            return
        try:
            data, stat = cluster.zk.get(cluster.layout.topic(topic))
        except NoNodeError:
            cluster.zk.delete(cluster.layout.reassignment(topic))
            return
        replicas = [list(map(int, r)) for r in json.loads(data)["replicas"]]
        done = []
        grown = False
        shrunk: dict[int, tuple[PartitionState, int]] = {}
        for p, target in targets.items():
            current = replicas[p]
            if current == target:
                # done once every replica is in sync: growing [2] to [2, 3] gives the target at once,
                # before 3 has caught up (the ISR growing wakes this thread again)
                state = PartitionState.from_json(cluster.zk.get(cluster.layout.partition_state(topic, p))[0])
                if all(b in state.isr for b in target):
                    done.append(p)
                continue
            if not all(b in current for b in target):
                replicas[p] = current + [b for b in target if b not in current]
                grown = True
                continue
            state_data, state_stat = cluster.zk.get(cluster.layout.partition_state(topic, p))
            state = PartitionState.from_json(state_data)
            if not all(b in state.isr for b in target):
                continue  # new replicas still catching up
            isr = [b for b in state.isr if b in target]
            if state.leader in target:
                shrunk[p] = (PartitionState(state.leader, state.leader_epoch, isr), state_stat.version)
            else:
                shrunk[p] = (PartitionState(target[0], state.leader_epoch + 1, isr), state_stat.version)
            replicas[p] = list(target)
        if grown or shrunk:
            # the dropped replicas leave the ISR in the same transaction that drops them from the
            # assignment, so the leader can never take one of them back into the ISR
            if not cluster.move_replicas(topic, replicas, stat.version, shrunk):
                self._wake.set()  # something changed meanwhile: look again
                return
            for p, (new_state, _) in shrunk.items():
                log.info("controller: %s-%s moved to replicas %s (%s)", topic, p, replicas[p], new_state)
            if shrunk:
                # the next round finds them done and may finish the reassignment: look now, since
                # no ISR grows to wake this thread (it waited for the 30 s reconcile before)
                self._wake.set()
        if done and len(done) == len(targets):
            cluster.zk.delete(cluster.layout.reassignment(topic))
            log.info("controller: reassignment of %s finished", topic)
