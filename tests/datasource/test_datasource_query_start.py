"""A streaming query whose source's Python worker starts too slowly for Spark (it gives that worker
10 s to connect back): ``start_stream`` starts it again, and the query still reads every record once.

The slow start is real: the ``sparklog`` source is registered with an interpreter that sleeps before
it runs Python, as a cold page cache makes ``import pyspark`` take 16.8 s on this project's VM."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_helpers import available_now_writer, create_topic, produce, stream_reader
from sparklog.datasource.query_start import ATTEMPTS, SOURCE_RUNNER_MODULE, WORKER_DID_NOT_CONNECT, start_stream

pytestmark = pytest.mark.slow

SLOWER_THAN_SPARK_WAITS_S = 12  # Spark's PythonWorkerFactory waits 10 s
STARTS_FILE = "runner-starts"  # a line per streaming source runner started


@contextlib.contextmanager
def slow_first_worker(spark: Any, tmp_path: Path, slow_starts: int) -> Iterator[None]:
    """Re-register the ``sparklog`` source so that its Python workers run an interpreter that, for the
    first ``slow_starts`` streaming source runners, sleeps longer than Spark waits (each runner adds a
    line to ``tmp_path / STARTS_FILE``); restores the source on exit."""
    import sparklog.datasource

    starts = tmp_path / STARTS_FILE
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *{SOURCE_RUNNER_MODULE}*)\n'
        f'  echo start >> "{starts}"\n'
        f'  if [ "$(wc -l < "{starts}")" -le {slow_starts} ]; then sleep {SLOWER_THAN_SPARK_WAITS_S}; fi;;\n'
        "esac\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    context = spark.sparkContext
    python = context.pythonExec
    context.pythonExec = str(wrapper)  # read when a Python data source is registered
    try:
        sparklog.datasource.register(spark)
    finally:
        context.pythonExec = python
    try:
        yield
    finally:
        sparklog.datasource.register(spark)


def _start_over_slow_worker(
    spark: Any, zookeeper: str, tmp_path: Path, partitions: int, records: int, name: str, attempts: int = ATTEMPTS
) -> Any:
    """A new topic of ``records`` records, streamed into the memory table ``name`` by a query that
    ``start_stream`` starts while the first source runner is too slow for Spark; the query, once
    its sources are initialized."""
    topic = create_topic(zookeeper, partitions)
    produce(zookeeper, topic, 0, records, partitions)
    checkpoint = tmp_path / "ckpt"
    with slow_first_worker(spark, tmp_path, slow_starts=1):
        df = stream_reader(spark, zookeeper, subscribe=topic, startingOffsets="earliest")  # after the registration
        return start_stream(available_now_writer(df, checkpoint, query_name=name).start, checkpoint, attempts)


def _runner_starts(tmp_path: Path) -> int:
    return len((tmp_path / STARTS_FILE).read_text().splitlines())


def test_a_source_worker_too_slow_for_spark_is_started_again_and_reads_every_record_once(
    spark: Any, spark_cluster: Any, tmp_path: Path
) -> None:
    query = _start_over_slow_worker(spark, spark_cluster.zookeeper, tmp_path, 2, 300, "slow_start_once")
    query.awaitTermination(240)
    assert query.exception() is None
    # the first runner was too late for Spark: the query really was started twice
    assert _runner_starts(tmp_path) == 2
    rows = spark.table("slow_start_once").select("partition", "offset", "value").collect()
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(p, o) for p in range(2) for o in range(150)]
    assert sorted(bytes(r["value"]) for r in rows) == sorted(f"v{i}".encode() for i in range(300))


def test_without_a_second_start_the_slow_worker_fails_the_query_with_sparks_message(
    spark: Any, spark_cluster: Any, tmp_path: Path
) -> None:
    with pytest.raises(Exception) as failed:
        _start_over_slow_worker(spark, spark_cluster.zookeeper, tmp_path, 1, 10, "slow_start_fails", attempts=1)
    assert WORKER_DID_NOT_CONNECT in str(failed.value)
    assert _runner_starts(tmp_path) == 1
    assert not os.path.exists(tmp_path / "ckpt" / "commits" / "0")  # nothing was read
