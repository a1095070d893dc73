"""One owner per data directory: a second `sparklog up`, ZooKeeper or broker on a directory in use
is refused at once, naming the holder's pid, and changes nothing there; the lock goes with its
holder, even after a `kill -9`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.coordination.ports import free_port
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from sparklog.dir_lock import DirLock
from sparklog.errors import DirectoryInUse
from sparklog.local_cluster import LocalCluster

HOLD = (
    "import sys, time; from sparklog.dir_lock import DirLock; "
    "DirLock(sys.argv[1], 'x').acquire(); print('held', flush=True); time.sleep(600)"
)


def holder(directory: Path) -> subprocess.Popen[str]:
    """Another process holding ``directory``'s lock (it says so before the test goes on)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_directory_is_refused_naming_its_holder_until_it_dies(tmp_path: Path) -> None:
    proc = holder(tmp_path / "d")
    try:
        with pytest.raises(DirectoryInUse, match=rf"in use by another process \(pid {proc.pid}\)"):
            DirLock(tmp_path / "d", "the test's dir").acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with DirLock(tmp_path / "d", "the test's dir"):  # the kernel released it with its holder
        assert (tmp_path / "d" / ".lock").read_text().strip() == str(os.getpid())
    with DirLock(tmp_path / "d", "the test's dir"):  # and a released lock can be taken again
        pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("locked") / "data", brokers=1) as cluster:
        with Admin(cluster.zookeeper) as admin:
            admin.create_topic("kept", partitions=1)
        with Producer(cluster.zookeeper) as producer:
            producer.send_batch("kept", {"value": [b"before"] * 3}, partition=0)
        yield cluster


def values(cluster: LocalCluster) -> list[bytes]:
    with Consumer("kept", zookeeper=cluster.zookeeper, auto_offset_reset="earliest") as consumer:
        got: list[bytes] = []
        for _ in range(20):
            got += [r.value for r in consumer.poll(timeout=0.5)]
            if len(got) >= 3:
                break
        return got


def test_a_second_zookeeper_on_the_data_dir_is_refused(cluster: LocalCluster) -> None:
    assert cluster.embedded is not None
    config_before = cluster.embedded.config_path.read_bytes()
    second = EmbeddedZooKeeper(cluster.embedded.data_dir, port=free_port())
    with pytest.raises(DirectoryInUse, match=rf"ZooKeeper's data dir .* \(pid {os.getpid()}\)"):
        second.start()
    assert not second.is_running()
    assert cluster.embedded.config_path.read_bytes() == config_before  # zoo.cfg left alone
    assert values(cluster) == [b"before"] * 3


def test_a_second_broker_on_the_log_dir_exits_at_once(cluster: LocalCluster) -> None:
    broker = cluster.brokers[1]
    command = [sys.executable, "-m", "sparklog.broker", "--id", "7", "--data-dir", str(broker.data_dir)]
    done = subprocess.run([*command, "--zookeeper", cluster.zookeeper], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr[-2000:]
    assert (
        f"broker 7's log dir {broker.data_dir} is in use by another process (pid {broker.process.pid})" in done.stderr
    )
    assert "listening" not in done.stdout
    assert values(cluster) == [b"before"] * 3


def test_a_second_sparklog_up_on_the_data_dir_is_refused(cluster: LocalCluster) -> None:
    up = [sys.executable, "-m", "sparklog.cli.main", "up", "--data-dir", str(cluster.data_dir)]
    done = subprocess.run(
        [*up, "--zookeeper-port", str(free_port()), "--broker-port", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"the cluster's data dir {cluster.data_dir} is in use by another process (pid {os.getpid()})" in done.stderr
    assert values(cluster) == [b"before"] * 3
