"""A typed topic's Delta table (issue 19): the value's fields as top-level columns, in the topic's
latest schema version, following its schema evolution; and the names that cannot be columns.

Without brokers: the tierer over a real typed ``PartitionLog`` and a real Delta table (read with
the independent ``deltalake`` reader) through additive, defaulted, removing versions, and the
union read's conversion back to the stored layout. With a real broker and ZooKeeper: the clash
rule on topic creation, ``lake.enabled`` and schema registration (through ZooKeeper and through
a broker), and a typed topic's table after a real schema evolution. (The union read and
``read_topic`` of an evolved typed topic: ``test_lake_union_read.py``.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from broker_helpers import HOST, ProcessGroup
from lake_helpers import LAKE_TOPIC, TYPED_V1, TYPED_V2, click, lake_broker, wait_tiered
from log_helpers import config
from sparklog import Admin, Producer
from sparklog.broker.lake import lake_reader
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.rows import lake_rows
from sparklog.broker.lake.source import READ_ALL
from sparklog.broker.lake.tierer import Tierer
from sparklog.broker.lake.union_read import as_stored
from sparklog.broker.log import PartitionLog
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import InvalidConfig, LakeConflict
from sparklog.lake.layout import schema_app_id, value_column_clashes
from sparklog.records import schema_version
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema
from test_lake_logic import FakeOffsets, LogSource

TOPIC = "events"  # test_lake_logic's LogSource topic
RECORD = ["partition", "offset", "timestamp", "key", "headers"]
V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "address", "type": {"type": "record", "name": "A", "fields": [{"name": "city", "type": "string"}]}},
    ],
}
# v2: a field with a non-null default (older rows must show it: the table is rewritten)
V2 = {**V1, "fields": [*V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
# v3: a nullable field defaulting to null (older rows already read it: nothing rewritten)
V3 = {**V2, "fields": [*V2["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
# v4: qty removed (its column goes, as the topic's readers no longer see it)
V4 = {**V3, "fields": [f for f in V3["fields"] if f["name"] != "qty"]}


def versions(*schemas: dict) -> list[ValueSchema]:
    return [ValueSchema.parse(s, version=i + 1, topic=TOPIC) for i, s in enumerate(schemas)]


def order(i: int, **more: object) -> dict:
    return {"item": f"i{i}-" + "x" * 1200, "qty": i, "address": {"city": f"c{i}"}, **more}


def append(log: PartitionLog, schema: ValueSchema, values: list[dict | None]) -> None:
    """One batch (larger than a segment: the next append rolls) of ``values`` in ``schema``."""
    log.append({"key": [b"k"] * len(values), "value": schema.from_pylist(values)})


def tier_all(tierer: Tierer, source: LogSource) -> None:
    source.hw = source.log.log_end_offset
    while tierer.run_once([source]):
        pass


def table(lake: Path) -> pa.Table:
    return DeltaTable(str(lake / TOPIC)).to_pyarrow_table().sort_by("offset")


def table_schema_version(lake: Path) -> int | None:
    return DeltaTable(str(lake / TOPIC)).transaction_version(schema_app_id(TOPIC))


def operations(lake: Path) -> list[str]:
    return [entry["operation"] for entry in reversed(DeltaTable(str(lake / TOPIC)).history())]


def last_mode(lake: Path) -> str:
    return DeltaTable(str(lake / TOPIC)).history(1)[0]["operationParameters"]["mode"]


def test_the_table_follows_the_topics_schema_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lake_reader, "REFRESH_MIN_S", 0.0)
    schemas = versions(V1, V2, V3, V4)
    v1, v2, v3, v4 = schemas
    log = PartitionLog(tmp_path / "log", config(segment_bytes=1024), value_type=v1.arrow_type, schema_version=1)
    source, lake = LogSource(log), tmp_path / "lake"
    tierer = Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1)

    # v1: offsets 0-2 (a tombstone at 1), 3; the value's fields are columns after the record's
    source.schemas = [v1]
    append(log, v1, [order(0), None, order(2)])
    append(log, v1, [order(3)])
    append(log, v1, [order(4)])  # rolls: [0, 5) closed but this one's segment
    tier_all(tierer, source)
    rows = table(lake)
    assert rows.column_names == [*RECORD, "item", "qty", "address"]
    assert rows["offset"].to_pylist() == [0, 1, 2, 3]
    assert rows.select(["item", "qty", "address"]).to_pylist() == [
        order(0),
        {"item": None, "qty": None, "address": None},  # the tombstone: every value column null
        order(2),
        order(3),
    ]
    assert table_schema_version(lake) == 1

    # v2 adds currency (default EUR): the table is rewritten in v2 as soon as the tierer sees it,
    # before anything of v2 is tiered; then v2 segments append
    log.set_value_type(v2.arrow_type, 2)
    source.schemas = [v1, v2]
    assert tierer.run_once([source]) == 0  # nothing new to tier ([4] is the active segment)
    assert table_schema_version(lake) == 2
    assert last_mode(lake) == "Overwrite"  # the rewrite
    append(log, v2, [order(5, currency="NOK")])
    append(log, v2, [order(6, currency="SEK")])
    tier_all(tierer, source)
    rows = table(lake)
    assert rows.column_names == [*RECORD, "item", "qty", "address", "currency"]
    assert rows["offset"].to_pylist() == [0, 1, 2, 3, 4, 5]
    assert rows["currency"].to_pylist() == ["EUR", None, "EUR", "EUR", "EUR", "NOK"]

    # v3 adds a nullable field defaulting to null: nothing rewritten, the next append adds it
    log.set_value_type(v3.arrow_type, 3)
    source.schemas = [v1, v2, v3]
    before = operations(lake)
    append(log, v3, [order(7, currency="DKK", note="n7")])
    append(log, v3, [order(8, currency="ISK", note=None)])
    tier_all(tierer, source)
    added = DeltaTable(str(lake / TOPIC)).history()[: len(operations(lake)) - len(before)]
    assert [entry["operationParameters"]["mode"] for entry in added] == ["Append", "Append"]
    assert table_schema_version(lake) == 3
    rows = table(lake)
    assert rows["offset"].to_pylist() == list(range(8))
    assert rows["note"].to_pylist() == [None] * 7 + ["n7"]

    # v4 removes qty: rewritten without its column
    log.set_value_type(v4.arrow_type, 4)
    source.schemas = schemas
    append(log, v4, [{k: v for k, v in order(9, currency="EUR", note="n9").items() if k != "qty"}])
    tier_all(tierer, source)
    assert table_schema_version(lake) == 4
    rows = table(lake)
    assert rows.column_names == [*RECORD, "item", "address", "currency", "note"]
    assert rows["offset"].to_pylist() == list(range(9))
    assert rows["item"].to_pylist()[8] == order(8)["item"]

    # the union read's conversion: the table's rows back in the stored layout, latest version
    reader = LakeReader(str(lake))
    stored = [as_stored(batch, schemas)[0] for batch in reader.read(TOPIC, 0, 0, 9, 1 << 30) or []]
    assert all(schema_version(batch.schema) == 4 for batch in stored)
    values = [v for batch in stored for v in batch.column("value").to_pylist()]
    dropped = [{k: v for k, v in order(i).items() if k != "qty"} for i in range(9)]
    assert values == [
        {**dropped[0], "currency": "EUR", "note": None},
        None,
        *[{**dropped[i], "currency": "EUR", "note": None} for i in (2, 3, 4)],
        {**dropped[5], "currency": "NOK", "note": None},
        {**dropped[6], "currency": "SEK", "note": None},
        {**dropped[7], "currency": "DKK", "note": "n7"},
        {**dropped[8], "currency": "ISK", "note": None},
    ]
    log.close()


def test_a_broker_behind_the_tables_schema_version_waits(tmp_path: Path) -> None:
    """A tierer whose latest version is older than the table's (its watch has not fired yet)
    appends nothing until it knows the table's version."""
    v1, v2 = versions(V1, V2)
    log = PartitionLog(tmp_path / "log", config(segment_bytes=1024), value_type=v1.arrow_type, schema_version=1)
    for i in range(3):
        append(log, v1, [order(i)])
    lake = tmp_path / "lake"
    ahead, behind = LogSource(log, 0), LogSource(log, 1)
    ahead.schemas, behind.schemas = [v1, v2], [v1]
    assert Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1).run_once([ahead]) == 1
    assert table_schema_version(lake) == 2
    lagging = Tierer(DeltaTableWriter(str(lake)), FakeOffsets(), max_commit_bytes=1)
    assert lagging.run_once([behind]) == 0
    behind.schemas = [v1, v2]
    assert lagging.run_once([behind]) == 1
    rows = table(lake)
    assert rows.column("currency").to_pylist() == ["EUR", "EUR"]
    assert sorted(rows.column("partition").to_pylist()) == [0, 1]
    log.close()


