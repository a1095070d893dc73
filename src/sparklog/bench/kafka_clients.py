"""``sparklog bench kafka-clients``: Kafka's own clients against sparklog's Kafka listener.

The workload a team moving from Kafka runs first: confluent-kafka (librdkafka) producing
``records`` values of ``value_bytes`` one ``produce()`` at a time (lz4, ``linger.ms=5``, ``acks``
as asked), then a confluent-kafka consumer reading them all back (partitions assigned, batch
``consume()``). ``--against kafka`` runs the very same functions against Apache Kafka
(:mod:`sparklog.bench.kafka_peer`), so the ratio compares brokers, not clients.

Figures: ``send_records_per_s`` (produce) and ``python_client_records_per_s`` (consume).
``--secure`` runs the same clients over SASL_SSL (SCRAM-SHA-256, TLS) against a secured cluster's
Kafka listeners, as the admin (ACLs on): the cost of security, against the plaintext figures.

``sparklog bench kafka-spark-read``: Spark's own ``format("kafka")`` connector reading a topic that
confluent-kafka filled (``read_records_per_s``), through sparklog's Kafka listener or from Kafka.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

from sparklog.bench.kafka_peer import (
    TOPIC,
    WARMUP_TOPIC,
    KafkaCluster,
    confluent_consume,
    confluent_produce,
    spark_subprocess,
)

PRODUCER_CONFIG = {"compression.type": "lz4", "linger.ms": 5}


def _workload(
    bootstrap: str, records: int, value_bytes: int, partitions: int, acks: str, security: dict[str, str] | None = None
) -> dict[str, Any]:
    """``security``: the clients' security settings (librdkafka's names; None: plaintext)."""
    security = {k: v for k, v in (security or {}).items() if k != "bootstrap.servers"}
    produced = confluent_produce(bootstrap, TOPIC, records, value_bytes, acks, {**PRODUCER_CONFIG, **security})
    consumed = confluent_consume(bootstrap, TOPIC, records + 1, partitions, security)  # + the warm-up record
    return {
        "send_records_per_s": produced["send_records_per_s"],
        "python_client_records_per_s": consumed["records_per_s"],
    }


def _result(
    records: int, value_bytes: int, partitions: int, acks: str, replication_factor: int, secure: bool = False
) -> dict[str, Any]:
    return {
        "scenario": "kafka-clients",
        "security_protocol": "SASL_SSL" if secure else "PLAINTEXT",
        "records": records,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "acks": acks,
        "replication_factor": replication_factor,
        "compression": PRODUCER_CONFIG["compression.type"],
    }


def run(
    records: int = 1_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    acks: str = "1",
    replication_factor: int = 1,
    brokers: int = 1,
    secure: bool = False,
    **_: Any,
) -> dict[str, Any]:
    """confluent-kafka into a local sparklog cluster's Kafka listeners (``secure``: SASL_SSL)."""
    from sparklog.client.admin import Admin
    from sparklog.local_cluster import LocalCluster

    with (
        tempfile.TemporaryDirectory(prefix="sparklog-bench-kafka-clients-") as tmp,
        LocalCluster(tmp, brokers=max(brokers, replication_factor), secure=secure) as cluster,
    ):
        configs = {"min.insync.replicas": str(min(2, replication_factor))} if replication_factor > 1 else {}
        address = {"config": cluster.client_config()} if secure else {"bootstrap_servers": cluster.bootstrap_servers}
        with Admin(**address) as admin:
            admin.create_topic(TOPIC, partitions, replication_factor, configs)
        security = cluster.kafka_client_config() if secure else None
        figures = _workload(cluster.kafka_bootstrap_servers, records, value_bytes, partitions, acks, security)
    return {**_result(records, value_bytes, partitions, acks, replication_factor, secure), **figures}


def kafka_run(
    records: int = 1_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    acks: str = "1",
    replication_factor: int = 1,
    brokers: int = 1,
    **_: Any,
) -> dict[str, Any]:
    """The same against Apache Kafka (KRaft nodes on loopback)."""
    kafka = KafkaCluster(brokers=max(brokers, replication_factor), partitions=partitions).start()
    with contextlib.closing(kafka):
        configs = {"min.insync.replicas": str(min(2, replication_factor))} if replication_factor > 1 else {}
        kafka.create_topic(TOPIC, partitions, replication_factor, configs)
        figures = _workload(kafka.bootstrap, records, value_bytes, partitions, acks)
    return {**_result(records, value_bytes, partitions, acks, replication_factor), **figures}


def _spark_read(bootstrap: str, records: int, value_bytes: int) -> dict[str, Any]:
    """Fill the warm-up topic and the benchmark topic with confluent-kafka, then time Spark's
    ``format("kafka")`` reading the benchmark topic (``availableNow`` into ``noop``, in a fresh
    Spark process: ``kafka_peer``'s Spark read job)."""
    confluent_produce(bootstrap, WARMUP_TOPIC, 20_000, value_bytes, "1", dict(PRODUCER_CONFIG))
    confluent_produce(bootstrap, TOPIC, records, value_bytes, "1", dict(PRODUCER_CONFIG))
    got = spark_subprocess("read", bootstrap=bootstrap, topic=TOPIC, records=records + 1, repeat=1)
    return {"read_records_per_s": round((records + 1) / got["seconds"]), "seconds": got["seconds"]}


def spark_read_run(records: int = 2_000_000, value_bytes: int = 100, partitions: int = 6, **_: Any) -> dict[str, Any]:
    """Spark's own Kafka connector reading a topic of sparklog's (through its Kafka listener)
    that Kafka's clients filled."""
    from sparklog.client.admin import Admin
    from sparklog.local_cluster import LocalCluster

    with (
        tempfile.TemporaryDirectory(prefix="sparklog-bench-kafka-spark-") as tmp,
        LocalCluster(tmp, brokers=1) as cluster,
    ):
        with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, partitions, 1)
            admin.create_topic(WARMUP_TOPIC, partitions, 1)
        figures = _spark_read(cluster.kafka_bootstrap_servers, records, value_bytes)
    return {"scenario": "kafka-spark-read", "records": records, "value_bytes": value_bytes, **figures}


def kafka_spark_read_run(
    records: int = 2_000_000, value_bytes: int = 100, partitions: int = 6, **_: Any
) -> dict[str, Any]:
    """The same against Apache Kafka."""
    kafka = KafkaCluster(brokers=1, partitions=partitions).start()
    with contextlib.closing(kafka):
        kafka.create_topic(TOPIC, partitions, 1)
        kafka.create_topic(WARMUP_TOPIC, partitions, 1)
        figures = _spark_read(kafka.bootstrap, records, value_bytes)
    return {"scenario": "kafka-spark-read", "records": records, "value_bytes": value_bytes, **figures}
