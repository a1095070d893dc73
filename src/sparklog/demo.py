"""``make demo``: a click stream through sparklog and Spark Structured Streaming into Delta Lake.

Starts an embedded ZooKeeper and one broker (data under ``data/demo``, wiped first, so every run starts
clean), creates the typed topic ``clicks`` (4 partitions), and then, four times: produces a wave of
100,000 click events (15 minutes of event time, keyed by user, a little out of order, plus stragglers
up to 45 minutes late) and runs the streaming query once with ``Trigger.AvailableNow`` (as a scheduled
job would): ``format("sparklog")`` with consumer group ``clicks-per-minute`` -> events, purchases
and revenue per page and 1-minute window with a 10-minute watermark -> MERGE into a Delta table.

It then checks the table against a reference computed without Spark
(:func:`sparklog.examples.clickstream.expected`), shows ``sparklog groups describe`` (lag 0), draws
the chart, prints a summary (also written to ``summary.json``) and stops everything it started.
Exit status 0 when every check holds.

``python -m sparklog.demo [--data-dir DIR] [--waves N] [--events-per-wave N] [--master URL]
[--zookeeper HOST:PORT]`` (env ``SPARKLOG_DEMO_DIR`` for the data dir). ``--master`` runs the query
on a Spark cluster (``spark://host:7077``: a standalone one; default ``local[2]``), whose executors
import this ``sparklog`` (:func:`sparklog.spark_session.local_spark`) and write the Delta table and
checkpoint in the data dir, so it must be a directory they all see (a shared filesystem).
``--zookeeper`` uses a running sparklog cluster instead of starting one (executors on other machines
cannot reach a broker on this one's loopback); it must not have a ``clicks`` topic yet, and keeps
running afterwards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from sparklog.errors import TopicExists
from sparklog.examples import pipeline
from sparklog.examples.clickstream import StreamSpec, Wave, expected, make_wave

DATA_DIR_ENV = "SPARKLOG_DEMO_DIR"
DEFAULT_DATA_DIR = Path("data") / "demo"
DEFAULT_MASTER = "local[2]"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sparklog.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR)))
    parser.add_argument("--waves", type=int, default=StreamSpec.waves)
    parser.add_argument("--events-per-wave", type=int, default=StreamSpec.events_per_wave)
    parser.add_argument(
        "--master", default=DEFAULT_MASTER, help="Spark master: local[N], or spark://HOST:PORT of a standalone cluster"
    )
    parser.add_argument(
        "--zookeeper",
        default=None,
        metavar="HOST:PORT[,...]",
        help="use this running sparklog cluster (without a 'clicks' topic) instead of starting one",
    )
    return parser.parse_args(argv)


class _Clock:
    def __init__(self) -> None:
        self.began = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def say(self, text: str) -> None:
        print(f"[{self.elapsed:5.1f}s] {text}", flush=True)


def _iso(ms: int | None) -> str:
    return "none" if ms is None else time.strftime("%H:%M:%S", time.gmtime(ms / 1000))


def run(data_dir: Path, spec: StreamSpec, master: str = DEFAULT_MASTER, zookeeper: str | None = None) -> dict[str, Any]:
    """The whole demo, on Spark ``master``, against the cluster at ``zookeeper`` (None: one started
    for the run and stopped after it); returns the summary (``ok`` says whether every check held)."""
    from sparklog.local_cluster import LocalCluster
    from sparklog.spark_session import local_spark

    clock = _Clock()
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    table_path = (data_dir / "delta" / "clicks_per_minute").resolve()
    checkpoint = (data_dir / "checkpoints" / pipeline.GROUP).resolve()
    cluster = LocalCluster(data_dir / "cluster", brokers=1) if zookeeper is None else None
    spark = None
    try:
        if cluster is not None:
            cluster.start()
            zk = cluster.zookeeper
            clock.say(f"ZooKeeper at {zk}, broker 1 at 127.0.0.1:{cluster.brokers[1].port}; data in {data_dir}")
        else:
            zk = zookeeper
            clock.say(f"the sparklog cluster at ZooKeeper {zk}; data in {data_dir}")
        pipeline.create_topic(zk, pipeline.TOPIC, partitions=4)
        clock.say(f"topic {pipeline.TOPIC!r}: 4 partitions, Avro value schema Click(user, page, action, ...)")
        spark = local_spark("sparklog-demo", master=master)
        spark.sparkContext.setLogLevel("ERROR")
        pipeline.create_delta_table(spark, table_path)
        clock.say(f"Spark {spark.version} ({master}) with Delta Lake; Delta table {table_path} (version 0, empty)")

        waves: list[Wave] = []
        runs: list[dict[str, Any]] = []
        for index in range(spec.waves):
            wave = make_wave(spec, index)
            waves.append(wave)
            seconds = pipeline.produce(zk, wave.table)
            lag_before = sum(pipeline.group_lag(zk).values())
            clock.say(
                f"wave {index + 1}/{spec.waves}: produced {wave.events:,} events "
                f"({_iso(wave.first_ms)}-{_iso(wave.last_ms)} UTC, {wave.stragglers:,} stragglers) "
                f"in {seconds:.2f} s; group lag {lag_before:,}"
            )
            report = pipeline.run_available_now(spark, zk, checkpoint, table_path)
            lag_after = sum(pipeline.group_lag(zk).values())
            run = {"wave": index + 1, "events": wave.events, "lag_before": lag_before, "lag_after": lag_after}
            runs.append({**run, **dataclasses.asdict(report)})
            clock.say(
                f"  query run {index + 1}: read {report.rows_read:,} rows in {report.micro_batches} micro-batch(es), "
                f"watermark {report.watermark}, Delta version {report.delta_version}, {report.seconds:.1f} s; "
                f"group lag {lag_after:,}"
            )

        reference = expected(waves)
        landed = pipeline.to_arrow(pipeline.read_aggregates(spark, table_path))
        table = pipeline.as_reference(landed)
        matches = table.equals(reference.aggregates)
        sums = {c: int(pc.sum(table[c]).as_py() or 0) for c in ("events", "purchases", "revenue_cents")}
        fig = pipeline.plot_clicks_per_minute(landed, "sparklog demo: events per minute by page (Delta table)")
        chart = pipeline.save_figure(fig, data_dir / "clicks-per-minute.png")

        described = pipeline.sparklog_cli("groups", "describe", pipeline.GROUP, zookeeper=zk)
        # the lag check reads the same command's JSON output
        rows = pipeline.sparklog_cli("groups", "describe", pipeline.GROUP, "--json", zookeeper=zk).splitlines()
        lag = {r["partition"]: r["lag"] for r in map(json.loads, rows) if r["topic"] == pipeline.TOPIC}
        rows_read = sum(r["rows_read"] for r in runs)
        checks = {
            "every produced event was read once": rows_read == reference.produced,
            "sum(events) = produced - dropped as too late": sums["events"] == reference.counted,
            "Delta table = reference computed without Spark": matches,
            "sparklog groups describe: lag 0 everywhere": len(lag) == 4 and not any(lag.values()),
        }
        summary: dict[str, Any] = {
            "ok": all(checks.values()),
            "checks": checks,
            "produced": reference.produced,
            "stragglers": sum(w.stragglers for w in waves),
            "rows_read": rows_read,
            "dropped_too_late": reference.dropped,
            "dropped_per_wave": reference.dropped_per_wave,
            "aggregate_rows": table.num_rows,
            "reference_rows": reference.aggregates.num_rows,
            **{f"sum_{c}": v for c, v in sums.items()},
            "lag": {str(p): n for p, n in lag.items()},
            "runs": runs,
            "delta_table": str(table_path),
            "chart": str(chart.resolve()),
            "seconds": round(clock.elapsed, 1),
        }

        print(f"\n$ sparklog groups describe {pipeline.GROUP}\n{described.rstrip()}\n", flush=True)
        _print_summary(summary)
        (data_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary
    finally:
        if spark is not None:
            spark.stop()
        if cluster is not None:
            for problem in cluster.stop():
                print(f"warning: {problem}", flush=True)
            clock.say(f"stopped {'Spark, ' if spark is not None else ''}the broker and ZooKeeper")
        elif spark is not None:
            clock.say("stopped Spark")


def _print_summary(s: dict[str, Any]) -> None:
    ok = "OK" if s["ok"] else "MISMATCH"
    lines = [
        "summary",
        f"  events produced                  {s['produced']:>10,}   ({s['stragglers']:,} stragglers, 5-45 min late)",
        f"  rows read by the query           {s['rows_read']:>10,}   in {len(s['runs'])} availableNow runs",
        f"  dropped as too late              {s['dropped_too_late']:>10,}   (window closed under the 10-min watermark;"
        f" per run {s['dropped_per_wave']})",
        f"  sum(events) in Delta             {s['sum_events']:>10,}   = {s['produced']:,} - {s['dropped_too_late']:,}",
        f"  aggregate rows in Delta          {s['aggregate_rows']:>10,}   (1-minute windows x pages; "
        f"reference {s['reference_rows']:,})",
        f"  purchases / revenue              {s['sum_purchases']:>10,}   / {s['sum_revenue_cents'] / 100:,.2f}",
        f"  group lag per partition          {s['lag']}",
        f"  Delta table                      {s['delta_table']} (version {s['runs'][-1]['delta_version']})",
        f"  chart                            {s['chart']}",
    ]
    lines += [f"  check: {name:<46} {'yes' if held else 'NO'}" for name, held in s["checks"].items()]
    lines.append(f"  {ok} in {s['seconds']:.0f} s")
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    spec = StreamSpec(waves=args.waves, events_per_wave=args.events_per_wave)
    try:
        summary = run(args.data_dir, spec, args.master, args.zookeeper)
    except TopicExists as exc:  # only a cluster of the user's own (--zookeeper) can have it
        print(f"error: {exc}: the demo needs a cluster without a {pipeline.TOPIC!r} topic", flush=True)
        return 2
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
