"""The options of the ``sparklog`` data source: names (Kafka connector names where one exists),
parsing and validation.

Spark hands options over lower-cased and as strings; every check here names the option the way the
user wrote it in the documentation (``startingOffsets``, not ``startingoffsets``). Everything that can
be checked without a cluster is checked when the ``DataSource`` is built, which Spark does at
``load()`` (reads) and ``save()``/``start()`` (writes); checks that depend on whether the read is a
batch or a stream run when Spark asks for that reader.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import json
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from sparklog.client.cluster_address import ClusterAddress, parse_bootstrap_servers
from sparklog.datasource import kafka_settings
from sparklog.datasource.producer_settings import PRODUCER_OPTIONS, parse_producer_settings
from sparklog.errors import InvalidConfig, InvalidGroupId, InvalidRequest, InvalidTopic
from sparklog.names import INTERNAL_TOPIC_PREFIX, check_group_id, check_topic_name
from sparklog.schemas.projection import parse_fields
from sparklog.security.client_config import KEYS as SECURITY_KEYS
from sparklog.security.client_config import SPARK_PREFIX, ClientSecurity

log = logging.getLogger("sparklog.datasource")

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
ZOOKEEPER_ENV = "SPARKLOG_ZOOKEEPER"
DEFAULT_STAGING_TOPIC = "__sparklog_staging"
DEFAULT_BATCH_RECORDS = 10_000

# Kafka's special offsets inside a JSON offsets object
EARLIEST = -2
LATEST = -1

# canonical spelling of every option, by its lower-cased name
# ``bootstrap.servers`` (brokers only: the job opens no ZooKeeper session) or its Kafka connector
# spelling ``kafka.bootstrap.servers``; else ``zookeeper``
BOOTSTRAP_OPTIONS = ("bootstrap.servers", "kafka.bootstrap.servers")
# the client's TLS and SASL settings (librdkafka's names), also with the connector's ``kafka.`` prefix
SECURITY_OPTIONS = (*SECURITY_KEYS, *(f"{SPARK_PREFIX}{key}" for key in SECURITY_KEYS))
READ_OPTIONS = (
    "zookeeper",
    *BOOTSTRAP_OPTIONS,
    *SECURITY_OPTIONS,
    "topic",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "maxOffsetsPerTrigger",
    "maxRecordsPerTrigger",  # sparklog's older name of maxOffsetsPerTrigger
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxPartitions",
    "group",
    "kafka.group.id",  # Kafka's name of 'group'
    "groupIdPrefix",
    "failOnDataLoss",
    "includeHeaders",
    "fields",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
)
# Kafka connector defaults
DEFAULT_MAX_TRIGGER_DELAY = "15m"
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Kafka: spark.network.timeout
DEFAULT_FETCH_OFFSET_RETRIES = 3
DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS = 10
TIMESTAMP_STRATEGIES = ("error", "latest")
# test-only fault injection (see writer.py): never documented for users
TEST_FAIL_TASK_ONCE = "sparklog.test.failTaskOnce"
TEST_CRASH_COMMIT = "sparklog.test.crashCommit"
WRITE_OPTIONS = (
    "zookeeper",
    *BOOTSTRAP_OPTIONS,
    *SECURITY_OPTIONS,
    "topic",
    "stagingTopic",
    "batchRecords",
    "checkpointLocation",  # Spark passes the streaming checkpoint to the sink; used for nothing but the query id
    *PRODUCER_OPTIONS,  # kafka.acks, partitioner, ...: producer_settings.py
    TEST_FAIL_TASK_ONCE,
    TEST_CRASH_COMMIT,
)
CANONICAL = {name.lower(): name for name in READ_OPTIONS + WRITE_OPTIONS}
CRASH_POINTS = ("start", "intent", "mid", "published")


def _name(key: str) -> str:
    return CANONICAL.get(key.lower(), key)


def _fail(option: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"sparklog option '{_name(option)}': {message}")


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _fail(key, f"must be true or false, got {raw!r}")


def _positive_int(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise _fail(key, f"must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise _fail(key, f"must be a positive integer, got {raw!r}")
    return value


def _count(options: Mapping[str, str], key: str, default: int) -> int:
    """A non-negative integer option."""
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise _fail(key, f"must be an integer >= 0, got {raw!r}")
    return value


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(key: str, raw: str) -> int:
    """Spark's time strings (``15m``, ``10s``, ``500ms``, ``2h``, ``1d``; a bare number is ms)."""
    found = re.fullmatch(r"(\d+)\s*([a-z]*)", str(raw).strip().lower())
    if found is None or found.group(2) not in (*_TIME_UNITS_MS, ""):
        raise _fail(key, f"must be a time like '15m', '30s' or '500ms', got {raw!r}")
    return int(int(found.group(1)) * _TIME_UNITS_MS.get(found.group(2), 1))


