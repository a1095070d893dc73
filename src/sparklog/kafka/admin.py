"""What the topic administration handlers (CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) share: Kafka's numbers for config
resources, sources and types, a config entry as DescribeConfigs and CreateTopics list it, and a
request's ``timeout_ms`` as the deadline the broker waits for its change until."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from kafka.protocol.admin import DescribeConfigsResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import Message
from sparklog.kafka.authorization import CLUSTER, TOPIC, ApiPermissions
from sparklog.kafka.broker_access import ConfigEntry, ConfigSource

# Kafka's ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_NAMES = {
    RESOURCE_TOPIC: "topic",
    RESOURCE_BROKER: "broker",
    8: "broker logger",
    16: "client metrics",
    32: "group",
}

# Kafka's DescribeConfigsResponse.ConfigSource
SOURCE_NUMBERS = {ConfigSource.TOPIC: 1, ConfigSource.BROKER: 4, ConfigSource.DEFAULT: 5}
# Kafka's DescribeConfigsResponse.ConfigType
TYPE_NUMBERS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

T = TypeVar("T")

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = Result.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


def check_config_resource(may: ApiPermissions, resource_type: int, name: str) -> None:
    """The config APIs' rule: a topic's configs need the operation on the topic, a broker's on
    the cluster (the refusal raised; other resource types are refused by their handler)."""
    if resource_type == RESOURCE_TOPIC:
        may.check(TOPIC, name)
    elif resource_type == RESOURCE_BROKER:
        may.check(CLUSTER)


def deadline(timeout_ms: int) -> float | None:
    """Until when (``time.monotonic()``) a change is awaited; None for a timeout of 0 or less,
    which Kafka answers at once too."""
    return time.monotonic() + timeout_ms / 1000 if timeout_ms > 0 else None


def resource_name(resource_type: int) -> str:
    return RESOURCE_NAMES.get(resource_type, f"type {resource_type}")


def describe_entry(entry: ConfigEntry, synonyms: bool) -> Message:
    """One config as DescribeConfigs (v1+) lists it. Its synonyms, when asked for: the value set on
    the topic (if it is), then the default it overrides, most specific first as in Kafka."""
    listed = []
    if synonyms:
        if entry.source is not ConfigSource.DEFAULT:
            listed.append(Synonym(name=entry.name, value=entry.value, source=SOURCE_NUMBERS[entry.source]))
        listed.append(Synonym(name=entry.name, value=entry.default, source=SOURCE_NUMBERS[ConfigSource.DEFAULT]))
    return Entry(
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=SOURCE_NUMBERS[entry.source],
        is_sensitive=False,
        synonyms=listed,
        config_type=TYPE_NUMBERS.get(entry.kind, 0),
        documentation=None,
    )


def config_values(configs: list[Message]) -> dict[str, str]:
    """A request's configs as name -> value (CreateTopics, AlterConfigs): each named once, none null."""
    out: dict[str, str] = {}
    for config in configs:
        if config.value is None:
            raise InvalidRequest(f"config {config.name!r:.100} has no value: a null value is not supported")
        if config.name in out:
            raise InvalidRequest(f"config {config.name!r:.100} is given twice")
        out[config.name] = config.value
    return out


def error_fields(exc: SparklogError | None) -> dict[str, object]:
    """A result's ``error_code`` and ``error_message`` (none: NONE and null)."""
    if exc is None:
        return {"error_code": error_codes.NONE, "error_message": None}
    return {"error_code": error_codes.error_code(exc), "error_message": error_codes.error_message(exc)}


def once_each(
    items: Iterable[T],
    name: Callable[[T], str],
    answer: Callable[[T], Message],
    refused: Callable[[str, SparklogError], Message],
) -> list[Message]:
    """One result per name a request lists, in its order: ``answer(item)``, or for a name listed
    more than once (which Kafka refuses, each such entry) ``refused(name, InvalidRequest)``."""
    items = list(items)
    counts = Counter(name(item) for item in items)
    results = []
    answered: set[str] = set()
    for item in items:
        key = name(item)
        if key in answered:
            continue
        answered.add(key)
        if counts[key] > 1:
            results.append(refused(key, InvalidRequest(f"{key!r:.100} is listed more than once in the request")))
        else:
            results.append(answer(item))
    return results
