"""A broker process fed bad input: garbage on its Flight port, record batches of the wrong schema,
malformed requests, unknown topics and partitions, offsets out of range. Every request gets a typed
error (through :func:`sparklog.protocol.wire.from_flight_error`), the broker stays up, and what it stores is
unchanged (everything is read back and compared)."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from broker_helpers import (
    HOST,
    BrokerProcess,
    flight_client,
    ping,
    raw_action,
    raw_fetch,
    raw_produce,
    read_topic,
    running_broker,
    typed_error,
)
from sparklog import Admin, Consumer, Producer
from sparklog.errors import (
    InvalidRecord,
    InvalidRequest,
    OffsetOutOfRange,
    RecordTooLarge,
    UnknownTopic,
    error_from_code,
)
from sparklog.protocol import wire
from sparklog.protocol.record_frames import FRAMED, SCHEMA_FIELD, open_produce, schema_text, write_frame
from sparklog.records import HEADER_TYPE

TOPIC = "data"
PARTITIONS = 3


class Guarded:
    """A broker with some stored records, and the check that it is alive and they are unchanged."""

    def __init__(self, broker: BrokerProcess, connect: str) -> None:
        self.broker = broker
        self.connect = connect
        self.location = broker.location
        self.expected = read_topic(self.location, TOPIC, PARTITIONS)

    def produce(self, table: dict[str, Any], partition: int | None = None) -> None:
        with Producer(zookeeper=self.connect) as producer:
            producer.send_batch(TOPIC, table, partition=partition)
        self.expected = read_topic(self.location, TOPIC, PARTITIONS)

    def assert_unharmed(self) -> None:
        assert self.broker.alive, f"the broker died:\n{self.broker.output()}"
        assert ping(self.location) == self.broker.broker_id
        assert read_topic(self.location, TOPIC, PARTITIONS) == self.expected


def wire_batch(**columns: Any) -> pa.RecordBatch:
    return pa.record_batch(columns)


def produce_command(partition: int = 0, topic: str = TOPIC, **extra: Any) -> dict[str, Any]:
    return {"type": "produce", "topic": topic, "partition": partition, "acks": "1", **extra}


@pytest.fixture(scope="module")
def shared_broker(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    """One broker for the whole module (the bad input must not hurt it, so it can be shared)."""
    with running_broker(zookeeper.connect_string, tmp_path_factory.mktemp("bad-input")) as (broker, connect):
        with Admin(connect) as admin:
            admin.create_topic(TOPIC, PARTITIONS)
        with Producer(zookeeper=connect) as producer:
            rows = range(60)
            producer.send_batch(
                TOPIC,
                {
                    "key": [f"key-{i}".encode() for i in rows],
                    "value": [f"value-{i}".encode() for i in rows],
                    "timestamp": pa.array([1_700_000_000_000 + i for i in rows], pa.int64()),
                    "headers": pa.array([[{"key": "h", "value": b"x"}] if i % 2 else None for i in rows], HEADER_TYPE),
                },
            )
            for i in range(10):
                producer.send(TOPIC, f"single-{i}".encode(), key=b"single", headers={"n": str(i).encode()})
            producer.flush()
        stored = read_topic(broker.location, TOPIC, PARTITIONS)
        assert sum(len(rows) for rows in stored.values()) == 70
        yield broker, connect


@pytest.fixture
def guarded(shared_broker: tuple[BrokerProcess, str]) -> Guarded:
    """The shared broker, with what it stores at the start of the test."""
    broker, connect = shared_broker
    assert broker.alive, f"the shared broker died in an earlier test:\n{broker.output()[-2000:]}"
    return Guarded(broker, connect)


def _good_batch(n: int = 2, tag: str = "new") -> pa.RecordBatch:
    values = pa.array([f"{tag}-{i}".encode() for i in range(n)], pa.binary())
    return wire_batch(key=pa.array([b"k"] * n, pa.binary()), value=values)


# ---------------------------------------------------------------------------------------------- garbage
def _send_garbage(port: int, payload: bytes, read_reply: bool = True) -> bytes:
    """Write raw bytes to the port, then read whatever comes back until the broker hangs up."""
    with socket.create_connection((HOST, port), timeout=5) as sock:
        sock.sendall(payload)
        reply = b""
        if read_reply:
            sock.settimeout(2)
            try:
                while chunk := sock.recv(65536):
                    reply += chunk
            except (TimeoutError, ConnectionResetError):
                pass
        return reply


def test_garbage_bytes_on_the_flight_port_do_not_hurt_the_broker(guarded: Guarded) -> None:
    port = guarded.broker.port
    http2_preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    payloads = [
        os.urandom(4096),
        b"\x00" * 100_000,
        b"GET / HTTP/1.1\r\nHost: sparklog\r\n\r\n",
        http2_preface + os.urandom(2048),
        # a well-formed preface and SETTINGS, then a HEADERS frame whose HPACK block is nonsense
        http2_preface
        + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        + b"\x00\x00\x10\x01\x05\x00\x00\x00\x01"
        + b"\xff" * 16,
        # a frame that announces 16 MB of payload, then stops
        http2_preface + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01" + b"x" * 100,
    ]
    for payload in payloads:
        _send_garbage(port, payload)
        guarded.assert_unharmed()

    # many garbage connections at once, and one that stays open half-way while a normal client works
    threads = [threading.Thread(target=_send_garbage, args=(port, os.urandom(512))) for _ in range(30)]
    for t in threads:
        t.start()
    with socket.create_connection((HOST, port), timeout=5) as lingering:
        lingering.sendall(http2_preface[:10])
        for t in threads:
            t.join(30)
        guarded.assert_unharmed()
        guarded.produce({"key": [b"after-garbage"], "value": [b"still works"]}, partition=1)
        with Consumer(TOPIC, zookeeper=guarded.connect, auto_offset_reset="earliest", partitions=[1]) as consumer:
            records = []
            for _ in range(20):
                records += consumer.poll(timeout=0.5)
                if records and records[-1].value == b"still works":
                    break
        assert records[-1].value == b"still works"
        assert [(r.offset, r.value) for r in records] == [(row["offset"], row["value"]) for row in guarded.expected[1]]
    guarded.assert_unharmed()


# ---------------------------------------------------------------------------------------------- wrong schema
@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(wire_batch(value=pa.array([1, 2, 3], pa.int64())), id="value-int64"),
        pytest.param(wire_batch(key=pa.array([b"k"]), value=pa.array([b"v"]), extra=pa.array([1])), id="extra-column"),
        pytest.param(wire_batch(key=pa.array([b"k"])), id="no-value-column"),
        pytest.param(wire_batch(key=pa.array([7], pa.int32()), value=pa.array([b"v"])), id="key-int32"),
        pytest.param(wire_batch(value=pa.array([b"v"]), timestamp=pa.array(["yesterday"])), id="timestamp-string"),
        pytest.param(wire_batch(value=pa.array([b"v"]), headers=pa.array([[1, 2]])), id="headers-list-of-int"),
        pytest.param(pa.RecordBatch.from_arrays([pa.array([b"a"]), pa.array([b"b"])], ["value", "value"]), id="dup"),
        pytest.param(wire_batch(value=pa.array([], pa.binary())), id="empty-batch"),
    ],
)
def test_a_batch_of_the_wrong_schema_is_refused_with_invalid_record(guarded: Guarded, batch: pa.RecordBatch) -> None:
    error = typed_error(lambda: raw_produce(guarded.location, produce_command(0), [batch]))
    assert isinstance(error, InvalidRecord), repr(error)
    guarded.assert_unharmed()


def test_a_bad_batch_after_a_good_one_on_the_same_stream_stores_only_the_good_one(guarded: Guarded) -> None:
    client = flight_client(guarded.location)
    good = _good_batch(3, "good")
    writer, reader = open_produce(client, produce_command(2), good.schema)
    try:
        write_frame(writer, good)
        ack = wire.decode(reader.read())
        end = len(guarded.expected[2])
        assert ack == {"base_offset": end, "last_offset": end + 2, "count": 3}
        write_frame(writer, _good_batch(0))  # an empty batch: refused
        assert reader.read() is None
        with pytest.raises(flight.FlightError) as info:
            writer.close()
        assert isinstance(wire.from_flight_error(info.value), InvalidRecord)
    finally:
        with contextlib.suppress(Exception):
            writer.close()
        client.close()
    after = read_topic(guarded.location, TOPIC, PARTITIONS)
    assert after[2][:end] == guarded.expected[2]
    assert [(r["offset"], r["key"], r["value"]) for r in after[2][end:]] == [
        (end + i, b"k", f"good-{i}".encode()) for i in range(3)
    ]
    guarded.expected = after
    guarded.assert_unharmed()


def _broken_frames() -> dict[str, tuple[bytes | None, type]]:
    """Frames (``sparklog.protocol.record_frames``) a broken client could send, and the typed error
    each must get (None: a Flight message without a frame, a record batch of the empty schema).
    Only the batch that does not fit the named schema has readable metadata (its request's)."""
    good = _good_batch(2, "broken").serialize().to_pybytes()
    ints = pa.record_batch({"value": pa.array([1, 2], pa.int64())}).serialize().to_pybytes()
    return {
        "metadata-not-json": (good + b"{not json", InvalidRequest),
        "metadata-not-utf8": (good + b"\xff\xfe\x00", InvalidRequest),
        "metadata-json-array": (good + b"[1, 2]", InvalidRequest),
        "not-an-ipc-message": (b"\x00garbage, not an Arrow IPC message" * 3, InvalidRecord),
        "end-of-stream-marker": (b"\xff\xff\xff\xff\x00\x00\x00\x00{}", InvalidRecord),
        "truncated-message": (good[: len(good) // 2], InvalidRecord),
        "truncated-body": (good[:-8], InvalidRecord),
        "schema-message": (_good_batch().schema.serialize().to_pybytes(), InvalidRecord),
        "batch-not-of-the-named-schema": (ints + wire.encode({"t": TOPIC, "p": 2, "end": True}), InvalidRecord),
        "no-frame": (None, InvalidRequest),
    }


@pytest.mark.parametrize("name", sorted(_broken_frames()))
@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_a_broken_frame_is_refused_with_a_typed_error(guarded: Guarded, name: str, many: bool) -> None:
    """After a good frame on the same stream: the good one is stored, the broken one refused with
    its typed error (in the multi-partition request's answer, or ending the stream)."""
    data, expected = _broken_frames()[name]
    good = _good_batch(1, "before-broken")
    meta = {"t": TOPIC, "p": 2, "end": True}
    command = {"type": "produce_many", "acks": "1"} if many else produce_command(2)
    client = flight_client(guarded.location)
    try:
        writer, reader = open_produce(client, command, good.schema, flight.FlightCallOptions(timeout=30))
        write_frame(writer, good, meta if many else None)
        first = wire.decode(reader.read())
        stored = first["r"][0]["b"] if many else first["base_offset"]
        assert stored == len(guarded.expected[2])

        try:
            if data is None:
                writer.write_batch(pa.RecordBatch.from_pylist([{}] * 3, schema=FRAMED))
            else:
                writer.write_metadata(pa.py_buffer(data))
            answer = reader.read()
            if answer is None:  # the broker ended the stream: its error comes with closing
                writer.close()
                raise AssertionError("the stream ended without an error")
            result = wire.decode(answer)["r"][0]  # the request's answer: this batch's error
            assert "e" in result, f"the broken frame was stored: {result}"
            error = error_from_code(result["e"], result["m"])
        except flight.FlightError as exc:
            error = wire.from_flight_error(exc, "test")
        assert isinstance(error, expected), repr(error)
    finally:
        with contextlib.suppress(Exception):
            writer.close()
        client.close()
    after = read_topic(guarded.location, TOPIC, PARTITIONS)
    assert after[2][: len(guarded.expected[2])] == guarded.expected[2]
    assert [r["value"] for r in after[2][len(guarded.expected[2]) :]] == [b"before-broken-0"]
    guarded.expected = after
    guarded.assert_unharmed()


def test_an_empty_message_ends_the_stream_as_flight_reads_it(guarded: Guarded) -> None:
    """A Flight message with neither a batch nor app metadata is the end of the stream to Flight's
    reader: the broker never sees what follows it (nothing stored), and answers nothing more."""
    good = _good_batch(1, "before-empty")
    client = flight_client(guarded.location)
    try:
        writer, reader = open_produce(client, produce_command(2), good.schema)
        write_frame(writer, good)
        assert wire.decode(reader.read())["base_offset"] == len(guarded.expected[2])
        writer.write_metadata(pa.py_buffer(b""))
        with contextlib.suppress(flight.FlightError):  # the call may already be over
            write_frame(writer, _good_batch(1, "after-empty"))
        assert reader.read() is None
        writer.close()
    finally:
        client.close()
    after = read_topic(guarded.location, TOPIC, PARTITIONS)
    assert [r["value"] for r in after[2][len(guarded.expected[2]) :]] == [b"before-empty-0"]
    guarded.expected = after
    guarded.assert_unharmed()


@pytest.mark.parametrize("named", [True, False], ids=["schema-named", "no-schema"])
@pytest.mark.parametrize("many", [False, True], ids=["produce", "produce_many"])
def test_a_stream_of_flight_record_batches_is_refused_with_invalid_request(
    guarded: Guarded, named: bool, many: bool
) -> None:
    """The produce wire before frames: ``do_put`` declaring the records' schema and writing Flight
    record batches. Refused (whether or not the descriptor names the schema), nothing stored."""
    batch = _good_batch(2, "flight-batch")
    command = {"type": "produce_many", "acks": "1"} if many else produce_command(0)
    if named:
        command[SCHEMA_FIELD] = schema_text(batch.schema)

    def put() -> None:
        client = flight_client(guarded.location)
        try:
            writer, reader = client.do_put(flight.FlightDescriptor.for_command(wire.encode(command)), batch.schema)
            writer.write_with_metadata(batch, pa.py_buffer(wire.encode({"t": TOPIC, "p": 0, "end": True})))
            reader.read()
            writer.close()
        finally:
            client.close()

    error = typed_error(put)
    assert isinstance(error, InvalidRequest), repr(error)
    assert "frames" in str(error), str(error)
    guarded.assert_unharmed()


def test_topic_rules_are_enforced_on_the_wire(guarded: Guarded) -> None:
    with Admin(guarded.connect) as admin:
        admin.create_topic("small", 1, configs={"max.message.bytes": 2048})
        admin.create_topic("compacted", 1, configs={"cleanup.policy": "compact"})
    big = wire_batch(value=pa.array([b"x" * 10_000]))
    error = typed_error(lambda: raw_produce(guarded.location, produce_command(0, "small"), [big]))
    assert isinstance(error, RecordTooLarge), repr(error)
    keyless = wire_batch(value=pa.array([b"no key"]))
    error = typed_error(lambda: raw_produce(guarded.location, produce_command(0, "compacted"), [keyless]))
    assert isinstance(error, InvalidRecord)
    assert read_topic(guarded.location, "small", 1) == {0: []}
    assert read_topic(guarded.location, "compacted", 1) == {0: []}
    guarded.assert_unharmed()


# ---------------------------------------------------------------------------------------------- malformed requests
def _named(command: dict[str, Any]) -> bytes:
    """A JSON command naming the records' schema, as every well-formed produce request does."""
    return wire.encode({**command, SCHEMA_FIELD: schema_text(_good_batch().schema)})


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b"\xff\xfe\x00garbage", id="not-utf8"),
        pytest.param(b"[1, 2, 3]", id="json-array"),
        pytest.param(_named({"type": "consume", "topic": TOPIC, "partition": 0}), id="unknown-put-type"),
        pytest.param(_named({"type": "produce", "partition": 0}), id="no-topic"),
        pytest.param(_named({"type": "produce", "topic": TOPIC, "partition": "0"}), id="partition-string"),
        pytest.param(_named({"type": "produce", "topic": TOPIC, "partition": True}), id="partition-bool"),
        pytest.param(_named({"type": "produce", "topic": TOPIC, "partition": 0, "acks": "2"}), id="acks-2"),
        pytest.param(_named({"type": "produce", "topic": TOPIC, "partition": 0, "producer_id": "me"}), id="pid"),
        pytest.param(wire.encode(produce_command(0)), id="no-schema"),
        pytest.param(wire.encode(produce_command(0, schema=7)), id="schema-int"),
        pytest.param(wire.encode(produce_command(0, schema="not base64!")), id="schema-not-base64"),
        pytest.param(wire.encode(produce_command(0, schema="AAAAAAAA")), id="schema-garbage"),
        pytest.param(
            wire.encode(produce_command(0, schema=base64.b64encode(_good_batch().serialize()).decode())),
            id="schema-a-record-batch-message",
        ),
        pytest.param(wire.encode({"type": "produce_many", "acks": "1"}), id="many-no-schema"),
        pytest.param(wire.encode({"type": "produce_many", "acks": "1", "schema": "QUJD"}), id="many-schema-garbage"),
    ],
)
def test_a_malformed_produce_command_is_refused_with_invalid_request(guarded: Guarded, command: bytes) -> None:
    def put() -> None:
        client = flight_client(guarded.location)
        try:
            writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), FRAMED)
            write_frame(writer, _good_batch(), {"t": TOPIC, "p": 0, "end": True})
            reader.read()
            writer.close()
        finally:
            client.close()

    error = typed_error(put)
    assert isinstance(error, InvalidRequest), repr(error)
    guarded.assert_unharmed()


