"""Spark jobs on a standalone cluster spread over hosts (:mod:`sparklog.hosts.spark_cluster`), and
the client-side commands that feed and check them; each run as ``python -m sparklog.hosts.spark_job
COMMAND ...`` on a host of its own.

- ``copy`` (a driver, on a driver host): reads a topic with ``format("sparklog")`` through
  ``bootstrap.servers`` and writes every record to another topic with the exactly-once sink, from
  the executors. Each written record carries two headers saying where it was written from:
  ``executor``, the address of the host whose executor read, staged and sent it (the address its
  network namespace routes from: no configuration can fake it), and ``attempt``, the task attempt
  (0 the first time; a task rerun after its executor was lost has a higher one). ``--slow-ms``
  makes each task wait that long before its rows go on, and ``--progress-dir`` has each task
  attempt leave a file ``<partition>-<attempt>-<address>`` when it begins (the hosts share the
  filesystem): what a test needs to cut a worker's host off mid-write. Prints ``{"app_id": ...,
  "seconds": ...}``.
- ``produce`` (on a client host): creates a topic (RF 3, ``min.insync.replicas`` 2) and sends
  ``--records`` records ``<prefix>-<i>`` with ``acks=all``, spread over its partitions.
- ``dump`` (on a client host): prints every record of a topic, one JSON line each: ``value`` and
  ``headers`` (a dict).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.hosts.spark_cluster import own_address

if TYPE_CHECKING:
    from pyspark.sql import Column

# a driver's settings on a cluster of small workers
DRIVER_CONF = {
    "spark.executor.memory": "512m",
    # every executor registered before the first task is scheduled: each worker host gets work
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
}
PRODUCE_BATCH = 1000

_marks: dict[tuple[int, int, int], str] = {}  # per Python worker: each task attempt's mark, made once


def task_mark(peer: str, progress_dir: str | None, slow_s: float) -> str:
    """``<address>/<attempt>`` of the task attempt computing the calling row (an executor's Python
    worker), ``address`` being its host's, as routed towards ``peer``. The first row of an
    attempt leaves its progress file and waits ``slow_s``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("task_mark runs in a Spark task")
    key = (context.stageId(), context.partitionId(), context.attemptNumber())
    mark = _marks.get(key)
    if mark is None:
        address = own_address(peer)
        if progress_dir is not None:
            (Path(progress_dir) / f"{context.partitionId()}-{context.attemptNumber()}-{address}").touch()
        if slow_s > 0:
            time.sleep(slow_s)
        mark = _marks[key] = f"{address}/{context.attemptNumber()}"
    return mark


def executor_headers(peer: str, progress_dir: str | None = None, slow_s: float = 0.0) -> Column:
    """The ``headers`` column of the copy: ``executor`` and ``attempt`` (see the module's docstring)."""
    from pyspark.sql import functions as F

    def mark() -> str:
        from sparklog.hosts.spark_job import task_mark  # the module, not a driver's __main__ copy

        return task_mark(peer, progress_dir, slow_s)

    parts = F.split(F.udf(mark, "string", useArrow=False).asNondeterministic()(), "/")
    return F.array(
        F.struct(F.lit("executor").alias("key"), parts[0].cast("binary").alias("value")),
        F.struct(F.lit("attempt").alias("key"), parts[1].cast("binary").alias("value")),
    )


def copy(args: argparse.Namespace) -> dict[str, Any]:
    """The ``copy`` driver: ``args.source`` to ``args.target`` through the executors."""
    from sparklog.spark_session import local_spark

    began = time.monotonic()
    conf = {key.replace(".", "_"): value for key, value in DRIVER_CONF.items()}
    spark = local_spark(f"sparklog-copy-{args.source}", master=args.master, delta=False, **conf)
    try:
        reader = spark.read.format("sparklog").option("bootstrap.servers", args.bootstrap_server)
        reader = reader.option("subscribe", args.source)
        if args.max_records_per_partition:
            reader = reader.option("maxRecordsPerPartition", str(args.max_records_per_partition))
        peer = args.bootstrap_server.split(",")[0].rsplit(":", 1)[0]
        headers = executor_headers(peer, args.progress_dir, args.slow_ms / 1000)
        copied = reader.load().select("key", "value", headers.alias("headers"))
        (
            copied.write.format("sparklog")
            .option("bootstrap.servers", args.bootstrap_server)
            .option("topic", args.target)
            .mode("append")
            .save()
        )
        return {"app_id": spark.sparkContext.applicationId, "seconds": round(time.monotonic() - began, 1)}
    finally:
        spark.stop()


def produce(args: argparse.Namespace) -> dict[str, Any]:
    """``args.records`` records ``<prefix>-<i>`` to a new topic, in batches over its partitions."""
    client = {"bootstrap_servers": args.bootstrap_server}
    with Admin(**client) as admin:
        admin.create_topic(args.topic, args.partitions, 3, {"min.insync.replicas": "2"})
    values = [f"{args.prefix}-{i:08d}".encode() for i in range(args.records)]
    with Producer(acks="all", **client) as producer:
        for n, start in enumerate(range(0, len(values), PRODUCE_BATCH)):
            producer.send_batch(
                args.topic, {"value": values[start : start + PRODUCE_BATCH]}, partition=n % args.partitions
            )
    return {"produced": len(values)}


def dump(args: argparse.Namespace) -> None:
    """Every record of ``args.topic`` (each partition from its start to its end now), as JSON lines."""
    client = {"bootstrap_servers": args.bootstrap_server}
    with Admin(**client) as admin:
        ends = {p["partition"]: p["log_end_offset"] for p in admin.describe_topic(args.topic)["partitions"]}
    with Consumer(args.topic, auto_offset_reset="earliest", max_wait_ms=200, **client) as reader:
        deadline = time.monotonic() + args.timeout
        while any(reader.position(p) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {args.topic}: at {[reader.position(p) for p in ends]} of {ends}")
            for record in reader.poll(timeout=0.5):
                headers = {key: value.decode() for key, value in record.headers or []}
                print(json.dumps({"value": record.value.decode(), "headers": headers}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparklog.hosts.spark_job", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    job = commands.add_parser("copy", help="a Spark driver: one topic to another with the exactly-once sink")
    job.add_argument("--master", required=True, help="spark://host:port")
    job.add_argument("--source", required=True)
    job.add_argument("--target", required=True)
    job.add_argument("--max-records-per-partition", type=int, default=0, help="the read's maxRecordsPerPartition")
    job.add_argument("--slow-ms", type=int, default=0, help="each task waits this long before its rows go on")
    job.add_argument("--progress-dir", default=None, help="each task attempt leaves a file here when it begins")
    make = commands.add_parser("produce", help="create a topic and fill it")
    make.add_argument("--topic", required=True)
    make.add_argument("--partitions", type=int, default=3)
    make.add_argument("--records", type=int, required=True)
    make.add_argument("--prefix", default="r")
    show = commands.add_parser("dump", help="print every record of a topic as JSON lines")
    show.add_argument("--topic", required=True)
    show.add_argument("--timeout", type=float, default=120.0)
    for command in (job, make, show):
        command.add_argument("--bootstrap-server", required=True, help="the brokers' Flight listeners")
    args = parser.parse_args(argv)
    if args.command == "copy":
        print(json.dumps(copy(args)), flush=True)
    elif args.command == "produce":
        print(json.dumps(produce(args)), flush=True)
    else:
        dump(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
