"""The Kafka-protocol fuzzer's operations on the wire: requests built with kafka-python's generated
classes (or by hand where a case wants bytes those classes cannot write), the Kafka error codes
each API's answers may carry, the listener's health check, and what the fuzzer reads of a broker
process (its peak memory, the connections it keeps after their clients closed them).

An error code in a response *makes sense* when Kafka defines it and the API may answer it
(:data:`ALLOWED`); UNKNOWN_SERVER_ERROR (-1) is always a finding: the broker raised what it did not
expect. Retriable codes (:data:`RETRIABLE`) are allowed anywhere.
"""

from __future__ import annotations

import contextlib
import struct
import time
from pathlib import Path
from typing import Any

import kafka.errors as kerr
import scramp
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from sparklog.fuzz.kafka_wire import KafkaWire
from sparklog.fuzz.report import UNEXPECTED_ERROR, WRONG_ERROR, Anomaly

HOST = "127.0.0.1"
HEALTH_TIMEOUT_S = 5.0

# Kafka's error codes by name (kafka.errors numbers)
NONE = 0
UNKNOWN_SERVER_ERROR = kerr.UnknownError.errno
OFFSET_OUT_OF_RANGE = kerr.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE = kerr.CorruptRecordError.errno
UNKNOWN_TOPIC_OR_PARTITION = kerr.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = kerr.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = kerr.NotLeaderForPartitionError.errno
REQUEST_TIMED_OUT = kerr.RequestTimedOutError.errno
MESSAGE_TOO_LARGE = kerr.MessageSizeTooLargeError.errno
INVALID_TOPIC = kerr.InvalidTopicError.errno
NOT_ENOUGH_REPLICAS = kerr.NotEnoughReplicasError.errno
NOT_ENOUGH_REPLICAS_AFTER_APPEND = kerr.NotEnoughReplicasAfterAppendError.errno
INVALID_REQUIRED_ACKS = kerr.InvalidRequiredAcksError.errno
TOPIC_AUTHORIZATION_FAILED = kerr.TopicAuthorizationFailedError.errno
UNSUPPORTED_VERSION = kerr.UnsupportedVersionError.errno
INVALID_REQUEST = kerr.InvalidRequestError.errno
OUT_OF_ORDER_SEQUENCE = kerr.OutOfOrderSequenceNumberError.errno
DUPLICATE_SEQUENCE = kerr.DuplicateSequenceNumberError.errno
INVALID_PRODUCER_EPOCH = kerr.InvalidProducerEpochError.errno
INVALID_TXN_STATE = kerr.InvalidTxnStateError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = kerr.TransactionalIdAuthorizationFailedError.errno
KAFKA_STORAGE_ERROR = kerr.KafkaStorageError.errno
FENCED_LEADER_EPOCH = kerr.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = kerr.UnknownLeaderEpochError.errno
COORDINATOR_NOT_AVAILABLE = kerr.CoordinatorNotAvailableError.errno
FETCH_SESSION_ID_NOT_FOUND = kerr.FetchSessionIdNotFoundError.errno
INVALID_FETCH_SESSION_EPOCH = kerr.InvalidFetchSessionEpochError.errno
REPLICA_NOT_AVAILABLE = kerr.ReplicaNotAvailableError.errno
UNKNOWN_PRODUCER_ID = kerr.UnknownProducerIdError.errno
INVALID_RECORD = kerr.InvalidRecordError.errno

