"""Broker process lifecycle: it registers in ZooKeeper and answers ping and list_offsets, and SIGTERM
shuts it down promptly even while clients are connected (an idle producer stream, a long poll)."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import pytest

from broker_helpers import BrokerProcess, child_env, ping, raw_action, raw_fetch
from sparklog import Admin, Producer
from sparklog.broker.fetch_handler import MAX_WAIT_MS
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.local_cluster import broker_command
from sparklog.protocol import wire

TOPIC = "lifecycle"


def _sigterm_ends(broker: BrokerProcess, guard: float) -> bool:
    """SIGTERM; whether the broker exited (False if it still ran after ``guard`` s, a hang guard)."""
    assert broker.proc is not None
    broker.proc.terminate()
    try:
        broker.proc.wait(guard)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.mark.slow
def test_sigterm_stops_the_broker_while_a_producer_is_connected(start_broker: Any, sparklog_connect: str) -> None:
    """A Producer keeps one do_put stream open per partition between sends; SIGTERM must still stop
    the broker (Broker.stop -> BrokerServer.shutdown waits for running calls: an idle stream never ends)."""
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, 1)
    producer = Producer(zookeeper=sparklog_connect)
    try:
        assert producer.send(TOPIC, b"x").result(30).offset == 0
        exited = _sigterm_ends(broker, 10.0)
    finally:
        producer.close()
        broker.stop_or_kill(10)
    assert exited, "the broker still ran 10 s after SIGTERM with an idle producer connected"
    assert broker.proc is not None and broker.proc.returncode == 0


@pytest.mark.slow
def test_sigterm_stops_the_broker_during_a_long_poll(start_broker: Any, sparklog_connect: str) -> None:
    """A fetch waiting for data (max_wait_ms up to 30 s) must not hold up a clean shutdown: with
    a fetch waiting the longest max wait, the broker has exited well before that wait is over."""
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, 1)
    outcome: dict[str, Any] = {}

    def long_poll() -> None:
        try:
            outcome["rows"] = raw_fetch(broker.location, TOPIC, 0, 0, max_wait_ms=MAX_WAIT_MS).num_rows
        except Exception as exc:
            outcome["error"] = exc

    poller = threading.Thread(target=long_poll, daemon=True)
    poller.start()
    time.sleep(0.5)
    assert poller.is_alive()
    exited = _sigterm_ends(broker, MAX_WAIT_MS / 2000)
    poller.join(30)
    assert exited, f"the broker still ran {MAX_WAIT_MS / 2000} s after SIGTERM, a {MAX_WAIT_MS} ms long poll waiting"
    assert broker.proc is not None and broker.proc.returncode == 0


def test_ping_and_list_offsets_answer(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(7)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, 2)
        assert admin.cluster.brokers()[7].port == broker.port
    assert ping(broker.location) == 7
    with Producer(zookeeper=sparklog_connect) as producer:
        producer.send_batch(TOPIC, {"value": [b"a", b"b", b"c"], "timestamp": [1000, 2000, 3000]}, partition=1)
    offsets = raw_action(broker.location, wire.LIST_OFFSETS, {"topic": TOPIC, "partition": 1, "timestamp": 1500})
    assert offsets == {
        "log_start_offset": 0,
        "local_log_start_offset": 0,  # the same unless local retention deleted tiered segments
        "log_end_offset": 3,
        "high_watermark": 3,
        "leader_epoch": 0,
        "offset_for_time": 1,
    }


def test_a_second_broker_with_a_live_id_stops_before_taking_any_role(
    start_broker: Any, sparklog_connect: str, tmp_path: Any
) -> None:
    """A second ``--id 1`` (another data dir) beside a live broker 1 is refused at registration,
    at once (the registered broker listens: no crashed session to wait out), before it watches any
    topic: it never takes the partitions' roles, and their leader epochs stay as they were."""
    live = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic("owned", 2, 1)
    with ClusterMetadata(sparklog_connect) as cluster:
        before = [cluster.partition_state("owned", p) for p in range(2)]
        assert all(state.leader == 1 for state in before)
        second = subprocess.run(
            broker_command(1, 0, tmp_path / "second", sparklog_connect),
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
        )
        assert second.returncode == 1, second
        output = second.stdout + second.stderr
        assert f"registered by a live broker listening on 127.0.0.1:{live.port}" in output, output
        assert "leads" not in output and "ISR" not in output and "Traceback" not in output, output
        assert [cluster.partition_state("owned", p) for p in range(2)] == before
    assert ping(live.location) == 1
