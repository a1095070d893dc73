"""Issue 15, findings 7, 8 and 10, against a real ZooKeeper (and real broker processes where a
broker's view matters):

- 8: one naming rule for topics and groups (Kafka's: 1-249 of ``[A-Za-z0-9._-]``, not ``.`` or
  ``..``); a bad name is refused with InvalidTopic / InvalidGroupId and creates nothing in ZooKeeper.
- 7: names starting ``__sparklog`` are reserved: users cannot create, alter or delete them; the
  Spark sink creates its staging topics itself and refuses one whose settings would lose staged rows.
- 10: ``num.partitions.max`` bounds a topic's partitions; a topic of thousands of partitions is
  created and deleted in chunks within ZooKeeper's 1 MB request limit, all or nothing as clients and
  brokers see it, and what a client that died half-way leaves is cleaned up by the next create or
  delete.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from broker_helpers import raw_action, running_broker, typed_error
from sparklog.client.cluster_client import ClusterClient
from sparklog.coordination.cluster import NUM_PARTITIONS_MAX, ClusterMetadata
from sparklog.coordination.ports import free_port
from sparklog.datasource.options import parse_read_options, parse_write_options
from sparklog.errors import (
    InvalidGroupId,
    InvalidPartitions,
    InvalidRequest,
    InvalidTopic,
    PolicyViolation,
    TopicExists,
    UnknownTopic,
)
from sparklog.names import check_group_id, check_not_internal, check_topic_name
from sparklog.protocol import wire
from sparklog.schemas.registry import SchemaRegistry
from waiting import wait_for

BAD_TOPIC_NAMES = ["t1/partitions", ".", "..", "a" * 250, "", "a b", "tab\there", "ünï"]


def _tree(meta: ClusterMetadata) -> set[str]:
    """Every znode under sparklog's root."""
    out: set[str] = set()
    stack = [meta.layout.root]
    while stack:
        path = stack.pop()
        out.add(path)
        try:
            stack.extend(f"{path}/{child}" for child in meta.zk.get_children(path))
        except NoNodeError:
            continue
    return out


