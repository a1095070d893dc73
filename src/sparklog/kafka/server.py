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

A listener's security (:mod:`sparklog.kafka.listener_security`) decides who each connection is: TLS
is negotiated on the connection's own thread, a SASL login comes first
(:mod:`sparklog.kafka.session`: until it is done a frame may hold at most 512 KiB, Kafka's
``sasl.server.max.receive.size``), and every request is authorized by its API's row
(:mod:`sparklog.kafka.authorization`; an API without one is refused). Client quotas answer with
``throttle_time_ms`` and mute the connection that long, as Kafka does (KIP-219).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Protocol

from kafka.protocol.api_header import RequestHeader

from sparklog.errors import SessionEnded
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiHandler, ListenerState, Message, RequestContext
from sparklog.kafka.authorization import KAFKA_APIS, ApiPermissions
from sparklog.kafka.broker_access import KafkaBroker
from sparklog.kafka.coordinator import GroupCoordinator
from sparklog.kafka.handlers import HANDLERS, api_versions
from sparklog.kafka.listener_security import PLAINTEXT, SASL_MAX_RECEIVE_BYTES, ListenerSecurity, QuotaKind
from sparklog.kafka.session import ConnectionSession
from sparklog.security.certificates import certificate_name
from sparklog.security.principal import ANONYMOUS, USER_TYPE

log = logging.getLogger(__name__)

SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
MAX_HEADER_BYTES = 64 * 1024  # a request header (client id, tagged fields) is read from at most this much
TLS_HANDSHAKE_TIMEOUT_S = 10.0
PRODUCE, FETCH = 0, 1  # API keys whose bytes count against quotas
DEFAULT_MAX_CONNECTIONS_PER_IP = 1000
_FRAME = struct.Struct(">i")
_REQUEST_START = struct.Struct(">hhi")  # api key, api version, correlation id


class _CloseConnection(Exception):  # noqa: N818 - a signal inside the listener, never seen by a client
    """The request cannot be answered: the connection is closed, as Kafka closes it."""


class RequestMeter(Protocol):
    """Where a listener counts the requests it answers (the broker's metrics), once per request."""

    def request(self, listener: str, name: str, version: str = "", elapsed_s: float | None = None) -> None: ...

    def produce_request(
        self, listener: str, local_s: float, remote_s: float, throttle_s: float, total_s: float, version: int = -1
    ) -> None: ...

    def throttled(self, listener: str, user: str, seconds: float) -> None: ...


