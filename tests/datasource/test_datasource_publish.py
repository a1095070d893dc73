"""The sink's publish step without Spark: staging, publishing, and re-publishing a batch whose
slices are already in the topic (the broker's idempotent producer recognises them)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from spark_helpers import chrooted_cluster, create_topic, read_topic
from sparklog import Admin
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource import publish, publish_state
from sparklog.datasource.options import parse_write_options
from sparklog.datasource.stager import Stager


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


@pytest.fixture(params=["broker", "relay"])
def publish_via(request, monkeypatch):
    """Publish on the broker (``copy_records``; the relay made to fail, so it is not used) or
    through this process (the relay, as when staging and target partitions have different leaders)."""
    if request.param == "broker":

        def no_relay(*_args, **_kwargs):
            raise AssertionError("the slices were relayed, not copied on the broker")

        monkeypatch.setattr(publish._Publisher, "_relay", no_relay)
    else:
        monkeypatch.setattr(publish, "BROKER_COPY", False)
    return request.param


def test_republishing_a_published_batch_stores_nothing_twice(spark_cluster, publish_via):
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
    staging, targets = publish_state.intent_from_messages([message])
    _set_state(
        zk,
        sink,
        {"batch": 0, "state": "publishing", "next_seq": {}, "intent": publish_state.targets_json(staging, targets)},
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
    state, version = publish_state.read_state(client, sink)
    assert state is None
    publish_state.write_state(client, sink, {"batch": 0, "state": "published", "next_seq": {}}, None)
    with pytest.raises(publish_state.SinkConflict, match="another run"):
        publish_state.write_state(client, sink, {"batch": 1, "state": "published", "next_seq": {}}, None)
    publish.publish_batch(options, sink, 1, [_stage(options, 0, 3)], forget=True)
    assert len(read_topic(zk, topic)) == 3
    assert publish_state.read_state(client, sink) == (None, None)


def test_a_failed_broker_copy_leaves_the_rest_to_the_relay(spark_cluster, monkeypatch):
    """The broker copies the first actions' slices; then one fails (here: a name the broker does
    not know, as an older broker would answer): the relay publishes the rest, each row once, in order."""
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1, prefix="pub")
    options = parse_write_options({"zookeeper": zk, "topic": topic, "batchRecords": "10"})
    message = _stage(options, 0, 100)
    monkeypatch.setattr(publish, "COPY_SLICES", 3)
    actions: list[str] = []
    real_action = publish.flight.Action

    def action(name, body):
        if name == publish.wire.COPY_RECORDS:
            actions.append(name)
            name = name if len(actions) <= 2 else "no_such_action"
        return real_action(name, body)

    monkeypatch.setattr(publish.flight, "Action", action)
    relayed: list[int] = []
    real_relay = publish._Publisher._relay

    def relay(self, staging, stage_partition, wanted):
        relayed.extend(first for first, *_ in wanted)
        return real_relay(self, staging, stage_partition, wanted)

    monkeypatch.setattr(publish._Publisher, "_relay", relay)
    publish.publish_batch(options, f"sink-{topic}", 0, [message], forget=False)
    assert actions == [publish.wire.COPY_RECORDS] * 3
    staged_firsts = sorted(first for _t, _p, _sp, first, _l, _s in message.slices)
    assert relayed == staged_firsts[6:]  # 2 actions of 3 slices on the broker, the other 4 slices relayed
    assert [r["value"] for r in read_topic(zk, topic)] == [f"r{i}".encode() for i in range(100)]
    assert _state(zk, f"sink-{topic}")["next_seq"] == {topic: {"0/0": 100}}


@pytest.fixture(scope="module")
def three_brokers(zookeeper, tmp_path_factory):
    with chrooted_cluster(zookeeper.connect_string, tmp_path_factory.mktemp("publish-3"), 3, "pub3") as cluster:
        yield cluster


def test_tasks_stage_next_to_each_target_leader_so_brokers_publish(three_brokers, monkeypatch):
    """Three brokers, a target partition led by each (replicated to all three, acks=all): every
    task stages a target partition's rows in a staging partition with the same leader, and the
    brokers copy every slice (the relay is made to fail); the topic then holds each task's rows
    once, in order per partition."""
    zk = three_brokers.zookeeper
    topic = f"pub3-{uuid.uuid4().hex[:8]}"
    with Admin(zk) as admin:
        admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    options = parse_write_options({"zookeeper": zk, "topic": topic, "batchRecords": "50"})
    messages = []
    for task in range(3):
        stager = Stager(options, task_partition=task, attempt=0)
        values = [f"t{task}-{i}".encode() for i in range(300)]
        stager.add(pa.record_batch({"value": values, "partition": pa.array([i % 3 for i in range(300)], pa.int32())}))
        messages.append(stager.finish("query-3", 0))
    client = publish.connections.cluster_client(zk)
    leaders = {p: client.leader(topic, p).broker_id for p in range(3)}
    assert sorted(leaders.values()) == [1, 2, 3]
    for message in messages:
        for _topic, partition, stage_partition, *_ in message.slices:
            assert client.leader(options.staging_topic, stage_partition).broker_id == leaders[partition]

    def no_relay(*_args, **_kwargs):
        raise AssertionError("a slice was relayed, not copied on its broker")

    monkeypatch.setattr(publish._Publisher, "_relay", no_relay)
    publish.publish_batch(options, f"sink-{topic}", 0, messages, forget=False)
    rows = read_topic(zk, topic)
    assert len(rows) == 900
    for p in range(3):
        for task in range(3):
            got = [r["value"] for r in rows if r["partition"] == p and r["value"].startswith(f"t{task}-".encode())]
            assert got == [f"t{task}-{i}".encode() for i in range(p, 300, 3)]
