"""The broker's Arrow Flight service: produce (``do_put``), fetch (``do_get``), and actions.

The contract is in :mod:`sparklog.protocol.wire`. The server admits a call (each client address may have
``max_calls_per_ip`` calls open at once, :mod:`sparklog.broker.call_limits`), authorizes it by its
row of the call table (:mod:`sparklog.broker.call_authorization`), and hands it to its handler by
type: :mod:`~sparklog.broker.produce_handler`, :mod:`~sparklog.broker.fetch_handler`, the offset
actions (:mod:`~sparklog.broker.offset_requests`), ``copy_records`` and the cluster actions
(:mod:`~sparklog.broker.cluster_requests`). Every error leaves as a typed Flight error
(:mod:`~sparklog.broker.flight_errors`). Garbage on the port is gRPC's to refuse; nothing a request
does can corrupt a stored log (the log validates every batch fully before it touches a file,
:mod:`sparklog.broker.log.batch_validation`), and a waiting fetch notices within a second that its
client went away.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow.flight as flight

from sparklog.broker import fetch_handler, produce_handler
from sparklog.broker.call_authorization import FETCH, Acl, AnyOf, AsReplica, Call, Need, call_type, needs
from sparklog.broker.call_limits import DEFAULT_MAX_CALLS_PER_IP, MIDDLEWARE_KEY, CallLimits, admit
from sparklog.broker.call_permissions import CallPermissions, permissions, principal
from sparklog.broker.flight_errors import errors_as_flight
from sparklog.broker.offset_requests import OffsetRequests
from sparklog.broker.record_copy import copy_records
from sparklog.broker.replication.fetch_request import REPLICA_FETCH
from sparklog.broker.request_fields import parse_request
from sparklog.broker.served_call import ServedBroker, ServedCall, Throttled, unthrottled
from sparklog.broker.throttle import Kind
from sparklog.errors import InvalidRequest, NotLeader
from sparklog.protocol import wire
from sparklog.protocol.multi_fetch import FETCH_MANY
from sparklog.security.authorizer import Authorizer
from sparklog.security.replica_guard import ReplicaGuard
from sparklog.security.sessions import CredentialVersions


@dataclasses.dataclass(frozen=True)
class ListenerTls:
    """A TLS listener's certificate and key (PEM), and with mutual TLS the CA clients' certificates
    must chain to."""

    certificate: bytes
    key: bytes
    client_ca: bytes | None = None


class CallThrottle(Protocol):
    """Client quotas (:class:`~sparklog.broker.throttle.Throttle`): the seconds a call must wait."""

    def delay(self, principal: str, kind: Kind, amount: float) -> float: ...


ActionHandler = Callable[[dict[str, Any], CallPermissions, Throttled], dict[str, Any]]
PutHandler = Callable[[ServedBroker, ServedCall, flight.MetadataRecordBatchReader, flight.FlightMetadataWriter], None]
GetHandler = Callable[[ServedBroker, ServedCall], flight.FlightDataStream]

# each do_put and do_get type, and its handler
PUTS: dict[str, PutHandler] = {wire.PRODUCE: produce_handler.produce, wire.PRODUCE_MANY: produce_handler.produce_many}
GETS: dict[str, GetHandler] = {
    FETCH: fetch_handler.fetch,
    FETCH_MANY: fetch_handler.multi_fetch,
    REPLICA_FETCH: fetch_handler.replica_fetch,
}
# each fetch call's request name in the metrics (Kafka's: a follower's fetch is a Fetch too)
_FETCH_NAMES = {FETCH: "Fetch", FETCH_MANY: "Fetch", REPLICA_FETCH: "FetchFollower"}


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
            return unthrottled
        who = principal(context, self.sasl)

        def throttled(kind: Kind, amount: float) -> float:
            delay = throttle.delay(who, kind, amount)
            if delay > 0:
                self.broker.metrics.throttled("flight", who, delay)
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

    # ----------------------------------------------------------------- produce and fetch
    def _call(self, context: flight.ServerCallContext, call: Call, request: dict[str, Any]) -> ServedCall:
        may, recheck = self._authorize(context, call, request)
        return ServedCall(context, request, may, recheck, self._throttler(context), lambda: self.stopping)

    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        with errors_as_flight("a produce request"):
            admit(context)
            request = parse_request(descriptor.command)
            produce_handler.produce_acks(request)  # a bad acks is refused before anything else
            served = self._call(context, Call.PUT, request)
            served.throttled("request", 1)
            if call_type(Call.PUT, request) != wire.PRODUCE_MANY:  # its requests are counted and timed each
                self.broker.metrics.request("flight", "Produce")
            PUTS[call_type(Call.PUT, request)](self.broker, served, reader, writer)

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        with errors_as_flight("a fetch request"):
            admit(context)
            request = parse_request(ticket.ticket)
            served = self._call(context, Call.GET, request)
            began = time.monotonic()
            kind = call_type(Call.GET, request)
            stream = GETS[kind](self.broker, served)
            self.broker.metrics.request("flight", _FETCH_NAMES.get(kind, "Fetch"), "", time.monotonic() - began)
            return stream

    # ----------------------------------------------------------------- actions
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        with errors_as_flight(f"action {action.type!r}"[:80]):
            admit(context)
            request = parse_request(action.body.to_pybytes()) if action.body.size else {}
            may, _ = self._authorize(context, Call.ACTION, request, action.type)
            replica = action.type == wire.OFFSETS_FOR_LEADER_EPOCH and request.get("replica_id", -1) != -1
            throttled = unthrottled if replica else self._throttler(context)  # replicas are never throttled
            throttled("request", 1)
            handler = self._actions.get(action.type)
            began = time.monotonic()
            if handler is not None:
                result = handler(request, may, throttled)
            elif self.broker.cluster_requests is not None and action.type in self.broker.cluster_requests.actions:
                result = self.broker.cluster_requests.answer(action.type, request, may)
            else:
                raise InvalidRequest(f"action {action.type!r:.100} is not served by this broker")
            self.broker.metrics.request("flight", action.type, "", time.monotonic() - began)
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
            *(
                (
                    name,
                    "cluster metadata, groups and their offsets, administration (topics, users, ACLs, quotas)",
                )
                for name in wire.CLUSTER_ACTIONS
            ),
        ]
