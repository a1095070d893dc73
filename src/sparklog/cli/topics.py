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
from sparklog.coordination.cluster import (
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    NUM_PARTITIONS_MAX,
    check_deletable_configs,
    check_partition_increase,
)
from sparklog.errors import TopicExists, UnknownTopic
from sparklog.names import check_not_internal, check_topic_name

DESCRIBE_HEADERS = ("PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET")
# lake.enabled topics: where the local log starts (LOG-START is the earliest offset, in the Delta
# table once it reaches the local log) and how far the table has each partition
LAKE_HEADERS = ("LOCAL-START", "LAKE-OFFSET", "LAKE-LAG")


def add_topics(sub: argparse._SubParsersAction) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")

    p = tsub.add_parser(
        "create",
        help="create a topic",
        description="Creates topic NAME with its partitions' replicas spread over the live brokers (each "
        "partition's first replica leads it) and prints what was created.",
    )
    p.add_argument("name", metavar="NAME", help="the topic's name: 1-249 of [A-Za-z0-9._-]")
    p.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_NUM_PARTITIONS,
        metavar="P",
        help=f"number of partitions (default {DEFAULT_NUM_PARTITIONS}, "
        f"at most num.partitions.max={NUM_PARTITIONS_MAX})",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        default=DEFAULT_REPLICATION_FACTOR,
        metavar="R",
        help=f"replicas of each partition, on R different live brokers (default {DEFAULT_REPLICATION_FACTOR})",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="a topic config (retention.ms, cleanup.policy, min.insync.replicas, ...); repeat for several; "
        "default: none, Kafka's defaults (retention.ms 7 days, cleanup.policy delete, ...; partitioner murmur2)",
    )
    p.add_argument(
        "--value-schema",
        metavar="FILE",
        help="an Avro record schema (.avsc): a typed topic whose values are columns; default: none, values are bytes",
    )
    p.add_argument(
        "--if-not-exists",
        action="store_true",
        help="a topic of that name exists already: leave it as it is and exit 0 (Kafka's flag); "
        "default: off, an existing topic is an error",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_create)

    p = tsub.add_parser(
        "list",
        help="list the topics, one name per line",
        description="Prints the name of every topic, sorted, one a line (topics being created or deleted are "
        "left out).",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_list)

    p = tsub.add_parser(
        "describe",
        help="per partition: leader, replicas, in-sync replicas, log start and end offsets",
        description="Describes topic NAME, or every topic when NAME is left out (as kafka-topics --describe "
        "without --topic; a blank line between topics). For each it prints a line 'Topic: NAME  Partitions: P  "
        "ReplicationFactor: R  Partitioner: murmur2|fnv1a  Configs: k=v,...' (the partitioner places keyed "
        "records: murmur2, Kafka's, for topics created since sparklog has it; fnv1a for older ones), "
        "then a table with one row per partition: PARTITION LEADER REPLICAS ISR LOG-START-OFFSET "
        "LOG-END-OFFSET (broker ids comma-separated; '-' where a partition's leader is unreachable).",
    )
    p.add_argument("name", metavar="NAME", nargs="?", help="the topic to describe (default: every topic)")
    p.add_argument("--json", action="store_true", help="print one JSON object per topic (one a line) instead of tables")
    add_cluster_options(p)
    p.set_defaults(handler=_describe)

    p = tsub.add_parser(
        "delete",
        help="delete a topic and all its records",
        description="Deletes topic NAME: it disappears at once for clients, and every broker deletes its "
        "replicas' logs. Its records cannot be recovered.",
    )
    p.add_argument("name", metavar="NAME", help="the topic to delete")
    add_cluster_options(p)
    p.set_defaults(handler=_delete)

    p = tsub.add_parser(
        "alter",
        help="add partitions to a topic, set or remove its configs",
        description="Grows topic NAME to --partitions N (kafka-topics --alter --partitions: never fewer; keyed "
        "records are placed by the new count from then on, so a key's later records may land in another "
        "partition), sets configs (--config) and removes per-topic overrides (--delete-config: the topic then "
        "has the default, as kafka-configs --delete-config). The partition count is checked first, then "
        "configs change, then partitions are added.",
    )
    p.add_argument("name", metavar="NAME", help="the topic to alter")
    p.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help=f"grow the topic to N partitions in all (more than now, at most {NUM_PARTITIONS_MAX}); default: unchanged",
    )
    p.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="set a topic config (retention.ms, cleanup.policy, ...); repeat for several; default: none set",
    )
    p.add_argument(
        "--delete-config",
        action="append",
        metavar="KEY[,KEY]",
        help="remove per-topic overrides (the topic gets the default); comma-separated or repeated; "
        "default: none removed",
    )
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
    if args.name is not None:
        check_topic_name(args.name)
    with admin(args) as client:
        names = [args.name] if args.name is not None else client.list_topics()
        described = 0
        for name in names:
            try:
                info = client.describe_topic(name)
            except UnknownTopic:
                if args.name is not None:
                    raise
                continue  # deleted since it was listed
            if args.json:
                print(json.dumps(info), flush=True)
            else:
                if described:
                    print()
                _print_topic(info)
            described += 1
    return 0


def _print_topic(info: dict[str, Any]) -> None:
    partitions = info["partitions"]
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
    sys.stdout.flush()  # the table before its warnings
    for p in partitions:
        error = p.get("error")
        if error:
            where = f"{info['topic']}-{p['partition']}"
            print(f"sparklog: warning: {error if where in error else f'{where}: {error}'}", file=sys.stderr)


def _delete(args: argparse.Namespace) -> int:
    check_not_internal(args.name, "delete")
    with admin(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


def _alter(args: argparse.Namespace) -> int:
    check_not_internal(args.name, "alter")
    configs = parse_configs(args.config)
    deleted = [key.strip() for item in args.delete_config or () for key in item.split(",") if key.strip()]
    if args.partitions is None and not configs and not deleted:
        raise CliError("nothing to alter: give --partitions N, --config KEY=VALUE or --delete-config KEY")
    check_deletable_configs(deleted, configs)  # before connecting: the one error to show
    with admin(args) as client:
        before = client.topic(args.name).partitions  # UnknownTopic first
        if args.partitions is not None:
            check_partition_increase(args.name, before, args.partitions)  # before any config changes
        if configs or deleted:
            meta = client.alter_topic(args.name, configs, delete=deleted)
            print(f"altered topic {meta.name}: configs {_configs_text(meta.configs)}")
        if args.partitions is not None:
            meta = client.create_partitions(args.name, args.partitions)
            print(f"altered topic {meta.name}: partitions {before} -> {meta.partitions}")
            print(
                f"sparklog: warning: keyed records of {meta.name} are placed among {meta.partitions} partitions from "
                "now on: a key's new records may go to another partition than its earlier ones",
                file=sys.stderr,
            )
    return 0
