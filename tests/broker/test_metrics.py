"""The brokers' Prometheus endpoints, scraped from real broker processes while records are produced
and consumed, and while a follower is away (one 3-broker cluster for the module)."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from broker_helpers import BrokerProcess, ProcessGroup, registered_brokers
from broker_helpers import scrape_metrics as scrape
from sparklog import Admin, Consumer, Producer
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import RecordTooLarge
from sparklog.local_cluster import LocalCluster, broker_command
from waiting import wait_for

if TYPE_CHECKING:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

WAIT_S = 120.0  # a hang guard only


@pytest.fixture(scope="module")
def cluster(zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    connect = f"{zookeeper.connect_string}/metrics-{uuid.uuid4().hex[:8]}"
    with LocalCluster(Path(tmp_path_factory.mktemp("metrics")), brokers=3, zookeeper=connect) as running:
        yield running


def total(cluster: LocalCluster, name: str, **labels: str) -> float:
    """``name`` summed over every live broker's samples that have ``labels``."""
    out = 0.0
    for broker in cluster.brokers.values():
        if not broker.alive():
            continue
        url = broker.metrics_url()
        assert url is not None
        for (sample, got), value in scrape(url).items():
            if sample == name and set(labels.items()) <= set(got):
                out += value
    return out


def test_each_broker_registers_its_metrics_url(cluster: LocalCluster) -> None:
    with ClusterMetadata(cluster.zookeeper) as meta:
        registered = {i: b.metrics_url for i, b in meta.brokers().items()}
    assert registered == {i: b.metrics_url() for i, b in cluster.brokers.items()}
    for url in registered.values():
        assert url is not None
        assert ("process_open_fds", ()) in scrape(url)
        assert scrape(url)[("process_threads", ())] > 1
        assert scrape(url)[("sparklog_zookeeper_round_trip_ms", ())] > 0


