"""sparklog: a Kafka-style distributed commit log on Arrow IPC that Spark reads and writes natively."""

__version__ = "0.1.0"
