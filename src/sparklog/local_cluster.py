"""A local cluster on loopback: an embedded ZooKeeper (unless one is given) and N broker processes.

Used by benchmarks, the demo and tests; ``sparklog up`` runs the same thing in the foreground.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.ports import free_port
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from sparklog.errors import BrokerNotAvailable


class BrokerProcess:
    """One ``python -m sparklog.broker`` subprocess, restartable on the same port and data dir."""

    def __init__(self, broker_id: int, port: int, data_dir: Path, zookeeper: str) -> None:
        self.broker_id = broker_id
        self.port = port
        self.data_dir = data_dir
        self.zookeeper = zookeeper
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "broker.log", "ab")  # noqa: SIM115 - the child owns it
        command = [sys.executable, "-m", "sparklog.broker", "--id", str(self.broker_id), "--port", str(self.port)]
        command += ["--data-dir", str(self.data_dir), "--zookeeper", self.zookeeper]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (clean shutdown), then SIGKILL if it does not exit in time."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def kill(self) -> None:
        """``kill -9``: no flush, no clean shutdown."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 20) -> str:
        path = self.data_dir / "broker.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


class LocalCluster:
    """Start with ``with LocalCluster(dir, brokers=3) as cluster: ...``; ``cluster.zookeeper`` is
    the connect string for clients."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        brokers: int = 1,
        zookeeper: str | None = None,
        zookeeper_port: int | None = None,
        broker_ports: list[int] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.embedded: EmbeddedZooKeeper | None = None
        if zookeeper is None:
            self.embedded = EmbeddedZooKeeper(self.data_dir / "zookeeper", port=zookeeper_port or free_port())
            zookeeper = self.embedded.connect_string
        self.zookeeper = zookeeper
        ports = broker_ports or [free_port() for _ in range(brokers)]
        self.brokers = {
            i + 1: BrokerProcess(i + 1, ports[i], self.data_dir / f"broker-{i + 1}", zookeeper) for i in range(brokers)
        }

    def start(self, timeout: float = 60.0) -> LocalCluster:
        try:
            if self.embedded is not None:
                self.embedded.start()
            for broker in self.brokers.values():
                broker.start()
            self.wait_for_brokers(list(self.brokers), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_for_brokers(self, ids: list[int], timeout: float = 60.0) -> None:
        """Until every broker in ``ids`` is registered in ZooKeeper."""
        deadline = time.monotonic() + timeout
        with ClusterMetadata(self.zookeeper) as meta:
            while True:
                live = meta.brokers()
                if all(i in live for i in ids):
                    return
                for i in ids:
                    if not self.brokers[i].alive():
                        raise BrokerNotAvailable(f"broker {i} exited:\n{self.brokers[i].log_tail()}")
                if time.monotonic() > deadline:
                    raise BrokerNotAvailable(f"brokers {ids} did not register within {timeout:.0f} s")
                time.sleep(0.05)

    def restart(self, broker_id: int) -> None:
        self.brokers[broker_id].start()
        self.wait_for_brokers([broker_id])

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        if self.embedded is not None:
            self.embedded.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
