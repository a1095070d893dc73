"""``sparklog bench metrics-cost``: what serving metrics costs. The produce and consume scenarios,
each run with every broker's endpoint scraped (every ``scrape`` seconds, by a process of its own,
as a Prometheus server would: fetched, parsed elsewhere) and without, interleaved ``repeat`` times
in the same run (the machine's speed drifts): medians and the scraped / unscraped ratio of each."""

from __future__ import annotations

import statistics
from typing import Any

from sparklog.bench.broker_scenarios import consume, produce

DEFAULT_SCRAPE_S = 1.0  # harsher than Prometheus's usual 15 s


def run(
    records: int = 10_000_000,
    repeat: int = 3,
    scrape: float = DEFAULT_SCRAPE_S,
    send_records: int = 1_000_000,
    **options: Any,
) -> dict[str, Any]:
    figures: dict[str, dict[bool, list[float]]] = {"produce": {}, "send": {}, "consume": {}}
    for _ in range(repeat):
        for scraped in (False, True):
            made = produce(records=records, send_records=send_records, scrape=scrape if scraped else None, **options)
            figures["produce"].setdefault(scraped, []).append(made["records_per_s"])
            figures["send"].setdefault(scraped, []).append(made["send_records_per_s"])
            read = consume(records=records, repeat=1, scrape=scrape if scraped else None, **options)
            figures["consume"].setdefault(scraped, []).append(read["records_per_s"])
    out: dict[str, Any] = {"scenario": "metrics-cost", "records": records, "repeat": repeat, "scrape_s": scrape}
    for name, runs in figures.items():
        plain, scraped = statistics.median(runs[False]), statistics.median(runs[True])
        out[f"{name}_records_per_s"] = round(plain)
        out[f"{name}_scraped_records_per_s"] = round(scraped)
        out[f"{name}_scraped_ratio"] = round(scraped / plain, 3)
    return out
