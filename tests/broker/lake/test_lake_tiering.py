"""Lake tiering with real broker processes, a real ZooKeeper and real Delta tables, checked with
the independent ``deltalake`` reader: exact rows and offsets, ``topics describe``, a ``kill -9``
at each point of a tiering commit, a leader change, local retention.

Every topic here rolls a segment per produced batch (``segment.bytes=1024``, batches larger than
that), so after ``n`` batches the closed segments hold the first ``n - 1``; the last one stays in
the active segment (never tiered, unless the topic's ``segment.ms`` has the tierer close it)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_helpers import ProcessGroup, registered_brokers, scrape_metrics
from lake_helpers import (
    LAKE_TOPIC,
    PER_BATCH,
    TIERING_TIMEOUT_S,
    assert_rows_exactly,
    consume_all,
    lake_broker,
    lake_cluster,
    produce_batches,
    segment_bases,
    table_version,
    value,
    wait_tiered,
    zk_lake_offset,
)
from sparklog import Admin, Consumer
from sparklog.broker.lake.tierer import CRASH_ENV
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import InvalidConfig
from waiting import wait_for


def tiering_lag(url: str) -> dict[tuple[str, str], tuple[float, float]]:
    """The broker's tiering lag per (topic, partition): (records, seconds)."""
    samples = scrape_metrics(url)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for (name, labels), records in samples.items():
        if name == "sparklog_lake_tiering_lag_records":
            tp = (dict(labels)["topic"], dict(labels)["partition"])
            out[tp] = (records, samples[("sparklog_lake_tiering_lag_seconds", labels)])
    return out


