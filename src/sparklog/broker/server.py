"""The broker's Arrow Flight service: produce (``do_put``), fetch (``do_get``), and actions.

The contract is in :mod:`sparklog.wire`. Every error leaves as a typed Flight error; an error the
broker did not expect is logged here with its traceback and leaves as a short
``UNKNOWN_SERVER_ERROR`` (no source paths or internals on the wire). Garbage on the port is gRPC's
to refuse; nothing a request does can corrupt a stored log (the log validates every batch fully
before it touches a file, :mod:`sparklog.broker.log.batch_validation`). Each client address may
have ``max_calls_per_ip`` calls open at once (:mod:`sparklog.broker.call_limits`), and a waiting
fetch notices within a second that its client went away.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from sparklog import fetch_columns, wire
from sparklog.broker.call_authorization import Acl, AnyOf, AsReplica, Call, Need, call_type, needs
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP, MIDDLEWARE_KEY, CallLimits, admit
from sparklog.broker.call_permissions import TOPIC, CallPermissions, permissions, principal
from sparklog.broker.consumer_messages import _coalesced as _coalesced  # tests use it from here
from sparklog.broker.consumer_messages import consumer_messages
from sparklog.broker.fetch_follower import FetchFollower, next_offset
from sparklog.broker.lake.union_read import from_lake
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.multi_fetch_server import MultiFetchResponse
from sparklog.broker.offset_requests import OffsetRequests
from sparklog.broker.produce_request import ProduceRequestStream, append_produced, record_batches
from sparklog.broker.record_copy import copy_records
from sparklog.broker.replication.fetch_request import ENVELOPE, REPLICA_FETCH
from sparklog.broker.replication.replica_fetch_server import ReplicaFetchResponse
from sparklog.broker.request_fields import int_field, topic_field
from sparklog.broker.throttle import Kind
from sparklog.broker.typed_values import ConsumerView
from sparklog.errors import (
    InvalidRequest,
    NotLeader,
    RecordTooLarge,
    SparklogError,
    UnknownServerError,
)
from sparklog.multi_fetch import FETCH_MANY
from sparklog.security.acls import Operation
from sparklog.security.authorizer import Authorizer
from sparklog.security.replica_guard import ReplicaGuard
from sparklog.security.scram import CredentialVersions

if TYPE_CHECKING:
    from sparklog.broker.cluster_requests import ClusterRequests
    from sparklog.broker.lake.union_read import UnionRead
    from sparklog.broker.partition import Partition
    from sparklog.broker.replication.fetch_session import FetchSessionCache
    from sparklog.broker.replication.partition_changes import PartitionChanges
    from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ListenerTls:
    """A TLS listener's certificate and key (PEM), and with mutual TLS the CA clients' certificates
    must chain to."""

    certificate: bytes
    key: bytes
    client_ca: bytes | None = None


MAX_FETCH_BYTES = 64 << 20
MAX_WAIT_MS = 30_000


@contextlib.contextmanager
def _errors_as_flight(what: str) -> Iterator[None]:
    """Errors of a request as the Flight errors a client turns back into typed ones: sparklog's own
    as they are; running out of memory for a request as RECORD_TOO_LARGE; anything unexpected
    logged here (with its traceback) and sent as a short UNKNOWN_SERVER_ERROR."""
    try:
        yield
    except SparklogError as exc:
        raise wire.to_flight_error(exc) from None
    except flight.FlightError:
        raise  # gRPC's own (a cancelled call, a broken stream): nothing of ours in it
    except (MemoryError, pa.ArrowMemoryError):
        log.warning("%s needed more memory than the broker could allocate", what)
        raise wire.to_flight_error(RecordTooLarge(f"{what} needed more memory than the broker has")) from None
    except Exception as exc:
        log.exception("unexpected error in %s", what)
        error = UnknownServerError(f"the broker failed on {what} ({type(exc).__name__}); details are in its log")
        raise wire.to_flight_error(error) from None


def _guarded(what: str, items: Iterator[Any]) -> Iterator[Any]:
    """A response generator whose errors leave as :func:`_errors_as_flight` sends them."""
    with _errors_as_flight(what):
        yield from items


def _parse(data: bytes | Any) -> dict[str, Any]:
    try:
        request = wire.decode(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"request is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise InvalidRequest("request JSON is nested too deeply") from None
    if not isinstance(request, dict):
        raise InvalidRequest("request must be a JSON object")
    return request


class ServedBroker(Protocol):
    """What the Flight service needs of its broker (:class:`~sparklog.broker.broker.Broker`, or a
    fake): the partitions it leads, what waiting fetches wait on, the followers' fetch sessions,
    the lake's union read, the typed topics' schemas and the cluster actions' answers."""

    broker_id: int
    changes: PartitionChanges
    fetch_sessions: FetchSessionCache
    full_look_s: float
    union_read: UnionRead
    cluster_requests: ClusterRequests | None

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...

    @property
    def value_schemas(self) -> Mapping[str, Sequence[ValueSchema]]: ...

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition: ...