# ---------------------------------------------------------------------------------------- clashes
def test_value_fields_that_clash_with_record_columns() -> None:
    assert value_column_clashes(["item", "qty"]) == []
    assert value_column_clashes(["Offset", "key", "value", "headers", "partition", "timestamp"]) == [
        "Offset",
        "key",
        "headers",
        "partition",
        "timestamp",
    ]  # a field named value is fine: a typed topic's table has no value column
    assert value_column_clashes(["item", "Item"]) == ["Item"]


def clashing(name: str) -> dict:
    return {**TYPED_V1, "fields": [*TYPED_V1["fields"], {"name": name, "type": "long", "default": 0}]}


def test_the_tierer_refuses_a_clashing_schema(tmp_path: Path) -> None:
    (v1,) = versions(V1)
    log = PartitionLog(tmp_path / "log", config(segment_bytes=1024), value_type=v1.arrow_type, schema_version=1)
    for i in range(2):
        append(log, v1, [order(i)])
    source = LogSource(log)
    source.schemas = [ValueSchema.parse(clashing("offset"), version=1, topic=TOPIC)]
    assert Tierer(DeltaTableWriter(str(tmp_path / "lake")), FakeOffsets()).run_once([source]) == 0
    assert not (tmp_path / "lake" / TOPIC).exists()
    log.close()


