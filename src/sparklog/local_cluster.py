"""A local cluster on loopback: an embedded ZooKeeper (unless one is given) and N broker processes.

What ``sparklog up`` runs in the foreground, and what benchmarks, the demo and tests start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from sparklog.child_process import preexec
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.ports import free_port, port_is_open
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from sparklog.dir_lock import DirLock
from sparklog.errors import BrokerNotAvailable
from sparklog.file_modes import DIRECTORY_MODE, open_for_append, restrict_tree
from sparklog.security.client_config import load_properties
from sparklog.security.local_setup import LocalSecurity, prepare

BROKER_START_TIMEOUT_S = 60.0
BROKER_STOP_TIMEOUT_S = 15.0
# settings for the brokers' properties files: the same for each, or each broker's by its id
BrokerProperties = Mapping[str, str] | Callable[[int], Mapping[str, str]]


def broker_command(
    broker_id: int,
    port: int,
    data_dir: Path,
    zookeeper: str,
    lake_dir: str | os.PathLike[str] | None = None,
    kafka_port: int | None = None,
    host: str = "127.0.0.1",
    namespace: str | None = None,
    metrics_port: int | None = None,
) -> list[str]:
    """The command line of a broker process (this interpreter, ``python -m sparklog.broker``),
    listening on ``host``; in network namespace ``namespace`` if given (``ip netns exec``, which
    execs the broker: the same pid)."""
    lake = [] if lake_dir is None else ["--lake-dir", str(lake_dir)]
    lake += [] if kafka_port is None else ["--kafka-port", str(kafka_port)]
    lake += [] if host == "127.0.0.1" else ["--host", host]
    lake += [] if metrics_port is None else ["--metrics-port", str(metrics_port)]
    on_host = [] if namespace is None else ["ip", "netns", "exec", namespace]
    return [
        *on_host,
        sys.executable,
        "-m",
        "sparklog.broker",
        "--id",
        str(broker_id),
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--zookeeper",
        zookeeper,
        *lake,
    ]


class BrokerProcess:
    """One ``python -m sparklog.broker`` subprocess, restartable on the same port and data dir.
    Its output goes to ``log_path`` (default: ``broker.log`` in its data dir); with ``owner_only``
    (a secured cluster's broker) its data dir is created 0700 and its log 0600. ``host``: the
    address it listens on and announces; ``namespace``: the network namespace it runs in (a host
    of :mod:`sparklog.hosts.network`)."""

    def __init__(
        self,
        broker_id: int,
        port: int,
        data_dir: Path,
        zookeeper: str,
        log_path: Path | None = None,
        lake_dir: str | os.PathLike[str] | None = None,
        kafka_port: int | None = None,
        host: str = "127.0.0.1",
        namespace: str | None = None,
        metrics_port: int | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.metrics_port = metrics_port  # its Prometheus endpoint's (None: none)
        self.host = host
        self.namespace = namespace
        self.lake_dir = lake_dir
        self.port = port
        self.kafka_port = kafka_port  # its Kafka listener's (None: none)
        self.data_dir = data_dir
        self.zookeeper = zookeeper
        self.log_path = log_path or data_dir / "broker.log"
        self.extra_args: list[str] = []  # more broker arguments (``--config FILE``)
        self.owner_only = False
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.owner_only:
            os.chmod(self.data_dir, DIRECTORY_MODE)  # the broker makes what is inside owner-only
        command = broker_command(
            self.broker_id,
            self.port,
            self.data_dir,
            self.zookeeper,
            self.lake_dir,
            self.kafka_port,
            self.host,
            self.namespace,
            self.metrics_port,
        )
        command += self.extra_args
        self._log = open_for_append(self.log_path, self.owner_only)  # kept open while the broker runs
        self._log.write(f"\n=== starting {' '.join(command)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches the parent only; it stops the brokers in order
            preexec_fn=preexec(),
        )

    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes this broker (None: it serves no metrics)."""
        return None if self.metrics_port is None else f"http://{self.host}:{self.metrics_port}/metrics"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited(self) -> int | None:
        """The exit code, or None while running (or never started)."""
        return None if self.process is None else self.process.poll()

    def terminate(self) -> None:
        """SIGTERM (a clean shutdown), without waiting."""
        if self.alive():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = BROKER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        self.terminate()
        code = None
        if self.process is not None:
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                code = None
        self._close_log()
        self.process = None
        return code

    def pause(self) -> None:
        """``kill -STOP``: frozen as a process stalled by a long GC or a swapping host is (its
        connections stay open, nothing answers); :meth:`resume` lets it run on."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, sig: int) -> None:
        if self.alive():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """``kill -9``: no flush, no clean shutdown."""
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._close_log()
        self.process = None

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def raise_if_exited(brokers: Iterable[BrokerProcess]) -> None:
    """:class:`BrokerNotAvailable` with its log's tail if one of ``brokers`` (starting) exited."""
    for broker in brokers:
        code = broker.exited()
        if code is not None:
            raise BrokerNotAvailable(
                f"broker {broker.broker_id} exited with code {code} during start-up "
                f"(log {broker.log_path}):\n{broker.log_tail(5)}"
            )


def stop_brokers(brokers: Iterable[BrokerProcess]) -> list[str]:
    """SIGTERM to every running broker at once, SIGKILL to what still runs ``BROKER_STOP_TIMEOUT_S``
    later; what went wrong, if anything."""
    brokers = list(brokers)
    problems: list[str] = []
    running = [b for b in brokers if b.alive()]
    for broker in running:
        broker.terminate()
    deadline = time.monotonic() + BROKER_STOP_TIMEOUT_S
    for broker in running:
        code = broker.stop(timeout=max(0.1, deadline - time.monotonic()))
        if code is None:
            problems.append(f"broker {broker.broker_id} did not stop within {BROKER_STOP_TIMEOUT_S:.0f} s")
        elif code not in (0, -signal.SIGTERM):
            problems.append(f"broker {broker.broker_id} exited with code {code} (log {broker.log_path})")
    for broker in brokers:
        broker.kill()  # anything left (a broker killed earlier and never restarted is a no-op)
    return problems


class LocalCluster:
    """Start with ``with LocalCluster(dir, brokers=3) as cluster: ...``; ``cluster.zookeeper`` is
    the connect string for clients. Broker ``i`` keeps its data in ``<dir>/broker-<i>``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        brokers: int = 1,
        zookeeper: str | None = None,
        zookeeper_port: int | None = None,
        broker_ports: list[int] | None = None,
        log_dir: Path | None = None,
        secure: bool = False,
        lake_dir: str | os.PathLike[str] | None = None,
        kafka_ports: list[int] | None = None,
        broker_properties: BrokerProperties | None = None,
        metrics_ports: list[int] | None = None,
    ) -> None:
        """``metrics_ports``: each broker's Prometheus endpoint (default: free ports).
        ``broker_properties``: more settings for the brokers' properties files, the same for
        each or a function of the broker id (settings naming a broker's own ports): a ``secure``
        cluster's win over its generated ones; a plain cluster's brokers get a file of these alone
        (``<data_dir>/broker-<id>.properties``, passed with ``--config``), e.g. ``kafka.listeners``
        with a SASL_PLAINTEXT listener. ``kafka_ports``: each broker's Kafka-protocol listener
        (default: free ports; plaintext, or SASL_SSL on a ``secure`` cluster, whose Kafka clients
        then need :meth:`kafka_client_config`). ``secure``: TLS, SCRAM and ACLs as ``sparklog up --secure`` sets them up
        (:mod:`sparklog.security.local_setup`); clients then need :meth:`client_config`. The
        embedded ZooKeeper is then locked down too (its root, its four-letter words), and everything
        under ``data_dir`` is owner-only (directories 0700, files 0600).
        ``lake_dir``: the brokers' ``--lake-dir`` (lake-enabled topics' Delta tables; default
        ``<data_dir>/lake``)."""
        self.data_dir = Path(data_dir)
        self._dir_lock = DirLock(self.data_dir, "the cluster's data dir")
        self.secure = secure
        self.broker_properties = broker_properties
        self.security: LocalSecurity | None = None
        self.embedded: EmbeddedZooKeeper | None = None
        if zookeeper is None:
            self.embedded = EmbeddedZooKeeper(
                self.data_dir / "zookeeper", port=zookeeper_port or free_port(), secure=secure
            )
            zookeeper = self.embedded.connect_string
        self.zookeeper = zookeeper
        self.lake_dir = lake_dir if lake_dir is not None else self.data_dir / "lake"
        ports = broker_ports or [free_port() for _ in range(brokers)]
        kafka: list[int | None] = list(kafka_ports or [free_port() for _ in range(brokers)])
        metrics = metrics_ports or [free_port() for _ in range(brokers)]
        self.brokers = {
            i + 1: BrokerProcess(
                i + 1,
                ports[i],
                self.data_dir / f"broker-{i + 1}",
                zookeeper,
                log_dir / f"broker-{i + 1}.log" if log_dir else None,
                self.lake_dir,
                kafka[i],
                metrics_port=metrics[i],
            )
            for i in range(brokers)
        }

    def lock_data_dir(self) -> None:
        """Hold the data dir until :meth:`stop` (DirectoryInUse if another process does): one
        cluster per data dir, whose brokers and ZooKeeper lock their own directories too."""
        self._dir_lock.acquire()

    def start(self, timeout: float = BROKER_START_TIMEOUT_S) -> LocalCluster:
        self.lock_data_dir()
        try:
            if self.embedded is not None:
                self.embedded.start()
            if self.secure:
                self.secure_brokers()
            elif self.broker_properties is not None:
                self.configure_brokers()
            for broker in self.brokers.values():
                broker.start()
            self.wait_for_brokers(list(self.brokers), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def secure_brokers(self) -> LocalSecurity:
        """Certificates, users and each broker's properties file (ZooKeeper must be up); the data
        dir made owner-only (brokers keep what they write so: ``log.dirs.owner.only``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, DIRECTORY_MODE)  # first: nobody else reaches what is below
        ports = [b.port for b in self.brokers.values()]
        kafka = [b.kafka_port for b in self.brokers.values() if b.kafka_port is not None]
        self.security = prepare(
            self.data_dir, self.zookeeper, ports, lock_zookeeper_root=self.embedded is not None, kafka_ports=kafka
        )
        for broker in self.brokers.values():
            config = self.security.broker_config(
                broker.broker_id, broker.port, broker.kafka_port, self.properties_of(broker.broker_id)
            )
            broker.extra_args = ["--config", str(config)]
            broker.owner_only = True
        restrict_tree(self.data_dir)  # certificates, an earlier run's data
        return self.security

    def configure_brokers(self) -> None:
        """A plain cluster's brokers started with ``--config``: a properties file each, of
        ``broker_properties`` alone (the default listeners otherwise, as without a file)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for broker in self.brokers.values():
            path = self.data_dir / f"broker-{broker.broker_id}.properties"
            settings = self.properties_of(broker.broker_id)
            path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")
            broker.extra_args = ["--config", str(path)]

    def properties_of(self, broker_id: int) -> dict[str, str]:
        """Broker ``broker_id``'s settings of ``broker_properties`` (none if it is None)."""
        found = self.broker_properties
        if found is None:
            return {}
        return dict(found(broker_id) if callable(found) else found)

    @property
    def bootstrap_servers(self) -> str:
        """The brokers' plaintext listeners, as a client's ``bootstrap.servers``."""
        return ",".join(f"127.0.0.1:{broker.port}" for broker in self.brokers.values())

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The brokers' Kafka-protocol listeners, as a Kafka client's ``bootstrap.servers``."""
        return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers.values() if b.kafka_port is not None)

    def kafka_client_config(self) -> dict[str, str]:
        """What a Kafka client (confluent-kafka) of this cluster is configured with: the Kafka
        listeners, and on a secured cluster the admin's SASL_SSL settings."""
        if self.security is not None and self.security.kafka_client_properties is not None:
            return load_properties(self.security.kafka_client_properties)
        return {"bootstrap.servers": self.kafka_bootstrap_servers}

    def client_config(self) -> dict[str, str]:
        """What a client passes as ``config=`` (bootstrap servers and the admin's SASL_SSL settings
        for a secured cluster; nothing otherwise: clients use :attr:`zookeeper`)."""
        return load_properties(self.security.client_properties) if self.security is not None else {}

    def wait_for_brokers(self, ids: list[int], timeout: float = BROKER_START_TIMEOUT_S) -> None:
        """Until every broker in ``ids`` is registered in ZooKeeper at its port and serves there (a
        registration left by a crashed run lingers until its session expires)."""
        deadline = time.monotonic() + timeout
        with ClusterMetadata(self.zookeeper) as meta:
            while True:
                live = meta.brokers()
                if all(
                    i in live and live[i].port == self.brokers[i].port and port_is_open("127.0.0.1", live[i].port)
                    for i in ids
                ):
                    return
                raise_if_exited(self.brokers[i] for i in ids)
                if time.monotonic() > deadline:
                    raise BrokerNotAvailable(f"brokers {ids} did not register within {timeout:.0f} s")
                time.sleep(0.05)

    def restart(self, broker_id: int) -> None:
        self.brokers[broker_id].start()
        self.wait_for_brokers([broker_id])

    def stop(self) -> list[str]:
        """Stop every broker (SIGTERM all at once, SIGKILL what is still running after a while), then
        ZooKeeper. Returns what went wrong, if anything."""
        problems = stop_brokers(self.brokers.values())
        if self.embedded is not None:
            self.embedded.stop()
        self._dir_lock.release()
        return problems

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
