"""The fault runs' checker (:func:`sparklog.hosts.workload.check`) on histories made by hand: it must
see each kind of anomaly it reports, and nothing in a clean history."""

from __future__ import annotations

from collections import Counter

from sparklog.hosts.workload import Ack, check, failover_s

SENT = {"w0": [b"w0-0", b"w0-1", b"w0-2"], "w1": [b"w1-0", b"w1-1"]}
ACKED = [Ack(b"w0-0", 0, 0), Ack(b"w1-0", 0, 1), Ack(b"w0-1", 0, 2), Ack(b"w1-1", 1, 0), Ack(b"w0-2", 1, 1)]
STORED = [(0, 0, b"w0-0"), (0, 1, b"w1-0"), (0, 2, b"w0-1"), (1, 0, b"w1-1"), (1, 1, b"w0-2")]
ALL_SEEN = Counter(v for _p, _o, v in STORED)


def test_a_clean_history_has_no_anomaly() -> None:
    report = check(STORED, ACKED, SENT, group_seen=ALL_SEEN)
    assert report["acked"] == report["stored"] == 5
    for figure in ("lost", "misplaced", "duplicated", "strangers", "out_of_order", "group_missed"):
        assert report[figure] == 0, figure


def test_each_anomaly_is_counted() -> None:
    lost = check(STORED[:-1], ACKED, SENT)
    assert lost["lost"] == 1 and lost["examples"]["lost"] == ["w0-2@1:1"]
    moved = check([*STORED[:4], (1, 1, b"w1-1")], ACKED, SENT)  # w1-1 again where w0-2 was acknowledged
    assert moved["lost"] == moved["misplaced"] == 1 and moved["duplicated"] == 1
    twice = check([*STORED, (1, 2, b"w0-2")], ACKED, SENT)
    assert twice["duplicated"] == 1 and twice["lost"] == 0
    stranger = check([*STORED, (1, 2, b"nobody-0")], ACKED, SENT)
    assert stranger["strangers"] == 1
    swapped = [(0, 0, b"w0-1"), (0, 1, b"w1-0"), (0, 2, b"w0-0"), *STORED[3:]]  # w0's records reversed in 0
    assert check(swapped, ACKED, SENT)["out_of_order"] == 1
    missed = check(STORED, ACKED, SENT, group_seen=ALL_SEEN - Counter({b"w1-0": 1}))
    assert missed["group_missed"] == 1


def test_an_unacknowledged_record_may_be_stored_once() -> None:
    sent = {**SENT, "w1": [*SENT["w1"], b"w1-2"]}
    report = check([*STORED, (1, 2, b"w1-2")], ACKED, sent, unacked={b"w1-2"})
    assert report["unacked_stored"] == 1 and report["strangers"] == 0 and report["lost"] == 0


def test_failover_counts_from_the_fault_to_the_first_write_begun_after_it() -> None:
    timeline = [(10.0, 10.01), (10.02, 19.5), (19.51, 19.52), (19.53, 19.54)]
    assert failover_s(timeline, 12.0) == 7.52  # the write in flight at 12.0 does not count
    assert failover_s(timeline, 30.0) is None