class CallThrottle(Protocol):
    """Client quotas (:class:`~sparklog.broker.throttle.Throttle`): the seconds a call must wait."""

    def delay(self, principal: str, kind: Kind, amount: float) -> float: ...


Throttled = Callable[[Kind, float], float]  # (kind, amount) -> the seconds the call was made to wait
ActionHandler = Callable[[dict[str, Any], CallPermissions, Throttled], dict[str, Any]]


def _unthrottled(_kind: Kind, _amount: float) -> float:
    return 0.0


def _throttled_messages(messages: Iterator[Any], throttled: Throttled) -> Iterator[Any]:
    """A consumer fetch's messages, each sent once its bytes are within the consumer byte rate."""
    for message in messages:
        throttled("fetch", message[0].get_total_buffer_size())
        yield message


def _checked_messages(messages: Iterator[Any], check: Callable[[], None]) -> Iterator[Any]:
    """A consumer fetch's messages, each sent only if the caller may still read (an open stream
    ends with the authorization error as soon as its Read ACL goes or its session ends, however
    long it stays open); checked once more at the end, so a stream its wait ended for a
    revocation (:func:`_gone_or_revoked`) ends with the error too."""
    for message in messages:
        check()
        yield message
    check()


def _gone_or_revoked(context: flight.ServerCallContext, check: Callable[[], None]) -> Callable[[], bool]:
    """What a waiting fetch asks every ``WAIT_SLICE_S``: its client went away, or it may no longer
    read (so a revocation ends an idle stream within about a second, not at its next record)."""

    def gone() -> bool:
        if context.is_cancelled():
            return True
        try:
            check()
        except SparklogError:
            return True
        return False

    return gone


