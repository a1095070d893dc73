"""Hypothesis strategies that draw :class:`~sparklog.fuzz.cases.Case` objects.

A produce case's batches travel as frames (:mod:`sparklog.fuzz.frames`), compressed or not, one
of them sometimes mutated (its metadata, its IPC message's bytes, its declared sizes, cut short,
replaced), the records' schema named in the descriptor (sometimes not, garbage, or another one);
a few cases send the produce wire before frames (Flight record batches), which must be refused.

Every parameter is drawn by hypothesis (so a run is reproduced by its seed); bulk bytes are not:
a case draws a ``seed`` and :mod:`sparklog.fuzz.batches` makes the bytes from it. Sizes are kept
so that 10,000 cases fit in half an hour on two cores: most batches are small, a few are large
(up to 8 MiB), and the rare huge inputs (50M declared rows, a 70 MiB zstd bomb) are tiny on the wire.

Symbolic values resolved when the case is applied (they depend on what the partition holds then):
in a fetch, ``offset_mode``; in a copy slice, ``"$last"`` (the source's high watermark - 1),
``"$mid"`` (half of it), ``"$first10"`` (the tenth record) and the sequence ``"$follows"`` (the
previous slice's sequence plus its records), and the target partition ``"$colocated"`` (one the
source's leader leads: a copy stays on one broker). In a replica fetch's partitions and a
``fetch_many``'s, ``offset_mode`` too, and the epoch ``"$current"`` (the partition's leader epoch).

:func:`low_privilege_case` is the low-privilege mode's mix (:mod:`sparklog.fuzz.privileges`): the
usual cases, plus well-formed requests aimed at what ACLs guard (replica fetches under any
replica id, ``copy_records`` between every pair of topics, ``offsets_for_leader_epoch``,
``list_offsets``, consumer fetches and ``fetch_many`` of every topic, ``metadata``); such a run
starts with :func:`low_privilege_sweep`, each of those once per topic (pair) and replica id.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sparklog.fuzz import cases
from sparklog.fuzz.batches import LAYOUTS, MAX_BATCH_ROWS, TIMESTAMP_MODES, VALID_LAYOUTS
from sparklog.fuzz.frames import MUTATIONS
from sparklog.fuzz.requests import RAW_BODIES, WEIRD_TOPICS, WEIRD_VALUES
from sparklog.protocol.wire import COPY_RECORDS, LIST_OFFSETS, METADATA, OFFSETS_FOR_LEADER_EPOCH, PING

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
    """A produce stream of 1-3 batches, as frames. Well-formed: to a topic under test, with keys on
    a compacted one; a tenth of them with one frame mutated, a few naming another schema.
    Malformed: mostly a malformed batch sent to a real partition (what the broker must refuse
    after reading it); a third of them with one frame mutated too; sometimes also an odd topic,
    partition, descriptor or named schema. A few of either sent as Flight record batches (the wire
    before frames: refused, 1 in 40 well-formed, 1 in 10 malformed)."""
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
        "edits": draw(
            edits(["type", "topic", "partition", "acks", "producer_id", "first_sequence", "schema_version", "schema"])
        )
        if malformed and weighted(draw, [(5, False), (1, True)])
        else [],
        "abandon": weighted(draw, [(27, None), (1, "before_write"), (1, "after_write"), (1, "mid_stream")]),
        # frames, as the wire says; a few streams of Flight record batches (the wire before frames)
        "wire": weighted(draw, [(9, "frames"), (1, "flight")] if malformed else [(39, "frames"), (1, "flight")]),
        "schema": weighted(
            draw,
            [(16, "named"), (1, "missing"), (3, "garbage"), (3, "other")]
            if malformed
            else [(60, "named"), (1, "other")],
        ),
        "schema_seed": draw(SEEDS),
        "frame_mutation": frame_mutation(draw, more + 1)
        if weighted(draw, [(2, False), (1, True)] if malformed else [(9, False), (1, True)])
        else None,
    }
    if first["layout"] == "zstd_bomb":
        params["compression"] = "zstd"
    return cases.Case(cases.PRODUCE, params)


# frame mutations, weighted: those the broker reads first (metadata, declared sizes) most
FRAME_MUTATION_WEIGHTS = {
    "metadata": 3,
    "flip": 2,
    "flip_metadata": 4,
    "flip_body": 2,
    "truncate": 3,
    "declared_size": 3,
    "schema_message": 1,
    "end_marker": 1,
    "garbage": 1,
    "no_frame": 1,
}
assert set(FRAME_MUTATION_WEIGHTS) == set(MUTATIONS)


def frame_mutation(draw: st.DrawFn, batches: int) -> dict[str, Any]:
    """One frame of a stream of ``batches`` mutated (:mod:`sparklog.fuzz.frames`), from a seed."""
    return {
        "kind": weighted(draw, [(w, kind) for kind, w in FRAME_MUTATION_WEIGHTS.items()]),
        "batch": draw(st.integers(0, batches - 1)),
        "seed": draw(SEEDS),
    }


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


# ----------------------------------------------------------------------------------- the low-privilege mode
OFFSET_MODES = [(4, "start"), (1, "mid"), (1, "end"), (1, "explicit")]


def replica_ids(topology: Topology) -> st.SearchStrategy[Any]:
    """Any replica id: the consumer's -1, other negative ones, each broker's, one past the last."""
    brokers = [*topology.brokers, max(topology.brokers, default=0) + 1]
    return st.sampled_from([-1, -1, -2, -3, -(1 << 31), *brokers, *brokers])


@st.composite
def replica_fetch_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """A replica fetch (``{"type": "replica_fetch", "replica_id", "partitions": [{"t", "p", "o",
    "e", "hw"}]}``) of 1-3 partitions of any topic, from any replica id, mostly well-formed."""
    names = sorted(topology.topics)
    partitions = []
    for _ in range(weighted(draw, [(5, 1), (2, 2), (1, 3)])):
        topic = draw(st.sampled_from(names))
        partitions.append(
            {
                "topic": topic,
                "partition": draw(weighted(draw, [(8, st.integers(0, topology.topics[topic] - 1)), (1, st.just(-1))])),
                "offset_mode": weighted(draw, OFFSET_MODES),
                "offset": draw(st.sampled_from([0, 0, -1, 1 << 40])),
                "epoch": weighted(draw, [(6, "$current"), (1, 0), (1, -1), (1, 1 << 20)]),
            }
        )
    params = {
        "replica_id": draw(replica_ids(topology)),
        "partitions": partitions,
        "max_wait_ms": weighted(draw, [(5, 0), (1, 100)]),
        "max_bytes": weighted(draw, [(5, 1 << 20), (1, 1), (1, 0)]),
        "session": weighted(draw, [(3, None), (1, draw(st.integers(1, 2**31 - 1)))]),
        "edits": draw(edits(["type", "replica_id", "partitions", "max_wait_ms", "max_bytes", "session_epoch"]))
        if draw(st.integers(0, 5)) == 0
        else [],
    }
    return cases.Case(cases.REPLICA_FETCH, params)


@st.composite
def multi_fetch_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """A consumer's ``fetch_many`` of some partitions of any topic."""
    topic = draw(st.sampled_from(sorted(topology.topics)))
    count = topology.topics[topic]
    chosen = draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=count, unique=True))
    params = {
        "topic": topic,
        "partitions": [
            {"partition": p, "offset_mode": weighted(draw, OFFSET_MODES), "offset": draw(st.sampled_from([0, -1]))}
            for p in chosen
        ],
        "max_bytes": weighted(draw, [(5, 1 << 20), (1, 1)]),
        "max_wait_ms": weighted(draw, [(5, 0), (1, 50)]),
        "compact": draw(st.booleans()),
        "edits": draw(edits(["type", "topic", "partitions", "max_bytes", "max_wait_ms"]))
        if draw(st.integers(0, 5)) == 0
        else [],
    }
    return cases.Case(cases.MULTI_FETCH, params)


