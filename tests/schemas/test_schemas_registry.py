"""Schema versions in ZooKeeper (``<root>/schemas/<topic>/<version>``), on a real ZooKeeper."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kazoo.client import KazooClient

from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import InvalidConfig, InvalidRequest, error_from_code
from sparklog.schemas import IncompatibleSchema, SchemaError, SchemaRegistry, UnknownSchema, decode_avro, encode_avro


def record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "fields": list(fields)}


V1 = record({"name": "id", "type": "long"}, {"name": "zip", "type": "string"})
V2 = record({"name": "id", "type": "long"}, {"name": "zip", "type": "string"},
            {"name": "note", "type": ["null", "string"], "default": None})  # fmt: skip
NO_DEFAULT = record({"name": "id", "type": "long"}, {"name": "zip", "type": "string"}, {"name": "qty", "type": "int"})


@pytest.fixture
def registry(zk_client: KazooClient) -> SchemaRegistry:
    return SchemaRegistry(zk_client, ZkLayout("/sparklog"))


def test_register_versions_and_read_back(registry: SchemaRegistry, zk_client: KazooClient) -> None:
    assert registry.versions("orders") == [] and registry.latest_or_none("orders") is None
    first = registry.register("orders", json.dumps(V1))
    assert first.version == 1 and first.topic == "orders"
    assert registry.register("orders", V1).version == 1  # the same schema again: idempotent
    assert registry.register("orders", json.dumps(V1, indent=2, sort_keys=True)).version == 1
    second = registry.register("orders", V2)
    assert second.version == 2
    assert registry.versions("orders") == [1, 2]
    assert registry.latest("orders").version == 2
    assert registry.get("orders", 1).arrow_type == first.arrow_type
    # what is stored: the Avro schema as JSON text, at schemas/<topic>/<version>
    data, _ = zk_client.get("/sparklog/schemas/orders/2")
    assert json.loads(data) == V2
    assert [s.version for s in registry.all("orders")] == [1, 2]


def test_incompatible_versions_are_refused_naming_the_field(registry: SchemaRegistry) -> None:
    registry.register("orders", V1)
    with pytest.raises(IncompatibleSchema) as err:
        registry.register("orders", NO_DEFAULT)
    assert "field 'qty'" in str(err.value) and "not BACKWARD compatible with version 1 of topic 'orders'" in str(
        err.value
    )
    assert [p.path for p in err.value.problems] == ["qty"]
    assert registry.versions("orders") == [1]  # nothing written
    assert [p.path for p in registry.check("orders", NO_DEFAULT)] == ["qty"]
    assert registry.check("orders", V2) == []
    # an explicit mode overrides the topic's
    assert registry.register("orders", NO_DEFAULT, compatibility="NONE").version == 2
    with pytest.raises(InvalidConfig):
        registry.register("orders", V1, compatibility="sideways")


def test_compatibility_comes_from_the_topic_config(registry: SchemaRegistry, zk_client: KazooClient) -> None:
    meta = ClusterMetadata("127.0.0.1:1/sparklog", client=zk_client)
    zk_client.ensure_path(meta.layout.topics)
    zk_client.create(
        meta.layout.topic("fwd"),
        json.dumps({"replicas": [[1]], "configs": {"schema.compatibility": "FORWARD"}}).encode(),
    )
    registry = SchemaRegistry.from_cluster(meta)
    assert registry.compatibility("fwd") == "FORWARD"
    assert registry.compatibility("no-such-topic") == "BACKWARD"
    registry.register("fwd", V1)
    assert registry.register("fwd", NO_DEFAULT).version == 2  # FORWARD: old readers ignore the new field
    with pytest.raises(IncompatibleSchema, match=r"not FORWARD compatible.*field 'qty'"):
        registry.register("fwd", V1)  # dropping a field without default breaks FORWARD


def test_bad_schemas_and_names_are_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaError, match="not valid JSON"):
        registry.register("orders", '{"type": "record"')
    with pytest.raises(SchemaError, match="field 'v': union"):
        registry.register("orders", record({"name": "v", "type": ["int", "string"]}))
    with pytest.raises(InvalidRequest, match="invalid topic name"):
        registry.register("bad/name", V1)
    assert registry.versions("orders") == []
    with pytest.raises(UnknownSchema, match="not a typed topic"):
        registry.latest("orders")
    registry.register("orders", V1)
    with pytest.raises(UnknownSchema, match="no schema version 7"):
        registry.get("orders", 7)


def test_fingerprint_lookup_decodes_every_version(registry: SchemaRegistry) -> None:
    v1 = registry.register("orders", V1)
    old = encode_avro(v1.from_pylist([{"id": 1, "zip": "a"}]), v1)
    v2 = registry.register("orders", V2)
    new = encode_avro(v2.from_pylist([{"id": 2, "zip": "b", "note": "n"}]), v2)
    assert registry.by_fingerprint("orders", v1.fingerprint).version == 1
    fresh = SchemaRegistry(registry.zk, registry.layout)  # nothing cached
    latest = fresh.latest("orders")
    decoded = decode_avro([old[0].as_py(), new[0].as_py()], latest, lookup=fresh.lookup("orders"))
    assert decoded.to_pylist() == [{"id": 1, "zip": "a", "note": None}, {"id": 2, "zip": "b", "note": "n"}]
    with pytest.raises(UnknownSchema, match="fingerprint"):
        fresh.by_fingerprint("orders", b"\x00" * 8)


def test_delete_and_recreate_forgets_cached_versions(registry: SchemaRegistry) -> None:
    registry.register("orders", V1)
    registry.delete("orders")
    assert registry.versions("orders") == []
    other = SchemaRegistry(registry.zk, registry.layout)
    other.register("orders", NO_DEFAULT)  # a new topic of the same name, registered elsewhere
    assert registry.latest("orders").json == other.latest("orders").json  # not the cached V1
    assert registry.get("orders", 1).arrow_type.names == ["id", "zip", "qty"]


def test_concurrent_registrations_get_distinct_versions(registry: SchemaRegistry) -> None:
    registry.register("orders", V1)
    errors: list[BaseException] = []

    def register(i: int) -> None:
        schema = record(*V1["fields"], {"name": f"opt{i}", "type": ["null", "long"], "default": None})
        try:
            SchemaRegistry(registry.zk, registry.layout).register("orders", schema)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert registry.versions("orders") == [1, 2, 3, 4, 5, 6]
    names = {registry.get("orders", v).arrow_type.names[-1] for v in range(2, 7)}
    assert names == {f"opt{i}" for i in range(5)}


def test_schema_errors_travel_by_code() -> None:
    err = error_from_code("INCOMPATIBLE_SCHEMA", "field 'x': no")
    assert isinstance(err, IncompatibleSchema) and isinstance(err, InvalidRequest)
    assert isinstance(error_from_code("SCHEMA_ERROR", "bad"), SchemaError)
    assert isinstance(error_from_code("UNKNOWN_SCHEMA", "none"), UnknownSchema)
