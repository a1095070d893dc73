"""Typed errors raised by sparklog, shared by the broker, the clients and the CLI.

Every error has a stable ``code`` so that it can travel over the wire (Arrow Flight) and be raised
again as the same type on the client side (see :func:`error_from_code`). Every error a user or a
client can see is defined here, so ``error_from_code`` knows each one whatever was imported.
"""

from __future__ import annotations


class SparklogError(Exception):
    """Base class of every sparklog error."""

    code = "SPARKLOG_ERROR"
    retriable = False


class InvalidConfig(SparklogError):
    """A topic or client configuration is unknown or has a bad value."""

    code = "INVALID_CONFIG"


class InvalidRecord(SparklogError):
    """A record batch does not match the topic's schema or rules; nothing of it was stored."""

    code = "INVALID_RECORD"


class OutOfOrderSequence(InvalidRecord):
    """An idempotent producer's batch skipped sequence numbers (something it sent before is missing)."""

    code = "OUT_OF_ORDER_SEQUENCE"


class DuplicateSequence(OutOfOrderSequence):
    """An idempotent producer resent a batch older than the last ones the partition remembers for
    it: it was stored before (Kafka's DUPLICATE_SEQUENCE_NUMBER); its offsets are no longer known."""

    code = "DUPLICATE_SEQUENCE"


class InvalidTimestamp(InvalidRecord):
    """A record's timestamp is further from the broker's clock than the topic allows
    (``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms``, KIP-937)."""

    code = "INVALID_TIMESTAMP"


class RecordTooLarge(SparklogError):
    """A record batch is larger than the topic's ``max.message.bytes``."""

    code = "RECORD_TOO_LARGE"


class OffsetOutOfRange(SparklogError):
    """The requested offset is before the log start or after the log end."""

    code = "OFFSET_OUT_OF_RANGE"


class CorruptRecord(SparklogError):
    """Stored data failed its checksum or could not be decoded."""

    code = "CORRUPT_RECORD"


class LogClosed(SparklogError):
    """The partition log was closed (the broker is shutting down or the partition moved)."""

    code = "LOG_CLOSED"
    retriable = True


class UnknownTopic(SparklogError):
    """The topic (or partition) does not exist."""

    code = "UNKNOWN_TOPIC"


class TopicExists(SparklogError):
    """A topic with that name exists already."""

    code = "TOPIC_EXISTS"


class NotLeader(SparklogError):
    """This broker is not the leader of the partition: refresh metadata and retry."""

    code = "NOT_LEADER"
    retriable = True


class FencedLeaderEpoch(NotLeader):
    """The client names an older leader epoch than the partition's leader has: its metadata is
    stale (Kafka's FENCED_LEADER_EPOCH); refresh metadata and retry."""

    code = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpoch(NotLeader):
    """The client names a newer leader epoch than this broker knows of: this broker has not
    heard of the new leader yet (Kafka's UNKNOWN_LEADER_EPOCH); retry."""

    code = "UNKNOWN_LEADER_EPOCH"


class NotEnoughReplicas(SparklogError):
    """Fewer in-sync replicas than ``min.insync.replicas``: the write was refused."""

    code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class BrokerNotAvailable(SparklogError):
    """No broker could be reached for the request."""

    code = "BROKER_NOT_AVAILABLE"
    retriable = True


class RequestTimedOut(BrokerNotAvailable):
    """A broker did not answer a request in time (frozen, overloaded or cut off); retried elsewhere
    after fresh metadata, like an unreachable broker."""

    code = "REQUEST_TIMED_OUT"


class CoordinatorNotAvailable(SparklogError):
    """ZooKeeper could not be reached."""

    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class UnknownGroup(SparklogError):
    """The consumer group has no committed offsets."""

    code = "UNKNOWN_GROUP"


class UnknownMemberId(SparklogError):
    """The broker hosts no member of the group with that id (it missed heartbeats for its session
    timeout and left, or the broker restarted): the consumer joins the group again."""

    code = "UNKNOWN_MEMBER_ID"


class CommitFailed(SparklogError):
    """A group member's commit of partitions it does not own (any more): the group rebalanced or
    the member lost its membership (Kafka's ``CommitFailedException``). Nothing was committed; the
    partitions' owner commits them."""

    code = "COMMIT_FAILED"


