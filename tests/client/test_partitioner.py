"""Key placement compatible with Kafka: murmur2 exactly as Kafka's ``Utils.murmur2`` /
``BuiltInPartitioner`` (column and single key, against Kafka's published values and an independent
transcription of its Java), the default for new topics; topics without a ``partitioner`` config
(created before) keep FNV-1a; a client setting overrides; ``topics describe`` shows which."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from typing import Any

import confluent_kafka
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_work import python_lines_per_record
from sparklog import Admin, Consumer, Producer
from sparklog.cli.main import main as cli_main
from sparklog.client.fnv1a import fnv1a, fnv1a_keys
from sparklog.client.murmur2 import murmur2, murmur2_keys, murmur2_partition, murmur2_partitions
from sparklog.client.partitioner import partition_for_key, partitions_for_keys
from sparklog.config import TopicConfig
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import InvalidConfig
from sparklog.partitioner_names import partitioner_name

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


# ------------------------------------------------------------------ Kafka's Java, transcribed
def _int(x: int) -> int:
    """Java int arithmetic: wrap to a signed 32-bit value."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _ushr(x: int, n: int) -> int:
    """Java's ``>>>`` on an int."""
    return (x & 0xFFFFFFFF) >> n


def _signed_byte(b: int) -> int:
    return b - 256 if b > 127 else b