def test_clashing_value_fields_are_refused_on_lake_topics(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, tmp_path / "lake").start()
    with Admin(sparklog_connect) as admin, Admin(bootstrap_servers=f"{HOST}:{broker.port}") as remote:
        for client in (admin, remote):  # through ZooKeeper, and through a broker
            with pytest.raises(InvalidConfig, match=r"field\(s\) 'offset' clash"):
                client.create_topic(f"c-{id(client)}", 1, 1, LAKE_TOPIC, value_schema=json.dumps(clashing("offset")))
        # a typed topic with a field named like a record column: fine until lake.enabled
        admin.create_topic("keyed", 1, 1, {"segment.bytes": "1024"}, value_schema=json.dumps(clashing("Key")))
        for client in (admin, remote):
            with pytest.raises(InvalidConfig, match=r"'Key' clash"):
                client.alter_topic("keyed", {"lake.enabled": "true"})
        assert admin.describe_topic("keyed")["configs"].get("lake.enabled", "false") == "false"
        # a lake topic: a new version with a clashing field is refused, a fine one registered
        admin.create_topic("lake", 1, 1, LAKE_TOPIC, value_schema=json.dumps(TYPED_V1))
        for client in (admin, remote):
            with pytest.raises(InvalidConfig, match=r"'headers' clash"):
                client.register_schema("lake", json.dumps(clashing("headers")))
        with ClusterMetadata(sparklog_connect) as meta, pytest.raises(InvalidConfig, match=r"'headers' clash"):
            SchemaRegistry.from_cluster(meta).check("lake", clashing("headers"))
        assert admin.register_schema("lake", json.dumps(TYPED_V2)).version == 2
        admin.alter_topic("lake", {"lake.enabled": "false"})
        assert admin.register_schema("lake", json.dumps(clashing("headers"))).version == 3  # not a lake topic now
        with pytest.raises(InvalidConfig, match=r"'headers' clash"):
            admin.alter_topic("lake", {"lake.enabled": "true"})
    broker.stop()


