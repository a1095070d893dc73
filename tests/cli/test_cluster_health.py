"""``sparklog cluster health`` on a real 3-broker cluster (one for the module), through ZooKeeper
and through brokers: healthy, a broker down (its partitions under-replicated), a partition offline.
Each test leaves the cluster whole again."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sparklog import Admin
from sparklog.local_cluster import LocalCluster
from waiting import wait_for

if TYPE_CHECKING:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

CLI = [sys.executable, "-m", "sparklog.cli.main"]
WAIT_S = 120.0  # a hang guard only


@pytest.fixture(scope="module")
def cluster(zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    connect = f"{zookeeper.connect_string}/health-{uuid.uuid4().hex[:8]}"
    with LocalCluster(Path(tmp_path_factory.mktemp("health")), brokers=3, zookeeper=connect) as running:
        with Admin(running.zookeeper) as admin:
            admin.create_topic("everywhere", 2, 3)
        yield running


def health(cluster: LocalCluster, through: str, broker: int = 1) -> subprocess.CompletedProcess[str]:
    """``sparklog cluster health`` through ZooKeeper (``through`` "zookeeper") or broker ``broker``."""
    if through == "zookeeper":
        where = ["--zookeeper", cluster.zookeeper]
    else:
        where = ["--bootstrap-server", f"127.0.0.1:{cluster.brokers[broker].port}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    return subprocess.run(
        [*CLI, "cluster", "health", *where], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def healthy(cluster: LocalCluster, through: str) -> bool:
    return health(cluster, through).returncode == 0


@pytest.mark.parametrize("through", ["zookeeper", "brokers"])
def test_a_whole_cluster_is_healthy(cluster: LocalCluster, through: str) -> None:
    wait_for(lambda: healthy(cluster, through), WAIT_S, "the new cluster to be healthy")
    result = health(cluster, through)
    assert result.returncode == 0, result
    assert result.stdout.startswith("healthy: 3 live broker(s)"), result.stdout


def test_a_broker_down_and_its_partitions_under_replicated(cluster: LocalCluster) -> None:
    wait_for(lambda: healthy(cluster, "zookeeper"), WAIT_S, "a healthy start")
    cluster.brokers[3].stop()
    try:
        for through in ("zookeeper", "brokers"):
            wait_for(
                lambda through=through: "under-replicated" in health(cluster, through).stdout,
                WAIT_S,
                "the partitions broker 3 held to be under-replicated",
            )
            result = health(cluster, through)
            assert result.returncode == 1, result
            lines = result.stdout.splitlines()
            assert any(line.startswith("broker 3 down (holds replicas of everywhere") for line in lines), lines
            assert "partition everywhere-0 under-replicated: ISR" in result.stdout
            assert "partition everywhere-1 under-replicated: ISR" in result.stdout
            assert lines[-1].startswith("unhealthy: "), lines
    finally:
        cluster.restart(3)
    wait_for(lambda: healthy(cluster, "brokers"), WAIT_S, "broker 3 to rejoin every ISR")


def test_an_offline_partition(cluster: LocalCluster) -> None:
    wait_for(lambda: healthy(cluster, "zookeeper"), WAIT_S, "a healthy start")
    with Admin(cluster.zookeeper) as admin:
        holder = admin.create_topic("alone", 1, 1).replicas[0][0]
    wait_for(lambda: healthy(cluster, "zookeeper"), WAIT_S, "the new topic to have a leader")
    asked = next(b for b in cluster.brokers if b != holder)  # a broker still up answers
    cluster.brokers[holder].stop()
    try:
        wait_for(
            lambda: "partition alone-0 offline" in health(cluster, "brokers", asked).stdout,
            WAIT_S,
            "partition alone-0 to be offline",
        )
        for through in ("zookeeper", "brokers"):
            result = health(cluster, through) if through == "zookeeper" else health(cluster, through, asked)
            assert result.returncode == 1, result
            assert f"broker {holder} down" in result.stdout
            assert "partition alone-0 offline" in result.stdout
    finally:
        cluster.restart(holder)
    wait_for(lambda: healthy(cluster, "zookeeper"), WAIT_S, "the cluster to be whole again")


def test_no_controller_when_every_broker_is_down(cluster: LocalCluster) -> None:
    for broker in cluster.brokers.values():
        broker.stop()
    try:
        result = health(cluster, "zookeeper")
        assert result.returncode == 1, result
        lines = result.stdout.splitlines()
        assert "no controller: no broker holds the controller role" in lines, lines
        assert all(any(line.startswith(f"broker {b} down") for line in lines) for b in (1, 2, 3)), lines
        assert "partition everywhere-0 offline: " in result.stdout  # no leader, or the last one, gone
    finally:
        for broker in cluster.brokers.values():
            broker.start()
        cluster.wait_for_brokers(list(cluster.brokers))
    wait_for(lambda: healthy(cluster, "zookeeper"), WAIT_S, "the cluster to be whole again")
