"""Raw calls to a broker, as a careless or hostile client makes them: ``pyarrow.flight`` with any
descriptor, ticket or body, and raw bytes on the port. Every call has a deadline; every error is
captured (never raised) with what the broker said.

Fetched batches are checked with Arrow's *full* validation before anything reads their values: a
broker that serves a malformed batch must show up as a finding, not crash the fuzzer.

A produce (:func:`put`) sends frames, as the wire says (:mod:`sparklog.protocol.record_frames`);
:func:`put_batches` speaks the produce wire before frames (Flight record batches), which every
broker must refuse.

Every call goes through a :class:`Connector` (``via=``): :data:`ANONYMOUS` (plaintext, no
credentials, a fresh client per call) or one user's over TLS and SASL (the low-privilege mode:
one handshake per broker, its client kept; a call meant to be dropped gets a client of its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from sparklog.errors import BrokerNotAvailable, SparklogError
from sparklog.protocol.record_frames import FRAMED, frame
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

HOST = "127.0.0.1"
CALL_TIMEOUT_S = 30.0
_TYPED = re.compile(r"sparklog:([A-Z_]+):")
_INTERNALS = re.compile(r"Traceback \(most recent call last\)|File \"/|\.py\", line \d+")


@dataclasses.dataclass
class CallError:
    """What a failed call carried: the sparklog code (None if untyped), the message's first line,
    whether it was the transport (unreachable, cancelled, deadline) and whether it leaked internals."""

    code: str | None
    message: str
    transport: bool
    timed_out: bool
    leaked: bool

    @classmethod
    def of(cls, exc: BaseException) -> CallError:
        if isinstance(exc, SparklogError):  # raised on our side: a handshake refused, a broker out of reach
            transport = isinstance(exc, BrokerNotAvailable)
            return cls(
                code=None if transport else exc.code,
                message=f"{type(exc).__name__}: {str(exc)[:500]}",
                transport=transport,
                timed_out=False,
                leaked=False,
            )
        text = str(exc)
        match = _TYPED.search(text)
        timed_out = isinstance(exc, flight.FlightTimedOutError) or "Deadline Exceeded" in text
        transport = (
            timed_out
            or isinstance(exc, flight.FlightUnavailableError | flight.FlightCancelledError | ConnectionError)
            or "Socket closed" in text
            or "failed to connect" in text.lower()
        )
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return cls(
            code=match.group(1) if match else None,
            message=f"{type(exc).__name__}: {first[:500]}",
            transport=transport and not match,
            timed_out=timed_out and not match,
            leaked=bool(_INTERNALS.search(text)),
        )

    @property
    def typed(self) -> bool:
        return self.code is not None


def client(location: str) -> flight.FlightClient:
    return flight.FlightClient(location)


class Connector:
    """How calls reach the brokers, and as whom: anonymous over plaintext (``security`` left at
    :data:`~sparklog.security.client_config.PLAINTEXT`: a fresh client per call, closed after it),
    or a user over TLS and SASL (:func:`sparklog.protocol.wire.flight_client`: one handshake per broker, the
    client kept for the next calls, unless the call is ``dedicated``: one that will be dropped
    half-way, whose client is closed with it)."""

    def __init__(self, security: ClientSecurity = PLAINTEXT, name: str = "anonymous") -> None:
        self.security = security
        self.name = name
        self._kept: dict[str, flight.FlightClient] = {}

    @property
    def authenticated(self) -> bool:
        return self.security.sasl or self.security.tls

    def location(self, host: str, port: int) -> str:
        return self.security.location(host, port)

    def open(self, location: str, dedicated: bool = True) -> flight.FlightClient:
        """A client for ``location`` (:class:`SparklogError` when the handshake fails)."""
        if not self.authenticated:
            return client(location)
        if dedicated:
            return self._connect(location)
        kept = self._kept.get(location)
        if kept is None:
            kept = self._kept[location] = self._connect(location)
        return kept

    def _connect(self, location: str) -> flight.FlightClient:
        from sparklog.protocol.wire import flight_client

        return flight_client(location, own_connection=True, security=self.security)

    def release(self, c: flight.FlightClient, dedicated: bool = True) -> None:
        """The call is over: close its client unless it is a kept one."""
        if dedicated or not self.authenticated:
            c.close()

    def forget(self, location: str | None = None) -> None:
        """Close the kept client of ``location`` (every kept one if None): the next call connects again."""
        for where in [location] if location is not None else list(self._kept):
            kept = self._kept.pop(where, None)
            if kept is not None:
                with contextlib.suppress(Exception):
                    kept.close()


ANONYMOUS = Connector()


def options(timeout: float, compression: str | None = None) -> flight.FlightCallOptions:
    if compression:
        return flight.FlightCallOptions(timeout=timeout, write_options=pa.ipc.IpcWriteOptions(compression=compression))
    return flight.FlightCallOptions(timeout=timeout)


# ----------------------------------------------------------------------------------- produce
@dataclasses.dataclass
class PutResult:
    acks: list[bytes | None]  # put metadata read after each batch (None: none came)
    error: CallError | None = None
    written: int = 0  # batches written before the error


Write = Callable[[flight.FlightStreamWriter], None]


def put(
    location: str,
    descriptor: bytes,
    frames: list[bytes | None],
    read_acks: bool,
    timeout: float = CALL_TIMEOUT_S,
    abandon: str | None = None,
    via: Connector = ANONYMOUS,
) -> PutResult:
    """A produce ``do_put`` as the wire says: the stream declares the empty schema
    (:data:`~sparklog.protocol.record_frames.FRAMED`) and each of ``frames`` travels as a Flight
    message's app metadata (None: a Flight message without one, a record batch of the empty
    schema); one put metadata message read per frame if ``read_acks``. ``abandon``:
    ``before_write`` opens the stream and drops it; ``after_write`` drops it after the first frame
    without reading or finishing; ``mid_stream`` after reading the first ack."""

    def write(data: bytes | None) -> Write:
        if data is None:
            return lambda writer: writer.write_batch(pa.RecordBatch.from_pylist([{}], schema=FRAMED))
        return lambda writer: writer.write_metadata(pa.py_buffer(data))

    return _put(location, descriptor, FRAMED, [write(f) for f in frames], read_acks, options(timeout), abandon, via)


def put_batches(
    location: str,
    descriptor: bytes,
    batches: list[pa.RecordBatch],
    metadata: list[bytes | None],
    read_acks: bool,
    compression: str | None = None,
    timeout: float = CALL_TIMEOUT_S,
    abandon: str | None = None,
    via: Connector = ANONYMOUS,
) -> PutResult:
    """The produce wire before frames (every broker must refuse it): the stream declares the
    batches' schema and they travel as Flight record batches (Flight's reader decodes them, and
    decompresses them with ``compression``), each with its app metadata."""

    def write(batch: pa.RecordBatch, meta: bytes | None) -> Write:
        if meta is None:
            return lambda writer: writer.write_batch(batch)
        return lambda writer: writer.write_with_metadata(batch, pa.py_buffer(meta))

    writes = [write(b, m) for b, m in zip(batches, metadata, strict=True)]
    return _put(location, descriptor, batches[0].schema, writes, read_acks, options(timeout, compression), abandon, via)


def _put(
    location: str,
    descriptor: bytes,
    schema: pa.Schema,
    writes: list[Write],
    read_acks: bool,
    call_options: flight.FlightCallOptions,
    abandon: str | None,
    via: Connector,
) -> PutResult:
    result = PutResult(acks=[])
    dedicated = abandon is not None
    try:
        c = via.open(location, dedicated)
    except Exception as exc:
        result.error = CallError.of(exc)
        return result
    writer: flight.FlightStreamWriter | None = None
    try:
        writer, reader = c.do_put(flight.FlightDescriptor.for_command(descriptor), schema, call_options)
        if abandon == "before_write":
            return result
        for write in writes:
            write(writer)
            result.written += 1
            if abandon == "after_write":
                return result
            if read_acks:
                buf = reader.read()
                result.acks.append(None if buf is None else buf.to_pybytes())
            if abandon == "mid_stream":
                return result
        writer.done_writing()
        closing, writer = writer, None
        closing.close()
    except Exception as exc:  # every failure is an outcome
        result.error = CallError.of(exc)
        if writer is not None:  # the call's own error comes with closing (a write sees a closed stream)
            try:
                writer.close()
            except Exception as closed:
                if CallError.of(closed).typed or not result.error.typed:
                    result.error = CallError.of(closed)
            writer = None
    finally:
        via.release(c, dedicated)  # an abandoned stream is cancelled here, then its writer is dropped quietly
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
    return result


# ----------------------------------------------------------------------------------- fetch
@dataclasses.dataclass
class GetResult:
    batches: list[pa.RecordBatch]
    metadata: list[bytes | None]
    error: CallError | None = None
    invalid: str | None = None  # why a received batch failed Arrow's full validation


def get(
    location: str, ticket: bytes, timeout: float = CALL_TIMEOUT_S, read: str = "all", via: Connector = ANONYMOUS
) -> GetResult:
    """``do_get`` with ``ticket``: read every message (``all``), only the first (``first``, then
    drop the stream) or none (``none``: open and drop). Each received batch is fully validated."""
    result = GetResult(batches=[], metadata=[])
    dedicated = read != "all"
    try:
        c = via.open(location, dedicated)
    except Exception as exc:
        result.error = CallError.of(exc)
        return result
    reader: flight.FlightStreamReader | None = None
    finished = False
    try:
        reader = c.do_get(flight.Ticket(ticket), options(timeout))
        if read == "none":
            return result
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                finished = True
                break
            if chunk.data is not None:
                try:
                    chunk.data.validate(full=True)
                except pa.ArrowException as exc:
                    result.invalid = f"{type(exc).__name__}: {str(exc)[:300]}"
                    return result
                result.batches.append(chunk.data)
            result.metadata.append(None if chunk.app_metadata is None else chunk.app_metadata.to_pybytes())
            if read == "first":
                return result
    except Exception as exc:
        result.error = CallError.of(exc)
        finished = True
    finally:
        if reader is not None and not finished and not dedicated:  # a kept client: end the stream here
            with contextlib.suppress(Exception):
                reader.cancel()
        via.release(c, dedicated)
    return result


# ----------------------------------------------------------------------------------- actions
@dataclasses.dataclass
class ActionResult:
    bodies: list[bytes]
    error: CallError | None = None

    def json(self) -> Any:
        return json.loads(self.bodies[0]) if self.bodies else None


def action(
    location: str, name: str, body: bytes, timeout: float = CALL_TIMEOUT_S, via: Connector = ANONYMOUS
) -> ActionResult:
    result = ActionResult(bodies=[])
    try:
        c = via.open(location, dedicated=False)
    except Exception as exc:
        result.error = CallError.of(exc)
        return result
    try:
        for item in c.do_action(flight.Action(name, body), options(timeout)):
            result.bodies.append(item.body.to_pybytes())
    except Exception as exc:
        result.error = CallError.of(exc)
    finally:
        via.release(c, dedicated=False)
    return result


def ping(location: str, timeout: float = 5.0, via: Connector = ANONYMOUS) -> int | None:
    """The broker id a ping answers, or None."""
    result = action(location, "ping", b"{}", timeout, via)
    try:
        return int(result.json()["broker_id"]) if result.error is None else None
    except (ValueError, KeyError, TypeError):
        return None


def list_offsets(
    location: str, topic: str, partition: int, timeout: float = 10.0, via: Connector = ANONYMOUS
) -> dict[str, Any] | CallError:
    body = json.dumps({"topic": topic, "partition": partition}).encode()
    result = action(location, "list_offsets", body, timeout, via)
    if result.error is not None:
        return result.error
    return dict(result.json())


# ----------------------------------------------------------------------------------- abandoned calls
@contextlib.contextmanager
def held_clients(count: int) -> Iterator[list[flight.FlightClient]]:
    """``count`` clients to open calls on; all closed (calls dropped) on exit."""
    made: list[flight.FlightClient] = []
    try:
        yield made
    finally:
        for c in made:
            with contextlib.suppress(Exception):
                c.close()


def abandon_streams(
    location: str,
    call: str,
    ticket: bytes,
    descriptor: bytes,
    schema: pa.Schema,
    count: int,
    via: Connector = ANONYMOUS,
) -> int:
    """Open ``count`` calls of one sort and drop them without finishing (the client goes away):
    ``get_*`` opens a fetch (``get_unread`` reads nothing, the others their first message; a
    long-poll or following ticket keeps the broker busy after the client left); ``put`` writes
    one frame (a batch of ``schema``, which ``descriptor`` names) and leaves; ``action_copy`` is
    started on a thread and abandoned at a short deadline.
    Returns how many calls were opened."""
    opened = 0
    writers: list[flight.FlightStreamWriter] = []
    with held_clients(count) as clients:
        for _ in range(count):
            try:
                c = via.open(location, dedicated=True)
            except Exception:  # a refused handshake: no call to abandon
                continue
            clients.append(c)
            try:
                if call.startswith("get"):
                    # a long poll answers nothing until its wait ends: the client gives up at once
                    reader = c.do_get(flight.Ticket(ticket), options(0.5 if call == "get_unread" else 0.05))
                    if call != "get_unread":
                        with contextlib.suppress(Exception):
                            reader.read_chunk()
                elif call == "put":  # ``descriptor`` names ``schema``; one frame written
                    writer, _reader = c.do_put(flight.FlightDescriptor.for_command(descriptor), FRAMED, options(2.0))
                    writers.append(writer)
                    batch = pa.RecordBatch.from_pylist([{"key": b"k", "value": b"abandoned"}], schema=schema)
                    writer.write_metadata(frame(batch))
                else:
                    with contextlib.suppress(Exception):
                        list(c.do_action(flight.Action("copy_records", descriptor), options(0.05)))
                opened += 1
            except Exception:  # an abandoned call's error is not an outcome
                continue
    for writer in writers:  # after their clients closed: the calls are cancelled, not finished
        with contextlib.suppress(Exception):
            writer.close()
    return opened


# ----------------------------------------------------------------------------------- raw bytes
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def garbage_payload(mode: str, nbytes: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()
    if mode == "h2_preface":
        return _H2_PREFACE + noise
    if mode == "h2_frames":  # frame headers with absurd lengths and types after a settings frame
        frames = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # empty SETTINGS
        for _ in range(max(1, nbytes // 64)):
            length = int(rng.integers(0, 1 << 24))
            frames += length.to_bytes(3, "big") + bytes([int(rng.integers(0, 12)), int(rng.integers(0, 256))])
            frames += (
                int(rng.integers(0, 1 << 31)).to_bytes(4, "big") + rng.integers(0, 256, 55, dtype=np.uint8).tobytes()
            )
        return _H2_PREFACE + frames
    if mode == "http1":
        return (
            b"POST /arrow.flight.protocol.FlightService/DoPut HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n"
            + noise
        )
    if mode == "tls_hello":
        return b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + noise
    if mode == "connect_only":
        return b""
    return noise


def send_garbage(port: int, payload: bytes, hold_s: float) -> str:
    """Connect, send ``payload``, wait ``hold_s``, close; what the broker did (bytes back or not)."""
    try:
        with socket.create_connection((HOST, port), timeout=2.0) as sock:
            if payload:
                sock.sendall(payload)
            deadline = time.monotonic() + hold_s
            got = 0
            sock.settimeout(0.05)
            while time.monotonic() < deadline:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                got += len(data)
            return f"received {got} bytes"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
