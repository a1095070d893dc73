"""``sparklog bench produce|consume|latency``: a real ZooKeeper and broker processes on loopback,
clients in this process, 100-byte values by default."""

from __future__ import annotations

import collections
import contextlib
import gc
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.bench.append import make_values
from sparklog.bench.paced_values import WARMUP_FLAG_AT, paced_values
from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.local_cluster import LocalCluster

TOPIC = "bench"


def _cluster_and_topic(
    tmp: str, partitions: int, replication_factor: int, brokers: int, secure: bool = False
) -> LocalCluster:
    """A started local cluster with the benchmark topic; ``secure``: SASL_SSL and ACLs, as
    ``sparklog up --secure`` (clients connect with ``cluster.client_config()``)."""
    cluster = LocalCluster(tmp, brokers=max(brokers, replication_factor), secure=secure).start()
    with Admin(cluster.zookeeper, config=cluster.client_config()) as admin:
        configs = {"min.insync.replicas": str(min(2, replication_factor))} if replication_factor > 1 else {}
        admin.create_topic(TOPIC, partitions, replication_factor, configs)
    return cluster


def produce_columnar(
    producer: Producer, batch: pa.RecordBatch, batches: int, partitions: int, in_flight: int = 1, topic: str = TOPIC
) -> float:
    """``send_batch`` tables of one batch per partition (the producer spreads the batches of an
    unkeyed table over the partitions and sends them in parallel) into ``topic``; with
    ``in_flight`` > 1 through ``send_batch_async``, that many tables on their way at once (as
    Kafka's perf tool keeps requests in flight). Returns the seconds until the last was acknowledged."""
    table = pa.Table.from_batches([batch] * partitions)
    calls, rest = divmod(batches, partitions)
    tables = [table] * calls + ([pa.Table.from_batches([batch] * rest)] if rest else [])
    waiting: collections.deque[Any] = collections.deque()
    start = time.perf_counter()
    for each in tables:
        waiting.append(producer.send_batch_async(topic, each))
        if len(waiting) >= in_flight:
            waiting.popleft().result()
        _THREADS[0] = max(_THREADS[0], _process_threads())
    for future in waiting:
        future.result()
    return time.perf_counter() - start


_THREADS = [0]  # the most threads this process ran while producing (the client's, Python's and native)


