"""A broker's Kafka-protocol listener: accepts connections, reads size-prefixed request frames,
decodes each with kafka-python's classes generated from Kafka's JSON message schemas, hands it to
its API's handler and writes the response.

As in Kafka's ``SocketServer``, a connection's requests are answered one at a time in the order
they came (a client may pipeline them; the next is read once the previous one is answered), a
frame larger than ``socket.request.max.bytes`` is refused before it is read, and a request that
cannot be parsed (an unknown API key, a version not served, malformed bytes) closes its connection
(ApiVersions excepted: an unknown version is answered in version 0 with ``UNSUPPORTED_VERSION``
and the table, so a newer client can fall back). One thread serves each connection; a fetch
waiting for records holds only its own connection, as in Kafka.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Mapping

from kafka.protocol.api_header import RequestHeader

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiHandler, ListenerState, Message, RequestContext
from sparklog.kafka.broker_access import KafkaBroker
from sparklog.kafka.coordinator import GroupCoordinator
from sparklog.kafka.handlers import HANDLERS, api_versions

log = logging.getLogger(__name__)

SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
MAX_HEADER_BYTES = 64 * 1024  # a request header (client id, tagged fields) is read from at most this much
DEFAULT_MAX_CONNECTIONS_PER_IP = 1000
_FRAME = struct.Struct(">i")
_REQUEST_START = struct.Struct(">hhi")  # api key, api version, correlation id


class _CloseConnection(Exception):  # noqa: N818 - a signal inside the listener, never seen by a client
    """The request cannot be answered: the connection is closed, as Kafka closes it."""


class KafkaListener:
    """One Kafka-protocol listener (``PLAINTEXT``) serving ``broker``'s partitions."""

    def __init__(
        self,
        broker: KafkaBroker,
        host: str = "127.0.0.1",
        port: int = 0,
        handlers: Mapping[int, ApiHandler] = HANDLERS,
        max_request_bytes: int = SOCKET_REQUEST_MAX_BYTES,
        max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
        groups: GroupCoordinator | None = None,
        auto_create_topics: bool = True,
    ) -> None:
        """``groups``: the broker's classic group coordinator, one for all its Kafka listeners
        (which stop together: the first to stop stops it); by default the listener's own.
        ``auto_create_topics``: Kafka's ``auto.create.topics.enable`` (a Metadata request that
        allows it creates the unknown topics it names, with the default partitions and replicas)."""
        self.broker = broker
        self.host = host
        self.handlers = dict(handlers)
        self.max_request_bytes = max_request_bytes
        self.max_connections_per_ip = max_connections_per_ip
        specs = tuple(h.spec for h in self.handlers.values())
        self.state = ListenerState(specs, auto_create_topics=auto_create_topics)
        if groups is not None:
            self.state.groups = groups
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._per_ip: Counter[str] = Counter()
        self._socket = socket.create_server((host, port), reuse_port=False, backlog=128)
        self._socket.settimeout(0.5)
        self.port: int = self._socket.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"sparklog-kafka-{self.port}", daemon=True)

    def start(self) -> KafkaListener:
        self._acceptor.start()
        return self

    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop accepting, end every connection (a waiting fetch gives up, a JoinGroup or
        SyncGroup waiting for its group is answered), wait for their threads."""
        self._stopping.set()
        self.state.groups.stop()
        with contextlib.suppress(OSError):
            self._socket.close()
        with self._lock:
            connections = dict(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(grace_s)
        for thread in connections.values():
            thread.join(grace_s)

    # ----------------------------------------------------------------- connections
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by stop()
            ip = peer[0]
            with self._lock:
                if self._per_ip[ip] >= self.max_connections_per_ip:
                    log.warning("refusing a connection from %s: %d open (max.connections.per.ip)", ip, self._per_ip[ip])
                    conn.close()
                    continue
                self._per_ip[ip] += 1
                thread = threading.Thread(
                    target=self._serve, args=(conn, peer), name="sparklog-kafka-conn", daemon=True
                )
                self._connections[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            while not self._stopping.is_set():
                payload = self._read_frame(conn, peer)
                if payload is None:
                    return
                response = self.dispatch(payload, peer, lambda: _client_gone(conn))
                if response is not None:
                    conn.sendall(response)
        except _CloseConnection as exc:
            log.info("closing the Kafka connection from %s:%s: %s", peer[0], peer[1], exc)
        except OSError:
            pass  # the client went away, or stop() shut the socket
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._connections.pop(conn, None)
                self._per_ip[peer[0]] -= 1
                if self._per_ip[peer[0]] <= 0:
                    del self._per_ip[peer[0]]

    def _read_frame(self, conn: socket.socket, peer: tuple[str, int]) -> memoryview | None:
        """The next request's bytes; None once the client closed the connection."""
        head = _read_exactly(conn, _FRAME.size)
        if head is None:
            return None
        (size,) = _FRAME.unpack(head)
        if size < _REQUEST_START.size or size > self.max_request_bytes:
            raise _CloseConnection(
                f"a request of {size} bytes (socket.request.max.bytes={self.max_request_bytes}) is refused unread"
            )
        body = _read_exactly(conn, size)
        if body is None:
            raise _CloseConnection("the connection closed in the middle of a request")
        return body

    # ----------------------------------------------------------------- requests
    def dispatch(
        self, payload: memoryview, peer: tuple[str, int], client_gone: Callable[[], bool] = lambda: False
    ) -> bytes | None:
        """The framed response to one request (None: none is due); ``_CloseConnection`` if it cannot
        be answered."""
        api_key, version, correlation_id = _REQUEST_START.unpack_from(payload)
        handler = self.handlers.get(api_key)
        if handler is None:
            raise _CloseConnection(f"unknown API key {api_key}")
        spec = handler.spec
        if not spec.min_version <= version <= spec.max_version:
            if api_key == api_versions.API.key:
                table = api_versions.answer(0, self.state.specs, error_codes.UNSUPPORTED_VERSION)
                return _encode(table, correlation_id)
            raise _CloseConnection(
                f"{spec.name} version {version} is not served ({spec.min_version}-{spec.max_version})"
            )
        try:
            head = io.BytesIO(payload[:MAX_HEADER_BYTES])
            header = RequestHeader.decode(head, flexible=spec.request.flexible_version_q(version))
            request = spec.request.decode(payload[head.tell() :], version=version)
        except Exception as exc:  # whatever kafka-python raises on bytes that are not a request
            raise _CloseConnection(
                f"a malformed {spec.name} v{version} request ({type(exc).__name__}: {exc})"
            ) from None
        ctx = RequestContext(
            version, correlation_id, header.client_id, peer, self.broker, self.state, self.stopping, client_gone
        )
        try:
            response = handler.handle(request, ctx)
            return None if response is None else _encode(response, correlation_id)
        except _CloseConnection:
            raise
        except Exception:
            log.exception("%s v%s from %s failed", spec.name, version, peer[0])
            raise _CloseConnection(f"{spec.name} failed on the broker") from None


def _encode(response: Message, correlation_id: int) -> bytes:
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def _client_gone(conn: socket.socket) -> bool:
    """Whether the client closed its side of the connection (an end of file waits to be read; a
    request it pipelined meanwhile is left to be read)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _read_exactly(conn: socket.socket, size: int) -> memoryview | None:
    """``size`` bytes from ``conn``; None if it closed before the first byte."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return None
            raise _CloseConnection("the connection closed in the middle of a frame")
        got += n
    return view
