"""A raw Kafka-protocol connection for a client nobody should trust: requests encoded by
kafka-python's generated classes (``kafka.protocol``), or any bytes at all, and responses decoded
by them; every read bounded by a deadline.

What the broker did with a request is one of: answered (the response frame's bytes, decoded when
they decode), closed the connection (:data:`CLOSED`) or said nothing in time (:data:`SILENT`). The
fuzzer (:mod:`sparklog.fuzz.kafka_ops`) and the Kafka listener's tests use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import struct
from typing import Any

import scramp
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from sparklog.kafka.record_batch import BatchFields, encode_batch

CLOSED = "closed"  # the broker closed the connection (or reset it)
SILENT = "silent"  # no answer within the deadline
UNDECODABLE = "undecodable"  # an answer that is not the request's response
CLIENT_ID = "sparklog-fuzz"
_SIZE = struct.Struct(">i")


def client_tls(ca_location: str) -> ssl.SSLContext:
    """A TLS client context trusting the CA in ``ca_location`` (PEM), checking the broker's name."""
    return ssl.create_default_context(cafile=ca_location)


class KafkaWire:
    """One TCP connection to a Kafka listener (over TLS with ``tls``)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.timeout = timeout
        self.correlation_id = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sending
    def frame(self, request: Any, client_id: str | None = CLIENT_ID) -> bytes:
        """``request`` (a kafka-python request message, its version set) as one framed request
        with the next correlation id."""
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=client_id)
        return bytes(request.encode(header=True, framed=True))

    def send(self, request: Any) -> int:
        """Send a kafka-python request message (its version set); its correlation id."""
        self.sock.sendall(self.frame(request))
        return self.correlation_id

    def send_raw(self, payload: bytes) -> None:
        """Any bytes as one frame (size prefix added)."""
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)

    def send_bytes(self, data: bytes) -> bool:
        """Bytes as they are (no size prefix); False if the broker already closed the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    # ------------------------------------------------------------------ receiving
    def receive(self, timeout: float | None = None) -> bytes | str:
        """The next response frame's bytes, :data:`CLOSED` or :data:`SILENT` (within ``timeout``,
        default the connection's)."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            head = self._exactly(_SIZE.size)
            if head is None:
                return CLOSED
            (size,) = _SIZE.unpack(head)
            if size < 0:
                return CLOSED
            body = self._exactly(size)
            return CLOSED if body is None else body
        except TimeoutError:
            return SILENT
        except OSError:
            return CLOSED

    def exchange(self, request: Any, timeout: float | None = None) -> Answer:
        """Send ``request`` and read its response, decoded (same API and version) if it decodes."""
        version = request.API_VERSION
        try:
            self.send(request)
        except OSError:
            return Answer(None, CLOSED)
        payload = self.receive(timeout)
        if isinstance(payload, str):
            return Answer(None, payload)
        return decode_response(request.API_KEY, version, payload, self.correlation_id)

    def request(self, request: Any, timeout: float | None = None) -> Any:
        """Send ``request`` and return its decoded response (for tests: an AssertionError if there
        is none)."""
        answer = self.exchange(request, timeout)
        assert answer.response is not None, f"{request.name} v{request.API_VERSION}: {answer.problem}"
        return answer.response

    def login(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> Answer:
        """A SASL login as Kafka's clients do it (SaslHandshake v1, then SaslAuthenticate v2 with
        each message, SCRAM's computed by ``scramp``); the last answer (its error code says whether
        the login worked)."""
        handshake = self.exchange(SaslHandshakeRequest[1](mechanism=mechanism))
        if handshake.response is None or handshake.response.error_code:
            return handshake
        if mechanism == "PLAIN":
            return self.exchange(SaslAuthenticateRequest[2](auth_bytes=f"\0{user}\0{password}".encode()))
        client = scramp.ScramClient([mechanism], user, password)
        first = self.exchange(SaslAuthenticateRequest[2](auth_bytes=client.get_client_first().encode()))
        if first.response is None or first.response.error_code:
            return first
        client.set_server_first(bytes(first.response.auth_bytes).decode())
        final = self.exchange(SaslAuthenticateRequest[2](auth_bytes=client.get_client_final().encode()))
        if final.response is not None and not final.response.error_code:
            client.set_server_final(bytes(final.response.auth_bytes).decode())  # the broker's proof
        return final

    def closed_by_broker(self, timeout: float | None = None) -> bool:
        """Whether the broker closes the connection (reading until it does, or a timeout)."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except TimeoutError:
            return False
        except OSError:
            return True

    def _exactly(self, size: int) -> bytes | None:
        out = bytearray()
        while len(out) < size:
            chunk = self.sock.recv(min(size - len(out), 1 << 20))
            if not chunk:
                return None
            out += chunk
        return bytes(out)


@dataclasses.dataclass(frozen=True)
class Answer:
    """What came back for one request: its decoded response, or why there is none (:data:`CLOSED`,
    :data:`SILENT`, or a response that does not decode or answers another request)."""

    response: Any | None
    problem: str | None = None


def response_class(api_key: int, version: int) -> Any:
    """kafka-python's response class of an API (None for a key it does not know)."""
    found = ResponseClassRegistry._response_class_registry.get(api_key)
    return None if found is None else found[version]


def decode_response(api_key: int, version: int, payload: bytes, correlation_id: int | None = None) -> Answer:
    """A response frame's bytes (header included) decoded as the API's response in ``version``,
    answering ``correlation_id`` (if given)."""
    cls = response_class(api_key, version)
    if cls is None:
        return Answer(None, f"{UNDECODABLE}: no response class for API key {api_key}")
    try:
        response = cls.decode(payload, version=version, header=True)
    except Exception as exc:  # whatever kafka-python raises on bytes that are not a response
        return Answer(None, f"{UNDECODABLE}: API {api_key} v{version} ({type(exc).__name__}: {str(exc)[:200]})")
    got = response.header.correlation_id if response.header is not None else None
    if correlation_id is not None and got != correlation_id:
        return Answer(None, f"{UNDECODABLE}: a response to correlation id {got}, not {correlation_id}")
    return Answer(response)


def kafka_batch(
    values: list[bytes], keys: list[bytes | None] | None = None, timestamp_ms: int = 1_700_000_000_000
) -> bytes:
    """An uncompressed v2 record batch as a producer sends it (base offset 0)."""
    import pyarrow as pa

    n = len(values)
    records = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([timestamp_ms + i for i in range(n)], pa.int64()),
            "key": pa.array(keys if keys is not None else [None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    return encode_batch(records, BatchFields(0))
