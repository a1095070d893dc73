"""A raw Kafka-protocol connection for tests that play a client nobody should trust: the fuzzer's
(:mod:`sparklog.fuzz.kafka_wire`), under the name the tests import."""

from __future__ import annotations

from sparklog.fuzz.kafka_wire import KafkaWire, kafka_batch

__all__ = ["KafkaWire", "kafka_batch"]
