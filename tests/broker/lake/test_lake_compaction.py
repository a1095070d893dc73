"""Compaction of a partition's small files in its topic's Delta table: which files (the policy), the
rewrite by the tierer (same rows, in offset order, fewer files; the union read unchanged), and the
rewrite racing other commits: never two copies of a row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from sparklog.broker.lake.compaction import DataFile, compaction_span
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.source import READ_ALL
from sparklog.broker.lake.tierer import VACUUM_INTERVAL_S, Tierer
from sparklog.config import TopicConfig
from sparklog.errors import InvalidConfig, LakeConflict
from test_lake_logic import TOPIC, FakeOffsets, LogSource, filled_log

MB = 1 << 20


# ---------------------------------------------------------------------------------------- the policy
def files(*sizes: int, rows: int = 10) -> list[DataFile]:
    return [DataFile(i * rows, i * rows + rows - 1, size) for i, size in enumerate(sizes)]


def test_nothing_is_due_below_min_files_or_with_compaction_off() -> None:
    assert compaction_span(files(1, 1, 1), min_files=4) is None
    assert compaction_span(files(1, 1, 1, 1), min_files=0) is None
    assert compaction_span(files(1, 1, 1, 1), min_files=1) is None  # a file alone is never rewritten
    assert compaction_span([], min_files=2) is None


def test_the_earliest_run_of_small_files_is_taken_whole() -> None:
    assert compaction_span(files(1, 1, 1, 1, 1), min_files=4) == (0, 49)
    assert compaction_span(list(reversed(files(1, 1, 1, 1, 1))), min_files=4) == (0, 49)  # any order given


def test_a_large_file_breaks_a_run() -> None:
    big = 64 * MB  # half the target: not small
    assert compaction_span(files(1, 1, big, 1, 1), min_files=3) is None
    assert compaction_span(files(1, 1, big, 1, 1, 1), min_files=3) == (30, 59)
    assert compaction_span(files(1, 1, 1, big, 1, 1, 1), min_files=3) == (0, 29)  # the earliest first


def test_a_run_is_cut_at_the_target_size_but_takes_two_files_at_least() -> None:
    assert compaction_span(files(40 * MB, 40 * MB, 40 * MB, 40 * MB), min_files=2) == (0, 29)  # 120 MiB
    assert compaction_span(files(60 * MB, 60 * MB, 60 * MB), min_files=2, target_bytes=128 * MB) == (0, 19)
    assert compaction_span(files(3, 3, 3), min_files=2, target_bytes=8) == (0, 19)  # two, even past it


def aged(modified: list[int], *sizes: int) -> list[DataFile]:
    return [dataclasses.replace(f, modified_ms=m) for f, m in zip(files(*sizes), modified, strict=True)]


def test_old_small_files_are_due_however_few() -> None:
    now, lag = 1_000_000, 60_000
    old, young = now - lag - 1, now - lag + 1
    three_old = aged([old, old, old], 1, 1, 1)
    assert compaction_span(three_old, min_files=8) is None  # by count alone: too few
    assert compaction_span(three_old, min_files=8, lag_ms=lag, now_ms=now) == (0, 29)
    assert compaction_span(three_old, min_files=8, lag_ms=-1, now_ms=now) is None  # -1: by count only
    assert compaction_span(three_old, min_files=0, lag_ms=lag, now_ms=now) is None  # compaction off
    # young files wait; a single old file is never rewritten alone
    assert compaction_span(aged([old, young, young], 1, 1, 1), min_files=8, lag_ms=lag, now_ms=now) is None
    assert compaction_span(aged([young, old, old], 1, 1, 1), min_files=8, lag_ms=lag, now_ms=now) == (10, 29)
    # a large file still breaks a run; the earliest run of old ones first
    big = 100 * MB
    sizes = (1, big, 1, 1, 1)
    assert compaction_span(aged([old] * 5, *sizes), min_files=8, lag_ms=lag, now_ms=now) == (20, 49)
    assert compaction_span(aged([old, old, old, old, young], 1, 1, big, 1, 1), 8, lag_ms=lag, now_ms=now) == (0, 19)


def test_the_topic_config() -> None:
    assert TopicConfig().lake_compaction_min_files == 8
    assert TopicConfig.from_dict({"lake.compaction.min.files": "0"}).lake_compaction_min_files == 0
    with pytest.raises(InvalidConfig, match="lake.compaction.min.files must be >= 0"):
        TopicConfig.from_dict({"lake.compaction.min.files": "-1"})
    assert TopicConfig().lake_compaction_lag_ms == 600_000
    assert TopicConfig.from_dict({"lake.compaction.lag.ms": "-1"}).lake_compaction_lag_ms == -1
    with pytest.raises(InvalidConfig, match="lake.compaction.lag.ms must be >= -1"):
        TopicConfig.from_dict({"lake.compaction.lag.ms": "-2"})


# ---------------------------------------------------------------------------------------- the rewrite
def partition_files(lake: Path) -> list[tuple[int, int, str]]:
    """(first, last, path) of partition 0's files in the table's current version, by offset."""
    actions = pa.table(DeltaTable(str(lake / TOPIC)).get_add_actions(flatten=True)).to_pylist()
    return sorted((a["min.offset"], a["max.offset"], a["path"]) for a in actions if a["partition.partition"] == 0)


def assert_files_hold_contiguous_sorted_ranges(lake: Path, end: int) -> None:
    """Every file's offsets ascend by one, and the files, by first offset, cover [0, end) once."""
    expected_first = 0
    for first, last, path in partition_files(lake):
        offsets = pq.read_table(lake / TOPIC / path, columns=["offset"]).column("offset").to_numpy()
        assert offsets[0] == first == expected_first and offsets[-1] == last, (first, last, path)
        assert (np.diff(offsets) == 1).all(), f"{path}: offsets out of order"
        expected_first = last + 1
    assert expected_first == end