@pytest.mark.parametrize(
    "ticket",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\x01\x02", id="binary"),
        pytest.param(b'"just a string"', id="json-string"),
        pytest.param(wire.encode({"partition": 0, "offset": 0}), id="no-topic"),
        pytest.param(wire.encode({"topic": "", "partition": 0, "offset": 0}), id="empty-topic"),
        pytest.param(wire.encode({"topic": TOPIC, "partition": 0}), id="no-offset"),
        pytest.param(wire.encode({"topic": TOPIC, "partition": 0, "offset": "0"}), id="offset-string"),
        pytest.param(wire.encode({"topic": TOPIC, "partition": 0, "offset": 1.5}), id="offset-float"),
        pytest.param(wire.encode({"topic": TOPIC, "partition": 0, "offset": 0, "max_bytes": "big"}), id="max-bytes"),
        pytest.param(wire.encode({"topic": TOPIC, "partition": 0, "offset": 0, "max_wait_ms": None}), id="wait-null"),
    ],
)
def test_a_malformed_ticket_is_refused_with_invalid_request(guarded: Guarded, ticket: bytes) -> None:
    def get() -> None:
        client = flight_client(guarded.location)
        try:
            client.do_get(flight.Ticket(ticket)).read_all()
        finally:
            client.close()

    error = typed_error(get)
    assert isinstance(error, InvalidRequest), repr(error)
    guarded.assert_unharmed()


