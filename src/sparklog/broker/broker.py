"""A broker process: registers in ZooKeeper, follows topic metadata and partition states by
watches, leads or follows each partition it holds a replica of, serves over Arrow Flight, runs a
controller candidate, retention and compaction, and shuts down cleanly on SIGTERM (handing its
leaderships over first)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.broker.access_control import AccessControl
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP
from sparklog.broker.cluster_requests import ClusterRequests
from sparklog.broker.controller import Controller
from sparklog.broker.group_members import GroupMembers
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.source import PartitionSource, TieringSource
from sparklog.broker.lake.tierer import LakeTiering, Tierer
from sparklog.broker.lake.union_read import UnionRead
from sparklog.broker.listeners import open_listeners
from sparklog.broker.log_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS, LogManager
from sparklog.broker.partition import Partition
from sparklog.broker.partition_state_cache import PartitionStateCache
from sparklog.broker.peer_clients import PeerClients
from sparklog.broker.replication.fetch_session import FULL_LOOK_S, FetchSessionCache
from sparklog.broker.replication.fetcher_manager import ReplicaFetcherManager
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.server import BrokerServer
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.coordination.lake_offsets import LakeOffsets
from sparklog.errors import InvalidRequest, NotLeader, UnknownTopic
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.broker_config import BrokerSecurity, Listener
from sparklog.security.replica_guard import UNKNOWN

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Broker:
    """One sparklog broker. ``start()`` returns once it serves and is registered; ``stop()`` hands
    leaderships over, flushes and closes every log (the next start skips recovery) and leaves
    ZooKeeper.

    ``session_timeout_s`` is the ZooKeeper session: a broker that dies is noticed after about
    that long (4 s is the smallest ZooKeeper allows with its default 2 s tick), which bounds
    failover time.
    """

    def __init__(
        self,
        broker_id: int,
        data_dir: str | Path,
        zookeeper: str,
        port: int = 0,
        host: str = "127.0.0.1",
        maintenance_interval_s: float = 5.0,
        session_timeout_s: float = 4.0,
        replica_lag_ms: int = 10_000,
        max_calls_per_ip: int = DEFAULT_MAX_CALLS_PER_IP,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        security: BrokerSecurity | None = None,
        lake_dir: str | None = None,
    ) -> None:
        """``security``: listeners, TLS and SASL (default: one plaintext listener on ``host``:``port``).
        ``lake_dir``: where lake-enabled topics' Delta tables are (``<lake_dir>/<topic>``; a
        directory or a URI deltalake writes); without it this broker tiers nothing."""
        self.broker_id = broker_id
        self.security = security or BrokerSecurity.plaintext(host, port)
        self.data_dir = Path(data_dir)
        self.max_calls_per_ip = max_calls_per_ip
        self.host = host
        self.requested_port = port
        self.zookeeper = zookeeper
        self.logs = LogManager(Path(data_dir), producer_id_expiration_ms=producer_id_expiration_ms)
        self.maintenance_interval_s = maintenance_interval_s
        self.session_timeout_s = session_timeout_s
        self.replica_lag_ms = replica_lag_ms
        self._port = port
        self.topics: dict[str, TopicMetadata] = {}  # known topics (watched, or read for a client first)
        self._watched_topics: set[str] = set()  # topics whose metadata znode this broker watches
        self._topic_watches: dict[str, int] = {}  # topic -> number of its current metadata watch
        self._watch_count = 0
        self.partitions: dict[TopicPartition, Partition] = {}
        self.changes = PartitionChanges()  # what a waiting replica fetch waits on
        self.fetch_sessions = FetchSessionCache()  # the followers' fetch sessions with this broker
        # how often a fetch session looks at its idle partitions (noting caught-up times)
        self.full_look_s = min(FULL_LOOK_S, replica_lag_ms / 10_000)
        self.peers = PeerClients(
            broker_id, self.security.inter_broker, lambda: self.live_brokers, self._read_live_brokers
        )  # Flight clients to the other brokers
        self.replication = ReplicaFetcherManager(broker_id, self.peers.leader_endpoint, self.read_state, fetching=False)
        self._watched: set[TopicPartition] = set()  # partitions whose state znode is watched
        self._state_paths: dict[str, TopicPartition] = {}  # state znode path -> its partition
        self._unwatched_states: set[TopicPartition] = set()  # a watch fired, reading it again failed
        self._led_with_followers: set[TopicPartition] = set()  # led here, with others in the ISR
        self._unread_topics: set[str] = set()  # notified, but reading their metadata failed: retried
        self._topic_lock = threading.RLock()
        self.value_schemas: dict[str, list[ValueSchema]] = {}  # typed topics: versions, oldest first
        self._schemas_read: set[str] = set()  # topics whose schema versions were read (typed or not)
        self.registry: SchemaRegistry | None = None
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.cluster: ClusterMetadata | None = None
        self.server: BrokerServer | None = None  # the first listener's
        self.servers: list[BrokerServer] = []
        self.endpoints: list[Listener] = []  # advertised, with the ports bound
        self.access: AccessControl | None = None  # replica guard, ACLs and quotas, once started
        self.cluster_requests: ClusterRequests | None = None  # clients' metadata, offsets and admin
        self.group_members: GroupMembers | None = None  # consumer group members hosted for clients
        self.controller: Controller | None = None
        self.lake_dir = lake_dir
        # consumer fetches below a lake-enabled partition's local log start read its Delta table
        self.union_read = UnionRead(LakeReader(lake_dir) if lake_dir is not None else None, self.value_schemas.get)
        self.tiering: LakeTiering | None = None
        self.zk_connected = False
        self._lock = threading.RLock()
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self._port

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Broker:
        self.cluster = ClusterMetadata(
            self.zookeeper, timeout=self.session_timeout_s, digest=self.security.zookeeper_digest
        ).start()
        self.registry = SchemaRegistry.from_cluster(self.cluster)
        self.zk_connected = True
        self.cluster.zk.add_listener(self._on_zk_state)
        states = PartitionStateCache(self.cluster.partition_states, self.cluster.layout.partition_state)
        self.cluster.zk.add_listener(states.on_connection_state)
        self.group_members = GroupMembers(
            self.cluster.zk, self.cluster.layout.group_partitioner, self.session_timeout_s
        )
        self.cluster_requests = ClusterRequests(
            self.cluster,
            self.registry,
            lambda: self.live_brokers,
            self.topic_metadata,
            states.states,
            self.schemas_of,
            self.group_members,
        )
        access = self.access = AccessControl(
            self.security, self.cluster.zk, self.cluster.layout, self._registered_principal
        )
        bound = open_listeners(
            self,
            self.security,
            self.cluster.zk,
            self.cluster.layout,
            self.data_dir,
            self.max_calls_per_ip,
            access.guard,
            access.authorizer,
            access.throttle,
        )  # serving from here on (serve() would only block, and take SIGTERM)
        self.servers = [server for _, server in bound]
        self.server = self.servers[0]
        self._port = bound[0][0].port
        ports = {listener.protocol: listener.port for listener, _ in bound}
        self.endpoints = [Listener(a.protocol, a.host, a.port or ports[a.protocol]) for a in self.security.advertised]
        ChildrenWatch(self.cluster.zk, self.cluster.layout.broker_ids, self._on_brokers)
        ChildrenWatch(self.cluster.zk, self.cluster.layout.topics, self._on_topics)
        threading.Thread(target=self._maintain, name="broker-maintenance", daemon=True).start()
        self._register()
        self.replication.start_fetching()  # not before: see ReplicaFetcherManager
        self.controller = Controller(self)
        self.controller.start()
        if self.lake_dir is not None:
            tierer = Tierer(DeltaTableWriter(self.lake_dir), LakeOffsets(self.cluster.zk, self.cluster.layout))
            self.tiering = LakeTiering(tierer, self._lake_sources).start()
        log.info("broker %s serving on %s:%s", self.broker_id, self.host, self.port)
        return self

    def _register(self) -> None:
        """Register in ZooKeeper; after a crash the previous session's node lingers until that
        session expires, so wait for it (a little longer than a session timeout)."""
        assert self.cluster is not None
        deadline = time.monotonic() + 2 * self.session_timeout_s + 10
        while True:
            try:
                first = self.endpoints[0]
                self.cluster.register_broker(
                    self.broker_id,
                    first.host,
                    first.port,
                    [(e.protocol, e.host, e.port) for e in self.endpoints],
                    self.security.broker_principal,
                )
                return
            except InvalidRequest:
                if time.monotonic() > deadline:
                    raise
                log.info("broker id %s is still registered by an old session; waiting", self.broker_id)
                time.sleep(0.25)

    def _on_zk_state(self, state: str) -> None:
        """Fencing: without a live ZooKeeper session this broker may already have been replaced
        as leader, so it refuses writes until it is connected again (and re-registers after an
        expired session)."""
        if state == KazooState.CONNECTED:
            if not self.zk_connected and not self._stopped.is_set():
                threading.Thread(target=self._after_reconnect, daemon=True).start()
        else:
            self.zk_connected = False
            log.warning("ZooKeeper session %s: refusing writes", state)

    def _after_reconnect(self) -> None:
        """Register again if the session expired, then re-read every replica's state (notifications
        may have been missed while disconnected) before accepting writes; retried until it works or
        the connection drops again (the next reconnect starts over)."""
        assert self.cluster is not None
        while not self._stopped.is_set() and self.cluster.zk.state == KazooState.CONNECTED:
            try:
                if not self.cluster.zk.exists(self.cluster.layout.broker(self.broker_id)):
                    self._register()
                self._read_unread_topics()
                self._unwatched_states.clear()
                self._read_states(set(self._watched))  # watches too (an expired session lost them)
                self.zk_connected = True
                log.info("ZooKeeper session back: accepting writes where still leader")
                return
            except Exception:
                log.exception("could not resume after reconnecting to ZooKeeper; retrying")
                self._stopped.wait(0.5)

    def stop(self, grace_s: float = 3.0) -> bool:
        """Hand leaderships over, stop serving, leave the cluster, close every log cleanly. Calls
        still running after ``grace_s`` (a producer's idle open stream) are abandoned: returns
        False then, and the process should exit (``main`` does)."""
        if self._stopped.is_set() and not self.servers:
            return True
        self._stopped.set()
        began = time.monotonic()
        log.info("broker %s stopping", self.broker_id)
        if self.tiering is not None:
            self.tiering.stop()
        if self.controller is not None:
            self.controller.stop()
        self._hand_over_leadership()
        log.info("broker %s: tiering and controller stopped, leaderships handed over", self.broker_id)
        if self.group_members is not None:
            self.group_members.close()  # members release before the session (and their locks) ends
        servers, self.servers, self.server = self.servers, [], None
        for server in servers:
            server.begin_shutdown()
        self.replication.stop()
        if self.cluster is not None:
            if self.access is not None:
                self.access.close()
            self.cluster.close()  # leave the cluster: clients and followers look elsewhere
        self.zk_connected = False
        finished = True
        closers = [threading.Thread(target=server.shutdown, name="flight-shutdown", daemon=True) for server in servers]
        for closer in closers:
            closer.start()
        deadline = time.monotonic() + grace_s
        for closer in closers:
            closer.join(max(0.0, deadline - time.monotonic()))
            finished = finished and not closer.is_alive()
        self.logs.close()
        self.peers.close()
        log.info("broker %s stopped in %.1f s", self.broker_id, time.monotonic() - began)
        return finished

    def _hand_over_leadership(self) -> None:
        """Controlled shutdown: each partition led here goes to another in-sync replica first."""
        if self.cluster is None or not self.zk_connected:
            return
        for (topic, p), partition in list(self.partitions.items()):
            state = partition.state
            if state is None or state.leader != self.broker_id:
                continue
            others = [b for b in state.isr if b != self.broker_id and b in self.live_brokers]
            if not others:
                continue
            new = PartitionState(others[0], state.leader_epoch + 1, [b for b in state.isr if b != self.broker_id])
            try:
                self.cluster.zk.set(
                    self.cluster.layout.partition_state(topic, p), new.to_json(), version=partition.state_version
                )
                partition.apply_state(new, partition.state_version + 1, partition.replicas)
            except (BadVersionError, NoNodeError):
                continue

    def run_until_signalled(self, wake: threading.Event | None = None) -> None:
        """Serve until SIGTERM or SIGINT (or ``wake`` is set by handlers already installed), then
        stop cleanly."""
        if wake is None:
            wake = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: wake.set())
        while not wake.wait(0.5):
            pass
        if not self.stop():
            logging.getLogger(__name__).info("abandoning open client streams; logs are closed")
        # Logs are closed and synced. Exit without interpreter finalization: Flight's and kazoo's
        # native threads may still call into Python, and finalizing under them can crash.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    # ----------------------------------------------------------------- metadata by watches
    def _on_brokers(self, _children: list[str]) -> bool | None:
        if self._stopped.is_set() or self.cluster is None:
            return False
        try:
            self.live_brokers = self.cluster.brokers()
        except Exception:  # session trouble; the next change reads again
            log.debug("could not read brokers", exc_info=True)
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False
        for gone in self._watched_topics - set(children):
            self._watched_topics.discard(gone)
            self._topic_watches.pop(gone, None)  # its watch ends at its next notification
            self._drop_topic(gone)
        # not ``self.topics``: a client may have made this broker read a topic before this
        # notification arrived, and the topic must be watched all the same. A topic still being
        # created is watched too (its metadata znode), and taken when its creation is complete.
        for name in set(children) - self._watched_topics:
            self._watched_topics.add(name)
            self._watch_topic(name)
        return None

    def _topic_gone(self, name: str) -> None:
        """The topic node was deleted: drop the topic now (the topics' children notification may
        come later, or never show the name missing: deleted and created again in between, as
        when a create removes what a failed creation left), and follow a node of that name that
        exists again."""
        self._watched_topics.discard(name)
        self._topic_watches.pop(name, None)
        self._drop_topic(name)
        assert self.cluster is not None
        try:
            again = self.cluster.zk.exists(self.cluster.layout.topic(name)) is not None
        except KazooException:
            again = False  # the topics' children watch brings it back after reconnecting
        if again and name not in self._watched_topics:
            self._watched_topics.add(name)
            self._watch_topic(name)

    def _drop_topic(self, name: str) -> None:
        """Forget a topic that is gone or being deleted: its replicas stop, its logs are deleted."""
        with self._topic_lock:
            self.topics.pop(name, None)
            self._schemas_read.discard(name)
            self._unread_topics.discard(name)
            with self._lock:
                self._watched = {k for k in self._watched if k[0] != name}
                self._state_paths = {path: k for path, k in self._state_paths.items() if k[0] != name}
                for key in [k for k in self.partitions if k[0] == name]:
                    self.replication.unfollow(key)
                    self.partitions.pop(key, None)
        self.logs.delete_topic(name)

    def _watch_topic(self, name: str) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        self._watch_count += 1
        generation = self._topic_watches[name] = self._watch_count

        def on_topic(data: bytes | None, _stat: object) -> bool | None:
            if self._stopped.is_set() or self._topic_watches.get(name) != generation:
                return False  # stopping, or a newer watch follows this name
            if data is None:
                self._topic_gone(name)
                return False
            return None if self._refresh_topic(name) else False

        def on_schemas(children: list[str]) -> bool | None:
            if self._stopped.is_set() or name not in self.topics and not cluster.zk.exists(cluster.layout.topic(name)):
                return False
            self._load_value_schemas(name)
            return None

        self._load_value_schemas(name)
        DataWatch(cluster.zk, cluster.layout.topic(name), on_topic)
        if cluster.zk.exists(cluster.layout.schemas(name)):
            ChildrenWatch(cluster.zk, cluster.layout.schemas(name), on_schemas)

    def _refresh_topic(self, name: str) -> bool:
        """Read a topic's metadata and take (or drop) this broker's replicas of it; False if the
        topic node is gone. A topic still being created is left alone (its last write, which
        makes it complete, is watched); one being deleted is dropped at once. A read that fails (a
        ZooKeeper connection blip) is not lost: the topic is read again after reconnecting and by
        the maintenance loop."""
        assert self.cluster is not None
        try:
            try:
                meta, status = self.cluster.topic(name), ""
            except UnknownTopic:  # gone, or not a topic yet (or any more): which?
                meta, status = self.cluster.read_topic(name)
        except UnknownTopic:
            self._unread_topics.discard(name)
            return False
        except KazooException as exc:
            log.warning("could not read topic %s (%r); retrying", name, exc)
            self._unread_topics.add(name)
            return True
        self._unread_topics.discard(name)
        if status:
            if name in self.topics or any(k[0] == name for k in self._watched):
                log.info("topic %s is being %s: dropping its replicas", name, status)
                self._drop_topic(name)
            return True
        with self._topic_lock:  # the watch thread and the maintenance loop may both get here
            self.topics[name] = meta
            config = meta.config
            for p in range(meta.partitions):
                held = self.partitions.get((name, p))
                if held is not None and held.log.config != config:
                    held.log.config = config  # altered: retention, lake.enabled... apply now
            fresh: list[int] = []
            for p, replicas in enumerate(meta.replicas):
                key = (name, p)
                if self.broker_id in replicas:
                    if key not in self._watched:
                        self._watched.add(key)
                        fresh.append(p)
                    elif key in self.partitions:
                        self.partitions[key].replicas = list(replicas)
                elif key in self._watched:
                    self._drop_replica(name, p)  # moved away from this broker
            if fresh:
                try:
                    self._watch_states(name, fresh)
                except KazooException as exc:
                    log.warning("could not watch the partitions of %s (%r); retrying", name, exc)
                    with self._lock:
                        self._watched.difference_update((name, p) for p in fresh if (name, p) not in self.partitions)
                    self._unread_topics.add(name)
        return True

    def _read_unread_topics(self) -> None:
        for name in list(self._unread_topics):
            self._refresh_topic(name)

    def _load_value_schemas(self, topic: str) -> None:
        """Read a typed topic's schema versions (registered before its logs are opened)."""
        assert self.registry is not None
        try:
            versions = self.registry.all(topic)
        except Exception:  # deleted meanwhile, or no schemas node: untyped
            versions = []
        self._schemas_read.add(topic)
        if versions:
            self.value_schemas[topic] = versions
            self.logs.set_value_schemas(topic, versions)
        else:
            self.value_schemas.pop(topic, None)

    def _watch_states(self, topic: str, partitions: list[int]) -> None:
        """Read the states of partitions of a topic (one pipelined ZooKeeper round, not a round
        trip each), watch them, and take the roles they give this broker. One watcher function
        serves every state node (``_on_state_event``), so reading a node again never adds a watch."""
        assert self.cluster is not None
        for p in partitions:
            self._state_paths[self.cluster.layout.partition_state(topic, p)] = (topic, p)
        for p, (state, version) in self.cluster.partition_states(topic, partitions, self._on_state_event).items():
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

    def _drop_replica(self, topic: str, p: int) -> None:
        """This broker no longer holds a replica of the partition: stop following, delete it."""
        with self._lock:
            self._watched.discard((topic, p))
            self.replication.unfollow((topic, p))
            self.partitions.pop((topic, p), None)
        self.logs.delete_partition(topic, p)
        log.info("%s-%s moved away from broker %s: local replica deleted", topic, p, self.broker_id)

    def read_state(self, topic: str, p: int) -> None:
        """Read a partition's state from ZooKeeper and take the role it gives this broker (the watch
        delivers changes; this heals a notification that never arrived)."""
        assert self.cluster is not None
        path = self.cluster.layout.partition_state(topic, p)
        self._state_paths[path] = (topic, p)
        try:
            data, stat = self.cluster.zk.get(path, watch=self._on_state_event)
        except NoNodeError:
            return  # the topic is being deleted
        self._apply_state(topic, p, PartitionState.from_json(data), stat.version)

    def _apply_state(self, topic: str, p: int, state: PartitionState, version: int) -> None:
        """Take the leader or follower role a partition state gives this broker."""
        with self._lock:
            if self._stopped.is_set():
                return
            meta = self.topics.get(topic)
            if meta is None or self.broker_id not in meta.replicas[p]:
                return  # dropped meanwhile (being deleted), or not a replica here
            partition = self._partition(topic, p)
            if version < partition.state_version:
                return  # an older notification arriving late
            before = partition.state
            partition.apply_state(state, version, self.topics[topic].replicas[p])
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

    def _lake_sources(self) -> list[TieringSource]:
        """The partitions of lake-enabled topics held here, for the tiering thread (they may tier
        only while this broker has its ZooKeeper session: the leader's fence)."""
        writable = self.zk_connected and not self._stopped.is_set()
        return [
            PartitionSource(partition, writable, self.value_schemas.get(partition.topic, ()))
            for partition in list(self.partitions.values())
            if partition.log.config.lake_enabled and not partition.log.closed
        ]

    def _partition(self, topic: str, p: int) -> Partition:
        key = (topic, p)
        partition = self.partitions.get(key)
        if partition is None:
            meta = self.topic_metadata(topic)
            if topic not in self._schemas_read:  # a topic read for a client before its watch
                self._load_value_schemas(topic)
            log_ = self.logs.get(topic, p, meta.config, self.value_schemas.get(topic, ()))
            partition = Partition(
                topic,
                p,
                self.broker_id,
                log_,
                self._update_isr,
                self.replica_lag_ms,
                on_change=lambda: self.changes.notify(key),
            )
            self.partitions[key] = partition
        return partition

    def _update_isr(self, partition: Partition, isr: list[int]) -> bool:
        """Write a new ISR for a partition this broker leads (compare-and-set on its state znode).
        False if the state changed meanwhile: then this broker re-reads it (and may learn it was
        deposed: the fence)."""
        assert self.cluster is not None
        state = partition.state
        if state is None or state.leader != self.broker_id or not self.zk_connected:
            return False
        if any(b not in self.live_brokers for b in set(isr) - set(state.isr)):
            return False  # only a registered broker joins (Kafka's KIP-841); its next fetch asks again
        new = PartitionState(state.leader, state.leader_epoch, isr)
        try:
            version = self.cluster.set_isr(partition.topic, partition.partition, new, partition.state_version)
        except Exception:
            log.warning("could not update the ISR of %s-%s", partition.topic, partition.partition, exc_info=True)
            return False
        if version is None:  # the state or the replica assignment changed: learn both again
            self._refresh_topic(partition.topic)
            self.read_state(partition.topic, partition.partition)
            return False
        log.info("%s-%s: ISR %s -> %s", partition.topic, partition.partition, state.isr, isr)
        self._apply_state(partition.topic, partition.partition, new, version)
        if set(isr) - set(state.isr):
            self._notify_isr_expansion()
        return True

    def _notify_isr_expansion(self) -> None:
        """Tell the controller an ISR grew (it may move leadership back to a preferred replica, or
        finish a reassignment) instead of having it re-read every partition's state every round."""
        assert self.cluster is not None
        try:
            self.cluster.zk.set(self.cluster.layout.isr_change, b"")
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.cluster.zk.create(self.cluster.layout.isr_change, b"", makepath=True)
        except Exception:  # the controller's slow periodic round catches up
            log.warning("could not notify the controller of an ISR change", exc_info=True)

    # ----------------------------------------------------------------- partition access
    def topic_metadata(self, topic: str) -> TopicMetadata:
        meta = self.topics.get(topic)
        if meta is None and self.cluster is not None:  # a watch may lag behind a fresh topic
            meta = self.topics[topic] = self.cluster.topic(topic)
        if meta is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return meta

    def schemas_of(self, topic: str) -> list[ValueSchema]:
        """A topic's value schema versions, oldest first ([] for a plain topic): as the watches keep
        them, or read now for a topic whose watch has not read them yet."""
        if topic in self._schemas_read:
            return list(self.value_schemas.get(topic, ()))
        assert self.registry is not None
        return self.registry.all(topic)

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition:
        """A partition this broker leads (NotLeader or UnknownTopic otherwise). Writes also need a
        live ZooKeeper session (a broker cut off from ZooKeeper may have been replaced)."""
        meta = self.topic_metadata(topic)
        if not 0 <= p < meta.partitions:
            raise UnknownTopic(f"topic {topic!r} has no partition {p} (it has {meta.partitions})")
        partition = self.partitions.get((topic, p))
        if partition is None:
            if self.broker_id not in meta.replicas[p]:
                raise NotLeader(f"broker {self.broker_id} holds no replica of {topic}-{p}")
            self.read_state(topic, p)
            partition = self._partition(topic, p)
        if not partition.is_leader:
            state = partition.state
            raise NotLeader(
                f"broker {self.broker_id} does not lead {topic}-{p} (leader: {state.leader if state else None})"
            )
        if for_write and not self.zk_connected:
            raise NotLeader(f"broker {self.broker_id} has lost its ZooKeeper session; not accepting writes")
        return partition

    # ----------------------------------------------------------------- talking to other brokers
    @property
    def fetchers(self) -> dict[TopicPartition, int]:
        """Each partition this broker follows, and the leader it follows it from."""
        return self.replication.followed()

    def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        if self.cluster is not None:
            self.live_brokers = self.cluster.brokers()
        return self.live_brokers

    def _registered_principal(self, broker_id: int) -> object:
        """The principal broker ``broker_id`` registered (None: it does not authenticate), or
        :data:`UNKNOWN` if it is not live here (yet)."""
        info = self.live_brokers.get(broker_id)
        return UNKNOWN if info is None else info.principal

    def _maintain(self) -> None:
        tick = 0
        while not self._stopped.wait(0.5):
            if self.zk_connected:
                self._read_unread_topics()
                with self._lock:  # watched, yet no state arrived (or its watch could not be set again)
                    missing = (self._watched - set(self.partitions)) | (self._unwatched_states & self._watched)
                    self._unwatched_states.clear()
                if missing:
                    try:
                        self._read_states(missing)
                    except Exception:
                        log.warning("could not read the states of %d partitions", len(missing), exc_info=True)
                        with self._lock:
                            self._unwatched_states |= missing
            # only a leader with followers in its ISR can shrink it (not every partition, every round)
            for key in list(self._led_with_followers):
                partition = self.partitions.get(key)
                try:
                    if partition is not None:
                        partition.maybe_shrink_isr()
                except Exception:
                    log.exception("ISR check failed")
            tick += 1
            if tick * 0.5 >= self.maintenance_interval_s:
                tick = 0
                try:
                    self.logs.maintain()
                except Exception:  # a maintenance failure must not kill the broker
                    log.exception("log maintenance failed")
