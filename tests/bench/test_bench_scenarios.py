"""The sparklog side of the benchmark scenarios runs end to end on a small workload (their figures
are measured by ``sparklog bench``, never asserted here)."""

from __future__ import annotations

import pytest

from sparklog.bench import broker_scenarios


def test_latency_counts_the_measured_records_only() -> None:
    result = broker_scenarios.latency(rate=2_000, seconds=0.5, warmup_s=0.3, partitions=2)
    assert result["records"] == 1_000
    assert result["received"] == 1_000  # the warm-up records (flagged in their value) are not counted
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]


def test_produce_reports_async_sync_and_per_record_figures() -> None:
    result = broker_scenarios.produce(
        records=60_000, batch_records=5_000, partitions=2, send_records=2_000, scrape=0.05
    )
    assert result["records"] == 60_000 and result["in_flight"] == 4
    assert result["scrapes"] >= 1  # the broker's endpoint answered the scraper process
    assert result["records_per_s"] > 0 and result["sync_records_per_s"] > 0 and result["send_records_per_s"] > 0


def test_produce_and_consume_secure_run_over_sasl_ssl() -> None:
    produced = broker_scenarios.produce(
        records=20_000, batch_records=5_000, partitions=2, send_records=1_000, secure=True
    )
    assert produced["secure"] is True and produced["records_per_s"] > 0 and produced["send_records_per_s"] > 0
    consumed = broker_scenarios.consume(
        records=20_000, batch_records=5_000, partitions=2, repeat=1, secure=True, scrape=0.05
    )
    assert consumed["scrapes"] >= 1
    assert consumed["secure"] is True and consumed["records"] == 20_000  # the scenario checks it read every record


def test_kafka_clients_run_over_sasl_ssl() -> None:
    from sparklog.bench import kafka_clients

    result = kafka_clients.run(records=5_000, partitions=2, secure=True)
    assert result["security_protocol"] == "SASL_SSL"
    # the consume side counts every record it read (it stops at what was produced, or fails at its deadline)
    assert result["send_records_per_s"] > 0 and result["python_client_records_per_s"] > 0


def test_consume_with_fields_compares_a_projection_with_every_column() -> None:
    result = broker_scenarios.consume(records=40_000, batch_records=5_000, partitions=2, repeat=1, fields="f0,f1")
    assert result["scenario"] == "consume-fields" and result["records"] == 40_000
    # 2 of 20 columns: f0 (long) and f1 (double) are 16 bytes a record, all 20 several times that
    assert result["value_bytes_received"] == 40_000 * 16
    assert result["bytes_ratio"] > 5


@pytest.mark.slow
def test_spark_read_with_fields_reads_every_row_both_ways(spark: object) -> None:
    from sparklog.bench import spark_scenarios

    result = spark_scenarios.spark_read(records=40_000, batch_records=5_000, partitions=2, repeat=1, fields="f0,f1")
    # the scenario itself asserts that each query read every row of the topic
    assert result["records"] == 40_000 and result["fields"] == "f0,f1"
    assert result["records_per_s"] > 0 and result["all_columns_records_per_s"] > 0


@pytest.mark.slow
def test_spark_read_from_memory_and_spark_write_from_files(spark: object) -> None:
    from sparklog.bench import spark_scenarios

    ceiling = spark_scenarios.spark_read(records=30_000, batch_records=4_000, partitions=2, repeat=1, source="memory")
    assert ceiling["source"] == "memory" and ceiling["records"] == 30_000  # the query counted every row
    typed = spark_scenarios.spark_read(
        records=30_000, batch_records=4_000, partitions=2, repeat=1, fields="f0,f1", source="memory"
    )
    assert typed["source"] == "memory" and typed["records"] == 30_000 and typed["fields"] == "f0,f1"
    written = spark_scenarios.spark_write(records=30_000, batch_records=5_000, partitions=2, source="files")
    # the scenario checks that the target topic holds exactly the rows of the files
    assert written["source"] == "files" and written["records"] == 30_000


def test_tier_tiers_every_closed_segment_and_compares_produce_with_and_without_the_lake() -> None:
    from sparklog.bench import tier

    # 500 records of ~110 bytes are ~55 KB a batch: with 64 KiB segments each batch is a segment
    result = tier.tier(records=8_000, batch_records=500, partitions=2, repeat=2, segment_bytes=64 * 1024)
    assert result["scenario"] == "tier" and result["records"] == 8_000
    # the scenario checks that each Delta table holds exactly the records of the closed segments;
    # only each partition's active segment (one batch) is not tiered
    assert 8_000 - 2 * 500 <= result["tier_table_rows"] < 8_000
    assert 0 < result["tier_records"] <= result["tier_table_rows"]
    assert result["tier_timed_from"] in ("first-commit", "alter") and result["tier_records_per_s"] > 0
    assert len(result["produce_records_per_s_lake_all"]) == len(result["produce_records_per_s_plain_all"]) == 2
    assert result["produce_records_per_s_lake"] > 0 and result["produce_records_per_s_plain"] > 0
    assert isinstance(result["produce_cost_pct"], float) and result["tier_catch_up_s"] >= 0
    assert result["tier_lag_records"] >= 0


@pytest.mark.slow
def test_spark_read_lake_reads_every_record_through_delta_and_through_the_source(spark: object) -> None:
    from sparklog.bench import spark_lake_scenarios

    result = spark_lake_scenarios.spark_read_lake(
        records=6_000, batch_records=500, partitions=2, repeat=1, segment_bytes=64 * 1024
    )
    # the scenario checks that each read (read_topic of the lake topic, of the plain topic) counted
    # every record; 6 batches a partition, all tiered (the last segments closed by segment.ms)
    assert result["scenario"] == "spark-read" and result["source"] == "lake" and result["records"] == 6_000
    assert (result["lake_rows"], result["tail_rows"]) == (6_000, 0)
    assert result["lake_rows_per_s"] > 0 and result["log_rows_per_s"] > 0 and result["lake_speedup"] > 0
    assert result["lake_seconds_counted"] > 0 and result["lake_speedup_counted"] > 0
    assert len(result["lake_seconds_all"]) == len(result["log_seconds_all"]) == 1