def test_malformed_actions_are_refused_with_invalid_request(guarded: Guarded) -> None:
    client = flight_client(guarded.location)
    try:
        cases = [
            flight.Action("no_such_action", b"{}"),
            flight.Action(wire.LIST_OFFSETS, b"{not json"),
            flight.Action(wire.LIST_OFFSETS, wire.encode({"topic": TOPIC})),
            flight.Action(wire.LIST_OFFSETS, wire.encode({"topic": TOPIC, "partition": 0, "timestamp": "now"})),
        ]
        for action in cases:
            error = typed_error(lambda a=action: list(client.do_action(a)))
            assert isinstance(error, InvalidRequest), (action.type, repr(error))
    finally:
        client.close()
    guarded.assert_unharmed()


# ------------------------------------------------------------------------------------ unknown topics and partitions
def test_unknown_topics_are_refused_with_unknown_topic(guarded: Guarded) -> None:
    location = guarded.location
    assert isinstance(typed_error(lambda: raw_fetch(location, "no-such-topic", 0, 0)), UnknownTopic)
    batch = _good_batch()
    error = typed_error(lambda: raw_produce(location, produce_command(0, "no-such-topic"), [batch]))
    assert isinstance(error, UnknownTopic)
    error = typed_error(lambda: raw_action(location, wire.LIST_OFFSETS, {"topic": "no-such-topic", "partition": 0}))
    assert isinstance(error, UnknownTopic)

    with Producer(zookeeper=guarded.connect, retries=2) as producer:
        with pytest.raises(UnknownTopic):
            producer.send_batch("no-such-topic", {"value": [b"v"]})
        with pytest.raises(UnknownTopic):
            producer.send("no-such-topic", b"v").result(30)
    with pytest.raises(UnknownTopic):
        Consumer("no-such-topic", zookeeper=guarded.connect)
    guarded.assert_unharmed()


