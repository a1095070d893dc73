"""A broker process: the shell that wires a broker's parts and runs their lifecycle.

- :class:`~sparklog.broker.topic_catalog.TopicCatalog` and
  :class:`~sparklog.broker.topic_watcher.TopicWatcher`: what this broker knows of topics, kept by
  ZooKeeper watches;
- :class:`~sparklog.broker.replica_manager.ReplicaManager`: the replicas held here, their roles,
  their ISRs, and the fetchers that follow other leaders;
- :class:`~sparklog.broker.peer_clients.PeerClients`: Flight clients to the other brokers;
- :class:`~sparklog.broker.maintenance.MaintenanceLoop`: repairs, retention and compaction;
- the Flight listeners (:class:`~sparklog.broker.server.BrokerServer`), the controller candidate and
  lake tiering.

The broker itself registers in ZooKeeper, fences writes while its session is away, and shuts down
cleanly on SIGTERM (handing its leaderships over first)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.broker.access_control import AccessControl
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP
from sparklog.broker.cluster_requests import ClusterRequests
from sparklog.broker.controller import Controller
from sparklog.broker.group_lag import GroupLagCollector
from sparklog.broker.group_members import GroupMembers
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.source import PartitionSource, TieringSource
from sparklog.broker.lake.tierer import LakeTiering, Tierer
from sparklog.broker.lake.tiering_lag import TieringLagCollector
from sparklog.broker.lake.union_read import UnionRead
from sparklog.broker.listeners import open_listeners
from sparklog.broker.log_manager import DEFAULT_PRODUCER_ID_EXPIRATION_MS, LogManager
from sparklog.broker.maintenance import MaintenanceLoop
from sparklog.broker.metrics import BrokerMetrics
from sparklog.broker.partition import Partition
from sparklog.broker.partition_state_cache import PartitionStateCache
from sparklog.broker.peer_clients import PeerClients
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.replication.fetch_session import FULL_LOOK_S, FetchSessionCache
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.server import BrokerServer
from sparklog.broker.topic_catalog import TopicCatalog
from sparklog.broker.topic_watcher import TopicWatcher
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata
from sparklog.coordination.lake_offsets import LakeOffsets
from sparklog.coordination.ports import port_is_open
from sparklog.dir_lock import DirLock
from sparklog.errors import BrokerIdInUse, InvalidRequest
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.broker_config import BrokerSecurity, Listener
from sparklog.security.replica_guard import UNKNOWN
from sparklog.stop_signal import StopSignal

if TYPE_CHECKING:
    from sparklog.kafka.server import KafkaListener

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ZOOKEEPER_PROBE_TIMEOUT_S = 2.0  # a metrics scrape waits this long for its ZooKeeper round trip


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
        kafka_port: int | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """``metrics_port``: serve Prometheus metrics over HTTP on ``host`` at that port (0: any free
        one), advertised in its registration; None: no endpoint.
        ``security``: listeners, TLS and SASL (default: one plaintext listener on ``host``:``port``).
        ``kafka_port``: a plaintext Kafka-protocol listener on ``host`` at that port (0: any free
        one) when ``security`` configures none (``kafka.listeners``); None: none.
        ``lake_dir``: where lake-enabled topics' Delta tables are (``<lake_dir>/<topic>``; a
        directory or a URI deltalake writes); without it this broker tiers nothing."""
        self.broker_id = broker_id
        self.security = (security or BrokerSecurity.plaintext(host, port)).with_kafka_port(host, kafka_port)
        self.data_dir = Path(data_dir)
        self.max_calls_per_ip = max_calls_per_ip
        self.host = host
        self.zookeeper = zookeeper
        self.maintenance_interval_s = maintenance_interval_s
        self.session_timeout_s = session_timeout_s
        self._port = port
        self.metrics_port = metrics_port
        self.metrics = BrokerMetrics(broker_id, self)  # counted always, served only with a port
        self._stopped = threading.Event()
        self.zk_connected = False
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.cluster = ClusterMetadata(zookeeper, timeout=session_timeout_s, digest=self.security.zookeeper_digest)
        self.registry = SchemaRegistry.from_cluster(self.cluster)
        self.logs = LogManager(
            self.data_dir, producer_id_expiration_ms=producer_id_expiration_ms, on_flush=self.metrics.log_flushed
        )
        self.catalog = TopicCatalog(self.cluster, self.registry, self.logs)
        self.peers = PeerClients(
            broker_id, self.security.inter_broker, lambda: self.live_brokers, self._read_live_brokers
        )  # Flight clients to the other brokers
        # the consumer groups' lag, scraped from whichever broker is the controller
        self.metrics.registry.register(GroupLagCollector(self.cluster, self._high_watermarks, self._is_controller))
        self.replicas = ReplicaManager(
            broker_id,
            self.cluster,
            self.catalog,
            self.logs,
            self,
            self.peers.leader_endpoint,
            replica_lag_ms,
            self._stopped,
            self.metrics,
        )
        self.topic_watcher = TopicWatcher(self.cluster, self.catalog, self.replicas, self._stopped)
        # how often a fetch session looks at its idle partitions (noting caught-up times)
        self.full_look_s = min(FULL_LOOK_S, replica_lag_ms / 10_000)
        # consumer fetches below a lake-enabled partition's local log start read its Delta table
        lake = LakeReader(lake_dir) if lake_dir is not None else None
        self.union_read = UnionRead(lake, self.catalog.value_schemas.get)
        self.lake_dir = lake_dir
        self.tiering: LakeTiering | None = None
        self.server: BrokerServer | None = None  # the first listener's
        self.servers: list[BrokerServer] = []
        self.endpoints: list[Listener] = []  # advertised, with the ports bound
        self.kafka_listeners: list[KafkaListener] = []  # Kafka's wire protocol (kafka.listeners)
        self.kafka_endpoints: list[Listener] = []  # advertised, with the ports bound
        self.access: AccessControl | None = None  # replica guard, ACLs and quotas, once started
        self.cluster_requests: ClusterRequests | None = None  # clients' metadata, offsets and admin
        self.group_members: GroupMembers | None = None  # consumer group members hosted for clients
        self.controller: Controller | None = None
        self._started = False
        self._dir_lock = DirLock(self.data_dir, f"broker {broker_id}'s log dir")

    @property
    def port(self) -> int:
        return self._port

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes this broker (None: it serves no metrics)."""
        return self.metrics.url(self.host)

    # ----------------------------------------------------------------- what the metrics read
    def controller_state(self) -> tuple[bool, int]:
        """Whether this broker is the active controller, and the partitions it last found offline."""
        controller = self.controller
        if controller is None:
            return False, 0
        return controller.active, controller.offline_partitions

    def zookeeper_state(self) -> str:
        """Its ZooKeeper connection's state: CONNECTED, SUSPENDED or LOST."""
        return str(self.cluster.zk.state) if self._started else "LOST"

    def zookeeper_round_trip_s(self) -> float | None:
        """One ZooKeeper read's round trip now (None: not connected, or no answer in time)."""
        if not self._started or not self.zk_connected:
            return None
        began = time.monotonic()
        try:
            self.cluster.zk.exists_async(self.cluster.layout.broker_ids).get(timeout=ZOOKEEPER_PROBE_TIMEOUT_S)
        except Exception:  # a timeout, a lost connection: no figure this scrape
            return None
        return time.monotonic() - began

    def _is_controller(self) -> bool:
        return self.controller_state()[0]

    def _high_watermarks(self, leader: int, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks for the group lag: of partitions led here read here, others' asked of
        their leader (those it does not lead any more left out)."""
        if leader != self.broker_id:
            return self.peers.high_watermarks(leader, partitions)
        held = [self.replicas.partitions.get(tp) for tp in partitions]
        return {tp: p.high_watermark for tp, p in zip(partitions, held, strict=True) if p is not None and p.is_leader}

    # ----------------------------------------------------------------- what the Flight service reads
    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        return self.replicas.partitions

    @property
    def changes(self) -> PartitionChanges:
        return self.replicas.changes

    @property
    def fetch_sessions(self) -> FetchSessionCache:
        return self.replicas.fetch_sessions

    @property
    def value_schemas(self) -> dict[str, list[ValueSchema]]:
        return self.catalog.value_schemas

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition:
        return self.replicas.leader_partition(topic, p, for_write)

    @property
    def fetchers(self) -> dict[TopicPartition, int]:
        """Each partition this broker follows, and the leader it follows it from."""
        return self.replicas.replication.followed()

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Broker:
        self._dir_lock.acquire()  # before anything reads or writes the log dir: one broker per dir
        try:
            return self._start()
        except BaseException:
            if self._started:  # listening, connected: close what was opened (a refused registration)
                with contextlib.suppress(Exception):
                    self.stop(grace_s=0)
            self._dir_lock.release()
            raise

    def _start(self) -> Broker:
        cluster = self.cluster.start()
        self._started = True
        self.zk_connected = True
        cluster.zk.add_listener(self._on_zk_state)
        states = PartitionStateCache(cluster.partition_states, cluster.layout.partition_state)
        cluster.zk.add_listener(states.on_connection_state)
        self.group_members = GroupMembers(cluster.zk, cluster.layout.group_partitioner, self.session_timeout_s)
        self.cluster_requests = ClusterRequests(
            cluster,
            self.registry,
            lambda: self.live_brokers,
            self.catalog.topic_metadata,
            states.states,
            self.catalog.schemas_of,
            self.group_members,
        )
        access = self.access = AccessControl(self.security, cluster.zk, cluster.layout, self._registered_principal)
        bound = open_listeners(
            self,
            self.security,
            cluster.zk,
            cluster.layout,
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
        self._open_kafka_listeners(cluster, states, access)
        if self.metrics_port is not None:
            self.metrics.serve(self.host, self.metrics_port)
        # the live brokers before registering (the watch's first read is synchronous), this broker
        # with them as it registers: clients find it registered only once its metadata lists it
        ChildrenWatch(cluster.zk, cluster.layout.broker_ids, self._on_brokers)
        self._register()  # before taking any role: a second broker with this id stops here
        self.topic_watcher.start()
        MaintenanceLoop(
            self._stopped,
            every_tick=[self._heal_metadata, self.replicas.shrink_isrs],
            every_interval=[self.logs.maintain],
            interval_s=self.maintenance_interval_s,
        ).start()
        self.replicas.replication.start_fetching()  # not before: see ReplicaFetcherManager
        self.controller = Controller(self)
        self.controller.start()
        if self.lake_dir is not None:
            tierer = Tierer(DeltaTableWriter(self.lake_dir), LakeOffsets(cluster.zk, cluster.layout))
            self.tiering = LakeTiering(tierer, self._lake_sources).start()
            self.metrics.registry.register(TieringLagCollector(tierer.lag))
        log.info("broker %s serving on %s:%s", self.broker_id, self.host, self.port)
        return self

    def _open_kafka_listeners(
        self, cluster: ClusterMetadata, states: PartitionStateCache, access: AccessControl
    ) -> None:
        """Bind the Kafka-protocol listeners (``kafka.listeners``), serving from here on."""
        if not self.security.kafka_listeners:
            return
        # here, not at the top: a broker without a Kafka listener never imports kafka-python, whose
        # import (message classes built from Kafka's JSON schemas) is a third of a broker's start-up
        from sparklog.broker.kafka_gateway import KafkaGateway
        from sparklog.broker.kafka_listeners import open_kafka_listeners

        gateway = KafkaGateway(
            self.broker_id,
            self.replicas.leader_partition,
            self.catalog.value_schemas,
            self.union_read,
            self.replicas.changes,
            cluster,
            lambda: self.live_brokers,
            self.catalog.topic_metadata,
            states.states,
            self.data_dir,
            lambda: self.replicas.partitions,
            self.metrics,
        )
        self.kafka_listeners, self.kafka_endpoints = open_kafka_listeners(
            gateway, self.security, access, cluster.zk, cluster.layout, self.max_calls_per_ip, self.metrics
        )

    def _register(self) -> None:
        """Register in ZooKeeper. After a crash the previous session's node lingers until that
        session expires, so wait for it (a little longer than a session timeout); but a node whose
        broker still listens is another live broker with this id: refused at once.

        The registration goes into ``live_brokers`` at once, not when the watch on the brokers
        reads it back: a client that finds this broker registered asks it for metadata at once,
        and an answer without the brokers (read a few ZooKeeper round trips later) left
        librdkafka's admin client waiting for a controller it could not find until its next
        metadata refresh, minutes away (a CreateTopics right after LocalCluster.start() timed
        out in 6 of 100 runs)."""
        deadline = time.monotonic() + 2 * self.session_timeout_s + 10
        first = self.endpoints[0]
        while True:
            try:
                info = self.cluster.register_broker(
                    self.broker_id,
                    first.host,
                    first.port,
                    [(e.protocol, e.host, e.port) for e in self.endpoints],
                    self.security.broker_principal,
                    [(e.protocol, e.host, e.port) for e in self.kafka_endpoints],
                    self.metrics_url,
                )
                self.live_brokers = {**self.live_brokers, self.broker_id: info}
                return
            except InvalidRequest:
                holder = self.cluster.brokers().get(self.broker_id)
                elsewhere = holder is not None and (holder.host, holder.port) != (first.host, first.port)
                if holder is not None and elsewhere and port_is_open(holder.host, holder.port):
                    raise BrokerIdInUse(
                        f"broker id {self.broker_id} is registered by a live broker listening on "
                        f"{holder.host}:{holder.port}; give this broker another --id"
                    ) from None
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
        while not self._stopped.is_set() and self.cluster.zk.state == KazooState.CONNECTED:
            try:
                if not self.cluster.zk.exists(self.cluster.layout.broker(self.broker_id)):
                    self._register()
                self.topic_watcher.read_unread()
                self.replicas.reread_all()  # watches too (an expired session lost them)
                self.zk_connected = True
                log.info("ZooKeeper session back: accepting writes where still leader")
                return
            except Exception:
                log.exception("could not resume after reconnecting to ZooKeeper; retrying")
                self._stopped.wait(0.5)

    def _heal_metadata(self) -> None:
        """Re-read what a ZooKeeper blip left unread: topics, and partition states (maintenance)."""
        if self.zk_connected:
            self.topic_watcher.read_unread()
            self.replicas.heal()

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
        if self._started and self.zk_connected:
            self.replicas.hand_over_leadership()
        log.info("broker %s: tiering and controller stopped, leaderships handed over", self.broker_id)
        if self.group_members is not None:
            self.group_members.close()  # members release before the session (and their locks) ends
        servers, self.servers, self.server = self.servers, [], None
        for server in servers:
            server.begin_shutdown()
        kafka_listeners, self.kafka_listeners = self.kafka_listeners, []
        for kafka in kafka_listeners:
            kafka.stop(grace_s=min(1.0, grace_s))
        self.replicas.replication.stop()
        if self._started:
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
        self.metrics.close()
        self._dir_lock.release()
        log.info("broker %s stopped in %.1f s", self.broker_id, time.monotonic() - began)
        return finished

    def run_until_signalled(self, stop: StopSignal | None = None) -> None:
        """Serve until SIGTERM or SIGINT (``stop``: its handlers, installed already), then stop
        cleanly."""
        if stop is None:
            stop = StopSignal()
        while not stop.wait(0.5):
            pass
        if not self.stop():
            logging.getLogger(__name__).info("abandoning open client streams; logs are closed")
        # Logs are closed and synced. Exit without interpreter finalization: Flight's and kazoo's
        # native threads may still call into Python, and finalizing under them can crash.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    # ----------------------------------------------------------------- the other brokers
    def _on_brokers(self, _children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False
        try:
            self.live_brokers = self.cluster.brokers()
        except Exception:  # session trouble; the next change reads again
            log.debug("could not read brokers", exc_info=True)
        return None

    def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        if self._started:
            self.live_brokers = self.cluster.brokers()
        return self.live_brokers

    def _registered_principal(self, broker_id: int) -> object:
        """The principal broker ``broker_id`` registered (None: it does not authenticate), or
        :data:`UNKNOWN` if it is not live here (yet)."""
        info = self.live_brokers.get(broker_id)
        return UNKNOWN if info is None else info.principal

    def _lake_sources(self) -> list[TieringSource]:
        """The partitions of lake-enabled topics held here, for the tiering thread (they may tier
        only while this broker has its ZooKeeper session: the leader's fence)."""
        writable = self.zk_connected and not self._stopped.is_set()
        return [
            PartitionSource(partition, writable, self.catalog.value_schemas.get(partition.topic, ()))
            for partition in list(self.partitions.values())
            if partition.log.config.lake_enabled and not partition.log.closed
        ]