def parse_timestamp(key: str, raw: str) -> int:
    """Milliseconds since the epoch from ``1767225600000`` or an ISO-8601 time (UTC when no zone)."""
    text = str(raw).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _fail(key, f"must be milliseconds since the epoch or an ISO-8601 time, got {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _topic_name(key: str, name: object) -> str:
    """``name`` if it is a valid topic name, else InvalidTopic naming the option."""
    try:
        return check_topic_name(name)
    except InvalidTopic as exc:
        raise InvalidTopic(f"sparklog option '{_name(key)}': {exc}") from None


def _topics(key: str, raw: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in str(raw).split(",") if t.strip())
    if not names:
        raise _fail(key, "needs at least one topic name")
    for name in names:
        _topic_name(key, name)
    if len(set(names)) != len(names):
        raise _fail(key, f"names a topic twice: {raw!r}")
    return names


OffsetSpec = dict[str, dict[int, int]]


def _json_object(key: str, raw: str, example: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _fail(key, f"is neither a keyword nor valid JSON ({exc}): {raw!r}") from None
    if not isinstance(data, dict) or not data:
        raise _fail(key, f"must be a JSON object like {example}, got {raw!r}")
    return data


def _partition_number(key: str, topic: str, p: object) -> int:
    try:
        partition = int(p)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise _fail(key, f"partition {p!r} of topic {topic!r} is not a number") from None
    if isinstance(p, bool) or partition < 0:
        raise _fail(key, f"partition {p!r} of topic {topic!r} is not a partition number")
    return partition


def parse_offsets_json(key: str, raw: str, allow_earliest: bool = True, timestamps: bool = False) -> OffsetSpec:
    """``{"topic": {"0": 23, "1": -2}}`` -> {topic: {partition: offset}}; -2 is earliest, -1 latest.
    With ``timestamps`` the numbers are milliseconds since the epoch (``*OffsetsByTimestamp``)."""
    data = _json_object(key, raw, '{"topic": {"0": 23}}')
    out: OffsetSpec = {}
    for topic, parts in data.items():
        _topic_name(key, topic)
        if not isinstance(parts, dict) or not parts:
            raise _fail(key, f'topic {topic!r} needs an object of partition offsets like {{"0": 23}}')
        out[topic] = {}
        for p, offset in parts.items():
            partition = _partition_number(key, topic, p)
            what = "timestamp" if timestamps else "offset"
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise _fail(key, f"{what} of {topic}-{p} must be an integer, got {offset!r}")
            low = 0 if timestamps else EARLIEST if allow_earliest else LATEST
            if offset < low:
                allowed = ", or -2 (earliest), -1 (latest)" if allow_earliest else ", or -1 (latest)"
                allowed = "" if timestamps else allowed
                raise _fail(key, f"{what} of {topic}-{p} must be >= 0{allowed}; got {offset}")
            out[topic][partition] = offset
    return out


def parse_assign(raw: str) -> tuple[tuple[str, int], ...]:
    """Kafka's ``assign`` JSON ``{"topicA": [0, 1], "topicB": [2]}`` -> sorted (topic, partition)s."""
    if not str(raw).strip().startswith("{"):
        raise _fail("assign", f"No topicpartitions to assign as specified value for option 'assign' is {raw!r}")
    data = _json_object("assign", raw, '{"topicA": [0, 1]}')
    out: set[tuple[str, int]] = set()
    for topic, parts in data.items():
        _topic_name("assign", topic)
        if not isinstance(parts, list) or not parts:
            raise _fail("assign", f"topic {topic!r} needs a list of partition numbers like [0, 1]")
        out.update((topic, _partition_number("assign", topic, p)) for p in parts)
    return tuple(sorted(out))


@dataclasses.dataclass(frozen=True)
class Subscription:
    """Which topics a read covers: a fixed list, a regular expression (full match), or fixed topic
    partitions (``assign``)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    @property
    def named(self) -> tuple[str, ...]:
        """The topics named by ``subscribe`` or ``assign`` (none for a pattern)."""
        return self.topics or tuple(dict.fromkeys(t for t, _ in self.assigned))

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return not topic.startswith(INTERNAL_TOPIC_PREFIX) and re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics

    def describe(self) -> str:
        if self.pattern is not None:
            return f"pattern {self.pattern!r}"
        if self.assigned:
            return "assigned " + ", ".join(f"{t}-{p}" for t, p in self.assigned)
        return ", ".join(self.topics)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """Everything a read needs, parsed (picklable: plain values only)."""

    zookeeper: str
    bootstrap_servers: str | None
    security: ClientSecurity
    subscription: Subscription
    starting: str  # default | earliest | latest | group | json | timestamp | timestamps
    starting_json: OffsetSpec | None  # json: offsets; timestamps: a timestamp per partition
    starting_timestamp: int | None
    ending: str  # latest | json | timestamp | timestamps
    ending_json: OffsetSpec | None
    ending_timestamp: int | None
    max_records_per_trigger: int | None  # maxOffsetsPerTrigger
    min_partitions: int | None
    group: str | None  # group or kafka.group.id
    fail_on_data_loss: bool
    include_headers: bool
    fields: tuple[str, ...] | None  # typed topics: the value fields to fetch
    given: frozenset[str]  # lower-cased names the user set
    starting_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    min_records_per_trigger: int | None = None  # minOffsetsPerTrigger
    max_trigger_delay_ms: int = 15 * 60_000
    max_records_per_partition: int | None = None
    max_partitions: int | None = None  # small offset ranges share input partitions beyond this many
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_retries: int = DEFAULT_FETCH_OFFSET_RETRIES
    fetch_offset_retry_interval_ms: int = DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
    ignored_kafka_settings: tuple[str, ...] = ()

    def has(self, name: str) -> bool:
        return name.lower() in self.given

    @property
    def address(self) -> ClusterAddress:
        return ClusterAddress(self.zookeeper, self.bootstrap_servers, self.security)


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    zookeeper: str
    bootstrap_servers: str | None
    security: ClientSecurity
    topic: str | None
    staging_topic: str
    batch_records: int
    checkpoint_location: str | None
    partitioner: str | None  # how keyed rows are placed (None: each target topic's own partitioner)
    test_fail_task_once: str | None
    test_crash_commit: tuple[str, str] | None  # (marker file, point)

    @property
    def address(self) -> ClusterAddress:
        return ClusterAddress(self.zookeeper, self.bootstrap_servers, self.security)


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_known(options: Mapping[str, Any]) -> None:
    """Unknown option names fail (with the closest known name when there is one). Kafka client
    settings (``kafka.*``) are all known: see :mod:`sparklog.datasource.kafka_settings`."""
    for key in _lower(options):
        if key not in CANONICAL and not kafka_settings.is_kafka_option(key):
            close = difflib.get_close_matches(key, list(CANONICAL), n=1)
            hint = f"; did you mean '{CANONICAL[close[0]]}'?" if close else ""
            known = ", ".join(sorted(set(CANONICAL.values()) - {TEST_FAIL_TASK_ONCE, TEST_CRASH_COMMIT}))
            raise InvalidRequest(f"unknown sparklog option '{key}'{hint} (known options: {known})")


def _zookeeper(opts: Mapping[str, str]) -> str:
    value = opts.get("zookeeper") or os.environ.get(ZOOKEEPER_ENV) or DEFAULT_ZOOKEEPER
    if not value.strip():
        raise _fail("zookeeper", "must not be empty")
    return value.strip()


def _bootstrap_servers(opts: Mapping[str, str]) -> str | None:
    """``bootstrap.servers`` or ``kafka.bootstrap.servers`` (both given must agree), checked."""
    given = {name: opts[name].strip() for name in BOOTSTRAP_OPTIONS if name in opts}
    if len(set(given.values())) > 1:
        raise InvalidRequest("sparklog options 'bootstrap.servers' and 'kafka.bootstrap.servers' contradict")
    if not given:
        return None
    name, value = next(iter(given.items()))
    try:
        parse_bootstrap_servers(value)
    except InvalidConfig as exc:
        raise _fail(name, str(exc)) from None
    return value


STRATEGIES = ("topic", "subscribe", "subscribePattern", "assign")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    chosen = [k for k in STRATEGIES if k.lower() in opts]
    if len(chosen) != 1:
        if not chosen:
            raise InvalidRequest(
                "sparklog read needs one of the options 'subscribe', 'subscribePattern', 'assign' or 'topic'"
            )
        raise InvalidRequest(f"sparklog options {' and '.join(repr(c) for c in chosen)} contradict: give only one")
    if chosen[0] == "subscribePattern":
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise _fail("subscribePattern", "is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail("subscribePattern", f"is not a valid regular expression ({exc}): {pattern!r}") from None
        return Subscription(pattern=pattern)
    if chosen[0] == "assign":
        return Subscription(assigned=parse_assign(opts["assign"]))
    return Subscription(topics=_topics(chosen[0], opts[chosen[0].lower()]))


def _same(opts: Mapping[str, str], names: tuple[str, str]) -> str | None:
    """The value of whichever of two names for one option is given (both given must agree)."""
    given = {name: opts[name.lower()].strip() for name in names if name.lower() in opts}
    if len(set(given.values())) > 1:
        raise InvalidRequest(f"sparklog options '{names[0]}' and '{names[1]}' contradict: give only one")
    return next(iter(given.values()), None)


def _group(opts: Mapping[str, str]) -> str | None:
    group = _same(opts, ("group", "kafka.group.id"))
    if group is not None:
        try:
            check_group_id(group)
        except InvalidGroupId as exc:
            which = "group" if "group" in opts else "kafka.group.id"
            raise InvalidGroupId(f"sparklog option '{which}': {exc}") from None
    return group


def _position(
    opts: Mapping[str, str], edge: str, keywords: tuple[str, ...]
) -> tuple[str, OffsetSpec | None, int | None]:
    """Where a read starts or ends (``edge``: starting | ending), by Kafka's precedence:
    ``<edge>Timestamp``, then ``<edge>OffsetsByTimestamp``, then ``<edge>Offsets``."""
    at, by_time, offs = f"{edge}Timestamp", f"{edge}OffsetsByTimestamp", f"{edge}Offsets"
    if at.lower() in opts:
        return "timestamp", None, parse_timestamp(at, opts[at.lower()])
    if by_time.lower() in opts:
        return "timestamps", parse_offsets_json(by_time, opts[by_time.lower()], timestamps=True), None
    if offs.lower() not in opts:
        return "default", None, None
    raw = opts[offs.lower()].strip()
    if raw.lower() in keywords:
        return raw.lower(), None, None
    if raw.lower() in ("earliest", "latest", "group"):
        allowed = " or ".join(f"'{k}'" for k in keywords)
        raise _fail(offs, f"must be {allowed} or a JSON offsets object, got {raw!r}")
    return "json", parse_offsets_json(offs, raw, allow_earliest=edge == "starting"), None


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Validate the options of a read (batch or stream); raise InvalidRequest naming the option."""
    check_known(options)
    opts = _lower(options)
    for key in WRITE_OPTIONS:
        if key.lower() in opts and key not in READ_OPTIONS and not kafka_settings.is_kafka_option(key):
            raise _fail(key, "is an option of writes, not of reads")
    ignored = kafka_settings.warn_ignored(opts, "read")  # the sink's kafka.* producer settings among them
    subscription = _subscription(opts)

    fields = None
    if "fields" in opts:
        try:
            fields = tuple(parse_fields(opts["fields"]))
        except InvalidRequest as exc:
            raise _fail("fields", str(exc)) from None

    group = _group(opts)
    starting, starting_json, starting_ts = _position(opts, "starting", ("earliest", "latest", "group"))
    if starting == "group" and group is None:
        raise _fail("startingOffsets", "is 'group' but the option 'group' (or 'kafka.group.id') is not set")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        given = opts["startingoffsetsbytimestampstrategy"]
        raise _fail("startingOffsetsByTimestampStrategy", f"must be 'error' or 'latest', got {given!r}")
    ending, ending_json, ending_ts = _position(opts, "ending", ("latest",))
    if ending == "default":
        ending = "latest"

    for key, mode, spec in (
        ("startingOffsets", starting, starting_json),
        ("endingOffsets", ending, ending_json),
    ):
        if mode == "timestamps":
            key = key.replace("Offsets", "OffsetsByTimestamp")
        for topic in spec or {}:
            if not subscription.matches(topic):
                raise _fail(key, f"names topic {topic!r}, which is not subscribed ({subscription.describe()})")

    max_rows = _positive_int(opts, "maxOffsetsPerTrigger")
    old_max = _positive_int(opts, "maxRecordsPerTrigger")
    if max_rows is not None and old_max is not None and max_rows != old_max:
        raise InvalidRequest("sparklog options 'maxOffsetsPerTrigger' and 'maxRecordsPerTrigger' contradict")
    max_rows = max_rows if max_rows is not None else old_max
    min_rows = _positive_int(opts, "minOffsetsPerTrigger")
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise InvalidRequest(
            f"The value of minOffsetPerTrigger({min_rows}) is higher than the maxOffsetsPerTrigger({max_rows})."
        )
    delay = parse_duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY))

    return ReadOptions(
        zookeeper=_zookeeper(opts),
        bootstrap_servers=_bootstrap_servers(opts),
        security=ClientSecurity.from_config(opts),
        subscription=subscription,
        starting=starting,
        starting_json=starting_json,
        starting_timestamp=starting_ts,
        ending=ending,
        ending_json=ending_json,
        ending_timestamp=ending_ts,
        max_records_per_trigger=max_rows,
        min_partitions=_positive_int(opts, "minPartitions"),
        group=group,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        fields=fields,
        given=frozenset(opts),
        starting_strategy=strategy,
        min_records_per_trigger=min_rows,
        max_trigger_delay_ms=delay,
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_partitions=_max_partitions(opts),
        poll_timeout_ms=_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        fetch_offset_retries=_count(opts, "fetchOffset.numRetries", DEFAULT_FETCH_OFFSET_RETRIES),
        fetch_offset_retry_interval_ms=_count(
            opts, "fetchOffset.retryIntervalMs", DEFAULT_FETCH_OFFSET_RETRY_INTERVAL_MS
        ),
        ignored_kafka_settings=tuple(ignored),
    )


