"""The demo's pipeline, in pieces the notebooks call one by one.

``clicks`` (a typed sparklog topic) -> ``spark.readStream.format("sparklog")`` with a consumer
``group`` -> 1-minute windows per page with a 10-minute watermark (update mode) -> ``foreachBatch``
MERGE into a Delta table. Update mode hands each micro-batch the *current* totals of the windows it
touched, so the MERGE replaces rows: a re-run batch writes the same values again (idempotent), and
the table holds every window, including those the watermark has not closed yet.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.datasource.query_start import start_stream
from sparklog.examples.clickstream import CLICK_SCHEMA_JSON, WATERMARK_DELAY_MS, WINDOW_MS

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, SparkSession

TOPIC = "clicks"
GROUP = "clicks-per-minute"
AGGREGATE_COLUMNS = (
    ("window_start", "timestamp"),
    ("window_end", "timestamp"),
    ("page", "string"),
    ("events", "long"),
    ("purchases", "long"),
    ("revenue_cents", "long"),
)
PRODUCE_BATCH_ROWS = 10_000


# -------------------------------------------------------------------------------------------- topic
def create_topic(zookeeper: str, topic: str = TOPIC, partitions: int = 4) -> None:
    """A typed topic whose values follow :data:`~sparklog.examples.clickstream.CLICK_SCHEMA`."""
    from sparklog import Admin

    with Admin(zookeeper) as admin:
        admin.create_topic(topic, partitions, 1, value_schema=CLICK_SCHEMA_JSON)


def produce(zookeeper: str, table: pa.Table, topic: str = TOPIC) -> float:
    """Send ``table`` (``key``, ``value``, ``timestamp``) in 10,000-row Arrow batches with ``acks=all``;
    keyed records go to their key's partition. Returns the seconds it took."""
    from sparklog import Producer

    began = time.perf_counter()
    with Producer(zookeeper, acks="all") as producer:
        for batch in table.to_batches(max_chunksize=PRODUCE_BATCH_ROWS):
            producer.send_batch(topic, batch)
    return time.perf_counter() - began


# -------------------------------------------------------------------------------------------- spark
def clicks_stream(spark: SparkSession, zookeeper: str, topic: str = TOPIC, group: str = GROUP) -> DataFrame:
    """The topic as a stream; the broker sends only the value fields the aggregation needs, and
    each finished micro-batch's offsets are committed to ``group`` in ZooKeeper."""
    return (
        spark.readStream.format("sparklog")
        .option("zookeeper", zookeeper)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("group", group)
        .option("fields", "page,action,amount_cents")
        .load()
    )


def clicks_per_minute(
    events: DataFrame, window_ms: int = WINDOW_MS, watermark_delay_ms: int = WATERMARK_DELAY_MS
) -> DataFrame:
    """Events, purchases and revenue per page and tumbling window of event time (the record's
    ``timestamp``), with a watermark: events whose window closed before they arrived are dropped."""
    from pyspark.sql import functions as F

    return (
        events.select(F.col("timestamp").alias("event_time"), "value.page", "value.action", "value.amount_cents")
        .withWatermark("event_time", f"{watermark_delay_ms // 1000} seconds")
        .groupBy(F.window("event_time", f"{window_ms // 1000} seconds"), "page")
        .agg(
            F.count("*").alias("events"),
            F.count_if(F.col("action") == "purchase").alias("purchases"),
            F.sum("amount_cents").alias("revenue_cents"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "page",
            "events",
            "purchases",
            "revenue_cents",
        )
    )


def create_delta_table(spark: SparkSession, path: str | Path) -> None:
    """The (empty) aggregate table: version 0."""
    from delta.tables import DeltaTable
    from pyspark.sql.types import StructType

    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in AGGREGATE_COLUMNS]
    schema = StructType.fromJson({"type": "struct", "fields": fields})
    DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema).execute()


def upsert_into(path: str | Path) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function that MERGEs a micro-batch of window totals into the Delta table
    (one new table version per non-empty batch)."""
    from delta.tables import DeltaTable

    def upsert(batch: DataFrame, batch_id: int) -> None:
        batch.persist()  # computed once, not once for isEmpty and again for the MERGE
        try:
            if batch.isEmpty():  # e.g. the batch Spark runs only to advance the watermark
                return
            (
                DeltaTable.forPath(batch.sparkSession, str(path))
                .alias("t")
                .merge(batch.alias("s"), "t.window_start = s.window_start AND t.page = s.page")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )
        finally:
            batch.unpersist()

    return upsert


@dataclasses.dataclass(frozen=True)
class RunReport:
    """One ``availableNow`` run of the query."""

    rows_read: int
    micro_batches: int
    watermark: str | None  # the watermark Spark applied to the run's data, ISO text
    delta_version: int
    seconds: float


def run_available_now(
    spark: SparkSession,
    zookeeper: str,
    checkpoint: str | Path,
    table_path: str | Path,
    topic: str = TOPIC,
    group: str = GROUP,
    timeout_s: float = 600.0,
) -> RunReport:
    """Run the pipeline once over everything in the topic that its checkpoint has not seen, and wait."""
    began = time.perf_counter()
    writer = (
        clicks_per_minute(clicks_stream(spark, zookeeper, topic, group))
        .writeStream.outputMode("update")
        .foreachBatch(upsert_into(table_path))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    query = start_stream(writer.start, checkpoint)  # .start(), again if Spark's Python worker started too slowly
    try:
        if not query.awaitTermination(timeout_s):
            raise TimeoutError(f"the availableNow run did not finish within {timeout_s:.0f} s")
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    watermark = progress[0].eventTime.get("watermark") if progress else None
    return RunReport(
        rows_read=sum(p.numInputRows for p in progress),
        micro_batches=len(progress),
        watermark=watermark,
        delta_version=delta_version(spark, table_path),
        seconds=time.perf_counter() - began,
    )


def delta_version(spark: SparkSession, path: str | Path) -> int:
    """The Delta table's latest version."""
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, str(path)).history(1).first()["version"])