KNOWN_CODES = frozenset(
    c.errno
    for c in vars(kerr).values()
    if isinstance(c, type) and issubclass(c, kerr.BrokerResponseError) and isinstance(c.errno, int)
)
NAMES = {
    c.errno: c.__name__
    for c in vars(kerr).values()
    if isinstance(c, type) and issubclass(c, kerr.BrokerResponseError) and isinstance(c.errno, int)
}
# what any request may get while leadership moves or replicas lag
RETRIABLE = frozenset(
    {
        LEADER_NOT_AVAILABLE,
        NOT_LEADER_OR_FOLLOWER,
        REQUEST_TIMED_OUT,
        NOT_ENOUGH_REPLICAS,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KAFKA_STORAGE_ERROR,
        COORDINATOR_NOT_AVAILABLE,
    }
)
# a produce refused with one of these may have stored its batch first (not replicated in time)
AFTER_APPEND = frozenset(
    {REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER}
)
UNKNOWN_TARGET = frozenset({UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC})
PARTITION_READ = frozenset({NONE, *UNKNOWN_TARGET, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, INVALID_REQUEST})
ALLOWED: dict[str, frozenset[int]] = {
    "fetch": PARTITION_READ | {OFFSET_OUT_OF_RANGE},
    "fetch-top": frozenset({NONE, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, INVALID_REQUEST}),
    "list-offsets": PARTITION_READ | {OFFSET_OUT_OF_RANGE},
    "epochs": PARTITION_READ,
    "metadata-topic": frozenset({NONE, *UNKNOWN_TARGET, TOPIC_AUTHORIZATION_FAILED}),
    "metadata-partition": frozenset({NONE, REPLICA_NOT_AVAILABLE}),
    "init-pid": frozenset(
        {NONE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_REQUEST, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE}
    ),
    "api-versions": frozenset({NONE, UNSUPPORTED_VERSION, INVALID_REQUEST}),
}


def code_name(code: int) -> str:
    return f"{code} ({NAMES.get(code, 'not a Kafka error code')})"


def check_code(what: str, code: int, allowed: frozenset[int] | set[int]) -> list[Anomaly]:
    """A response's error code: UNKNOWN_SERVER_ERROR, a code Kafka does not define or one this
    answer may not carry are findings."""
    if code == UNKNOWN_SERVER_ERROR:
        return [Anomaly(UNEXPECTED_ERROR, f"{what}: UNKNOWN_SERVER_ERROR")]
    if code not in KNOWN_CODES:
        return [Anomaly(WRONG_ERROR, f"{what}: error code {code} is not a Kafka error code")]
    if code not in allowed and code not in RETRIABLE:
        expected = ", ".join(code_name(c) for c in sorted(allowed))
        return [Anomaly(WRONG_ERROR, f"{what}: {code_name(code)}, not one of {expected}")]
    return []


def codes_in(message: Any, what: str) -> list[Anomaly]:
    """Every ``error_code`` in a decoded response: UNKNOWN_SERVER_ERROR and codes Kafka does not
    define are findings."""
    found: list[Anomaly] = []
    stack = [message]
    seen = 0
    while stack and seen < 10_000:
        item = stack.pop()
        seen += 1
        code = getattr(item, "error_code", None)
        if isinstance(code, int) and (code == UNKNOWN_SERVER_ERROR or code not in KNOWN_CODES):
            found += check_code(what, code, KNOWN_CODES)
        for name in getattr(item, "__slots__", ()):
            value = getattr(item, name, None)
            if isinstance(value, list):
                stack.extend(v for v in value if hasattr(v, "__slots__"))
            elif hasattr(value, "__slots__") and not isinstance(value, (str, bytes)):
                stack.append(value)
    return found


# ----------------------------------------------------------------------------------------- requests
def produce_request(
    version: int,
    acks: int,
    timeout_ms: int,
    transactional_id: str | None,
    parts: list[tuple[str, int, bytes | None]],
) -> Any:
    """A Produce request of ``parts`` (topic, partition, records), grouped by topic in order."""
    T = ProduceRequest.TopicProduceData
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, records in parts:
        by_topic.setdefault(topic, []).append(T.PartitionProduceData(index=partition, records=records))
    return ProduceRequest[version](
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[T(name=name, partition_data=partitions) for name, partitions in by_topic.items()],
    )


