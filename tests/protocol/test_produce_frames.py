"""Produced record batches as frames (:mod:`sparklog.protocol.record_frames`).

- What a record batch message declares (:mod:`sparklog.protocol.ipc_metadata`: rows, decoded
  bytes) agrees with what pyarrow decodes from it, uncompressed, lz4 and zstd, for batches of
  every shape; metadata that is garbage or cut short is an :class:`InvalidRecord`, never another
  exception.
- On a real broker process: a compression bomb (a zstd frame of a few KB declaring 200 MiB) is
  refused with :class:`RecordTooLarge` from what it declares, and the broker's memory does not grow
  by what it would decode to; the same bomb sent the old way (Flight record batches, which Flight
  decodes before the broker's code sees them) is refused from the stream's declared schema before
  Flight reads a batch, without growing the broker either; the broker keeps serving.
- A legitimate compressed frame is stored and reads back identical.

The figures (RSS before, after and at its peak, per attempt) are printed: ``pytest -s``. The
broker is shared by the module and nothing here makes its memory pool hold more than ~20 MB it
could reuse, so a bomb it decoded would show (a broker of the produce wire before frames grew by
201 MB at the first such Flight batch, and kept it).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_helpers import BrokerProcess, flight_client, ping, raw_produce, read_partition, running_broker
from sparklog import Admin, Consumer, Producer
from sparklog.broker.log.batch_validation import MAX_BATCH_ROWS
from sparklog.errors import InvalidRecord, InvalidRequest, RecordTooLarge, SparklogError, error_from_code
from sparklog.protocol import wire
from sparklog.protocol.ipc_metadata import declared_batch, declared_by
from sparklog.protocol.record_frames import (
    FRAMED,
    SCHEMA_FIELD,
    frame,
    frames,
    open_produce,
    read_frame,
    schema_text,
)
from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE, now_ms, wire_schema

MIB = 1 << 20
COMPRESSIONS = [None, "lz4", "zstd"]
DEFAULT_MAX_MESSAGE_BYTES = 16 * MIB  # the default max.message.bytes (sparklog.config)
BOMB_ROWS = 200  # values of 1 MiB of zeros: 200 MiB decoded, a few KB compressed
GROWTH_LIMIT_MB = 50
ATTEMPTS = 3


# ----------------------------------------------------------------------------------------- helpers
def message(batch: pa.RecordBatch, compression: str | None) -> pa.ipc.Message:
    """The batch's record batch message as Arrow's IPC stream writer makes it with ``compression``."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    messages = pa.ipc.MessageReader.open_stream(sink.getvalue())
    messages.read_next_message()  # the schema's
    return messages.read_next_message()


def compressed_frame(batch: pa.RecordBatch, compression: str | None, metadata: dict[str, Any] | None = None) -> bytes:
    """A frame whose record batch message is compressed, then the batch's metadata."""
    return message(batch, compression).serialize().to_pybytes() + wire.encode(metadata or {})


def zeros(rows: int, size: int = MIB) -> pa.Array:
    """``rows`` binary values of ``size`` zero bytes (their data one zero-filled buffer: pages the
    kernel maps lazily, so building it costs this process little memory)."""
    offsets = np.arange(rows + 1, dtype=np.int64) * size
    data = pa.py_buffer(bytes(rows * size))
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets.astype(np.int32).tobytes()), data])