@pytest.mark.parametrize("partition", [PARTITIONS, PARTITIONS + 100, -1])
def test_unknown_partitions_are_refused(guarded: Guarded, partition: int) -> None:
    location = guarded.location
    error = typed_error(lambda: raw_produce(location, produce_command(partition), [_good_batch()]))
    assert isinstance(error, UnknownTopic), repr(error)
    assert isinstance(typed_error(lambda: raw_fetch(location, TOPIC, partition, 0)), UnknownTopic)
    error = typed_error(lambda: raw_action(location, wire.LIST_OFFSETS, {"topic": TOPIC, "partition": partition}))
    assert isinstance(error, UnknownTopic)
    guarded.assert_unharmed()


@pytest.mark.parametrize("partition", [PARTITIONS, PARTITIONS + 100, -1, -3])
def test_the_producer_refuses_a_partition_that_does_not_exist(guarded: Guarded, partition: int) -> None:
    """An explicit partition outside [0, partitions) is an error (Kafka: "Invalid partition"), never a
    silent fallback to the key hash or the sticky partition."""
    with Producer(zookeeper=guarded.connect, retries=2) as producer:
        try:
            metas = producer.send_batch(TOPIC, {"key": [b"k"], "value": [b"batch to nowhere"]}, partition=partition)
        except (InvalidRequest, UnknownTopic):
            pass
        else:
            pytest.fail(f"send_batch(partition={partition}) was accepted and stored: {metas}")
        try:  # refused at send() (a negative partition) or through the future (one past the end)
            meta = producer.send(TOPIC, b"record to nowhere", key=b"k", partition=partition).result(30)
        except (InvalidRequest, UnknownTopic):
            pass
        else:
            pytest.fail(f"send(partition={partition}) was accepted and stored: {meta}")
    guarded.assert_unharmed()


# ---------------------------------------------------------------------------------------------- offsets out of range
def test_fetching_outside_the_log_is_refused_with_offset_out_of_range(guarded: Guarded) -> None:
    location = guarded.location
    for p in range(PARTITIONS):
        end = len(guarded.expected[p])
        for offset in (end + 1, end + 1000, 2**62, -1, -(2**62)):
            error = typed_error(lambda p=p, o=offset: raw_fetch(location, TOPIC, p, o))
            assert isinstance(error, OffsetOutOfRange), (p, offset, repr(error))
            error = typed_error(lambda p=p, o=offset: raw_fetch(location, TOPIC, p, o, max_wait_ms=1000))
            assert isinstance(error, OffsetOutOfRange), (p, offset, repr(error))
        assert raw_fetch(location, TOPIC, p, end).num_rows == 0  # the log end itself is fine: nothing yet

    with Consumer(TOPIC, zookeeper=guarded.connect, auto_offset_reset="earliest", partitions=[0]) as consumer:
        consumer.seek(0, len(guarded.expected[0]) + 5)
        with pytest.raises(OffsetOutOfRange):
            consumer.poll(timeout=0.5)
        with pytest.raises(InvalidRequest):
            consumer.seek(0, -1)
    guarded.assert_unharmed()