def _max_partitions(opts: Mapping[str, str]) -> int | None:
    """``maxPartitions``, never below ``minPartitions`` (a read cannot have both)."""
    most, least = _positive_int(opts, "maxPartitions"), _positive_int(opts, "minPartitions")
    if most is not None and least is not None and least > most:
        raise _fail("maxPartitions", f"{most} is below minPartitions={least}")
    return most


def check_batch_read(options: ReadOptions) -> None:
    """What only a batch read refuses (raised when Spark plans the read), with Kafka's messages."""
    if options.starting == "latest":
        raise _fail("startingOffsets", "starting offset can't be latest for batch queries (read from 'earliest')")
    if options.starting == "json":
        for topic, parts in (options.starting_json or {}).items():
            for partition, offset in parts.items():
                if offset == LATEST:
                    raise _fail(
                        "startingOffsets",
                        f"startingOffsets for {topic}-{partition} can't be latest (-1) for batch queries",
                    )
    # Kafka's batch jobs may carry kafka.group.id (batch reads commit nothing: it is only read with
    # startingOffsets=group); sparklog's own 'group' there is a mistake worth saying
    if options.has("group") and options.starting != "group":
        raise _fail("group", "on a batch read is only used with startingOffsets=group (batch reads commit nothing)")
    for key in ("maxOffsetsPerTrigger", "maxRecordsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if options.has(key):
            log.warning("sparklog: %s option ignored in batch queries", key)


def check_stream_read(options: ReadOptions) -> None:
    """What only a streaming read refuses (raised when the query starts)."""
    for key in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
        if options.has(key):
            raise _fail(key, "applies to batch reads only (a stream has no end)")


def parse_write_options(options: Mapping[str, Any]) -> WriteOptions:
    check_known(options)
    opts = _lower(options)
    kafka_settings.warn_ignored(opts, "write")
    for key in READ_OPTIONS:
        if key.lower() in opts and key not in WRITE_OPTIONS:
            raise _fail(key, "is an option of reads, not of writes")
    topic = opts.get("topic")
    if topic is not None:
        topic = _topics("topic", topic)
        if len(topic) != 1:
            raise _fail("topic", "names the one topic a write goes to (rows may name others in a 'topic' column)")
        topic = topic[0]
    # a staging topic named '__sparklog...' is the sink's own (created with its settings); any other
    # is the user's; either way the sink checks its settings before staging rows in it
    staging = _topic_name("stagingTopic", opts.get("stagingtopic", DEFAULT_STAGING_TOPIC).strip())
    if staging == topic:
        raise _fail("stagingTopic", f"names the target topic {topic!r}; staged rows must go to another topic")
    crash = None
    if TEST_CRASH_COMMIT.lower() in opts:
        marker, _, point = opts[TEST_CRASH_COMMIT.lower()].rpartition(":")
        if point not in CRASH_POINTS or not marker:
            raise _fail(TEST_CRASH_COMMIT, f"must be '<marker file>:<{'|'.join(CRASH_POINTS)}>'")
        crash = (marker, point)
    return WriteOptions(
        zookeeper=_zookeeper(opts),
        bootstrap_servers=_bootstrap_servers(opts),
        security=ClientSecurity.from_config(opts),
        topic=topic,
        staging_topic=staging,
        batch_records=_positive_int(opts, "batchRecords") or DEFAULT_BATCH_RECORDS,
        checkpoint_location=opts.get("checkpointlocation"),
        partitioner=parse_producer_settings(opts).partitioner,
        test_fail_task_once=opts.get(TEST_FAIL_TASK_ONCE.lower()),
        test_crash_commit=crash,
    )
