"""The producer's side of the record model: batches in the wire schema (stored records without
offsets), built from records sent one by one or from user tables."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.records import (
    HEADER_TYPE,
    TIMESTAMP_TYPE,
    to_record_batch,
    to_wire_batch,
    wire_batch_of_rows,
    wire_schema,
)


def test_rows_sent_one_by_one_become_the_batch_a_table_of_them_would() -> None:
    headers = pa.array([None, [{"key": "h", "value": b"1"}], None], HEADER_TYPE)
    value = pa.array([b"a", None, b"c"], pa.binary())
    batch = wire_batch_of_rows([5, 6, 7], [None, b"k", b"k2"], value, headers)
    assert batch.schema.equals(wire_schema())
    table = pa.table({"timestamp": pa.array([5, 6, 7], pa.int64()), "key": [None, b"k", b"k2"], "value": value})
    expected = to_record_batch(table.append_column("headers", headers)).drop_columns(["offset"])
    assert batch.equals(expected)

    plain = wire_batch_of_rows([9], [None], pa.array([b"v"]), None)
    assert plain.column("headers").null_count == 1 and plain.column("timestamp").type == TIMESTAMP_TYPE


def test_wire_batches_are_passed_through_and_other_input_is_normalized() -> None:
    batch = wire_batch_of_rows([1, 2], [b"a", None], pa.array([b"x", b"y"]), None)
    assert to_wire_batch(batch) is batch
    joined = to_wire_batch(pa.Table.from_batches([batch, batch]))
    assert joined.num_rows == 4 and joined.schema.equals(wire_schema())
    assert joined.column("value").to_pylist() == [b"x", b"y", b"x", b"y"]

    user = to_wire_batch(pa.table({"value": [b"v1", b"v2"]}))
    assert user.schema.equals(wire_schema()) and user.column("timestamp").null_count == 0

    # the wire schema but a timestamp missing: filled in, not sent as null
    missing = pa.RecordBatch.from_arrays(
        [pa.array([None, 3], TIMESTAMP_TYPE), *batch.columns[1:]], schema=wire_schema()
    )
    assert missing.schema.equals(wire_schema())
    filled = to_wire_batch(missing)
    assert filled.column("timestamp").null_count == 0 and filled.column("timestamp")[1].value == 3


def test_rows_without_headers_get_valid_null_header_lists_of_any_size() -> None:
    # small sizes share one buffer of zeros; sizes past it get their own: all must be valid, all
    # null, and travel as small as lists built the plain way (no child slots, no parent buffers)
    schema = pa.schema([pa.field("headers", HEADER_TYPE)])

    def ipc_size(column: pa.Array) -> int:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(pa.record_batch([column], schema=schema))
        return sink.getvalue().size

    for rows in (0, 1, 17, 10_000, (1 << 17) + 3):
        column = wire_batch_of_rows([1] * rows, None, pa.array([b"v"] * rows), None).column("headers")
        column.validate(full=True)
        plain = pa.ListArray.from_arrays(
            pa.array(np.zeros(rows + 1, dtype=np.int32)),
            pa.array([], HEADER_TYPE.value_type),
            type=HEADER_TYPE,
            mask=pa.array(np.ones(rows, dtype=bool)),
        )
        assert column.null_count == rows and column.equals(plain)
        assert ipc_size(column) == ipc_size(plain)