def test_the_tierer_compacts_small_files_without_changing_a_row(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log", batches=14)  # 13 closed segments of 3 records
    source, offsets = LogSource(log), FakeOffsets()
    source.min_files = 4
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, max_commit_bytes=1)  # a segment (a file) per commit
    commits = 0
    while tierer.run_once([source]):
        commits += 1
    closed = log.segments[-1].base_offset
    assert commits == 13 and offsets.stored[(TOPIC, 0)] == closed

    # compactions after commits 4, 8 and 12 (each run: the earliest 4+ small files, all small here)
    assert len(partition_files(lake)) < commits
    assert_files_hold_contiguous_sorted_ranges(lake, closed)
    history = DeltaTable(str(lake / TOPIC)).history()
    rewrites = [v for v in history if v["operationParameters"].get("mode") == "Overwrite"]
    assert rewrites and all("predicate" in v["operationParameters"] for v in rewrites)

    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table().sort_by("offset")
    stored = pa.Table.from_batches(log.read(0, READ_ALL, upto=closed))
    assert table["offset"].to_pylist() == list(range(closed))  # each row once
    for column in ("key", "value", "headers"):
        assert table[column].to_pylist() == stored[column].to_pylist()

    # the union read: from offset 0 to the lake offset, in order, exactly once
    reader, got, at = LakeReader(str(lake)), [], 0
    while at < closed:
        batches = reader.read(TOPIC, 0, at, closed, max_bytes=2000)
        assert batches, f"nothing read at {at}"
        for batch in batches:
            got += batch.column("offset").to_pylist()
            at = got[-1] + 1
    assert got == list(range(closed))
    log.close()


def test_a_quiet_partitions_few_small_files_are_compacted_after_the_lag(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log", batches=4)  # 3 closed segments of 3 records
    source, offsets = LogSource(log), FakeOffsets()
    source.min_files = 8  # never reached by 3 files
    now = [0.0]
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, clock=lambda: now[0], max_commit_bytes=1)
    source.lag_ms = 3_600_000
    while tierer.run_once([source]):
        pass
    closed = log.segments[-1].base_offset
    assert len(partition_files(lake)) == 3
    # quiet, but not for the lag yet (the files are younger than it, too): left alone
    now[0] += 60
    tierer.run_once([source])
    assert len(partition_files(lake)) == 3
    # the lag passed since the last commit and the files are older than it: one file, same rows
    source.lag_ms = 0
    now[0] += 3600
    tierer.run_once([source])
    assert len(partition_files(lake)) == 1
    assert_files_hold_contiguous_sorted_ranges(lake, closed)
    version = DeltaTable(str(lake / TOPIC)).version()
    now[0] += 3600
    tierer.run_once([source])  # once only: not again before the next commit
    assert DeltaTable(str(lake / TOPIC)).version() == version
    log.close()


class StaleWriter(DeltaTableWriter):
    """A writer that sees the table as it was when ``freeze`` was called (a broker whose snapshot
    predates another's commit)."""

    frozen: DeltaTable | None = None

    def freeze(self, topic: str) -> None:
        self.frozen = DeltaTable(str(Path(self.lake_dir) / topic))

    def _open(self, topic: str) -> DeltaTable | None:
        return self.frozen if self.frozen is not None else super()._open(topic)


