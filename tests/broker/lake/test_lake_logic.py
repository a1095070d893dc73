"""Lake tiering without brokers: the topic configs, local retention of a partition log, the
tierer's exactly-once logic over a real log and a real Delta table (ZooKeeper and the partition's
role faked), including a "crash" between the Delta commit and ZooKeeper's update, and the lake
offsets in a real ZooKeeper."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kazoo.exceptions import NoNodeError

from log_helpers import Clock, config, settled
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.rows import lake_rows
from sparklog.broker.lake.source import READ_ALL
from sparklog.broker.lake.tierer import FOREIGN_TABLE_RETRY_S, Tierer
from sparklog.broker.lake.tiering_lag import MAX_MARKS, TieringLag
from sparklog.broker.log import PartitionLog
from sparklog.config import TopicConfig
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.lake_offsets import LakeOffsets
from sparklog.coordination.ports import free_port
from sparklog.errors import InvalidConfig, LakeConflict
from sparklog.lake.layout import app_id, table_uri, topic_app_id
from sparklog.local_cluster import LocalCluster, broker_command
from sparklog.schemas.value_schema import ValueSchema

TOPIC = "events"


# ---------------------------------------------------------------------------------------- configs
def test_lake_configs_parse_and_default() -> None:
    cfg = TopicConfig.from_dict({"lake.enabled": "true", "local.retention.ms": "1000"})
    assert cfg.lake_enabled and cfg.local_retention == (1000, -1)
    assert TopicConfig().to_dict()["lake.enabled"] == "false"
    assert TopicConfig.from_dict({"retention.ms": "5000"}).local_retention == (5000, -1)  # -2: as retention.*


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lake.enabled": "true", "cleanup.policy": "compact"}, "not supported with cleanup.policy=compact"),
        ({"lake.enabled": "true", "cleanup.policy": "compact,delete"}, "compacted topic cannot be tiered"),
        ({"lake.enabled": "yes"}, "lake.enabled must be true or false"),
        ({"local.retention.ms": "-3"}, "local.retention.ms must be -2"),
        ({"retention.ms": "1000", "local.retention.ms": "2000"}, "must not exceed retention.ms=1000"),
        ({"retention.bytes": "1000", "local.retention.bytes": "-1"}, "must not exceed retention.bytes=1000"),
    ],
)
def test_lake_configs_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        TopicConfig.from_dict(settings)


# ---------------------------------------------------------------------------------------- local retention
def one_batch_per_segment_log(directory: Path, clock: Clock, **settings: object) -> PartitionLog:
    log = PartitionLog(directory, config(segment_bytes=1024, **settings), clock=clock)
    for i in range(5):  # a batch bigger than a segment: every append after the first rolls
        log.append({"key": [b"k"], "value": [b"v%d" % i + b"x" * 1200], "timestamp": [clock.now]})
    return settled(log)


def test_local_retention_deletes_only_tiered_segments(tmp_path: Path) -> None:
    clock = Clock()
    log = one_batch_per_segment_log(
        tmp_path, clock, lake_enabled="true", retention_ms=-1, local_retention_ms=1000, local_retention_bytes=0
    )
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3, 4]
    clock.advance(5000)
    assert log.apply_retention() == 0  # nothing known to be tiered: local retention never deletes
    log.tiered_offset = 2
    assert log.apply_retention() == 2
    assert log.log_start_offset == 2
    log.tiered_offset = 5  # even everything tiered: the active segment stays
    assert log.apply_retention() == 2
    assert [s.base_offset for s in log.segments] == [4]
    log.close()


def test_local_retention_bytes_keeps_the_newest_tiered_segments(tmp_path: Path) -> None:
    clock = Clock()
    probe = one_batch_per_segment_log(tmp_path / "probe", clock)
    size = probe.segments[0].size
    probe.close()
    log = one_batch_per_segment_log(tmp_path / "log", clock, lake_enabled="true", local_retention_bytes=3 * size)
    log.tiered_offset = 4
    assert log.apply_retention() == 2  # 5 segments, at most 3 segments' worth kept
    assert log.log_start_offset == 2
    log.close()


def test_local_retention_does_nothing_without_lake_enabled(tmp_path: Path) -> None:
    clock = Clock()
    log = one_batch_per_segment_log(tmp_path, clock, retention_ms=-1, local_retention_ms=0)
    log.tiered_offset = 4
    clock.advance(5000)
    assert log.apply_retention() == 0
    log.close()


# ---------------------------------------------------------------------------------------- the tierer
class FakeOffsets:
    """ZooKeeper's lake offsets, in memory."""

    def __init__(self, topic_id: int = 1) -> None:
        self.stored: dict[tuple[str, int], int] = {}
        self.fail_next_set = False
        self.id = topic_id  # the topic's incarnation (ZooKeeper's creation transaction)

    def topic_id(self, topic: str) -> int | None:
        return self.id

    def get(self, topic: str, partition: int) -> int | None:
        return self.stored.get((topic, partition))

    def set(self, topic: str, partition: int, offset: int) -> None:
        if self.fail_next_set:
            self.fail_next_set = False
            raise ConnectionError("ZooKeeper went away (a crash between the two commits)")
        self.stored[(topic, partition)] = offset


