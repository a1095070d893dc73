"""A consumer's small fetched batches are joined into larger Flight messages, never across schemas,
never changing a record or its order."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.consumer_messages import _coalesced

PLAIN = pa.schema([("offset", pa.int64()), ("value", pa.binary())])
TYPED = pa.schema([("offset", pa.int64()), ("value", pa.struct([("x", pa.int64())]))])


def make(schema: pa.Schema, start: int, n: int, width: int) -> pa.RecordBatch:
    offsets = pa.array(range(start, start + n), pa.int64())
    if schema is TYPED:
        values = pa.StructArray.from_arrays([pa.array(range(n), pa.int64())], names=["x"])
    else:
        values = pa.array([b"v" * width] * n, pa.binary())
    return pa.RecordBatch.from_arrays([offsets, values], schema=schema)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.integers(1, 50), st.integers(0, 300)), min_size=1, max_size=30),
    st.integers(64, 20_000),
)
def test_joined_batches_hold_the_same_records_in_order(spec: list[tuple[bool, int, int]], limit: int) -> None:
    batches, start = [], 0
    for typed, n, width in spec:
        batches.append(make(TYPED if typed else PLAIN, start, n, width))
        start += n
    out = list(_coalesced(iter(batches), limit))
    assert [r for b in out for r in b.column(0).to_pylist()] == list(range(start))
    flat_in = [v for b in batches for v in b.column(1).to_pylist()]
    assert [v for b in out for v in b.column(1).to_pylist()] == flat_in
    for b in out:  # a joined batch stays within the limit; one of a single input may exceed it
        joined_from = [x for x in batches if x.column(0)[0].as_py() >= b.column(0)[0].as_py()]
        if b.nbytes > limit:
            assert b.num_rows == joined_from[0].num_rows
    assert len(out) <= len(batches)
    # batches of one schema that fit the limit together (measured as _coalesced measures them: the
    # size of their buffers, which nbytes can undercount by a few bytes) go out as one message
    together = sum(b.get_total_buffer_size() for b in batches)
    if all(b.schema.equals(batches[0].schema) for b in batches) and together <= limit:
        assert len(out) == 1
