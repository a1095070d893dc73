"""Spark on a standalone cluster spread over hosts, against a sparklog cluster on hosts of its own:
a ZooKeeper ensemble of three and three brokers, a client host, a Spark master, two workers and a
driver, each in a network namespace of its own (:mod:`sparklog.hosts.spark_cluster`). The data
source reads and the exactly-once sink writes from executors on the two worker hosts; a worker's
host cut off mid-write costs its tasks, not a row; and the demo's streaming pipeline (windowed
aggregate into Delta) runs with its executors on the workers.

One sparklog cluster and one Spark cluster serve all the module's tests: each takes tens of seconds to start."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from sparklog.hosts.cluster import HostCluster
from sparklog.hosts.network import namespaces_available
from sparklog.hosts.spark_cluster import SparkCluster, SparkDriver

pytestmark = [
    pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available())),
    pytest.mark.timeout(900),
    pytest.mark.slow,
]

JOB = "sparklog.hosts.spark_job"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    """Hosts 1-3 ZooKeeper, 4-6 brokers, 7 the client; 8 the Spark master, 9 and 10 its workers,
    11 the driver."""
    with HostCluster(tmp_path_factory.mktemp("hosts"), brokers=3, spare_hosts=4) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark(hosts: HostCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    master, first, second, _driver = hosts.spare_hosts
    cluster = SparkCluster(hosts.net, master, [first, second], tmp_path_factory.mktemp("spark")).start()
    try:
        yield cluster
    finally:
        for problem in cluster.stop():
            print(f"stopping the Spark cluster: {problem}")


def driver_host(hosts: HostCluster) -> int:
    return hosts.spare_hosts[3]


def produce(hosts: HostCluster, topic: str, records: int, partitions: int) -> list[str]:
    """A new topic with ``records`` records (none: just the topic), from the client host; their values."""
    args = ["produce", "--bootstrap-server", hosts.bootstrap_servers, "--topic", topic]
    hosts.run_python(hosts.client_host, JOB, [*args, "--records", str(records), "--partitions", str(partitions)])
    return [f"r-{i:08d}" for i in range(records)]


def dump(hosts: HostCluster, topic: str) -> list[dict[str, Any]]:
    """Every record of ``topic``, read on the client host: ``value`` and ``headers``."""
    args = ["dump", "--bootstrap-server", hosts.bootstrap_servers, "--topic", topic]
    return [json.loads(line) for line in hosts.run_python(hosts.client_host, JOB, args, timeout=300).splitlines()]


def copy(hosts: HostCluster, spark: SparkCluster, source: str, target: str, *extra: str) -> SparkDriver:
    """The ``copy`` driver (read ``source``, write ``target`` with the sink) started on the driver host."""
    args = ["copy", "--master", spark.master_url, "--bootstrap-server", hosts.bootstrap_servers]
    return spark.driver(driver_host(hosts), JOB, [*args, "--source", source, "--target", target, *extra])


def assert_every_value_once(records: list[dict[str, Any]], values: list[str]) -> None:
    counts = Counter(r["value"] for r in records)
    twice = sorted(v for v, n in counts.items() if n > 1)
    missing = sorted(set(values) - set(counts))
    assert not twice, f"{len(twice)} values written more than once, e.g. {twice[:5]}"
    assert not missing, f"{len(missing)} values not written, e.g. {missing[:5]}"
    assert len(records) == len(values) and set(counts) == set(values)


def test_the_demo_pipeline_runs_with_executors_on_the_workers(
    hosts: HostCluster, spark: SparkCluster, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    from sparklog.examples.clickstream import StreamSpec, expected, make_stream
    from sparklog.examples.pipeline import as_reference

    spec = StreamSpec(waves=2, events_per_wave=20_000)
    waves = make_stream(spec)
    reference = expected(waves)
    assert reference.dropped_per_wave[-1] > 0  # the second run meets stragglers whose window closed
    data_dir = tmp_path / "demo"
    args = ["--master", spark.master_url, "--zookeeper", hosts.zookeeper, "--data-dir", str(data_dir)]
    args += ["--waves", str(spec.waves), "--events-per-wave", str(spec.events_per_wave)]
    began = time.monotonic()
    stdout = spark.driver(driver_host(hosts), "sparklog.demo", args, name="demo").wait(600)
    print(f"the demo on the standalone cluster: {time.monotonic() - began:.1f} s")
    assert "OK in" in stdout, stdout

    table_path = data_dir / "delta" / "clicks_per_minute"
    delta = DeltaTable(str(table_path))  # read without Spark
    assert delta.version() == spec.waves  # version 0 is the empty table, then one MERGE per wave
    landed = delta.to_pyarrow_table()
    assert landed.num_rows == reference.aggregates.num_rows
    assert pc.sum(landed["events"]).as_py() == reference.produced - reference.dropped
    assert as_reference(landed).equals(reference.aggregates)
    first = DeltaTable(str(table_path), version=1).to_pyarrow_table()
    assert pc.sum(first["events"]).as_py() == waves[0].events
    summary = json.loads((data_dir / "summary.json").read_text())
    assert summary["ok"] and all(summary["checks"].values()), summary["checks"]
    assert summary["rows_read"] == reference.produced
    assert summary["lag"] == {"0": 0, "1": 0, "2": 0, "3": 0}

    (app,) = [a["id"] for a in spark.state()["completedapps"] if a["name"] == "sparklog-demo"]
    tasks = spark.tasks_run(app)
    assert all(n > 0 for n in tasks.values()), tasks
    print(f"tasks run per worker host {tasks}")


def test_a_worker_host_cut_off_mid_write_costs_no_row(hosts: HostCluster, spark: SparkCluster, tmp_path: Path) -> None:
    values = produce(hosts, "cut-in", 16_000, partitions=4)
    produce(hosts, "cut-out", 0, partitions=4)
    progress = tmp_path / "progress"
    progress.mkdir()
    survivor, victim = spark.worker_hosts
    victim_address = hosts.net.address(victim)
    # 16 tasks of 1,000 rows, each held 1.5 s before its rows are staged: the victim's host is
    # cut off while its second task is under way
    extra = ["--max-records-per-partition", "1000", "--slow-ms", "1500", "--progress-dir", str(progress)]
    driver = copy(hosts, spark, "cut-in", "cut-out", *extra)
    begun = hosts.wait(lambda: len(list(progress.glob(f"*-{victim_address}"))) >= 2, 240, "two tasks on the victim")
    hosts.net.cut_off(victim)
    try:
        report = json.loads(driver.wait(400))
        print(f"copy with host {victim} cut off {begun:.1f} s into its tasks: job {report['seconds']} s")
    finally:
        hosts.net.reconnect(victim)

    records = dump(hosts, "cut-out")
    assert_every_value_once(records, values)
    survivor_address = hosts.net.address(survivor)
    written_from = Counter((r["headers"]["executor"], r["headers"]["attempt"]) for r in records)
    # each record names the host its executor read, staged and sent it from: both workers' hosts
    # (the victim's tasks done before the cut-off count), and their executors' logs say so too
    workers = {hosts.net.address(h) for h in spark.worker_hosts}
    assert {host for host, _ in written_from} == workers, written_from
    tasks = spark.tasks_run(report["app_id"])
    assert set(tasks) == set(spark.worker_hosts) and all(n > 0 for n in tasks.values()), tasks
    # tasks lost with the victim's host ran again, as later attempts, on the other worker
    assert any(host == survivor_address and attempt != "0" for host, attempt in written_from), written_from
    print(f"records written from (host, attempt): {dict(written_from)}; tasks run per worker host {tasks}")
    rejoined = spark.wait_workers(timeout=120)  # the victim's worker registers again
    print(f"worker on host {victim} registered again {rejoined:.1f} s after its host came back")