class GroupNotEmpty(SparklogError):
    """The consumer group has live members reading the topic: its committed offsets cannot be
    reset under them (their next commits would overwrite the reset; Kafka's ``NON_EMPTY_GROUP``)."""

    code = "NON_EMPTY_GROUP"


class InvalidRequest(SparklogError):
    """A malformed request (bad option, bad argument)."""

    code = "INVALID_REQUEST"


class InvalidTopic(InvalidRequest):
    """A topic name breaks the naming rule, or names a topic reserved for sparklog's own use."""

    code = "INVALID_TOPIC"


class InvalidGroupId(InvalidRequest):
    """A consumer group name breaks the naming rule."""

    code = "INVALID_GROUP_ID"


class InvalidUserName(InvalidRequest):
    """A user name breaks the naming rule (that of topics: it is a ZooKeeper path component)."""

    code = "INVALID_USER_NAME"


class UnacceptableCredential(InvalidRequest):
    """A SCRAM credential the broker will not store: too few or too many iterations, a salt or
    salted password of the wrong size, an empty password (Kafka's ``UNACCEPTABLE_CREDENTIAL``)."""

    code = "UNACCEPTABLE_CREDENTIAL"


class InvalidPartitions(InvalidRequest):
    """A partition count is out of range (below 1, or above the broker's ``num.partitions.max``)."""

    code = "INVALID_PARTITIONS"


class InvalidReplicationFactor(InvalidRequest):
    """A replication factor below 1, or above the live brokers that would hold the replicas."""

    code = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignment(InvalidRequest):
    """An explicit replica assignment that cannot be: a partition without replicas or with one
    broker twice, partitions with different replica counts, a broker that is not live."""

    code = "INVALID_REPLICA_ASSIGNMENT"


class FetchSessionInvalid(SparklogError):
    """A follower's replica fetch named a fetch session the leader does not hold at that epoch
    (Kafka's ``FETCH_SESSION_ID_NOT_FOUND`` / ``INVALID_FETCH_SESSION_EPOCH``): the leader restarted
    or dropped it, or an answer was lost. The follower opens a new session with a full request."""

    code = "INVALID_FETCH_SESSION"
    retriable = True


class PolicyViolation(InvalidRequest):
    """The request breaks a rule of the cluster (an internal topic with settings sparklog did not give it)."""

    code = "POLICY_VIOLATION"


class TooManyRequests(SparklogError):
    """The broker refused the call: the client address has too many calls open at once
    (``max.connections.per.ip``); retry after some of them finished."""

    code = "TOO_MANY_REQUESTS"
    retriable = True


class AuthenticationFailed(SparklogError):
    """The call was refused because its client did not prove who it is: no credentials on a
    listener that needs them, a wrong password, an unknown user, an untrusted certificate."""

    code = "UNAUTHENTICATED"


class UnsupportedSaslMechanism(AuthenticationFailed):
    """The client asked for a SASL mechanism the listener does not enable."""

    code = "UNSUPPORTED_SASL_MECHANISM"


class SessionEnded(AuthenticationFailed):
    """A connection's session may not go on: a request before its login completed, a login past
    its lifetime (``connections.max.reauth.ms``), a user removed or a password changed since."""

    code = "SESSION_ENDED"


class AuthorizationFailed(SparklogError):
    """The authenticated principal may not do this: the message names the principal, the operation
    and the resource (``User:alice may not Write topic 'events'``)."""

    code = "AUTHORIZATION_FAILED"


class TopicAuthorizationFailed(AuthorizationFailed):
    """Refused on a topic (Kafka's ``TOPIC_AUTHORIZATION_FAILED``)."""

    code = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailed(AuthorizationFailed):
    """Refused on a consumer group (Kafka's ``GROUP_AUTHORIZATION_FAILED``)."""

    code = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailed(AuthorizationFailed):
    """Refused on the cluster (Kafka's ``CLUSTER_AUTHORIZATION_FAILED``)."""

    code = "CLUSTER_AUTHORIZATION_FAILED"


class NetworkUnavailable(SparklogError):
    """This machine (or user) cannot make the network namespaces several hosts on one machine need
    (root and ``ip netns``), or a fault's tool (``nft``) is missing: the message says which."""

    code = "NETWORK_UNAVAILABLE"