def tiered_table(tmp_path: Path, segments: int) -> tuple[Path, LogSource, Tierer]:
    """A table of ``segments`` one-segment commits of partition 0 (compaction off), and what
    tiered them: one more closed segment is left in the log, above the high watermark."""
    log = filled_log(tmp_path / "log", batches=segments + 2)
    source = LogSource(log)
    source.hw = log.segments[segments].base_offset
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1)
    while tierer.run_once([source]):
        pass
    return lake, source, tierer


def test_two_brokers_compacting_the_same_files_leave_one_copy_of_each_row(tmp_path: Path) -> None:
    """A deposed leader and the new one compact the same run from the same table version: the
    second commit is refused. (deltalake's OPTIMIZE commits both, doubling every row.)"""
    lake, source, _ = tiered_table(tmp_path, segments=6)
    old, new = StaleWriter(str(lake)), StaleWriter(str(lake))
    old.freeze(TOPIC)
    new.freeze(TOPIC)
    assert new.compact(TOPIC, 0, min_files=4) == 6
    with pytest.raises(LakeConflict):
        old.compact(TOPIC, 0, min_files=4)
    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table()
    assert sorted(table["offset"].to_pylist()) == list(range(source.hw))
    assert_files_hold_contiguous_sorted_ranges(lake, source.hw)
    source.log.close()


def test_an_append_of_later_offsets_does_not_stop_a_compaction(tmp_path: Path) -> None:
    """The partition's leader tiers the next segment between the compaction's read of the table
    and its commit (another broker's tierer, or a slow compaction): both commits stand."""
    lake, source, tierer = tiered_table(tmp_path, segments=6)
    stale = StaleWriter(str(lake))
    stale.freeze(TOPIC)
    source.hw = source.log.log_end_offset
    assert tierer.run_once([source]) == 1
    end = source.log.segments[-1].base_offset
    assert stale.compact(TOPIC, 0, min_files=4) == 6
    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table()
    assert sorted(table["offset"].to_pylist()) == list(range(end))
    assert_files_hold_contiguous_sorted_ranges(lake, end)
    source.log.close()


def parquet_files_on_disk(lake: Path) -> set[str]:
    return {str(f.relative_to(lake / TOPIC)) for f in (lake / TOPIC).rglob("*.parquet")}


def test_partition_0s_leader_vacuums_the_files_compaction_replaced(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log", batches=6)  # 5 closed segments
    other = filled_log(tmp_path / "other", batches=2)
    source, offsets, now = LogSource(log), FakeOffsets(), [0.0]
    follower, partition_1 = LogSource(log), LogSource(other, partition=1)
    source.min_files = 5
    follower.epoch = None
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, clock=lambda: now[0], max_commit_bytes=1)
    while tierer.run_once([source, partition_1]):
        pass
    closed = log.segments[-1].base_offset
    live = {path for _first, _last, path in partition_files(lake)}
    assert len(partition_files(lake)) == 1  # the 5 files compacted into one
    replaced = (
        parquet_files_on_disk(lake)
        - live
        - {path for path in parquet_files_on_disk(lake) if path.startswith("partition=1/")}
    )
    assert len(replaced) == 5  # still on disk: Delta keeps them for the table's retention
    DeltaTable(str(lake / TOPIC)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 seconds"}
    )

    now[0] += VACUUM_INTERVAL_S - 1
    tierer.run_once([source, partition_1])
    assert replaced <= parquet_files_on_disk(lake)  # not due yet
    now[0] += 1
    tierer.run_once([partition_1])  # another partition's leader: not its job
    assert replaced <= parquet_files_on_disk(lake)
    Tierer(DeltaTableWriter(str(lake)), offsets, clock=lambda: now[0] + VACUUM_INTERVAL_S).run_once([follower])
    assert replaced <= parquet_files_on_disk(lake)  # nor a follower's
    tierer.run_once([source, partition_1])
    assert not replaced & parquet_files_on_disk(lake)  # vacuumed
    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table()
    assert sorted(
        o for p, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True) if p == 0
    ) == list(range(closed))
    assert "VACUUM END" in [v["operation"] for v in DeltaTable(str(lake / TOPIC)).history()]
    now[0] += 10
    tierer.run_once([source])  # the next one is an interval later
    assert [v["operation"] for v in DeltaTable(str(lake / TOPIC)).history()].count("VACUUM END") == 1
    log.close()
    other.close()
