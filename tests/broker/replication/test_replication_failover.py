"""Failover with real broker processes: RF=3, min.insync.replicas=2, several producers writing with
``acks=all`` (``send()`` and ``send_batch()``) and one consumer tailing the topic, none of them ever
restarted. The leader of every partition is killed (-9) in turn, then every broker gets a rolling
restart (SIGTERM). Every acknowledged record must be read exactly once, at its acknowledged offset, in
order; every replica ends with the same log. The time from a leader's death until an ``acks=all``
write to its partition succeeds again is measured and printed (``FAILOVER`` lines), not asserted."""

from __future__ import annotations

import signal
import time

import pytest

from replication_helpers import (
    RF3_MIN_ISR_2,
    Ack,
    AckedWriter,
    Cluster,
    TailingConsumer,
    assert_replicas_equal,
    check_delivery,
    consume_all,
    quiet_finish,
    time_until_acked,
    wait_progress,
)
from sparklog import Admin, Producer

TOPIC = "failover"
PARTITIONS = 3
WRITERS = 3


@pytest.mark.slow
def test_kill_9_every_leader_then_rolling_restart_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    connect = cluster.connect
    with Admin(connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, RF3_MIN_ISR_2)
    cluster.wait_full_isr(TOPIC)
    writers = [AckedWriter(connect, TOPIC, PARTITIONS, f"w{i}") for i in range(WRITERS)]
    tail = TailingConsumer(connect, TOPIC)
    probe = Producer(zookeeper=connect, acks="all", linger_ms=0)
    probe_acks: list[Ack] = []
    timings: list[str] = []
    t0 = time.monotonic()
    events: list[tuple[float, str]] = []
    try:
        for p in range(PARTITIONS):  # the probe has a stream to every leader before anything fails
            probe_acks.append(time_until_acked(probe, TOPIC, p, f"probe-warm-{p}".encode(), time.monotonic())[1])
        for w in writers:
            w.start()
        tail.start()
        wait_progress(writers, 100)

        # kill -9 the leader of each partition in turn
        for p in range(PARTITIONS):
            before = cluster.wait_preferred_leaders(TOPIC)[p]
            victim = cluster[before.leader]
            killed_at = time.monotonic()
            victim.kill()
            events.append((killed_at, f"kill -9 broker {before.leader}"))
            took, ack = time_until_acked(probe, TOPIC, p, f"probe-kill-{p}".encode(), killed_at)
            probe_acks.append(ack)
            after = cluster.wait_new_leader(TOPIC, p, before.leader_epoch)
            elected = time.monotonic() - killed_at
            assert after.leader != before.leader and before.leader not in after.isr, after
            timings.append(
                f"FAILOVER kill -9 of broker {before.leader} (leader of {TOPIC}-{p}): acks=all write acknowledged "
                f"after {took:.2f} s (new leader {after.leader} seen in ZooKeeper after {elected:.2f} s)"
            )
            wait_progress(writers, 30)  # writes flow with a broker down
            victim.restart()
            events.append((time.monotonic(), f"restarted broker {before.leader}"))
            cluster.wait_full_isr(TOPIC)
            events.append((time.monotonic(), "full ISR"))
            wait_progress(writers, 30)

        # rolling restart: SIGTERM (leaderships handed over first), start again, wait for the ISR
        for b in sorted(cluster.brokers):
            led = [p for p, s in enumerate(cluster.wait_preferred_leaders(TOPIC)) if s.leader == b]
            stopped_at = time.monotonic()
            events.append((stopped_at, f"SIGTERM broker {b}"))
            cluster[b].proc.send_signal(signal.SIGTERM)  # measured from the signal, not from the exit
            for p in led:
                took, ack = time_until_acked(probe, TOPIC, p, f"probe-term-{b}-{p}".encode(), stopped_at)
                probe_acks.append(ack)
                timings.append(
                    f"FAILOVER SIGTERM of broker {b} (leader of {TOPIC}-{p}): acks=all write acknowledged "
                    f"{took:.2f} s after the signal"
                )
            assert cluster[b].proc.wait(30) == 0
            wait_progress(writers, 30)
            cluster[b].start()
            events.append((time.monotonic(), f"started broker {b}"))
            cluster.wait_full_isr(TOPIC)
            events.append((time.monotonic(), "full ISR"))
            wait_progress(writers, 30)
    except BaseException:
        quiet_finish(tail, *writers)
        raise
    finally:
        probe.close()
        for line in timings:
            print(line)
        timeline = sorted(events + [(t, f"{w.writer}: {e!r}") for w in writers for t, e in w.errors])
        for t, what in timeline:
            print(f"  {t - t0:7.2f} s  {what}")
    for w in writers:
        w.finish()

    cluster.wait_converged(TOPIC)
    ends = {p: cluster.leader_offsets(TOPIC, p)["high_watermark"] for p in range(PARTITIONS)}
    # the consumer that ran through every failover reaches the end on its own
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        have = {p: max([o for q, o, _v in tail.records if q == p], default=-1) + 1 for p in range(PARTITIONS)}
        if have == ends:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    tail.finish()

    errors = [(w.writer, repr(e)) for w in writers for _t, e in w.errors]
    summary = check_delivery(tail.records, writers, probe_acks)
    print(f"delivery (tailing consumer): {summary}; writer errors: {errors}; consumer errors: {tail.errors}")
    fresh = consume_all(connect, TOPIC, ends)
    check_delivery(fresh, writers, probe_acks)
    assert sorted(fresh) == sorted(tail.records), "the tailing consumer and a fresh one read different things"
    assert {p: max(o for q, o, _v in fresh if q == p) + 1 for p in range(PARTITIONS)} == ends

    # every replica holds the same log (records and leader epochs)
    for b in sorted(cluster.brokers):
        assert cluster[b].stop() == 0
    logs = assert_replicas_equal(cluster, TOPIC, PARTITIONS)
    assert {p: [(o, v) for o, _e, _k, v in rows] for p, rows in logs.items()} == {
        p: [(o, v) for q, o, v in sorted(fresh) if q == p] for p in range(PARTITIONS)
    }
    # failovers happened without a producer giving up (the delivery timeout is 30 s) or the consumer failing
    assert not errors, errors
    assert not tail.errors, tail.errors
