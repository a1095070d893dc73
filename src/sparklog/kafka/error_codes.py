"""sparklog's errors as Kafka's error codes (the numbers from kafka-python's ``kafka.errors``, which
follows Kafka's ``Errors``), so a Kafka client retries what Kafka's clients retry and fails what
they fail."""

from __future__ import annotations

import kafka.errors as kerr

from sparklog.errors import SparklogError

NONE = 0
UNKNOWN_SERVER_ERROR = kerr.UnknownError.errno
UNSUPPORTED_VERSION = kerr.UnsupportedVersionError.errno
UNKNOWN_TOPIC_OR_PARTITION = kerr.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = kerr.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = kerr.NotLeaderForPartitionError.errno
OFFSET_OUT_OF_RANGE = kerr.OffsetOutOfRangeError.errno
MESSAGE_TOO_LARGE = kerr.MessageSizeTooLargeError.errno
CORRUPT_MESSAGE = kerr.CorruptRecordError.errno
INVALID_REQUEST = kerr.InvalidRequestError.errno
INVALID_REQUIRED_ACKS = kerr.InvalidRequiredAcksError.errno
FENCED_LEADER_EPOCH = kerr.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = kerr.UnknownLeaderEpochError.errno
TOPIC_AUTHORIZATION_FAILED = kerr.TopicAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED = kerr.GroupAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED = kerr.ClusterAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = kerr.TransactionalIdAuthorizationFailedError.errno
COORDINATOR_NOT_AVAILABLE = kerr.CoordinatorNotAvailableError.errno
NOT_COORDINATOR = kerr.NotCoordinatorError.errno
# the classic consumer group protocol
INVALID_GROUP_ID = kerr.InvalidGroupIdError.errno
ILLEGAL_GENERATION = kerr.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL = kerr.InconsistentGroupProtocolError.errno
UNKNOWN_MEMBER_ID = kerr.UnknownMemberIdError.errno
INVALID_SESSION_TIMEOUT = kerr.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS = kerr.RebalanceInProgressError.errno
NON_EMPTY_GROUP = kerr.NonEmptyGroupError.errno
GROUP_ID_NOT_FOUND = kerr.GroupIdNotFoundError.errno
MEMBER_ID_REQUIRED = kerr.MemberIdRequiredError.errno
FENCED_INSTANCE_ID = kerr.FencedInstanceIdError.errno
GROUP_SUBSCRIBED_TO_TOPIC = kerr.GroupSubscribedToTopicError.errno
INVALID_RECORD = kerr.InvalidRecordError.errno
REQUEST_TIMED_OUT = kerr.RequestTimedOutError.errno
INVALID_TOPIC_EXCEPTION = kerr.InvalidTopicError.errno
TOPIC_ALREADY_EXISTS = kerr.TopicAlreadyExistsError.errno
INVALID_PARTITIONS = kerr.InvalidPartitionsError.errno
INVALID_REPLICATION_FACTOR = kerr.InvalidReplicationFactorError.errno
INVALID_REPLICA_ASSIGNMENT = kerr.InvalidReplicationAssignmentError.errno
INVALID_CONFIG = kerr.InvalidConfigurationError.errno
UNSUPPORTED_ENDPOINT_TYPE = kerr.UnsupportedEndpointTypeError.errno
# logging in (SASL)
UNSUPPORTED_SASL_MECHANISM = kerr.UnsupportedSaslMechanismError.errno
ILLEGAL_SASL_STATE = kerr.IllegalSaslStateError.errno
SASL_AUTHENTICATION_FAILED = kerr.SaslAuthenticationFailedError.errno
# security administration (users' SCRAM credentials, ACLs, client quotas)
RESOURCE_NOT_FOUND = kerr.ResourceNotFoundError.errno
DUPLICATE_RESOURCE = kerr.DuplicateResourceError.errno
UNACCEPTABLE_CREDENTIAL = kerr.UnacceptableCredentialError.errno

