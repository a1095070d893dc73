"""A Jepsen-style workload and its checker: ``acks=all`` writers and a consumer group run while
faults are injected; afterwards everything the topic holds is read back and compared with what was
acknowledged.

Run on a client host (``python -m sparklog.hosts.workload --bootstrap-server ... --topic ...``): it
prints a JSON line of progress every half second (``{"acked": ..., "consumed": ..., "errors": ...}``)
until a line ``stop`` arrives on its stdin; then the writers stop, the group catches up, a fresh
reader reads every partition from its start, and the last line printed is ``{"report": {...}}``.

The report (:func:`check`):

- ``acked``: records acknowledged to a writer; ``lost``: acknowledged records the topic does not
  hold at the acknowledged partition and offset (``misplaced``: a different record is there);
- ``duplicated``: records stored more than once; ``strangers``: stored records nobody sent;
- ``out_of_order``: per writer and partition, records stored after a later one of the same writer;
- ``unacked_sent`` / ``unacked_stored``: sends whose outcome the writer never learned (a failed
  request may still have been stored: at most once is allowed);
- ``group_missed``: acknowledged records no member of the consumer group was ever given (the group
  commits after every poll: records may come twice across a rebalance, never not at all);
- ``probe`` (with ``--probe-partition``): (send began, acknowledged) of each probe write, wall clock,
  from which :func:`failover_s` tells how long a fault kept that partition from taking writes.

Writers alternate blocks of keyed ``send()`` and ``send_batch()`` to one partition; each record's
value is ``<writer>-<sequence>``, so the checker knows who sent it and in which order.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer

PROGRESS_INTERVAL_S = 0.5


@dataclasses.dataclass(frozen=True)
class Ack:
    value: bytes
    partition: int
    offset: int


class Writer(threading.Thread):
    """Writes ``<name>-<seq>`` records with ``acks=all`` until stopped, remembering each
    acknowledgement and each send whose outcome it never learned."""

    def __init__(
        self, name: str, topic: str, partitions: int, client: Mapping[str, Any], block: int = 20, pause_s: float = 0.02
    ) -> None:
        super().__init__(name=f"writer-{name}", daemon=True)
        self.writer, self.topic, self.partitions, self.block, self.pause_s = name, topic, partitions, block, pause_s
        self.delivery_timeout_s = 60.0
        self.producer = Producer(acks="all", linger_ms=2, delivery_timeout_s=self.delivery_timeout_s, **client)
        self.acked: list[Ack] = []
        self.unacked: set[bytes] = set()
        self.sent: list[bytes] = []
        self.errors = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        n = seq = 0
        while not self.stopping.is_set():
            values = [f"{self.writer}-{seq + i:08d}".encode() for i in range(self.block)]
            keys = [f"k{(seq + i) % 13}".encode() for i in range(self.block)]
            seq += self.block
            self.sent += values
            try:
                if n % 2 == 0:
                    futures = [self.producer.send(self.topic, v, key=k) for k, v in zip(keys, values, strict=True)]
                    for v, future in zip(values, futures, strict=True):
                        meta = future.result(self.delivery_timeout_s + 30)
                        self.acked.append(Ack(v, meta.partition, meta.offset))
                else:
                    p = (n // 2) % self.partitions
                    (meta,) = self.producer.send_batch(self.topic, {"key": keys, "value": values}, partition=p)
                    self.acked += [Ack(v, p, meta.base_offset + i) for i, v in enumerate(values)]
            except Exception:  # the producer gave up after its delivery timeout: outcome unknown
                done = {a.value for a in self.acked[-len(values) :]}
                self.unacked.update(v for v in values if v not in done)
                self.errors += 1
                self.stopping.wait(0.2)
            n += 1
            self.stopping.wait(self.pause_s)

    def finish(self) -> None:
        self.stopping.set()
        self.join(self.delivery_timeout_s + 60)
        self.producer.close()


class Probe(Writer):
    """A writer of one record at a time to one partition, remembering when each send began and
    when it was acknowledged (wall clock, comparable with the fault injector's): the time from a
    fault to the first acknowledgement of a send begun after it is the partition's failover time."""

    def __init__(self, topic: str, partition: int, client: Mapping[str, Any]) -> None:
        super().__init__("probe", topic, 1, client, block=1, pause_s=0.01)
        self.partition = partition
        self.timeline: list[tuple[float, float]] = []  # (send began, acknowledged), seconds since the epoch

    def run(self) -> None:
        seq = 0
        while not self.stopping.is_set():
            value = f"{self.writer}-{seq:08d}".encode()
            seq += 1
            self.sent.append(value)
            began = time.time()
            try:
                (meta,) = self.producer.send_batch(self.topic, {"value": [value]}, partition=self.partition)
            except Exception:
                self.unacked.add(value)
                self.errors += 1
                self.stopping.wait(0.2)
                continue
            self.acked.append(Ack(value, self.partition, meta.base_offset))
            self.timeline.append((began, time.time()))
            self.stopping.wait(self.pause_s)


def failover_s(timeline: Iterable[tuple[float, float]], at: float) -> float | None:
    """Seconds from ``at`` (a fault) to the first acknowledgement of a send begun at or after it."""
    acked = [done for began, done in timeline if began >= at]
    return round(min(acked) - at, 3) if acked else None


class GroupMember(threading.Thread):
    """One consumer of the group, committing after every poll, remembering every value it was given."""

    def __init__(self, topic: str, group: str, client: Mapping[str, Any], seen: Counter[bytes]) -> None:
        super().__init__(name=f"member-{group}", daemon=True)
        self.consumer = Consumer(
            topic, group=group, auto_offset_reset="earliest", max_wait_ms=200, session_timeout_s=6.0, **client
        )
        self.seen, self.errors = seen, 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                records = self.consumer.poll(timeout=0.5)
                with self.lock:
                    self.seen.update(r.value for r in records)
                self.consumer.commit()
            except Exception:  # a rebalance, a lost broker: the consumer carries on from its commits
                self.errors += 1
                self.stopping.wait(0.2)

    def finish(self) -> None:
        self.stopping.set()
        self.join(60)
        with contextlib.suppress(Exception):
            self.consumer.close()


def read_everything(topic: str, client: Mapping[str, Any], timeout: float = 120.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record the topic holds, from each partition's start to
    its end now."""
    with Admin(**client) as admin:
        described = admin.describe_topic(topic)["partitions"]
    ends = {p["partition"]: p["log_end_offset"] for p in described}
    out: list[tuple[int, int, bytes]] = []
    with Consumer(topic, auto_offset_reset="earliest", max_wait_ms=200, **client) as reader:
        deadline = time.monotonic() + timeout
        while any(reader.position(p) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reader stuck at {[reader.position(p) for p in ends]} of {ends}")
            out += [(r.partition, r.offset, r.value) for r in reader.poll(timeout=0.5)]
    return out


def check(
    stored: Iterable[tuple[int, int, bytes]],
    acked: Iterable[Ack],
    sent: Mapping[str, list[bytes]],
    unacked: Iterable[bytes] = (),
    group_seen: Counter[bytes] | None = None,
) -> dict[str, Any]:
    """What the topic holds (``stored``) against what writers were told (``acked``) and sent, in
    order, per writer (``sent``); see the module's docstring for the figures."""
    stored = list(stored)
    acked = list(acked)
    unacked = set(unacked)
    at = {(p, o): v for p, o, v in stored}
    counts = Counter(v for _p, _o, v in stored)
    missing = [a for a in acked if (a.partition, a.offset) not in at]
    misplaced = [a for a in acked if (a.partition, a.offset) in at and at[(a.partition, a.offset)] != a.value]
    acked_values = {a.value for a in acked}
    strangers = set(counts) - acked_values - unacked
    rank = {v: (w, i) for w, values in sent.items() for i, v in enumerate(values)}
    out_of_order = 0
    latest: dict[tuple[str, int], int] = defaultdict(lambda: -1)
    for p, _o, v in sorted(stored):
        found = rank.get(v)
        if found is None:
            continue
        writer, i = found
        if i < latest[(writer, p)]:
            out_of_order += 1
        latest[(writer, p)] = max(latest[(writer, p)], i)
    report: dict[str, Any] = {
        "acked": len(acked),
        "stored": len(stored),
        "lost": len(missing) + len(misplaced),
        "misplaced": len(misplaced),
        "duplicated": sum(n - 1 for n in counts.values() if n > 1),
        "strangers": len(strangers),
        "out_of_order": out_of_order,
        "unacked_sent": len(unacked),
        "unacked_stored": len(set(counts) & unacked),
        "examples": {
            "lost": [f"{a.value.decode()}@{a.partition}:{a.offset}" for a in (missing + misplaced)[:5]],
            "duplicated": sorted(v.decode() for v, n in counts.items() if n > 1)[:5],
        },
    }
    if group_seen is not None:
        report["group_missed"] = sum(1 for v in acked_values if group_seen[v] == 0)
        report["group_redelivered"] = sum(n - 1 for v, n in group_seen.items() if n > 1)
    return report


class Workload:
    """``writers`` :class:`Writer` threads and ``members`` :class:`GroupMember` threads on ``topic``."""

    def __init__(
        self,
        topic: str,
        partitions: int,
        client: Mapping[str, Any],
        writers: int = 3,
        members: int = 2,
        probe_partition: int | None = None,
    ) -> None:
        self.topic, self.client = topic, dict(client)
        self.writers = [Writer(f"w{i}", topic, partitions, self.client) for i in range(writers)]
        self.probe = None if probe_partition is None else Probe(topic, probe_partition, self.client)
        if self.probe is not None:
            self.writers.append(self.probe)
        self.seen: Counter[bytes] = Counter()
        self.members = [GroupMember(topic, f"{topic}-checkers", self.client, self.seen) for _ in range(members)]

    def start(self) -> None:
        for thread in [*self.writers, *self.members]:
            thread.start()

    def progress(self) -> dict[str, int]:
        return {
            "acked": sum(len(w.acked) for w in self.writers),
            "consumed": sum(self.seen.values()),
            "errors": sum(w.errors for w in self.writers) + sum(m.errors for m in self.members),
        }

    def finish(self, catch_up_s: float = 60.0) -> dict[str, Any]:
        """Stop the writers, let the group read what they wrote, read everything, check it."""
        for w in self.writers:
            w.finish()
        acked = [a for w in self.writers for a in w.acked]
        deadline = time.monotonic() + catch_up_s
        while time.monotonic() < deadline and any(self.seen[a.value] == 0 for a in acked[-200:]):
            time.sleep(0.5)
        for m in self.members:
            m.finish()
        stored = read_everything(self.topic, self.client)
        report = check(
            stored,
            acked,
            {w.writer: w.sent for w in self.writers},
            set().union(*(w.unacked for w in self.writers)),
            self.seen,
        )
        if self.probe is not None:
            report["probe"] = self.probe.timeline
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparklog.hosts.workload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--probe-partition", type=int, default=None, help="also time one-at-a-time writes to it")
    parser.add_argument("--create", action="store_true", help="create the topic: RF=3, min.insync.replicas=2")
    args = parser.parse_args(argv)
    client = {"bootstrap_servers": args.bootstrap_server}
    if args.create:
        with Admin(**client) as admin:
            admin.create_topic(args.topic, args.partitions, 3, {"min.insync.replicas": "2"})
    work = Workload(args.topic, args.partitions, client, args.writers, args.members, args.probe_partition)
    work.start()
    stop = threading.Event()

    def wait_for_stop() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    while not stop.wait(PROGRESS_INTERVAL_S):
        print(json.dumps(work.progress()), flush=True)
    print(json.dumps({"report": work.finish()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
