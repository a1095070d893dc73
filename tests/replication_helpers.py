"""Helpers for the replication and failover tests (``tests/broker/replication/``).

- :class:`Cluster`: three (or N) real broker processes (``broker_helpers.BrokerProcess``) on one
  ZooKeeper chroot, with partition-state queries straight from ZooKeeper and waits for leaders and
  in-sync replica sets.
- :class:`AckedWriter`: a thread with its own ``Producer`` writing numbered records continuously,
  alternating ``send()`` blocks and ``send_batch()`` blocks, remembering exactly what was
  acknowledged where (and what was sent without an acknowledgement).
- :class:`ManualSends`: single ``send()``s a test makes itself, each followed to its outcome (when
  it resolved, acknowledged or failed), in the same bookkeeping as the writers.
- :class:`TailingConsumer`: a thread with one ``Consumer`` polling for the whole test (it must follow
  every leadership change on its own).
- :func:`check_delivery`: every acknowledged record exactly once at its acknowledged offset, offsets
  strictly increasing, per-writer order kept, unacknowledged records at most once.
- :func:`replica_records`: a stopped broker's copy of a partition, read from its segment files with
  nothing but ``iter_segment`` (read-only: no recovery, no marker files touched).
- :class:`ZooKeeperProxy`: a TCP forwarder between one broker and ZooKeeper that can black-hole the
  traffic, cutting that broker off from ZooKeeper while clients and other brokers still reach it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from broker_helpers import BrokerProcess, ProcessGroup
from sparklog import Consumer, Producer
from sparklog.broker.log import iter_segment
from sparklog.broker.log.segment import SEGMENT_SUFFIX
from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.coordination.ports import free_port
from waiting import wait_for

HOST = "127.0.0.1"
RF3_MIN_ISR_2 = {"min.insync.replicas": "2"}


# ------------------------------------------------------------------------------------------ the cluster
class Cluster:
    """N broker processes (ids 1..N) sharing one sparklog root in ZooKeeper.

    ``zookeeper_for`` maps a broker id to the connect string that broker uses (by default the
    cluster's own; a test may route one broker through a :class:`ZooKeeperProxy`)."""

    def __init__(
        self,
        connect: str,
        base_dir: Path,
        processes: ProcessGroup,
        brokers: int = 3,
        zookeeper_for: dict[int, str] | None = None,
        broker_args: Callable[[int, int], tuple[str, ...]] | None = None,
    ) -> None:
        """``broker_args(broker_id, port)``: more arguments for that broker (its ``--config``...)."""
        self.connect = connect
        self.base_dir = Path(base_dir)
        self.processes = processes
        overrides = zookeeper_for or {}
        self.brokers = {
            i: BrokerProcess(i, self.base_dir / f"broker-{i}", overrides.get(i, connect), processes)
            for i in range(1, brokers + 1)
        }
        if broker_args is not None:
            for i, broker in self.brokers.items():
                broker.extra_args = list(broker_args(i, broker.port))
        self.meta = ClusterMetadata(connect)

    def start(self) -> Cluster:
        self.meta.start()
        for broker in self.brokers.values():
            broker.start()
        return self

    def close(self) -> None:
        """Stop (SIGTERM) every broker still running; SIGKILL what does not exit. For finalizers."""
        errors = []
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    broker.proc.send_signal(18)  # SIGCONT: a test may have left one stopped
                try:
                    broker.stop_or_kill()
                except AssertionError as exc:
                    errors.append(str(exc))
        self.meta.close()
        assert not errors, errors

    def __getitem__(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    # ------------------------------------------------------------------ partition state
    def state(self, topic: str, partition: int) -> PartitionState:
        return self.meta.partition_state(topic, partition)

    def states(self, topic: str) -> list[PartitionState]:
        return [self.state(topic, p) for p in range(self.meta.topic(topic).partitions)]

    def replicas(self, topic: str) -> list[list[int]]:
        return self.meta.topic(topic).replicas

    def live(self) -> set[int]:
        return set(self.meta.brokers())

    def controller(self) -> int | None:
        try:
            data, _ = self.meta.zk.get(self.meta.layout.controller)
        except Exception:
            return None
        return int(json.loads(data)["broker_id"])

    def wait_full_isr(self, topic: str, timeout: float = 60.0) -> list[PartitionState]:
        """Until every partition has a live leader and all its replicas in sync."""
        replicas = self.replicas(topic)

        def full() -> list[PartitionState] | None:
            states = self.states(topic)
            live = self.live()
            ok = all(
                s.leader in live and sorted(s.isr) == sorted(r) and all(b in live for b in r)
                for s, r in zip(states, replicas, strict=True)
            )
            return states if ok else None

        try:
            return wait_for(full, timeout, f"every replica of {topic} in sync", interval=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {self.out_of_sync(topic)}") from None

    def out_of_sync(self, topic: str) -> str:
        """The partitions not fully in sync: how many, and the first few with their states and
        their leaders' offsets (what a timed-out wait reports)."""
        live = self.live()
        lagging = [
            (p, s, r)
            for p, (s, r) in enumerate(zip(self.states(topic), self.replicas(topic), strict=True))
            if not (s.leader in live and sorted(s.isr) == sorted(r))
        ]
        shown = []
        for p, s, r in lagging[:8]:
            try:
                offsets: Any = self.leader_offsets(topic, p)
            except Exception as exc:
                offsets = repr(exc)[:200]
            shown.append(f"{topic}-{p}: replicas {r}, {s}, leader's offsets {offsets}")
        return f"live brokers {sorted(live)}; {len(lagging)} partitions out of sync: " + "; ".join(shown)

    def wait_preferred_leaders(self, topic: str, timeout: float = 60.0) -> list[PartitionState]:
        """Until the cluster is settled: full ISRs and every partition led by its preferred (first)
        replica (the controller moves leadership back within its reconcile interval, 2 s)."""
        replicas = self.replicas(topic)

        def settled() -> list[PartitionState] | None:
            states = self.wait_full_isr(topic, timeout)
            return states if all(s.leader == r[0] for s, r in zip(states, replicas, strict=True)) else None

        return wait_for(settled, timeout, f"the preferred leaders of {topic}", interval=0.1)

    def wait_new_leader(self, topic: str, partition: int, old_epoch: int, timeout: float = 60.0) -> PartitionState:
        """Until the partition has a live leader in an epoch after ``old_epoch``."""

        def elected() -> PartitionState | None:
            s = self.state(topic, partition)
            return s if s.leader_epoch > old_epoch and s.leader in self.live() else None

        return wait_for(elected, timeout, f"a new leader of {topic}-{partition}", interval=0.05)

    def wait_converged(self, topic: str, timeout: float = 60.0) -> None:
        """Until every partition has a full ISR and its leader's high watermark equals its log end
        (every replica holds everything the leader has: nothing is in flight)."""
        from broker_helpers import raw_action
        from sparklog.protocol import wire

        partitions = len(self.replicas(topic))

        def converged() -> bool:
            self.wait_full_isr(topic, timeout)
            for p in range(partitions):
                leader = self.state(topic, p).leader
                try:
                    o = raw_action(self.brokers[leader].location, wire.LIST_OFFSETS, {"topic": topic, "partition": p})
                except Exception:
                    return False
                if o["high_watermark"] != o["log_end_offset"]:
                    return False
            return True

        wait_for(converged, timeout, f"the replicas of {topic} to converge", interval=0.2)

    def leader_offsets(self, topic: str, partition: int) -> dict[str, Any]:
        from broker_helpers import raw_action
        from sparklog.protocol import wire

        leader = self.state(topic, partition).leader
        return raw_action(self.brokers[leader].location, wire.LIST_OFFSETS, {"topic": topic, "partition": partition})


# ------------------------------------------------------------------------------------------ writers
@dataclasses.dataclass
class Ack:
    value: bytes
    partition: int
    offset: int
    writer: str


class AckedWriter(threading.Thread):
    """Writes numbered records (``<name>-<seq>``) until stopped, alternating blocks of keyed
    ``send()`` and ``send_batch()`` to one partition (rotating); remembers every acknowledgement in
    order. A block that fails (the producer gave up after its delivery timeout) is remembered as
    unacknowledged and writing goes on (the record may or may not be stored: at most once)."""

    def __init__(
        self,
        connect: str,
        topic: str,
        partitions: int,
        name: str,
        block: int = 20,
        delivery_timeout_s: float = 30.0,
        pause_s: float = 0.0,
        producer: Producer | None = None,
        keys: int = 11,
    ) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.keys = keys  # distinct keys of the send() blocks (they pick the partitions those go to)
        self.topic = topic
        self.partitions = partitions
        self.writer = name
        self.block = block
        self.pause_s = pause_s
        self.delivery_timeout_s = delivery_timeout_s
        self.producer = producer or Producer(
            zookeeper=connect, acks="all", linger_ms=2, delivery_timeout_s=delivery_timeout_s
        )
        self.acked: list[Ack] = []
        self.unacked: set[bytes] = set()
        self.sent_order: list[bytes] = []  # every value in the order it was handed to the producer
        self.errors: list[tuple[float, BaseException]] = []
        self.longest_block_s = 0.0
        self.stop_event = threading.Event()
        self._seq = 0

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            values = [f"{self.writer}-{self._seq + i:07d}".encode() for i in range(self.block)]
            keys = [f"k{(self._seq + i) % self.keys}".encode() for i in range(self.block)]
            self._seq += self.block
            self.sent_order += values
            started = time.monotonic()
            try:
                if n % 2 == 0:
                    futures = [self.producer.send(self.topic, v, key=k) for k, v in zip(keys, values, strict=True)]
                    for v, f in zip(values, futures, strict=True):
                        try:
                            meta = f.result(self.delivery_timeout_s + 60)
                        except BaseException:
                            self.unacked.add(v)
                            raise
                        self.acked.append(Ack(v, meta.partition, meta.offset, self.writer))
                else:
                    p = (n // 2) % self.partitions
                    try:
                        (meta,) = self.producer.send_batch(self.topic, {"key": keys, "value": values}, partition=p)
                    except BaseException:
                        self.unacked.update(values)
                        raise
                    assert meta.partition == p and meta.last_offset - meta.base_offset + 1 == len(values), meta
                    self.acked += [Ack(v, p, meta.base_offset + i, self.writer) for i, v in enumerate(values)]
            except Exception as exc:
                # the rest of a failed send() block shares the fate of the flush that failed
                acked_now = {a.value for a in self.acked[-len(values) :]}
                self.unacked.update(v for v in values if v not in acked_now)
                self.errors.append((time.monotonic(), exc))
                self.stop_event.wait(0.2)
            self.longest_block_s = max(self.longest_block_s, time.monotonic() - started)
            n += 1
            if self.pause_s:
                self.stop_event.wait(self.pause_s)

    def acked_count(self) -> int:
        return len(self.acked)

    def finish(self, timeout: float = 120.0) -> None:
        self.stop_event.set()
        if self.is_alive() or self.ident is not None:
            self.join(timeout)
        assert not self.is_alive(), f"writer {self.writer} hung"
        self.producer.close()


class ManualSends:
    """Records sent one by one by a test (not by an :class:`AckedWriter`), in the shape
    :func:`check_delivery` takes: acknowledged ones and ones whose fate is unknown."""

    def __init__(self, name: str) -> None:
        self.writer = name
        self.acked: list[Ack] = []
        self.unacked: set[bytes] = set()
        self.sent_order: list[bytes] = []
        self.errors: list[tuple[float, BaseException]] = []

    def track(self, future: Any, value: bytes) -> Outcome:
        """Follow ``future`` (of ``Producer.send(value)``) in a thread; the outcome says when it
        resolved and how; the value counts as acknowledged or not accordingly."""
        self.sent_order.append(value)
        self.unacked.add(value)
        outcome = Outcome(time.monotonic())

        def wait() -> None:
            try:
                meta = future.result(600)
            except BaseException as exc:
                outcome.error = exc
                self.errors.append((time.monotonic(), exc))
            else:
                self.unacked.discard(value)
                self.acked.append(Ack(value, meta.partition, meta.offset, self.writer))
                outcome.meta = meta
            outcome.done_at = time.monotonic()
            outcome.done.set()

        threading.Thread(target=wait, daemon=True).start()
        return outcome


@dataclasses.dataclass
class Outcome:
    sent_at: float
    done_at: float | None = None
    meta: Any = None
    error: BaseException | None = None
    done: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def seconds(self) -> float:
        assert self.done_at is not None
        return self.done_at - self.sent_at


def quiet_finish(*things: AckedWriter | TailingConsumer) -> None:
    """For ``finally`` blocks: stop writers and consumers, ignoring errors (the test's own failure,
    if any, is the one to report)."""
    for thing in things:
        with contextlib.suppress(BaseException):
            thing.finish()


def wait_progress(writers: Iterable[AckedWriter], more: int = 50, timeout: float = 60.0) -> None:
    """Until every writer got ``more`` further acknowledgements (writes flow again)."""
    writers = list(writers)
    start = {w.writer: w.acked_count() for w in writers}
    wait_for(
        lambda: all(w.acked_count() >= start[w.writer] + more for w in writers),
        timeout,
        f"{more} more acknowledged records from every writer ({[w.writer for w in writers]})",
        interval=0.05,
    )


# ------------------------------------------------------------------------------------------ consumers
class TailingConsumer(threading.Thread):
    """One Consumer from the earliest offsets, polling until stopped; never restarted."""

    def __init__(self, connect: str, topic: str) -> None:
        super().__init__(name=f"tail-{topic}", daemon=True)
        self.consumer = Consumer(topic, zookeeper=connect, auto_offset_reset="earliest", max_wait_ms=200)
        self.records: list[tuple[int, int, bytes]] = []  # (partition, offset, value) in poll order
        self.errors: list[BaseException] = []
        self.stop_event = threading.Event()
        self._closed = False

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                for r in self.consumer.poll(timeout=0.5):
                    self.records.append((r.partition, r.offset, r.value))
            except Exception as exc:  # recorded; the test decides (the consumer keeps its positions)
                self.errors.append(exc)
                self.stop_event.wait(0.2)

    def count(self) -> int:
        return len(self.records)

    def finish(self) -> None:
        self.stop_event.set()
        if self.is_alive():
            self.join(60)
        assert not self.is_alive(), "the tailing consumer hung"
        if not self._closed:
            self._closed = True
            self.consumer.close()


def consume_all(connect: str, topic: str, until: dict[int, int], timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    """A fresh consumer's reading from the earliest offsets until every partition p reached the
    offset ``until[p]`` (exclusive), then a little more (nothing beyond should appear)."""
    out: list[tuple[int, int, bytes]] = []
    with Consumer(topic, zookeeper=connect, auto_offset_reset="earliest", max_wait_ms=200) as consumer:
        deadline = time.monotonic() + timeout
        while any(consumer.position(p) < end for p, end in until.items()):
            assert time.monotonic() < deadline, (
                f"consumer stuck at {[consumer.position(p) for p in until]}, expected {until}"
            )
            out += [(r.partition, r.offset, r.value) for r in consumer.poll(timeout=0.5)]
        out += [(r.partition, r.offset, r.value) for r in consumer.poll(timeout=0.5)]
    return out


# ------------------------------------------------------------------------------------------ checks
def check_delivery(
    records: Iterable[tuple[int, int, bytes]],
    writers: Iterable[AckedWriter | ManualSends],
    extra_acks: Iterable[Ack] = (),
) -> dict[str, int]:
    """``records`` (partition, offset, value) is what a reader got of the whole topic. Asserts:
    every acknowledged value exactly once at its acknowledged (partition, offset); offsets strictly
    increasing and contiguous per partition (nothing skipped, nothing repeated); unacknowledged
    values at most once; nothing else; each writer's values in the order it sent them, per partition.
    Returns counts for reporting."""
    writers = list(writers)
    records = list(records)
    by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for p, o, v in records:
        by_partition[p].append((o, v))
    for p, rows in by_partition.items():
        offsets = [o for o, _v in rows]
        assert all(b > a for a, b in zip(offsets, offsets[1:], strict=False)), f"partition {p}: offsets not increasing"
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"partition {p}: offsets have gaps"
    at = {(p, o): v for p, rows in by_partition.items() for o, v in rows}
    counts = Counter(v for _p, _o, v in records)
    acks = [a for w in writers for a in w.acked] + list(extra_acks)
    acked_values = {a.value for a in acks}
    assert len(acked_values) == len(acks), "a value was acknowledged twice"
    positions = Counter((a.partition, a.offset) for a in acks)
    clash = [pos for pos, n in positions.items() if n > 1]
    if clash:
        stored_at = {v: (p, o) for (p, o), v in at.items()}
        detail = [
            (pos, at.get(pos), [(a.value, stored_at.get(a.value)) for a in acks if (a.partition, a.offset) == pos])
            for pos in clash[:5]
        ]
        raise AssertionError(
            f"{len(clash)} (partition, offset) positions acknowledged twice;"
            f" (position, value stored there, [(value acknowledged there, where it is stored)]): {detail}"
        )
    lost = [a for a in acks if (a.partition, a.offset) not in at]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [(a, at[(a.partition, a.offset)]) for a in acks if at[(a.partition, a.offset)] != a.value]
    assert not moved, f"{len(moved)} acknowledged offsets hold another value, e.g. {moved[:3]}"
    dups = {v: n for v, n in counts.items() if n > 1}
    assert not dups, f"{len(dups)} values stored more than once, e.g. {sorted(dups.items())[:5]}"
    unacked = set().union(*(w.unacked for w in writers)) if writers else set()
    strangers = set(counts) - acked_values - unacked
    assert not strangers, f"values nobody sent unacknowledged or acknowledged: {sorted(strangers)[:5]}"
    # per writer, per partition: stored in the order the writer sent them
    for w in writers:
        rank = {v: i for i, v in enumerate(w.sent_order)}
        for p, rows in by_partition.items():
            mine = [rank[v] for _o, v in rows if v in rank]
            assert mine == sorted(mine), f"writer {w.writer}: partition {p} holds its records out of order"
        for p in {a.partition for a in w.acked}:
            offsets = [a.offset for a in w.acked if a.partition == p]
            assert offsets == sorted(offsets), f"writer {w.writer}: acknowledged offsets in {p} not increasing"
    return {
        "acked": len(acks),
        "stored": len(records),
        "unacked_sent": len(unacked),
        "unacked_stored": len(set(counts) & unacked),
    }


# ------------------------------------------------------------------------------------------ replica files
def replica_records(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, bytes | None, bytes]]:
    """A replica's log of a partition as (offset, leader epoch, key, value), read from the segment
    files alone (the broker must be stopped). Read-only: nothing in the directory is changed."""
    directory = Path(data_dir) / f"{topic}-{partition}"
    bases = sorted(int(p.name[: -len(SEGMENT_SUFFIX)]) for p in directory.glob(f"*{SEGMENT_SUFFIX}"))
    out: list[tuple[int, int, bytes | None, bytes]] = []
    for base in bases:
        for batch, header in iter_segment(str(directory / f"{base:020d}{SEGMENT_SUFFIX}")):
            offsets = batch.column("offset").to_pylist()
            assert offsets == list(range(header.base_offset, header.last_offset + 1)), (directory, header)
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            out += [(o, header.leader_epoch, k, v) for o, k, v in zip(offsets, keys, values, strict=True)]
    return out


def replica_logs(cluster: Cluster, topic: str, partitions: int) -> dict[int, dict[int, list[Any]]]:
    """{broker id: {partition: records}} for every stopped broker holding a replica."""
    out: dict[int, dict[int, list[Any]]] = {}
    replicas = cluster.replicas(topic)
    for b, broker in cluster.brokers.items():
        assert not broker.alive, f"broker {b} must be stopped to read its files"
        out[b] = {p: replica_records(broker.data_dir, topic, p) for p in range(partitions) if b in replicas[p]}
    return out


def assert_replicas_equal(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[Any]]:
    """Every replica of every partition holds the same records with the same leader epochs."""
    logs = replica_logs(cluster, topic, partitions)
    result: dict[int, list[Any]] = {}
    for p in range(partitions):
        copies = {b: parts[p] for b, parts in logs.items() if p in parts}
        first_b, first = next(iter(copies.items()))
        for b, copy in copies.items():
            if copy != first:
                diff = next(
                    (i for i, (x, y) in enumerate(zip(copy, first, strict=False)) if x != y), min(len(copy), len(first))
                )
                raise AssertionError(
                    f"partition {p}: broker {b} has {len(copy)} records, broker {first_b} {len(first)}; first "
                    f"difference at index {diff}: {copy[diff : diff + 2]} vs {first[diff : diff + 2]}"
                )
        result[p] = first
    return result


# ------------------------------------------------------------------------------------------ failover probe
def time_until_acked(producer: Producer, topic: str, partition: int, value: bytes, since: float) -> tuple[float, Ack]:
    """Send one record to the partition (the producer retries on its own) and return the seconds
    from ``since`` (a ``time.monotonic()``) until it was acknowledged, with the acknowledgement."""
    meta = producer.send(topic, value, partition=partition).result(120)
    return time.monotonic() - since, Ack(value, meta.partition, meta.offset, "probe")


# ------------------------------------------------------------------------------------------ ZooKeeper cut
class ZooKeeperProxy:
    """A TCP forwarder to ZooKeeper for one broker. ``cut()`` black-holes it (connections stay
    open, bytes are dropped both ways, new connections are accepted and ignored): that broker's
    session expires while it keeps serving clients. ``heal()`` drops the black-holed connections
    and forwards new ones again."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = free_port(HOST)
        self._listener = socket.create_server((HOST, self.port))
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket | None]] = []
        threading.Thread(target=self._accept, name="zk-proxy", daemon=True).start()

    def connect_string(self, sparklog_connect: str) -> str:
        """The same sparklog root as ``sparklog_connect``, through this proxy."""
        root = sparklog_connect.split("/", 1)[1]
        return f"{HOST}:{self.port}/{root}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                with self._lock:
                    self._conns.append((client, None))  # held open, never answered
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self._cut.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._cut.set()

    def heal(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        self._cut.clear()
        for client, upstream in conns:
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.heal()
