"""Shared pytest fixtures for sparklog."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from kazoo.client import KazooClient

    from replication_helpers import Cluster
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """A standalone ZooKeeper on a free loopback port, shared by the whole test session."""
    from sparklog.coordination.ports import free_port
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"), port=free_port())
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_client(zookeeper: EmbeddedZooKeeper, request: pytest.FixtureRequest) -> Iterator[KazooClient]:
    """A connected KazooClient chrooted to a fresh, unique znode (isolation between tests)."""
    from kazoo.client import KazooClient

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    chroot = f"/tests/{name}-{uuid.uuid4().hex[:8]}"

    bootstrap = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    bootstrap.start(timeout=15.0)
    try:
        bootstrap.ensure_path(chroot)
    finally:
        bootstrap.stop()
        bootstrap.close()

    client = KazooClient(hosts=zookeeper.connect_string + chroot, timeout=10.0)
    client.start(timeout=15.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


# ---------------------------------------------------------------------------------------------------
# Broker integration fixtures (tests/broker/ and others; helpers in tests/broker_helpers.py).


@pytest.fixture
def sparklog_connect(zookeeper: EmbeddedZooKeeper) -> str:
    """A ZooKeeper connect string with a fresh chroot: sparklog's root znode, unique to the test."""
    return f"{zookeeper.connect_string}/t-{uuid.uuid4().hex[:8]}"


LOG_LINES_ON_FAILURE = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """When a test fails, attach the tail of every process log it started (brokers, ZooKeeper
    proxies...) to the report: CI shows only the report, and the logs vanish with its clone."""
    outcome = yield
    report = outcome.get_result()
    group = getattr(item, "funcargs", {}).get("child_processes")
    if not report.failed or group is None:
        return
    for path in getattr(group, "log_paths", []):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        # log records only: traceback bodies would crowd out the events that explain a failure
        lines = [line for line in text.splitlines() if line[:1].strip() and not line.startswith("Traceback")]
        tail = "\n".join(lines[-LOG_LINES_ON_FAILURE:])
        report.sections.append((f"{path.name} (last {LOG_LINES_ON_FAILURE} records)", tail))


@pytest.fixture
def child_processes() -> Iterator[object]:
    """A ``broker_helpers.ProcessGroup``: every subprocess started through it ends with the test."""
    from broker_helpers import ProcessGroup

    group = ProcessGroup()
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def start_broker(sparklog_connect: str, child_processes: object, tmp_path_factory: pytest.TempPathFactory):
    """``start_broker(broker_id=1)`` -> a running ``broker_helpers.BrokerProcess`` (registered in
    ZooKeeper under ``sparklog_connect``); stopped with SIGTERM at the end of the test."""
    from broker_helpers import BrokerProcess

    base = tmp_path_factory.mktemp("brokers")
    started: list[BrokerProcess] = []

    def start(broker_id: int = 1) -> BrokerProcess:
        broker = BrokerProcess(broker_id, base / f"broker-{broker_id}", sparklog_connect, child_processes)
        started.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        for broker in started:
            broker.stop_or_kill()


@pytest.fixture
def cluster(sparklog_connect: str, child_processes: object, tmp_path: Path) -> Iterator[Cluster]:
    """Three broker processes (``replication_helpers.Cluster``, ids 1-3) under this test's root in
    ZooKeeper; every one still running is stopped at the end of the test."""
    from replication_helpers import Cluster

    c = Cluster(sparklog_connect, tmp_path, child_processes)
    try:
        yield c.start()
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------------
# Spark data source fixtures (tests/datasource/ and others; helpers in tests/spark_helpers.py).


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole test session (starting one costs ~5-10 s): use this fixture
    rather than building another session in the same process (``getOrCreate`` would hand back
    whichever came first, with its settings).

    ``local[2, 2]``: two cores, and a failed task is retried once (``local[2]`` would fail the job
    on the first task failure, and the sink's exactly-once test needs a real task retry). UI off,
    2 shuffle partitions, UTC session time zone; Python workers run this interpreter, which has
    sparklog installed (``PYSPARK_PYTHON``: a session built from Python ignores
    ``spark.pyspark.python`` and starts workers with ``python3`` otherwise). Delta Lake is configured
    when its jars are installed (``scripts/install_delta.sh``). The ``sparklog`` data source is
    registered."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import sparklog.datasource

    builder = (
        SparkSession.builder.master("local[2, 2]")
        .appName("sparklog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    # Delta Lake when its jars are installed; Spark's own Kafka connector (format("kafka"), for the
    # tests that read sparklog through its Kafka listener) from the jars `make install` fetched
    from sparklog.bench.kafka_peer import spark_kafka_jars

    jars = spark_kafka_jars(fetch=False)
    try:
        from sparklog.spark_session import delta_jars

        jars = [*delta_jars(), *jars]
        builder = builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension").config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    except (ImportError, FileNotFoundError):
        pass
    builder = builder.config("spark.jars", ",".join(jars))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    sparklog.datasource.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A ``LocalCluster`` (one broker process) under its own chroot of the session's ZooKeeper,
    shared by the data source tests (each test uses its own topics); ``.zookeeper`` connects."""
    from spark_helpers import chrooted_cluster

    with chrooted_cluster(zookeeper.connect_string, tmp_path_factory.mktemp("spark-cluster"), 1, "spark") as cluster:
        yield cluster
