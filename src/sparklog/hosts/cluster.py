"""A sparklog cluster spread over hosts: a ZooKeeper ensemble, brokers and clients, each on a host of
its own (:class:`~sparklog.hosts.network.HostNetwork`), as a deployment on several machines is.

Hosts ``1..zookeepers`` run the ensemble (one server each, port 2181), the next ``brokers`` hosts run
broker ``1..brokers`` (Flight on port 9092, Kafka on 9093 of the host's own address), and the hosts
after those are for clients (:attr:`HostCluster.client_hosts`), then any ``spare_hosts`` a caller
wants for itself (a Spark master and workers). Every process runs inside its host's namespace;
:meth:`HostCluster.python` runs a Python module on a host (a workload, a checker, a CLI command).

The harness keeps one ZooKeeper session of its own, opened from the first client host, for what it
must know to inject faults (partition leaders, ISRs, the controller) and to wait for recovery.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.coordination.ports import port_is_open
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, four_letter_word
from sparklog.errors import BrokerNotAvailable, InvalidRequest
from sparklog.hosts.network import HostNetwork
from sparklog.local_cluster import BROKER_START_TIMEOUT_S, BrokerProcess, raise_if_exited, stop_brokers

ZOOKEEPER_PORT = 2181
FLIGHT_PORT = 9092
KAFKA_PORT = 9093


class HostCluster:
    """``with HostCluster(dir, brokers=3) as cluster: ...`` (see the module's docstring).

    ``broker_properties``: settings of each broker's properties file (``--config``), e.g. replica
    lag or session settings a test wants; ``kafka``: a plaintext Kafka listener on every broker."""

    def __init__(
        self,
        data_dir: str | Path,
        brokers: int = 3,
        zookeepers: int = 3,
        clients: int = 1,
        spare_hosts: int = 0,
        kafka: bool = True,
        broker_properties: Mapping[str, str] | None = None,
    ) -> None:
        if zookeepers < 1 or zookeepers % 2 == 0:
            raise InvalidRequest(f"a ZooKeeper ensemble has an odd number of servers, got {zookeepers}")
        if brokers < 1 or clients < 1:
            raise InvalidRequest(f"a cluster on hosts needs a broker and a client host, got {brokers} and {clients}")
        self.data_dir = Path(data_dir)
        self.net = HostNetwork(zookeepers + brokers + clients + spare_hosts)
        self.zookeeper_hosts = list(range(1, zookeepers + 1))
        self.broker_hosts = {b: zookeepers + b for b in range(1, brokers + 1)}
        first_client = zookeepers + brokers + 1
        self.client_hosts = list(range(first_client, first_client + clients))
        self.spare_hosts = list(range(first_client + clients, first_client + clients + spare_hosts))
        ensemble = {host: self.net.address(host) for host in self.zookeeper_hosts}
        self.zookeepers = {
            host: EmbeddedZooKeeper(
                self.data_dir / f"zookeeper-{host}",
                port=ZOOKEEPER_PORT,
                host=address,
                ensemble=ensemble if zookeepers > 1 else None,
                server_id=host if zookeepers > 1 else None,
                namespace=self.net.namespace(host),
            )
            for host, address in ensemble.items()
        }
        self.zookeeper = ",".join(f"{address}:{ZOOKEEPER_PORT}" for address in ensemble.values())
        self.broker_properties = dict(broker_properties or {})
        self.brokers = {
            b: BrokerProcess(
                b,
                FLIGHT_PORT,
                self.data_dir / f"broker-{b}",
                self.zookeeper,
                kafka_port=KAFKA_PORT if kafka else None,
                host=self.net.address(host),
                namespace=self.net.namespace(host),
            )
            for b, host in self.broker_hosts.items()
        }
        self.meta: ClusterMetadata | None = None

    # ----------------------------------------------------------------- addresses
    @property
    def client_host(self) -> int:
        return self.client_hosts[0]

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' Flight listeners, as a sparklog client's ``bootstrap.servers``."""
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers.values())

    @property
    def kafka_bootstrap_servers(self) -> str:
        return ",".join(f"{b.host}:{b.kafka_port}" for b in self.brokers.values() if b.kafka_port is not None)

    def host_of_broker(self, broker_id: int) -> int:
        return self.broker_hosts[broker_id]

    def broker_on(self, host: int) -> BrokerProcess:
        return next(self.brokers[b] for b, h in self.broker_hosts.items() if h == host)

    # ----------------------------------------------------------------- life cycle
    def start(self, timeout: float = BROKER_START_TIMEOUT_S) -> HostCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.net.start()
            for server in self.zookeepers.values():
                server.start(wait=False)
            for server in self.zookeepers.values():
                server.wait_until_serving(60)
            if self.broker_properties:
                for broker in self.brokers.values():
                    path = self.data_dir / f"broker-{broker.broker_id}.properties"
                    path.write_text("".join(f"{k}={v}\n" for k, v in self.broker_properties.items()))
                    broker.extra_args = ["--config", str(path)]
            with self.net.inside(self.client_host):  # its session's thread lives on the client host
                self.meta = ClusterMetadata(self.zookeeper).start()
            for broker in self.brokers.values():
                broker.start()
            self.wait_for_brokers(list(self.brokers), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_brokers(self, ids: Sequence[int], timeout: float = BROKER_START_TIMEOUT_S) -> None:
        """Until every broker in ``ids`` is registered and serves at its address (seen from the
        client host)."""
        deadline = time.monotonic() + timeout
        while True:
            live = self.live_brokers()
            serving = [i for i in ids if i in live and self._serves(self.brokers[i])]
            if len(serving) == len(ids):
                return
            raise_if_exited(self.brokers[i] for i in ids)
            if time.monotonic() > deadline:
                raise BrokerNotAvailable(f"brokers {sorted(set(ids) - set(serving))} did not serve in {timeout:.0f} s")
            time.sleep(0.1)

    def _serves(self, broker: BrokerProcess) -> bool:
        with self.net.inside(self.client_host):
            return port_is_open(broker.host, broker.port, timeout=0.5)

    def stop(self) -> list[str]:
        """Stop every broker (SIGTERM, SIGKILL after a while), the ensemble and the network; returns
        what went wrong, if anything."""
        with contextlib.suppress(Exception):
            self.net.heal()  # a broker cut off from ZooKeeper takes its session timeout to stop
        for broker in self.brokers.values():
            broker.resume()  # a paused one hears the SIGTERM
        problems = stop_brokers(self.brokers.values())
        if self.meta is not None:
            with contextlib.suppress(Exception):
                self.meta.close()
            self.meta = None
        for server in self.zookeepers.values():
            server.stop()
        self.net.close()
        return problems

    def __enter__(self) -> HostCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- processes on hosts
    def python(self, host: int, module: str, args: Sequence[str], **options: Any) -> subprocess.Popen[str]:
        """``python -m module args`` (this interpreter) on ``host``, text pipes unless told."""
        options.setdefault("stdout", subprocess.PIPE)
        options.setdefault("stderr", subprocess.PIPE)
        options.setdefault("stdin", subprocess.DEVNULL)
        options.setdefault("text", True)
        return self.net.popen(host, [sys.executable, "-m", module, *args], **options)

    def run_python(self, host: int, module: str, args: Sequence[str], timeout: float = 120.0) -> str:
        """What ``python -m module args`` on ``host`` printed; ``CalledProcessError`` unless it exited 0."""
        done = self.net.run(host, [sys.executable, "-m", module, *args], timeout=timeout)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, module, done.stdout, done.stderr)
        return done.stdout

    # ----------------------------------------------------------------- state
    def _meta(self) -> ClusterMetadata:
        if self.meta is None:
            raise BrokerNotAvailable("the host cluster is not started")
        return self.meta

    def live_brokers(self) -> set[int]:
        try:
            return set(self._meta().brokers())
        except Exception:  # the harness's own session may be moving between ensemble servers
            return set()

    def partition_states(self, topic: str) -> list[PartitionState]:
        meta = self._meta()
        return [meta.partition_state(topic, p) for p in range(meta.topic(topic).partitions)]

    def controller(self) -> int | None:
        meta = self._meta()
        try:
            data, _ = meta.zk.get(meta.layout.controller)
            return int(json.loads(data)["broker_id"])
        except Exception:
            return None

    def zookeeper_mode(self, host: int) -> str:
        """``leader``, ``follower``, ``standalone`` or why the server on ``host`` does not say."""
        server = self.zookeepers[host]
        try:
            with self.net.inside(host):
                reply = four_letter_word(server.host, server.port, "srvr", timeout=1.0)
        except OSError as exc:
            return type(exc).__name__
        return next((line.split(": ")[1] for line in reply.splitlines() if line.startswith("Mode")), "unknown")

    def zookeeper_leader(self, timeout: float = 30.0) -> int:
        """The host of the ensemble's leader."""
        found: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [h for h in self.zookeeper_hosts if self.zookeeper_mode(h) in ("leader", "standalone")]
            if len(found) == 1:
                return found[0]
            time.sleep(0.2)
        raise BrokerNotAvailable(f"the ensemble has no single leader: {found}")

    def wait(self, check: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> float:
        """Seconds until ``check()`` holds (exceptions count as not yet); TimeoutError naming ``what``."""
        start = time.monotonic()
        while True:
            with contextlib.suppress(Exception):
                if check():
                    return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")
            time.sleep(interval)

    def full_isr(self, topic: str) -> bool:
        """Every partition has a live leader and all its replicas in sync."""
        meta = self._meta()
        live = set(meta.brokers())
        replicas = meta.topic(topic).replicas
        states = self.partition_states(topic)
        return all(s.leader in live and sorted(s.isr) == sorted(r) for s, r in zip(states, replicas, strict=True))

    def wait_full_isr(self, topic: str, timeout: float = 90.0) -> float:
        return self.wait(lambda: self.full_isr(topic), timeout, f"every replica of {topic} in sync")

    def settled(self, topic: str) -> bool:
        """Fully in sync, every partition led by its preferred (first) replica: as the controller
        leaves a cluster a while after a fault (it moves leaderships back within 2 s)."""
        replicas = self._meta().topic(topic).replicas
        states = self.partition_states(topic)
        return self.full_isr(topic) and all(s.leader == r[0] for s, r in zip(states, replicas, strict=True))

    def wait_settled(self, topic: str, timeout: float = 90.0) -> float:
        return self.wait(lambda: self.settled(topic), timeout, f"{topic} in sync under its preferred leaders")
