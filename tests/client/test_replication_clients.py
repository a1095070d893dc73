"""Clients follow leadership on their own: one Producer and one Consumer, never restarted, keep
working while the leader of their partition is killed, stopped cleanly, and given back to its
preferred replica; and a write that is in flight (waiting for its followers with ``acks=all``)
when the leader goes away is retried at the new leader instead of failing."""

from __future__ import annotations

import signal
import time

import pytest

from replication_helpers import RF3_MIN_ISR_2, Cluster, consume_all
from sparklog import Admin, Consumer, Producer
from waiting import wait_for

TOPIC = "clients"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_an_in_flight_acks_all_write_is_retried_at_the_new_leader(cluster: Cluster, how: str) -> None:
    """The followers are frozen so that the write waits at the leader for them; then the leader goes
    (kill -9, or SIGTERM which hands leadership over first) and the followers resume. The write's
    fate at the old leader is unknown to the producer, which must retry it (idempotently) at the
    new leader within its delivery timeout: the record is acknowledged and stored exactly once."""
    with Admin(cluster.connect) as admin:
        admin.create_topic(TOPIC, 1, 3, RF3_MIN_ISR_2)
    state = cluster.wait_full_isr(TOPIC)[0]
    followers = [b for b in state.isr if b != state.leader]
    with Producer(zookeeper=cluster.connect, acks="all", linger_ms=0, delivery_timeout_s=30) as producer:
        first = producer.send(TOPIC, b"before", partition=0).result(30)
        for b in followers:
            cluster[b].proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.0)  # the followers' pending fetches at the leader are answered and not renewed
            in_flight = producer.send(TOPIC, b"in flight", partition=0)
            time.sleep(0.5)
            assert not in_flight.done(), "acknowledged without its (frozen) followers"
            if how == "kill -9":
                cluster[state.leader].kill()
            else:
                cluster[state.leader].proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
        finally:
            for b in followers:
                cluster[b].proc.send_signal(signal.SIGCONT)
        started = time.monotonic()
        try:
            meta = in_flight.result(60)
        except Exception as exc:
            raise AssertionError(
                f"after {how} of the leader, the in-flight acks=all write failed after "
                f"{time.monotonic() - started:.2f} s instead of being retried at the new leader: {exc!r}"
            ) from exc
        after = producer.send(TOPIC, b"after", partition=0).result(30)
    if cluster[state.leader].alive:
        assert cluster[state.leader].proc.wait(30) == 0
    new = cluster.state(TOPIC, 0)
    assert new.leader in followers and new.leader_epoch > state.leader_epoch
    records = consume_all(cluster.connect, TOPIC, {0: after.offset + 1})
    assert [(o, v) for _p, o, v in records] == [
        (first.offset, b"before"),
        (meta.offset, b"in flight"),
        (after.offset, b"after"),
    ]


@pytest.mark.slow
def test_one_producer_and_one_consumer_follow_every_leadership_change(cluster: Cluster) -> None:
    """kill -9 of the leader, its restart (the controller gives leadership back to it, the preferred
    replica), SIGTERM of the leader (controlled shutdown hands leadership over), its start again:
    after each change the same producer's next acks=all record is acknowledged, and the same
    consumer reads it, without either being recreated."""
    connect = cluster.connect
    with Admin(connect) as admin:
        admin.create_topic(TOPIC, 1, 3, RF3_MIN_ISR_2)
    cluster.wait_full_isr(TOPIC)
    producer = Producer(zookeeper=connect, acks="all", linger_ms=0, delivery_timeout_s=30)
    consumer = Consumer(TOPIC, zookeeper=connect, auto_offset_reset="earliest", max_wait_ms=200)
    seen: list[tuple[int, bytes]] = []
    sent: list[tuple[int, bytes]] = []
    report: list[str] = []

    def round_trip(label: str) -> None:
        started = time.monotonic()
        value = f"after {label}".encode()
        meta = producer.send(TOPIC, value, partition=0).result(60)
        acked = time.monotonic() - started
        sent.append((meta.offset, value))

        def read() -> bool:
            seen.extend((r.offset, r.value) for r in consumer.poll(timeout=0.2))
            return (meta.offset, value) in seen

        wait_for(read, 30, f"the consumer to read the record sent {label}")
        report.append(
            f"{label}: leader {cluster.state(TOPIC, 0).leader} epoch {cluster.state(TOPIC, 0).leader_epoch}, "
            f"acked in {acked:.2f} s, read {time.monotonic() - started:.2f} s after sending"
        )

    try:
        round_trip("start")
        preferred = cluster.replicas(TOPIC)[0][0]
        for how in ("kill -9", "SIGTERM"):
            before = cluster.state(TOPIC, 0)
            assert before.leader == preferred
            if how == "kill -9":
                cluster[preferred].kill()
            else:
                cluster[preferred].proc.send_signal(signal.SIGTERM)
            round_trip(f"{how} of leader {preferred}")
            moved = cluster.wait_new_leader(TOPIC, 0, before.leader_epoch)
            assert moved.leader != preferred
            cluster[preferred].proc.wait(30)
            cluster[preferred].restart()
            back = wait_for(
                lambda: (s := cluster.state(TOPIC, 0)).leader == preferred and s,
                30,
                "the preferred replica to lead again",
            )
            assert back.leader_epoch > moved.leader_epoch
            round_trip(f"restart of {preferred} (preferred leader again)")
    finally:
        producer.close()
        consumer.close()
        print("\n".join(report))
    assert seen == sent, "the consumer read something else than what was acknowledged, in that order"


@pytest.mark.slow
def test_a_record_acknowledged_by_its_partition_is_not_reported_as_failed(cluster: Cluster) -> None:
    """RF=2, min.insync.replicas=2: partition 0 on brokers [1, 2] keeps its ISR while partition 1 on
    [2, 3] loses broker 3. Two send()s flushed together, one to each partition: the record partition
    0 stored and acknowledged must be reported acknowledged (a caller retrying "failed" records would
    otherwise write it twice); the one partition 1 refused must fail with its own partition's error."""
    topic = "mixed"
    with Admin(cluster.connect) as admin:
        admin.create_topic(topic, 2, 2, RF3_MIN_ISR_2)
    assert cluster.replicas(topic) == [[1, 2], [2, 3]]
    cluster.wait_full_isr(topic)
    assert cluster[3].stop() == 0
    wait_for(lambda: cluster.state(topic, 1).isr == [2], 30, f"{topic}-1's ISR to shrink to [2]")
    with Producer(zookeeper=cluster.connect, acks="all", linger_ms=100, delivery_timeout_s=3) as producer:
        to_0 = producer.send(topic, b"to partition 0", partition=0)
        to_1 = producer.send(topic, b"to partition 1", partition=1)  # the same flush (linger 100 ms)
        outcomes = {}
        for name, future in (("p0", to_0), ("p1", to_1)):
            try:
                outcomes[name] = future.result(30)
            except Exception as exc:
                outcomes[name] = exc
    stored = consume_all(cluster.connect, topic, {0: cluster.leader_offsets(topic, 0)["high_watermark"]})
    assert [v for _p, _o, v in stored] == [b"to partition 0"]  # partition 0 did store it, readable
    assert isinstance(outcomes["p1"], Exception) and f"{topic}-1" in str(outcomes["p1"]), outcomes
    assert not isinstance(outcomes["p0"], Exception), (
        f"the record stored and readable at {topic}-0 offset {stored[0][1]} was reported as failed: {outcomes['p0']!r}"
    )
    assert outcomes["p0"].offset == stored[0][1]
