"""The Kafka fuzzer's batches and its reference reader (:mod:`sparklog.fuzz.kafka_batches`), without
a cluster: what it builds is what the broker's codec decodes, and what it predicts of mutated
batches agrees with the broker's codec where the format leaves no choice."""

from __future__ import annotations

import itertools

import pytest

from sparklog.errors import SparklogError
from sparklog.fuzz import kafka_batches as kb
from sparklog.kafka.handlers.produce import produced_records
from sparklog.records import now_ms

NOW = now_ms()
RULES = kb.TopicRules(1 << 20)


def _spec(**changes: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "count": 7,
        "seed": 3,
        "keys": "all",
        "value_size": 40,
        "null_values": True,
        "headers": 2,
        "timestamp": "now",
        "builder": "sparklog",
        "codec": 0,
    }
    return spec | changes


@pytest.mark.parametrize(
    ("builder", "codec", "keys"),
    list(itertools.product(["sparklog", "kafka-python"], range(5), ["none", "some", "all", "empty"])),
)
def test_both_builders_and_every_codec_make_batches_the_broker_and_the_reference_read_alike(
    builder: str, codec: int, keys: str
) -> None:
    data, records = kb.build(_spec(builder=builder, codec=codec, keys=keys), kb.Producer(), NOW)
    verdict = kb.judge(data, RULES, NOW)
    assert verdict.valid is True, verdict.why
    assert verdict.records == records
    _, stored = produced_records(data, RULES.max_bytes)  # the broker's own decoding
    assert stored.to_pylist() == records.arrow().to_pylist()


@pytest.mark.parametrize(
    ("mutation", "codes"),
    [
        ({"op": "flip", "where": "section", "n": 2, "seed": 1}, {kb.CORRUPT_MESSAGE}),
        ({"op": "cut", "keep": 0.7}, kb.MALFORMED),
        ({"op": "extend", "n": 5, "fix": True, "crc": True}, kb.MALFORMED),
        ({"op": "field", "field": "records_count", "value": 8, "crc": True}, kb.MALFORMED),
        ({"op": "field", "field": "magic", "value": 1, "crc": True}, kb.MALFORMED),
        ({"op": "attributes", "bits": 0x20, "crc": True}, {kb.INVALID_RECORD}),
        ({"op": "codec", "codec": 6, "crc": True}, {kb.UNSUPPORTED_COMPRESSION_TYPE}),
        ({"op": "two-batches"}, kb.MALFORMED),
        ({"op": "bomb", "kind": "zeros", "codec": 1, "factor": 2.0}, {kb.MESSAGE_TOO_LARGE}),
        ({"op": "bomb", "kind": "declares", "codec": 4}, {kb.MESSAGE_TOO_LARGE}),
        ({"op": "bomb", "kind": "records", "codec": 3, "factor": 2.0}, {kb.MESSAGE_TOO_LARGE}),
    ],
)
def test_mutated_batches_are_judged_as_the_broker_refuses_them(mutation: dict[str, object], codes: set[int]) -> None:
    limit = 64 << 10
    data, _ = kb.build(_spec(), kb.Producer(), NOW)
    mutated = kb.mutate(data, mutation, limit)
    assert mutated == kb.mutate(data, mutation, limit), "a mutation is a function of its parameters"
    verdict = kb.judge(mutated, kb.TopicRules(limit), NOW)
    assert verdict.valid is False and verdict.errors & codes, (verdict.why, verdict.errors)
    with pytest.raises(SparklogError):
        produced_records(mutated, limit)


def test_fields_kafka_ignores_on_produce_keep_a_batch_valid() -> None:
    data, records = kb.build(_spec(), kb.Producer(), NOW)
    for field in kb.IGNORED_FIELDS:
        verdict = kb.judge(kb.mutate(data, {"op": "field", "field": field, "value": 12345}, 1 << 20), RULES, NOW)
        assert verdict.valid is True and verdict.records == records, field


def test_topic_rules_keys_timestamps_and_the_stored_size() -> None:
    keyless, _ = kb.build(_spec(keys="some"), kb.Producer(), NOW)
    assert kb.judge(keyless, kb.TopicRules(1 << 20, compacted=True), NOW).errors == {kb.INVALID_RECORD}
    future, _ = kb.build(_spec(timestamp="future"), kb.Producer(), NOW)
    assert kb.judge(future, RULES, NOW).errors == {kb.INVALID_TIMESTAMP}
    assert kb.judge(future, kb.TopicRules(1 << 20, log_append_time=True), NOW).valid is True
    tiny, _ = kb.build(_spec(count=3000, value_size=0, headers=0, null_values=False), kb.Producer(), NOW)
    verdict = kb.judge(tiny, kb.TopicRules(64 << 10), NOW)  # ~30 KB as Kafka writes it, ~100 KB as Arrow
    assert verdict.valid is None and kb.MESSAGE_TOO_LARGE in verdict.errors


def test_fetched_batches_are_read_with_their_offsets() -> None:
    first, records = kb.build(_spec(count=3), kb.Producer(), NOW)
    second = bytearray(kb.build(_spec(count=2, seed=9), kb.Producer(), NOW)[0])
    kb.set_field(second, "base_offset", 3)
    batches, problem = kb.parse_fetched(first + bytes(second) + first[:30])  # a batch cut short at the end
    assert problem is None
    assert [b.offsets for b in batches] == [[0, 1, 2], [3, 4]]
    assert batches[0].records == records
    broken = bytearray(first)
    broken[-1] ^= 1
    assert kb.parse_fetched(bytes(broken))[1] == "the batch at offset 0: wrong CRC"
