"""A leader cut off from ZooKeeper while producers with ``acks=all`` keep writing.

- Its ZooKeeper traffic black-holed (a proxy between it and ZooKeeper) while clients and the other
  brokers still reach it: it must refuse writes, its session expires, another replica leads, and
  when ZooKeeper is reachable again it comes back as a follower with the new leader's log.
- Frozen (SIGSTOP) for longer than its session timeout, then resumed (SIGCONT): the same, and the
  partition must fail over while it is frozen (other brokers and clients must not wait for it).

In both, no write any client saw acknowledged is lost and every replica ends with the same log.
And a controller whose session expired stops acting as controller once another broker took over."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from broker_helpers import ping, raw_produce, typed_error
from replication_helpers import (
    RF3_MIN_ISR_2,
    AckedWriter,
    Cluster,
    ManualSends,
    TailingConsumer,
    ZooKeeperProxy,
    assert_replicas_equal,
    check_delivery,
    consume_all,
    quiet_finish,
    wait_progress,
)
from sparklog import Admin, Producer
from sparklog.errors import NotLeader
from waiting import wait_for

SESSION_TIMEOUT_S = 4.0  # the brokers' ZooKeeper session


def finish_and_verify(
    cluster: Cluster,
    topic: str,
    partitions: int,
    writers: list[AckedWriter],
    tail: TailingConsumer,
    others: tuple[ManualSends, ...] = (),
) -> None:
    """Stop writing; every replica converges; the tailing consumer and a fresh one read every
    acknowledged record exactly once; every replica's files hold the same log."""
    for w in writers:
        w.finish()
    cluster.wait_converged(topic)
    ends = {p: cluster.leader_offsets(topic, p)["high_watermark"] for p in range(partitions)}
    wait_for(
        lambda: all(any(q == p and o == end - 1 for q, o, _v in tail.records) for p, end in ends.items() if end),
        60,
        "the tailing consumer to reach the end",
    )
    tail.finish()
    check_delivery(tail.records, [*writers, *others])
    fresh = consume_all(cluster.connect, topic, ends)
    check_delivery(fresh, [*writers, *others])
    assert sorted(fresh) == sorted(tail.records)
    for b in cluster.brokers:
        assert cluster[b].stop() == 0, cluster[b].output()[-3000:]
    assert_replicas_equal(cluster, topic, partitions)
    assert not tail.errors, tail.errors