class KafkaListener:
    """One Kafka-protocol listener serving ``broker``'s partitions, secured as ``security`` says."""

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
        security: ListenerSecurity = PLAINTEXT,
        meter: RequestMeter | None = None,
    ) -> None:
        """``meter``: counts and times each request answered, by API name and version (None: none).
        ``groups``: the broker's classic group coordinator, one for all its Kafka listeners
        (which stop together: the first to stop stops it); by default the listener's own.
        ``auto_create_topics``: Kafka's ``auto.create.topics.enable`` (a Metadata request that
        allows it creates the unknown topics it names, with the default partitions and replicas)."""
        self.broker = broker
        self.host = host
        self.handlers = dict(handlers)
        self.max_request_bytes = max_request_bytes
        self.max_connections_per_ip = max_connections_per_ip
        self.security = security
        self.meter = meter
        specs = tuple(h.spec for h in self.handlers.values())
        self.state = ListenerState(specs, auto_create_topics=auto_create_topics, protocol=security.protocol)
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
            conn, principal = self._secure(conn)
            conn.settimeout(None)
            session = ConnectionSession(principal, self.security.sasl)
            while not self._stopping.is_set():
                payload = self._read_frame(conn, session)
                if payload is None:
                    return
                response, mute_s = self.dispatch(payload, peer, lambda: _client_gone(conn), session)
                if response is not None:
                    conn.sendall(response.payload)
                    if response.close_after:
                        raise _CloseConnection(response.close_after)
                if mute_s > 0 and self._stopping.wait(mute_s):
                    return
        except _CloseConnection as exc:
            log.info("closing the Kafka connection from %s:%s: %s", peer[0], peer[1], exc)
        except ssl.SSLError as exc:
            log.info("TLS with %s:%s failed: %s", peer[0], peer[1], exc.reason or exc)
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

    def _secure(self, conn: socket.socket) -> tuple[socket.socket, str]:
        """The connection after TLS (when the listener has it), and who its transport says the
        client is: the client certificate's name, else ``User:ANONYMOUS``."""
        tls = self.security.tls
        if tls is None:
            return conn, ANONYMOUS
        conn.settimeout(TLS_HANDSHAKE_TIMEOUT_S)
        secured = tls.wrap_socket(conn, server_side=True)
        with self._lock:  # stop() shuts the socket it knows: the secured one from now on
            thread = self._connections.pop(conn, None)
            if thread is not None:
                self._connections[secured] = thread
        certificate = secured.getpeercert(binary_form=True)
        if not certificate:
            return secured, ANONYMOUS
        return secured, f"{USER_TYPE}:{certificate_name(ssl.DER_cert_to_PEM_cert(certificate).encode())}"

    def _read_frame(self, conn: socket.socket, session: ConnectionSession) -> memoryview | None:
        """The next request's bytes; None once the client closed the connection."""
        head = _read_exactly(conn, _FRAME.size)
        if head is None:
            return None
        (size,) = _FRAME.unpack(head)
        if not session.logged_in and size > SASL_MAX_RECEIVE_BYTES:
            raise _CloseConnection(
                f"a frame of {size} bytes before the SASL login (sasl.server.max.receive.size="
                f"{SASL_MAX_RECEIVE_BYTES}) is refused unread"
            )
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
        self,
        payload: memoryview,
        peer: tuple[str, int],
        client_gone: Callable[[], bool] = lambda: False,
        session: ConnectionSession | None = None,
    ) -> tuple[Answer | None, float]:
        """The answer to one request (None: none is due) and how long the connection is then muted
        (client quotas); ``_CloseConnection`` if it cannot be answered or the connection may not
        go on."""
        session = session if session is not None else ConnectionSession()
        began = time.monotonic()
        api_key, version, correlation_id = _REQUEST_START.unpack_from(payload)
        handler = self.handlers.get(api_key)
        if handler is None:
            raise _CloseConnection(f"unknown API key {api_key}")
        spec = handler.spec
        if not spec.min_version <= version <= spec.max_version:
            if api_key == api_versions.API.key:
                table = api_versions.answer(0, self.state.specs, error_codes.UNSUPPORTED_VERSION)
                return Answer(_encode(table, correlation_id)), 0.0
            raise _CloseConnection(
                f"{spec.name} version {version} is not served ({spec.min_version}-{spec.max_version})"
            )
        try:
            session.admit(api_key)
        except SessionEnded as exc:
            raise _CloseConnection(str(exc)) from None
        rule = KAFKA_APIS.get(api_key)
        if rule is None and self.security.authorizer is not None:
            raise _CloseConnection(f"{spec.name} has no row in the authorization table: refused")
        try:
            head = io.BytesIO(payload[:MAX_HEADER_BYTES])
            header = RequestHeader.decode(head, flexible=spec.request.flexible_version_q(version))
            request = spec.request.decode(payload[head.tell() :], version=version)
        except Exception as exc:  # whatever kafka-python raises on bytes that are not a request
            raise _CloseConnection(
                f"a malformed {spec.name} v{version} request ({type(exc).__name__}: {exc})"
            ) from None
        may = ApiPermissions(rule, self.security.authorizer, session.principal, peer[0])
        ctx = RequestContext(
            version,
            correlation_id,
            header.client_id,
            peer,
            self.broker,
            self.state,
            self.stopping,
            client_gone,
            may,
            session,
        )
        try:
            response = handler.handle(request, ctx)
        except _CloseConnection:
            raise
        except Exception:
            log.exception("%s v%s from %s failed", spec.name, version, peer[0])
            raise _CloseConnection(f"{spec.name} failed on the broker") from None
        mute_s = self._quota_delay(session.principal, api_key, len(payload))
        if response is None:  # acks=0: no answer, but the quota holds all the same
            self._metered(spec.name, version, ctx, time.monotonic() - began, mute_s)
            return (Answer(b"", "closed after a request with no answer due") if ctx.close_after else None), mute_s
        if mute_s > 0 and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = int(mute_s * 1000)
        encoded = _encode(response, correlation_id)
        if api_key == FETCH:
            mute_s = max(mute_s, self._quota_delay(session.principal, None, len(encoded)))
        self._metered(spec.name, version, ctx, time.monotonic() - began, mute_s)
        closing = f"{spec.name} answered with an error that ends the connection" if ctx.close_after else ""
        return Answer(encoded, closing), mute_s

    def _metered(self, api: str, version: int, ctx: RequestContext, elapsed_s: float, mute_s: float) -> None:
        """Count and time one answered request: its total with the connection's mute after it (as
        Kafka's TotalTimeMs holds its ThrottleTimeMs); a produce's local and remote parts too."""
        meter = self.meter
        if meter is None:
            return
        name = api.removesuffix("Request")
        if name == "Produce":
            meter.produce_request("kafka", elapsed_s - ctx.remote_s, ctx.remote_s, mute_s, elapsed_s + mute_s, version)
        else:
            meter.request("kafka", name, str(version), elapsed_s + mute_s)
        if mute_s > 0:
            meter.throttled("kafka", ctx.principal, mute_s)

    def _quota_delay(self, principal: str, api_key: int | None, size: int) -> float:
        """The seconds a request (``api_key``; None: a fetch's answer of ``size`` bytes) puts its
        principal over its quotas."""
        throttle = self.security.throttle
        if throttle is None:
            return 0.0
        kinds: list[tuple[QuotaKind, float]] = [("fetch", size)] if api_key is None else [("request", 1)]
        if api_key == PRODUCE:
            kinds.append(("produce", size))
        return max(throttle.delay(principal, kind, amount) for kind, amount in kinds)


@dataclasses.dataclass(frozen=True)
class Answer:
    """A framed response, and why the connection closes once it is sent (empty: it stays open)."""

    payload: bytes
    close_after: str = ""


def _encode(response: Message, correlation_id: int) -> bytes:
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def _client_gone(conn: socket.socket) -> bool:
    """Whether the client closed its side of the connection (an end of file waits to be read; a
    request it pipelined meanwhile is left to be read)."""
    try:  # the socket's own recv: a TLS socket's takes no flags, and an end of file is the same
        return socket.socket.recv(conn, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
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