class LogSource:
    """A TieringSource over a real PartitionLog, with a settable role and high watermark."""

    def __init__(self, log: PartitionLog, partition: int = 0) -> None:
        self.topic = TOPIC
        self.partition = partition
        self.log = log
        self.replica = log
        self.epoch: int | None = 0
        self.hw = log.log_end_offset
        self.schemas: list[ValueSchema] = []  # a typed topic's versions
        self.min_files = 0  # lake.compaction.min.files: off unless a test sets it
        self.lag_ms = -1  # lake.compaction.lag.ms: by count only unless a test sets it

    def leader_epoch(self) -> int | None:
        return self.epoch

    def log_start(self) -> int:
        return self.log.log_start_offset

    def tierable_end(self) -> int:
        return min(self.log.segments[-1].base_offset, self.hw)

    def high_watermark(self) -> int:
        return self.hw

    def segment_end(self, offset: int) -> int:
        return next(s.next_offset for s in self.log.segments if s.base_offset <= offset < s.next_offset)

    def read(self, start: int, end: int) -> list[pa.RecordBatch]:
        return self.log.read(start, READ_ALL, upto=end)

    def roll_if_aged(self) -> bool:
        return self.log.roll_if_aged()

    def set_tiered(self, offset: int) -> None:
        self.log.tiered_offset = offset

    def tiered(self) -> int | None:
        return self.log.tiered_offset

    def value_schemas(self) -> list[ValueSchema]:
        return self.schemas

    def compaction_min_files(self) -> int:
        return self.min_files

    def compaction_lag_ms(self) -> int:
        return self.lag_ms


def filled_log(directory: Path, batches: int = 6, per_batch: int = 3) -> PartitionLog:
    log = PartitionLog(directory, config(segment_bytes=1024, lake_enabled="true"))
    for b in range(batches):
        n = per_batch
        log.append(
            {
                "key": [b"k%d" % (b * n + i) for i in range(n)],
                "value": [b"v%d-" % (b * n + i) + b"x" * 400 for i in range(n)],
                "timestamp": [1_700_000_000_000 + b * n + i for i in range(n)],
                "headers": [[{"key": "h", "value": b"%d" % (b * n + i)}] for i in range(n)],
            }
        )
    return log


def table_offsets(lake: Path, partition: int = 0) -> list[int]:
    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table()
    rows = [(p, o) for p, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)]
    return sorted(o for p, o in rows if p == partition)


def test_lake_rows_slices_batches_with_arrow() -> None:
    batch = pa.record_batch(
        {"offset": pa.array([10, 11, 12, 13], pa.int64()), "value": pa.array([b"a", b"b", b"c", b"d"])}
    )
    rows = lake_rows(7, [batch], 11, 13)
    assert rows.column_names == ["partition", "offset", "value"]
    assert rows.to_pydict() == {"partition": [7, 7], "offset": [11, 12], "value": [b"b", b"c"]}
    assert rows.schema.field("partition").type == pa.int32()


def test_tierer_tiers_closed_committed_segments_exactly(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    source, offsets = LogSource(log), FakeOffsets()
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets)
    source.hw = 7  # committed: [0, 7); closed segments end at the active segment's base
    closed = log.segments[-1].base_offset
    assert closed > 7
    while tierer.run_once([source]):
        pass
    assert table_offsets(lake) == list(range(7))  # never past the high watermark
    source.hw = log.log_end_offset
    while tierer.run_once([source]):
        pass
    assert table_offsets(lake) == list(range(closed))  # never the active segment
    assert offsets.stored[(TOPIC, 0)] == closed == log.tiered_offset
    assert DeltaTable(str(lake / TOPIC)).transaction_version(app_id(TOPIC, 0)) == closed
    table = DeltaTable(str(lake / TOPIC)).to_pyarrow_table().sort_by("offset")
    stored = pa.Table.from_batches(log.read(0, READ_ALL, upto=closed))
    assert table["key"].to_pylist() == stored["key"].to_pylist()
    assert table["value"].to_pylist() == stored["value"].to_pylist()
    assert table["headers"].to_pylist() == stored["headers"].to_pylist()
    ms = table["timestamp"].cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
    assert ms == stored["timestamp"].cast(pa.int64()).to_pylist()
    log.close()


