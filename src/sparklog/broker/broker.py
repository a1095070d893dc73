"""A broker process: registers in ZooKeeper, follows topic metadata by watches, serves its
partitions over Arrow Flight, runs retention and compaction, and shuts down cleanly on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.broker.log import PartitionLog
from sparklog.broker.log_manager import LogManager
from sparklog.broker.server import BrokerServer
from sparklog.coordination.cluster import ClusterMetadata, PartitionState, TopicMetadata
from sparklog.errors import InvalidRequest, NotLeader, UnknownTopic

log = logging.getLogger(__name__)


class Broker:
    """One sparklog broker. ``start()`` returns once it serves and is registered; ``stop()`` flushes
    and closes every log (the next start skips recovery) and leaves ZooKeeper."""

    def __init__(
        self,
        broker_id: int,
        data_dir: str | Path,
        zookeeper: str,
        port: int = 0,
        host: str = "127.0.0.1",
        maintenance_interval_s: float = 5.0,
        session_timeout_s: float = 4.0,
    ) -> None:
        self.broker_id = broker_id
        self.host = host
        self.requested_port = port
        self.zookeeper = zookeeper
        self.logs = LogManager(Path(data_dir))
        self.maintenance_interval_s = maintenance_interval_s
        self.session_timeout_s = session_timeout_s
        self._port = port
        self.topics: dict[str, TopicMetadata] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.cluster: ClusterMetadata | None = None
        self.server: BrokerServer | None = None
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self._port

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Broker:
        self.cluster = ClusterMetadata(self.zookeeper, timeout=self.session_timeout_s).start()
        self.server = BrokerServer(self, f"grpc+tcp://{self.host}:{self.requested_port}")
        self._port = self.server.port
        serve = threading.Thread(target=self.server.serve, name=f"broker-{self.broker_id}-flight", daemon=True)
        serve.start()
        ChildrenWatch(self.cluster.zk, self.cluster.layout.topics, self._on_topics)
        maintenance = threading.Thread(target=self._maintain, name="broker-maintenance", daemon=True)
        maintenance.start()
        self._threads += [serve, maintenance]
        self._register()
        log.info("broker %s serving on %s:%s", self.broker_id, self.host, self.port)
        return self

    def _register(self) -> None:
        """Register in ZooKeeper; after a crash the previous session's node lingers until that
        session expires, so wait for it (a little longer than a session timeout)."""
        assert self.cluster is not None
        deadline = time.monotonic() + 2 * self.session_timeout_s + 10
        while True:
            try:
                self.cluster.register_broker(self.broker_id, self.host, self.port)
                return
            except InvalidRequest:
                if time.monotonic() > deadline:
                    raise
                log.info(
                    "broker id %s is still registered by a previous session; waiting for it to expire", self.broker_id
                )
                time.sleep(0.25)

    def stop(self, grace_s: float = 3.0) -> bool:
        """Stop serving, leave the cluster, close every log cleanly. Calls still running after
        ``grace_s`` (a producer's idle open stream) are abandoned: returns False then, and the
        process should exit (``main`` does)."""
        if self._stopped.is_set() and self.server is None:
            return True
        self._stopped.set()
        server, self.server = self.server, None
        if server is not None:
            server.begin_shutdown()
        if self.cluster is not None:
            self.cluster.close()  # leave the cluster first: clients look elsewhere
        finished = True
        if server is not None:
            closer = threading.Thread(target=server.shutdown, name="flight-shutdown", daemon=True)
            closer.start()
            closer.join(grace_s)
            finished = not closer.is_alive()
        self.logs.close()
        return finished

    def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop cleanly."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stopped.set())
        while not self._stopped.wait(0.5):
            pass
        self._stopped.clear()
        if not self.stop():
            logging.getLogger(__name__).info("abandoning open client streams; logs are closed")
            os._exit(0)

    # ----------------------------------------------------------------- metadata by watches
    def _on_topics(self, children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False
        for gone in set(self.topics) - set(children):
            self.topics.pop(gone, None)
            for key in [k for k in self.states if k[0] == gone]:
                self.states.pop(key, None)
            self.logs.delete_topic(gone)
        for name in set(children) - set(self.topics):
            self._watch_topic(name)
        return None

    def _watch_topic(self, name: str) -> None:
        assert self.cluster is not None
        cluster = self.cluster

        def on_topic(data: bytes | None, _stat: object) -> bool | None:
            if data is None or self._stopped.is_set():
                return False
            try:
                meta = cluster.topic(name)
            except UnknownTopic:
                return False
            first = name not in self.topics
            self.topics[name] = meta
            if first:
                for p, replicas in enumerate(meta.replicas):
                    if self.broker_id in replicas:
                        self._watch_state(name, p)
            return None

        DataWatch(cluster.zk, cluster.layout.topic(name), on_topic)

    def _watch_state(self, topic: str, partition: int) -> None:
        assert self.cluster is not None

        def on_state(data: bytes | None, _stat: object) -> bool | None:
            if data is None or self._stopped.is_set():
                self.states.pop((topic, partition), None)
                return False
            self.states[(topic, partition)] = PartitionState.from_json(data)
            return None

        DataWatch(self.cluster.zk, self.cluster.layout.partition_state(topic, partition), on_state)

    # ----------------------------------------------------------------- partition access
    def topic_metadata(self, topic: str) -> TopicMetadata:
        meta = self.topics.get(topic)
        if meta is None and self.cluster is not None:  # a watch may lag behind a fresh topic
            meta = self.cluster.topic(topic)
        if meta is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return meta

    def leader_log(self, topic: str, partition: int) -> PartitionLog:
        """The local log of a partition this broker leads; NotLeader or UnknownTopic otherwise."""
        meta = self.topic_metadata(topic)
        if not 0 <= partition < meta.partitions:
            raise UnknownTopic(f"topic {topic!r} has no partition {partition} (it has {meta.partitions})")
        state = self.states.get((topic, partition))
        if state is None and self.cluster is not None:
            state = self.cluster.partition_state(topic, partition)
        if state is None or state.leader != self.broker_id:
            leader = state.leader if state else None
            raise NotLeader(f"broker {self.broker_id} does not lead {topic}-{partition} (leader: {leader})")
        return self.logs.get(topic, partition, meta.config)

    def _maintain(self) -> None:
        while not self._stopped.wait(self.maintenance_interval_s):
            try:
                self.logs.maintain()
            except Exception:  # a maintenance failure must not kill the broker
                log.exception("log maintenance failed")


def main(broker_id: int, port: int, data_dir: str, zookeeper: str, host: str = "127.0.0.1") -> int:
    """Run one broker in the foreground (``sparklog broker``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    broker = Broker(broker_id, data_dir, zookeeper, port=port, host=host).start()
    print(f"broker {broker_id} listening on {host}:{broker.port} (data in {data_dir})", flush=True)
    broker.run_until_signalled()
    return 0