def wire_records(rows: int, seed: int = 0) -> pa.RecordBatch:
    """A batch of the wire schema with every column set: keys (some null), values (some
    compressible, some random), headers (some null) and timestamps."""
    rng = np.random.default_rng(seed)
    now = now_ms()
    values = [
        (b"value-%d " % i) * int(rng.integers(1, 40)) if i % 3 else rng.bytes(int(rng.integers(0, 300)))
        for i in range(rows)
    ]
    return pa.RecordBatch.from_pydict(
        {
            "timestamp": pa.array([now - i for i in range(rows)], pa.int64()).cast(TIMESTAMP_TYPE),
            "key": pa.array([None if i % 7 == 0 else b"key-%d" % (i % 50) for i in range(rows)], pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(
                [
                    None if i % 4 else [{"key": f"h{i}", "value": b"%d" % i}, {"key": "é", "value": None}]
                    for i in range(rows)
                ],
                HEADER_TYPE,
            ),
        },
        schema=wire_schema(),
    )


# ----------------------------------------------------------------------------- (a) declared sizes
def _shapes() -> dict[str, pa.RecordBatch]:
    rng = np.random.default_rng(7)
    struct = pa.array(
        [{"a": i, "b": {"c": f"x{i}", "d": [i, None]}} if i % 5 else None for i in range(40)],
        pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.string()), ("d", pa.list_(pa.int32()))]))]),
    )
    wide = pa.record_batch(
        {
            "i": pa.array(np.arange(300, dtype=np.int64)),
            "s": pa.array([f"row {i} " * (i % 9) for i in range(300)]),
            "l": pa.array([list(range(i % 6)) if i % 11 else None for i in range(300)], pa.list_(pa.int64())),
        }
    )
    return {
        "binary": pa.record_batch({"value": pa.array([b"a", b"bcd", None, b"", b"\x00" * 100], pa.binary())}),
        "strings": pa.record_batch({"s": pa.array(["x", "é" * 10, None, "", "tail"])}),
        "empty-strings": pa.record_batch({"s": pa.array([""] * 9), "b": pa.array([b""] * 9, pa.binary())}),
        "ints": pa.record_batch({"i": pa.array(np.arange(1000, dtype=np.int64))}),
        "ints-with-nulls": pa.record_batch({"i": pa.array([None if i % 3 else i for i in range(100)], pa.int32())}),
        "bools": pa.record_batch({"b": pa.array([True, False, None] * 33)}),
        "floats": pa.record_batch({"f": pa.array(rng.random(257))}),
        "nested-struct": pa.record_batch({"s": struct}),
        "list": pa.record_batch({"l": pa.array([[1, 2], [], None, [3]], pa.list_(pa.int64()))}),
        "null-typed": pa.record_batch({"n": pa.nulls(12), "m": pa.nulls(12)}),
        "all-null-binary": pa.record_batch({"value": pa.array([None] * 17, pa.binary())}),
        "no-rows": pa.record_batch({"value": pa.array([], pa.binary()), "i": pa.array([], pa.int64())}),
        "wire": wire_records(200),
        "random-values": pa.record_batch({"value": pa.array([rng.bytes(4096) for _ in range(16)], pa.binary())}),
        "zeros": pa.record_batch({"value": zeros(4, 64 << 10)}),
        "sliced": wide.slice(17, 123),
        "sliced-to-one": wide.slice(299, 1),
        "sliced-to-none": wide.slice(40, 0),
        "sliced-wire": wire_records(100).slice(33, 50),
        "sliced-struct": pa.record_batch({"s": struct}).slice(3, 20),
    }


SHAPES = _shapes()


def _assert_agrees(batch: pa.RecordBatch, compression: str | None) -> None:
    encoded = message(batch, compression)
    declared = declared_batch(encoded)
    decoded = pa.ipc.read_record_batch(encoded, batch.schema)
    assert decoded.equals(batch)
    assert declared.rows == batch.num_rows == decoded.num_rows
    assert declared.decoded_bytes == decoded.get_total_buffer_size(), (declared, decoded.get_total_buffer_size())
    assert declared.compressed == (compression is not None)
    received = read_frame(pa.py_buffer(compressed_frame(batch, compression, {"sequence": 5})))
    assert received.declared == declared and received.metadata == {"sequence": 5}
    assert received.decode(batch.schema, declared.decoded_bytes, declared.rows).equals(batch)


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c or "uncompressed")
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_declared_rows_and_bytes_agree_with_pyarrow(shape: str, compression: str | None) -> None:
    _assert_agrees(SHAPES[shape], compression)