def java_murmur2(key: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2``, line by line, on Java's signed bytes."""
    data = [_signed_byte(b) for b in key]
    length = len(data)
    seed = _int(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _int(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = _int(
            (data[i4 + 0] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _int(k * m)
        k = _int(k ^ _ushr(k, r))
        k = _int(k * m)
        h = _int(h * m)
        h = _int(h ^ k)
    rest = length % 4
    if rest == 3:  # the switch falls through
        h = _int(h ^ ((data[(length & ~3) + 2] & 0xFF) << 16))
    if rest >= 2:
        h = _int(h ^ ((data[(length & ~3) + 1] & 0xFF) << 8))
    if rest >= 1:
        h = _int(h ^ (data[length & ~3] & 0xFF))
        h = _int(h * m)
    h = _int(h ^ _ushr(h, 13))
    h = _int(h * m)
    h = _int(h ^ _ushr(h, 15))
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """``BuiltInPartitioner.partitionForKey``: ``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def _random_keys(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 41))) for _ in range(count)]
    return keys + [b"", b"\x80", b"\xff\xff\xff", b"\xff" * 4, b"\x7f\x80\x81\xfe\xff", "ключ-é".encode()]


# ------------------------------------------------------------------ the hash itself
def test_murmur2_gives_kafkas_published_values() -> None:
    for key, expected in KAFKA_MURMUR2.items():
        assert java_murmur2(key) == expected  # the transcription is right ...
        assert murmur2(key) == expected  # ... and so are ours
    column = murmur2_keys(pa.array(list(KAFKA_MURMUR2), pa.binary()))
    assert column.view(np.int32).tolist() == list(KAFKA_MURMUR2.values())


def test_murmur2_column_and_single_key_equal_kafkas_java() -> None:
    keys = _random_keys(3000)
    expected = [java_murmur2(k) for k in keys]
    assert [murmur2(k) for k in keys] == expected
    assert murmur2_keys(pa.array(keys, pa.binary())).view(np.int32).tolist() == expected
    for partitions in (1, 3, 7, 12, 100):
        placed = [java_partition(k, partitions) for k in keys]
        assert [murmur2_partition(k, partitions) for k in keys] == placed
        assert murmur2_partitions(pa.array(keys, pa.binary()), partitions).tolist() == placed
        assert partitions_for_keys(pa.array(keys, pa.binary()), partitions, "murmur2").tolist() == placed


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(max_size=70)), max_size=40),
    partitions=st.integers(min_value=1, max_value=10_000),
    start=st.integers(min_value=0, max_value=5),
)
def test_murmur2_column_equals_the_java_for_any_keys(keys: list[bytes | None], partitions: int, start: int) -> None:
    """Any keys (nulls among them, the column sliced): the column's partitions are the Java's for
    every non-null key, and the single-key function agrees."""
    column = pa.array([b"pad"] * start + keys, pa.binary()).slice(start)
    placed = partitions_for_keys(column, partitions).tolist()
    for key, partition in zip(keys, placed, strict=True):
        if key is not None:
            assert partition == java_partition(key, partitions) == partition_for_key(key, partitions)


def test_murmur2_column_of_any_layout() -> None:
    """Sliced arrays, null keys, strings, large binaries and chunked columns hash like plain keys;
    keys all of one length (no masking) and of mixed lengths agree."""
    keys = _random_keys(500, seed=11)
    full = pa.array(keys, pa.binary())
    sliced = full.slice(17, 300)
    assert murmur2_keys(sliced).view(np.int32).tolist() == [java_murmur2(k) for k in keys[17:317]]
    with_nulls = pa.array([None if i % 5 == 0 else k for i, k in enumerate(keys)], pa.binary())
    got = murmur2_keys(with_nulls)
    for i, k in enumerate(keys):
        if i % 5:
            assert int(got[i].view(np.int32)) == java_murmur2(k)
        else:
            assert got[i] == 0
    words = [f"user-{i}" for i in range(200)]
    strings = murmur2_keys(pa.array(words, pa.string())).view(np.int32).tolist()
    assert strings == [java_murmur2(w.encode()) for w in words]
    large = murmur2_keys(pa.array(keys, pa.large_binary())).view(np.int32).tolist()
    assert large == [java_murmur2(k) for k in keys]
    chunked = pa.chunked_array([pa.array(keys[:100], pa.binary()), pa.array(keys[100:], pa.binary())])
    assert murmur2_keys(chunked).view(np.int32).tolist() == [java_murmur2(k) for k in keys]
    same_length = [bytes([i % 256, i // 256, 7, 9, 1, 2, 3, 4]) for i in range(1000)]
    assert murmur2_keys(pa.array(same_length)).view(np.int32).tolist() == [java_murmur2(k) for k in same_length]
    assert murmur2_keys(pa.array([], pa.binary())).tolist() == []
    assert murmur2_keys(pa.array([None, None], pa.binary())).tolist() == [0, 0]


def test_librdkafka_murmur2_random_puts_keys_where_we_do() -> None:
    """A real Kafka client as a third reference: confluent-kafka (librdkafka) with
    ``partitioner=murmur2_random`` produces to librdkafka's built-in mock Kafka cluster (in
    process, topics auto-created with 4 partitions); every key is delivered to the partition ours
    gives."""
    keys = [*KAFKA_MURMUR2, b"", b"\xff\x00\x80", *(f"customer-{i}".encode() for i in range(60))]
    producer = confluent_kafka.Producer(
        {"test.mock.num.brokers": 1, "partitioner": "murmur2_random", "logger": logging.getLogger("librdkafka")}
    )
    delivered: dict[bytes, int] = {}

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered[msg.key()] = msg.partition()

    for key in keys:
        producer.produce("placement", value=b"v", key=key, on_delivery=done)
    assert producer.flush(30) == 0
    partitions = len(producer.list_topics("placement", timeout=10).topics["placement"].partitions)
    assert partitions > 1 and len(delivered) == len(keys)
    assert delivered == {k: partition_for_key(k, partitions) for k in keys}
    assert delivered == dict(
        zip(keys, partitions_for_keys(pa.array(keys, pa.binary()), partitions).tolist(), strict=True)
    )


def test_fnv1a_is_unchanged() -> None:
    """The legacy hash is still FNV-1a 64 (the standard's test vectors), column and single key."""
    assert fnv1a(b"") == 0xCBF29CE484222325
    assert fnv1a(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a(b"foobar") == 0x85944171F73967E8
    keys = _random_keys(300)
    assert fnv1a_keys(pa.array(keys, pa.binary())).tolist() == [fnv1a(k) for k in keys]
    assert partitions_for_keys(pa.array(keys, pa.binary()), 7, "fnv1a").tolist() == [fnv1a(k) % 7 for k in keys]
    assert [partition_for_key(k, 7, "fnv1a") for k in keys] == [fnv1a(k) % 7 for k in keys]


def test_partitioner_names_and_topic_config() -> None:
    for name, meant in [
        ("murmur2", "murmur2"),
        ("murmur2_random", "murmur2"),
        (" MURMUR2_RANDOM ", "murmur2"),
        ("fnv1a", "fnv1a"),
        ("fnv1a_random", "fnv1a"),
    ]:
        assert partitioner_name(name) == meant
    for bad in ("consistent", "consistent_random", "random", "crc32", ""):
        with pytest.raises(InvalidConfig, match="partitioner must be murmur2"):
            partitioner_name(bad)
    # a topic whose stored configs name no partitioner was created before murmur2: fnv1a
    assert TopicConfig.from_stored({"retention.ms": "1000"}).partitioner == "fnv1a"
    assert TopicConfig.from_dict({"partitioner": "murmur2_random"}).partitioner == "murmur2"
    with pytest.raises(InvalidConfig, match="partitioner"):
        TopicConfig.from_dict({"partitioner": "consistent"})


def test_the_column_hash_runs_no_python_per_key() -> None:
    """The column hash is numpy over all keys at once, no per-record Python: placing a million
    10-byte keys runs no more Python lines than placing a thousand (a loop over the keys would
    run at least one more per key). Counted, not timed: its speed is the benchmarks' business."""

    def place(n: int) -> Callable[[], Any]:
        keys = pa.array([b"user-%05d" % (i % 100_000) for i in range(n)], pa.binary())
        return lambda: murmur2_partitions(keys, 12)

    per_key = python_lines_per_record(place, 1_000, 1_000_000)
    assert per_key < 0.5, f"{per_key:.2f} Python lines per key"


# ------------------------------------------------------------------ topics, producer, describe
def _forget_partitioner(connect: str, topic: str) -> None:
    """Make ``topic`` look like one created before the partitioner config existed."""
    with ClusterMetadata(connect) as meta:
        path = meta.layout.topic(topic)
        data, stat = meta.zk.get(path)
        raw = json.loads(data)
        del raw["configs"]["partitioner"]
        meta.zk.set(path, json.dumps(raw).encode(), version=stat.version)


def _placed(connect: str, topic: str, count: int) -> dict[bytes, set[int]]:
    where: dict[bytes, set[int]] = {}
    with Consumer(topic, zookeeper=connect, auto_offset_reset="earliest") as consumer:
        got = 0
        for _ in range(60):
            for r in consumer.poll(timeout=1.0):
                where.setdefault(r.key, set()).add(r.partition)
                got += 1
            if got >= count:
                break
    assert got == count
    return where


@pytest.mark.slow
def test_keys_land_where_kafka_puts_them_and_old_topics_keep_fnv1a(
    start_broker: Any, sparklog_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    start_broker(1)
    keys = [f"customer-{i}".encode() for i in range(40)] + [b"", b"\xff\xfe\x00"]
    with Admin(sparklog_connect) as admin:
        admin.create_topic("new", 7)
        admin.create_topic("old", 7)
        admin.create_topic("kept", 7, configs={"partitioner": "fnv1a"})
        admin.create_topic("overridden", 7)
        admin.create_topic("aliased", 7, configs={"partitioner": "murmur2_random"})
        admin.create_topic("switched", 7)
    _forget_partitioner(sparklog_connect, "old")
    _forget_partitioner(sparklog_connect, "switched")
    with ClusterMetadata(sparklog_connect) as meta:
        assert meta.topic("new").configs == {"partitioner": "murmur2"}
        assert meta.topic("old").configs == {}
        assert meta.topic("aliased").configs == {"partitioner": "murmur2"}  # stored by its canonical name

    with Producer(sparklog_connect, linger_ms=1) as producer:
        for topic in ("new", "old", "kept"):
            for key in keys:  # send(): per record ...
                producer.send(topic, b"v", key=key)
            producer.flush()
            # ... and send_batch(): a column
            producer.send_batch(topic, {"key": pa.array(keys, pa.binary()), "value": [b"w"] * len(keys)})
    with Producer(sparklog_connect, config={"partitioner": "fnv1a_random"}) as producer:
        producer.send_batch("overridden", {"key": pa.array(keys, pa.binary()), "value": [b"w"] * len(keys)})

    kafka = {k: {java_partition(k, 7)} for k in keys}
    legacy = {k: {fnv1a(k) % 7} for k in keys}
    assert _placed(sparklog_connect, "new", 2 * len(keys)) == kafka
    assert _placed(sparklog_connect, "old", 2 * len(keys)) == legacy
    assert _placed(sparklog_connect, "kept", 2 * len(keys)) == legacy
    assert _placed(sparklog_connect, "overridden", len(keys)) == legacy
    assert kafka != legacy

    with Admin(sparklog_connect) as admin:
        assert admin.describe_topic("new")["partitioner"] == "murmur2"
        assert admin.describe_topic("old")["partitioner"] == "fnv1a"
    for topic, shown in (("new", "murmur2"), ("old", "fnv1a"), ("kept", "fnv1a")):
        assert cli_main(["--zookeeper", sparklog_connect, "topics", "describe", topic]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert f"Partitioner: {shown}" in first, first

    # an old topic moved to Kafka's placement: records from then on go to murmur2's partitions
    with Admin(sparklog_connect) as admin:
        assert admin.alter_topic("switched", {"partitioner": "murmur2"}).configs == {"partitioner": "murmur2"}
    with Producer(sparklog_connect) as producer:
        producer.send_batch("switched", {"key": pa.array(keys, pa.binary()), "value": [b"w"] * len(keys)})
    assert _placed(sparklog_connect, "switched", len(keys)) == kafka

    with pytest.raises(InvalidConfig, match="partitioner must be murmur2"):
        Producer(sparklog_connect, config={"partitioner": "consistent_random"})
    with pytest.raises(InvalidConfig, match="contradict"):
        Producer(sparklog_connect, partitioner="murmur2", config={"partitioner": "fnv1a"})
