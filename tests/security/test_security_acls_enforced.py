"""ACLs enforced by a broker with ``authorizer.enabled=true`` (issue 17): each operation is denied
with a message naming it, then allowed once an ACL allows it; super users may do everything."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from broker_helpers import BrokerProcess
from security_helpers import SecureSetup
from sparklog.client.admin import Admin
from sparklog.client.cluster_address import resolve
from sparklog.client.cluster_client import ClusterClient
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.errors import AuthorizationFailed
from waiting import wait_for

TOPIC = "orders"


@pytest.fixture
def secure(sparklog_connect: str, tmp_path: Path) -> SecureSetup:
    setup = SecureSetup.create(tmp_path / "security", sparklog_connect)
    setup.extra = {"authorizer.enabled": "true"}
    return setup


@pytest.fixture
def broker(secure: SecureSetup, sparklog_connect: str, child_processes, tmp_path: Path) -> BrokerProcess:
    return secure.start_broker(tmp_path, child_processes)


def produce(secure: SecureSetup, values: list[bytes]) -> None:
    config = {**secure.client("alice"), "bootstrap.servers": secure.bootstrap}
    with Producer(acks="all", config=config, delivery_timeout_s=10) as producer:
        for future in [producer.send(TOPIC, v, partition=0) for v in values]:
            future.result(30)


def consume(secure: SecureSetup, group: str | None = None) -> list[bytes]:
    with Consumer(
        TOPIC,
        group=group,
        bootstrap_servers=secure.bootstrap,
        auto_offset_reset="earliest",
        config=secure.client("alice"),
        retry_timeout_s=5,
    ) as consumer:
        got: list[bytes] = []
        for _ in range(50):
            for batch in consumer.poll_batches(timeout=0.2):
                got.extend(batch.column("value").to_pylist())
            if got:
                break
        if group is not None:
            consumer.commit()
        return got


def test_each_operation_is_denied_then_allowed_by_an_acl(secure: SecureSetup, broker: BrokerProcess) -> None:
    bootstrap = secure.bootstrap = f"127.0.0.1:{broker.port}"
    with (
        Admin(bootstrap_servers=bootstrap, config=secure.client("alice")) as alice,
        pytest.raises(AuthorizationFailed, match=f"User:alice may not Create topic '{TOPIC}'"),
    ):
        alice.create_topic(TOPIC, 1, 1)
    with Admin(bootstrap_servers=bootstrap, config=secure.client("admin")) as admin:  # a super user
        admin.create_topic(TOPIC, 1, 1)

    with pytest.raises(AuthorizationFailed, match=f"User:alice may not (Write|Describe) topic '{TOPIC}'"):
        produce(secure, [b"denied"])
    secure.allow("topic", TOPIC, "Write")
    wait_for(lambda: _succeeds(lambda: produce(secure, [b"one", b"two"])), 15, "Write to be allowed")

    with pytest.raises(AuthorizationFailed, match=f"may not (Read|Describe) topic '{TOPIC}'"):
        consume(secure)
    secure.allow("topic", TOPIC, "Read")
    got = wait_for(lambda: _succeeds(lambda: consume(secure)), 15, "Read to be allowed")
    assert got[:2] == [b"one", b"two"]

    with pytest.raises(AuthorizationFailed, match="User:alice may not (Read|Describe) group 'g1'"):
        consume(secure, group="g1")
    secure.allow("group", "g1", "Read")
    wait_for(lambda: _succeeds(lambda: consume(secure, group="g1")), 15, "the group to be allowed")

    # the Spark sink's state: Describe to read, Write to change its transactional id (the sink id)
    client = ClusterClient.connect(resolve(None, bootstrap, secure.client("alice")))
    try:
        with pytest.raises(AuthorizationFailed, match="User:alice may not Describe transactional id 'q-1'"):
            client.view.read_sink_state("q-1")
        secure.allow("transactional-id", "q-1", "Write")
        wait_for(lambda: _succeeds(lambda: client.view.read_sink_state("q-1")), 15, "the sink state to be allowed")
        version = client.view.write_sink_state("q-1", {"batch": 1}, None)
        assert client.view.read_sink_state("q-1") == ({"batch": 1}, version)
        with pytest.raises(AuthorizationFailed, match="User:alice may not Write transactional id 'q-2'"):
            client.view.write_sink_state("q-2", {"batch": 1}, None)
    finally:
        client.close()

    # a removed ACL takes effect on the next call
    secure.disallow("topic", TOPIC, "Write")
    wait_for(lambda: not _succeeds(lambda: produce(secure, [b"late"])), 15, "Write to be denied again")

    with Admin(bootstrap_servers=bootstrap, config=secure.client("bob")) as bob:  # no ACL at all: sees nothing
        assert TOPIC not in bob.list_topics()


def _succeeds(action) -> object:
    try:
        return action() or True
    except AuthorizationFailed:
        return False


def test_an_open_fetch_stream_ends_when_its_read_acl_goes(secure: SecureSetup, broker: BrokerProcess) -> None:
    """Records keep arriving, so the consumer's fetch stream is never renewed: the broker checks the
    Read ACL before each message it sends, not only when the stream opens."""
    secure.bootstrap = f"127.0.0.1:{broker.port}"
    with Admin(bootstrap_servers=secure.bootstrap, config=secure.client("admin")) as admin:
        admin.create_topic(TOPIC, 2, 1)
    secure.allow("topic", TOPIC, "Read")
    admin_config = {**secure.client("admin"), "bootstrap.servers": secure.bootstrap}
    stop = threading.Event()

    def keep_producing() -> None:
        with Producer(acks="1", config=admin_config) as producer:
            n = 0
            while not stop.is_set():
                producer.send(TOPIC, str(n).encode(), partition=n % 2).result(30)
                n += 1
                time.sleep(0.01)

    def alices_consumer() -> Consumer:
        return Consumer(
            TOPIC,
            bootstrap_servers=secure.bootstrap,
            auto_offset_reset="earliest",
            config=secure.client("alice"),
            max_wait_ms=30_000,  # an idle stream would stay open this long: only the ACL check ends it
        )

    producing = threading.Thread(target=keep_producing, daemon=True)
    producing.start()
    try:
        # the broker learns the new ACL through a ZooKeeper watch: retried until it has
        with wait_for(lambda: _succeeds(alices_consumer), 15, "Read to be allowed") as consumer:
            wait_for(lambda: consumer.poll_batches(timeout=0.5), 30, "records through alice's open fetch")
            secure.disallow("topic", TOPIC, "Read")
            deadline = time.monotonic() + 20
            with pytest.raises(AuthorizationFailed, match=f"User:alice may not Read topic '{TOPIC}'"):
                while time.monotonic() < deadline:
                    consumer.poll_batches(timeout=0.5)
    finally:
        stop.set()
        producing.join(30)