@contextlib.contextmanager
def _scraped(cluster: LocalCluster, scrape_s: float | None) -> Iterator[list[int]]:
    """While inside, every broker's metrics endpoint scraped every ``scrape_s`` seconds (None: not
    at all) by a process of its own, as Prometheus would; yields a list whose one item is, once
    the block is left, how many scrape rounds it made."""
    rounds = [0]
    if scrape_s is None:
        yield rounds
        return
    urls = [b.metrics_url() or "" for b in cluster.brokers.values()]
    scraper = subprocess.Popen(
        [sys.executable, "-m", "sparklog.dashboard.recording", "--every", str(scrape_s), *urls],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield rounds
    finally:
        out, _ = scraper.communicate("", timeout=60)  # stdin closed: it stops and says how many
        rounds[0] = int(out.split()[-1]) if out.split() else 0


def produce(
    records: int = 10_000_000,
    value_bytes: int = 100,
    batch_records: int = 10_000,
    partitions: int = 6,
    acks: str = "1",
    replication_factor: int = 1,
    brokers: int = 1,
    send_records: int = 1_000_000,
    in_flight: int = 4,
    secure: bool = False,
    scrape: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Columnar ``send_batch_async`` of ``records`` records with ``in_flight`` tables on their way,
    the same with ``send_batch`` (one table at a time), then per-record ``send()`` of ``send_records``.
    ``scrape``: every broker's metrics endpoint scraped every that many seconds meanwhile."""
    batch = pa.record_batch({"value": make_values(batch_records, value_bytes)})
    batches = max(1, records // batch_records)
    _THREADS[0] = 0
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = _cluster_and_topic(tmp, partitions, replication_factor, brokers, secure)
        try:
            config = cluster.client_config() or {"bootstrap.servers": cluster.bootstrap_servers}  # as consume's
            with (
                Producer(acks=acks, batch_records=batch_records, config=config) as producer,
                _scraped(cluster, scrape) as scrapes,
            ):
                produce_columnar(producer, batch, min(batches, 4 * partitions), partitions)  # warm-up
                took = produce_columnar(producer, batch, batches, partitions, in_flight)
                sync_took = produce_columnar(producer, batch, batches, partitions)
                value = b"x" * value_bytes
                start = time.perf_counter()
                for i in range(send_records):
                    producer.send(TOPIC, value)
                    if not i % 100_000:
                        _THREADS[0] = max(_THREADS[0], _process_threads())
                producer.flush()
                send_took = time.perf_counter() - start
        finally:
            cluster.stop()
    total = batches * batch_records
    return {
        "scenario": "produce",
        "records": total,
        "value_bytes": value_bytes,
        "batch_records": batch_records,
        "partitions": partitions,
        "acks": acks,
        "replication_factor": replication_factor,
        "in_flight": in_flight,
        "secure": secure,
        "records_per_s": round(total / took),
        "mb_per_s": round(total * value_bytes / took / 1e6, 1),
        "sync_records_per_s": round(total / sync_took),
        "send_records": send_records,
        "send_records_per_s": round(send_records / send_took),
        "threads": _THREADS[0],
        "scrape_s": scrape,
        "scrapes": scrapes[0],
    }


def consume(
    records: int = 10_000_000,
    value_bytes: int = 100,
    batch_records: int = 10_000,
    partitions: int = 6,
    repeat: int = 3,
    fields: str | None = None,
    secure: bool = False,
    brokers: int = 1,
    scrape: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Produce ``records`` records (not timed), then read them all back columnar, ``repeat`` times;
    the partitions (one replica each) are spread over ``brokers``. ``scrape``: every broker's
    metrics endpoint scraped every that many seconds while reading.
    With ``fields``: :func:`consume_fields` (a typed topic of 20 columns, all against ``fields``)."""
    if fields is not None:
        return consume_fields(
            records=records, batch_records=batch_records, partitions=partitions, repeat=repeat, fields=fields
        )
    batch = pa.record_batch({"value": make_values(batch_records, value_bytes)})
    batches = max(1, records // batch_records)
    total = batches * batch_records
    times = []
    threads = fetch_threads = 0
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = _cluster_and_topic(tmp, partitions, 1, brokers, secure)
        try:
            config = cluster.client_config()
            with Producer(cluster.zookeeper, config=config) as producer:
                produce_columnar(producer, batch, batches, partitions)
            # the consumer connects as a Kafka client does: to brokers only (no ZooKeeper session,
            # whose client would add 3 threads to the count)
            consumer_config = config or {"bootstrap.servers": cluster.bootstrap_servers}
            with _scraped(cluster, scrape) as scrapes:
                for _ in range(repeat + 1):  # the first pass warms the broker's page cache and maps
                    with Consumer(
                        TOPIC, auto_offset_reset="earliest", max_bytes=32 << 20, config=consumer_config
                    ) as consumer:
                        seen = 0
                        start = time.perf_counter()
                        while seen < total:
                            seen += sum(b.num_rows for b in consumer.poll_batches(timeout=5.0))
                        times.append(time.perf_counter() - start)
                        threads = max(threads, _process_threads())
                        fetch_threads = max(fetch_threads, _fetch_threads())
                        if seen != total:
                            raise AssertionError(f"consumed {seen} records, produced {total}")
        finally:
            cluster.stop()
    took = statistics.median(times[1:])
    return {
        "scenario": "consume",
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "brokers": brokers,
        "secure": secure,
        "records_per_s": round(total / took),
        "mb_per_s": round(total * value_bytes / took / 1e6, 1),
        "threads": threads,
        "fetch_threads": fetch_threads,
        "scrape_s": scrape,
        "scrapes": scrapes[0],
    }


def _process_threads() -> int:
    """Threads of this process (the client: Python's and gRPC's), from /proc."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


def _fetch_threads() -> int:
    """The consumer's fetch threads (``sparklog.client.fetch_session``)."""
    return sum(1 for t in threading.enumerate() if t.name.startswith("sparklog-fetch-"))


def _latency_consumer(zookeeper: str, total: int, ready: Any, results: Any) -> None:
    """Runs in its own process (as a real consumer would): collects receive - send times in ms of
    ``total`` measured records (value: send time, 8 bytes, then a byte that is 1 for warm-up
    records, which are skipped)."""
    consumer = Consumer(TOPIC, zookeeper=zookeeper, auto_offset_reset="latest", max_wait_ms=200)
    consumer.poll_batches(timeout=0.1)
    ready.set()
    latencies, received = [], 0
    deadline = time.monotonic() + 180
    while received < total and time.monotonic() < deadline:
        for batch in consumer.poll_batches(timeout=0.2):
            now = time.perf_counter_ns()  # CLOCK_MONOTONIC: comparable across processes on Linux
            values = batch.column("value")
            data = np.frombuffer(values.buffers()[2], dtype=np.uint8)
            offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)
            starts = offsets[values.offset : values.offset + len(values)]
            starts = starts[data[starts + WARMUP_FLAG_AT] == 0]  # measured records only
            sent = np.frombuffer(data[(starts[:, None] + np.arange(8)).ravel()].tobytes(), dtype=np.int64)
            latencies.append((now - sent) / 1e6)
            received += len(starts)
    consumer.close()
    results.put(np.concatenate(latencies) if latencies else np.array([np.nan]))


def latency(
    value_bytes: int = 100,
    rate: int = 10_000,
    seconds: float = 5.0,
    partitions: int = 6,
    acks: str = "1",
    warmup_s: float = 5.0,
    **_: Any,
) -> dict[str, Any]:
    """Produce at a fixed ``rate`` (records/s) with per-record ``send()`` and no linger while a
    consumer in another process long-polls; each value carries its send time (monotonic clock),
    latency = receive time - send time. As on the Kafka side (``kafka_peer.confluent_latency``):
    one record to every partition first (the producer opens its streams), a full garbage
    collection (what starting the cluster and the consumer left behind would otherwise be
    collected by a 30-50 ms pause of the producer inside the measured seconds), then ``warmup_s``
    at the same rate that is not measured."""
    import multiprocessing

    total = int(rate * seconds)
    values = paced_values(rate, int(rate * warmup_s), total, value_bytes)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = _cluster_and_topic(tmp, partitions, 1, 1)
        reader = None
        try:
            with Producer(cluster.zookeeper, acks=acks, linger_ms=0) as producer:
                for p in range(partitions):  # before the consumer takes its start offsets
                    producer.send(TOPIC, b"\1" * value_bytes, partition=p)
                producer.flush()
                ready, results = ctx.Event(), ctx.Queue()
                reader = ctx.Process(target=_latency_consumer, args=(cluster.zookeeper, total, ready, results))
                reader.start()
                if not ready.wait(60):
                    raise TimeoutError("the latency consumer did not start")
                gc.collect()  # the set-up's garbage is not collected inside the measured seconds
                for value in values:
                    producer.send(TOPIC, value)
            all_ms = results.get(timeout=180)
            reader.join(30)
        finally:
            if reader is not None and reader.is_alive():
                reader.kill()
                reader.join(10)
            cluster.stop()
    return {
        "scenario": "latency",
        "records": total,
        "received": int(np.count_nonzero(~np.isnan(all_ms))),
        "rate": rate,
        "warmup_s": warmup_s,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "acks": acks,
        "p50_ms": round(float(np.percentile(all_ms, 50)), 3),
        "p99_ms": round(float(np.percentile(all_ms, 99)), 3),
        "max_ms": round(float(np.max(all_ms)), 3),
    }


def failover(repeat: int = 3, partitions: int = 3, value_bytes: int = 100, **_: Any) -> dict[str, Any]:
    """RF=3 on 3 brokers, min ISR 2, acks=all: ``kill -9`` the leader of partition 0 and time until an
    acks=all produce to that partition succeeds again; then restart the broker, let it rejoin and
    take its preferred leadership back, and repeat."""
    times = []
    value = b"x" * value_bytes
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = _cluster_and_topic(tmp, partitions, 3, 3)
        try:
            with Producer(cluster.zookeeper, acks="all", linger_ms=0) as producer, Admin(cluster.zookeeper) as admin:
                for _ in range(repeat):
                    _wait_for_full_isr(admin, partitions)
                    producer.send(TOPIC, value, partition=0).result(30)
                    leader = admin.describe_topic(TOPIC)["partitions"][0]["leader"]
                    start = time.perf_counter()
                    cluster.brokers[leader].kill()
                    producer.send(TOPIC, value, partition=0).result(60)
                    times.append(time.perf_counter() - start)
                    cluster.restart(leader)
        finally:
            cluster.stop()
    return {
        "scenario": "failover",
        "repeat": repeat,
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "zookeeper_session_timeout_s": 4.0,
        "failover_s": round(statistics.median(times), 3),
        "failover_max_s": round(max(times), 3),
        "failover_all_s": [round(t, 3) for t in times],
    }


def _wait_for_full_isr(admin: Admin, partitions: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = admin.describe_topic(TOPIC)["partitions"]
        if all(len(p["isr"]) == 3 and p["leader"] == p["replicas"][0] for p in described):
            return
        time.sleep(0.2)
    raise TimeoutError("the replicas did not all get back in sync")


def typed_schema(columns: int = 20) -> dict[str, Any]:
    """An Avro record of ``columns`` fields: longs, doubles and short strings in turn."""
    kinds = ["long", "double", "string"]
    return {
        "type": "record",
        "name": "Wide",
        "fields": [{"name": f"f{i}", "type": kinds[i % 3]} for i in range(columns)],
    }


def typed_values(rows: int, columns: int = 20, seed: int = 3) -> pa.StructArray:
    """A struct column of ``rows`` random values matching :func:`typed_schema` (built columnar)."""
    rng = np.random.default_rng(seed)
    arrays, names = [], []
    for i in range(columns):
        kind = i % 3
        if kind == 0:
            arrays.append(pa.array(rng.integers(0, 1 << 40, rows)))
        elif kind == 1:
            arrays.append(pa.array(rng.random(rows)))
        else:
            arrays.append(pa.array(rng.integers(0, 10**6, rows)).cast(pa.string()))
        names.append(f"f{i}")
    return pa.StructArray.from_arrays(arrays, names=names)


def fill_typed_topic(zookeeper: str, topic: str, records: int, batch_records: int, partitions: int) -> int:
    """Produce about ``records`` rows of :func:`typed_values` (whole batches, every partition the
    same number) into a typed topic; returns how many."""
    table = pa.Table.from_batches([pa.record_batch({"value": typed_values(batch_records)})] * partitions)
    rounds = max(1, records // (batch_records * partitions))
    with Producer(zookeeper, batch_records=batch_records) as producer:
        for _ in range(rounds):
            producer.send_batch(topic, table)
    return rounds * partitions * batch_records


def consume_fields(
    records: int = 2_000_000,
    batch_records: int = 10_000,
    partitions: int = 6,
    repeat: int = 3,
    fields: str = "f0,f1",
    **_: Any,
) -> dict[str, Any]:
    """A typed topic of 20 columns: consume every record with all 20 columns, then with ``fields``
    only (the broker projects and sends just those columns); bytes received and records/s."""
    import json

    wanted = [f.strip() for f in fields.split(",") if f.strip()]
    total = records
    runs: dict[str, list[tuple[float, int]]] = {"all": [], "fields": []}
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = LocalCluster(tmp, brokers=1).start()
        try:
            with Admin(cluster.zookeeper) as admin:
                admin.create_topic(TOPIC, partitions, 1, value_schema=json.dumps(typed_schema()))
            total = fill_typed_topic(cluster.zookeeper, TOPIC, total, batch_records, partitions)
            for _ in range(repeat + 1):  # the first round warms caches
                for name, projection in (("all", None), ("fields", wanted)):
                    with Consumer(
                        TOPIC,
                        zookeeper=cluster.zookeeper,
                        auto_offset_reset="earliest",
                        max_bytes=32 << 20,
                        fields=projection,
                    ) as consumer:
                        seen = size = 0
                        start = time.perf_counter()
                        while seen < total:
                            for batch in consumer.poll_batches(timeout=5.0):
                                seen += batch.num_rows
                                size += batch.column("value").nbytes
                        runs[name].append((time.perf_counter() - start, size))
        finally:
            cluster.stop()
    took = {k: statistics.median(t for t, _ in v[1:]) for k, v in runs.items()}
    size = {k: v[-1][1] for k, v in runs.items()}
    return {
        "scenario": "consume-fields",
        "records": total,
        "columns": 20,
        "fields": ",".join(wanted),
        "partitions": partitions,
        "records_per_s": round(total / took["fields"]),
        "all_columns_records_per_s": round(total / took["all"]),
        "value_bytes_received": size["fields"],
        "all_columns_value_bytes_received": size["all"],
        "speedup": round(took["all"] / took["fields"], 2),
        "bytes_ratio": round(size["all"] / max(1, size["fields"]), 2),
    }