# sparklog's error codes (``SparklogError.code``) -> Kafka's
_BY_CODE: dict[str, int] = {
    "INVALID_CONFIG": INVALID_CONFIG,
    "INVALID_RECORD": INVALID_RECORD,
    "OUT_OF_ORDER_SEQUENCE": kerr.OutOfOrderSequenceNumberError.errno,
    "DUPLICATE_SEQUENCE": kerr.DuplicateSequenceNumberError.errno,
    "INVALID_TIMESTAMP": kerr.InvalidTimestampError.errno,
    "RECORD_TOO_LARGE": MESSAGE_TOO_LARGE,
    "OFFSET_OUT_OF_RANGE": OFFSET_OUT_OF_RANGE,
    "CORRUPT_RECORD": CORRUPT_MESSAGE,
    "LOG_CLOSED": NOT_LEADER_OR_FOLLOWER,  # the broker is stopping: retry elsewhere
    "UNKNOWN_TOPIC": UNKNOWN_TOPIC_OR_PARTITION,
    "TOPIC_EXISTS": TOPIC_ALREADY_EXISTS,
    "NOT_LEADER": NOT_LEADER_OR_FOLLOWER,
    "FENCED_LEADER_EPOCH": FENCED_LEADER_EPOCH,
    "UNKNOWN_LEADER_EPOCH": UNKNOWN_LEADER_EPOCH,
    "NOT_ENOUGH_REPLICAS": kerr.NotEnoughReplicasError.errno,
    "BROKER_NOT_AVAILABLE": kerr.BrokerNotAvailableError.errno,
    "REQUEST_TIMED_OUT": REQUEST_TIMED_OUT,
    "COORDINATOR_NOT_AVAILABLE": COORDINATOR_NOT_AVAILABLE,
    "UNKNOWN_GROUP": GROUP_ID_NOT_FOUND,
    "UNKNOWN_MEMBER_ID": UNKNOWN_MEMBER_ID,
    "NON_EMPTY_GROUP": NON_EMPTY_GROUP,
    "INVALID_REQUEST": INVALID_REQUEST,
    "INVALID_TOPIC": INVALID_TOPIC_EXCEPTION,
    "INVALID_GROUP_ID": INVALID_GROUP_ID,
    "INVALID_PARTITIONS": INVALID_PARTITIONS,
    "INVALID_REPLICATION_FACTOR": INVALID_REPLICATION_FACTOR,
    "INVALID_REPLICA_ASSIGNMENT": INVALID_REPLICA_ASSIGNMENT,
    "POLICY_VIOLATION": kerr.PolicyViolationError.errno,
    "TOO_MANY_REQUESTS": kerr.ThrottlingQuotaExceededError.errno,
    "UNAUTHENTICATED": kerr.SaslAuthenticationFailedError.errno,
    "AUTHORIZATION_FAILED": TOPIC_AUTHORIZATION_FAILED,
    "TOPIC_AUTHORIZATION_FAILED": TOPIC_AUTHORIZATION_FAILED,
    "GROUP_AUTHORIZATION_FAILED": GROUP_AUTHORIZATION_FAILED,
    "CLUSTER_AUTHORIZATION_FAILED": CLUSTER_AUTHORIZATION_FAILED,
    "UNSUPPORTED_SASL_MECHANISM": UNSUPPORTED_SASL_MECHANISM,
    "UNSUPPORTED_COMPRESSION_TYPE": kerr.UnsupportedCompressionTypeError.errno,
    "UNACCEPTABLE_CREDENTIAL": kerr.UnacceptableCredentialError.errno,
    "INVALID_USER_NAME": kerr.ResourceNotFoundError.errno,
    "SCHEMA_ERROR": INVALID_RECORD,
    "INCOMPATIBLE_SCHEMA": INVALID_RECORD,
    "UNKNOWN_SCHEMA": INVALID_RECORD,
}


def error_code(exc: BaseException) -> int:
    """Kafka's error code for ``exc`` (UNKNOWN_SERVER_ERROR for anything unexpected)."""
    if isinstance(exc, SparklogError):
        return _BY_CODE.get(exc.code, UNKNOWN_SERVER_ERROR)
    return UNKNOWN_SERVER_ERROR


def error_message(exc: BaseException, limit: int = 500) -> str:
    """What a response's error message says (short; an unexpected error's details stay in the log)."""
    if isinstance(exc, SparklogError):
        return str(exc)[:limit]
    return "unexpected server error; see the broker's log"
