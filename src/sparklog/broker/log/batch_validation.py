"""What a record batch must be before it is stored, and before a stored one is handed to any reader.

Arrow's readers check only that buffers are long enough for the lengths they declare (``validate()``);
an offsets buffer whose middle entries point far past the data passes, and code that later reads it
(a cast, a concat, a consumer, the log cleaner) reads out of bounds: a segmentation fault, in every
process that reads the batch. So:

- **Produced batches** (:func:`check_produced`) are refused unless their row count and total buffer
  size are within bounds (checked before anything touches the values), no column has a ``large_*``
  type anywhere in its type, and Arrow's *full* validation passes (offsets, lengths, null counts,
  UTF-8 of strings, nested children). Arrow does this in C++: ~2 ns a record for the produce layout.
- **Replicated batches** (:func:`check_replicated`): a follower stores only what it can read back:
  one of the topic's schemas, full validation, and offsets that agree with the batch's header.
- **Stored batches** (:func:`check_stored`) are validated the first time they are decoded in a
  process (a bit flip the CRC missed, a file written by an older version); a failure is
  :class:`CorruptRecord` naming the batch's offsets, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from sparklog.errors import CorruptRecord, InvalidRecord, RecordTooLarge

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sparklog.broker.log.batch_codec import BatchHeader

MAX_BATCH_ROWS = 1 << 20  # records per produced batch (the producer sends 10,000; Spark's Arrow batches as many)

_REFUSED_TYPES = (  # 64-bit offsets, or views: another layout of the same values
    pa.types.is_large_binary,
    pa.types.is_large_string,
    pa.types.is_large_list,
    pa.types.is_list_view,
    pa.types.is_large_list_view,
    pa.types.is_binary_view,
    pa.types.is_string_view,
)


def _large_type_in(type_: pa.DataType) -> pa.DataType | None:
    """The first ``large_*`` or view type inside ``type_`` (itself included), or None."""
    if any(is_refused(type_) for is_refused in _REFUSED_TYPES):
        return type_
    for i in range(type_.num_fields):
        found = _large_type_in(type_.field(i).type)
        if found is not None:
            return found
    if pa.types.is_dictionary(type_):
        return _large_type_in(type_.value_type)
    return None


def check_schema(schema: pa.Schema) -> None:
    """Refuse 64-bit-offset (``large_*``) and view types anywhere: sparklog's wire and segments use
    32-bit offsets (a batch is far below 2 GiB), and these types would make a second stored layout."""
    for field in schema:
        found = _large_type_in(field.type)
        if found is not None:
            raise InvalidRecord(
                f"column '{field.name}' has type {field.type}: {found} is not accepted; "
                "send binary, string and list columns (32-bit offsets)"
            )


def check_produced(batch: pa.RecordBatch, max_message_bytes: int, max_rows: int = MAX_BATCH_ROWS) -> None:
    """Refuse a produced batch that could not be stored and read back safely (see the module docs):
    :class:`RecordTooLarge` over ``max_message_bytes`` (its buffers' total size, as received) or
    ``max_rows`` records; :class:`InvalidRecord` for no records, a ``large_*`` type, or any Arrow
    validation failure. Cheap checks come first: nothing reads the values until the sizes passed."""
    rows = batch.num_rows
    if rows == 0:
        raise InvalidRecord("a record batch must hold at least one record")
    if rows > max_rows:
        raise RecordTooLarge(f"record batch of {rows} records is larger than the limit of {max_rows} records a batch")
    size = batch.get_total_buffer_size()
    if size > max_message_bytes:
        raise RecordTooLarge(f"record batch of {size} bytes is larger than max.message.bytes={max_message_bytes}")
    check_schema(batch.schema)
    try:
        batch.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise InvalidRecord(f"malformed record batch (Arrow validation failed): {exc}") from None


def check_replicated(batch: pa.RecordBatch, header: BatchHeader, schemas: Sequence[pa.Schema]) -> None:
    """Refuse (:class:`InvalidRecord`) a batch copied from the leader unless it is one of the
    topic's ``schemas``, passes full validation, and its offsets agree with ``header``."""
    if not any(batch.schema.equals(s) for s in schemas):
        raise InvalidRecord(f"replicated batch schema {batch.schema} is not a schema of this topic")
    try:
        batch.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise InvalidRecord(f"replicated batch at offset {header.base_offset} is malformed: {exc}") from None
    problem = _offsets_problem(batch, header)
    if problem:
        raise InvalidRecord(f"replicated batch at offset {header.base_offset}: {problem}")


def check_stored(batch: pa.RecordBatch, header: BatchHeader) -> None:
    """Refuse (:class:`CorruptRecord`, naming the offsets) a decoded stored batch that fails full
    validation or whose offsets disagree with its header."""
    try:
        batch.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        raise CorruptRecord(
            f"stored batch at offsets {header.base_offset}..{header.last_offset} is malformed: {exc}"
        ) from None
    problem = _offsets_problem(batch, header)
    if problem:
        raise CorruptRecord(f"stored batch at offsets {header.base_offset}..{header.last_offset}: {problem}")


def _offsets_problem(batch: pa.RecordBatch, header: BatchHeader) -> str | None:
    """What is wrong with a stored batch's ``offset`` column given its header (None if nothing):
    as many rows as the header counts, no nulls, strictly increasing (compaction leaves gaps), from
    the header's base offset or later to exactly its last offset."""
    if batch.num_rows != header.count or batch.num_rows == 0:
        return f"{batch.num_rows} records, the header says {header.count}"
    column = batch.column(0)
    if column.type != pa.int64() or column.null_count:
        return "the offset column is not a non-null int64 column"
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)
    if offsets[0] < header.base_offset or offsets[-1] != header.last_offset:
        stated = f"{header.base_offset}..{header.last_offset}"
        return f"offsets {offsets[0]}..{offsets[-1]} disagree with the header's {stated}"
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        return "offsets do not increase"
    if batch.column(1).null_count:
        return "records without a timestamp"
    return None