# ---------------------------------------------------------------------------------------- a real broker
@pytest.mark.slow
def test_a_typed_topics_table_has_its_fields_as_columns_through_schema_evolution(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    with Admin(sparklog_connect) as admin:
        admin.create_topic("typed", 1, 1, LAKE_TOPIC, value_schema=json.dumps(TYPED_V1))
        with Producer(sparklog_connect, acks="all", linger_ms=0) as producer:
            producer.send_batch("typed", {"value": [click(i) for i in range(5)]}, partition=0)
            producer.send_batch("typed", {"value": [click(5)]}, partition=0)  # rolls: [0, 5) closed
        wait_tiered(lake, "typed", 0, 5)
        rows = DeltaTable(str(lake / "typed")).to_pyarrow_table().sort_by("offset")
        assert sorted(rows.column_names) == sorted([*RECORD, "page", "ms", "tags"])
        assert rows.select(["page", "ms", "tags"]).to_pylist() == [click(i) for i in range(5)]
        admin.register_schema("typed", json.dumps(TYPED_V2))  # adds country, default "unknown"
        time.sleep(1.0)  # the broker and the producer follow the new version by watches
        with Producer(sparklog_connect, acks="all", linger_ms=0) as producer:
            for first in (6, 9):  # the new version starts a segment; the second batch rolls it
                batch = [click(i, country="NO") for i in range(first, first + 3)]
                producer.send_batch("typed", {"value": batch}, partition=0)
    wait_tiered(lake, "typed", 0, 9)
    dt = DeltaTable(str(lake / "typed"))
    assert dt.transaction_version(schema_app_id("typed")) == 2
    rows = dt.to_pyarrow_table().sort_by("offset")
    assert sorted(rows.column_names) == sorted([*RECORD, "page", "ms", "tags", "country"])
    assert rows["offset"].to_pylist() == list(range(9))
    expected = [click(i, country="unknown") for i in range(6)] + [click(i, country="NO") for i in range(6, 9)]
    assert rows.select(["page", "ms", "tags", "country"]).to_pylist() == expected
    broker.stop()


def test_a_rewrite_racing_an_append_conflicts(tmp_path: Path) -> None:
    """A rewrite planned on a snapshot that an append (a partition's first, or a later one) then
    moved past is refused: no row lands in the table in an older version than the table's."""
    v1, v2 = versions(V1, V2)
    log = PartitionLog(tmp_path / "log", config(segment_bytes=1024), value_type=v1.arrow_type, schema_version=1)
    for i in range(4):
        append(log, v1, [order(i)])
    writer = DeltaTableWriter(str(tmp_path / "lake"))

    def tier(partition: int, start: int, after: int | None) -> None:
        rows = lake_rows(partition, log.read(start, READ_ALL, upto=start + 1), start, start + 1, [v1])
        writer.append(TOPIC, partition, rows, after, start + 1, [v1])

    tier(0, 0, None)
    for partition, start, after in ((1, 0, None), (0, 1, 1)):  # a first append, then a later one
        stale = DeltaTable(str(tmp_path / "lake" / TOPIC))
        tier(partition, start, after)
        with pytest.raises(LakeConflict):
            writer._evolve(TOPIC, stale, [v1, v2])  # planned before the append committed
        assert table_schema_version(tmp_path / "lake") == 1
    writer.evolve(TOPIC, [v1, v2])
    rows = table(tmp_path / "lake")
    assert table_schema_version(tmp_path / "lake") == 2
    assert sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == [
        (0, 0),
        (0, 1),
        (1, 0),
    ]
    assert rows["currency"].to_pylist() == ["EUR"] * 3
    log.close()