def fetch_request(version: int, targets: list[tuple[str, int, int]], **fields: Any) -> Any:
    """A Fetch request of ``targets`` (topic, partition, offset); ``fields`` the rest (per
    partition: ``current_leader_epoch``, ``last_fetched_epoch``, ``log_start_offset``,
    ``partition_max_bytes``)."""
    F = FetchRequest.FetchTopic
    per_partition = {
        k: fields.pop(k)
        for k in ("current_leader_epoch", "last_fetched_epoch", "log_start_offset", "partition_max_bytes")
        if k in fields
    }
    per_partition.setdefault("partition_max_bytes", 1 << 20)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset in targets:
        by_topic.setdefault(topic, []).append(
            F.FetchPartition(partition=partition, fetch_offset=offset, **per_partition)
        )
    forgotten = fields.pop("forgotten", False)
    request = FetchRequest[version](topics=[F(topic=t, partitions=p) for t, p in by_topic.items()], **fields)
    if forgotten and version >= 7:
        request.forgotten_topics_data = [
            FetchRequest.ForgottenTopic(topic=t, partitions=[p for _, p, _ in targets]) for t in by_topic
        ]
    return request


def list_offsets_request(version: int, targets: list[tuple[str, int]], timestamp: int, **fields: Any) -> Any:
    T = ListOffsetsRequest.ListOffsetsTopic
    epoch = fields.pop("current_leader_epoch", -1)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in targets:
        by_topic.setdefault(topic, []).append(
            T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp)
        )
    return ListOffsetsRequest[version](topics=[T(name=t, partitions=p) for t, p in by_topic.items()], **fields)


def epochs_request(version: int, targets: list[tuple[str, int]], leader_epoch: int, current: int, **fields: Any) -> Any:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in targets:
        by_topic.setdefault(topic, []).append(
            T.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current, leader_epoch=leader_epoch)
        )
    return OffsetForLeaderEpochRequest[version](
        topics=[T(topic=t, partitions=p) for t, p in by_topic.items()], **fields
    )


def metadata_request(
    version: int, topics: list[str] | None, auto_create: bool = False, operations: bool = False
) -> Any:
    """Metadata of ``topics`` (None: every topic)."""
    named = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
    if topics is None and version == 0:
        named = []  # version 0 has no null list: empty means every topic
    fields: dict[str, Any] = {"topics": named}
    if version >= 4:
        fields["allow_auto_topic_creation"] = auto_create
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = operations
    if version >= 8:
        fields["include_topic_authorized_operations"] = operations
    return MetadataRequest[version](**fields)


def api_versions_request(version: int, name: str = "sparklog-fuzz", software_version: str = "1.0") -> Any:
    if version >= 3:
        return ApiVersionsRequest[version](client_software_name=name, client_software_version=software_version)
    return ApiVersionsRequest[version]()


def init_pid_request(version: int, transactional_id: str | None, timeout_ms: int, producer_id: int, epoch: int) -> Any:
    fields: dict[str, Any] = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms}
    if version >= 3:
        fields |= {"producer_id": producer_id, "producer_epoch": epoch}
    return InitProducerIdRequest[version](**fields)


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes | None, flexible: bool) -> bytes:
    """A request header written by hand (any key and version): key, version, correlation id, the
    client id as a nullable int16-length string, and (flexible) an empty tagged-field section."""
    head = struct.pack(">hhi", _int16(api_key), _int16(version), correlation_id)
    head += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return head + (b"\x00" if flexible else b"")


def _int16(value: int) -> int:
    value %= 1 << 16
    return value - (1 << 16) if value >= 1 << 15 else value


def is_flexible(request_class: Any, version: int) -> bool:
    try:
        return bool(request_class.flexible_version_q(version))
    except Exception:  # a version kafka-python does not know
        return False