def test_messages_in_and_out_follow_what_is_produced_and_consumed(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("metered", 3, 3)
    produced = 0
    with Producer(cluster.zookeeper, acks="all") as producer:
        for round_ in range(4):
            values = [b"r%d-%d" % (round_, i) for i in range(250)]
            for meta in producer.send_batch("metered", {"value": values}):
                produced += meta.last_offset - meta.base_offset + 1
        sent = producer.metrics()["request-total"]
    assert produced == 1000
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == produced
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered") > 0
    # every request the producer sent was counted, and timed with Kafka's breakdown (acks=all: remote)
    flight_produce = {"listener": "flight", "request": "Produce"}
    assert total(cluster, "kafka_network_requestmetrics_requests_total", **flight_produce) == sent
    for part in ("totaltimems", "localtimems", "remotetimems", "throttletimems"):
        assert total(cluster, f"kafka_network_requestmetrics_{part}_count", **flight_produce) == sent
    assert total(cluster, "kafka_network_requestmetrics_remotetimems_sum", **flight_produce) > 0
    assert total(cluster, "kafka_network_requestmetrics_throttletimems_sum", **flight_produce) == 0
    assert total(cluster, "kafka_log_log_size", topic="metered") > 0

    read = 0
    with Consumer("metered", zookeeper=cluster.zookeeper, auto_offset_reset="earliest") as consumer:
        while read < produced:
            for batch in consumer.poll_batches(timeout=1.0):
                read += batch.num_rows
    assert read == produced
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesout_total", topic="metered") >= produced
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total", topic="metered") > 0
    assert total(cluster, "kafka_network_requestmetrics_totaltimems_count", listener="flight", request="Fetch") > 0


def test_leader_count_sums_to_the_partition_count(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("counted", 4, 2)
    wait_for(
        lambda: total(cluster, "kafka_server_replicamanager_leadercount") == 3 + 4,  # with "metered"'s 3
        WAIT_S,
        "every partition to have a leader",
    )
    assert total(cluster, "kafka_server_replicamanager_partitioncount") == 3 * 3 + 4 * 2
    assert total(cluster, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert total(cluster, "kafka_server_sessionexpirelistener_sessionstate", state="CONNECTED") == 3


def test_under_replicated_partitions_while_a_follower_is_away(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("followed", 2, 3)
        admin.create_topic("kept", 1, 1)  # a single replica: never under-replicated
    wait_for(
        lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions") == 0, WAIT_S, "a healthy start"
    )
    shrinks = total(cluster, "kafka_server_replicamanager_isrshrinks_total")
    expands = total(cluster, "kafka_server_replicamanager_isrexpands_total")
    away = cluster.brokers[3]
    away.stop()
    # every partition with a replica on broker 3 ("metered", "followed": all 3 replicas) is led by
    # 1 or 2 and loses 3 from its ISR; "counted" has 2 replicas, some on 3
    wait_for(
        lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions") >= 3 + 2,
        WAIT_S,
        "the partitions followed by broker 3 to be under-replicated",
    )
    assert total(cluster, "kafka_server_replicamanager_isrshrinks_total") > shrinks
    cluster.restart(3)
    wait_for(
        lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions") == 0,
        WAIT_S,
        "broker 3 to catch up and rejoin every ISR",
    )
    assert total(cluster, "kafka_server_replicamanager_isrexpands_total") > expands


def test_kafka_protocol_requests_and_records_are_counted(cluster: LocalCluster) -> None:
    from confluent_kafka import Producer as KafkaProducer

    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("from-kafka", 1, 3)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all", "log_level": 3})
    for i in range(100):
        producer.produce("from-kafka", value=b"k%d" % i)
    assert producer.flush(60) == 0
    del producer  # its connections close
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesin_total", topic="from-kafka") == 100
    assert total(cluster, "kafka_network_requestmetrics_requests_total", listener="kafka", request="Produce") > 0
    assert total(cluster, "kafka_network_requestmetrics_requests_total", listener="kafka", request="Metadata") > 0
    versions = {
        dict(labels)["version"]
        for broker in cluster.brokers.values()
        for (name, labels), _ in scrape(broker.metrics_url() or "").items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels).get("request") == "ApiVersions"
    }
    assert versions and all(v.isdigit() for v in versions)
    assert total(cluster, "kafka_network_requestmetrics_totaltimems_count", listener="kafka", request="Produce") > 0
    kafka_produce = {"listener": "kafka", "request": "Produce"}
    answered = total(cluster, "kafka_network_requestmetrics_totaltimems_count", **kafka_produce)
    assert total(cluster, "kafka_network_requestmetrics_remotetimems_count", **kafka_produce) == answered
    assert total(cluster, "kafka_network_requestmetrics_remotetimems_sum", **kafka_produce) > 0  # acks=all
    assert total(cluster, "kafka_network_requestmetrics_localtimems_sum", **kafka_produce) > 0

    from confluent_kafka import Consumer as KafkaConsumer

    consumer = KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "group.id": "metered-kafka",
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    try:
        consumer.subscribe(["from-kafka"])
        read = 0
        while read < 100:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                read += 1
    finally:
        consumer.close()
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesout_total", topic="from-kafka") >= 100
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total", topic="from-kafka") > 0
    # its group's offsets (committed as it closed) are in the controller's group lag
    wait_for(
        lambda: lag_of(cluster, "metered-kafka", "from-kafka") == {"0": 0, "sum": 0},
        WAIT_S,
        "the Kafka client's group in the lag",
    )


def group_lag(cluster: LocalCluster) -> dict[int, dict[tuple[str, str, tuple[tuple[str, str], ...]], float]]:
    """Per live broker, its consumer-group samples: (name, group, labels) -> value."""
    out: dict[int, dict[tuple[str, str, tuple[tuple[str, str], ...]], float]] = {}
    for broker_id, broker in cluster.brokers.items():
        if broker.alive():
            samples = scrape(broker.metrics_url() or "")
            out[broker_id] = {
                (name, dict(labels).get("consumergroup", ""), labels): value
                for (name, labels), value in samples.items()
                if name.startswith("kafka_consumergroup_")
            }
    return out


def lag_of(cluster: LocalCluster, group: str, topic: str) -> dict[str, float] | None:
    """The group's lag per partition of ``topic`` and its sum, as the only broker exporting group
    lag (the controller) says; None while no single broker exports it."""
    exporting = {b: samples for b, samples in group_lag(cluster).items() if samples}
    if len(exporting) != 1:
        return None
    (samples,) = exporting.values()
    out: dict[str, float] = {}
    for (name, got, labels), value in samples.items():
        fields = dict(labels)
        if got != group or fields["topic"] != topic:
            continue
        if name == "kafka_consumergroup_lag":
            out[fields["partition"]] = value
        elif name == "kafka_consumergroup_lag_sum":
            out["sum"] = value
    return out


def test_the_controller_exports_each_groups_lag_through_a_controller_kill(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("lagged", 3, 3)
    with Producer(cluster.zookeeper, acks="all") as producer:
        for p in range(3):
            producer.send_batch("lagged", {"value": [b"v%d" % i for i in range(100)]}, partition=p)
    with Consumer("lagged", zookeeper=cluster.zookeeper, group="lagging", partitions=[0, 1, 2]) as consumer:
        consumer.commit({("lagged", 0): 100, ("lagged", 1): 40, ("lagged", 2): 0})
    behind = {"0": 0.0, "1": 60.0, "2": 100.0, "sum": 160.0}
    wait_for(lambda: lag_of(cluster, "lagging", "lagged") == behind, WAIT_S, "the controller to export the lag")
    exporting = [b for b, samples in group_lag(cluster).items() if samples]
    controllers = [
        b
        for b, broker in cluster.brokers.items()
        if scrape(broker.metrics_url() or "")[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    ]
    assert exporting == controllers
    (controller,) = controllers
    samples = group_lag(cluster)[controller]
    offsets = {
        dict(labels)["partition"]: value
        for (name, group, labels), value in samples.items()
        if name == "kafka_consumergroup_current_offset" and group == "lagging"
    }
    assert offsets == {"0": 100, "1": 40, "2": 0}

    # the controller killed: another broker takes over, and the lag with it
    cluster.brokers[controller].kill()
    wait_for(lambda: lag_of(cluster, "lagging", "lagged") == behind, WAIT_S, "a new controller to export the lag")
    assert not group_lag(cluster).get(controller)
    cluster.restart(controller)

    # the group catches up: its lag falls to 0
    with Consumer("lagged", zookeeper=cluster.zookeeper, group="lagging", partitions=[0, 1, 2]) as consumer:
        consumer.commit({("lagged", p): 100 for p in range(3)})
    wait_for(lambda: lag_of(cluster, "lagging", "lagged") == {"0": 0, "1": 0, "2": 0, "sum": 0}, WAIT_S, "a lag of 0")


def test_a_hand_started_broker_serves_metrics_only_when_given_a_port(
    tmp_path: Path, sparklog_connect: str, child_processes: ProcessGroup
) -> None:
    plain = BrokerProcess(1, tmp_path / "broker-1", sparklog_connect, child_processes).start()
    metered = BrokerProcess(
        2, tmp_path / "broker-2", sparklog_connect, child_processes, extra_args=("--metrics-port", "0")
    ).start()
    registered = registered_brokers(sparklog_connect)
    assert registered[1].metrics_url is None
    url = registered[2].metrics_url
    assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert f"broker 2 metrics at {url}" in metered.output()
    assert "metrics at" not in plain.output()
    assert ("kafka_server_replicamanager_partitioncount", ()) in scrape(url)


def test_sparklog_broker_refuses_a_metrics_port_out_of_range(sparklog_connect: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sparklog.cli.main", "broker", "--id", "1", "--port", "0", "--metrics-port", "70000"]
        + ["--data-dir", str(tmp_path / "b"), "--zookeeper", sparklog_connect],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "--metrics-port must be a port from 0 to 65535, got 70000" in result.stderr


def test_a_broker_whose_metrics_port_is_taken_exits_saying_so(sparklog_connect: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*broker_command(1, 0, tmp_path / "b", sparklog_connect), "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result
    assert f"broker 1: error: cannot serve metrics on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_producer_and_a_consumer_count_what_they_sent_and_read(cluster: LocalCluster) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("client-counted", 1, 3)
    registry = CollectorRegistry()
    with Producer(cluster.zookeeper, acks="all", metrics_registry=registry, client_id="counting") as producer:
        for i in range(100):
            producer.send("client-counted", b"one-%d" % i)
        producer.flush()
        for round_ in range(9):
            producer.send_batch("client-counted", {"value": [b"b%d-%d" % (round_, i) for i in range(100)]})
        figures = producer.metrics()
        exposed = generate_latest(registry).decode()
    assert figures["record-send-total"] == 1000
    assert figures["record-error-total"] == 0
    assert 10 <= figures["request-total"] <= 1000  # the 9 tables went in at most 9 requests
    assert figures["batch-total"] >= 10
    assert figures["outgoing-byte-total"] > 1000 * 4
    assert 0 < figures["batch-size-avg"] <= figures["batch-size-max"]
    assert 0 < figures["request-latency-avg"] <= figures["request-latency-max"]
    assert 'kafka_producer_producer_metrics_record_send_total{client_id="counting"} 1000.0' in exposed
    assert "kafka_producer_producer_metrics_request_latency_avg" in exposed
    assert "client_id" not in generate_latest(registry).decode()  # gone with the producer

    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("client-refused", 1, 1, configs={"max.message.bytes": 1000})
    with Producer(cluster.zookeeper) as producer:
        with pytest.raises(RecordTooLarge):
            producer.send_batch("client-refused", {"value": [b"x" * 2000] * 7})
        assert producer.metrics()["record-error-total"] == 7
        assert producer.metrics()["record-send-total"] == 0

    # max_bytes=1: one stored batch read ahead at a time, so the first poll leaves records behind
    with Consumer(
        "client-counted",
        zookeeper=cluster.zookeeper,
        auto_offset_reset="earliest",
        max_bytes=1,
        metrics_registry=registry,
    ) as consumer:
        first = sum(b.num_rows for b in consumer.poll_batches(timeout=10.0))
        assert 0 < first < 1000
        assert consumer.metrics()["records-lag-max"] == 1000 - first
        read = first
        while read < 1000:
            read += sum(b.num_rows for b in consumer.poll_batches(timeout=1.0))
        figures = consumer.metrics()
        exposed = generate_latest(registry).decode()
    assert read == 1000
    assert figures["records-consumed-total"] == 1000
    assert figures["records-lag-max"] == 0
    assert figures["bytes-consumed-total"] > 1000 * 4
    assert figures["fetch-total"] >= 2
    assert figures["poll-total"] >= 2
    consumed = "kafka_consumer_consumer_fetch_manager_metrics_records_consumed_total"
    assert f'{consumed}{{client_id="{consumer.client_id}"}} 1000.0' in exposed


def test_log_flushes_are_counted_and_timed(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("flushed", 1, 1, configs={"flush.messages": 1})  # every append fsyncs
    flushes = total(cluster, "kafka_log_logflushstats_logflushrateandtimems_count")
    with Producer(cluster.zookeeper, acks="1") as producer:
        for i in range(3):
            producer.send_batch("flushed", {"value": [b"f%d" % i]})
    assert total(cluster, "kafka_log_logflushstats_logflushrateandtimems_count") >= flushes + 3
    assert total(cluster, "kafka_log_logflushstats_logflushrateandtimems_sum") > 0


def test_the_dashboards_queries_find_the_brokers_metrics(cluster: LocalCluster) -> None:
    from sparklog.dashboard.panels import PANELS
    from sparklog.dashboard.promql import evaluate
    from sparklog.dashboard.recording import Recorder

    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("dashboarded", 2, 3)
    recorder = Recorder(
        lambda: {f"broker-{i}": b.metrics_url() or "" for i, b in cluster.brokers.items() if b.alive()}, 0.5
    ).start()
    with Producer(cluster.zookeeper, acks="all") as producer:
        i = 0
        while len(recorder.times) < 6:  # traffic through several scrapes
            i += 1
            producer.send_batch("dashboarded", {"value": [b"d%d" % i] * 10})
            # a consumer each time: its fetches begin (a fetch is timed until its stream is ready)
            with Consumer(
                "dashboarded", group="dashboard", zookeeper=cluster.zookeeper, auto_offset_reset="earliest"
            ) as consumer:
                consumer.poll_batches(timeout=0.5)
                consumer.commit()
    recording = recorder.stop()
    assert len(recording.times) >= 6
    empty = [p.title for p in PANELS if not any(evaluate(q.expr, recording) for q in p.queries)]
    assert empty == ["Lake tiering lag (seconds)"]  # this cluster tiers nothing (the lake tests scrape that)


def per_broker(cluster: LocalCluster, name: str, **labels: str) -> dict[int, float]:
    """``name`` with ``labels`` summed per live broker."""
    out: dict[int, float] = {}
    for broker_id, broker in cluster.brokers.items():
        if broker.alive():
            got = scrape(broker.metrics_url() or "")
            out[broker_id] = sum(v for (n, ls), v in got.items() if n == name and set(labels.items()) <= set(ls))
    return out


def test_a_reassignment_moves_the_replicas_and_their_log_sizes(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("moved", 1, 1)
        before = admin.topic("moved").replicas[0]
        with Producer(cluster.zookeeper, acks="all") as producer:
            producer.send_batch("moved", {"value": [b"m%d" % i for i in range(500)]})
        (source,) = before
        target = next(b for b in cluster.brokers if b != source)
        sizes = per_broker(cluster, "kafka_log_log_size", topic="moved")
        assert sizes[source] > 0 and sizes[target] == 0
        admin.reassign_partitions("moved", {0: [target]}, wait=True, timeout_s=WAIT_S)
    wait_for(
        lambda: (
            per_broker(cluster, "kafka_log_log_size", topic="moved")
            == {**{b: 0 for b in cluster.brokers}, target: sizes[source]}
        ),
        WAIT_S,
        lambda: (
            f"the log to move from {source} to {target}: {per_broker(cluster, 'kafka_log_log_size', topic='moved')}"
        ),
    )
    wait_for(lambda: total(cluster, "kafka_server_replicamanager_underreplicatedpartitions") == 0, WAIT_S, "a full ISR")
    led = per_broker(cluster, "kafka_server_brokertopicmetrics_messagesin_total", topic="moved")
    assert led[source] == 500 and led[target] == 0  # appended by the first leader; the copy is replication
