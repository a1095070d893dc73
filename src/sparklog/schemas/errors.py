"""Errors of typed topics' schemas.

They extend :class:`sparklog.errors.InvalidRequest` (so code that catches request errors catches them)
and carry their own wire codes. :func:`sparklog.errors.error_from_code` finds a subclass by walking
``SparklogError.__subclasses__()``, so a client rebuilds these types only once this module has been
imported (``import sparklog.schemas`` does it); otherwise it gets a plain ``SparklogError`` with the
same message. Bad *records* (as opposed to bad schemas) raise :class:`sparklog.errors.InvalidRecord`.
"""

from __future__ import annotations

from sparklog.errors import InvalidRequest


class SchemaError(InvalidRequest):
    """An Avro schema is malformed, or cannot be mapped to Arrow (refused when it is declared)."""

    code = "SCHEMA_ERROR"


class IncompatibleSchema(SchemaError):
    """A new schema version breaks the topic's ``schema.compatibility`` with the latest version."""

    code = "INCOMPATIBLE_SCHEMA"

    def __init__(self, message: str, problems: list | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class UnknownSchema(SchemaError):
    """The topic has no schema (it is untyped), or no such version or fingerprint."""

    code = "UNKNOWN_SCHEMA"
