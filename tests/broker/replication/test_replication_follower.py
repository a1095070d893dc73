"""Followers: one that is down longer than ``replica.lag.time.max.ms`` (10 s) while writes go on
leaves the ISR, catches up after its restart, rejoins the ISR and ends with the leader's log; and
a leader that appended records no follower has (``acks=1``) and then died truncates them when it
comes back (leader-epoch truncation), ending with the new leader's log."""

from __future__ import annotations

import re
import signal
import time

import pytest

from replication_helpers import (
    RF3_MIN_ISR_2,
    AckedWriter,
    Cluster,
    assert_replicas_equal,
    check_delivery,
    consume_all,
    quiet_finish,
    replica_records,
    wait_progress,
)
from sparklog import Admin, Producer
from waiting import wait_for

REPLICA_LAG_S = 10.0  # the broker's default replica.lag.time.max.ms


def isr_of(admin: Admin, topic: str) -> list[list[int]]:
    return [sorted(p["isr"]) for p in admin.describe_topic(topic)["partitions"]]


@pytest.mark.slow
def test_a_follower_down_longer_than_the_replica_lag_catches_up_and_rejoins_the_isr(cluster: Cluster) -> None:
    topic, partitions = "lagging", 2
    connect = cluster.connect
    admin = Admin(connect)
    writers: list[AckedWriter] = []
    report: list[str] = []
    try:
        admin.create_topic(topic, partitions, 3, RF3_MIN_ISR_2)
        states = cluster.wait_full_isr(topic)
        # the broker that leads nothing: a follower of every partition
        (follower,) = set(cluster.brokers) - {s.leader for s in states}
        writers = [AckedWriter(connect, topic, partitions, f"w{i}") for i in range(2)]
        for w in writers:
            w.start()
        wait_progress(writers, 100)
        for how in ("kill -9", "SIGTERM"):
            down_at = time.monotonic()
            if how == "kill -9":
                cluster[follower].kill()
            else:
                assert cluster[follower].stop() == 0
            wait_for(lambda: all(follower not in isr for isr in isr_of(admin, topic)), 30, f"{follower} out of the ISR")
            left = time.monotonic() - down_at
            # acks=all goes on with the two in-sync replicas left, for longer than the replica lag
            wait_progress(writers, 50)
            time.sleep(max(0.0, REPLICA_LAG_S + 1 - (time.monotonic() - down_at)))
            wait_progress(writers, 50)
            behind = {p: cluster.leader_offsets(topic, p)["log_end_offset"] for p in range(partitions)}
            restarted_at = time.monotonic()
            cluster[follower].restart()
            wait_for(
                lambda: all(isr == sorted(cluster.replicas(topic)[p]) for p, isr in enumerate(isr_of(admin, topic))),
                60,
                f"broker {follower} back in the ISR of every partition",
                interval=0.1,
            )
            report.append(
                f"{how} of follower {follower}: out of the ISR after {left:.2f} s; down "
                f"{restarted_at - down_at:.1f} s; after its restart back in every ISR within "
                f"{time.monotonic() - restarted_at:.2f} s (leader log ends then: {behind})"
            )
            wait_progress(writers, 50)
    except BaseException:
        quiet_finish(*writers)
        raise
    finally:
        admin.close()
        print("\n".join(report))
    for w in writers:
        w.finish()

    cluster.wait_converged(topic)
    leader_view = consume_all(
        connect, topic, {p: cluster.leader_offsets(topic, p)["high_watermark"] for p in range(partitions)}
    )
    check_delivery(leader_view, writers)
    assert not [e for w in writers for e in w.errors], [(w.writer, e) for w in writers for e in w.errors]
    # the follower's own files (read after stopping it) hold exactly what the leader serves
    assert cluster[follower].stop() == 0
    for p in range(partitions):
        mine = [(o, v) for o, _e, _k, v in replica_records(cluster[follower].data_dir, topic, p)]
        assert mine == [(o, v) for q, o, v in leader_view if q == p], f"broker {follower}'s copy of {topic}-{p}"
    for b in cluster.brokers:
        if cluster[b].alive:
            assert cluster[b].stop() == 0
    assert_replicas_equal(cluster, topic, partitions)


@pytest.mark.slow
def test_a_dead_leaders_unreplicated_records_are_truncated_when_it_returns(cluster: Cluster) -> None:
    """Followers frozen; the leader takes acks=1 records nobody else has; the leader is killed and
    the followers resume: one of them leads in a new epoch and takes acks=all records. The old
    leader, restarted, must drop its unreplicated records (its log ends up equal to the new
    leader's) and none of them may ever be readable."""
    topic = "diverge"
    connect = cluster.connect
    with Admin(connect) as admin:
        admin.create_topic(topic, 1, 3, RF3_MIN_ISR_2)
    old = cluster.wait_full_isr(topic)[0]
    followers = [b for b in old.isr if b != old.leader]
    with (
        Producer(zookeeper=connect, acks="all", linger_ms=0) as safe,
        Producer(zookeeper=connect, acks="1", linger_ms=0) as unsafe,
    ):
        committed = [safe.send(topic, f"committed-{i}".encode(), partition=0).result(30) for i in range(20)]
        assert [m.offset for m in committed] == list(range(20))
        for b in followers:
            cluster[b].proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.0)  # their long polls at the leader are answered; no new fetch is coming
            lonely = [unsafe.send(topic, f"lonely-{i}".encode(), partition=0).result(10) for i in range(5)]
            assert [m.offset for m in lonely] == list(range(20, 25))
            cluster[old.leader].kill()
        finally:
            for b in followers:
                cluster[b].proc.send_signal(signal.SIGCONT)
        new = cluster.wait_new_leader(topic, 0, old.leader_epoch)
        assert new.leader in followers and old.leader not in new.isr
        later = [safe.send(topic, f"later-{i}".encode(), partition=0).result(30) for i in range(10)]
        assert [m.offset for m in later] == list(range(20, 30)), "the new leader continues at the old HW"
        cluster[old.leader].restart()
        cluster.wait_full_isr(topic)
        final = [safe.send(topic, f"final-{i}".encode(), partition=0).result(30) for i in range(5)]
    cluster.wait_converged(topic)
    records = consume_all(connect, topic, {0: final[-1].offset + 1})
    values = [v.decode() for _p, _o, v in records]
    assert values == [f"committed-{i}" for i in range(20)] + [f"later-{i}" for i in range(10)] + [
        f"final-{i}" for i in range(5)
    ]
    assert [o for _p, o, _v in records] == list(range(35))
    # the old leader said so: it cut its log back to where its last epoch ended on the new leader
    log = cluster[old.leader].output().rsplit("=== start", 1)[-1]
    assert re.search(rf"{topic}-0: truncating from 25 to 20\b", log), log[-3000:]
    for b in cluster.brokers:
        assert cluster[b].stop() == 0
    logs = assert_replicas_equal(cluster, topic, 1)
    assert [(o, v.decode()) for o, _e, _k, v in logs[0]] == [(o, v) for o, v in enumerate(values)]
    epochs = sorted({e for _o, e, _k, _v in logs[0]})
    assert epochs[0] == old.leader_epoch and len(epochs) >= 2, epochs  # later records in newer epochs
