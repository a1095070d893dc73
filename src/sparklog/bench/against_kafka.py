"""``sparklog bench SCENARIO --against kafka``: the same workload on sparklog and on Apache Kafka,
interleaved (sparklog, kafka, sparklog, kafka, ...), medians of each side and their ratio.

One JSON object per scenario (PRODUCT.md section 8)::

    {"scenario": ..., "repeat": 3, "kafka_version": "4.3.1",
     "sparklog": {flat keys as ``sparklog bench SCENARIO``}, "kafka": {the same keys},
     "ratio": {key: sparklog / kafka, or kafka / sparklog for latencies: > 1 means sparklog is better},
     "runs": {"sparklog": [...], "kafka": [...]}}       # the headline figures of every run

What runs on the Kafka side (see ``kafka_peer``): Kafka 4.x KRaft brokers on loopback; Kafka's
``ProducerPerformance`` / ``ConsumerPerformance`` for columnar produce and consume; the
confluent-kafka Python client for per-record produce, Python consume and latency; Spark's own
``format("kafka")`` connector for ``spark-read`` / ``spark-write``.

``python -m sparklog.bench.against_kafka suite`` runs the whole comparison of docs/benchmarks.md
and writes the results (JSON lines), the Markdown table and the chart.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from sparklog.bench import idle, kafka_clients, kafka_peer

# Figures compared, and which way is better. Everything else in a result is the workload.
HIGHER_IS_BETTER = (
    "records_per_s",
    "send_records_per_s",
    "read_records_per_s",
    "python_client_records_per_s",
    "mb_per_s",
)
LOWER_IS_BETTER = ("p50_ms", "p99_ms", "max_ms", "failover_s", "idle_cpu_s")
FIGURES = HIGHER_IS_BETTER + LOWER_IS_BETTER

DEFAULTS: dict[str, dict[str, Any]] = {
    # moderate sizes for a shared 2-core machine; every one can be raised from the command line
    "produce": {"records": 2_000_000, "send_records": 1_000_000},
    "consume": {"records": 2_000_000},
    "latency": {"rate": 10_000, "seconds": 5.0},
    "spark-read": {"records": 2_000_000},
    "spark-write": {"records": 2_000_000},
    "idle": {"partitions": 1000, "replication_factor": 3, "brokers": 3, "seconds": 20.0},
    "kafka-clients": {"records": 1_000_000},
    "kafka-spark-read": {"records": 2_000_000},
}


# ------------------------------------------------------------------------------------------------
# The sparklog side of each scenario


def sparklog_produce(**options: Any) -> dict[str, Any]:
    from sparklog.bench import broker_scenarios

    return broker_scenarios.produce(**options)


def sparklog_consume(**options: Any) -> dict[str, Any]:
    """``broker_scenarios.consume``; sparklog's consumer is itself a Python client, so its figure
    is also set as ``python_client_records_per_s`` (compared with confluent-kafka's)."""
    from sparklog.bench import broker_scenarios

    result = broker_scenarios.consume(**options)
    result["python_client_records_per_s"] = result["records_per_s"]
    return result


def sparklog_latency(**options: Any) -> dict[str, Any]:
    from sparklog.bench import broker_scenarios

    return broker_scenarios.latency(**options)


def sparklog_spark_read(**options: Any) -> dict[str, Any]:
    """``spark_scenarios.spark_read``: ``availableNow`` read into the noop sink (Kafka side:
    ``kafka_peer.kafka_spark_read``, the same method with ``format("kafka")``)."""
    from sparklog.bench import spark_scenarios

    return spark_scenarios.spark_read(**options)


def sparklog_spark_write(**options: Any) -> dict[str, Any]:
    """``spark_scenarios.spark_write``: ``availableNow`` copy of one topic into another through the
    sparklog sink (Kafka side: ``kafka_peer.kafka_spark_write``, Spark's Kafka source and sink)."""
    from sparklog.bench import spark_scenarios

    return spark_scenarios.spark_write(**options)


SIDES: dict[str, tuple[Callable[..., dict[str, Any]], Callable[..., dict[str, Any]]]] = {
    "produce": (sparklog_produce, kafka_peer.kafka_produce),
    "consume": (sparklog_consume, kafka_peer.kafka_consume),
    "latency": (sparklog_latency, kafka_peer.kafka_latency),
    "spark-read": (sparklog_spark_read, kafka_peer.kafka_spark_read),
    "spark-write": (sparklog_spark_write, kafka_peer.kafka_spark_write),
    "idle": (idle.run, idle.kafka_run),
    "kafka-clients": (kafka_clients.run, kafka_clients.kafka_run),
    "kafka-spark-read": (kafka_clients.spark_read_run, kafka_clients.kafka_spark_read_run),
}
SCENARIOS = tuple(SIDES)


# ------------------------------------------------------------------------------------------------
# Medians and ratios


def median_result(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The first run's workload keys with the median of every figure over all runs."""
    merged = dict(runs[0])
    for key in FIGURES:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values:
            value = statistics.median(values)
            merged[key] = round(value, 3) if key in LOWER_IS_BETTER or key == "mb_per_s" else round(value)
    return merged


def ratios(sparklog: dict[str, Any], kafka: dict[str, Any]) -> dict[str, float]:
    """sparklog / kafka for throughputs, kafka / sparklog for latencies: > 1 means sparklog is better."""
    out: dict[str, float] = {}
    for key in FIGURES:
        s, k = sparklog.get(key), kafka.get(key)
        if not isinstance(s, int | float) or not isinstance(k, int | float) or s <= 0 or k <= 0:
            continue
        out[key] = round(s / k if key in HIGHER_IS_BETTER else k / s, 2)
    return out


def _headline(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in FIGURES if k in result}


def run(scenario: str, repeat: int = 3, log: Callable[[str], None] | None = None, **options: Any) -> dict[str, Any]:
    """Run ``scenario`` ``repeat`` times on each side, interleaved; the contract's JSON object.

    ``options`` are the scenario's (``records``, ``value_bytes``, ``partitions``, ``acks``,
    ``replication_factor``, ``brokers``, ``send_records``, ``rate``, ``seconds``, ...), the same for
    both sides; ``DEFAULTS`` fills what is not given. ``repeat`` here counts interleaved rounds:
    inside one round each side warms up once and measures once.
    """
    if scenario not in SIDES:
        raise ValueError(f"no Kafka comparison for {scenario!r} (have: {', '.join(SIDES)})")
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    options = {"partitions": 6, "value_bytes": 100, **DEFAULTS[scenario], **options, "repeat": 1}
    if options.get("acks") == "all" and "replication_factor" not in options:
        options["replication_factor"] = 3
    if "replication_factor" in options:
        options["brokers"] = max(options.get("brokers", 1), options["replication_factor"])
    sparklog_side, kafka_side = SIDES[scenario]
    runs: dict[str, list[dict[str, Any]]] = {"sparklog": [], "kafka": []}
    with kafka_peer.terminate_on_sigterm():
        for i in range(repeat):
            for name, side in (("sparklog", sparklog_side), ("kafka", kafka_side)):
                start = time.monotonic()
                result = side(**options)
                runs[name].append(result)
                if log is not None:
                    took = time.monotonic() - start
                    log(f"{scenario} round {i + 1}/{repeat} {name} ({took:.0f} s): {json.dumps(_headline(result))}")
    sparklog, kafka = median_result(runs["sparklog"]), median_result(runs["kafka"])
    return {
        "scenario": scenario,
        "repeat": repeat,
        "kafka_version": kafka_peer.KAFKA_VERSION,
        "sparklog": sparklog,
        "kafka": kafka,
        "ratio": ratios(sparklog, kafka),
        "runs": {name: [_headline(r) for r in rs] for name, rs in runs.items()},
    }


# ------------------------------------------------------------------------------------------------
# The suite of docs/benchmarks.md, its table and chart

# (label, scenario, options)
SUITE: list[tuple[str, str, dict[str, Any]]] = [
    ("produce, 1 broker, acks=1", "produce", {"acks": "1"}),
    ("produce, 3 brokers RF=3, acks=all", "produce", {"acks": "all", "replication_factor": 3, "brokers": 3}),
    ("consume, 1 broker", "consume", {}),
    ("latency at 10k records/s, acks=1", "latency", {"acks": "1"}),
    ("spark-read (availableNow, noop sink)", "spark-read", {}),
    ("spark-write (availableNow)", "spark-write", {}),
]

# (figure key, how the table and chart name it, the unit it is shown in, divisor)
_SHOWN = {
    "records_per_s": ("records/s", "M records/s", 1e6),
    "send_records_per_s": ("per-record send records/s", "M records/s", 1e6),
    "python_client_records_per_s": ("Python client records/s", "M records/s", 1e6),
    "p50_ms": ("p50", "ms", 1.0),
    "p99_ms": ("p99", "ms", 1.0),
}


def _name(scenario: str, key: str, label: str) -> str:
    if scenario == "produce" and key == "records_per_s":
        return f"{label}: columnar / perf tool"
    if scenario == "produce" and key == "send_records_per_s":
        return f"{label}: per-record send() / confluent-kafka"
    if scenario == "consume" and key == "records_per_s":
        return f"{label}: columnar / perf tool"
    if scenario == "consume" and key == "python_client_records_per_s":
        return f"{label}: Python clients (sparklog / confluent-kafka)"
    return f"{label}: {_SHOWN[key][0]}"


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _cell(result: dict[str, Any], side: str, key: str, div: float) -> str:
    """The median, and the range over the runs when there are several."""
    text = _num(result[side][key] / div)
    runs = [r[key] / div for r in result.get("runs", {}).get(side, []) if key in r]
    if len(runs) > 1:
        text += f" ({_num(min(runs))}-{_num(max(runs))})"
    return text


def table_rows(results: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str, str, str]]:
    """(what, sparklog, kafka, ratio, unit) for every compared figure of every result."""
    rows = []
    for label, result in results:
        for key, (_, unit, div) in _SHOWN.items():
            if key in result["ratio"]:
                name = _name(result["scenario"], key, label)
                s, k = _cell(result, "sparklog", key, div), _cell(result, "kafka", key, div)
                rows.append((name, s, k, f"{result['ratio'][key]:.2f}", unit))
    return rows


def markdown_table(results: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """Medians with the range over the rounds in parentheses."""
    lines = [
        "| what | sparklog median (range) | Kafka median (range) | ratio (>1: sparklog better) | unit |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in table_rows(results)]
    return "\n".join(lines) + "\n"


def make_chart(results: Sequence[tuple[str, dict[str, Any]]], path: str | Path) -> Path:
    """A PNG: throughputs (million records/s, log scale) and latencies (ms) side by side, each bar
    pair labelled with its ratio. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = [(label, r, key) for label, r in results for key in _SHOWN if key in r["ratio"]]
    through = [row for row in rows if _SHOWN[row[2]][2] > 1]
    latency = [row for row in rows if _SHOWN[row[2]][2] == 1]
    panels = [(through, "million records/s (log scale)", True), (latency, "ms, lower is better (log scale)", True)]
    panels = [p for p in panels if p[0]]
    heights = [max(1.2, 0.55 * len(p[0])) for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + sum(heights)), gridspec_kw={"height_ratios": heights})
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (entries, unit, log) in zip(axes, panels, strict=True):
        names = [_name(r["scenario"], key, label) for label, r, key in entries]
        div = [_SHOWN[key][2] for _, _, key in entries]
        s = [r["sparklog"][key] / d for (_, r, key), d in zip(entries, div, strict=True)]
        k = [r["kafka"][key] / d for (_, r, key), d in zip(entries, div, strict=True)]
        y = range(len(entries))
        ax.barh([i - 0.2 for i in y], s, height=0.4, label="sparklog", color="#d9822b")
        ax.barh([i + 0.2 for i in y], k, height=0.4, label=f"Kafka {kafka_peer.KAFKA_VERSION}", color="#4a6fa5")
        for i, (_, r, key) in enumerate(entries):
            ax.annotate(
                f"{r['ratio'][key]:.2f}x",
                (max(s[i], k[i]), i),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_yticks(list(y), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(unit, fontsize=9)
        if log:
            ax.set_xscale("log")
            ax.set_xlim(min([*s, *k]) / 3, max([*s, *k]) * 3)
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        else:
            ax.set_xlim(0, max([*s, *k]) * 1.2)
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=2)
    fig.suptitle("sparklog vs Apache Kafka on one machine (ratio > 1: sparklog better)", fontsize=10, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_suite(
    out: str | Path,
    chart: str | Path | None = None,
    repeat: int = 3,
    only: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
    **options: Any,
) -> list[tuple[str, dict[str, Any]]]:
    """Every entry of ``SUITE`` (or those whose scenario is in ``only``); appends each result as a
    JSON line ``{"label": ..., **result}`` to ``out`` as it finishes (a failing entry is logged
    and written as ``{"label": ..., "error": ...}``), then draws ``chart``."""
    results = []
    out = Path(out)
    for label, scenario, extra in SUITE:
        if only and scenario not in only:
            continue
        try:
            result = run(scenario, repeat=repeat, log=log, **{**extra, **options})
        except (NotImplementedError, kafka_peer.KafkaNotInstalled, RuntimeError, TimeoutError) as exc:
            if log is not None:
                log(f"{label}: skipped: {type(exc).__name__}: {str(exc)[-500:]}")
            with out.open("a") as f:
                f.write(json.dumps({"label": label, "scenario": scenario, "error": str(exc)[-2000:]}) + "\n")
            continue
        results.append((label, result))
        with out.open("a") as f:
            f.write(json.dumps({"label": label, **result}) + "\n")
    if chart is not None and results:
        make_chart(results, chart)
    return results


def load_results(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """The successful results of a JSON-lines file written by :func:`run_suite` (latest per label)."""
    latest: dict[str, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            if "error" not in entry:
                latest[entry.pop("label")] = entry
    order = [label for label, _, _ in SUITE]
    return sorted(latest.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))


# ------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sparklog.bench.against_kafka", description="sparklog vs Apache Kafka, side by side"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--repeat", type=int, default=3, help="interleaved rounds per side (medians reported)")
        p.add_argument("--records", type=int, default=None)
        p.add_argument("--send-records", type=int, default=None)
        p.add_argument("--value-bytes", type=int, default=None)
        p.add_argument("--partitions", type=int, default=None)
        p.add_argument("--rate", type=int, default=None)
        p.add_argument("--seconds", type=float, default=None)

    one = sub.add_parser("run", help="one scenario: print its JSON object")
    one.add_argument("scenario", choices=SCENARIOS)
    common(one)
    one.add_argument("--acks", choices=["0", "1", "all"], default=None)
    one.add_argument("--replication-factor", type=int, default=None)
    one.add_argument("--brokers", type=int, default=None)

    suite = sub.add_parser("suite", help="the comparison of docs/benchmarks.md: JSON lines, table, chart")
    common(suite)
    suite.add_argument("--only", nargs="*", choices=SCENARIOS, default=None)
    suite.add_argument("--out", default="benchmarks/results/against_kafka.jsonl")
    suite.add_argument("--chart", default="docs/benchmarks-kafka.png")

    report = sub.add_parser("report", help="table (Markdown) and chart from a JSON-lines results file")
    report.add_argument("results")
    report.add_argument("--chart", default=None)

    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.command == "report":
        results = load_results(args.results)
        print(markdown_table(results), end="")
        if args.chart:
            make_chart(results, args.chart)
        return 0

    names = ["records", "send_records", "value_bytes", "partitions", "rate", "seconds"]
    if args.command == "run":
        names += ["acks", "replication_factor", "brokers"]
    options = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    with contextlib.suppress(KeyboardInterrupt):
        if args.command == "run":
            print(json.dumps(run(args.scenario, repeat=args.repeat, log=log, **options)))
            return 0
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        results = run_suite(args.out, args.chart, repeat=args.repeat, only=args.only, log=log, **options)
        print(markdown_table(results), end="")
        return 0
    return 130


if __name__ == "__main__":
    sys.exit(main())
