"""Options of the sparklog data source: bad ones fail at load() naming the option; offset
arithmetic (admission control, range splitting) on its own."""

from __future__ import annotations

import pytest

from sparklog.datasource import offsets
from sparklog.datasource.options import parse_duration_ms, parse_read_options, parse_write_options
from sparklog.errors import InvalidRequest

BAD_READS = [
    ({"subscribe": "a", "startingOffset": "earliest"}, "'startingoffset'; did you mean 'startingOffsets'"),
    ({"subscribe": "a", "subscribePattern": "a.*"}, "'subscribe' and 'subscribePattern' contradict"),
    ({"topic": "a", "subscribe": "b"}, "'topic' and 'subscribe' contradict"),
    ({}, "one of the options 'subscribe', 'subscribePattern', 'assign' or 'topic'"),
    ({"subscribe": "a", "startingOffsets": "{not json"}, "'startingOffsets'"),
    ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "'startingOffsets': names topic 'b'"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "'startingOffsets'"),
    ({"subscribe": "a", "startingOffsets": "group"}, "'startingOffsets': is 'group' but the option 'group'"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, "'endingOffsets'"),
    ({"subscribe": "a", "startingTimestamp": "yesterday"}, "'startingTimestamp'"),
    ({"subscribe": "a", "maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger'"),
    ({"subscribe": "a", "minPartitions": "many"}, "'minPartitions'"),
    ({"subscribe": "a", "maxPartitions": "0"}, "'maxPartitions': must be a positive integer"),
    ({"subscribe": "a", "maxPartitions": "2", "minPartitions": "3"}, "'maxPartitions': 2 is below minPartitions=3"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, "'failOnDataLoss'"),
    ({"subscribe": "a", "includeHeaders": "1"}, "'includeHeaders'"),
    ({"subscribePattern": "a(("}, "'subscribePattern'"),
    ({"subscribe": "a b"}, "'subscribe'"),
    ({"subscribe": "a", "group": "no spaces"}, "'group'"),
    ({"subscribe": "a", "stagingTopic": "x"}, "'stagingTopic': is an option of writes"),
]


@pytest.mark.parametrize(("options", "message"), BAD_READS)
def test_bad_read_options_name_the_option(options, message):
    with pytest.raises(InvalidRequest) as info:
        parse_read_options({k.lower(): v for k, v in options.items()})
    assert message in str(info.value)


def test_good_read_options():
    opts = parse_read_options(
        {
            "subscribe": "a,b",
            "startingoffsets": '{"a": {"0": 5, "1": -2}}',
            "maxrecordspertrigger": "100",
            "group": "g",
            "failondataloss": "FALSE",
            "includeheaders": "true",
        }
    )
    assert opts.subscription.topics == ("a", "b")
    assert opts.starting_json == {"a": {0: 5, 1: -2}}
    assert (opts.max_records_per_trigger, opts.group, opts.fail_on_data_loss, opts.include_headers) == (
        100,
        "g",
        False,
        True,
    )
    assert parse_read_options({"topic": "a", "startingtimestamp": "2026-01-01T00:00:00Z"}).starting_timestamp == (
        1_767_225_600_000
    )


def test_timestamps_take_precedence_over_offsets_as_in_kafka():
    """Kafka's order: <edge>Timestamp, then <edge>OffsetsByTimestamp, then <edge>Offsets."""
    both = {"subscribe": "a", "startingoffsets": "earliest", "startingtimestamp": "5", "endingoffsets": "latest"}
    opts = parse_read_options({**both, "endingoffsetsbytimestamp": '{"a": {"0": 7}}', "endingtimestamp": "9"})
    assert (opts.starting, opts.starting_timestamp, opts.ending, opts.ending_timestamp) == (
        "timestamp",
        5,
        "timestamp",
        9,
    )
    opts = parse_read_options(
        {"subscribe": "a", "startingoffsets": "earliest", "startingoffsetsbytimestamp": '{"a": {"0": 7}}'}
    )
    assert (opts.starting, opts.starting_json) == ("timestamps", {"a": {0: 7}})


def test_bad_write_options():
    with pytest.raises(InvalidRequest, match="'startingOffsets': is an option of reads"):
        parse_write_options({"topic": "a", "startingoffsets": "earliest"})
    with pytest.raises(InvalidRequest, match="'batchRecords'"):
        parse_write_options({"topic": "a", "batchrecords": "-1"})
    with pytest.raises(InvalidRequest, match="'topic'"):
        parse_write_options({"topic": "a,b"})