def last_buffer_stored_raw(batch: pa.RecordBatch) -> pa.ipc.Message:
    """The batch's zstd message with its last buffer (the last column's data) stored uncompressed, as
    Arrow's format allows (length prefix -1) but pyarrow's writer never does: the buffer's entry
    and the body length patched in the FlatBuffer metadata (the same size: no table moves)."""
    encoded = message(batch, "zstd")
    metadata = bytearray(encoded.metadata.to_pybytes())
    body = encoded.body.to_pybytes()
    raw = batch.column(batch.num_columns - 1).buffers()[-1].to_pybytes()
    entries = [  # Buffer structs (offset, length) of a buffer whose prefix is the raw data's length
        at
        for at in range(0, len(metadata) - 15, 8)
        if (lambda o, n: o >= 0 and n > 8 and o + n <= len(body) and struct.unpack_from("<q", body, o)[0] == len(raw))(
            *struct.unpack_from("<qq", metadata, at)
        )
    ]
    offset, _ = struct.unpack_from("<qq", metadata, entries[-1])
    stored = body[:offset] + struct.pack("<q", -1) + raw
    stored += bytes(-len(stored) % 8)
    struct.pack_into("<qq", metadata, entries[-1], offset, 8 + len(raw))
    (body_length,) = [
        at for at in range(0, len(metadata) - 7, 4) if struct.unpack_from("<q", metadata, at)[0] == len(body)
    ]
    struct.pack_into("<q", metadata, body_length, len(stored))
    metadata += bytes(-len(metadata) % 8)
    return pa.ipc.read_message(pa.py_buffer(struct.pack("<Ii", 0xFFFFFFFF, len(metadata)) + bytes(metadata) + stored))


def test_a_buffer_stored_uncompressed_in_a_compressed_message_counts_its_own_length() -> None:
    batch = pa.record_batch({"value": pa.array([np.random.default_rng(3).bytes(1000) for _ in range(5)], pa.binary())})
    encoded = last_buffer_stored_raw(batch)
    assert -1 in np.frombuffer(encoded.body, dtype="<i8")
    declared = declared_batch(encoded)
    decoded = pa.ipc.read_record_batch(encoded, batch.schema)
    assert decoded.equals(batch)
    assert declared.compressed and declared.rows == 5
    assert declared.decoded_bytes == decoded.get_total_buffer_size()


def _column(kind: str, rows: int) -> st.SearchStrategy[pa.Array]:
    def nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
        return st.lists(st.one_of(st.none(), values), min_size=rows, max_size=rows)

    if kind == "binary":
        return nullable(st.binary(max_size=40)).map(lambda v: pa.array(v, pa.binary()))
    if kind == "string":
        return nullable(st.text(max_size=20)).map(lambda v: pa.array(v, pa.string()))
    if kind == "int64":
        return nullable(st.integers(-(2**63), 2**63 - 1)).map(lambda v: pa.array(v, pa.int64()))
    if kind == "int8":
        return nullable(st.integers(-128, 127)).map(lambda v: pa.array(v, pa.int8()))
    if kind == "bool":
        return nullable(st.booleans()).map(lambda v: pa.array(v, pa.bool_()))
    if kind == "list":
        return nullable(st.lists(st.one_of(st.none(), st.integers(0, 9)), max_size=5)).map(
            lambda v: pa.array(v, pa.list_(pa.int16()))
        )
    if kind == "struct":
        item = st.fixed_dictionaries(
            {"a": st.one_of(st.none(), st.integers(0, 99)), "b": st.one_of(st.none(), st.text(max_size=6))}
        )
        return nullable(item).map(lambda v: pa.array(v, pa.struct([("a", pa.int32()), ("b", pa.string())])))
    if kind == "headers":
        entry = st.fixed_dictionaries(
            {"key": st.text(max_size=5), "value": st.one_of(st.none(), st.binary(max_size=8))}
        )
        return nullable(st.lists(entry, max_size=3)).map(lambda v: pa.array(v, HEADER_TYPE))
    return st.just(pa.nulls(rows))


