"""ZooKeeper locked down (issue 17): with ``zookeeper.digest`` the brokers create sparklog's znodes
so that an anonymous ZooKeeper client can change none of them and cannot read credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from security_helpers import SecureSetup
from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.coordination.zk_layout import ZkLayout, split_connect_string
from sparklog.coordination.zookeeper_acls import ZooKeeperDigest, client_options

TOPIC = "locked"
DIGEST = ZooKeeperDigest("sparklog", "zk-secret")


def test_an_anonymous_zookeeper_client_can_change_nothing(
    sparklog_connect: str, child_processes, tmp_path: Path
) -> None:
    hosts, root = split_connect_string(sparklog_connect)
    layout = ZkLayout(root)
    secure = SecureSetup.create(tmp_path / "security", sparklog_connect, zookeeper_digest=DIGEST)
    broker = secure.start_broker(tmp_path, child_processes)
    bootstrap = f"127.0.0.1:{broker.port}"
    admin_config = {**secure.client("admin"), "bootstrap.servers": bootstrap}
    with Admin(config=admin_config) as admin:
        admin.create_topic(TOPIC, 2, 1)
    with Producer(acks="all", config=admin_config) as producer:
        producer.send(TOPIC, b"kept", partition=0).result(30)
    with Consumer(TOPIC, group="g", auto_offset_reset="earliest", config=admin_config) as consumer:
        for _ in range(50):
            if consumer.poll_batches(timeout=0.2):
                break
        consumer.commit()

    anonymous = KazooClient(hosts=hosts, timeout=10.0)
    anonymous.start(timeout=15)
    try:
        state = layout.partition_state(TOPIC, 0)
        data, _ = anonymous.get(state)  # reading metadata is allowed
        assert b"leader" in data
        attempts = [
            lambda: anonymous.set(layout.topic(TOPIC), b"{}"),
            lambda: anonymous.set(state, b'{"leader": 9, "leader_epoch": 99, "isr": [9]}'),
            lambda: anonymous.delete(layout.topic(TOPIC), recursive=True),
            lambda: anonymous.create(f"{layout.topics}/intruder", b"{}"),
            lambda: anonymous.set(layout.committed_offset("g", TOPIC, 0), b"0"),
            lambda: anonymous.delete(layout.broker(1)),
            lambda: anonymous.create(layout.user("mallory"), b"{}", makepath=True),
            lambda: anonymous.get(layout.user("alice")),  # credentials are not even readable
        ]
        for attempt in attempts:
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        anonymous.stop()
        anonymous.close()

    owner = KazooClient(hosts=hosts, timeout=10.0, **client_options(DIGEST))
    owner.start(timeout=15)
    try:
        assert b"stored_key" in owner.get(layout.user("alice"))[0]
    finally:
        owner.stop()
        owner.close()
    with Consumer(TOPIC, auto_offset_reset="earliest", config=admin_config) as consumer:
        got = []
        for _ in range(50):
            for batch in consumer.poll_batches(timeout=0.2):
                got.extend(batch.column("value").to_pylist())
            if got:
                break
    assert got == [b"kept"]
