"""Produced record batches as frames: bytes a broker can bound before it decodes them.

Arrow Flight decodes (and decompresses) every record batch of a ``do_put`` stream before the
broker's code sees it, so a small compressed request could make a broker allocate gigabytes. A
produce stream therefore declares an empty schema (:data:`FRAMED`: no column, nothing to decode)
and names the records' schema in its descriptor (``"schema"``: the schema's IPC message, base64);
each batch travels in a Flight message's app metadata as a frame: one encapsulated Arrow IPC
record batch message followed by the batch's JSON metadata (``{}`` when it has none). The broker
reads the message's own metadata (:mod:`sparklog.protocol.ipc_metadata`), refuses a batch that
declares more rows or decoded bytes than the topic allows, and only then decodes it (zero-copy
when uncompressed)."""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.errors import InvalidRecord, InvalidRequest, RecordTooLarge
from sparklog.protocol import wire
from sparklog.protocol.ipc_metadata import DeclaredBatch, declared_batch

FRAMED = pa.schema([])  # what a produce stream declares: its batches travel as frames
SCHEMA_FIELD = "schema"
MAX_SCHEMA_BYTES = 1 << 20


def schema_text(schema: pa.Schema) -> str:
    """A schema as the descriptor's ``"schema"`` field."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_of(request: dict[str, Any]) -> pa.Schema:
    """The records' schema a produce request names (InvalidRequest if missing or unreadable)."""
    text = request.get(SCHEMA_FIELD)
    if not isinstance(text, str) or not text:
        raise InvalidRequest(
            "a produce request must name its records' schema ('schema': the schema's Arrow IPC message, base64) "
            "and send its batches as frames in app metadata (sparklog.protocol.record_frames)"
        )
    if len(text) > MAX_SCHEMA_BYTES:
        raise InvalidRequest(f"the produce request's schema is larger than {MAX_SCHEMA_BYTES} bytes")
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (binascii.Error, ValueError, pa.ArrowException, OSError, EOFError) as exc:  # OSError: another message
        raise InvalidRequest(f"the produce request's 'schema' is not an Arrow schema message: {exc}") from None


def frame(batch: pa.RecordBatch, metadata: dict[str, Any] | None = None) -> pa.Buffer:
    """One batch (uncompressed) and its metadata as one frame."""
    return pa.py_buffer(b"".join((batch.serialize(), wire.encode(metadata or {}))))


def open_produce(
    client: flight.FlightClient,
    command: dict[str, Any],
    schema: pa.Schema,
    options: flight.FlightCallOptions | None = None,
) -> tuple[flight.FlightStreamWriter, flight.FlightMetadataReader]:
    """A ``do_put`` produce stream for batches of ``schema``; write each with :func:`write_frame`."""
    descriptor = flight.FlightDescriptor.for_command(wire.encode({**command, SCHEMA_FIELD: schema_text(schema)}))
    if options is None:
        return client.do_put(descriptor, FRAMED)
    return client.do_put(descriptor, FRAMED, options)


def write_frame(
    writer: flight.FlightStreamWriter, batch: pa.RecordBatch, metadata: dict[str, Any] | None = None
) -> None:
    writer.write_metadata(frame(batch, metadata))


class Frame(NamedTuple):
    """A received frame: its record batch message, not decoded yet, and its metadata."""

    message: pa.ipc.Message
    declared: DeclaredBatch
    metadata: dict[str, Any]

    def check(self, max_bytes: int, max_rows: int) -> None:
        """:class:`RecordTooLarge` if the batch declares more than ``max_bytes`` decoded bytes or
        ``max_rows`` rows."""
        rows, size = self.declared.rows, self.declared.decoded_bytes
        if rows > max_rows:
            raise RecordTooLarge(
                f"record batch of {rows} records is larger than the limit of {max_rows} records a batch"
            )
        if size > max_bytes:
            raise RecordTooLarge(f"record batch of {size} bytes is larger than max.message.bytes={max_bytes}")

    def decode(self, schema: pa.Schema, max_bytes: int, max_rows: int) -> pa.RecordBatch:
        """The batch, once its declared size passed (:meth:`check`), :class:`InvalidRecord` if it
        does not decode."""
        self.check(max_bytes, max_rows)
        try:
            return pa.ipc.read_record_batch(self.message, schema)
        except (pa.ArrowException, ValueError, OSError) as exc:  # OSError: a message of another schema's buffers
            raise InvalidRecord(f"unreadable record batch: {exc}") from None


def read_frame(data: pa.Buffer) -> Frame:
    """A frame as the broker receives it (InvalidRecord or InvalidRequest if it is not one)."""
    source = pa.BufferReader(data)
    try:
        message = pa.ipc.read_message(source)
    except (pa.ArrowException, OSError, ValueError, EOFError) as exc:  # EOFError: an end-of-stream marker
        raise InvalidRecord(f"a produced frame does not start with an Arrow IPC message: {exc}") from None
    declared = declared_batch(message)
    rest = data.slice(source.tell())
    metadata = wire.decode_object(rest, "a produced batch's metadata") if rest.size else {}
    return Frame(message, declared, metadata)


def frames(reader: flight.MetadataRecordBatchReader) -> Any:
    """The frames of a produce stream, in order. A stream that declares columns is refused before
    any of its batches is read (Flight would decode them)."""
    if len(reader.schema):
        raise InvalidRequest(
            "a produce stream must declare an empty schema and send its batches as frames in app metadata "
            "(sparklog.protocol.record_frames); this one declares record batch columns"
        )
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        except pa.ArrowInvalid as exc:
            raise InvalidRecord(f"unreadable produce stream message: {exc}") from None
        if chunk.app_metadata is None or not chunk.app_metadata.size:
            raise InvalidRequest("a produce stream message carries no frame in its app metadata")
        yield read_frame(chunk.app_metadata)
