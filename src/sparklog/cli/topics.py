"""``sparklog topics create|list|describe|delete|alter``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sparklog.cli.common import (
    CliError,
    add_cluster_options,
    admin,
    ids,
    parse_configs,
    print_table,
    read_text_file,
)
from sparklog.coordination.cluster import NUM_PARTITIONS_MAX
from sparklog.errors import TopicExists
from sparklog.names import check_not_internal, check_topic_name

DESCRIBE_HEADERS = ("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET")
# lake.enabled topics: where the local log starts (LOG-START is the earliest offset, in the Delta
# table once it reaches the local log) and how far the table has each partition
LAKE_HEADERS = ("LOCAL-START", "LAKE-OFFSET", "LAKE-LAG")


def add_topics(sub: argparse._SubParsersAction) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")

    p = tsub.add_parser("create", help="create a topic")
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--partitions",
        type=int,
        default=1,
        metavar="P",
        help=f"number of partitions (default 1, at most num.partitions.max={NUM_PARTITIONS_MAX})",
    )
    p.add_argument(
        "--replication-factor", type=int, default=1, metavar="R", help="replicas of each partition (default 1)"
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="a topic config (retention.ms, cleanup.policy, ...); repeat for several",
    )
    p.add_argument(
        "--value-schema", metavar="FILE", help="an Avro record schema (.avsc): a typed topic whose values are columns"
    )
    p.add_argument(
        "--if-not-exists",
        action="store_true",
        help="a topic of that name exists already: leave it as it is and exit 0 (Kafka's flag)",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_create)

    p = tsub.add_parser("list", help="list the topics, one name per line")
    add_cluster_options(p)
    p.set_defaults(handler=_list)

    p = tsub.add_parser(
        "describe",
        help="per partition: leader, replicas, in-sync replicas, log start and end offsets",
        description="Prints a line 'Topic: NAME  Partitions: P  ReplicationFactor: R  Partitioner: murmur2|fnv1a  "
        "Configs: k=v,...' (the partitioner places keyed records: murmur2, Kafka's, for topics created "
        "since sparklog has it; fnv1a for older ones), "
        "then a table with one row per partition: PARTITION LEADER REPLICAS ISR LOG-START-OFFSET "
        "LOG-END-OFFSET (broker ids comma-separated; '-' where a partition's leader is unreachable).",
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    add_cluster_options(p)
    p.set_defaults(handler=_describe)

    p = tsub.add_parser("delete", help="delete a topic and all its records")
    p.add_argument("name", metavar="NAME")
    add_cluster_options(p)
    p.set_defaults(handler=_delete)

    p = tsub.add_parser("alter", help="change configs of a topic")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--config", action="append", required=True, metavar="KEY=VALUE", help="repeat for several")
    add_cluster_options(p)
    p.set_defaults(handler=_alter)


def _configs_text(configs: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(configs.items())) or "-"


def _create(args: argparse.Namespace) -> int:
    check_not_internal(args.name, "create")  # before connecting: a bad name is the one error to show
    configs = parse_configs(args.config)
    if args.partitions < 1:
        raise CliError(f"--partitions must be at least 1, got {args.partitions}")
    if args.replication_factor < 1:
        raise CliError(f"--replication-factor must be at least 1, got {args.replication_factor}")
    schema = read_text_file(args.value_schema, "--value-schema") if args.value_schema else None
    with admin(args) as client:
        try:
            meta = client.create_topic(
                args.name, args.partitions, args.replication_factor, configs, value_schema=schema
            )
        except TopicExists:
            if not args.if_not_exists:
                raise
            print(f"topic {args.name} exists already: left as it is")
            return 0
    print(
        f"created {'typed ' if schema else ''}topic {meta.name} with {meta.partitions} partition(s), "
        f"replication factor {args.replication_factor}, configs {_configs_text(meta.configs)}"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        names = client.list_topics()
    for name in names:
        print(name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    check_topic_name(args.name)
    with admin(args) as client:
        info = client.describe_topic(args.name)
    partitions = info["partitions"]
    if args.json:
        print(json.dumps(info))
        return 0
    rf = len(partitions[0]["replicas"]) if partitions else 0
    print(
        f"Topic: {info['topic']}  Partitions: {len(partitions)}  ReplicationFactor: {rf}  "
        f"Partitioner: {info['partitioner']}  Configs: {_configs_text(info['configs'])}"
    )
    lake = info["configs"].get("lake.enabled", "false") == "true"
    print_table(
        DESCRIBE_HEADERS + LAKE_HEADERS if lake else DESCRIBE_HEADERS,
        (
            (
                p["partition"],
                p["leader"],
                ids(p["replicas"]),
                ids(p["isr"]),
                p.get("log_start_offset"),
                p.get("log_end_offset"),
                *((p.get("local_log_start_offset"), p.get("lake_offset"), p.get("lake_lag")) if lake else ()),
            )
            for p in partitions
        ),
    )
    for p in partitions:
        if p.get("error"):
            print(f"sparklog: warning: partition {p['partition']}: {p['error']}", file=sys.stderr)
    return 0


def _delete(args: argparse.Namespace) -> int:
    check_not_internal(args.name, "delete")
    with admin(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


def _alter(args: argparse.Namespace) -> int:
    check_not_internal(args.name, "alter")
    configs = parse_configs(args.config)
    with admin(args) as client:
        meta = client.alter_topic(args.name, configs)
    print(f"altered topic {meta.name}: configs {_configs_text(meta.configs)}")
    return 0
