"""The sparklog side of the benchmark scenarios runs end to end on a small workload (their figures
are measured by ``sparklog bench``, never asserted here)."""

from __future__ import annotations

from sparklog.bench import broker_scenarios


def test_latency_counts_the_measured_records_only() -> None:
    result = broker_scenarios.latency(rate=2_000, seconds=0.5, warmup_s=0.3, partitions=2)
    assert result["records"] == 1_000
    assert result["received"] == 1_000  # the warm-up records (flagged in their value) are not counted
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]


def test_produce_reports_async_sync_and_per_record_figures() -> None:
    result = broker_scenarios.produce(records=60_000, batch_records=5_000, partitions=2, send_records=2_000)
    assert result["records"] == 60_000 and result["in_flight"] == 4
    assert result["records_per_s"] > 0 and result["sync_records_per_s"] > 0 and result["send_records_per_s"] > 0
