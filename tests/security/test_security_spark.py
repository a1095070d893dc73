"""Spark over SASL_SSL with ACLs (issue 17): batch and streaming reads and the exactly-once sink
take the client settings as data source options; a streaming query whose Read ACL is removed fails
with an error naming the operation and the topic."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from security_helpers import SecureSetup
from spark_helpers import run_available_now, unique
from sparklog.client.admin import Admin
from sparklog.client.producer import Producer
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from waiting import wait_for

pytestmark = pytest.mark.slow


def _acl(pattern: ResourcePattern, operation: str) -> AclBinding:
    return AclBinding.parse(pattern, "User:alice", "*", operation, "Allow")


def test_spark_reads_and_writes_over_sasl_ssl_and_a_removed_acl_stops_the_query(
    spark: Any, sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    secure = SecureSetup.create(tmp_path / "security", sparklog_connect)
    secure.extra = {"authorizer.enabled": "true"}
    broker = secure.start_broker(tmp_path, child_processes)
    servers = f"127.0.0.1:{broker.port}"
    source, target, group = unique("sasl-src"), unique("sasl-dst"), unique("sasl-group")
    admin = {**secure.client("admin"), "bootstrap.servers": servers}
    with Admin(config=admin) as a:
        a.create_topic(source, 3, 1)
        a.create_topic(target, 2, 1)
    with Producer(acks="all", config=admin) as producer:
        for p in range(3):
            producer.send_batch(source, pa.table({"value": [f"{p}-{i}".encode() for i in range(40)]}), partition=p)
    with secure.store() as store:
        read_source = _acl(ResourcePattern.parse("topic", source), "Read")
        AclStore(store.zk, store.layout).add(
            [
                read_source,
                _acl(ResourcePattern.parse("topic", target), "Read"),
                _acl(ResourcePattern.parse("topic", target), "Write"),
                _acl(ResourcePattern.parse("group", group), "Read"),
                *(_acl(ResourcePattern.parse("topic", "__sparklog", "prefixed"), op) for op in ("All",)),
            ]
        )
    options = {**secure.client("alice"), "kafka.bootstrap.servers": servers}

    batch = spark.read.format("sparklog").options(**options).option("subscribe", source).load()
    assert batch.count() == 120
    explained = batch._jdf.queryExecution().toString()
    assert secure.client("alice")["sasl.password"] not in explained  # Spark redacts it in plans

    def write_target() -> None:
        (
            batch.selectExpr("value")
            .write.format("sparklog")
            .mode("append")
            .options(**options)
            .option("topic", target)
            .save()
        )

    # the exactly-once sink's state is its transactional id (batch writes: batch-<uuid>)
    with pytest.raises(Exception, match="User:alice may not (Describe|Write) transactional id 'batch-"):
        write_target()
    with secure.store() as store:
        AclStore(store.zk, store.layout).add(
            [_acl(ResourcePattern.parse("transactional-id", "batch-", "prefixed"), "Write")]
        )
    write_target()
    assert spark.read.format("sparklog").options(**options).option("topic", target).load().count() == 120

    stream = (
        spark.readStream.format("sparklog")
        .options(**options)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("group", group)
        .load()
    )
    name = f"sasl_{uuid.uuid4().hex[:8]}"
    run_available_now(stream, str(tmp_path / "ckpt"), query_name=name)
    assert spark.sql(f"select count(*) from {name}").collect()[0][0] == 120

    # the Read ACL goes: the running query's next micro-batch is refused, naming what was denied
    query = (
        stream.writeStream.format("memory")
        .queryName(f"{name}_live")
        .option("checkpointLocation", str(tmp_path / "ckpt-live"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: query.lastProgress is not None, 120, "the first micro-batch")
        with secure.store() as store:
            AclStore(store.zk, store.layout).remove([read_source])
        with Producer(acks="all", config=admin) as producer:
            producer.send(source, b"after", partition=0).result(30)
        wait_for(lambda: not query.isActive, 120, "the query to stop without its Read ACL", 0.5)
        error = str(query.exception())
        assert "User:alice may not" in error and source in error, error
    finally:
        if query.isActive:
            query.stop()