KINDS = ["binary", "string", "int64", "int8", "bool", "list", "struct", "headers", "null"]


@st.composite
def record_batches(draw: st.DrawFn) -> pa.RecordBatch:
    rows = draw(st.integers(0, 40))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
    batch = pa.record_batch({f"c{i}": draw(_column(kind, rows)) for i, kind in enumerate(kinds)})
    if rows and draw(st.booleans()):
        start = draw(st.integers(0, rows - 1))
        batch = batch.slice(start, draw(st.integers(0, rows - start)))
    return batch


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=record_batches(), compression=st.sampled_from(COMPRESSIONS))
def test_declared_sizes_agree_with_pyarrow_for_drawn_batches(batch: pa.RecordBatch, compression: str | None) -> None:
    _assert_agrees(batch, compression)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=600))
def test_garbage_metadata_is_an_invalid_record(data: bytes) -> None:
    body = message(SHAPES["wire"], "zstd").body
    try:
        declared = declared_by(data, body)
    except InvalidRecord:
        return
    assert declared.rows >= 0 and declared.decoded_bytes >= 0


@settings(max_examples=500, deadline=None)
@given(
    shape=st.sampled_from(sorted(SHAPES)),
    compression=st.sampled_from(COMPRESSIONS),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_mutated_or_truncated_metadata_is_an_invalid_record(
    shape: str, compression: str | None, flips: list[tuple[int, int]], cut: int | None
) -> None:
    """The FlatBuffer metadata of a real message with bytes changed or cut off: read directly (the
    runtime does not verify it) and as a whole frame (pyarrow verifies it first)."""
    encoded = message(SHAPES[shape], compression)
    metadata = bytearray(encoded.metadata.to_pybytes())
    for at, value in flips:
        metadata[at % len(metadata)] = value
    if cut is not None:
        metadata = metadata[: cut % (len(metadata) + 1)]
    try:
        declared = declared_by(bytes(metadata), encoded.body)
        assert declared.rows >= 0 and declared.decoded_bytes >= 0
    except InvalidRecord:
        pass
    whole = bytearray(encoded.serialize().to_pybytes())
    for at, value in flips:
        whole[at % len(whole)] = value
    if cut is not None:
        whole = whole[: cut % (len(whole) + 1)]
    try:
        received = read_frame(pa.py_buffer(bytes(whole)))
    except (InvalidRecord, InvalidRequest):  # InvalidRequest: what follows a shortened message is no JSON
        return
    with contextlib.suppress(InvalidRecord, RecordTooLarge):
        received.decode(SHAPES[shape].schema, DEFAULT_MAX_MESSAGE_BYTES, MAX_BATCH_ROWS)


def test_a_frame_over_the_limit_is_refused_before_anything_is_decompressed() -> None:
    batch = pa.record_batch({"value": zeros(40)})  # 40 MiB of zeros, a few KB with zstd
    data = compressed_frame(batch, "zstd")
    assert len(data) < 64 << 10
    received = read_frame(pa.py_buffer(data))
    assert received.declared.rows == 40 and received.declared.decoded_bytes > 40 * MIB
    allocated = pa.total_allocated_bytes()
    with pytest.raises(RecordTooLarge, match=f"max.message.bytes={DEFAULT_MAX_MESSAGE_BYTES}"):
        received.decode(batch.schema, DEFAULT_MAX_MESSAGE_BYTES, MAX_BATCH_ROWS)
    assert pa.total_allocated_bytes() - allocated < MIB
    with pytest.raises(RecordTooLarge, match="records a batch"):
        received.decode(batch.schema, 1 << 40, 39)


def test_a_stream_declaring_columns_is_refused_before_a_batch_is_read() -> None:
    class Declaring:
        schema = wire_schema()

        def read_chunk(self) -> Any:
            raise AssertionError("a batch of a stream declaring columns was read")

    with pytest.raises(InvalidRequest, match="frames"):
        next(frames(Declaring()))

    class Framed:
        schema = FRAMED

        def __init__(self) -> None:
            self.chunks = [frame(SHAPES["wire"], {"sequence": 1})]

        def read_chunk(self) -> Any:
            if not self.chunks:
                raise StopIteration
            return _Chunk(self.chunks.pop(0))

    (received,) = list(frames(Framed()))
    assert received.metadata == {"sequence": 1} and received.declared.rows == SHAPES["wire"].num_rows


class _Chunk:
    def __init__(self, app_metadata: pa.Buffer) -> None:
        self.data = None
        self.app_metadata = app_metadata


# ------------------------------------------------------------------------ (b) the bomb, on a broker
TOPIC, SMALL = "frames", "frames-small"


class Served:
    """A broker process and the records it acknowledged (each read back after every attack)."""

    def __init__(self, broker: BrokerProcess, connect: str) -> None:
        self.broker = broker
        self.connect = connect
        self.location = broker.location
        self.stored: list[bytes] = []

    def produce(self, values: list[bytes]) -> None:
        batch = pa.record_batch({"value": pa.array(values, pa.binary())})
        (ack,) = raw_produce(self.location, produce_command(), [batch])
        assert ack["base_offset"] == len(self.stored)
        self.stored += values

    def assert_serving(self, tag: str) -> None:
        """Alive, everything acknowledged reads back, and a Producer and a Consumer still work."""
        assert self.broker.alive, f"the broker died:\n{self.broker.output()[-3000:]}"
        assert ping(self.location) == self.broker.broker_id
        assert [r["value"] for r in read_partition(self.location, TOPIC, 0)] == self.stored
        value = f"after-{tag}".encode()
        with Producer(zookeeper=self.connect, acks="all") as producer:
            (meta,) = producer.send_batch(TOPIC, {"value": [value]}, partition=0)
        assert meta.base_offset == len(self.stored)
        self.stored.append(value)
        with Consumer(TOPIC, zookeeper=self.connect, auto_offset_reset="earliest", partitions=[0]) as consumer:
            got: list[bytes] = []
            for _ in range(40):
                got += [r.value for r in consumer.poll(timeout=0.5)]
                if len(got) >= len(self.stored):
                    break
        assert got == self.stored

    def memory_mb(self) -> tuple[float, float]:
        """The broker's resident memory now and at its peak since :meth:`reset_peak` (MB)."""
        assert self.broker.proc is not None
        status = Path(f"/proc/{self.broker.proc.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def reset_peak(self) -> None:
        assert self.broker.proc is not None
        Path(f"/proc/{self.broker.proc.pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS


def produce_command(topic: str = TOPIC) -> dict[str, Any]:
    return {"type": wire.PRODUCE, "topic": topic, "partition": 0, "acks": "1"}


def many_command() -> dict[str, Any]:
    return {"type": wire.PRODUCE_MANY, "acks": "1"}


MANY_META = {"t": TOPIC, "p": 0, "end": True}


@pytest.fixture(scope="module")
def served(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running_broker(zookeeper.connect_string, tmp_path_factory.mktemp("frames")) as (broker, connect):
        with Admin(connect) as admin:
            admin.create_topic(TOPIC, 1)  # max.message.bytes left at its default (16 MiB)
            admin.create_topic(SMALL, 1, configs={"max.message.bytes": "4096"})
        served = Served(broker, connect)
        served.produce([b"before-%d" % i for i in range(20)])
        yield served


@pytest.fixture(scope="module")
def bomb() -> pa.RecordBatch:
    """200 values of 1 MiB of zeros: 200 MiB decoded."""
    return pa.record_batch({"value": zeros(BOMB_ROWS)})


def _answer_error(reader: Any, writer: Any, many: bool) -> SparklogError:
    """The typed error of a produce request: in its answer (``produce_many``: a batch's own error)
    or ending its stream."""
    try:
        answer = reader.read()
        if answer is not None:
            decoded = wire.decode(answer)
            result = decoded["r"][0] if many else decoded
            assert "e" in result, f"the broker acknowledged the bomb: {decoded}"
            return error_from_code(result["e"], result["m"])
        writer.close()
    except flight.FlightError as exc:
        return wire.from_flight_error(exc, "test")
    raise AssertionError("the broker ended the stream without an answer or an error")


def _attempts(served: Served, attack: Any, what: str) -> list[SparklogError]:
    """Run ``attack`` (one produce request, returning its error) :data:`ATTEMPTS` times, measuring
    the broker's memory around each; fails if it grew by :data:`GROWTH_LIMIT_MB` or more."""
    errors, figures = [], []
    for attempt in range(ATTEMPTS):
        served.reset_peak()
        before, _ = served.memory_mb()
        errors.append(attack())
        after, peak = served.memory_mb()
        figures.append((attempt + 1, before, after, peak))
    for attempt, before, after, peak in figures:
        print(
            f"{what}, attempt {attempt}: RSS before {before:.1f} MB, after {after:.1f} MB "
            f"(growth {after - before:+.1f}), peak {peak:.1f} MB (growth {peak - before:+.1f})"
        )
    for attempt, before, after, peak in figures:
        assert after - before < GROWTH_LIMIT_MB, f"{what}, attempt {attempt}: RSS grew {after - before:.1f} MB"
        assert peak - before < GROWTH_LIMIT_MB, f"{what}, attempt {attempt}: peak RSS grew {peak - before:.1f} MB"
    return errors


@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_a_compressed_frame_declaring_200_mib_is_refused_without_growing_the_broker(
    served: Served, bomb: pa.RecordBatch, many: bool
) -> None:
    data = pa.py_buffer(compressed_frame(bomb, "zstd", MANY_META if many else None))
    assert data.size < 256 << 10, data.size  # what travels
    declared = read_frame(data).declared
    assert declared.compressed and declared.decoded_bytes > BOMB_ROWS * MIB > DEFAULT_MAX_MESSAGE_BYTES

    def attack() -> SparklogError:
        client = flight_client(served.location)
        try:
            command = many_command() if many else produce_command()
            writer, reader = open_produce(client, command, bomb.schema, flight.FlightCallOptions(timeout=60))
            writer.write_metadata(data)
            return _answer_error(reader, writer, many)
        finally:
            client.close()

    errors = _attempts(
        served, attack, f"zstd frame declaring {declared.decoded_bytes} bytes ({'produce_many' if many else 'produce'})"
    )
    for error in errors:
        assert isinstance(error, RecordTooLarge), repr(error)
        assert f"max.message.bytes={DEFAULT_MAX_MESSAGE_BYTES}" in str(error), str(error)
    served.assert_serving(f"frame-bomb-{many}")


@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_the_bomb_as_flight_record_batches_is_refused_before_flight_decodes_it(
    served: Served, bomb: pa.RecordBatch, many: bool
) -> None:
    """The old produce wire: the records' schema declared on the stream, the bomb a Flight record
    batch compressed by Flight's writer. Flight's reader would decompress it into 200 MiB as soon as
    the broker read it; the broker refuses the stream from its declared schema first."""
    options = flight.FlightCallOptions(timeout=60, write_options=pa.ipc.IpcWriteOptions(compression="zstd"))
    command = {**(many_command() if many else produce_command()), SCHEMA_FIELD: schema_text(bomb.schema)}

    def attack() -> SparklogError:
        client = flight_client(served.location)
        try:
            descriptor = flight.FlightDescriptor.for_command(wire.encode(command))
            try:
                writer, reader = client.do_put(descriptor, bomb.schema, options)
                writer.write_with_metadata(bomb, pa.py_buffer(wire.encode(MANY_META)))
            except flight.FlightError as exc:  # the broker already refused the stream
                return wire.from_flight_error(exc, "test")
            return _answer_error(reader, writer, many)
        finally:
            client.close()

    errors = _attempts(served, attack, f"Flight record batch stream, zstd ({'produce_many' if many else 'produce'})")
    for error in errors:
        assert isinstance(error, InvalidRequest), repr(error)
        assert "frames" in str(error), str(error)
    served.assert_serving(f"flight-bomb-{many}")


def test_the_limit_is_on_the_decoded_size_not_the_compressed_one(served: Served) -> None:
    """A topic with ``max.message.bytes=4096``: 64 KiB of zeros compress to far less than that, and
    are refused all the same; what decodes under the limit is stored."""
    batch = pa.record_batch({"value": zeros(1, 64 << 10)})
    data = compressed_frame(batch, "zstd")
    assert len(data) < 4096
    client = flight_client(served.location)
    try:
        writer, reader = open_produce(
            client, produce_command(SMALL), batch.schema, flight.FlightCallOptions(timeout=30)
        )
        writer.write_metadata(pa.py_buffer(data))
        error = _answer_error(reader, writer, False)
    finally:
        client.close()
    assert isinstance(error, RecordTooLarge) and "max.message.bytes=4096" in str(error), repr(error)
    small = pa.record_batch({"value": zeros(1, 2048)})
    (ack,) = raw_produce(served.location, produce_command(SMALL), [small])
    assert ack["count"] == 1
    assert [r["value"] for r in read_partition(served.location, SMALL, 0)] == [bytes(2048)]


# -------------------------------------------------------------- (c) legitimate compressed frames
@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_a_compressed_frame_under_the_limit_is_stored_and_reads_back_identical(
    served: Served, compression: str, many: bool
) -> None:
    batch = wire_records(500, seed=len(served.stored))
    data = compressed_frame(batch, compression, MANY_META if many else None)
    declared = read_frame(pa.py_buffer(data)).declared
    assert declared.compressed and declared.decoded_bytes == batch.get_total_buffer_size()
    assert len(data) < declared.decoded_bytes  # it travelled compressed
    client = flight_client(served.location)
    try:
        writer, reader = open_produce(client, many_command() if many else produce_command(), batch.schema)
        writer.write_metadata(pa.py_buffer(data))
        answer = wire.decode(reader.read())
        writer.done_writing()
        writer.close()
    finally:
        client.close()
    base, last = (answer["r"][0]["b"], answer["r"][0]["l"]) if many else (answer["base_offset"], answer["last_offset"])
    assert (base, last) == (len(served.stored), len(served.stored) + 499)
    stored = read_partition(served.location, TOPIC, 0)[base:]
    assert [r["offset"] for r in stored] == list(range(base, last + 1))
    assert [{k: v for k, v in r.items() if k != "offset"} for r in stored] == batch.to_pylist()
    served.stored += batch.column("value").to_pylist()
    served.assert_serving(f"compressed-{compression}-{many}")


def test_a_compressed_frame_of_15_mib_decoded_is_stored(served: Served) -> None:
    """Close under the default limit: declared 15 MiB (and a little), a few KB on the wire."""
    batch = pa.record_batch({"value": zeros(15)})
    data = compressed_frame(batch, "zstd")
    assert len(data) < 64 << 10 and read_frame(pa.py_buffer(data)).declared.decoded_bytes < DEFAULT_MAX_MESSAGE_BYTES
    served.reset_peak()
    before, _ = served.memory_mb()
    client = flight_client(served.location)
    try:
        writer, reader = open_produce(client, produce_command(), batch.schema)
        writer.write_metadata(pa.py_buffer(data))
        ack = wire.decode(reader.read())
        writer.done_writing()
        writer.close()
    finally:
        client.close()
    after, peak = served.memory_mb()
    # the gauge of the bomb tests, when the broker does decompress what it was sent
    print(
        f"accepted zstd frame of 15 MiB decoded: RSS before {before:.1f} MB, after {after:.1f} MB, peak {peak:.1f} MB"
    )
    assert (ack["base_offset"], ack["count"]) == (len(served.stored), 15)
    served.stored += [bytes(MIB)] * 15
    served.assert_serving("fifteen-mib")