# ------------------------------------------------------------------------------------------ exact rows
def test_tiering_writes_exact_rows_offsets_and_describe_shows_lag(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake, metrics=True).start()
    with Admin(sparklog_connect) as admin:
        with pytest.raises(InvalidConfig, match="compacted topic cannot be tiered"):
            admin.create_topic("compacted", 1, 1, {"lake.enabled": "true", "cleanup.policy": "compact"})
        admin.create_topic("lake", 2, 1, LAKE_TOPIC)
        admin.create_topic("plain", 1, 1, {"segment.bytes": "1024"})
        admin.create_topic("quiet", 1, 1, {**LAKE_TOPIC, "segment.ms": "1000"})
    for p in (0, 1):
        produce_batches(sparklog_connect, "lake", p, 4 + p)
    produce_batches(sparklog_connect, "plain", 0, 3)
    produce_batches(sparklog_connect, "quiet", 0, 2)
    for p in (0, 1):
        closed = (3 + p) * PER_BATCH
        wait_tiered(lake, "lake", p, closed)
        assert_rows_exactly(lake, "lake", p, closed)
        wait_for(lambda p=p: zk_lake_offset(sparklog_connect, "lake", p) == (3 + p) * PER_BATCH, 10, "ZooKeeper")
    # segment.ms=1000: the tierer closes the quiet partition's active segment, all of it is tiered
    wait_tiered(lake, "quiet", 0, 2 * PER_BATCH)
    assert_rows_exactly(lake, "quiet", 0, 2 * PER_BATCH)
    assert not (lake / "plain").exists()  # a topic without lake.enabled is not tiered
    with Admin(sparklog_connect) as admin:
        described = admin.describe_topic("lake")["partitions"]
        plain = admin.describe_topic("plain")["partitions"]
    assert [(d["lake_offset"], d["lake_lag"]) for d in described] == [(30, 10), (40, 10)]
    assert "lake_offset" not in plain[0]
    cli = subprocess.run(
        [sys.executable, "-m", "sparklog.cli.main", "--zookeeper", sparklog_connect, "topics", "describe", "lake"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    header, *rows = cli.stdout.splitlines()[1:]
    assert header.split()[-3:] == ["LOCAL-START", "LAKE-OFFSET", "LAKE-LAG"]
    assert [row.split()[-3:] for row in rows] == [["0", "30", "10"], ["0", "40", "10"]]
    # the broker's metrics: the active segments' records are behind, and have waited; nothing of
    # "quiet" is behind; "plain" is not tiered
    url = registered_brokers(sparklog_connect)[1].metrics_url
    assert url is not None

    def settled() -> dict[tuple[str, str], tuple[float, float]] | None:
        lag = tiering_lag(url)
        return lag if lag.get(("quiet", "0")) == (0, 0.0) else None

    behind = wait_for(settled, TIERING_TIMEOUT_S, "the tiering lag")
    assert {tp: records for tp, (records, _) in behind.items()} == {
        ("lake", "0"): 10,
        ("lake", "1"): 10,
        ("quiet", "0"): 0,
    }
    assert all(seconds > 0 for tp, (_, seconds) in behind.items() if tp[0] == "lake")
    with Admin(sparklog_connect) as admin:  # deleting the topic removes its lake offsets, not its table
        admin.delete_topic("lake")
        assert "lake" not in admin.list_topics()
    with ClusterMetadata(sparklog_connect) as meta:
        assert not meta.zk.exists(meta.layout.topic("lake"))
    assert_rows_exactly(lake, "lake", 0, 30)

    # created again under the same name: the old table is not taken for the new topic's
    with Admin(sparklog_connect) as admin:
        admin.create_topic("lake", 1, 1, {**LAKE_TOPIC, "local.retention.bytes": "0"})
    produce_batches(sparklog_connect, "lake", 0, 2)  # closed: [0, 10), "tiered" up to 30 by the old table
    wait_for(lambda: "holds the rows of an earlier topic" in broker.output(), TIERING_TIMEOUT_S, "the refusal")
    assert zk_lake_offset(sparklog_connect, "lake", 0) is None
    assert_rows_exactly(lake, "lake", 0, 30)  # the old table as it was
    with Consumer("lake", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        read = consume_all(consumer, 2 * PER_BATCH)
    assert read == {0: [(o, value(0, o)) for o in range(2 * PER_BATCH)]}  # local retention deleted nothing
    broker.stop()


# ------------------------------------------------------------------------------------------ kill -9
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before-delta", "after-delta", "after-zookeeper"])
def test_kill_9_during_tiering_loses_and_repeats_nothing(
    point: str, sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    monkeypatch.setenv(CRASH_ENV, point)
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    with Admin(sparklog_connect) as admin:
        admin.create_topic("crash", 1, 1, LAKE_TOPIC)
    produce_batches(sparklog_connect, "crash", 0, 4)
    assert broker.proc is not None
    assert broker.proc.wait(TIERING_TIMEOUT_S) == -9  # killed itself at its first tiering commit
    # the first commit: the closed segments there were then, [0, 10) up to [0, 30)
    version, stored = table_version(lake, "crash", 0), zk_lake_offset(sparklog_connect, "crash", 0)
    if point == "before-delta":
        assert (version, stored) == (None, None)
    else:
        assert version in (PER_BATCH, 2 * PER_BATCH, 3 * PER_BATCH)
        assert stored == (None if point == "after-delta" else version)
    monkeypatch.delenv(CRASH_ENV)
    broker.restart()
    wait_tiered(lake, "crash", 0, 3 * PER_BATCH)
    assert_rows_exactly(lake, "crash", 0, 3 * PER_BATCH)
    wait_for(lambda: zk_lake_offset(sparklog_connect, "crash", 0) == 3 * PER_BATCH, 10, "ZooKeeper corrected")
    broker.stop()


# ------------------------------------------------------------------------------------------ leader change
@pytest.mark.slow
def test_a_new_leader_continues_where_the_old_one_stopped(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    cluster, lake = lake_cluster(sparklog_connect, tmp_path, child_processes)
    try:
        with Admin(sparklog_connect) as admin:
            admin.create_topic("moving", 1, 2, LAKE_TOPIC)
        cluster.wait_full_isr("moving")
        produce_batches(sparklog_connect, "moving", 0, 3)
        wait_tiered(lake, "moving", 0, 2 * PER_BATCH)
        old = cluster.state("moving", 0)
        cluster[old.leader].kill()  # kill -9: no hand-over
        new = cluster.wait_new_leader("moving", 0, old.leader_epoch)
        assert new.leader != old.leader
        produce_batches(sparklog_connect, "moving", 0, 3, first=3 * PER_BATCH)
        wait_tiered(lake, "moving", 0, 5 * PER_BATCH)
        assert_rows_exactly(lake, "moving", 0, 5 * PER_BATCH)
        cluster[old.leader].restart()  # back as a follower (or leader again): still nothing twice
        cluster.wait_full_isr("moving")
        produce_batches(sparklog_connect, "moving", 0, 1, first=6 * PER_BATCH)
        wait_tiered(lake, "moving", 0, 6 * PER_BATCH)
        assert_rows_exactly(lake, "moving", 0, 6 * PER_BATCH)
    finally:
        cluster.close()


# ------------------------------------------------------------------------------------------ local retention
@pytest.mark.slow
def test_local_retention_deletes_only_tiered_segments(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    local_none = {"local.retention.bytes": "0", "retention.ms": "-1"}
    with Admin(sparklog_connect) as admin:
        admin.create_topic("local", 1, 1, {**LAKE_TOPIC, **local_none})
        admin.create_topic("kept", 1, 1, {"segment.bytes": "1024", **local_none})  # no lake: local.* ignored
    produce_batches(sparklog_connect, "local", 0, 4)
    produce_batches(sparklog_connect, "kept", 0, 4)
    wait_tiered(lake, "local", 0, 3 * PER_BATCH)
    # the next maintenance pass (every 5 s) deletes the tiered segments, and only those
    wait_for(lambda: segment_bases(broker.data_dir, "local", 0) == [30], 30, "tiered segments deleted", interval=0.5)
    with Admin(sparklog_connect) as admin:
        partition = admin.describe_topic("local")["partitions"][0]
    # the earliest offset is in the lake now (the union read); the local log starts at 30
    assert (partition["log_start_offset"], partition["local_log_start_offset"], partition["lake_offset"]) == (0, 30, 30)
    assert segment_bases(broker.data_dir, "kept", 0) == [0, 10, 20, 30]
    assert_rows_exactly(lake, "local", 0, 3 * PER_BATCH)
    broker.stop()


def test_lake_enabled_on_an_existing_topic_tiers_it_from_the_log_start(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    with Admin(sparklog_connect) as admin:
        admin.create_topic("later", 1, 1, {"segment.bytes": "1024"})
        produce_batches(sparklog_connect, "later", 0, 3)
        time.sleep(1.5)  # a tiering pass or more: nothing, the topic is not lake-enabled
        assert not (lake / "later").exists()
        admin.alter_topic("later", {"lake.enabled": "true"})  # the running broker's open log takes it
    wait_tiered(lake, "later", 0, 2 * PER_BATCH)
    assert_rows_exactly(lake, "later", 0, 2 * PER_BATCH)
    broker.stop()


@pytest.mark.slow
def test_followers_delete_tiered_segments_too(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    cluster, lake = lake_cluster(sparklog_connect, tmp_path, child_processes)
    try:
        with Admin(sparklog_connect) as admin:
            admin.create_topic("both", 1, 2, {**LAKE_TOPIC, "local.retention.bytes": "0", "retention.ms": "-1"})
        cluster.wait_full_isr("both")
        produce_batches(sparklog_connect, "both", 0, 4)
        wait_tiered(lake, "both", 0, 3 * PER_BATCH)
        for broker in cluster.brokers.values():  # the follower learns the lake offset from ZooKeeper
            wait_for(
                lambda b=broker: segment_bases(b.data_dir, "both", 0) == [30],
                45,
                f"broker {broker.broker_id}'s tiered segments deleted",
                interval=0.5,
            )
        assert_rows_exactly(lake, "both", 0, 3 * PER_BATCH)
    finally:
        cluster.close()
