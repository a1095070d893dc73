"""What the conversions of typed values (:mod:`.codec`, :mod:`.conformance`, :mod:`.evolution`,
:mod:`.pylist`, :mod:`.fastavro_codec`) need of a value schema: its Arrow mapping, its fingerprint,
its fastavro form and a label for messages. :class:`~sparklog.schemas.value_schema.ValueSchema` is
the one implementation; it offers the conversions as methods, so the dependency runs one way:
``value_schema`` imports the conversions, the conversions know only this view."""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa

from sparklog.schemas.avro_arrow import Node


class SchemaView(Protocol):
    @property
    def tree(self) -> Node:
        """The schema mapped to Arrow, node by node."""
        ...

    @property
    def fingerprint(self) -> bytes:
        """CRC-64-AVRO of the canonical form (8 bytes, little-endian): what single-object framing names."""
        ...

    @property
    def arrow_type(self) -> pa.StructType: ...

    @property
    def physical_avro(self) -> Any:
        """The parsed schema without logical types (what fastavro is given)."""
        ...

    @property
    def label(self) -> str:
        """How messages name the schema (``version 3 of topic 'orders'``)."""
        ...

    def same_as(self, other: Any) -> bool:
        """The same schema, whatever the formatting."""
        ...
