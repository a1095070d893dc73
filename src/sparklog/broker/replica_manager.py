"""The replicas a broker holds (Kafka's ``ReplicaManager``): for each partition assigned to it, its
log, its state from ZooKeeper (leader, epoch, ISR) kept by one watch per state znode, and the
role that state gives: lead it (and shrink or grow its ISR), or follow it through the
:class:`~sparklog.broker.replication.fetcher_manager.ReplicaFetcherManager`.

Writes need the broker's ZooKeeper session (:class:`ReplicaHost`): a broker cut off from
ZooKeeper may already have been replaced as leader, so it refuses them (the fence)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from sparklog.broker.log_manager import LogManager
from sparklog.broker.partition import Partition, ProduceMeter
from sparklog.broker.replication.fetch_session import FetchSessionCache
from sparklog.broker.replication.fetcher_manager import ReplicaFetcherManager
from sparklog.broker.replication.leader_endpoint import LeaderEndPoint
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.errors import NotLeader, UnknownTopic
from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaHost(Protocol):
    """What the replicas need of their broker: whether its ZooKeeper session is live (the fence),
    and which brokers are registered (only those join an ISR)."""

    @property
    def zk_connected(self) -> bool: ...

    @property
    def live_brokers(self) -> Mapping[int, BrokerInfo]: ...


class TopicSource(Protocol):
    """What the replicas need to know of topics (:class:`~sparklog.broker.topic_catalog.TopicCatalog`)."""

    def get(self, topic: str) -> TopicMetadata | None: ...

    def topic_metadata(self, topic: str) -> TopicMetadata: ...

    def reload(self, topic: str) -> TopicMetadata: ...

    def log_schemas(self, topic: str) -> Sequence[ValueSchema]: ...


class ReplicaMeter(ProduceMeter, Protocol):
    """Where the replicas count what they do (:class:`~sparklog.broker.metrics.BrokerMetrics`):
    batches appended as leader, and the ISR changes of partitions led here."""

    def isr_changed(self, shrinks: int, expands: int) -> None: ...


class ReplicaManager:
    """The partitions held on one broker, their roles and their ISRs."""

    def __init__(
        self,
        broker_id: int,
        cluster: ClusterMetadata,
        topics: TopicSource,
        logs: LogManager,
        host: ReplicaHost,
        endpoint_for: Callable[[int], LeaderEndPoint],
        replica_lag_ms: int,
        stopped: threading.Event,
        meter: ReplicaMeter | None = None,
    ) -> None:
        """``meter``: counts produced batches and ISR changes (None: nothing counted)."""
        self.broker_id = broker_id
        self._meter = meter
        self._cluster = cluster
        self._topics = topics
        self._logs = logs
        self._host = host
        self._replica_lag_ms = replica_lag_ms
        self._stopped = stopped
        self.partitions: dict[TopicPartition, Partition] = {}
        self.changes = PartitionChanges()  # what a waiting replica fetch waits on
        self.fetch_sessions = FetchSessionCache()  # the followers' fetch sessions with this broker
        self.replication = ReplicaFetcherManager(broker_id, endpoint_for, self.read_state, fetching=False)
        self._watched: set[TopicPartition] = set()  # partitions whose state znode is watched
        self._state_paths: dict[str, TopicPartition] = {}  # state znode path -> its partition
        self._unwatched_states: set[TopicPartition] = set()  # a watch fired, reading it again failed
        self._led_with_followers: set[TopicPartition] = set()  # led here, with others in the ISR
        self._lock = threading.RLock()
        self._assign_lock = threading.RLock()

    # ----------------------------------------------------------------- assignments
    def assign(self, topic: str, meta: TopicMetadata) -> bool:
        """Take the replicas of ``topic`` its metadata assigns here, drop those moved away, apply
        an altered config (retention, lake.enabled...) to open logs. False if the new replicas'
        states could not be watched (a ZooKeeper blip): assign again later."""
        with self._assign_lock:  # the topic watches, the maintenance loop and an ISR update may all get here
            return self._assign(topic, meta)

    def _assign(self, topic: str, meta: TopicMetadata) -> bool:
        config = meta.config
        for p in range(meta.partitions):
            held = self.partitions.get((topic, p))
            if held is not None and held.log.config != config:
                held.log.config = config
        fresh: list[int] = []
        for p, replicas in enumerate(meta.replicas):
            key = (topic, p)
            if self.broker_id in replicas:
                if key not in self._watched:
                    self._watched.add(key)
                    fresh.append(p)
                elif key in self.partitions:
                    self.partitions[key].replicas = list(replicas)
            elif key in self._watched:
                self._drop_replica(topic, p)  # moved away from this broker
        if fresh:
            try:
                self._watch_states(topic, fresh)
            except KazooException as exc:
                log.warning("could not watch the partitions of %s (%r); retrying", topic, exc)
                with self._lock:
                    self._watched.difference_update((topic, p) for p in fresh if (topic, p) not in self.partitions)
                return False
        return True

    def holds_topic(self, topic: str) -> bool:
        return any(key[0] == topic for key in self._watched)

    def drop_topic(self, topic: str) -> None:
        """The topic is gone or being deleted: its replicas stop, its logs are deleted."""
        with self._lock:
            self._watched = {k for k in self._watched if k[0] != topic}
            self._state_paths = {path: k for path, k in self._state_paths.items() if k[0] != topic}
            for key in [k for k in self.partitions if k[0] == topic]:
                self.replication.unfollow(key)
                self.partitions.pop(key, None)
        self._logs.delete_topic(topic)

    def _drop_replica(self, topic: str, p: int) -> None:
        """This broker no longer holds a replica of the partition: stop following, delete it."""
        with self._lock:
            self._watched.discard((topic, p))
            self.replication.unfollow((topic, p))
            self.partitions.pop((topic, p), None)
        self._logs.delete_partition(topic, p)
        log.info("%s-%s moved away from broker %s: local replica deleted", topic, p, self.broker_id)

    # ----------------------------------------------------------------- states by watches
    def _watch_states(self, topic: str, partitions: list[int]) -> None:
        """Read the states of partitions of a topic (one pipelined ZooKeeper round, not a round
        trip each), watch them, and take the roles they give this broker. One watcher function
        serves every state node (``_on_state_event``), so reading a node again never adds a watch."""
        for p in partitions:
            self._state_paths[self._cluster.layout.partition_state(topic, p)] = (topic, p)
        for p, (state, version) in self._cluster.partition_states(topic, partitions, self._on_state_event).items():
            self._apply_state(topic, p, state, version)

    def _on_state_event(self, event: WatchedEvent) -> None:
        """A watched partition state changed: read it again (which watches it again) and apply it."""
        key = self._state_paths.get(event.path) if event.path else None
        if key is None or self._stopped.is_set() or key not in self._watched or event.type == EventType.DELETED:
            return
        try:
            self.read_state(*key)
        except Exception:  # the maintenance loop and the reconnect handler read it again
            log.warning("could not read the state of %s-%s", *key, exc_info=True)
            with self._lock:
                if key in self._watched:
                    self._unwatched_states.add(key)

    def _read_states(self, keys: set[TopicPartition]) -> None:
        """Read (and watch) the states of many partitions, a pipelined round per topic."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(keys):
            by_topic.setdefault(topic, []).append(p)
        for topic, partitions in by_topic.items():
            self._watch_states(topic, partitions)

    def read_state(self, topic: str, p: int) -> None:
        """Read a partition's state from ZooKeeper and take the role it gives this broker (the watch
        delivers changes; this heals a notification that never arrived)."""
        path = self._cluster.layout.partition_state(topic, p)
        self._state_paths[path] = (topic, p)
        try:
            data, stat = self._cluster.zk.get(path, watch=self._on_state_event)
        except NoNodeError:
            return  # the topic is being deleted
        self._apply_state(topic, p, PartitionState.from_json(data), stat.version)

    def reread_all(self) -> None:
        """After a reconnect: read (and watch again) every replica's state; notifications may have
        been missed while disconnected, and an expired session lost the watches."""
        self._unwatched_states.clear()
        self._read_states(set(self._watched))

    def heal(self) -> None:
        """Read the states of partitions watched yet without a state (or whose watch could not be
        set again); they are tried again next time if that fails."""
        with self._lock:
            missing = (self._watched - set(self.partitions)) | (self._unwatched_states & self._watched)
            self._unwatched_states.clear()
        if not missing:
            return
        try:
            self._read_states(missing)
        except Exception:
            log.warning("could not read the states of %d partitions", len(missing), exc_info=True)
            with self._lock:
                self._unwatched_states |= missing

    def _apply_state(self, topic: str, p: int, state: PartitionState, version: int) -> None:
        """Take the leader or follower role a partition state gives this broker."""
        with self._lock:
            if self._stopped.is_set() or (topic, p) not in self._watched:
                return  # stopped, or dropped while this notification was on its way
            meta = self._topics.get(topic)
            if meta is None or self.broker_id not in meta.replicas[p]:
                return  # dropped meanwhile (being deleted), or not a replica here
            partition = self._partition(topic, p)
            if version < partition.state_version:
                return  # an older notification arriving late
            before = partition.state
            partition.apply_state(state, version, meta.replicas[p])
            self._count_isr_change(before, state)
            if before is None or (before.leader, before.leader_epoch) != (state.leader, state.leader_epoch):
                role = "leads" if state.leader == self.broker_id else f"follows {state.leader}"
                log.info("%s-%s: broker %s %s in epoch %s", topic, p, self.broker_id, role, state.leader_epoch)
            if state.leader == self.broker_id and len(state.isr) > 1:
                self._led_with_followers.add((topic, p))
            else:
                self._led_with_followers.discard((topic, p))
            if state.leader == self.broker_id or state.leader < 0:
                self.replication.unfollow((topic, p))
            else:
                self.replication.follow(partition, state.leader)

    def _count_isr_change(self, before: PartitionState | None, after: PartitionState) -> None:
        """Count the ISR shrinks and expands of a partition led here in one epoch: whether this
        leader wrote them or the controller did (it drops a broker whose session ended)."""
        if self._meter is None or before is None or after.leader != self.broker_id:
            return
        if (before.leader, before.leader_epoch) != (after.leader, after.leader_epoch):
            return  # a new leadership, not an ISR change
        self._meter.isr_changed(len(set(before.isr) - set(after.isr)), len(set(after.isr) - set(before.isr)))

    def _partition(self, topic: str, p: int) -> Partition:
        key = (topic, p)
        partition = self.partitions.get(key)
        if partition is None:
            meta = self._topics.topic_metadata(topic)
            log_ = self._logs.get(topic, p, meta.config, self._topics.log_schemas(topic))
            partition = Partition(
                topic,
                p,
                self.broker_id,
                log_,
                self._update_isr,
                self._replica_lag_ms,
                on_change=lambda: self.changes.notify(key),
                meter=self._meter,
            )
            self.partitions[key] = partition
        return partition

    # ----------------------------------------------------------------- the ISR
    def shrink_isrs(self) -> None:
        """Drop lagging followers from the ISRs led here (only partitions led with followers)."""
        for key in list(self._led_with_followers):
            partition = self.partitions.get(key)
            try:
                if partition is not None:
                    partition.maybe_shrink_isr()
            except Exception:
                log.exception("ISR check failed")

    def _update_isr(self, partition: Partition, isr: list[int]) -> bool:
        """Write a new ISR for a partition this broker leads (compare-and-set on its state znode).
        False if the state changed meanwhile: then this broker re-reads it (and may learn it was
        deposed: the fence)."""
        state = partition.state
        if state is None or state.leader != self.broker_id or not self._host.zk_connected:
            return False
        if any(b not in self._host.live_brokers for b in set(isr) - set(state.isr)):
            return False  # only a registered broker joins (Kafka's KIP-841); its next fetch asks again
        new = PartitionState(state.leader, state.leader_epoch, isr)
        topic, p = partition.topic, partition.partition
        try:
            version = self._cluster.set_isr(topic, p, new, partition.state_version)
        except Exception:
            log.warning("could not update the ISR of %s-%s", topic, p, exc_info=True)
            return False
        if version is None:  # the state or the replica assignment changed: learn both again
            with contextlib.suppress(UnknownTopic, KazooException):  # gone: its watch drops it
                self.assign(topic, self._topics.reload(topic))
            self.read_state(topic, p)
            return False
        log.info("%s-%s: ISR %s -> %s", topic, p, state.isr, isr)
        self._apply_state(topic, p, new, version)
        if set(isr) - set(state.isr):
            self._notify_isr_expansion()
        return True

    def _notify_isr_expansion(self) -> None:
        """Tell the controller an ISR grew (it may move leadership back to a preferred replica, or
        finish a reassignment) instead of having it re-read every partition's state every round.
        Sent without waiting for ZooKeeper's answer: a broker rejoining hundreds of ISRs after a
        restart had its followers wait for two ZooKeeper writes (each an fsync) per partition in
        the fetch that rejoined it; the controller only needs to wake, and its periodic round
        catches up with a notification that failed."""
        zk, path = self._cluster.zk, self._cluster.layout.isr_change

        def sent(result: Any) -> None:
            try:
                result.get_nowait()
            except NoNodeError:  # the first notification of this cluster
                zk.create_async(path, b"", makepath=True)  # NodeExists from a racing broker: as good
            except Exception:
                log.warning("could not notify the controller of an ISR change", exc_info=True)

        try:
            zk.set_async(path, b"").rawlink(sent)
        except Exception:  # the connection is gone: the controller's round catches up
            log.warning("could not notify the controller of an ISR change", exc_info=True)

    def hand_over_leadership(self) -> None:
        """Controlled shutdown: each partition led here goes to another in-sync replica first."""
        live = self._host.live_brokers
        for (topic, p), partition in list(self.partitions.items()):
            state = partition.state
            if state is None or state.leader != self.broker_id:
                continue
            others = [b for b in state.isr if b != self.broker_id and b in live]
            if not others:
                continue
            new = PartitionState(others[0], state.leader_epoch + 1, [b for b in state.isr if b != self.broker_id])
            try:
                self._cluster.zk.set(
                    self._cluster.layout.partition_state(topic, p), new.to_json(), version=partition.state_version
                )
                partition.apply_state(new, partition.state_version + 1, partition.replicas)
            except (BadVersionError, NoNodeError):
                continue

    # ----------------------------------------------------------------- access
    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition:
        """A partition this broker leads (NotLeader or UnknownTopic otherwise). Writes also need a
        live ZooKeeper session (a broker cut off from ZooKeeper may have been replaced)."""
        meta = self._topics.topic_metadata(topic)
        if not 0 <= p < meta.partitions:
            raise UnknownTopic(f"topic {topic!r} has no partition {p} (it has {meta.partitions})")
        partition = self.partitions.get((topic, p))
        if partition is None:
            if self.broker_id not in meta.replicas[p]:
                raise NotLeader(f"broker {self.broker_id} holds no replica of {topic}-{p}")
            # Asked before the topic's watch reported it: take the topic's replicas now.
            self.assign(topic, meta)
            partition = self.partitions.get((topic, p))
            if partition is None:
                raise NotLeader(f"broker {self.broker_id} has not yet read the state of {topic}-{p}")
        if not partition.is_leader:
            state = partition.state
            raise NotLeader(
                f"broker {self.broker_id} does not lead {topic}-{p} (leader: {state.leader if state else None})"
            )
        if for_write and not self._host.zk_connected:
            raise NotLeader(f"broker {self.broker_id} has lost its ZooKeeper session; not accepting writes")
        return partition