# ----------------------------------------------------------------------------------------- health
def listener_health(port: int, topics: list[str]) -> tuple[str | None, list[Anomaly], dict[int, tuple[int, int]]]:
    """ApiVersions and Metadata on a fresh connection: why the listener is not serving (None: it
    is), findings in its answers, and the API table it advertises."""
    try:
        wire = KafkaWire(HOST, port, timeout=HEALTH_TIMEOUT_S)
    except OSError as exc:
        return f"cannot connect to the Kafka listener on port {port}: {exc}", [], {}
    with wire:
        versions = wire.exchange(api_versions_request(3))
        if versions.response is None:
            return f"ApiVersions on a fresh connection: {versions.problem}", [], {}
        findings = check_code("ApiVersions", versions.response.error_code, {NONE})
        table = {k.api_key: (k.min_version, k.max_version) for k in versions.response.api_keys}
        metadata = wire.exchange(metadata_request(12, topics))
        if metadata.response is None:
            return f"Metadata on a fresh connection: {metadata.problem}", findings, table
        for topic in metadata.response.topics:
            findings += check_code(f"Metadata of {topic.name!r}", topic.error_code, ALLOWED["metadata-topic"])
        if not metadata.response.brokers:
            findings.append(Anomaly(WRONG_ERROR, "Metadata lists no broker"))
    return None, findings, table


def sasl_listener_health(
    port: int, user: str, password: str, mechanism: str, topics: list[str]
) -> tuple[str | None, list[Anomaly]]:
    """A login (``mechanism``) and Metadata on a fresh connection to a SASL listener: why the
    listener is not serving (None: it is), and findings in its answers."""
    try:
        wire = KafkaWire(HOST, port, timeout=HEALTH_TIMEOUT_S)
    except OSError as exc:
        return f"cannot connect to the SASL listener on port {port}: {exc}", []
    with wire:
        try:
            login = wire.login(user, password, mechanism)
        except scramp.ScramException as exc:  # the broker's answers do not make a SCRAM login
            return f"a {mechanism} login of {user} on a fresh connection: {exc}", []
        if login.response is None:
            return f"a {mechanism} login of {user} on a fresh connection: {login.problem}", []
        if login.response.error_code:
            return f"a {mechanism} login of {user} refused with {code_name(login.response.error_code)}", []
        metadata = wire.exchange(metadata_request(12, topics))
        if metadata.response is None:
            return f"Metadata after a {mechanism} login: {metadata.problem}", []
        findings: list[Anomaly] = []
        for topic in metadata.response.topics:
            findings += check_code(f"Metadata of {topic.name!r}", topic.error_code, ALLOWED["metadata-topic"])
    return None, findings


# ----------------------------------------------------------------------------------------- processes
def peak_rss_mb(pid: int) -> int | None:
    """The process's peak resident memory (VmHWM) in MiB."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1]) // 1024
    return None


def reset_peak_rss(pid: int) -> None:
    """VmHWM starts again from the current resident memory."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


CLOSE_WAIT = "08"


def closed_by_client(ports: set[int]) -> set[tuple[int, str]]:
    """The connections to ``ports`` (server side, loopback) that their clients closed and the
    server has not: TCP's CLOSE_WAIT, as (port, remote address)."""
    found: set[tuple[int, str]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != CLOSE_WAIT:
                continue
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in ports:
                found.add((port, fields[2]))
    return found


class Lingering:
    """Connections a broker keeps after their clients closed them, seen at two looks at least
    ``grace_s`` apart (a connection being closed right now is not one)."""

    def __init__(self, grace_s: float = 2.0) -> None:
        self.grace_s = grace_s
        self.seen: dict[tuple[int, str], float] = {}
        self.reported: set[tuple[int, str]] = set()

    def look(self, ports: set[int]) -> list[tuple[int, str, float]]:
        now = time.monotonic()
        current = closed_by_client(ports)
        self.seen = {key: self.seen.get(key, now) for key in current}
        out = []
        for key, since in self.seen.items():
            if now - since >= self.grace_s and key not in self.reported:
                self.reported.add(key)
                out.append((key[0], key[1], now - since))
        return out

    def clear(self) -> None:
        self.seen.clear()
