"""``sparklog bench startup``: how long a broker with many partitions and segments takes to serve
again after a restart. A topic of ``partitions`` partitions is created, then (brokers stopped) each
replica's log is written directly with ``segments`` segments of one small batch each (what the
brokers would have written with a small ``segment.bytes``, without producing 30,000 batches over
the wire), closed cleanly. The brokers start again and ``clean_restart_s`` is the time from
starting their processes until an ``acks=all`` produce to partition 0 is acknowledged;
``all_sampled_s`` until one to each of ``SAMPLED`` partitions spread over the topic is. With
``unclean``, the brokers are then killed (``kill -9``) and the same is measured again
(``unclean_*``: that includes the wait for the killed broker's ZooKeeper session to expire, which a
restarted broker must wait for before it registers)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker.log import PartitionLog
from sparklog.client.admin import Admin
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.local_cluster import LocalCluster
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
from sparklog.records import now_ms, wire_schema

TOPIC = "startup"
RECORDS_PER_SEGMENT = 10
VALUE_BYTES = 100
SAMPLED = 10
SERVE_TIMEOUT_S = 600.0


def _batch(records: int) -> pa.RecordBatch:
    now = now_ms()
    return pa.RecordBatch.from_pydict(
        {
            "timestamp": pa.array([now] * records, pa.timestamp("ms", tz="UTC")),
            "key": pa.nulls(records, pa.binary()),
            "value": pa.array([b"v" * VALUE_BYTES] * records, pa.binary()),
            "headers": pa.nulls(records, wire_schema().field("headers").type),
        },
        schema=wire_schema(),
    )


def write_replicas(cluster: LocalCluster, partitions: int, segments: int) -> int:
    """Write every replica's log directly (the brokers are stopped): ``segments`` segments of one
    batch each, closed cleanly. Returns the segments written."""
    with ClusterMetadata(cluster.zookeeper) as zk:
        meta = zk.topic(TOPIC)
    batch = _batch(RECORDS_PER_SEGMENT)
    written = 0
    for broker_id, broker in cluster.brokers.items():
        for p in range(partitions):
            if broker_id not in meta.replicas[p]:
                continue
            with PartitionLog(Path(broker.data_dir) / f"{TOPIC}-{p}", meta.config) as log:
                for i in range(segments):
                    if i:
                        log.roll()
                    log.append(batch)
                    written += 1
    return written


def _produce_acked(zk: ClusterMetadata, partition: int, batch: pa.RecordBatch, deadline: float) -> None:
    """One ``acks=all`` produce to the partition's current leader, retried until acknowledged."""
    command = {"type": wire.PRODUCE, "topic": TOPIC, "partition": partition, "acks": "all"}
    while True:
        try:
            leader = zk.partition_state(TOPIC, partition).leader
            info = zk.brokers().get(leader)
            if info is not None:
                client = flight.FlightClient(info.location)
                try:
                    options = flight.FlightCallOptions(timeout=10.0)
                    writer, reader = open_produce(client, command, batch.schema, options)
                    write_frame(writer, batch)
                    ack = reader.read()
                    writer.done_writing()
                    writer.close()
                    if ack is not None and "base_offset" in wire.decode(ack):
                        return
                finally:
                    client.close()
        except (flight.FlightError, OSError):
            pass  # not serving yet
        if time.monotonic() > deadline:
            raise RuntimeError(f"no acks=all produce to {TOPIC}-{partition} acknowledged within {SERVE_TIMEOUT_S} s")
        time.sleep(0.02)


def _time_restart(cluster: LocalCluster, partitions: int) -> tuple[float, float]:
    """Start every broker; seconds until partition 0 acknowledges an acks=all produce, and until
    each sampled partition has."""
    sampled = sorted({round(i * (partitions - 1) / max(SAMPLED - 1, 1)) for i in range(SAMPLED)})
    batch = _batch(1)
    with ClusterMetadata(cluster.zookeeper) as zk:
        started = time.monotonic()
        deadline = started + SERVE_TIMEOUT_S
        for broker in cluster.brokers.values():
            broker.start()
        _produce_acked(zk, 0, batch, deadline)
        first = time.monotonic() - started
        for p in sampled:
            _produce_acked(zk, p, batch, deadline)
        return first, time.monotonic() - started


def run(
    partitions: int = 3000,
    segments: int = 10,
    brokers: int = 1,
    replication_factor: int = 1,
    unclean: bool = False,
    **_: Any,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-startup-") as tmp:
        cluster = LocalCluster(tmp, brokers=max(brokers, replication_factor)).start()
        try:
            with Admin(cluster.zookeeper) as admin:
                admin.create_topic(TOPIC, partitions, replication_factor, configs={"segment.bytes": 1024})
            for broker in cluster.brokers.values():
                broker.stop()
            began = time.monotonic()
            written = write_replicas(cluster, partitions, segments)
            write_s = time.monotonic() - began
            result: dict[str, Any] = {
                "scenario": "startup",
                "partitions": partitions,
                "segments": written,
                "brokers": len(cluster.brokers),
                "replication_factor": replication_factor,
                "write_s": round(write_s, 1),
            }
            first, sampled = _time_restart(cluster, partitions)
            result |= {"clean_restart_s": round(first, 2), "all_sampled_s": round(sampled, 2)}
            if unclean:
                for broker in cluster.brokers.values():
                    broker.kill()
                first, sampled = _time_restart(cluster, partitions)
                result |= {"unclean_restart_s": round(first, 2), "unclean_all_sampled_s": round(sampled, 2)}
        finally:
            cluster.stop()
    return result | {"load_average": os.getloadavg()[0]}