class BrokerServer(flight.FlightServerBase):
    """Serves one broker's partitions over Arrow Flight, on one of its listeners."""

    def __init__(
        self,
        broker: ServedBroker,
        location: str,
        max_calls_per_ip: int = DEFAULT_MAX_CALLS_PER_IP,
        tls: ListenerTls | None = None,
        auth_handler: flight.ServerAuthHandler | None = None,
        replica_guard: ReplicaGuard | None = None,
        authorizer: Authorizer | None = None,
        throttle: CallThrottle | None = None,
        sessions: CredentialVersions | None = None,
    ) -> None:
        """``tls``: the listener's certificate (and the CA client certificates must chain to, for
        mutual TLS); ``auth_handler``: SASL on this listener; ``replica_guard``: who may fetch as a
        replica (None: anyone, the single-host default); ``authorizer``: ACLs checked on every call
        (None: every call may do everything); ``throttle``: client quotas (None: none);
        ``sessions``: the users' credential versions a SASL session is checked against at each
        call and each message of an open stream."""
        self.limits = CallLimits(max_calls_per_ip)
        options: dict[str, Any] = {}
        if tls is not None:
            options["tls_certificates"] = [flight.CertKeyPair(tls.certificate, tls.key)]
            if tls.client_ca is not None:
                options["verify_client"] = True
                options["root_certificates"] = tls.client_ca
        super().__init__(location, auth_handler=auth_handler, middleware={MIDDLEWARE_KEY: self.limits}, **options)
        self.broker = broker
        self.replica_guard = replica_guard
        self.authorizer = authorizer
        self.throttle = throttle
        self.sessions = sessions
        self.sasl = auth_handler is not None  # else a caller is named by its client certificate, if any
        self.stopping = False
        offsets = OffsetRequests(broker.leader_partition, broker.union_read)
        # the broker's own actions (what each needs was checked before: call_authorization);
        # the cluster actions are answered by ``broker.cluster_requests``
        self._actions: dict[str, ActionHandler] = {
            wire.PING: lambda _request, _may, _throttled: {"broker_id": broker.broker_id},
            wire.LIST_OFFSETS: lambda request, may, _throttled: offsets.list_offsets(request, may),
            wire.OFFSETS_FOR_LEADER_EPOCH: lambda request, _may, _throttled: offsets.leader_epoch_end(request),
            wire.COPY_RECORDS: self._copy_records,
        }

    def _may(self, context: flight.ServerCallContext) -> CallPermissions:
        return permissions(context, self.authorizer, self.sasl, self.sessions)

    def _authorize(
        self, context: flight.ServerCallContext, call: Call, request: dict[str, Any], action: str = ""
    ) -> tuple[CallPermissions, Callable[[], None]]:
        """Refuses the call unless its caller has everything its row of the call table needs
        (:mod:`sparklog.broker.call_authorization`); the caller's permissions, and what checks the
        same again (an open stream's, before each message)."""
        may = self._may(context)
        needed = needs(call, call_type(call, request, action), request)

        def enforce() -> None:
            may.check_session()
            for need in needed:
                self._enforce(context, may, need)

        enforce()
        return may, enforce

    def _enforce(self, context: flight.ServerCallContext, may: CallPermissions, need: Need) -> None:
        if isinstance(need, Acl):
            may.check(need.operation, need.resource_type, need.name)
        elif isinstance(need, AnyOf):
            if not any(may.allowed(o.operation, o.resource_type, o.name) for o in need.options):
                last = need.options[-1]
                may.check(last.operation, last.resource_type, last.name)
        elif isinstance(need, AsReplica):
            if self.replica_guard is not None:
                self.replica_guard.check(principal(context, self.sasl), need.replica_id)
        else:  # a new kind of need nobody taught the server: refuse rather than allow
            raise InvalidRequest(f"the broker cannot check {need!r:.100}")

    def _throttler(self, context: flight.ServerCallContext) -> Throttled:
        """What makes this call wait while its principal is over a quota (Kafka delays the response):
        ``throttled(kind, amount)`` sleeps on the call's thread and returns the seconds it slept."""
        throttle = self.throttle
        if throttle is None:
            return _unthrottled
        who = principal(context, self.sasl)

        def throttled(kind: Kind, amount: float) -> float:
            delay = throttle.delay(who, kind, amount)
            end = time.monotonic() + delay
            while delay > 0 and not self.stopping and not context.is_cancelled():
                left = end - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.5))
            return delay

        return throttled

    def begin_shutdown(self) -> None:
        """Refuse new work and end long polls now (``shutdown()`` waits for running calls)."""
        self.stopping = True
        self.broker.changes.notify_all()
        for partition in list(self.broker.partitions.values()):
            with partition.changed:
                partition.changed.notify_all()

    # ----------------------------------------------------------------- produce
    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        with _errors_as_flight("a produce request"):
            admit(context)
            request = _parse(descriptor.command)
            acks = str(request.get("acks", "1"))
            if acks not in ("0", "1", "all", "-1"):
                raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
            acks = "all" if acks == "-1" else acks
            may, recheck = self._authorize(context, Call.PUT, request)
            throttled = self._throttler(context)
            throttled("request", 1)
            if request.get("type") == wire.PRODUCE_MANY:
                stream = ProduceRequestStream(self.broker, acks, lambda: self.stopping)
                stream.serve(
                    reader,
                    writer,
                    lambda topic: may.check(Operation.WRITE, TOPIC, topic),
                    lambda size: throttled("produce", size),
                    recheck,  # the row needs nothing more: the session
                )
                return
            topic, p = topic_field(request), int_field(request, "partition")
            producer_id = int_field(request, "producer_id", -1)
            sequence = int_field(request, "first_sequence", -1)
            writer_version = request.get("schema_version")
            if writer_version is not None and not isinstance(writer_version, int):
                raise InvalidRequest(f"'schema_version' must be an integer, got {writer_version!r}")
            self.broker.leader_partition(topic, p, for_write=True)
            for data, metadata in record_batches(reader):
                recheck()  # an open stream: the caller may still write, its session still holds
                throttled("produce", data.get_total_buffer_size())
                if self.stopping:
                    raise NotLeader(f"broker {self.broker.broker_id} is shutting down")
                if metadata is not None and metadata.size:
                    sequence = int_field(_parse(metadata), "sequence", -1)  # per batch (idempotence)
                partition = self.broker.leader_partition(topic, p, for_write=True)
                value_schemas = self.broker.value_schemas.get(topic)
                info = append_produced(partition, data, value_schemas, writer_version, acks, producer_id, sequence)
                if sequence >= 0:
                    sequence += data.num_rows
                if acks != "0":
                    result = {"base_offset": info.base_offset, "last_offset": info.last_offset, "count": info.count}
                    writer.write(pa.py_buffer(wire.encode(result)))

    # ----------------------------------------------------------------- fetch
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        with _errors_as_flight("a fetch request"):
            admit(context)
            request = _parse(ticket.ticket)
            may, recheck = self._authorize(context, Call.GET, request)
            if request.get("type") == REPLICA_FETCH:
                return self._replica_fetch(request, context)
            throttled = self._throttler(context)
            if request.get("type") == FETCH_MANY:
                throttled("request", 1)
                return self._multi_fetch(request, context, throttled, recheck)
            topic, p = topic_field(request), int_field(request, "partition")
            offset = int_field(request, "offset")
            max_bytes = min(max(int_field(request, "max_bytes", 8 << 20), 1), MAX_FETCH_BYTES)
            max_wait_ms = min(max(int_field(request, "max_wait_ms", 0), 0), MAX_WAIT_MS)
            replica_id = int_field(request, "replica_id", -1)  # -1 or a broker's own (checked)
            if replica_id < 0:
                throttled("request", 1)
            else:
                throttled = _unthrottled  # replicas are never throttled
            epoch = request.get("leader_epoch")
            fields = request.get("fields")
            if fields is not None and (
                not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields) or not fields
            ):
                raise InvalidRequest(f"'fields' must be a non-empty list of field paths, got {fields!r}")
            partition = self.broker.leader_partition(topic, p)
            plog = partition.log
            # a consumer's fetch below a lake-enabled partition's local log start reads its table
            read = plog.read_stored if replica_id >= 0 else functools.partial(self.broker.union_read.read, partition)
            upto = partition.fetch_range_end(replica_id, offset, epoch if isinstance(epoch, int) else None)
            stored = read(offset, max_bytes, upto=upto)
            gone = context.is_cancelled if replica_id >= 0 else _gone_or_revoked(context, recheck)
            if not stored and max_wait_ms > 0:
                partition.await_records(offset, max_wait_ms / 1000, replica_id >= 0, lambda: self.stopping, gone)
                upto = partition.fetch_range_end(replica_id, offset, epoch if isinstance(epoch, int) else None)
                stored = read(offset, max_bytes, upto=upto)
            value_schemas = self.broker.value_schemas.get(topic)
            if replica_id >= 0:
                # a follower copies stored batches as they are, one schema per fetch
                schema = stored[0][0].schema if stored else plog.schema
                stored = list(itertools.takewhile(lambda item: item[0].schema.equals(schema, True), stored))
                convert = None
            elif value_schemas:
                convert = ConsumerView(value_schemas, fields)
                schema = convert.schema
            elif fields:
                raise InvalidRequest(f"'fields' needs a typed topic; {topic!r} has no value schema")
            else:
                schema, convert = plog.schema, None
            compact = request.get("compact") is True and replica_id < 0
            plan = fetch_columns.plan([batch for batch, _ in stored]) if compact else fetch_columns.PLAIN
            schema = plan.sent_schema(schema)
            follower = None
            if request.get("follow") is True and replica_id < 0 and stored and not from_lake(stored, offset, plog):
                follower = FetchFollower(
                    partition,
                    max_bytes,
                    max_wait_ms,
                    plan.elision if compact else None,
                    value_schemas,
                    lambda: self.broker.value_schemas.get(topic),
                    lambda: self.stopping,
                    gone,
                )
            responses = self._fetch_stream(partition, stored, schema, convert, replica_id >= 0, plan, follower)
            if throttled is not _unthrottled:
                responses = _throttled_messages(responses, throttled)
            if replica_id < 0:
                responses = _checked_messages(responses, recheck)
            return flight.GeneratorStream(schema, _guarded("a fetch response", responses))

    def _replica_fetch(self, request: dict[str, Any], context: flight.ServerCallContext) -> flight.FlightDataStream:
        """A follower broker's fetch of every partition it follows here (``broker.replication``)."""
        response = ReplicaFetchResponse(
            self.broker.leader_partition,
            self.broker.changes,
            lambda: self.stopping,
            context.is_cancelled,
            self.broker.fetch_sessions,
            self.broker.full_look_s,
        )
        return flight.GeneratorStream(ENVELOPE, _guarded("a replica fetch", response.messages(request)))

    def _multi_fetch(
        self,
        request: dict[str, Any],
        context: flight.ServerCallContext,
        throttled: Throttled,
        recheck: Callable[[], None],
    ) -> flight.FlightDataStream:
        """A consumer's fetch of many partitions of one topic, one stream (``sparklog.multi_fetch``)."""
        response = MultiFetchResponse(
            self.broker.leader_partition,
            self.broker.union_read.read,
            self.broker.changes,
            self.broker.value_schemas.get,
            lambda: self.stopping,
            _gone_or_revoked(context, recheck),
        )
        schema, messages = response.open(request)
        if throttled is not _unthrottled:
            messages = _throttled_messages(messages, throttled)
        messages = _checked_messages(messages, recheck)
        return flight.GeneratorStream(schema, _guarded("a multi-partition fetch", messages))

    @staticmethod
    def _fetch_stream(
        partition: Partition,
        stored: list[tuple[pa.RecordBatch, BatchHeader]],
        schema: pa.Schema,
        convert: Any,
        replica: bool,
        plan: fetch_columns.ResponsePlan,
        follower: FetchFollower | None,
    ) -> Any:
        """Batches with per-batch metadata: the high watermark and log start (and, for a follower,
        the batch's stored header; for a compact consumer fetch, what rebuilds the columns left
        out); an empty batch carries them when there is no data. With a ``follower``, the later
        responses of a following fetch come after the first."""
        positions = {"hw": partition.high_watermark, "lso": partition.log.log_start_offset}
        if not stored:
            yield pa.RecordBatch.from_pylist([], schema=schema), pa.py_buffer(wire.encode(positions))
            return
        if replica:  # a follower gets the stored batches as they are, each with its header
            for batch, header in stored:
                yield batch, pa.py_buffer(wire.encode({**positions, "h": header.encode(crc=b"00000000")}))
            return
        while True:
            shared = pa.py_buffer(wire.encode(positions))  # unless a message needs more, all carry the same
            for batch, extra in consumer_messages(stored, schema, convert, plan):
                yield batch, pa.py_buffer(wire.encode({**positions, **extra})) if extra else shared
            if follower is None or (more := follower.next_response(next_offset(stored))) is None:
                return
            stored, plan = more
            positions = {"hw": partition.high_watermark, "lso": partition.log.log_start_offset}

    # ----------------------------------------------------------------- actions
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        with _errors_as_flight(f"action {action.type!r}"[:80]):
            admit(context)
            request = _parse(action.body.to_pybytes()) if action.body.size else {}
            may, _ = self._authorize(context, Call.ACTION, request, action.type)
            replica = action.type == wire.OFFSETS_FOR_LEADER_EPOCH and request.get("replica_id", -1) != -1
            throttled = _unthrottled if replica else self._throttler(context)  # replicas are never throttled
            throttled("request", 1)
            handler = self._actions.get(action.type)
            if handler is not None:
                result = handler(request, may, throttled)
            elif self.broker.cluster_requests is not None and action.type in self.broker.cluster_requests.actions:
                result = self.broker.cluster_requests.answer(action.type, request, may)
            else:
                raise InvalidRequest(f"action {action.type!r:.100} is not served by this broker")
        return iter([wire.encode(result)])

    def _copy_records(self, request: dict[str, Any], _may: CallPermissions, throttled: Throttled) -> dict[str, Any]:
        if self.stopping:
            raise NotLeader(f"broker {self.broker.broker_id} is shutting down")
        return copy_records(self.broker, request, lambda size: throttled("produce", size))

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [
            (wire.PING, "broker id"),
            (wire.LIST_OFFSETS, "log start/end offsets, high watermark, offset for a time"),
            (wire.OFFSETS_FOR_LEADER_EPOCH, "where an epoch ends in the leader's log (follower truncation)"),
            (wire.COPY_RECORDS, "copy offset ranges to partitions this broker leads (idempotent)"),
            *((name, "cluster metadata, group offsets, topic administration") for name in wire.CLUSTER_ACTIONS),
        ]