@pytest.fixture
def meta(sparklog_connect: str) -> Iterator[ClusterMetadata]:
    with ClusterMetadata(sparklog_connect) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def broker(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """One real broker process under its own chroot, shared by this module's broker tests."""
    with running_broker(zookeeper.connect_string, tmp_path_factory.mktemp("names-broker")) as (proc, connect):
        yield proc, connect


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------------ 8: names
def test_the_naming_rule() -> None:
    for good in ["t", "a" * 249, "orders.v2", "under_score-dash", "__sparklog_staging", "..a", "a.."]:
        assert check_topic_name(good) == good
        assert check_group_id(good) == good
    messages = {}
    for bad in BAD_TOPIC_NAMES:
        with pytest.raises(InvalidTopic) as info:
            check_topic_name(bad)
        messages[bad] = str(info.value)
        assert "\n" not in messages[bad]
        with pytest.raises(InvalidGroupId):
            check_group_id(bad)
    assert "'.' and '..' are not allowed" in messages["."]
    assert "'.' and '..' are not allowed" in messages[".."]
    assert "250 characters long; at most 249" in messages["a" * 250]
    assert "contains '/'" in messages["t1/partitions"]
    assert "empty" in messages[""]
    with pytest.raises(InvalidTopic, match="not a string"):
        check_topic_name(None)
    with pytest.raises(InvalidTopic, match="reserved for sparklog's internal topics"):
        check_not_internal("__sparklog_staging")


def test_bad_names_are_refused_and_create_nothing_in_zookeeper(meta: ClusterMetadata) -> None:
    """Finding 8: before, ``.``/``..`` failed with a ValueError of kazoo's and ``t1/partitions``
    with a plain InvalidRequest; every entry point now refuses with the typed error."""
    meta.register_broker(1, "127.0.0.1", free_port())  # the placement of a topic needs a live broker id
    before = _tree(meta)
    registry = SchemaRegistry.from_cluster(meta)
    for bad in BAD_TOPIC_NAMES:
        with pytest.raises(InvalidTopic):
            meta.create_topic(bad, 1)
        with pytest.raises(InvalidTopic):
            meta.topic(bad)
        with pytest.raises(InvalidTopic):
            meta.delete_topic(bad)
        with pytest.raises(InvalidTopic):
            meta.alter_topic_configs(bad, {"retention.ms": "1000"})
        with pytest.raises(InvalidTopic):
            meta.partition_state(bad, 0)
        with pytest.raises(InvalidTopic):
            registry.register(bad, '{"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}')
        with pytest.raises(InvalidTopic):
            meta.commit_offsets("g", {(bad, 0): 1})
        with pytest.raises(InvalidGroupId):
            meta.commit_offsets(bad, {("t", 0): 1})
        with pytest.raises(InvalidGroupId):
            meta.committed_offsets(bad)
        if bad:  # an empty list of topics is refused as such
            with pytest.raises(InvalidTopic, match="'subscribe'"):
                parse_read_options({"subscribe": bad})
        with pytest.raises(InvalidTopic, match="'stagingTopic'"):
            parse_write_options({"topic": "t", "stagingtopic": bad})
        with pytest.raises(InvalidGroupId, match="'group'"):
            parse_read_options({"subscribe": "t", "group": bad})
    assert _tree(meta) == before
    assert meta.topics() == []
    with pytest.raises(InvalidRequest, match="'stagingTopic': names the target topic"):
        parse_write_options({"topic": "t", "stagingtopic": "t"})


def _cli(zk: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sparklog.cli.main", "--zookeeper", zk, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sparklog: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_cli_refuses_bad_names_reserved_names_and_too_many_partitions_in_one_line(meta: ClusterMetadata) -> None:
    """Findings 8, 7 and 10 at the command line: ``topics create ..`` said "unexpected ValueError:
    relative paths not allowed", ``--partitions 20000`` lost the connection to ZooKeeper."""
    meta.register_broker(1, "127.0.0.1", free_port())
    before = _tree(meta)
    zk = meta.connect
    _one_line_error(_cli(zk, "topics", "create", ".."), "invalid topic name '..'", "'.' and '..' are not allowed")
    _one_line_error(_cli(zk, "topics", "create", "t1/partitions"), "invalid topic name 't1/partitions'")
    _one_line_error(_cli(zk, "topics", "describe", "."), "invalid topic name '.'")
    _one_line_error(
        _cli(zk, "topics", "create", "__sparklog_staging", "--config", "retention.ms=1"),
        "cannot create topic '__sparklog_staging'",
        "reserved",
    )
    _one_line_error(_cli(zk, "topics", "delete", "__sparklog_staging"), "cannot delete topic", "reserved")
    _one_line_error(
        _cli(zk, "topics", "alter", "__sparklog_staging", "--config", "retention.ms=1"), "cannot alter topic"
    )
    _one_line_error(
        _cli(zk, "topics", "create", "big", "--partitions", "20000"),
        "20000 partitions exceed num.partitions.max=10000",
    )
    assert _tree(meta) == before


# ------------------------------------------------------------------------------------ 7: reserved names
def test_reserved_names_are_refused_to_users_and_taken_by_sparklog(meta: ClusterMetadata) -> None:
    """Finding 7: anyone could create ``__sparklog_staging`` with ``retention.ms=1``."""
    from sparklog import Admin

    meta.register_broker(1, "127.0.0.1", free_port())
    before = _tree(meta)
    for name in ["__sparklog_staging", "__sparklog", "__sparklog_staging.t.v1.abcdef01"]:
        with pytest.raises(InvalidTopic, match="reserved for sparklog's internal topics"):
            meta.create_topic(name, 1, configs={"retention.ms": "1"})
    with Admin(meta.connect) as admin, pytest.raises(InvalidTopic, match="reserved"):
        admin.create_topic("__sparklog_staging", 1, configs={"retention.ms": "1"})
    assert _tree(meta) == before

    created = meta.create_topic("__sparklog_staging", 2, internal=True, configs={"retention.ms": "3600000"})
    assert created.partitions == 2 and meta.topics() == ["__sparklog_staging"]
    with pytest.raises(InvalidTopic, match="cannot alter"):
        meta.alter_topic_configs("__sparklog_staging", {"retention.ms": "1"})
    with pytest.raises(InvalidTopic, match="cannot delete"):
        meta.delete_topic("__sparklog_staging")
    with Admin(meta.connect) as admin:
        with pytest.raises(InvalidTopic, match="cannot alter"):
            admin.alter_topic("__sparklog_staging", {"retention.ms": "1"})
        with pytest.raises(InvalidTopic, match="cannot delete"):
            admin.delete_topic("__sparklog_staging")
    assert meta.topic("__sparklog_staging").configs == {"retention.ms": "3600000", "partitioner": "murmur2"}
    meta.delete_topic("__sparklog_staging", internal=True)
    assert meta.topics() == []


def test_sink_refuses_a_staging_topic_whose_settings_lose_rows(broker: tuple[Any, str]) -> None:
    """Finding 7: the sink used whatever ``__sparklog_staging`` it found. Now an existing staging
    topic must keep staged rows (the squatter's ``retention.ms=1``, compaction, ...), else
    PolicyViolation naming the setting; a missing one is created by the sink with its settings."""
    from sparklog.datasource import connections
    from sparklog.datasource.staging_topics import STAGING_CONFIGS, check_existing_staging_topic, ensure_staging_topic

    _, zk = broker
    client = ClusterClient(zk, retry_timeout_s=10)
    try:
        squatted = _name("__sparklog_squatted")  # as if created before the prefix was reserved
        client.cluster.create_topic(squatted, 1, configs={"retention.ms": "1"}, internal=True)
        with pytest.raises(PolicyViolation, match=r"'__sparklog_squatted-\w+' has retention.ms=1 .*needs at least"):
            ensure_staging_topic(client, squatted)
        options = parse_write_options({"zookeeper": zk, "topic": "x", "stagingtopic": squatted})
        try:
            with pytest.raises(PolicyViolation, match="retention.ms=1"):
                check_existing_staging_topic(options)  # what the writers check at save()/start()
        finally:
            connections.close_cluster_client(zk)

        mine = _name("my-staging")  # a user's own staging topic: theirs, but checked all the same
        client.cluster.create_topic(mine, 1, configs={"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolation, match="cleanup.policy=compact"):
            ensure_staging_topic(client, mine)
        for bad, setting in [
            ({"retention.bytes": "1000"}, "retention.bytes=1000"),
            ({"message.timestamp.type": "LogAppendTime"}, "message.timestamp.type=LogAppendTime"),
            ({"unclean.leader.election.enable": "true"}, "unclean.leader.election.enable=true"),
        ]:
            name = _name("staging")
            client.cluster.create_topic(name, 1, configs=bad)
            with pytest.raises(PolicyViolation, match=setting):
                ensure_staging_topic(client, name)

        fresh = _name("__sparklog_staging")
        assert ensure_staging_topic(client, fresh) >= 4  # created through the internal path
        assert client.topic(fresh, refresh=True).configs == {**STAGING_CONFIGS, "partitioner": "murmur2"}
        kept = _name("kept")
        client.cluster.create_topic(kept, 3, configs={"retention.ms": "-1", "retention.bytes": str(2 << 30)})
        assert ensure_staging_topic(client, kept) == 3
    finally:
        client.close()


@pytest.mark.slow
def test_spark_sink_with_a_bad_staging_topic_fails_with_the_setting(spark: Any, spark_cluster: Any) -> None:
    """The same through Spark: the write fails at save(), naming the setting; nothing is written."""
    from spark_helpers import create_topic, read_topic

    zk = spark_cluster.zookeeper
    target = create_topic(zk, 2)
    squatted = _name("__sparklog_squatted")
    with ClusterMetadata(zk) as cluster:
        cluster.create_topic(squatted, 2, configs={"retention.ms": "1"}, internal=True)
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    writer = df.write.format("sparklog").option("zookeeper", zk).option("topic", target).mode("append")
    with pytest.raises(Exception, match=r"PolicyViolation|retention.ms=1") as info:
        writer.option("stagingTopic", squatted).save()
    assert "retention.ms=1" in str(info.value)
    assert read_topic(zk, target) == []


# ------------------------------------------------------------------------------------ 10: large metadata
def test_num_partitions_max_refuses_more_in_one_line(meta: ClusterMetadata) -> None:
    meta.register_broker(1, "127.0.0.1", free_port())
    before = _tree(meta)
    assert NUM_PARTITIONS_MAX == 10_000
    with pytest.raises(InvalidPartitions) as info:
        meta.create_topic("big", 20_000)
    assert str(info.value) == "topic 'big': 20000 partitions exceed num.partitions.max=10000"
    with pytest.raises(InvalidPartitions, match="num.partitions.max=5"):
        meta.create_topic("small", 6, num_partitions_max=5)
    with pytest.raises(InvalidPartitions, match="at least 1"):
        meta.create_topic("none", 0)
    assert _tree(meta) == before
    assert meta.create_topic("small", 5, num_partitions_max=5).partitions == 5


@pytest.mark.slow
def test_thousands_of_partitions_are_created_and_deleted_in_chunks_all_or_nothing(meta: ClusterMetadata) -> None:
    """Finding 10: one transaction of 8,000 partitions' znodes (16,000 operations) went over
    ZooKeeper's 1 MB request limit and lost the connection. Now: chunks, and a client watching all
    along sees the topic only whole (every partition state there), then not at all."""
    partitions = 8_000
    meta.register_broker(1, "127.0.0.1", free_port())
    observer = ClusterClient(meta.connect, retry_timeout_s=10)
    seen: list[tuple[str, Any]] = []
    stop = threading.Event()

    def present() -> Any:
        try:
            topic = observer.topic("many", refresh=True)
        except UnknownTopic:
            return None
        try:
            last = observer.cluster.partition_state("many", partitions - 1)  # the last chunk's state
        except UnknownTopic:
            return "no state"
        return (topic.partitions, last.leader)

    def watch() -> None:
        # a topic goes creating -> visible -> deleting -> gone, never back: when two reads of it
        # agree, it was in that state in between, and the listing read in between must agree too
        while not stop.wait(0.005):
            before = present()
            listed = "many" in observer.cluster.topics()
            if present() == before:
                seen.append(("absent", listed) if before is None else ("present", (*before, listed)))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(seen) >= 3, 30, "the observer's first reads")
        created = meta.create_topic("many", partitions)
        assert created.partitions == partitions
        wait_for(lambda: seen[-1][0] == "present", 30, "the observer to see the topic")
        assert meta.topic("many").partitions == partitions
        assert len(meta.zk.get_children(meta.layout.topic_partitions("many"))) == partitions
        assert meta.zk.get_children(meta.layout.pending_topics) == []
        with pytest.raises(TopicExists):
            meta.create_topic("many", 3)

        meta.delete_topic("many")
        wait_for(lambda: seen[-1][0] == "absent", 30, "the observer to miss the topic")
    finally:
        stop.set()
        thread.join(30)
        observer.close()
    assert not meta.zk.exists(meta.layout.topic("many"))
    assert not meta.zk.exists(meta.layout.schemas("many"))
    assert meta.zk.get_children(meta.layout.pending_topics) == []
    states = {value for kind, value in seen if kind == "present"}
    assert states == {(partitions, 1, True)}, states  # never a partial topic
    assert {value for kind, value in seen if kind == "absent"} == {False}  # never listed while absent
    kinds = [kind for kind, _ in seen]
    first = kinds.index("present")
    assert "absent" not in kinds[first : len(kinds) - kinds[::-1].index("present")]  # no gap while visible


def _half_create(connect: str, name: str, partitions: int, written: int) -> None:
    """A client that dies after writing the states of only ``written`` partitions: its session
    ends (closing it drops its ephemeral ownership, as ZooKeeper does when a dead client's session
    expires)."""
    with ClusterMetadata(connect) as dying:
        replicas = [[min(dying.brokers())]] * partitions
        dying._begin_topic_creation(name, {"replicas": replicas, "configs": {}}, None)
        dying._create_partition_states(name, replicas[:written])


def test_a_half_created_topic_is_invisible_and_cleaned_up_by_a_retry_or_a_delete(meta: ClusterMetadata) -> None:
    meta.register_broker(1, "127.0.0.1", free_port())
    _half_create(meta.connect, "half", 10, 4)
    client = ClusterClient(meta.connect, retry_timeout_s=5)
    try:
        assert meta.zk.exists(meta.layout.partition_state("half", 3))  # written, yet not a topic
        assert meta.topics() == []
        with pytest.raises(UnknownTopic, match="being created"):
            meta.topic("half")
        with pytest.raises(UnknownTopic):
            client.leader("half", 0)  # its state exists, its topic does not
        with pytest.raises(UnknownTopic):
            meta.alter_topic_configs("half", {"retention.ms": "1000"})

        assert meta.create_topic("half", 3).partitions == 3  # the retry replaces the leftover
        assert client.topic("half", refresh=True).partitions == 3
        assert not meta.zk.exists(meta.layout.partition_state("half", 3))
        assert client.leader("half", 2).broker_id == 1

        _half_create(meta.connect, "again", 10, 6)
        meta.delete_topic("again")  # a delete removes a leftover too
        assert not meta.zk.exists(meta.layout.topic("again"))
        assert meta.zk.get_children(meta.layout.pending_topics) == []
        with pytest.raises(UnknownTopic):
            meta.delete_topic("again")
    finally:
        client.close()


def test_a_topic_being_created_by_a_live_client_is_not_taken_over(meta: ClusterMetadata) -> None:
    meta.register_broker(1, "127.0.0.1", free_port())
    with ClusterMetadata(meta.connect) as other:
        other._begin_topic_creation("busy", {"replicas": [[1]] * 4, "configs": {}}, None)
        with pytest.raises(TopicExists, match="being created by another client"):
            meta.create_topic("busy", 4)
        with pytest.raises(UnknownTopic, match="being created"):
            meta.delete_topic("busy")
        other._create_partition_states("busy", [[1]] * 4)
        other._finish_topic_creation("busy", {"replicas": [[1]] * 4, "configs": {}})
        other._release_pending("busy")
    assert meta.topic("busy").partitions == 4
    assert meta.topics() == ["busy"]


def test_a_topic_finished_between_a_look_and_a_claim_is_not_taken_for_a_leftover(
    meta: ClusterMetadata, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Spark tasks create the same staging topic: the second sees it still being created, and
    its creator finishes before the second claims it. The second must find a complete topic (and
    leave it alone), not a leftover to remove: removing it lost the staged rows the first task had
    written (a broker dropped its replicas, then led a new empty topic of that name)."""
    meta.register_broker(1, "127.0.0.1", free_port())
    body = {"replicas": [[1]] * 2, "configs": {}}
    with ClusterMetadata(meta.connect) as creator:
        creator._begin_topic_creation("raced", body, None)
        creator._create_partition_states("raced", [[1]] * 2)
        seen = meta._topic_status("raced")
        assert seen == "creating"
        creator._finish_topic_creation("raced", body)  # finished before the other's claim
        creator._release_pending("raced")
    finished = meta.zk.exists(meta.layout.topic("raced"))
    real_status = meta._topic_status
    looks = iter([seen])  # create_topic's first look still sees "creating"
    monkeypatch.setattr(meta, "_topic_status", lambda name: next(looks, None) or real_status(name))
    with pytest.raises(TopicExists, match="already exists"):
        meta.create_topic("raced", 2)
    assert meta.zk.exists(meta.layout.topic("raced")).czxid == finished.czxid  # the very same topic node
    assert meta.topics() == ["raced"] and meta.zk.get_children(meta.layout.pending_topics) == []
    meta.delete_topic("raced")
    assert meta.topics() == []


def _log_dirs(proc: Any, topic: str) -> list[Path]:
    return sorted(proc.data_dir.glob(f"{topic}-*"))


def test_brokers_ignore_a_half_created_topic_and_drop_a_deleted_one_at_once(broker: tuple[Any, str]) -> None:
    proc, zk = broker
    topic = _name("half")
    _half_create(zk, topic, 6, 3)
    error = typed_error(lambda: raw_action(proc.location, wire.LIST_OFFSETS, {"topic": topic, "partition": 0}))
    assert isinstance(error, UnknownTopic), error
    with ClusterMetadata(zk) as cluster:
        assert _log_dirs(proc, topic) == []  # the broker took none of its replicas
        cluster.create_topic(topic, 6)
        offsets = wait_for(
            lambda: _offsets_or_none(proc.location, topic, 5), 30, "the broker to lead the complete topic"
        )
        assert offsets["log_end_offset"] == 0
        wait_for(lambda: len(_log_dirs(proc, topic)) == 6, 30, "the broker to open every replica")

        cluster.delete_topic(topic)
        wait_for(lambda: _log_dirs(proc, topic) == [], 30, "the broker to delete the topic's logs")
        error = typed_error(lambda: raw_action(proc.location, wire.LIST_OFFSETS, {"topic": topic, "partition": 0}))
        assert isinstance(error, UnknownTopic), error


def _offsets_or_none(location: str, topic: str, partition: int) -> dict[str, Any] | None:
    try:
        return raw_action(location, wire.LIST_OFFSETS, {"topic": topic, "partition": partition})
    except Exception:
        return None