@pytest.mark.slow
def test_a_leader_cut_off_from_zookeeper_refuses_writes_and_comes_back_as_a_follower(
    sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    topic, partitions = "cutoff", 2
    zk_host, zk_port = sparklog_connect.split("/", 1)[0].rsplit(":", 1)
    proxy = ZooKeeperProxy(zk_host, int(zk_port))
    cluster = Cluster(
        sparklog_connect, tmp_path, child_processes, zookeeper_for={1: proxy.connect_string(sparklog_connect)}
    )
    writers: list[AckedWriter] = []
    tail: TailingConsumer | None = None
    report: list[str] = []
    try:
        cluster.start()
        with Admin(sparklog_connect) as admin:
            admin.create_topic(topic, partitions, 3, RF3_MIN_ISR_2)
        before = cluster.wait_full_isr(topic)
        led = [p for p, s in enumerate(before) if s.leader == 1]
        assert led, before
        writers = [AckedWriter(sparklog_connect, topic, partitions, f"w{i}") for i in range(2)]
        tail = TailingConsumer(sparklog_connect, topic)
        for w in writers:
            w.start()
        tail.start()
        wait_progress(writers, 100)

        cut_at = time.monotonic()
        proxy.cut()
        new_leaders = {}
        for p in led:
            new = cluster.wait_new_leader(topic, p, before[p].leader_epoch, timeout=30)
            assert new.leader != 1 and 1 not in new.isr, new
            new_leaders[p] = new.leader
            report.append(f"{topic}-{p}: new leader {new.leader} {time.monotonic() - cut_at:.2f} s after the cut")
        # broker 1 still answers clients, but refuses writes: it cannot know whether it still leads
        assert ping(cluster[1].location) == 1
        batch = pa.RecordBatch.from_pydict({"value": [b"to the cut-off broker"]})
        for p in led:
            command = {"type": "produce", "topic": topic, "partition": p, "acks": "all"}
            refused = typed_error(lambda p=p, command=command: raw_produce(cluster[1].location, command, [batch]))
            assert isinstance(refused, NotLeader), refused
        wait_progress(writers, 100, timeout=30)  # writes flow at the new leaders meanwhile
        time.sleep(max(0.0, 2 * SESSION_TIMEOUT_S - (time.monotonic() - cut_at)))

        healed_at = time.monotonic()
        proxy.heal()
        wait_for(lambda: 1 in cluster.live(), 30, "broker 1 to register again")
        cluster.wait_full_isr(topic)
        report.append(f"broker 1 back in every ISR {time.monotonic() - healed_at:.2f} s after ZooKeeper was reachable")
        wait_progress(writers, 50)
        # it came back as a follower: the new leader took it back into the ISR (only a replica that
        # fetches as a follower, caught up, is added), before leadership went back to it
        for p, new_leader in new_leaders.items():
            assert re.search(rf"{topic}-{p}: ISR \[[0-9, ]*\] -> \[1, 2, 3\]", cluster[new_leader].output()), (
                f"broker {new_leader} never took broker 1 back into the ISR of {topic}-{p}"
            )
        finish_and_verify(cluster, topic, partitions, writers, tail)
        assert not [e for w in writers for e in w.errors], [(w.writer, e) for w in writers for e in w.errors]
        log = cluster[1].output()
        assert "refusing writes" in log and "ZooKeeper session back" in log
    finally:
        quiet_finish(*writers, *([tail] if tail is not None else []))
        print("\n".join(report))
        cluster.close()
        proxy.close()


@pytest.mark.slow
def test_a_frozen_leader_is_replaced_and_rejoins_as_a_follower(cluster: Cluster) -> None:
    """SIGSTOP the leader (longer than its session timeout: until the new leader has served a
    write and a send to the frozen leader was answered, 12 s at most), then SIGCONT; producers
    with acks=all keep writing throughout. Safety: nothing acknowledged is lost, the old leader
    rejoins as a follower, every replica ends equal.
    Availability, checked last: once a new leader is elected, a producer that never talked to the
    frozen broker gets an acks=all write acknowledged while the old leader is still frozen; and a
    producer whose open stream goes to the frozen leader gives an answer (an acknowledgement from
    the new leader, or an error) while the old leader is still frozen too: its delivery timeout
    (3 s) ends its wait, not the old leader's return."""
    topic, partitions, freeze_s, short_timeout_s = "frozen", 2, 12.0, 3.0
    connect = cluster.connect
    with Admin(connect) as admin:
        admin.create_topic(topic, partitions, 3, RF3_MIN_ISR_2)
    before = cluster.wait_full_isr(topic)
    victim = before[0].leader
    writers = [AckedWriter(connect, topic, partitions, f"w{i}") for i in range(2)]
    tail = TailingConsumer(connect, topic)
    sends = ManualSends("single sends")
    short = Producer(zookeeper=connect, acks="all", linger_ms=0, delivery_timeout_s=short_timeout_s)
    probe: Producer | None = None
    report: list[str] = []
    try:
        sends.track(short.send(topic, b"short-0", partition=0), b"short-0").done.wait(30)
        for w in writers:
            w.start()
        tail.start()
        wait_progress(writers, 100)
        frozen_at = time.monotonic()
        cluster[victim].proc.send_signal(signal.SIGSTOP)
        try:
            # its stream goes to the frozen leader
            stuck_stream = sends.track(short.send(topic, b"short-1", partition=0), b"short-1")
            new = cluster.wait_new_leader(topic, 0, before[0].leader_epoch, timeout=freeze_s)
            elected_s = time.monotonic() - frozen_at
            report.append(f"new leader {new.leader} of {topic}-0 {elected_s:.2f} s after SIGSTOP of {victim}")
            probe = Producer(zookeeper=connect, acks="all", linger_ms=0)  # it never talked to the frozen broker
            fresh = sends.track(probe.send(topic, b"fresh producer", partition=0), b"fresh producer")
            for outcome in (fresh, stuck_stream):  # the freeze lasts until both resolved (12 s at most)
                outcome.done.wait(max(0.0, frozen_at + freeze_s - time.monotonic()))
            frozen_state = cluster.state(topic, 0)
            # what had happened while the old leader was frozen (it resumes on the next line)
            acked_while_frozen = fresh.done.is_set() and fresh.error is None
            answered_while_frozen = stuck_stream.done.is_set()
        finally:
            cluster[victim].proc.send_signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        for outcome in (fresh, stuck_stream):
            assert outcome.done.wait(60), "a send never resolved"
        cluster.wait_full_isr(topic)
        report.append(f"broker {victim} back in every ISR {time.monotonic() - resumed_at:.2f} s after SIGCONT")
        wait_progress(writers, 50)
        for label, outcome in (
            ("fresh producer", fresh),
            (f"producer with a {short_timeout_s} s timeout", stuck_stream),
        ):
            how = "acknowledged" if outcome.error is None else f"failed ({outcome.error!r})"
            when = (outcome.done_at or 0) - frozen_at
            resumed = resumed_at - frozen_at
            report.append(
                f"{label}: {how} {when:.2f} s after SIGSTOP ({'before' if when < resumed else 'after'} SIGCONT, "
                f"which came {resumed:.2f} s after SIGSTOP)"
            )
        report.append(f"longest writer block: {max(w.longest_block_s for w in writers):.1f} s")
        finish_and_verify(cluster, topic, partitions, writers, tail, (sends,))
        log = cluster[victim].output()
        assert re.search(r"ZooKeeper session (LOST|SUSPENDED)", log), log[-2000:]
        assert "ZooKeeper session back" in log, log[-2000:]
        assert not [e for w in writers for e in w.errors], [(w.writer, e) for w in writers for e in w.errors]
    finally:
        quiet_finish(*writers, tail)
        short.close()
        if probe is not None:
            probe.close()
        print("\n".join(report))
    # availability while the old leader is frozen
    assert acked_while_frozen, (
        f"the new leader ({new.leader}, elected {elected_s:.2f} s after the freeze) did not acknowledge an acks=all "
        f"write before the old leader resumed; partition state then: {frozen_state}; the write: {fresh.error!r}"
    )
    assert answered_while_frozen, (
        f"a send through the producer's open stream to the frozen leader was still waiting when the leader "
        f"resumed, though its delivery timeout is {short_timeout_s} s (it resolved with {stuck_stream.error!r})"
    )


@pytest.mark.slow
def test_a_controller_whose_session_expired_stops_acting_as_controller(
    sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    """Broker 1, the controller, is cut off from ZooKeeper until its session expires; another broker
    becomes the controller; then broker 1 reconnects. From then on only the new controller may act
    for the cluster. To see who acts, the new controller is frozen briefly (shorter than a session)
    while a follower stops cleanly: a follower leaving is taken out of the ISR by the controller
    alone (a leader would wait for replica.lag.time.max.ms, 10 s), so the ISR must not change
    until the frozen controller resumes."""
    topic = "controllers"
    zk_host, zk_port = sparklog_connect.split("/", 1)[0].rsplit(":", 1)
    proxy = ZooKeeperProxy(zk_host, int(zk_port))
    cluster = Cluster(
        sparklog_connect, tmp_path, child_processes, zookeeper_for={1: proxy.connect_string(sparklog_connect)}
    )
    frozen: int | None = None
    try:
        cluster.start()
        wait_for(lambda: cluster.controller() is not None, 30, "a controller")
        assert cluster.controller() == 1  # the first broker up takes the controller znode
        with Admin(sparklog_connect) as admin:
            admin.create_topic(topic, 1, 3)
        assert cluster.replicas(topic) == [[1, 2, 3]]
        cluster.wait_full_isr(topic)
        with Producer(zookeeper=sparklog_connect, acks="all", linger_ms=0) as producer:
            producer.send(topic, b"replicated by all three", partition=0).result(30)  # every broker took its role

        proxy.cut()
        controller = wait_for(lambda: (c := cluster.controller()) not in (None, 1) and c, 30, "a new controller")
        proxy.heal()
        wait_for(lambda: 1 in cluster.live(), 30, "broker 1 to register again")
        try:
            wait_for(lambda: cluster.state(topic, 0).leader == 1, 30, "the preferred leader 1 back")
        except AssertionError as exc:
            tails = {b: cluster[b].output()[-1500:] for b in cluster.brokers}
            raise AssertionError(
                f"{exc}: state {cluster.state(topic, 0)}, live {sorted(cluster.live())}, "
                f"controller {cluster.controller()}; broker logs: {tails}"
            ) from None
        cluster.wait_full_isr(topic)
        assert cluster.controller() == controller

        (leaving,) = set(cluster.brokers) - {1, controller}
        frozen = controller
        cluster[controller].proc.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        assert cluster[leaving].stop() == 0  # it leads nothing: only the controller updates the ISR
        changed = None
        while time.monotonic() - frozen_at < SESSION_TIMEOUT_S - 1.0:
            state = cluster.state(topic, 0)
            if leaving not in state.isr:
                changed = state
                break
            time.sleep(0.1)
        cluster[controller].proc.send_signal(signal.SIGCONT)
        frozen = None
        acted = [line for line in cluster[1].output().splitlines() if "sparklog.broker.controller: controller:" in line]
        assert changed is None, (
            f"while the controller (broker {controller}) was frozen, the ISR of {topic}-0 changed to {changed}: "
            f"broker 1 still acts as a controller after losing its session; its controller actions: {acted[-3:]}"
        )
        wait_for(lambda: leaving not in cluster.state(topic, 0).isr, 30, "the controller to shrink the ISR")
    finally:
        if frozen is not None:
            cluster[frozen].proc.send_signal(signal.SIGCONT)
        cluster.close()
        proxy.close()


def wait_replicated(broker: Any, topic: str, partition: int, offset: int, failure: str) -> None:
    """Until an in-process broker's replica of the partition holds ``offset`` (15 s), else fail with
    ``failure`` and what the broker has."""

    def replicated() -> bool:
        replica = broker.partitions.get((topic, partition))
        return replica is not None and replica.log.log_end_offset > offset

    try:
        wait_for(replicated, 15, f"broker {broker.broker_id} to replicate offset {offset} of {topic}-{partition}")
    except AssertionError:
        raise AssertionError(
            f"{failure}: its partitions {sorted(broker.partitions)}, fetchers {sorted(broker.fetchers)}"
        ) from None


@pytest.mark.slow
def test_a_broker_whose_topic_notification_failed_during_a_zookeeper_blip_still_takes_its_replica(
    sparklog_connect: str, tmp_path: Path
) -> None:
    """A broker learns about a new topic from a ZooKeeper watch, then reads the topic's metadata. If
    that read fails (ConnectionLoss: its connection to ZooKeeper dropped for a moment, as seen when
    a broker is cut off right after a topic is created), the broker must still take its replica
    once the connection is back (same session). Two brokers run in this process so that exactly
    that one read can be made to fail; the blip itself is real (a proxy drops the connection)."""
    from kazoo.exceptions import ConnectionLoss

    from sparklog.broker.broker import Broker

    topic = "blip"
    zk_host, zk_port = sparklog_connect.split("/", 1)[0].rsplit(":", 1)
    proxy = ZooKeeperProxy(zk_host, int(zk_port))
    brokers: list[Broker] = []
    try:
        brokers.append(Broker(1, tmp_path / "broker-1", sparklog_connect).start())
        brokers.append(Broker(2, tmp_path / "broker-2", proxy.connect_string(sparklog_connect)).start())
        follower = brokers[1]
        assert follower.cluster is not None
        real_topic = follower.cluster.topic
        failed: list[str] = []

        def topic_read_during_a_blip(name: str) -> Any:
            if name == topic and not failed:
                failed.append(name)
                raise ConnectionLoss()
            return real_topic(name)

        follower.cluster.topic = topic_read_during_a_blip  # type: ignore[method-assign]
        with Admin(sparklog_connect) as admin:
            admin.create_topic(topic, 1, 2)
            assert admin.describe_topic(topic)["partitions"][0]["replicas"] == [1, 2]
        wait_for(lambda: failed, 30, "broker 2's read of the new topic")
        proxy.cut()  # the connection drops and comes back: same session, a new connection
        time.sleep(0.5)
        proxy.heal()
        with Producer(zookeeper=sparklog_connect, acks="all", linger_ms=0) as producer:
            meta = producer.send(topic, b"to both replicas", partition=0).result(30)

        wait_replicated(
            follower,
            topic,
            0,
            meta.offset,
            f"broker 2 never took its replica of {topic}-0 after one failed read of the topic during a "
            f"ZooKeeper connection blip (partition state {brokers[0].cluster.partition_state(topic, 0)})",
        )
    finally:
        for broker in reversed(brokers):
            broker.stop(grace_s=1.0)
        proxy.close()


@pytest.mark.slow
def test_a_broker_asked_for_a_topic_before_its_watch_reported_it_still_takes_every_replica(
    sparklog_connect: str, tmp_path: Path
) -> None:
    """A client may reach a broker about a new topic before that broker's ZooKeeper watch has told
    it the topic exists (its watch callbacks run late on a busy machine). Answering that client
    must not make the broker skip the topic when the notification arrives: it must still follow
    the partitions it replicates (seen in CI: a broker that never fetched its follower replica,
    stalling acks=all writes until the leader dropped it from the ISR). Two brokers run in this
    process so that broker 1's watch callbacks can be held back for exactly that moment."""
    from kazoo.protocol.states import Callback

    from sparklog.broker.broker import Broker

    topic = "early"
    brokers: list[Broker] = []
    gate = threading.Event()
    try:
        brokers.append(Broker(1, tmp_path / "broker-1", sparklog_connect).start())
        brokers.append(Broker(2, tmp_path / "broker-2", sparklog_connect).start())
        early = brokers[0]
        assert early.cluster is not None
        early.cluster.zk.handler.dispatch_callback(Callback("watch", gate.wait, (30,)))  # callbacks wait
        with Admin(sparklog_connect) as admin:
            admin.create_topic(topic, 2, 2)
            replicas = admin.describe_topic(topic)["partitions"]
        led, followed = (0, 1) if replicas[0]["leader"] == 1 else (1, 0)
        assert replicas[led]["leader"] == 1 and replicas[followed]["leader"] == 2, replicas
        batch = pa.RecordBatch.from_pydict({"value": [b"before the watch"]})
        command = {"type": "produce", "topic": topic, "partition": led, "acks": "1"}
        raw_produce(f"grpc+tcp://127.0.0.1:{early.port}", command, [batch])  # broker 1 learns the topic here
        gate.set()  # now its watch callbacks run: the topic notification among them
        with Producer(zookeeper=sparklog_connect, acks="1", linger_ms=0) as producer:
            meta = producer.send(topic, b"to replicate", partition=followed).result(30)

        wait_replicated(
            early,
            topic,
            followed,
            meta.offset,
            f"broker 1 never followed {topic}-{followed} after a client asked it about {topic} before its watch "
            "reported the topic",
        )
    finally:
        gate.set()
        for broker in reversed(brokers):
            broker.stop(grace_s=1.0)
