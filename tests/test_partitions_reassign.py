"""``sparklog partitions reassign``: replicas move to other brokers while a producer keeps writing
with acks=all; every acknowledged record is still there, once, and the old replicas are gone."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.local_cluster import LocalCluster


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
