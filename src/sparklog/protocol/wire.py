"""The contract between clients and brokers, carried by Arrow Flight (no other wire format).

- **Produce**: ``do_put`` with ``FlightDescriptor.for_command(json)`` where the JSON is
  ``{"type": "produce", "topic", "partition", "acks": "0"|"1"|"all", "producer_id",
  "first_sequence", "schema"}``; ``"schema"`` names the records' schema (the Arrow IPC schema
  message, base64: user columns ``value`` and optionally ``key``, ``timestamp``, ``headers``). The
  stream declares the *empty* schema and carries no Flight record batch: each batch travels as a
  *frame* in a Flight message's app metadata (``write_metadata``): one encapsulated Arrow IPC record
  batch message (its buffers may be lz4 or zstd compressed) followed by the batch's JSON metadata,
  optionally ``{"sequence": n}`` (the idempotent producer's sequence of its first record; ``{}`` or
  nothing when it has none): :mod:`sparklog.protocol.record_frames` writes and reads them. The
  broker reads the rows and decoded bytes the message declares and refuses it (RECORD_TOO_LARGE)
  over the topic's ``max.message.bytes`` or the row limit before decompressing anything, and a
  stream declaring record batch columns (the Flight batches Flight's reader would decode) before
  reading it (INVALID_REQUEST). After appending each batch the broker writes put metadata
  ``{"base_offset", "last_offset", "count"}`` (JSON) back on the same stream (none for
  ``acks=0``). With ``acks=all`` that happens once every in-sync replica has the batch.
- **Produce to many partitions** (what ``Producer`` uses: one stream per broker, Kafka's
  ProduceRequest): ``do_put`` with ``{"type": "produce_many", "acks", "schema"}``, frames as above;
  each frame's metadata is ``{"t": topic, "p": partition, "pid": producer id, "seq": first
  sequence, "sv": schema version?, "end": true?}``. After a frame with ``"end"`` the broker answers
  the request (the batches since the previous end) with one put metadata ``{"r": [{"b": base
  offset, "l": last offset} | {"e": CODE, "m": message}, ...]}``, one entry per batch in order
  (nothing with ``acks=0``; a batch refused for its declared size, or one that does not decode with
  the named schema, fails alone; a frame that cannot be read ends the stream):
  :mod:`sparklog.broker.produce_request`.
- **Fetch**: ``do_get`` with ``Ticket(json)``: ``{"topic", "partition", "offset", "max_bytes",
  "max_wait_ms", "replica_id", "leader_epoch"}``. The broker streams stored record batches (columns
  ``offset``, ``timestamp``, ``key``, ``value``, ``headers``) from the batch holding ``offset``, up
  to the high watermark for consumers (``replica_id`` -1) or the log end for followers; each batch
  has app metadata ``{"hw", "lso"}`` (plus ``"h"``, the stored batch header, for followers); with
  no data an empty batch carries it. If there is nothing yet the broker waits up to ``max_wait_ms``.
  A consumer's ``"fields"`` projects a typed value; with ``"compact": true`` the broker may send
  ``offset``, ``key`` and ``headers`` as Arrow ``null`` columns when they carry nothing the client
  cannot rebuild (each message then has ``"base"``, its first offset: :mod:`sparklog.protocol.fetch_columns`).
  A consumer's ``"follow": true`` keeps the stream open after its first response: later appends
  follow on it until nothing new comes for ``max_wait_ms`` (:mod:`sparklog.broker.fetch_follower`).
  ``{"type": "fetch_many", "topic", "partitions": [{"p", "o"}, ...], ...}`` fetches many partitions
  of one topic on one stream that stays open (:mod:`sparklog.protocol.multi_fetch`).
- **Actions** (``do_action``, JSON body, JSON result): ``list_offsets`` ``{"topic", "partition",
  "timestamp"?}`` -> ``{"log_start_offset", "log_end_offset", "high_watermark", "leader_epoch",
  "offset_for_time"}``, or for many partitions of one leader ``{"partitions": [{"topic",
  "partition", "timestamp"?}, ...]}`` -> ``{"results": [offsets | {"error", "message"}, ...]}``;
  ``offsets_for_leader_epoch`` ``{"topic", "partition", "epoch"}`` ->
  ``{"epoch", "end_offset", "log_start_offset"}``; ``ping`` -> ``{"broker_id"}``;
  ``copy_records`` ``{"topic", "partition", "acks", "slices": [{"first", "last", "topic", "partition",
  "producer_id", "sequence", "schema_version"?}, ...]}`` -> ``{"results": [{"base_offset",
  "last_offset", "count"}, ...]}`` copies source offset ranges to partitions the same broker leads
  (:mod:`sparklog.broker.record_copy`).
- **Cluster actions** (any broker answers them from its ZooKeeper view, Kafka's Metadata,
  OffsetCommit/OffsetFetch and CreateTopics/DeleteTopics/AlterConfigs/CreatePartitions; clients given
  ``bootstrap.servers`` need nothing else: :mod:`sparklog.broker.cluster_requests`):
  ``metadata`` ``{"topics": [names] | null (all), "describe"?: true, "controller"?: false}`` ->
  ``{"brokers": [{"id", "host", "port", "metrics_url"?}], "topics": [{"name", "replicas", "configs",
  "partitions": [{"leader", "leader_epoch", "isr"} | null], "schemas": [{"version", "schema"}]} |
  {"name", "error", "message"}], "controller_id"?}`` (with ``"describe": false`` topics are
  ``{"name"}`` only; ``"controller_id"``, -1 for none, only when asked with ``"controller": true``);
  ``offset_commit`` ``{"group", "offsets": {topic: {"<partition>": offset}}}`` -> ``{}`` and
  ``offset_fetch`` ``{"group", "topic"?}`` -> ``{"offsets": {topic: {"<partition>": offset}}}``
  (the znodes ``consumers/<g>/offsets/<t>/<p>``); ``list_groups`` -> ``{"groups"}``;
  ``create_topic`` ``{"name", "partitions", "replication_factor", "configs"?, "value_schema"?,
  "internal"?}``, ``alter_configs`` ``{"name", "configs", "delete"?: [names], "internal"?}``
  (Kafka's incremental AlterConfigs: set ``configs``, remove the overrides ``delete`` names),
  ``create_partitions`` ``{"name", "partitions" (the new total), "internal"?}`` (Kafka's
  CreatePartitions) -> the topic's ``{"name", "replicas", "configs"}``; ``delete_topic``
  ``{"name", "internal"?}`` -> ``{}``;
  ``register_schema`` ``{"topic", "schema"}`` -> ``{"version", "schema"}``; ``sink_state``
  ``{"op": "read"|"write"|"delete", "sink", "state"?, "version"?}`` -> ``{"state", "version"}``
  (the Spark sink's compare-and-set state, :mod:`sparklog.coordination.sink_state`).
- **Group membership** (Kafka's JoinGroup/Heartbeat/LeaveGroup; the broker hosts the member in
  ZooKeeper for the client: :mod:`sparklog.broker.group_members`): ``join_group`` ``{"group",
  "topics", "partitions": ["<topic>:<partition>", ...], "session_timeout_ms"}`` -> ``{"member_id",
  "zookeeper_session_timeout_ms"}``; ``group_heartbeat`` ``{"group", "member_id", "released"}`` ->
  ``{"state": "allocating"|"acquired"|"release"|"failed", "partitions"?: [...] (when acquired),
  "zookeeper_session_timeout_ms"}``, sent to the broker that answered the join; ``leave_group``
  ``{"group", "member_id"}`` -> ``{}``. ``"released": true`` says the client reads none of its
  partitions now: only then does the broker give them up after a ``release``. A member is
  finished after ``session_timeout_ms`` without a heartbeat; a client stops reading when its last
  ``acquired`` answer is older than a quarter of the broker's ZooKeeper session timeout (its
  partitions' locks may be gone after a third of it, as the broker may not have noticed its
  session's end yet) or half its own session timeout, whichever comes first
  (:mod:`sparklog.client.group_membership`). An unknown member id is ``UNKNOWN_MEMBER_ID``.
- **Administration** (Kafka's Admin APIs, through any broker, so an administrator needs neither
  ZooKeeper nor its digest: :mod:`sparklog.broker.admin_requests`; bytes are base64):
  ``describe_user_scram_credentials`` ``{"users": [names] | null (all)}`` -> ``{"users": [{"name",
  "credentials": [{"mechanism", "iterations"}]}]}`` (existing users only);
  ``alter_user_scram_credentials`` ``{"upsertions": [{"name", "mechanism", "iterations", "salt",
  "salted_password"}], "deletions": [{"name", "mechanism"}]}`` -> ``{"upserted": [{"name",
  "created"}], "deleted": [{"name", "removed"}]}`` (the client computes the salted password, the
  password never leaves it); ``describe_acls`` ``{"filter": ACL filter}`` -> ``{"acls": [ACL]}``,
  ``create_acls`` ``{"acls": [ACL]}`` -> ``{"created": [ACL]}`` (those not there yet),
  ``delete_acls`` ``{"filters": [ACL filter]}`` -> ``{"deleted": [ACL]}`` (an ACL: ``{"resource_type",
  "name", "pattern_type", "principal", "host", "operation", "permission"}``; a filter: the same
  keys, null or absent = any, ``pattern_type`` also ``any`` or ``match``: ``AclFilter``);
  ``describe_client_quotas`` ``{}`` -> ``{"quotas": {user: {rate: value}}}`` (``<default>``
  included), ``alter_client_quotas`` ``{"entries": [{"user", "quota": {rate: value} | null
  (remove)}]}`` -> ``{"results": [{"user", "removed"?}]}``; ``alter_partition_reassignments``
  ``{"topic", "partitions": {"<p>": [broker ids]}}`` -> ``{}`` and ``list_partition_reassignments``
  ``{"topic"}`` -> ``{"partitions": {"<p>": [broker ids]} | null}`` (the controller moves them).
  Every request is checked whole before anything is written.
- **Security**: a listener may use TLS (``grpc+tls``) and SASL; a SASL client authenticates with
  Flight's ``Handshake`` call first (SCRAM-SHA-256 or PLAIN: :mod:`sparklog.security.scram`) and
  sends the session token it got with every later call.
- **Errors**: a broker raises ``FlightServerError("sparklog:<CODE>:<message>")``; the client turns
  it back into the typed error of :mod:`sparklog.errors` with :func:`raise_from_flight`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow.flight as flight

from sparklog.errors import AuthenticationFailed, BrokerNotAvailable, InvalidRequest, SparklogError, error_from_code
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

ERROR_PREFIX = "sparklog:"
_ERROR = re.compile(r"sparklog:([A-Z_]+):(.*?)(?:\. Detail:|$)", re.S)

PRODUCE = "produce"
PRODUCE_MANY = "produce_many"
LIST_OFFSETS = "list_offsets"
OFFSETS_FOR_LEADER_EPOCH = "offsets_for_leader_epoch"
PING = "ping"
COPY_RECORDS = "copy_records"
METADATA = "metadata"
OFFSET_COMMIT = "offset_commit"
OFFSET_FETCH = "offset_fetch"
LIST_GROUPS = "list_groups"
DESCRIBE_GROUP = "describe_group"
CREATE_TOPIC = "create_topic"
DELETE_TOPIC = "delete_topic"
ALTER_CONFIGS = "alter_configs"
CREATE_PARTITIONS = "create_partitions"
REGISTER_SCHEMA = "register_schema"
SINK_STATE = "sink_state"
JOIN_GROUP = "join_group"
GROUP_HEARTBEAT = "group_heartbeat"
LEAVE_GROUP = "leave_group"
# administration through brokers (Kafka's Admin APIs; :mod:`sparklog.broker.admin_requests`)
DESCRIBE_USER_SCRAM_CREDENTIALS = "describe_user_scram_credentials"
ALTER_USER_SCRAM_CREDENTIALS = "alter_user_scram_credentials"
DESCRIBE_ACLS = "describe_acls"
CREATE_ACLS = "create_acls"
DELETE_ACLS = "delete_acls"
DESCRIBE_CLIENT_QUOTAS = "describe_client_quotas"
ALTER_CLIENT_QUOTAS = "alter_client_quotas"
ALTER_PARTITION_REASSIGNMENTS = "alter_partition_reassignments"
LIST_PARTITION_REASSIGNMENTS = "list_partition_reassignments"
ADMIN_ACTIONS = (
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
)
CLUSTER_ACTIONS = (
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    LIST_GROUPS,
    DESCRIBE_GROUP,
    CREATE_TOPIC,
    DELETE_TOPIC,
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    REGISTER_SCHEMA,
    SINK_STATE,
    JOIN_GROUP,
    GROUP_HEARTBEAT,
    LEAVE_GROUP,
    *ADMIN_ACTIONS,
)


# gRPC waits up to 120 s between reconnection attempts to a peer that went away; a broker that
# restarts on the same port must be reached again within a second.
_RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


HANDSHAKE_TIMEOUT_S = 10.0


def flight_client(
    location: str, own_connection: bool = False, security: ClientSecurity = PLAINTEXT
) -> flight.FlightClient:
    """A Flight client for a broker, reconnecting quickly after the broker restarts. gRPC shares one
    connection among the clients of a location unless ``own_connection``: one connection's
    messages are received by one thread at a time, so parallel fetches go faster on their own.
    With ``security``: TLS (trusting ``ssl.ca.location``, presenting the client's certificate if
    it has one) and, for SASL, the handshake (:mod:`sparklog.security.scram`) before it is returned:
    :class:`AuthenticationFailed` if the broker refuses the credentials."""
    options = _RECONNECT_OPTIONS + ([("grpc.use_local_subchannel_pool", 1)] if own_connection else [])
    client = flight.FlightClient(location, generic_options=options, **security.tls_options())
    if security.sasl:
        # scramp brings cryptography, asn1crypto and importlib.metadata with it (~15,000 objects
        # every full garbage collection walks, ~0.1 s to import): only SASL clients load it
        from sparklog.security.scram import SaslClientAuth

        try:
            client.authenticate(SaslClientAuth(security), flight.FlightCallOptions(timeout=HANDSHAKE_TIMEOUT_S))
        except flight.FlightError as exc:
            client.close()
            raise from_flight_error(exc, location) from None
    return client


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))  # made once: json.dumps(separators=...) makes one per call


def is_int64(value: Any) -> bool:
    """Whether a decoded JSON value is an integer (not a bool) that fits in 64 bits, as every
    offset, epoch, producer id and timestamp on the wire must."""
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63


def encode(obj: dict[str, Any]) -> bytes:
    return _COMPACT_JSON.encode(obj).encode()


def decode(data: bytes | memoryview | Any) -> dict[str, Any]:
    raw = data.to_pybytes() if hasattr(data, "to_pybytes") else bytes(data)
    return json.loads(raw)


def decode_object(data: bytes | memoryview | Any, what: str) -> dict[str, Any]:
    """``data`` as a JSON object; :class:`InvalidRequest` naming ``what`` if it is not one."""
    try:
        decoded = decode(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidRequest(f"{what} is not valid JSON") from None
    if not isinstance(decoded, dict):
        raise InvalidRequest(f"{what} must be a JSON object")
    return decoded


MAX_ERROR_MESSAGE = 1000  # characters: messages quote what a request held, which may be anything


def to_flight_error(exc: SparklogError) -> flight.FlightServerError:
    """A typed sparklog error as the Flight error a broker raises (its message cut to
    ``MAX_ERROR_MESSAGE`` characters)."""
    message = str(exc)
    if len(message) > MAX_ERROR_MESSAGE:
        message = message[: MAX_ERROR_MESSAGE - 3] + "..."
    return flight.FlightServerError(f"{ERROR_PREFIX}{exc.code}:{message}")


_FLIGHT_MESSAGE = re.compile(r"with message: (.*?)(?:\. Detail:|$)", re.S)


def _flight_message(text: str) -> str:
    """The message a broker (or gRPC) put in a Flight error, without Flight's wrapping."""
    match = _FLIGHT_MESSAGE.search(text)
    return (match.group(1) if match else text).strip().splitlines()[0] if text else "refused"


def from_flight_error(exc: Exception, where: str = "") -> SparklogError:
    """The typed sparklog error carried by a Flight error (or BrokerNotAvailable if it was the network)."""
    text = str(exc)
    match = _ERROR.search(text)
    if match:
        return error_from_code(match.group(1), match.group(2).strip())
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return AuthenticationFailed(f"{where}: {_flight_message(text)}")
    if isinstance(exc, flight.FlightUnavailableError | flight.FlightTimedOutError | ConnectionError):
        return BrokerNotAvailable(f"broker {where} is not reachable: {text.splitlines()[0] if text else exc!r}")
    if isinstance(exc, flight.FlightCancelledError):
        return BrokerNotAvailable(f"request to {where} was cancelled: {text.splitlines()[0]}")
    return SparklogError(f"request to {where} failed: {text.splitlines()[0] if text else exc!r}")