@st.composite
def plain_fetch_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """A well-formed consumer fetch of any topic's partition (sometimes naming a replica id)."""
    topic = draw(st.sampled_from(sorted(topology.topics)))
    ticket: dict[str, Any] = {
        "topic": topic,
        "partition": draw(st.integers(0, topology.topics[topic] - 1)),
        "max_bytes": 1 << 20,
        "max_wait_ms": 0,
    }
    if draw(st.integers(0, 2)) == 0:
        ticket["replica_id"] = draw(replica_ids(topology))
    params = {
        "ticket": ticket,
        "offset_mode": weighted(draw, OFFSET_MODES),
        "offset": 0,
        "read": weighted(draw, [(4, "all"), (1, "first")]),
        "edits": [],
    }
    return cases.Case(cases.FETCH, params)


@st.composite
def guarded_action_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """A well-formed action that ACLs guard: ``copy_records`` from any topic to any other (or the
    same), ``offsets_for_leader_epoch`` (sometimes as a replica), ``list_offsets`` of one or many
    partitions, ``metadata`` of some or all topics."""
    names = sorted(topology.topics)
    name = weighted(draw, [(5, COPY_RECORDS), (3, OFFSETS_FOR_LEADER_EPOCH), (2, LIST_OFFSETS), (2, METADATA)])
    topic = draw(st.sampled_from(names))
    partition = draw(st.integers(0, topology.topics[topic] - 1))
    base: dict[str, Any]
    if name == COPY_RECORDS:
        base = draw(copy_body(topology))
        if draw(st.integers(0, 2)):  # mostly a small copy of the source's start
            target = draw(st.sampled_from(names))
            target_p = draw(st.integers(0, topology.topics[target] - 1))
            last = weighted(draw, [(2, "$first10"), (1, "$last"), (1, 2)])
            base["slices"] = [
                {"first": 0, "last": last, "topic": target, "partition": target_p, "producer_id": -1, "sequence": -1}
            ]
    elif name == OFFSETS_FOR_LEADER_EPOCH:
        base = {"topic": topic, "partition": partition, "epoch": weighted(draw, [(4, 0), (1, 1), (1, -1), (1, 7)])}
        if draw(st.integers(0, 2)) == 0:
            base["replica_id"] = draw(replica_ids(topology))
    elif name == LIST_OFFSETS:
        if draw(st.booleans()):
            base = {"topic": topic, "partition": partition}
            if draw(st.integers(0, 3)) == 0:
                base["timestamp"] = draw(st.sampled_from([0, -1, -2]))
        else:
            chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4))
            base = {"partitions": [{"topic": t, "partition": 0} for t in chosen]}
    else:
        listed = draw(st.one_of(st.none(), st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)))
        base = {"topics": listed}
        if draw(st.booleans()):
            base["describe"] = draw(st.booleans())
    fields = sorted(base) + (["slices"] if name == COPY_RECORDS else [])
    params = {"name": name, "body": base, "edits": draw(edits(fields)) if draw(st.integers(0, 7)) == 0 else []}
    return cases.Case(cases.ACTION, params)


