"""min.insync.replicas=2 with two of three brokers down: acks=all writes fail clearly (a typed,
retriable error raised once the producer's small delivery timeout is spent, never a hang), nothing
of a refused write is ever readable, and after the brokers come back the same producers write again
and consumers see only acknowledged data (plus, at most once, writes whose fate was unknown)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from replication_helpers import (
    RF3_MIN_ISR_2,
    AckedWriter,
    Cluster,
    ManualSends,
    check_delivery,
    consume_all,
    wait_progress,
)
from sparklog import Admin, Producer
from sparklog.errors import BrokerNotAvailable, NotEnoughReplicas
from waiting import finishes, wait_for

TOPIC = "minisr"
PARTITIONS = 3
DELIVERY_TIMEOUT_S = 5.0
HANG_GUARD_S = 60.0  # beyond the delivery timeout: a send still running then hangs
CLEAR_ERRORS = (NotEnoughReplicas, BrokerNotAvailable, TimeoutError)


def send_each_partition(producer: Producer, sends: ManualSends, label: str) -> list[Any]:
    outcomes = []
    for p in range(PARTITIONS):
        value = f"{label}-{p}".encode()
        outcomes.append(sends.track(producer.send(TOPIC, value, partition=p), value))
    return outcomes


@pytest.mark.slow
def test_two_of_three_brokers_down_refuses_acks_all_writes_and_recovers(cluster: Cluster) -> None:
    connect = cluster.connect
    with Admin(connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 3, RF3_MIN_ISR_2)
    cluster.wait_full_isr(TOPIC)
    survivor, *down = sorted(cluster.brokers)
    writer = AckedWriter(connect, TOPIC, PARTITIONS, "w", delivery_timeout_s=DELIVERY_TIMEOUT_S)
    short = Producer(zookeeper=connect, acks="all", linger_ms=0, delivery_timeout_s=DELIVERY_TIMEOUT_S)
    in_flight = ManualSends("in flight")  # sent as the brokers died: fate unknown
    refused = ManualSends("refused")  # sent once the ISR had shrunk: must never be stored
    after = ManualSends("after")
    report: list[str] = []
    try:
        send_each_partition(short, after, "warm")  # streams open to every leader
        writer.start()
        wait_progress([writer], 100)

        killed_at = time.monotonic()
        for b in down:
            cluster[b].kill()
        dying = send_each_partition(short, in_flight, "in-flight")
        wait_for(
            lambda: all(s.leader == survivor and s.isr == [survivor] for s in cluster.states(TOPIC)),
            30,
            f"broker {survivor} alone leading every partition with an ISR of itself",
        )
        report.append(
            f"ISR of every partition shrank to [{survivor}] {time.monotonic() - killed_at:.2f} s after the kill"
        )
        for o in dying:
            assert o.done.wait(DELIVERY_TIMEOUT_S + 30)
        hw_during = {p: cluster.leader_offsets(TOPIC, p)["high_watermark"] for p in range(PARTITIONS)}

        # with the ISR below min.insync.replicas: refused, clearly and in time, both ways of sending
        refusals = send_each_partition(short, refused, "refused")
        for o in refusals:
            assert o.done.wait(DELIVERY_TIMEOUT_S + 30)
        batch_started = time.monotonic()
        batch_values = [f"refused-batch-{i}".encode() for i in range(10)]
        refused.sent_order += batch_values
        refused.unacked.update(batch_values)
        with pytest.raises(CLEAR_ERRORS) as batch_error:  # raised while the brokers are still down: no hang
            finishes(
                lambda: short.send_batch(TOPIC, {"value": batch_values}, partition=1),
                DELIVERY_TIMEOUT_S + HANG_GUARD_S,
                "send_batch with the ISR below min.insync.replicas",
            )
        batch_s = time.monotonic() - batch_started  # printed
        errors_before = len(writer.errors)
        wait_for(lambda: len(writer.errors) > errors_before, 30, "the writer to be refused too")
        # nothing became readable meanwhile
        assert {p: cluster.leader_offsets(TOPIC, p)["high_watermark"] for p in range(PARTITIONS)} == hw_during
        outage_view = consume_all(connect, TOPIC, hw_during)
        assert not {v for _p, _o, v in outage_view} & (refused.unacked | set(batch_values))

        # both brokers back: the same producers write again
        for b in down:
            cluster[b].restart()
        cluster.wait_full_isr(TOPIC)
        recovered_at = time.monotonic()
        for o in send_each_partition(short, after, "after"):
            assert o.done.wait(60)
        wait_progress([writer], 100)
        report.append(f"writes acknowledged again {time.monotonic() - recovered_at:.2f} s after the ISR was full")
    finally:
        writer.finish()
        short.close()
        print("\n".join(report))

    for label, outcomes in (("in flight", dying), ("refused", refusals)):
        for o in outcomes:
            report.append(f"{label}: {o.error!r} after {o.seconds:.2f} s")
    report.append(f"send_batch refused: {batch_error.value!r} after {batch_s:.2f} s")
    print("\n".join(report[-7:]))

    cluster.wait_converged(TOPIC)
    ends = {p: cluster.leader_offsets(TOPIC, p)["high_watermark"] for p in range(PARTITIONS)}
    records = consume_all(connect, TOPIC, ends)
    summary = check_delivery(records, [writer, in_flight, refused, after])
    print(f"delivery: {summary}")
    stored = {v for _p, _o, v in records}
    assert not stored & (refused.unacked | set(batch_values)), "a refused write became readable"
    assert not refused.acked, refused.acked
    assert len(after.acked) == 2 * PARTITIONS, after.errors

    # the failures were clear: typed, retriable errors (each came at all: the waits above are hang guards)
    for label, outcomes in (("in flight", dying), ("refused", refusals)):
        for o in outcomes:
            assert isinstance(o.error, CLEAR_ERRORS), f"{label}: {o.error!r}"
    # every refusal is the broker's own answer to that record: the records, sent one after the other
    # to different partitions, did not wait for each other's retries (a record queued behind them
    # would have run out its delivery timeout unsent, a RequestTimedOut)
    assert all(isinstance(o.error, NotEnoughReplicas) for o in refusals), [o.error for o in refusals]
    assert isinstance(batch_error.value, NotEnoughReplicas), repr(batch_error.value)
    writer_errors = [e for _t, e in writer.errors]
    assert all(isinstance(e, CLEAR_ERRORS) for e in writer_errors), writer_errors