def test_a_quiet_partitions_active_segment_is_closed_and_tiered_after_segment_ms(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog(tmp_path / "log", config(lake_enabled="true", segment_ms=60_000), clock=clock)
    for i in range(3):
        log.append({"key": [b"k"], "value": [b"v%d" % i], "timestamp": [clock.now]})
    source, offsets = LogSource(log), FakeOffsets()
    source.hw = log.log_end_offset
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets)
    assert tierer.run_once([source]) == 0  # one young active segment: nothing closed, nothing tiered
    assert [s.base_offset for s in log.segments] == [0]
    clock.advance(59_999)
    assert tierer.run_once([source]) == 0
    clock.advance(1)
    assert tierer.run_once([source]) == 1  # segment.ms old: closed and tiered in the same pass
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert table_offsets(lake) == [0, 1, 2] and offsets.stored[(TOPIC, 0)] == 3
    clock.advance(120_000)
    assert tierer.run_once([source]) == 0  # an empty active segment is never rolled
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.append({"key": [b"k"], "value": [b"v3"], "timestamp": [clock.now]})  # into the old empty segment
    source.hw = 3  # not committed yet: closed once old, tiered once committed
    clock.advance(60_000)
    assert tierer.run_once([source]) == 0
    assert [s.base_offset for s in log.segments] == [0, 3, 4]
    source.hw = 4
    assert tierer.run_once([source]) == 1
    assert table_offsets(lake) == [0, 1, 2, 3]
    log.close()


def test_a_follower_tiers_nothing_and_learns_the_lake_offset(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    source, offsets = LogSource(log), FakeOffsets()
    source.epoch = None
    offsets.stored[(TOPIC, 0)] = 3
    tierer = Tierer(DeltaTableWriter(str(tmp_path / "lake")), offsets)
    assert tierer.run_once([source]) == 0
    assert not (tmp_path / "lake" / TOPIC).exists()
    assert log.tiered_offset == 3
    log.close()


def test_zookeeper_lagging_the_table_is_corrected_and_nothing_repeats(tmp_path: Path) -> None:
    """A crash between the Delta commit and ZooKeeper's update: the table is the truth."""
    log = filled_log(tmp_path / "log")
    source, offsets = LogSource(log), FakeOffsets()
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, max_commit_bytes=1)  # a segment per commit
    assert tierer.run_once([source]) == 1
    first = offsets.stored[(TOPIC, 0)]
    offsets.fail_next_set = True
    assert tierer.run_once([source]) == 0  # committed to Delta, then ZooKeeper failed
    assert offsets.stored[(TOPIC, 0)] == first
    restarted = Tierer(DeltaTableWriter(str(lake)), offsets)  # a new process, or a new leader
    while restarted.run_once([source]):
        pass
    closed = log.segments[-1].base_offset
    assert table_offsets(lake) == list(range(closed))
    assert offsets.stored[(TOPIC, 0)] == closed
    log.close()


def test_a_tierer_behind_takes_closed_segments_together_up_to_its_commit_size(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log", batches=8)  # 7 closed segments of 3 records of ~400 bytes
    source, offsets = LogSource(log), FakeOffsets()
    lake = tmp_path / "lake"
    closed = log.segments[-1].base_offset
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, max_commit_bytes=2500)
    commits = 0
    while tierer.run_once([source]):
        commits += 1
    assert table_offsets(lake) == list(range(closed)) and offsets.stored[(TOPIC, 0)] == closed
    assert 1 < commits < len(log.segments) - 1  # several segments a commit, yet more than one commit
    versions = DeltaTable(str(lake / TOPIC)).history()
    assert len([v for v in versions if v["operation"] == "WRITE"]) == commits
    one = tmp_path / "one"
    tierer = Tierer(DeltaTableWriter(str(one)), FakeOffsets())  # the default: all of them at once
    assert tierer.run_once([source]) == 1 and tierer.run_once([source]) == 0
    assert table_offsets(one) == list(range(closed))
    log.close()