class PromQLError(SparklogError):
    """A dashboard query outside the PromQL subset :mod:`sparklog.dashboard.promql` evaluates, or
    malformed."""

    code = "INVALID_QUERY"


class WorkloadFailed(SparklogError):
    """A fault run's workload (:mod:`sparklog.hosts.workload`) ended without its report: its own
    error output says why."""

    code = "WORKLOAD_FAILED"


class SparkClusterError(SparklogError):
    """A Spark standalone cluster on hosts (:mod:`sparklog.hosts.spark_cluster`) could not start
    (no Java, no pip ``pyspark``, a master or worker that exited or never registered), or a driver
    job run on it failed: the message names the process and the tail of its log."""

    code = "SPARK_CLUSTER_ERROR"


class UnknownServerError(SparklogError):
    """The broker failed in a way it did not expect; the details are in the broker's log (never sent
    to clients)."""

    code = "UNKNOWN_SERVER_ERROR"


class LakeConflict(SparklogError):
    """A topic's Delta table moved on under a tierer (another broker tiered the same partition:
    it lost its leadership): the tierer re-reads where the table stands before tiering more."""

    code = "LAKE_CONFLICT"
    retriable = True


class LakeUnavailable(SparklogError):
    """A topic's Delta table could not be read or written (its lake dir or storage failed)."""

    code = "LAKE_UNAVAILABLE"
    retriable = True


class SchemaError(InvalidRequest):
    """An Avro schema is malformed, or cannot be mapped to Arrow (refused when it is declared). Bad
    *records* (as opposed to bad schemas) raise :class:`InvalidRecord`."""

    code = "SCHEMA_ERROR"


class IncompatibleSchema(SchemaError):
    """A new schema version breaks the topic's ``schema.compatibility`` with the latest version."""

    code = "INCOMPATIBLE_SCHEMA"

    def __init__(self, message: str, problems: list | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class UnknownSchema(SchemaError):
    """The topic has no schema (it is untyped), or no such version or fingerprint."""

    code = "UNKNOWN_SCHEMA"


class SinkConflict(SparklogError):
    """Another writer changed a Spark sink's state meanwhile (two runs of the same query)."""

    code = "SINK_CONFLICT"


class CliError(SparklogError):
    """A user error the command line finds itself (a bad option combination, a missing file...)."""

    code = "CLI_ERROR"


class ZooKeeperNotAvailable(SparklogError):
    """Java or the ZooKeeper jars are not installed on this machine."""

    code = "ZOOKEEPER_NOT_INSTALLED"


class ZooKeeperStartError(SparklogError):
    """The embedded ZooKeeper process could not be started, died, or did not become ready in time."""

    code = "ZOOKEEPER_START_FAILED"


class KafkaNotInstalled(SparklogError):
    """A benchmark's Kafka peer is missing (jars, Java or confluent-kafka): run ``benchmarks/fetch_kafka.sh``."""

    code = "KAFKA_NOT_INSTALLED"


def _all_error_types() -> dict[str, type[SparklogError]]:
    found: dict[str, type[SparklogError]] = {}
    stack: list[type[SparklogError]] = [SparklogError]
    while stack:
        cls = stack.pop()
        found[cls.code] = cls
        stack.extend(cls.__subclasses__())
    return found


def error_from_code(code: str, message: str) -> SparklogError:
    """Rebuild the typed error named by ``code`` (unknown codes give a plain :class:`SparklogError`)."""
    return _all_error_types().get(code, SparklogError)(message)


class UnsupportedCompression(SparklogError):
    """A Kafka record batch compressed with a codec this build does not decode."""

    code = "UNSUPPORTED_COMPRESSION_TYPE"


class BrokerIdInUse(InvalidRequest):
    """Another live broker is registered under this broker's id."""

    code = "BROKER_ID_IN_USE"


class PortInUse(SparklogError):
    """A port a broker was told to listen on (its metrics endpoint's) cannot be bound."""

    code = "PORT_IN_USE"


class DirectoryInUse(SparklogError):
    """A data directory is locked by another process (a broker, a ZooKeeper, `sparklog up`)."""

    code = "DIRECTORY_IN_USE"
