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
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from sparklog.client.cluster_address import ClusterAddress, parse_bootstrap_servers
from sparklog.datasource.producer_settings import PRODUCER_OPTIONS, parse_producer_settings
from sparklog.errors import InvalidConfig, InvalidGroupId, InvalidRequest, InvalidTopic
from sparklog.names import INTERNAL_TOPIC_PREFIX, check_group_id, check_topic_name
from sparklog.security.client_config import KEYS as SECURITY_KEYS
from sparklog.security.client_config import SPARK_PREFIX, ClientSecurity

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
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "endingTimestamp",
    "maxRecordsPerTrigger",
    "minPartitions",
    "group",
    "failOnDataLoss",
    "includeHeaders",
    "fields",
)
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


def parse_offsets_json(key: str, raw: str, allow_earliest: bool = True) -> OffsetSpec:
    """``{"topic": {"0": 23, "1": -2}}`` -> {topic: {partition: offset}}; -2 is earliest, -1 latest."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _fail(key, f"is neither a keyword nor valid JSON ({exc}): {raw!r}") from None
    if not isinstance(data, dict) or not data:
        raise _fail(key, f'must be a JSON object like {{"topic": {{"0": 23}}}}, got {raw!r}')
    out: OffsetSpec = {}
    for topic, parts in data.items():
        _topic_name(key, topic)
        if not isinstance(parts, dict) or not parts:
            raise _fail(key, f'topic {topic!r} needs an object of partition offsets like {{"0": 23}}')
        out[topic] = {}
        for p, offset in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise _fail(key, f"partition {p!r} of topic {topic!r} is not a number") from None
            if partition < 0:
                raise _fail(key, f"partition {p!r} of topic {topic!r} is negative")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise _fail(key, f"offset of {topic}-{p} must be an integer, got {offset!r}")
            low = EARLIEST if allow_earliest else LATEST
            if offset < low:
                allowed = "-2 (earliest), -1 (latest)" if allow_earliest else "-1 (latest)"
                raise _fail(key, f"offset of {topic}-{p} must be >= 0, or {allowed}; got {offset}")
            out[topic][partition] = offset
    return out


@dataclasses.dataclass(frozen=True)
class Subscription:
    """Which topics a read covers: a fixed list or a regular expression (full match)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return not topic.startswith(INTERNAL_TOPIC_PREFIX) and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def describe(self) -> str:
        return f"pattern {self.pattern!r}" if self.pattern is not None else ", ".join(self.topics)


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """Everything a read needs, parsed (picklable: plain values only)."""

    zookeeper: str
    bootstrap_servers: str | None
    security: ClientSecurity
    subscription: Subscription
    starting: str  # earliest | latest | group | json | timestamp
    starting_json: OffsetSpec | None
    starting_timestamp: int | None
    ending: str  # latest | json | timestamp
    ending_json: OffsetSpec | None
    ending_timestamp: int | None
    max_records_per_trigger: int | None
    min_partitions: int | None
    group: str | None
    fail_on_data_loss: bool
    include_headers: bool
    fields: tuple[str, ...] | None  # typed topics: the value fields to fetch
    given: frozenset[str]  # lower-cased names the user set

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
    """Unknown option names fail (with the closest known name when there is one)."""
    import difflib

    for key in _lower(options):
        if key not in CANONICAL:
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


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Validate the options of a read (batch or stream); raise InvalidRequest naming the option."""
    check_known(options)
    opts = _lower(options)
    for key in WRITE_OPTIONS:
        if key.lower() in opts and key not in READ_OPTIONS:
            raise _fail(key, "is an option of writes, not of reads")
    chosen = [k for k in ("topic", "subscribe", "subscribePattern") if k.lower() in opts]
    if len(chosen) != 1:
        if not chosen:
            raise InvalidRequest("sparklog read needs one of the options 'subscribe', 'topic' or 'subscribePattern'")
        raise InvalidRequest(f"sparklog options {' and '.join(repr(c) for c in chosen)} contradict: give only one")
    if chosen[0] == "subscribePattern":
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _fail("subscribePattern", f"is not a valid regular expression ({exc}): {pattern!r}") from None
        subscription = Subscription(pattern=pattern)
    else:
        subscription = Subscription(topics=_topics(chosen[0], opts[chosen[0].lower()]))

    fields = None
    if "fields" in opts:
        from sparklog.schemas.projection import parse_fields

        try:
            fields = tuple(parse_fields(opts["fields"]))
        except InvalidRequest as exc:
            raise _fail("fields", str(exc)) from None

    group = opts.get("group")
    if group is not None:
        try:
            check_group_id(group)
        except InvalidGroupId as exc:
            raise InvalidGroupId(f"sparklog option 'group': {exc}") from None

    starting, starting_json, starting_ts = "default", None, None
    if "startingoffsets" in opts and "startingtimestamp" in opts:
        raise InvalidRequest("sparklog options 'startingOffsets' and 'startingTimestamp' contradict: give only one")
    if "startingtimestamp" in opts:
        starting, starting_ts = "timestamp", parse_timestamp("startingTimestamp", opts["startingtimestamp"])
    elif "startingoffsets" in opts:
        raw = opts["startingoffsets"].strip()
        if raw.lower() in ("earliest", "latest", "group"):
            starting = raw.lower()
        else:
            starting, starting_json = "json", parse_offsets_json("startingOffsets", raw)
    if starting == "group" and group is None:
        raise _fail("startingOffsets", "is 'group' but the option 'group' is not set")

    ending, ending_json, ending_ts = "latest", None, None
    if "endingoffsets" in opts and "endingtimestamp" in opts:
        raise InvalidRequest("sparklog options 'endingOffsets' and 'endingTimestamp' contradict: give only one")
    if "endingtimestamp" in opts:
        ending, ending_ts = "timestamp", parse_timestamp("endingTimestamp", opts["endingtimestamp"])
    elif "endingoffsets" in opts:
        raw = opts["endingoffsets"].strip()
        if raw.lower() == "latest":
            ending = "latest"
        elif raw.lower() in ("earliest", "group"):
            raise _fail("endingOffsets", f"must be 'latest' or a JSON offsets object, got {raw!r}")
        else:
            ending, ending_json = "json", parse_offsets_json("endingOffsets", raw, allow_earliest=False)

    for key, spec in (("startingOffsets", starting_json), ("endingOffsets", ending_json)):
        for topic in spec or {}:
            if not subscription.matches(topic):
                raise _fail(key, f"names topic {topic!r}, which is not subscribed ({subscription.describe()})")

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
        max_records_per_trigger=_positive_int(opts, "maxRecordsPerTrigger"),
        min_partitions=_positive_int(opts, "minPartitions"),
        group=group,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        fields=fields,
        given=frozenset(opts),
    )


def check_batch_read(options: ReadOptions) -> None:
    """What only a batch read refuses (raised when Spark plans the read)."""
    if options.has("maxRecordsPerTrigger"):
        raise _fail("maxRecordsPerTrigger", "applies to streaming reads only")
    if options.group is not None and options.starting != "group":
        raise _fail("group", "on a batch read is only used with startingOffsets=group (batch reads commit nothing)")


def check_stream_read(options: ReadOptions) -> None:
    """What only a streaming read refuses (raised when the query starts)."""
    for key in ("endingOffsets", "endingTimestamp"):
        if options.has(key):
            raise _fail(key, "applies to batch reads only (a stream has no end)")


def parse_write_options(options: Mapping[str, Any]) -> WriteOptions:
    check_known(options)
    opts = _lower(options)
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
