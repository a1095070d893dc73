"""``sparklog partitions reassign``: replicas move to other brokers while a producer keeps writing
with acks=all; every acknowledged record is still there, once, and the old replicas are gone."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.broker.controller import RECONCILE_INTERVAL_S
from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.local_cluster import LocalCluster


def test_a_replica_dropped_by_a_reassignment_cannot_rejoin_the_isr(sparklog_connect: str) -> None:
    """CI once saw ISR [2, 3, 4] on a partition moved to [4, 3]: the leader took the old replica
    back into the ISR after the move. The move and the ISR shrink are one transaction, and a leader's
    ISR write is checked against the assignment."""
    with ClusterMetadata(sparklog_connect) as meta:
        for b in (1, 2, 3):
            meta.register_broker(b, "127.0.0.1", 1000 + b)
        meta.create_topic("fenced", 1, 3)
        topic_data, topic_stat = meta.zk.get(meta.layout.topic("fenced"))
        state_data, state_stat = meta.zk.get(meta.layout.partition_state("fenced", 0))
        state = PartitionState.from_json(state_data)
        replicas = json.loads(topic_data)["replicas"][0]
        kept = replicas[:2]
        shrunk = PartitionState(state.leader, state.leader_epoch, kept)

        # a stale version anywhere refuses the whole move: neither znode changes
        assert not meta.move_replicas("fenced", [kept], topic_stat.version, {0: (shrunk, state_stat.version + 1)})
        assert not meta.move_replicas("fenced", [kept], topic_stat.version + 1, {0: (shrunk, state_stat.version)})
        assert meta.topic("fenced").replicas == [replicas]
        assert meta.partition_state("fenced", 0) == state

        assert meta.move_replicas("fenced", [kept], topic_stat.version, {0: (shrunk, state_stat.version)})
        assert meta.topic("fenced").replicas == [kept]
        assert meta.partition_state("fenced", 0) == shrunk

        # the leader has applied the shrunk state and its dropped follower fetches once more
        moved_version = state_stat.version + 1
        back = PartitionState(state.leader, state.leader_epoch, sorted(replicas))
        assert meta.set_isr("fenced", 0, back, moved_version) is None
        assert meta.partition_state("fenced", 0) == shrunk
        # an ISR change within the replicas goes through; a stale state version does not
        alone = PartitionState(state.leader, state.leader_epoch, [state.leader])
        assert meta.set_isr("fenced", 0, alone, moved_version - 1) is None
        assert meta.set_isr("fenced", 0, alone, moved_version) == moved_version + 1
        assert meta.partition_state("fenced", 0) == alone


@pytest.mark.slow
def test_reassignment_moves_replicas_online_without_losing_acknowledged_records(
    tmp_path: Path, sparklog_connect: str
) -> None:
    with LocalCluster(tmp_path, brokers=4, zookeeper=sparklog_connect) as cluster:
        with Admin(cluster.zookeeper) as admin:
            admin.create_topic("moving", 2, 2, {"min.insync.replicas": "2"})
            before = admin.describe_topic("moving")["partitions"]
        assert all(4 not in p["replicas"] for p in before)
        acknowledged: dict[tuple[int, int], bytes] = {}
        stop = threading.Event()
        errors: list[BaseException] = []

        def produce() -> None:
            i = 0
            try:
                with Producer(cluster.zookeeper, acks="all") as producer:
                    while not stop.is_set():
                        values = [b"v%d" % (i + k) for k in range(50)]
                        for meta in producer.send_batch("moving", {"value": values}):
                            for k in range(meta.last_offset - meta.base_offset + 1):
                                acknowledged[(meta.partition, meta.base_offset + k)] = values[k]
                        i += 50
            except BaseException as exc:  # reported below
                errors.append(exc)

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(1.0)
        with Admin(cluster.zookeeper) as admin:
            assignment = admin.reassign_partitions("moving", {0: [3, 4], 1: [4, 3]}, wait=True, timeout_s=120)
        time.sleep(1.0)
        stop.set()
        writer.join(60)
        assert not errors, errors
        assert assignment == {0: [3, 4], 1: [4, 3]}
        with Admin(cluster.zookeeper) as admin:
            after = admin.describe_topic("moving")["partitions"]
        assert [sorted(p["isr"]) for p in after] == [[3, 4], [3, 4]]
        assert all(p["leader"] in (3, 4) for p in after)

        got: dict[tuple[int, int], bytes] = {}
        with Consumer("moving", zookeeper=cluster.zookeeper, auto_offset_reset="earliest") as consumer:
            deadline = time.monotonic() + 60
            while len(got) < len(acknowledged) and time.monotonic() < deadline:
                for batch in consumer.poll_batches(timeout=1.0):
                    keys = zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True)
                    for key, value in zip(keys, batch.column("value").to_pylist(), strict=True):
                        assert key not in got, f"record {key} read twice"
                        got[key] = value
        assert len(acknowledged) > 0
        assert {k: got.get(k) for k in acknowledged} == acknowledged
        # brokers 1 and 2 no longer hold the partitions
        for old in (1, 2):
            assert not list((cluster.data_dir / f"broker-{old}").glob("moving-*"))


def test_a_reassignment_that_drops_replicas_finishes_once_they_are_dropped(
    tmp_path: Path, sparklog_connect: str
) -> None:
    """The step that drops the old replicas is a reassignment's last: the controller finishes it
    then, not at its next periodic pass (nothing else wakes it; ``partitions reassign`` waited 30 s
    for every move on a quiet cluster). A partition whose grown replica list is already its target
    (partition 1: [2] -> [2, 3]) is done only once the new replica is in sync."""
    with LocalCluster(tmp_path, brokers=3, zookeeper=sparklog_connect) as cluster:
        with Admin(cluster.zookeeper) as admin:
            admin.create_topic("dropping", 3, 1)
            began = time.monotonic()
            assignment = admin.reassign_partitions("dropping", {p: [2, 3] for p in range(3)}, wait=True)
            took = time.monotonic() - began
            assert assignment == {0: [2, 3], 1: [2, 3], 2: [2, 3]}
            assert all(sorted(p["isr"]) == [2, 3] for p in admin.describe_topic("dropping")["partitions"])
        assert took < RECONCILE_INTERVAL_S / 2, f"the reassignment took {took:.1f} s"