def read_aggregates(spark: SparkSession, path: str | Path, version: int | None = None) -> DataFrame:
    """The aggregate table (``version``: time travel to that version), ordered by window and page."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path)).orderBy("window_start", "page")


def as_reference(aggregates: pa.Table) -> pa.Table:
    """The aggregate table's rows (Arrow, from Spark or the ``deltalake`` package) in the shape of
    :attr:`sparklog.examples.clickstream.Expected.aggregates`: window start in ms, sorted."""
    start = aggregates["window_start"].cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    columns = {"window_start": start, **{c: aggregates[c] for c in ("page", "events", "purchases", "revenue_cents")}}
    return pa.table(columns).sort_by([("window_start", "ascending"), ("page", "ascending")])


# --------------------------------------------------------------------------------------- groups, CLI
def sparklog_cli(*args: str, zookeeper: str) -> str:
    """Run the ``sparklog`` command line (this interpreter's) and return what it printed."""
    command = [sys.executable, "-m", "sparklog.cli.main", *args, "--zookeeper", zookeeper]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)  # a bound on a hang, not a wait
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def group_lag(zookeeper: str, group: str = GROUP, topic: str = TOPIC) -> dict[int, int]:
    """Lag per partition of ``topic`` for ``group`` (log end offset - committed offset; a partition
    the group never committed counts from the log start)."""
    from sparklog import Admin
    from sparklog.errors import UnknownGroup

    with Admin(zookeeper) as admin:
        try:
            rows = {r["partition"]: r["lag"] for r in admin.describe_group(group) if r["topic"] == topic}
        except UnknownGroup:
            rows = {}
        described = admin.describe_topic(topic)["partitions"]
    return {d["partition"]: rows.get(d["partition"], d["log_end_offset"] - d["log_start_offset"]) for d in described}


# -------------------------------------------------------------------------------------------- chart
def to_arrow(df: DataFrame) -> pa.Table:
    """A (small) DataFrame as an Arrow table, without pandas."""
    return df.toArrow()


def plot_clicks_per_minute(aggregates: pa.Table, title: str = "clicks per minute, by page") -> Figure:
    """Stacked events per minute by page, with revenue per minute on a second axis."""
    import numpy as np
    import pyarrow.compute as pc
    from matplotlib.dates import DateFormatter
    from matplotlib.figure import Figure

    starts = aggregates["window_start"]
    if pa.types.is_timestamp(starts.type):
        starts = starts.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    minutes = np.unique(starts.to_numpy())
    pages = sorted(set(aggregates["page"].to_pylist()))
    position = np.searchsorted(minutes, starts.to_numpy())
    times = minutes.astype("datetime64[ms]")

    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.add_subplot()
    stacks = []
    for page in pages:
        mine = pc.equal(aggregates["page"], page).to_numpy(zero_copy_only=False)
        per_minute = np.zeros(len(minutes))
        np.add.at(per_minute, position[mine], aggregates["events"].to_numpy()[mine])
        stacks.append(per_minute)
    ax.stackplot(times, *stacks, labels=pages, alpha=0.85)
    ax.set_ylabel("events per minute")
    ax.set_xlabel("event time (UTC)")
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M"))
    ax.set_title(title)
    revenue = np.zeros(len(minutes))
    np.add.at(revenue, position, aggregates["revenue_cents"].to_numpy() / 100)
    twin = ax.twinx()
    twin.plot(times, revenue, color="black", linewidth=1.2, label="revenue")
    twin.set_ylabel("revenue per minute")
    twin.set_ylim(bottom=0)
    handles, labels = ax.get_legend_handles_labels()
    handles, labels = handles[::-1] + twin.get_lines(), labels[::-1] + ["revenue (right axis)"]
    fig.legend(handles, labels, loc="outside right upper", fontsize="small", frameon=False)
    return fig


def plot_lag(lags: Mapping[str, Mapping[int, int]], title: str = "consumer group lag") -> Figure:
    """Lag per partition as grouped bars, one colour per group (``{group: {partition: lag}}``)."""
    import numpy as np
    from matplotlib.figure import Figure

    partitions = sorted({p for lag in lags.values() for p in lag})
    fig = Figure(figsize=(7, 3.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(lags))
    for i, (group, lag) in enumerate(lags.items()):
        bars = ax.bar(np.arange(len(partitions)) + i * width, [lag.get(p, 0) for p in partitions], width, label=group)
        ax.bar_label(bars, fontsize="small")
    ax.set_xticks(np.arange(len(partitions)) + width * (len(lags) - 1) / 2, [f"partition {p}" for p in partitions])
    ax.set_ylabel("lag (records)")
    ax.set_title(title)
    ax.margins(y=0.12)
    fig.legend(loc="outside right upper", fontsize="small", frameon=False)
    return fig


def save_figure(fig: Figure, path: str | Path, **kwargs: Any) -> Path:
    """Write ``fig`` as a PNG (creating the directory)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=kwargs.pop("dpi", 110), **kwargs)
    return out
