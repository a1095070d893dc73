"""sparklog: a Kafka-style commit log on Arrow IPC that Spark reads and writes natively.

``from sparklog import Producer, Consumer, Admin``: the clients are imported on first use, so that
light entry points (the CLI's argument parsing, ``python -m sparklog.broker``) start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Admin": "sparklog.client.admin",
    "Consumer": "sparklog.client.consumer",
    "Record": "sparklog.client.consumer",
    "Producer": "sparklog.client.producer",
    "RecordMetadata": "sparklog.client.producer",
    "BatchMetadata": "sparklog.client.producer",
}
__all__ = ["Admin", "BatchMetadata", "Consumer", "Producer", "Record", "RecordMetadata"]

if TYPE_CHECKING:
    from sparklog.client.admin import Admin
    from sparklog.client.consumer import Consumer, Record
    from sparklog.client.producer import BatchMetadata, Producer, RecordMetadata


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sparklog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