@st.composite
def low_privilege_case(draw: st.DrawFn, topology: Topology) -> cases.Case:
    """The low-privilege mode's mix: 20% guarded actions, 15% replica fetches, 45% the usual cases
    (:func:`any_case`), 12% plain consumer fetches, 8% ``fetch_many``."""
    strategy = weighted(
        draw,
        [
            (20, guarded_action_case(topology)),
            (15, replica_fetch_case(topology)),
            (45, any_case(topology)),
            (12, plain_fetch_case(topology)),
            (8, multi_fetch_case(topology)),
        ],
    )
    return draw(strategy)


def low_privilege_sweep(topology: Topology) -> list[cases.Case]:
    """What a low-privilege run sends first, drawn by nothing: every guarded request once for each
    topic (a produce; a consumer fetch, also naming each replica id; a ``fetch_many``;
    ``list_offsets``; ``offsets_for_leader_epoch``, also as a replica), a replica fetch of each topic
    under each replica id, ``copy_records`` for every ordered pair of topics (the same one too), and
    ``metadata`` and ``list_offsets`` of every topic at once. Hypothesis draws long runs of similar
    cases, so a short run would otherwise miss whole rows of this matrix."""
    names = sorted(topology.topics)
    ids = [-1, -2, *topology.brokers, max(topology.brokers, default=0) + 1]
    sweep: list[cases.Case] = []
    for i, topic in enumerate(names):
        spec = {
            "layout": "valid",
            "rows": 5,
            "seed": i,
            "value_size": 16,
            "keys": 3,
            "headers": False,
            "timestamp": "now",
            "null_values": 0.0,
        }
        produce = {
            "topic": topic,
            "partition": 0,
            "acks": "all",
            "compression": None,
            "batches": [spec],
            "idempotence": "none",
            "producer": 1000,
            "edits": [],
            "abandon": None,
            "wire": "frames",
            "schema": "named",
            "schema_seed": 0,
            "frame_mutation": None,
        }
        sweep.append(cases.Case(cases.PRODUCE, produce))
        for replica_id in [None, *ids[1:]]:
            ticket: dict[str, Any] = {"topic": topic, "partition": 0, "max_bytes": 1 << 20, "max_wait_ms": 0}
            if replica_id is not None:
                ticket["replica_id"] = replica_id
            fetch = {"ticket": ticket, "offset_mode": "start", "offset": 0, "read": "all", "edits": []}
            sweep.append(cases.Case(cases.FETCH, fetch))
        many = {
            "topic": topic,
            "partitions": [
                {"partition": p, "offset_mode": "start", "offset": 0} for p in range(topology.topics[topic])
            ],
            "max_bytes": 1 << 20,
            "max_wait_ms": 0,
            "compact": False,
            "edits": [],
        }
        sweep.append(cases.Case(cases.MULTI_FETCH, many))
        for name, body in (
            (LIST_OFFSETS, {"topic": topic, "partition": 0}),
            (OFFSETS_FOR_LEADER_EPOCH, {"topic": topic, "partition": 0, "epoch": 0}),
            (OFFSETS_FOR_LEADER_EPOCH, {"topic": topic, "partition": 0, "epoch": 0, "replica_id": ids[2]}),
        ):
            sweep.append(cases.Case(cases.ACTION, {"name": name, "body": body, "edits": []}))
    for replica_id in ids:
        for topic in names:
            partitions = [{"topic": topic, "partition": 0, "offset_mode": "start", "offset": 0, "epoch": "$current"}]
            params = {
                "replica_id": replica_id,
                "partitions": partitions,
                "max_wait_ms": 0,
                "max_bytes": 1 << 20,
                "session": None,
                "edits": [],
            }
            sweep.append(cases.Case(cases.REPLICA_FETCH, params))
    for source in names:
        for target in names:
            piece = {"first": 0, "last": "$first10", "topic": target, "partition": "$colocated", "producer_id": -1}
            piece["sequence"] = -1
            body = {"topic": source, "partition": 0, "acks": "all", "slices": [piece]}
            sweep.append(cases.Case(cases.ACTION, {"name": COPY_RECORDS, "body": body, "edits": []}))
    for body in ({"topics": None}, {"topics": names, "describe": True}):
        sweep.append(cases.Case(cases.ACTION, {"name": METADATA, "body": body, "edits": []}))
    every = {"partitions": [{"topic": topic, "partition": 0} for topic in names]}
    sweep.append(cases.Case(cases.ACTION, {"name": LIST_OFFSETS, "body": every, "edits": []}))
    return sweep