def test_a_topic_created_again_never_takes_the_deleted_topics_table_for_its_own(tmp_path: Path) -> None:
    """Deleted, then created again under the same name (same leader epoch 0, same broker): the old
    table's transactions would pass for the new topic's (its first offsets skipped, then deleted by
    local retention)."""
    lake = tmp_path / "lake"
    old = filled_log(tmp_path / "old")
    offsets, now = FakeOffsets(topic_id=1), [0.0]
    tierer = Tierer(DeltaTableWriter(str(lake)), offsets, clock=lambda: now[0])
    while tierer.run_once([LogSource(old)]):
        pass
    tiered = table_offsets(lake)
    assert tiered and DeltaTable(str(lake / TOPIC)).transaction_version(topic_app_id(TOPIC)) == 1
    old.close()

    offsets.id, offsets.stored = 2, {}  # created again: another id, no lake offsets
    new = filled_log(tmp_path / "new", batches=2)  # fewer records than the old topic had
    source = LogSource(new)
    assert tierer.run_once([source]) == 0
    assert tierer.run_once([source]) == 0  # not looked at again before FOREIGN_TABLE_RETRY_S
    assert offsets.stored == {} and new.tiered_offset == 0  # so local retention deletes nothing
    assert table_offsets(lake) == tiered  # the old table is left as it is

    (lake / TOPIC).rename(tmp_path / "moved-away")
    now[0] += FOREIGN_TABLE_RETRY_S
    while tierer.run_once([source]):
        pass
    closed = new.segments[-1].base_offset
    assert table_offsets(lake) == list(range(closed)) and offsets.stored[(TOPIC, 0)] == closed
    assert DeltaTable(str(lake / TOPIC)).transaction_version(topic_app_id(TOPIC)) == 2
    new.close()


def test_a_deposed_leader_cannot_append_twice(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    lake = tmp_path / "lake"
    old = Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1)  # a segment per commit
    new = Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1)
    source = LogSource(log)
    assert old.run_once([source]) == 1  # the old leader, epoch 0, tiered one segment
    source.epoch = 1
    assert new.run_once([source]) == 1  # the new leader continues from the table
    source.epoch = 0
    assert old.run_once([source]) == 0  # the old one still believes it leads: refused, nothing added
    expected = list(range(source.segment_end(source.segment_end(0))))
    assert table_offsets(lake) == expected
    writer = DeltaTableWriter(str(lake))
    with pytest.raises(LakeConflict):
        writer.append(TOPIC, 0, lake_rows(0, log.read(0), 0, 1), None, 1)
    log.close()


class CountingWriter(DeltaTableWriter):
    """The real writer, counting how often it reads a table's transaction version."""

    def __init__(self, lake_dir: str) -> None:
        super().__init__(lake_dir)
        self.reads = 0

    def tiered_version(self, topic: str, partition: int) -> int | None:
        self.reads += 1
        return super().tiered_version(topic, partition)


def test_an_idle_partition_reads_no_table_when_leadership_changes(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    source, offsets = LogSource(log), FakeOffsets()
    writer = CountingWriter(str(tmp_path / "lake"))
    tierer = Tierer(writer, offsets)
    while tierer.run_once([source]):
        pass
    assert writer.reads == 1  # once, before the first commit of the leadership
    for epoch in range(1, 4):  # new leaderships over a partition with nothing new to tier
        source.epoch = epoch
        assert tierer.run_once([source]) == 0
    assert writer.reads == 1
    assert log.tiered_offset == offsets.stored[(TOPIC, 0)] == log.segments[-1].base_offset
    log.close()


def test_partitions_share_the_table_with_their_own_transactions(tmp_path: Path) -> None:
    logs = [filled_log(tmp_path / f"log-{p}", batches=3) for p in range(3)]
    sources = [LogSource(log, p) for p, log in enumerate(logs)]
    lake = tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), FakeOffsets())
    while tierer.run_once(sources):
        pass
    table = DeltaTable(str(lake / TOPIC))
    for p, log in enumerate(logs):
        closed = log.segments[-1].base_offset
        assert table_offsets(lake, p) == list(range(closed))
        assert table.transaction_version(app_id(TOPIC, p)) == closed
        log.close()
    assert table.metadata().partition_columns == ["partition"]


# ---------------------------------------------------------------------------------------- where the lake is
def test_local_clusters_put_the_lake_under_their_data_dir(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2, zookeeper="127.0.0.1:1")
    assert cluster.lake_dir == tmp_path / "lake"
    broker = cluster.brokers[2]
    command = broker_command(2, broker.port, broker.data_dir, cluster.zookeeper, cluster.lake_dir)
    assert command[-2:] == ["--lake-dir", str(tmp_path / "lake")]
    assert LocalCluster(tmp_path, zookeeper="127.0.0.1:1", lake_dir="s3://bucket/lake").lake_dir == "s3://bucket/lake"
    assert table_uri("s3://bucket/lake/", TOPIC) == f"s3://bucket/lake/{TOPIC}"


