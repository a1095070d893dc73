"""``sparklog bench tier``: lake tiering (issue 19) on a real local cluster: an embedded ZooKeeper
and one broker process with ``--lake-dir`` (``LocalCluster``'s default, ``<data dir>/lake``), the
producer in this process, ``records`` records of ``value_bytes`` (random bytes, no keys) spread
over ``partitions`` partitions, topics with ``segment.bytes=segment_bytes`` so that segments close
and get tiered. Two figures:

* **Tiering rate** (``tier_records_per_s``): ``records`` records are produced (not timed) into a
  topic with ``lake.enabled=false`` (its segments close, nothing is tiered); then the topic is
  altered to ``lake.enabled=true`` and the broker's tiering thread takes the backlog, one Delta
  commit per closed segment. Timed: from the first poll that sees a lake offset move to the first
  poll that sees every partition's lake offset at its log's closed end (polls every 20 ms of the
  leader's ``list_offsets``, see :mod:`sparklog.bench.lake_progress`); counted: the records tiered
  between those two polls (the commits seen by the first poll are before the window). So the
  wait for the tiering thread's next pass after the alter (at most its 1 s idle interval) is left
  out. If a single poll saw the whole backlog tiered, the window starts at the alter instead
  (``tier_timed_from``: ``first-commit`` or ``alter``). The table's row count (the ``deltalake``
  reader) is checked to equal the log's closed ends.
* **Cost to concurrent produce** (``produce_cost_pct``): ``bench produce``'s columnar workload
  (``send_batch_async``, ``in_flight`` tables of one ``batch_records`` batch per partition on
  their way), ``records`` records into a topic with ``lake.enabled=true`` and the same into one
  with ``lake.enabled=false`` (same partitions and ``segment.bytes``), in ``repeat`` interleaved
  rounds (lake first in even rounds, plain first in odd ones) after one small warm-up round. Each
  produce is timed from its first send to its last acknowledgement; while the lake topic's
  produce runs, its segments close and the broker tiers them. After each lake produce the
  tiering is let catch up before anything else is produced, so tiering never overlaps the plain
  produce: ``tier_catch_up_s`` is the seconds from that produce's end until the table reached the
  log's closed end, ``tier_lag_records`` the records in closed segments not yet tiered when it
  ended (how far tiering fell behind the producer; medians over the rounds). The tiering thread
  passes once a second while idle, so a produce much shorter than a second barely overlaps it:
  the default 10M records take seconds. Reported: the medians
  ``produce_records_per_s_lake`` and ``produce_records_per_s_plain`` and ``produce_cost_pct`` =
  (plain - lake) / plain x 100 (issue 19's target: at most 20).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from sparklog.bench import lake_progress
from sparklog.bench.append import make_values
from sparklog.bench.broker_scenarios import produce_columnar
from sparklog.client.admin import Admin
from sparklog.client.cluster_client import ClusterClient
from sparklog.client.producer import Producer
from sparklog.local_cluster import LocalCluster

BACKLOG = "bench-tier-backlog"
LAKE = "bench-tier-lake"
PLAIN = "bench-tier-plain"
SEGMENT_BYTES = 8 << 20


def tier(
    records: int = 10_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 3,
    segment_bytes: int = SEGMENT_BYTES,
    in_flight: int = 4,
    **_: Any,
) -> dict[str, Any]:
    """The tiering rate of a backlog, then the produce rate into a lake-enabled topic against a
    plain one, interleaved (see the module doc)."""
    batch = pa.record_batch({"value": make_values(batch_records, value_bytes)})
    batches = max(1, records // batch_records)
    total = batches * batch_records
    produced: dict[str, list[float]] = {LAKE: [], PLAIN: []}
    catch_up: list[float] = []
    lag: list[int] = []
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = LocalCluster(tmp, brokers=1).start()
        zk = cluster.zookeeper
        data_dir = cluster.brokers[1].data_dir
        client = ClusterClient(zk)
        try:
            segments = {"segment.bytes": str(segment_bytes)}
            with Admin(zk) as admin:
                admin.create_topic(BACKLOG, partitions, 1, segments)
                admin.create_topic(LAKE, partitions, 1, {**segments, "lake.enabled": "true"})
                admin.create_topic(PLAIN, partitions, 1, segments)
            with Producer(zk, acks="1", batch_records=batch_records) as producer:
                # the tiering rate: a backlog of closed segments, then lake.enabled=true
                produce_columnar(producer, batch, batches, partitions, in_flight, BACKLOG)
                ends = lake_progress.closed_ends(data_dir, BACKLOG, partitions)
                with Admin(zk) as admin:
                    admin.alter_topic(BACKLOG, {"lake.enabled": "true"})
                altered = time.perf_counter()
                backlog = lake_progress.wait_tiered(client, BACKLOG, ends)
                _check_table(cluster, BACKLOG, backlog.end)

                def run(topic: str, count: int) -> float:
                    """Seconds to produce ``count`` batches into ``topic``; then, for the lake
                    topic, the wait until its tiering caught up."""
                    took = produce_columnar(producer, batch, count, partitions, in_flight, topic)
                    if topic == LAKE:  # tiering catches up before anything else is produced
                        ended = time.perf_counter()
                        closed = lake_progress.closed_ends(data_dir, LAKE, partitions)
                        tiered = lake_progress.wait_tiered(client, LAKE, closed)
                        catch_up.append(tiered.done - ended)
                        lag.append(tiered.end - tiered.at_start)
                    return took

                for topic in (LAKE, PLAIN):  # warm-up
                    run(topic, min(batches, 4 * partitions))
                catch_up.clear()
                lag.clear()
                for i in range(repeat):
                    for topic in (LAKE, PLAIN) if i % 2 == 0 else (PLAIN, LAKE):
                        produced[topic].append(total / run(topic, batches))
                _check_table(cluster, LAKE, sum(lake_progress.closed_ends(data_dir, LAKE, partitions).values()))
        finally:
            client.close()
            cluster.stop()
    timed_from, took, tiered = _window(backlog, altered)
    lake_rate = statistics.median(produced[LAKE])
    plain_rate = statistics.median(produced[PLAIN])
    return {
        "scenario": "tier",
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "segment_bytes": segment_bytes,
        "batch_records": batch_records,
        "in_flight": in_flight,
        "repeat": repeat,
        "tier_table_rows": backlog.end,  # the backlog's closed segments, all in the table
        "tier_records": tiered,
        "tier_seconds": round(took, 3),
        "tier_timed_from": timed_from,
        "tier_records_per_s": round(tiered / took),
        "tier_mb_per_s": round(tiered * value_bytes / took / 1e6, 1),
        "tier_catch_up_s": round(statistics.median(catch_up), 3),
        "tier_lag_records": round(statistics.median(lag)),
        "produce_records_per_s_lake": round(lake_rate),
        "produce_records_per_s_plain": round(plain_rate),
        "produce_cost_pct": round((plain_rate - lake_rate) / plain_rate * 100, 1),
        "produce_records_per_s_lake_all": [round(r) for r in produced[LAKE]],
        "produce_records_per_s_plain_all": [round(r) for r in produced[PLAIN]],
    }


def _window(backlog: lake_progress.Tiered, altered: float) -> tuple[str, float, int]:
    """What the tiering rate is measured over: (from, seconds, records)."""
    if backlog.done > backlog.first_progress:
        return "first-commit", backlog.done - backlog.first_progress, backlog.end - backlog.at_first_progress
    return "alter", backlog.done - altered, backlog.end


def _check_table(cluster: LocalCluster, topic: str, rows: int) -> None:
    """The topic's Delta table holds ``rows`` rows (no record lost or tiered twice)."""
    found = DeltaTable(f"{cluster.lake_dir}/{topic}").count()
    if found != rows:
        raise AssertionError(f"the Delta table of {topic} holds {found} rows, its closed segments {rows}")
