"""``sparklog bench --against kafka``: output parsing and medians (fast), and one tiny side-by-side
comparison end to end on a real Kafka KRaft broker (slow; fetches the Kafka jars from Maven Central
into .deps/kafka on first use)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from sparklog.bench import against_kafka, kafka_peer

PRODUCER_OUTPUT = """\
462876 records sent, 92445.8 records/sec (8.82 MB/sec), 840.6 ms avg latency, 1182.0 ms max latency.
2000000 records sent, 165357.585779 records/sec (15.77 MB/sec), 1266.92 ms avg latency, 2216.00 ms max latency, \
1198 ms 50th, 1988 ms 95th, 2171 ms 99th, 2203 ms 99.9th.
"""

CONSUMER_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-21 00:57:19:787, 2026-11-21 00:57:25:507, 381.4697, 66.6905, 4000000, 699300.6993, 1539, 4181, \
91.2389, 956708.9213
"""


def test_parse_producer_perf_takes_the_summary_line() -> None:
    got = kafka_peer.parse_producer_perf(PRODUCER_OUTPUT)
    assert got["records"] == 2_000_000
    assert got["records_per_s"] == pytest.approx(165357.585779)
    assert got["p99_ms"] == 2171


def test_parse_consumer_perf() -> None:
    got = kafka_peer.parse_consumer_perf(CONSUMER_OUTPUT)
    assert got["data.consumed.in.nMsg"] == "4000000"
    assert float(got["fetch.nMsg.sec"]) == pytest.approx(956708.9213)


def test_parse_errors_name_the_output() -> None:
    with pytest.raises(ValueError, match="no ProducerPerformance summary"):
        kafka_peer.parse_producer_perf("Exception in thread main")
    with pytest.raises(ValueError, match="no ConsumerPerformance result"):
        kafka_peer.parse_consumer_perf("WARN nothing")


def test_ratio_is_above_one_when_sparklog_is_better() -> None:
    sparklog = {"records_per_s": 4_000_000, "p99_ms": 2.0, "acks": "1"}
    kafka = {"records_per_s": 1_000_000, "p99_ms": 6.0, "acks": "1", "send_records_per_s": 5}
    assert against_kafka.ratios(sparklog, kafka) == {"records_per_s": 4.0, "p99_ms": 3.0}


def test_median_result_keeps_the_workload() -> None:
    runs = [{"records": 10, "records_per_s": r, "p50_ms": r / 1000} for r in (300, 100, 200)]
    assert against_kafka.median_result(runs) == {"records": 10, "records_per_s": 200, "p50_ms": 0.2}


def test_markdown_table_and_chart(tmp_path) -> None:
    result = {
        "scenario": "produce",
        "sparklog": {"records_per_s": 3_000_000, "send_records_per_s": 300_000},
        "kafka": {"records_per_s": 400_000, "send_records_per_s": 450_000},
        "ratio": {"records_per_s": 7.5, "send_records_per_s": 0.67},
    }
    latency = {
        "scenario": "latency",
        "sparklog": {"p99_ms": 3.0},
        "kafka": {"p99_ms": 6.0},
        "ratio": {"p99_ms": 2.0},
        "runs": {"sparklog": [{"p99_ms": 3.0}, {"p99_ms": 2.5}, {"p99_ms": 4.0}], "kafka": [{"p99_ms": 6.0}]},
    }
    table = against_kafka.markdown_table([("produce", result), ("latency", latency)])
    assert "| produce: columnar / perf tool | 3.00 | 0.4 | 7.50 | M records/s |" in table
    assert "| latency: p99 | 3.00 (2.50-4.00) | 6.00 | 2.00 | ms |" in table
    if importlib.util.find_spec("matplotlib") is not None:
        png = against_kafka.make_chart([("produce", result), ("latency", latency)], tmp_path / "c.png")
        assert png.read_bytes()[:4] == b"\x89PNG"


def _kafka_available() -> bool:
    if shutil.which("java") is None:
        return False
    return any(kafka_peer.deps_dir("kafka").glob("*.jar")) or shutil.which("mvn") is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not _kafka_available(), reason="needs java, and the Kafka jars or mvn to fetch them")
def test_produce_against_kafka_end_to_end() -> None:
    with_confluent = importlib.util.find_spec("confluent_kafka") is not None
    result = against_kafka.run(
        "produce", repeat=1, records=100_000, send_records=20_000 if with_confluent else 0, partitions=2
    )
    assert set(result) >= {"sparklog", "kafka", "ratio"}
    for side in ("sparklog", "kafka"):
        assert result[side]["records_per_s"] > 0
        assert result[side]["partitions"] == 2
        assert result[side]["acks"] == "1"
    assert result["ratio"]["records_per_s"] == pytest.approx(
        result["sparklog"]["records_per_s"] / result["kafka"]["records_per_s"], rel=0.01
    )
    if with_confluent:
        assert result["ratio"]["send_records_per_s"] > 0
    assert not kafka_peer._children, "every Kafka process is stopped"


def test_cluster_ids_never_look_like_options() -> None:
    ids = {kafka_peer._cluster_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
