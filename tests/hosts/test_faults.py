"""Network faults on a cluster spread over hosts, Jepsen-style: a ZooKeeper ensemble of three and
three brokers, each on a host of its own, clients on a fifth. For each fault, ``acks=all`` writers
and a consumer group (:mod:`sparklog.hosts.workload`, on the client host) write and read an RF=3,
``min.insync.replicas=2`` topic of their own while it is injected, held and healed; then everything
the topic holds is read back: not one acknowledged record lost or moved, none stored twice, each
writer's records in the order it sent them in every partition, every acknowledged record given to
the group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparklog.hosts import faults
from sparklog.hosts.cluster import HostCluster
from sparklog.hosts.network import namespaces_available
from sparklog.hosts.remote_workload import RemoteWorkload
from sparklog.hosts.workload import failover_s

pytestmark = [
    pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available())),
    pytest.mark.timeout(600),
    pytest.mark.slow,
]


HOLD_S = 8.0  # twice the brokers' ZooKeeper session timeout: a lost leader is replaced before it is back


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    with HostCluster(tmp_path_factory.mktemp("hosts"), brokers=3) as running:
        yield running


def assert_clean(report: dict[str, object]) -> None:
    figures = {k: v for k, v in report.items() if k != "probe"}
    assert report["acked"] > 0, figures
    for figure in ("lost", "misplaced", "duplicated", "strangers", "out_of_order", "group_missed"):
        assert report[figure] == 0, f"{figure}: {figures}"
    assert report["stored"] == report["acked"] + report["unacked_stored"], figures


@pytest.mark.parametrize("fault", list(faults.FAULTS))
def test_no_acknowledged_record_is_lost_or_duplicated(cluster: HostCluster, fault: str, tmp_path: Path) -> None:
    topic = f"jepsen-{fault}"
    with RemoteWorkload(cluster, topic, probe_partition=0) as work:
        cluster.wait_settled(topic)
        work.wait_acked(300)  # writers and the group are under way before the fault
        happened = faults.inject(cluster, topic, fault, hold_s=HOLD_S)
        print(happened)
        work.wait_acked(300)  # and writes flow again after it
        report = work.stop()
    assert_clean(report)
    if fault in ("leader-host-cut-off", "leader-partitioned", "leader-paused"):
        assert happened["new_leader_after_s"] > 0
        took = failover_s(report["probe"], happened["at"])
        print(f"{fault}: partition 0 takes acks=all writes again after {took} s")
        assert took is not None
    print({k: v for k, v in report.items() if k != "probe"})
