"""sparklog: a Kafka-style commit log on Arrow IPC that Spark reads and writes natively."""

from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer, Record
from sparklog.client.producer import BatchMetadata, Producer, RecordMetadata

__version__ = "0.1.0"
__all__ = ["Admin", "BatchMetadata", "Consumer", "Producer", "Record", "RecordMetadata"]
