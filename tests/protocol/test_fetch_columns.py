"""A consumer fetch leaves out columns that carry nothing (offsets without a gap, absent keys and
headers) and the client rebuilds them: whatever the stored batches hold, the consumer gets exactly
the records and the schema it would get without it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_helpers import flight_client
from sparklog import Admin, Consumer, Producer
from sparklog.broker.consumer_messages import _coalesced
from sparklog.protocol import wire
from sparklog.protocol.fetch_columns import NOTHING, Elision, Restorer, plan
from sparklog.records import record_schema

SCHEMA = record_schema()


def stored_batch(offsets: list[int], keyed: bool, with_headers: bool, stamped_once: bool = False) -> pa.RecordBatch:
    """Records in the stored layout; ``stamped_once``: one timestamp for the whole batch."""
    keys = pa.array([b"k%d" % o if keyed and o % 2 else None for o in offsets], pa.binary())
    headers = pa.array(
        [[{"key": "h", "value": b"%d" % o}] if with_headers and o % 3 == 0 else None for o in offsets],
        SCHEMA.field("headers").type,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            pa.array(
                [1_700_000_000_000 + (offsets[0] if stamped_once else o) for o in offsets],
                SCHEMA.field("timestamp").type,
            ),
            keys,
            pa.array([b"v%d" % o for o in offsets], pa.binary()),
            headers,
        ],
        schema=SCHEMA,
    )


def send_and_restore(batches: list[pa.RecordBatch], limit: int) -> list[pa.RecordBatch]:
    """What the broker sends for ``batches`` (columns left out, batches joined), as the client
    restores it."""
    response = plan(batches)
    schema = response.sent_schema(SCHEMA)
    restorer = Restorer()
    out = []
    sent = _coalesced((response.elide(b.columns, schema) for b in batches), limit)
    for message, extra in response.messages(sent, [b.num_rows for b in batches]):
        assert message.schema.equals(schema)
        out.append(restorer.restore(message, pa.py_buffer(wire.encode({"hw": 0, "lso": 0, **extra}))))
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.integers(0, 3), st.booleans(), st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.integers(200, 20_000),
)
def test_restored_batches_equal_the_stored_ones(spec: list[tuple[int, int, bool, bool, bool]], limit: int) -> None:
    batches, offset = [], 5
    for n, gap, keyed, with_headers, stamped_once in spec:
        offset += gap  # a gap: records removed by compaction
        batches.append(stored_batch(list(range(offset, offset + n)), keyed, with_headers, stamped_once))
        offset += n
    restored = send_and_restore(batches, limit)
    assert all(b.schema.equals(SCHEMA, check_metadata=True) for b in restored)
    assert pa.Table.from_batches(restored).equals(pa.Table.from_batches(batches))


def test_what_a_response_leaves_out() -> None:
    plain = stored_batch(list(range(10, 20)), keyed=False, with_headers=False, stamped_once=True)
    after = stored_batch(list(range(20, 25)), keyed=False, with_headers=False, stamped_once=True)
    response = plan([plain, after])
    assert response.elision == Elision(offset=True, timestamp=True, key=True, headers=True)
    assert response.first_offset == 10 and response.timestamps == (1_700_000_000_010, 1_700_000_000_020)
    # a gap between batches, or inside one (compaction), keeps the offsets
    assert not plan([plain, stored_batch([26, 27], False, False)]).elision.offset
    assert not plan([stored_batch([1, 2, 4], False, False)]).elision.offset
    # one batch whose records have different timestamps keeps the timestamps
    assert not plan([plain, stored_batch([20, 21], False, False, stamped_once=False)]).elision.timestamp
    # one key or one header anywhere in the response keeps that column
    assert plan([plain, stored_batch([20, 21], True, False, True)]).elision == Elision(True, True, False, True)
    assert plan([plain, stored_batch([20, 21], False, True, True)]).elision == Elision(True, True, True, False)
    assert plan([]).elision == NOTHING
    assert plan([plain, plain.slice(0, 0)]).elision == NOTHING


def test_a_consumer_gets_the_same_records_as_a_plain_fetch_with_fewer_bytes_on_the_wire(
    start_broker: Any, sparklog_connect: str
) -> None:
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic("compact", 1)
    with Producer(sparklog_connect) as producer:
        producer.send_batch("compact", {"value": [b"a%d" % i for i in range(1000)]}, partition=0)
        producer.send_batch("compact", {"value": [b"b", b"c"], "key": [b"k", None]}, partition=0)

    def fetch(offset: int, compact: bool, max_bytes: int = 1) -> pa.Table:
        ticket = {"topic": "compact", "partition": 0, "offset": offset, "max_bytes": max_bytes, "compact": compact}
        client = flight_client(broker.location)
        try:
            return client.do_get(flight.Ticket(wire.encode(ticket))).read_all()
        finally:
            client.close()

    # the keyless first batch alone (max_bytes=1: one batch): offsets, keys and headers left out
    full, compact = fetch(0, False), fetch(0, True)
    assert full.num_rows == compact.num_rows == 1000
    assert [compact.schema.field(c).type for c in ("offset", "timestamp", "key", "headers")] == [pa.null()] * 4
    assert compact.schema.field("value").type == pa.binary()
    assert compact.get_total_buffer_size() < full.get_total_buffer_size() - 1000 * 16
    # with the keyed batch in the response the keys travel; a fetch without "compact" is as before
    both = fetch(0, True, 1 << 20)
    assert both.num_rows == 1002 and both.schema.field("key").type == pa.binary()
    assert fetch(0, False, 1 << 20).schema.equals(full.schema)

    with Consumer("compact", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        got: list[pa.RecordBatch] = []
        while sum(b.num_rows for b in got) < 1002:
            got.extend(consumer.poll_batches(timeout=5.0))
    table = pa.Table.from_batches(got)
    assert table.column("offset").to_pylist() == list(range(1002))
    assert table.column("key").to_pylist() == [None] * 1000 + [b"k", None]
    assert table.column("value").to_pylist() == [b"a%d" % i for i in range(1000)] + [b"b", b"c"]
    assert table.column("headers").null_count == 1002
    assert table.column("timestamp").equals(fetch(0, False, 1 << 20).column("timestamp"))
    assert table.schema.field("offset").type == pa.int64() and table.schema.field("key").type == pa.binary()
