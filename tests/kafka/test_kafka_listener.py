"""Kafka clients nobody here wrote (librdkafka through confluent-kafka, kafka-python) against the
Kafka-protocol listener of a live three-broker cluster: one log, two protocols."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest

from kafka_wire import KafkaWire, kafka_batch
from sparklog import Admin, Consumer, Producer
from sparklog.client.partitioner import partition_for_key
from sparklog.local_cluster import LocalCluster
from waiting import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-listener"), brokers=3) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as client:
        yield client


def kafka_address(cluster: LocalCluster, broker_id: int = 1) -> tuple[str, int]:
    port = cluster.brokers[broker_id].kafka_port
    assert port is not None
    return "127.0.0.1", port


def produce(producer: KafkaProducer, topic: str, **fields: object) -> None:
    """``producer.produce``, waiting for room while librdkafka's queue is full."""
    while True:
        try:
            producer.produce(topic, **fields)
            return
        except BufferError:
            producer.poll(0.05)


def consume_all(cluster: LocalCluster, topic: str, partitions: int, expected: int, timeout: float = 60.0) -> list:
    """Every record of ``topic`` from the start, read by a librdkafka consumer (assigned, no group)."""
    consumer = KafkaConsumer(
        {"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                assert message.error() is None, message.error()
                out.append(message)
        return out
    finally:
        consumer.close()


# ----------------------------------------------------------------------------------------- handshake
def test_api_versions_answers_every_version_and_refuses_unknown_ones_in_v0(cluster: LocalCluster) -> None:
    with KafkaWire(*kafka_address(cluster)) as wire:
        for version in range(5):
            response = wire.request(ApiVersionsRequest[version](client_software_name="t", client_software_version="1"))
            assert response.error_code == 0
            served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert served[0] == (3, 12) and served[1] == (4, 12)  # Produce and Fetch at Kafka 4's floors
        # a version from the future: v0 with UNSUPPORTED_VERSION and the table, so the client falls back
        request = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
        request.with_header(correlation_id=77, client_id="t")
        payload = bytearray(request.encode(header=True))
        payload[2:4] = (99).to_bytes(2, "big")
        wire.send_raw(bytes(payload))
        answer = ApiVersionsResponse.decode(wire.receive(), version=0, header=True)
        assert answer.header.correlation_id == 77
        assert answer.error_code == 35
        assert {k.api_key for k in answer.api_keys} >= {0, 1, 2, 3, 18}


# ----------------------------------------------------------------------------------------- librdkafka
def test_librdkafka_idempotent_producer_and_consumer_share_the_log_with_sparklog(
    cluster: LocalCluster, admin: Admin
) -> None:
    """200k keyed records with headers from an idempotent acks=all producer on RF=3,
    min.insync.replicas=2: each lands where Kafka's default partitioner puts it, and a Kafka
    consumer and sparklog's own consumer read back the same records (key, value, headers,
    timestamp, offset)."""
    topic, partitions, count = "kafka-roundtrip", 6, 200_000
    admin.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "partitioner": "murmur2_random",  # the Java client's default (librdkafka's is CRC32)
        }
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []

    def delivered(err: object, message: object) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[message.value()] = (message.partition(), message.offset())  # type: ignore[attr-defined]

    base_ts = 1_750_000_000_000
    for i in range(count):
        produce(
            producer,
            topic,
            key=f"key-{i % 5000}".encode(),
            value=f"value-{i}".encode(),
            headers=[("n", str(i).encode()), ("kind", b"test")],
            timestamp=base_ts + i,
            on_delivery=delivered,
        )
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not failed
    assert len(acked) == count
    for i in range(0, count, 997):
        partition, _ = acked[f"value-{i}".encode()]
        assert partition == partition_for_key(f"key-{i % 5000}".encode(), partitions)

    read = consume_all(cluster, topic, partitions, count)
    assert len(read) == count
    seen: dict[int, list[int]] = {}
    for message in read:
        value = message.value()
        i = int(value.split(b"-")[1])
        assert (message.partition(), message.offset()) == acked[value]
        assert message.key() == f"key-{i % 5000}".encode()
        assert message.headers() == [("n", str(i).encode()), ("kind", b"test")]
        assert message.timestamp() == (1, base_ts + i)  # CreateTime, the producer's
        seen.setdefault(message.partition(), []).append(message.offset())
    for offsets in seen.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as native:
        rows: list[dict] = []
        deadline = time.monotonic() + 60
        while len(rows) < count and time.monotonic() < deadline:
            for batch in native.poll_batches(1.0):
                rows.extend(batch.to_pylist())
    assert len(rows) == count
    for row in rows[:: count // 500]:
        i = int(row["value"].split(b"-")[1])
        assert (row["partition"], row["offset"]) == acked[row["value"]]
        assert row["key"] == f"key-{i % 5000}".encode()
        assert [(h["key"], h["value"]) for h in row["headers"]] == [("n", str(i).encode()), ("kind", b"test")]
        assert int(row["timestamp"].timestamp() * 1000) == base_ts + i


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_librdkafka_writes_is_read_back(cluster: LocalCluster, admin: Admin, codec: str) -> None:
    topic = f"kafka-{codec}"
    admin.create_topic(topic, 1, 1)
    producer = KafkaProducer(
        {"bootstrap.servers": cluster.kafka_bootstrap_servers, "compression.type": codec, "linger.ms": 20}
    )
    values = [f"{codec}-{i}-".encode() * (1 + i % 7) for i in range(5000)]
    for value in values:
        produce(producer, topic, value=value)
    assert producer.flush(30) == 0
    read = consume_all(cluster, topic, 1, len(values))
    assert [m.value() for m in read] == values
    assert [m.offset() for m in read] == list(range(len(values)))


def test_records_from_sparklog_producers_reach_kafka_consumers_identically(cluster: LocalCluster, admin: Admin) -> None:
    topic = "from-sparklog"
    admin.create_topic(topic, 2, 2)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        futures = [
            producer.send(
                topic,
                value=f"v{i}".encode(),
                key=None if i % 3 == 0 else f"k{i}".encode(),
                headers={"h": b"x"} if i % 2 else None,
                timestamp=1_700_000_000_000 + i,
            )
            for i in range(3000)
        ]
        producer.flush()
        where = {f"v{i}".encode(): f.result() for i, f in enumerate(futures)}
    read = consume_all(cluster, topic, 2, 3000)
    assert len(read) == 3000
    for message in read:
        i = int(message.value()[1:])
        _, partition, offset = where[message.value()]
        assert (message.partition(), message.offset()) == (partition, offset)
        assert message.key() == (None if i % 3 == 0 else f"k{i}".encode())
        assert message.headers() == ([("h", b"x")] if i % 2 else None)
        assert message.timestamp() == (1, 1_700_000_000_000 + i)


def test_kafka_python_produces_and_consumes(cluster: LocalCluster, admin: Admin) -> None:
    from kafka import KafkaConsumer as PyConsumer
    from kafka import KafkaProducer as PyProducer
    from kafka import TopicPartition as PyTopicPartition

    topic = "kafka-python"
    admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    producer = PyProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
    sent = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(2000)]
    producer.flush(30)
    metadata = [f.get(timeout=30) for f in sent]
    producer.close()
    consumer = PyConsumer(bootstrap_servers=cluster.kafka_bootstrap_servers, enable_auto_commit=False)
    consumer.assign([PyTopicPartition(topic, p) for p in range(3)])
    consumer.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 2000 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    consumer.close()
    assert sorted((r.partition, r.offset) for r in got) == sorted((m.partition, m.offset) for m in metadata)
    assert {r.value for r in got} == {f"v{i}".encode() for i in range(2000)}


def test_offsets_by_earliest_latest_and_time(cluster: LocalCluster, admin: Admin) -> None:
    topic = "kafka-offsets"
    admin.create_topic(topic, 1, 1)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for i in range(100):
        producer.produce(topic, value=b"x", timestamp=1_000_000 + i * 10)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 100)
        found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_000_000 + 505)], timeout=10)
        assert found[0].offset == 51  # the first record at or after the time
        after = consumer.offsets_for_times([TopicPartition(topic, 0, 9_999_999)], timeout=10)
        assert after[0].offset == -1  # none: the end (librdkafka's OFFSET_END)
    finally:
        consumer.close()


