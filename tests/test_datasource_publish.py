"""The sink's publish step without Spark: staging, publishing, and re-publishing a batch whose
slices are already in the topic (the broker's idempotent producer recognises them)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from spark_helpers import create_topic, read_topic
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource import publish
from sparklog.datasource.options import parse_write_options
from sparklog.datasource.writer import Stager


@pytest.fixture(autouse=True)
def _close_clients():
    """These tests use the data source's per-process clients in the test process itself."""
    yield
    publish.connections.close_all()


def _stage(options, start: int, count: int, task_partition: int = 0):
    stager = Stager(options, task_partition=task_partition, attempt=0)
    stager.add(pa.record_batch({"value": [f"r{i}".encode() for i in range(start, start + count)]}))
    return stager.finish("query-x", 0)


def _state(zk: str, sink: str) -> dict:
    with ClusterMetadata(zk) as meta:
        data, _ = meta.zk.get(f"{meta.layout.root}/sinks/{sink}")
    return json.loads(data)


def _set_state(zk: str, sink: str, state: dict) -> None:
    with ClusterMetadata(zk) as meta:
        meta.zk.set(f"{meta.layout.root}/sinks/{sink}", json.dumps(state).encode())


def test_republishing_a_published_batch_stores_nothing_twice(spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1, prefix="pub")
    sink = f"sink-{topic}"
    options = parse_write_options({"zookeeper": zk, "topic": topic, "batchRecords": "10"})
    message = _stage(options, 0, 120)
    assert len(message.slices) == 12

    publish.publish_batch(options, sink, 0, [message], forget=False)
    assert [r["value"] for r in read_topic(zk, topic)] == [f"r{i}".encode() for i in range(120)]
    state = _state(zk, sink)
    assert state["state"] == "published" and state["next_seq"] == {topic: {"0/0": 120}}

    # a driver that died after publishing every slice but before recording it: the intent is all
    # that ZooKeeper has; publishing again finds every slice stored (the first 7 are older than the
    # 5 batches the leader remembers per producer, the last 5 are recognised as repeats)
    staging, targets = publish.intent_from_messages([message])
    _set_state(
        zk,
        sink,
        {"batch": 0, "state": "publishing", "next_seq": {}, "intent": publish._targets_json(staging, targets)},
    )
    publish.publish_batch(options, sink, 0, [message], forget=False)
    assert len(read_topic(zk, topic)) == 120
    assert _state(zk, sink)["state"] == "published"

    # a re-run of a published batch is skipped; the next batch goes on with the next sequences
    publish.publish_batch(options, sink, 0, [_stage(options, 0, 120)], forget=False)
    assert len(read_topic(zk, topic)) == 120
    publish.publish_batch(options, sink, 1, [_stage(options, 120, 30), _stage(options, 150, 5, 1)], forget=False)
    values = [r["value"] for r in read_topic(zk, topic)]
    assert sorted(values[120:]) == sorted(f"r{i}".encode() for i in range(120, 155))
    # each task's rows keep their order (the two tasks' slices may interleave)
    assert [v for v in values[120:] if int(v[1:]) < 150] == [f"r{i}".encode() for i in range(120, 150)]
    assert [v for v in values[120:] if int(v[1:]) >= 150] == [f"r{i}".encode() for i in range(150, 155)]
    assert _state(zk, sink)["next_seq"] == {topic: {"0/0": 150, "0/1": 5}}


def test_a_second_writer_of_the_same_sink_is_refused(spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1, prefix="pub")
    sink = f"sink-{topic}"
    options = parse_write_options({"zookeeper": zk, "topic": topic})
    client = publish.connections.cluster_client(zk)
    state, version = publish.read_state(client, sink)
    assert state is None
    publish._write_state(client, sink, {"batch": 0, "state": "published", "next_seq": {}}, None)
    with pytest.raises(publish.SinkConflict, match="another run"):
        publish._write_state(client, sink, {"batch": 1, "state": "published", "next_seq": {}}, None)
    publish.publish_batch(options, sink, 1, [_stage(options, 0, 3)], forget=True)
    assert len(read_topic(zk, topic)) == 3
    assert publish.read_state(client, sink) == (None, None)
