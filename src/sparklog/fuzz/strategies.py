"""Hypothesis strategies that draw :class:`~sparklog.fuzz.cases.Case` objects.

Every parameter is drawn by hypothesis (so a run is reproduced by its seed); bulk bytes are not:
a case draws a ``seed`` and :mod:`sparklog.fuzz.batches` makes the bytes from it. Sizes are kept
so that 10,000 cases fit in half an hour on two cores: most batches are small, a few are large
(up to 8 MiB), and the rare huge inputs (50M declared rows, a 70 MiB zstd bomb) are tiny on the wire.

Symbolic values resolved when the case is applied (they depend on what the partition holds then):
in a fetch, ``offset_mode``; in a copy slice, ``"$last"`` (the source's high watermark - 1),
``"$mid"`` (half of it), ``"$first10"`` (the tenth record) and the sequence ``"$follows"`` (the
previous slice's sequence plus its records).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sparklog.fuzz import cases
from sparklog.fuzz.batches import LAYOUTS, MAX_BATCH_ROWS, TIMESTAMP_MODES, VALID_LAYOUTS
from sparklog.fuzz.requests import RAW_BODIES, WEIRD_TOPICS, WEIRD_VALUES
from sparklog.wire import COPY_RECORDS, LIST_OFFSETS, OFFSETS_FOR_LEADER_EPOCH, PING

SEEDS = st.integers(0, 2**32 - 1)
INVALID_LAYOUTS = tuple(name for name in LAYOUTS if name not in VALID_LAYOUTS)


class Topology:
    """The topics under test (name -> partitions; the compacted ones, whose records need keys) and
    broker ids: what drawn names and numbers aim at."""

    def __init__(self, topics: dict[str, int], brokers: list[int], compacted: set[str] | None = None) -> None:
        self.topics = topics
        self.brokers = brokers
        self.compacted = compacted or set()


def weighted(draw: st.DrawFn, choices: list[tuple[int, Any]]) -> Any:
    """One of ``choices`` (weight, value) in proportion to its weight. (``one_of`` and
    ``sampled_from`` with repeated entries do not weigh: hypothesis picks among them its own way.)"""
    roll = draw(st.integers(0, sum(w for w, _ in choices) - 1))
    for weight, value in choices:
        if roll < weight:
            return value
        roll -= weight
    raise AssertionError("unreachable")


def weird_value() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(WEIRD_VALUES),
        st.integers(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.text(max_size=20),
        st.floats(allow_nan=False),
        st.lists(st.integers(-5, 5), max_size=3),
    )


def edits(fields: list[str]) -> st.SearchStrategy[list[list[Any]]]:
    """1-3 edits of a JSON body (set a field, known or not, to an odd value; delete one), or a body
    that is not the JSON object expected at all (a quarter of the time)."""
    one = st.one_of(
        st.tuples(st.just("set"), st.sampled_from([*fields, "extra", "type", "\u0000"]), weird_value()).map(list),
        st.tuples(st.just("del"), st.sampled_from(fields), st.none()).map(list),
    )
    raw = st.sampled_from(sorted(RAW_BODIES)).map(lambda name: [["raw", "", name]])
    several = st.lists(one, min_size=1, max_size=3)
    return st.one_of(several, several, several, raw)


@st.composite
def topic_name(draw: st.DrawFn, topology: Topology) -> str:
    """Mostly a topic under test; else a name that is not one (path-like, reserved, odd characters)."""
    return draw(
        weighted(
            draw,
            [
                (8, st.sampled_from(sorted(topology.topics))),
                (2, st.sampled_from(WEIRD_TOPICS)),
                (1, st.text(min_size=1, max_size=12)),
            ],
        )
    )


@st.composite
def partition_of(draw: st.DrawFn, topology: Topology, topic: str) -> int:
    count = topology.topics.get(topic, 1)
    return draw(
        weighted(draw, [(5, st.integers(0, count - 1)), (1, st.sampled_from([-1, count, 1 << 31, -(1 << 63)]))])
    )


# ----------------------------------------------------------------------------------- produce
def batch_spec(layout: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def spec(draw: st.DrawFn) -> dict[str, Any]:
        name = draw(layout)
        rows = draw(weighted(draw, [(5, st.integers(1, 20)), (3, st.integers(21, 500)), (1, st.integers(501, 10_000))]))
        value_size = draw(weighted(draw, [(3, st.integers(0, 64)), (1, st.integers(65, 4096))]))
        if name == "big":
            rows, value_size = draw(st.integers(1, 64)), draw(st.sampled_from([64 << 10, 1 << 20, 4 << 20]))
        if name == "null_typed_huge":
            rows = draw(st.sampled_from([MAX_BATCH_ROWS + 1, 5_000_000, 50_000_000]))
        if rows * value_size > (8 << 20):
            value_size = (8 << 20) // rows
        return {
            "layout": name,
            "rows": rows,
            "seed": draw(SEEDS),
            "value_size": value_size,
            "keys": weighted(draw, [(2, 0), (1, 3), (1, 20), (1, 1000)]),
            "headers": draw(st.booleans()),
            "timestamp": weighted(draw, [(4, "none"), (4, "now")] + [(1, mode) for mode in TIMESTAMP_MODES]),
            "null_values": weighted(draw, [(6, 0.0), (2, 0.1), (1, 1.0)]),
        }

    return spec()


# malformed layouts, weighted: the offsets family (finding 1) is what crashed readers
MALFORMED_WEIGHTS = {name: 1 for name in INVALID_LAYOUTS} | {
    "offsets_huge_middle_key": 6,
    "offsets_huge_middle_value": 3,
    "offsets_negative_middle": 2,
    "offsets_decreasing": 2,
    "headers_offsets_huge_middle": 3,
    "null_count_lie": 2,
    "utf8_invalid_key": 2,
    "utf8_invalid_header_key": 2,
}


@st.composite
def produce_case(draw: st.DrawFn, topology: Topology, malformed: bool) -> cases.Case:
    """A produce stream of 1-3 batches. Well-formed: to a topic under test, with keys on a
    compacted one. Malformed: mostly a malformed batch sent to a real partition (what the broker
    must refuse after reading it); sometimes also an odd topic, partition or descriptor."""
    real = st.sampled_from(sorted(topology.topics))
    odd_target = malformed and weighted(draw, [(5, False), (1, True)])
    topic = draw(topic_name(topology)) if odd_target else draw(real)
    partition = draw(partition_of(topology, topic)) if odd_target else draw(st.integers(0, topology.topics[topic] - 1))
    if malformed:
        layout = st.just(weighted(draw, [(w, name) for name, w in MALFORMED_WEIGHTS.items()]))
    else:
        layout = st.just(
            weighted(draw, [(65, "valid"), (10, "sliced"), (10, "string_key"), (10, "string_value"), (4, "big")])
        )
    first = draw(batch_spec(layout))
    if topic in topology.compacted and not malformed and draw(st.integers(0, 9)):
        first["keys"] = draw(st.sampled_from([20, 1000]))  # a compacted topic refuses records without keys
    more = weighted(draw, [(6, 0), (1, 1), (1, 2)])
    specs = [first] + [
        {**first, "seed": draw(SEEDS), "rows": draw(st.integers(1, max(1, first["rows"])))} for _ in range(more)
    ]
    params: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "acks": weighted(draw, [(5, "1"), (3, "all"), (1, "0")]),
        "compression": weighted(draw, [(6, None), (1, "lz4"), (1, "zstd")]),
        "batches": specs,
        "idempotence": weighted(
            draw, [(8, "none"), (1, "weird")] if malformed else [(5, "none"), (3, "next"), (1, "dup"), (1, "gap")]
        ),
        "producer": draw(st.integers(1000, 1003)),
        "edits": draw(edits(["type", "topic", "partition", "acks", "producer_id", "first_sequence", "schema_version"]))
        if malformed and weighted(draw, [(5, False), (1, True)])
        else [],
        "abandon": weighted(draw, [(27, None), (1, "before_write"), (1, "after_write"), (1, "mid_stream")]),
    }
    if first["layout"] == "zstd_bomb":
        params["compression"] = "zstd"
    return cases.Case(cases.PRODUCE, params)


# ----------------------------------------------------------------------------------- fetch
@st.composite
def fetch_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    topic = draw(topic_name(topology))
    wait = weighted(draw, [(6, 0), (1, 5), (1, 100), (1, 250), (1, 1000), (1, 30_000), (1, 31_000), (1, -5)])
    ticket: dict[str, Any] = {
        "topic": topic,
        "partition": draw(partition_of(topology, topic)),
        "max_bytes": weighted(draw, [(8, 8 << 20), (1, 1), (1, 0), (1, -1), (1, 100), (1, 64 << 20), (1, 1 << 40)]),
        "max_wait_ms": wait,
    }
    if draw(st.integers(0, 3)) == 0:
        ticket["replica_id"] = draw(st.sampled_from([-1, -2, 0, *topology.brokers, 7, 1 << 40, "1"]))
    if draw(st.integers(0, 4)) == 0:
        ticket["leader_epoch"] = draw(st.sampled_from([0, -1, 5, 1 << 40, None, "0"]))
    if draw(st.integers(0, 3)) == 0:
        ticket["compact"] = draw(st.sampled_from([True, False, "yes", 1]))
    if draw(st.integers(0, 3)) == 0:
        ticket["follow"] = draw(st.sampled_from([True, False, 1]))
    if draw(st.integers(0, 6)) == 0:
        ticket["fields"] = draw(st.sampled_from([["a"], [], [""], "value", ["value.x"] * 3, [1]]))
    # a long wait is never waited for: the client gives up (an abandoned long poll, finding 4)
    long_wait = isinstance(wait, int) and wait > 300 or ticket.get("follow") is True
    read = (
        draw(st.sampled_from(["first", "none"]))
        if long_wait
        else draw(st.sampled_from(["all", "all", "first", "none"]))
    )
    params = {
        "ticket": ticket,
        "offset_mode": weighted(draw, [(3, "start"), (2, "mid"), (2, "end"), (1, "beyond"), (1, "explicit")]),
        "offset": draw(st.one_of(st.integers(-3, 3), st.sampled_from([1 << 31, (1 << 63) - 1, -(1 << 63), 1 << 64]))),
        "read": read,
        "edits": draw(edits(["topic", "partition", "offset", "max_bytes", "max_wait_ms", "replica_id", "leader_epoch"]))
        if draw(st.integers(0, 2)) == 0
        else [],
    }
    return cases.Case(cases.FETCH, params)


# ----------------------------------------------------------------------------------- actions
@st.composite
def copy_body(draw: st.DrawFn, topology: Topology) -> dict[str, Any]:
    names = sorted(topology.topics)
    source = draw(st.sampled_from(names))
    shape = weighted(draw, [(6, "few"), (2, "whole"), (1, "amplify")])
    # whole partitions, or 1,024 slices (finding 3): mostly under a producer id, so that the broker
    # stores a repeated copy once (without one, every repeat appends it all again)
    count = {"few": draw(st.integers(1, 4)), "whole": draw(st.integers(1, 8)), "amplify": 1024}[shape]
    target = draw(st.sampled_from(names))
    target_p = draw(st.integers(0, topology.topics[target] - 1))
    pid = weighted(draw, [(2, -1), (1, 2000), (1, 2001)] if shape == "few" else [(1, -1), (4, 2000), (4, 2001)])
    base_seq = weighted(draw, [(4, 0), (1, 100), (1, -1), (1, 1 << 40)])
    slices = []
    for i in range(count):
        if shape == "few":
            first = weighted(draw, [(3, 0), (1, 1), (1, 3), (1, -1), (1, "$mid"), (1, "$last")])
            last = weighted(draw, [(1, 0), (2, 2), (2, 10), (2, "$mid"), (2, "$last"), (1, (1 << 63) - 1)])
        elif shape == "whole":
            first, last = 0, "$last"
        else:
            first, last = 0, "$first10"
        slices.append(
            {
                "first": first,
                "last": last,
                "topic": target,
                "partition": target_p,
                "producer_id": pid,
                # the copies of one call follow each other in the producer's sequence (resolved when applied)
                "sequence": "$follows" if i and shape != "few" and base_seq >= 0 else base_seq,
            }
        )
    return {
        "topic": source,
        "partition": draw(st.integers(0, topology.topics[source] - 1)),
        "acks": weighted(draw, [(4, "all"), (4, "1"), (1, "0"), (1, 1)]),
        "slices": slices,
    }


@st.composite
def action_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    odd_names = st.sampled_from(["", "PING", "shutdown", "copy_records ", "x" * 1000, "list_offsets\u0000"])
    name = draw(
        weighted(
            draw,
            [
                (1, st.just(PING)),
                (3, st.just(LIST_OFFSETS)),
                (2, st.just(OFFSETS_FOR_LEADER_EPOCH)),
                (5, st.just(COPY_RECORDS)),
                (1, odd_names),
            ],
        )
    )
    topic = draw(topic_name(topology))
    base: dict[str, Any]
    if name == COPY_RECORDS:
        base = draw(copy_body(topology))
    elif name == OFFSETS_FOR_LEADER_EPOCH:
        base = {"topic": topic, "partition": draw(partition_of(topology, topic)), "epoch": draw(st.integers(-2, 3))}
    else:
        base = {"topic": topic, "partition": draw(partition_of(topology, topic))}
        if draw(st.booleans()):
            base["timestamp"] = draw(st.sampled_from([0, -1, -2, 1 << 62, 253_402_300_799_000, "now", 1 << 64]))
    fields = sorted(base) + (["slices"] if name == COPY_RECORDS else [])
    params = {"name": name, "body": base, "edits": draw(edits(fields)) if draw(st.integers(0, 2)) == 0 else []}
    return cases.Case(cases.ACTION, params)


# ----------------------------------------------------------------------------------- abandoned calls, raw bytes
@st.composite
def abandon_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    topic = draw(st.sampled_from(sorted(topology.topics)))
    params = {
        "call": draw(st.sampled_from(["put", "put", "get_long_poll", "get_follow", "get_unread", "action_copy"])),
        "topic": topic,
        "partition": draw(st.integers(0, topology.topics[topic] - 1)),
        "streams": weighted(draw, [(4, 1), (2, 5), (1, 30)]),
        "seed": draw(SEEDS),
    }
    return cases.Case(cases.ABANDON, params)


@st.composite
def garbage_case(draw: st.DrawFn) -> cases.Case:
    params = {
        "mode": draw(st.sampled_from(["random", "h2_preface", "h2_frames", "http1", "tls_hello", "connect_only"])),
        "nbytes": draw(st.sampled_from([0, 1, 24, 100, 4096, 1 << 20])),
        "seed": draw(SEEDS),
        "hold_ms": draw(st.sampled_from([0, 0, 50, 300])),
    }
    return cases.Case(cases.GARBAGE, params)


@st.composite
def any_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """The mix: 40% well-formed produces (the data the invariants are about), 22% malformed ones,
    12% fetches, 12% actions, 7% abandoned calls, 7% garbage on the port."""
    strategy = weighted(
        draw,
        [
            (40, produce_case(topology, malformed=False)),
            (22, produce_case(topology, malformed=True)),
            (12, fetch_case(topology)),
            (12, action_case(topology)),
            (7, abandon_case(topology)),
            (7, garbage_case()),
        ],
    )
    return draw(strategy)