def test_a_log_append_time_topic_stamps_records_with_the_brokers_time(cluster: LocalCluster, admin: Admin) -> None:
    topic = "kafka-append-time"
    admin.create_topic(topic, 1, 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    producer.produce(topic, value=b"x", timestamp=1_000)
    assert producer.flush(30) == 0
    (message,) = consume_all(cluster, topic, 1, 1)
    kind, stamp = message.timestamp()
    assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
    assert before - 1000 <= stamp <= int(time.time() * 1000)


# ----------------------------------------------------------------------------------------- bad input
def _produce(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    return ProduceRequest[9](
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=records)])],
    )


def _end_offset(cluster: LocalCluster, topic: str) -> int:
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_bad_batches_get_kafkas_errors_and_store_nothing(cluster: LocalCluster, admin: Admin) -> None:
    topic = "kafka-bad-batches"
    admin.create_topic(topic, 1, 1, {"max.message.bytes": "10000"})
    good = kafka_batch([b"fine"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # a changed value byte: the CRC no longer matches
    cut = good[:-3]
    too_large = kafka_batch([b"x" * 20_000])
    cases = {
        "corrupt": (bytes(corrupt), 1, 2),  # CORRUPT_MESSAGE
        "cut": (cut, 1, 2),
        "too large": (too_large, 1, 10),  # MESSAGE_TOO_LARGE, before decoding
        "two batches": (good + good, 1, 87),  # INVALID_RECORD: one batch per partition
        "bad acks": (good, 5, 21),  # INVALID_REQUIRED_ACKS
    }
    errors = {}
    for broker_id in cluster.brokers:  # the leader answers; others say NOT_LEADER
        with KafkaWire(*kafka_address(cluster, broker_id)) as wire:
            first = wire.request(_produce(topic, good)).responses[0].partition_responses[0]
            if first.error_code == 6:
                continue
            assert first.error_code == 0 and first.base_offset == 0
            for name, (records, acks, _) in cases.items():
                answer = wire.request(_produce(topic, records, acks)).responses[0].partition_responses[0]
                errors[name] = answer.error_code
    assert errors == {name: code for name, (_, _, code) in cases.items()}
    assert _end_offset(cluster, topic) == 1  # only the good batch


def test_oversized_malformed_and_unknown_requests_close_their_connection_only(cluster: LocalCluster) -> None:
    address = kafka_address(cluster)
    with KafkaWire(*address) as wire:  # 2 GB declared: refused before a byte of it is read
        wire.sock.sendall((2**31 - 1).to_bytes(4, "big") + b"\0" * 64)
        assert wire.closed_by_broker()
    with KafkaWire(*address) as wire:  # an API key nobody has
        wire.send_raw((9999).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\0\0")
        assert wire.closed_by_broker()
    with KafkaWire(*address) as wire:  # a Produce whose body is garbage
        wire.send_raw((0).to_bytes(2, "big") + (9).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff" * 40)
        assert wire.closed_by_broker()
    with KafkaWire(*address) as wire:  # and everyone else is still served
        assert wire.request(ApiVersionsRequest[0]()).error_code == 0


# ----------------------------------------------------------------------------------------- failure
def test_kill_9_of_a_leader_under_an_idempotent_producer_loses_and_duplicates_nothing(
    cluster: LocalCluster, admin: Admin
) -> None:
    """librdkafka's idempotent producer with acks=all writes while the leader of its partitions is
    killed with -9 and restarted: every acknowledged record is read back exactly once, in the
    order it was sent within its partition."""
    topic, partitions = "kafka-kill", 3
    admin.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
        }
    )
    acked: list[tuple[int, int, int]] = []  # (partition, offset, sequence number sent)
    lock = threading.Lock()

    def delivered(err: object, message: object) -> None:
        if err is None:
            with lock:
                acked.append((message.partition(), message.offset(), int(message.value())))  # type: ignore[attr-defined]

    stop = threading.Event()
    sent = [0]

    def keep_producing() -> None:
        i = 0
        while not stop.is_set():
            produce(producer, topic, value=str(i).encode(), partition=i % partitions, on_delivery=delivered)
            producer.poll(0)
            i += 1
            if i % 200 == 0:
                time.sleep(0.01)
        sent[0] = i

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        wait_for(lambda: len(acked) > 3000, 60, "acknowledgements before the kill")
        victim = _leader_of(cluster, topic, 0)
        cluster.brokers[victim].kill()
        count = len(acked)
        wait_for(lambda: len(acked) > count + 3000, 90, "acknowledgements from the new leader")
        cluster.restart(victim)
        count = len(acked)
        wait_for(lambda: len(acked) > count + 1000, 90, "acknowledgements after the restart")
    finally:
        stop.set()
        thread.join(30)
        assert producer.flush(120) == 0
    read = consume_all(cluster, topic, partitions, len(acked), timeout=120)
    by_partition: dict[int, list[int]] = {}
    for message in read:
        by_partition.setdefault(message.partition(), []).append(int(message.value()))
    values = [v for vs in by_partition.values() for v in vs]
    assert len(values) == len(set(values)), "a record was stored twice"
    assert {v for _, _, v in acked} <= set(values), "an acknowledged record was lost"
    for p, vs in by_partition.items():
        assert vs == sorted(vs), f"partition {p} is out of order"
        assert all(v % partitions == p for v in vs)


def _leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def test_the_registration_carries_the_kafka_listener(cluster: LocalCluster) -> None:
    from sparklog.coordination.cluster import ClusterMetadata

    with ClusterMetadata(cluster.zookeeper) as meta:
        brokers = meta.brokers()
    for broker_id, process in cluster.brokers.items():
        assert brokers[broker_id].kafka_endpoints == (("PLAINTEXT", "127.0.0.1", process.kafka_port),)


def test_a_producer_creates_the_topic_it_names_as_kafka_does(cluster: LocalCluster, admin: Admin) -> None:
    """auto.create.topics.enable (on by default, as in Kafka): a producer's Metadata request creates
    an unknown topic with the default partitions and replicas; a request that does not allow it
    (librdkafka's and Java's consumers can say so) creates nothing."""
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    produce(producer, "kafka-auto-created", value=b"first")
    assert producer.flush(30) == 0
    assert admin.topic("kafka-auto-created").partitions == 1
    (message,) = consume_all(cluster, "kafka-auto-created", 1, 1)
    assert message.value() == b"first"

    from kafka.protocol.metadata import MetadataRequest

    asked = MetadataRequest[9](
        topics=[MetadataRequest.MetadataRequestTopic(name="kafka-never-made")],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with KafkaWire(*kafka_address(cluster)) as wire:
        (topic,) = wire.request(asked).topics
    assert topic.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert "kafka-never-made" not in admin.list_topics()


def test_a_typed_topic_takes_and_gives_avro_binary_of_its_schema(cluster: LocalCluster, admin: Admin) -> None:
    """Kafka clients write a typed topic's values as Avro binary of its latest schema; sparklog
    stores them as columns (its consumers read structs), Kafka consumers get Avro binary back, and a
    value that does not decode is refused (INVALID_RECORD) naming what is wrong, storing nothing."""
    import io

    import fastavro
    from confluent_kafka import KafkaError

    schema = {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "user", "type": "string"}, {"name": "ms", "type": "long"}],
    }
    topic = "kafka-typed"
    admin.create_topic(topic, 1, 1, value_schema=schema)
    parsed = fastavro.parse_schema(schema)

    def avro(row: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        return out.getvalue()

    rows = [{"user": f"u{i}", "ms": i * 10} for i in range(100)]
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
    for row in rows:
        produce(producer, topic, value=avro(row))
    assert producer.flush(30) == 0
    errors: list = []
    producer.produce(topic, value=b"\xff\xff\xff", on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0].code() == KafkaError.INVALID_RECORD

    read = consume_all(cluster, topic, 1, len(rows))
    assert [fastavro.schemaless_reader(io.BytesIO(m.value()), parsed) for m in read] == rows
    with Consumer(topic, bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest") as native:
        values: list = []
        for _ in range(30):
            for batch in native.poll_batches(1.0):
                values.extend(batch.column("value").to_pylist())
            if len(values) >= len(rows):
                break
    assert values == rows


def test_fetched_batches_go_out_lz4_compressed_and_fill_the_partition_limit(
    cluster: LocalCluster, admin: Admin
) -> None:
    """A Fetch answers with lz4-compressed batches (as most producers send them), and reads on
    until the compressed batches fill the partition's byte limit: a consumer's queue and byte limits
    then hold as many records as they would from Kafka's compressed log."""
    from kafka.protocol.consumer import FetchRequest

    from sparklog.kafka.record_batch import decode_batch, split_batches

    topic = "kafka-fetch-codec"
    admin.create_topic(topic, 1, 1)
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "linger.ms": 0})
    for i in range(3000):  # many small batches, each compressing well
        produce(producer, topic, value=b"%06d" % i + b"-" * 200)
        if i % 100 == 0:
            producer.flush(10)
    assert producer.flush(30) == 0
    T = FetchRequest.FetchTopic
    request = FetchRequest[12](
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=10 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(topic=topic, partitions=[T.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=100_000)])
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    leader = _leader_of(cluster, topic, 0)
    with KafkaWire(*kafka_address(cluster, leader)) as wire:
        (answer,) = wire.request(request).responses[0].partitions
    assert answer.error_code == 0
    batches = split_batches(answer.records)
    assert batches and all(header.compression == 3 for header, _ in batches)
    assert len(answer.records) <= 100_000
    records = sum(decode_batch(data).records.num_rows for _, data in batches)
    assert records * 207 > 100_000  # more records than the limit would hold uncompressed
