"""A consumer group of three member processes over six partitions, with a member killed (kill -9)
mid-way while records keep coming.

Each member (``broker_helpers.py group-member``) polls, writes every record it got as a JSON line
(partition, offset, value, wall-clock time), pauses briefly, commits its positions, and logs its
assignment. From those files and the offsets committed in ZooKeeper the test checks that:

- every partition is read by one member at a time: per partition, the records in time order form runs
  of one member each, every run contiguous, and each run starts exactly where the previous owner's
  committed position was (the next offset after its last record, or the dead member's last commit);
- every produced record is consumed, with the right value, at least once; and the only records consumed
  twice are the ones the dead member consumed after its last commit (each exactly twice);
- at the end the survivors split the six partitions and the group's committed offsets are the log ends.

Every sparklog client's ZooKeeper session lasts 10 s (``ClusterMetadata(timeout=10.0)``; neither
``Consumer`` nor ``ClusterClient`` lets a caller choose it), so the dead member's partitions stay
locked that long before the survivors take them over; the test waits for it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from broker_helpers import HELPER_SCRIPT, SESSION_EXPIRY_S, read_jsonl
from sparklog import Admin, Producer
from sparklog.coordination.cluster import ClusterMetadata
from waiting import wait_for

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 6
MEMBERS = 3
VICTIM = 0


class BackgroundProducer(threading.Thread):
    """Keeps producing small keyed batches until stopped; remembers (partition, offset) -> value."""

    def __init__(self, producer: Producer, produced: dict[tuple[int, int], str], start_seq: int) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.produced = produced
        self.seq = start_seq
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                produce(self.producer, self.produced, self.seq, 12)
                self.seq += 12
                time.sleep(0.05)
        except BaseException as exc:
            self.error = exc


def produce(producer: Producer, produced: dict[tuple[int, int], str], start: int, n: int) -> None:
    futures = [
        (f"r{i}", producer.send(TOPIC, f"r{i}".encode(), key=f"k{i % 37}".encode())) for i in range(start, start + n)
    ]
    for value, future in futures:
        meta = future.result(30)
        produced[(meta.partition, meta.offset)] = value


def records_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if "p" in e]


def last_assignment(events: list[dict[str, Any]]) -> list[int] | None:
    assigned = [e["partitions"] for e in events if e.get("event") == "assigned"]
    return assigned[-1] if assigned else None


@pytest.mark.slow
def test_group_members_share_partitions_and_take_over_from_commits_after_kill_9(
    start_broker: Any, sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    produced: dict[tuple[int, int], str] = {}
    producer = Producer(zookeeper=sparklog_connect, linger_ms=2)
    background = BackgroundProducer(producer, produced, 600)
    try:
        produce(producer, produced, 0, 600)

        outs = [tmp_path / f"member-{m}.jsonl" for m in range(MEMBERS)]
        procs = []
        for m in range(MEMBERS):
            args = [
                sys.executable,
                str(HELPER_SCRIPT),
                "group-member",
                f"--zookeeper={sparklog_connect}",
                f"--topic={TOPIC}",
                f"--group={GROUP}",
                f"--out={outs[m]}",
                "--pause-before-commit=0.3",
            ]
            procs.append(child_processes.spawn(args, tmp_path / f"member-{m}.log"))

        def stable(members: list[int], size: int) -> bool:
            latest = [last_assignment(read_jsonl(outs[m])) for m in members]
            if any(a is None or len(a) != size for a in latest):
                return False
            return sorted(p for a in latest for p in a) == list(range(PARTITIONS))  # type: ignore[union-attr]

        wait_for(lambda: stable(list(range(MEMBERS)), 2), 60, "three members with two partitions each", 0.1)
        background.start()

        # kill the victim right after it wrote records it has not committed yet (it pauses before committing)
        victim_parts = last_assignment(read_jsonl(outs[VICTIM]))
        assert victim_parts is not None
        seen = len(read_jsonl(outs[VICTIM]))

        def victim_holds_uncommitted() -> bool:
            events = read_jsonl(outs[VICTIM])
            return len(events) > seen and "p" in events[-1]

        wait_for(victim_holds_uncommitted, 30, "the victim to consume new records", 0.005)
        procs[VICTIM].kill()
        procs[VICTIM].wait(10)
        with ClusterMetadata(sparklog_connect) as cluster:  # its partitions are still locked by its session
            committed_at_kill = {p: o for (_t, p), o in cluster.committed_offsets(GROUP, TOPIC).items()}
        assert last_assignment(read_jsonl(outs[VICTIM])) == victim_parts

        survivors = [m for m in range(MEMBERS) if m != VICTIM]
        wait_for(lambda: stable(survivors, 3), SESSION_EXPIRY_S, "the survivors to take over all partitions", 0.1)
        time.sleep(1.0)  # some more records for the new owners
        background.stop.set()
        background.join(30)
        assert background.error is None, repr(background.error)

        def all_consumed() -> bool:
            got = {(e["p"], e["o"]) for m in survivors for e in records_of(read_jsonl(outs[m]))}
            got |= {(e["p"], e["o"]) for e in records_of(read_jsonl(outs[VICTIM]))}
            return got >= set(produced)

        wait_for(all_consumed, 60, "every produced record to be consumed", 0.1)
        time.sleep(1.5)  # let the survivors commit and poll on (nothing more may come)
        final = [last_assignment(read_jsonl(outs[m])) for m in survivors]
        for m in survivors:
            procs[m].terminate()
        for m in survivors:
            assert procs[m].wait(30) == 0, (tmp_path / f"member-{m}.log").read_text()
        with ClusterMetadata(sparklog_connect) as cluster:
            committed_final = {p: o for (_t, p), o in cluster.committed_offsets(GROUP, TOPIC).items()}
    finally:
        background.stop.set()
        producer.close()

    events = {m: read_jsonl(outs[m]) for m in range(MEMBERS)}
    for m in survivors:
        assert events[m][-1]["event"] == "closed"
    consumed = [(m, i, e) for m in range(MEMBERS) for i, e in enumerate(events[m]) if "p" in e]
    ends = {p: 1 + max((o for q, o in produced if q == p), default=-1) for p in range(PARTITIONS)}
    assert set(produced) == {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}

    # the right values, nothing invented, nothing lost
    for m, _i, e in consumed:
        assert produced.get((e["p"], e["o"])) == e["v"], f"member {m} read {e}"
    counts = Counter((e["p"], e["o"]) for _m, _i, e in consumed)
    assert set(counts) == set(produced)

    # the only duplicates: what the victim consumed after its last commit, each read once more
    uncommitted = {
        (e["p"], e["o"]) for m, _i, e in consumed if m == VICTIM and e["o"] >= committed_at_kill.get(e["p"], 0)
    }
    duplicated = {k for k, n in counts.items() if n > 1}
    assert max(counts.values()) <= 2
    # the victim was killed during its pause between writing records and committing them
    assert uncommitted, "the kill missed the victim's window between consuming and committing"
    assert duplicated == uncommitted, (
        f"duplicates {sorted(duplicated - uncommitted)[:10]} were not the victim's uncommitted records; "
        f"uncommitted records read only once: {sorted(uncommitted - duplicated)[:10]}"
    )
    assert uncommitted <= {(p, o) for p in victim_parts for o in range(ends[p])}
    victim_records = records_of(events[VICTIM])
    assert victim_records and any(e["p"] in victim_parts for e in victim_records)

    # one member at a time: per partition, time-ordered runs of one member, each contiguous, handing over
    # exactly at the committed position
    for p in range(PARTITIONS):
        ordered = sorted((e["t"], m, i, e["o"]) for m, i, e in consumed if e["p"] == p)
        runs: list[tuple[int, list[int]]] = []
        for _t, m, _i, o in ordered:
            if runs and runs[-1][0] == m:
                runs[-1][1].append(o)
            else:
                runs.append((m, [o]))
        last_victim_run = max((k for k, (m, _o) in enumerate(runs) if m == VICTIM), default=None)
        expected_start = 0
        for k, (m, offsets) in enumerate(runs):
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"partition {p}: gap in {m}'s run"
            if k and k - 1 == last_victim_run and p in victim_parts:
                expected_start = committed_at_kill[p]  # the dead member's last commit
            assert offsets[0] == expected_start, (
                f"partition {p}: member {m} started at {offsets[0]}, the previous owner committed {expected_start} "
                f"(runs: {[(mm, oo[0], oo[-1]) for mm, oo in runs]})"
            )
            expected_start = offsets[-1] + 1
        assert expected_start == ends[p], f"partition {p} read up to {expected_start}, its end is {ends[p]}"

    # at the end: the survivors split the partitions, and the group committed everything
    assert sorted(p for a in final for p in a or []) == list(range(PARTITIONS)), final
    assert all(a is not None and len(a) == 3 for a in final), final
    assert committed_final == ends
    assert committed_at_kill.keys() == set(range(PARTITIONS))

    # what each member consumed per partition it owned came in offset order
    for m in range(MEMBERS):
        by_partition: dict[int, list[int]] = defaultdict(list)
        for e in records_of(events[m]):
            by_partition[e["p"]].append(e["o"])
        for p, offsets in by_partition.items():
            assert offsets == sorted(offsets), f"member {m} read partition {p} out of order"