def test_limit_rows_is_exact_and_proportional():
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 1000, ("t", 1): 110, ("t", 2): 50}
    limited = offsets.limit_rows(begin, end, 101)
    assert sum(limited[tp] - begin[tp] for tp in begin) == 101
    assert limited[("t", 2)] == 50 and limited[("t", 0)] > limited[("t", 1)] - 100
    assert offsets.limit_rows(begin, end, 5000) == end
    one = offsets.limit_rows(begin, end, 1)  # something is always admitted
    assert sum(one[tp] - begin[tp] for tp in begin) == 1


def test_split_ranges_for_min_partitions():
    ranges = [offsets.Range("t", 0, 0, 1000), offsets.Range("t", 1, 10, 20), offsets.Range("t", 2, 5, 5)]
    assert offsets.split_ranges(ranges, None) == ranges[:2]
    split = offsets.split_ranges(ranges, 10)
    assert len(split) >= 10
    for p, (start, end) in ((0, (0, 1000)), (1, (10, 20))):
        mine = [r for r in split if r.partition == p]
        assert mine[0].start == start and mine[-1].end == end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False))


def test_pack_ranges_into_at_most_max_partitions_about_even_and_in_order():
    sizes = {0: 1000, 1: 10, 2: 400, 3: 500, 4: 90, 5: 100, 6: 1}
    ranges = [offsets.Range("t", p, 7, 7 + n) for p, n in sizes.items()]
    assert offsets.pack_ranges(ranges, None) == [[r] for r in ranges]
    assert offsets.pack_ranges(ranges, 7) == [[r] for r in ranges]  # not more than that many: alone
    groups = offsets.pack_ranges(list(reversed(ranges)), 3)
    assert [[r.partition for r in g] for g in groups] == [[0], [1, 2], [3, 4, 5, 6]]  # runs, in order
    assert [sum(r.size for r in g) for g in groups] == [1000, 410, 691]
    assert offsets.pack_ranges(ranges, 1) == [ranges]
    pieces = offsets.split_ranges([offsets.Range("t", 0, 0, 100)], None, 10)  # one partition, 10 pieces
    assert [len(g) for g in offsets.pack_ranges(pieces, 4)] == [2, 3, 2, 3]


def test_offsets_json_is_sorted_and_round_trips():
    data = {("b", 10): 3, ("a", 2): 1, ("a", 10): 2}
    js = offsets.to_json(data)
    assert list(js) == ["a", "b"] and list(js["a"]) == ["2", "10"]
    assert offsets.from_json(js) == data


@pytest.mark.slow
def test_spark_load_fails_naming_the_option(spark):
    def read(**options):
        reader = spark.read.format("sparklog").option("zookeeper", "127.0.0.1:1")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    with pytest.raises(Exception, match="did you mean 'startingOffsets'"):
        read(subscribe="a", startingOffset="earliest")
    with pytest.raises(Exception, match="'subscribe' and 'subscribePattern' contradict"):
        spark.readStream.format("sparklog").option("subscribe", "a").option("subscribePattern", "a.*").load()
    with pytest.raises(Exception, match="'maxRecordsPerTrigger'"):
        spark.readStream.format("sparklog").option("subscribe", "a").option("maxRecordsPerTrigger", "-5").load()
    with pytest.raises(Exception, match="'failOnDataLoss'"):
        read(subscribe="a", failOnDataLoss="maybe")


def test_max_records_per_partition_splits_before_min_partitions():
    ranges = [offsets.Range("t", 0, 0, 65), offsets.Range("t", 1, 100, 110)]
    split = offsets.split_ranges(ranges, None, 20)
    assert [(r.partition, r.start, r.end) for r in split] == [
        (0, 0, 16),
        (0, 16, 32),
        (0, 32, 49),
        (0, 49, 65),
        (1, 100, 110),
    ]
    assert len(offsets.split_ranges(ranges, 9, 20)) >= 9


def test_kafka_style_values():
    assert [parse_duration_ms("maxTriggerDelay", v) for v in ("15m", "10s", "250ms", "2h", "1d", "40")] == [
        900_000,
        10_000,
        250,
        7_200_000,
        86_400_000,
        40,
    ]
    assert parse_read_options({"assign": '{"b": [2, 0], "a": [1]}'}).subscription.assigned == (
        ("a", 1),
        ("b", 0),
        ("b", 2),
    )
    for bad, message in (('{"a": []}', "needs a list"), ('{"a": [-1]}', "not a partition number"), ("a", "No topic")):
        with pytest.raises(InvalidRequest, match=message):
            parse_read_options({"assign": bad})
    with pytest.raises(InvalidRequest, match="'startingOffsetsByTimestampStrategy'"):
        parse_read_options({"subscribe": "a", "startingoffsetsbytimestampstrategy": "earliest"})