def test_lake_rows_of_whole_batches_share_their_buffers() -> None:
    values = pa.array([b"a", b"b", b"c"])
    batch = pa.record_batch({"offset": pa.array([3, 4, 5], pa.int64()), "value": values})
    rows = lake_rows(0, [batch], 3, 6)
    assert rows["offset"].to_pylist() == [3, 4, 5]
    assert rows["value"].chunk(0).buffers()[2].address == values.buffers()[2].address  # not copied
    assert lake_rows(0, [batch], 0, 3).num_rows == 0


# ---------------------------------------------------------------------------------------- lake offsets in ZooKeeper
def test_lake_offsets_are_stored_and_deleted_with_their_topic_in_chunks(
    sparklog_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ClusterMetadata(sparklog_connect) as meta:
        meta.register_broker(1, "127.0.0.1", free_port())
        meta.create_topic(TOPIC, 4, 1, {"lake.enabled": "true"})
        offsets = LakeOffsets(meta.zk, meta.layout)
        assert offsets.get(TOPIC, 0) is None
        for p in (0, 2):  # partitions 1 and 3 never tiered: no lake node
            offsets.set(TOPIC, p, 10)
            offsets.set(TOPIC, p, 20 + p)
        assert [offsets.get(TOPIC, p) for p in range(4)] == [20, None, 22, None]
        one_by_one: list[str] = []
        delete = meta.zk.delete

        def spy(path: str, version: int = -1, recursive: bool = False) -> object:
            if recursive:
                one_by_one.append(path)
            return delete(path, version=version, recursive=recursive)

        monkeypatch.setattr(meta.zk, "delete", spy)
        meta.delete_topic(TOPIC)
        assert one_by_one == []  # the lake nodes went in the chunked transactions, no fallback
        assert not meta.zk.exists(meta.layout.topic(TOPIC))
        with pytest.raises(NoNodeError):
            offsets.set(TOPIC, 0, 30)  # never recreated under a deleted topic


# ------------------------------------------------------------------------------------------ tiering lag
def test_tiering_lag_counts_records_and_the_wait_of_the_oldest_untiered_one() -> None:
    now = [100.0]
    lag = TieringLag(clock=lambda: now[0])
    tp = ("t", 0)
    lag.observe(tp, high_watermark=10, tiered=10)
    assert lag.behind() == {tp: (0, 0.0)}  # caught up: nothing waits
    now[0] = 101.0
    lag.observe(tp, high_watermark=25, tiered=10)  # offsets 10..24 first seen at 101
    now[0] = 102.0
    lag.observe(tp, high_watermark=40, tiered=10)  # 25..39 at 102
    now[0] = 105.0
    assert lag.behind() == {tp: (30, 4.0)}  # offset 10 has waited since 101
    lag.observe(tp, high_watermark=40, tiered=25)
    assert lag.behind() == {tp: (15, 3.0)}  # offset 25 since 102
    lag.observe(tp, high_watermark=40, tiered=40)
    assert lag.behind() == {tp: (0, 0.0)}
    lag.keep_only([])  # no longer led here
    assert lag.behind() == {}


def test_tiering_lag_keeps_its_marks_bounded_and_the_oldest_one() -> None:
    now = [0.0]
    lag = TieringLag(clock=lambda: now[0])
    tp = ("t", 0)
    for i in range(1, 5 * MAX_MARKS):
        now[0] = float(i)
        lag.observe(tp, high_watermark=i, tiered=0)
    assert len(lag._marks[tp]) <= MAX_MARKS + 1
    assert lag.behind()[tp] == (5 * MAX_MARKS - 1, 5 * MAX_MARKS - 2)  # offset 0 seen first at 1.0
    assert lag._marks[tp][-1][0] == 5 * MAX_MARKS - 1  # the newest mark kept too


def test_the_tierer_reports_lag_of_the_partitions_it_leads(tmp_path: Path) -> None:
    log = filled_log(tmp_path / "log")
    source = LogSource(log)
    tierer = Tierer(DeltaTableWriter(str(tmp_path / "lake")), FakeOffsets())
    source.hw = log.log_end_offset
    while tierer.run_once([source]):
        pass
    closed = log.segments[-1].base_offset  # tiered; the active segment's records wait for its roll
    assert 0 < closed < log.log_end_offset
    ((records, seconds),) = tierer.lag.behind().values()
    assert records == log.log_end_offset - closed
    assert seconds >= 0
    source.epoch = None  # a follower now: not its lag to report
    tierer.run_once([source])
    assert tierer.lag.behind() == {}
