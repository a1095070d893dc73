"""``sparklog bench SCENARIO [--json]``: run a benchmark scenario (``sparklog.bench``) and print it."""

from __future__ import annotations

import argparse
import json
import sys

from sparklog.cli.common import CliError, add_acks_option, add_zookeeper_option

# option name -> (type, help); only options given on the command line reach the scenario, so each
# scenario keeps its own defaults (see sparklog/bench/)
OPTIONS: dict[str, tuple[type, str]] = {
    "records": (int, "records to write (default 10M; consume-fields 2M)"),
    "value-bytes": (int, "bytes per value (default 100)"),
    "batch-records": (int, "records per batch (default 10k)"),
    "repeat": (int, "measured runs, medians reported (default 3; spark-write 1; failover --hosts: host cut-offs)"),
    "partitions": (int, "partitions of the benchmark topic (default 6; failover 3, idle 1000, startup 3000)"),
    "replication-factor": (int, "replicas per partition, brokers started to match (default 1; idle 3)"),
    "brokers": (int, "brokers to start (default 1; idle 3)"),
    "send-records": (int, "records for the per-record send() part of 'produce' (default 1M)"),
    "in-flight": (int, "'produce', 'tier': send_batch_async tables on their way at once (default 4)"),
    "rate": (int, "records/s for 'latency' (default 10,000)"),
    "seconds": (float, "duration of 'latency' (default 5) and of the measured window of 'idle' (default 20)"),
    "segments": (int, "'startup': segments per partition replica (default 10)"),
    "segment-bytes": (int, "'tier', 'spark-read --lake': segment.bytes of the benchmark topics (default 8 MiB)"),
    "scrape": (
        float,
        "produce, consume, metrics-cost: scrape every broker's metrics this often meanwhile, from "
        "another process (default: never; metrics-cost: 1 s, runs with and without it interleaved)",
    ),
}
SCRAPED = ("produce", "consume", "metrics-cost")
SOURCES = {"spark-read": ("topic", "memory"), "spark-write": ("topic", "files")}


def add_bench(sub: argparse._SubParsersAction) -> None:
    from sparklog.bench import SCENARIOS

    p = sub.add_parser("bench", help="run a benchmark scenario and print its figures")
    add_zookeeper_option(p)  # accepted like everywhere; scenarios start their own local cluster
    p.add_argument("scenario", choices=sorted(SCENARIOS), help="what to measure (see docs/benchmarks.md)")
    for name, (type_, help_) in OPTIONS.items():
        p.add_argument(f"--{name}", type=type_, default=None, metavar="N" if type_ is int else "SECONDS", help=help_)
    p.add_argument(
        "--compression",
        choices=["none", "lz4", "zstd"],
        default=None,
        help="append: the log's compression (Arrow IPC buffer compression); default none",
    )
    add_acks_option(p, None, "produce, latency: acknowledgement level, 0, 1, all or -1 (= all); default 1")
    p.add_argument(
        "--fields",
        default=None,
        metavar="F1,F2",
        help="consume, consume-fields, spark-read: a typed topic of 20 columns read whole, then as these columns "
        "(default: consume and spark-read read plain records; consume-fields f0,f1)",
    )
    p.add_argument(
        "--source",
        choices=["topic", "memory", "files"],
        default=None,
        help="spark-read: a sparklog topic or 'memory', the same batches from an in-memory Python "
        "source (Spark's ceiling for any Python source; with --fields, typed values whole and projected); "
        "spark-write: copy another topic or write from Parquet 'files' (the sink alone); default topic",
    )
    p.add_argument(
        "--against",
        choices=["kafka"],
        default=None,
        help="run the same workload on Apache Kafka too (KRaft on loopback, jars from Maven Central via "
        "benchmarks/fetch_kafka.sh; Spark's Kafka connector for spark-*): prints both and their ratio; "
        "--repeat then counts interleaved rounds (default 3, medians); default: sparklog only",
    )
    p.add_argument(
        "--lake",
        action="store_true",
        help="spark-read: sparklog.spark.read_topic of a tiered lake-enabled topic (history through Spark's "
        "Parquet reader on the Delta table's files) against the Python source's read of the same records "
        "in a plain topic, same run (default: the spark-read scenario as given)",
    )
    p.add_argument(
        "--secure",
        action="store_true",
        help="produce, consume, kafka-clients: brokers with SASL_SSL (SCRAM-SHA-256) and ACLs, as `sparklog up "
        "--secure` (kafka-clients: SASL_SSL Kafka listeners; default: plaintext, no ACLs)",
    )
    p.add_argument(
        "--unclean",
        action="store_true",
        help="startup: also time a restart after kill -9 of the brokers (recovery instead of a clean open); "
        "default: clean restarts only",
    )
    p.add_argument(
        "--hosts",
        action="store_true",
        help="failover, faults: a ZooKeeper ensemble and brokers on hosts of their own (network namespaces, "
        "root only), with network faults (faults always runs so); default: processes on loopback",
    )
    p.add_argument(
        "--faults",
        default=None,
        metavar="F1,F2",
        help="faults: which faults to inject, in this order (default every one: leader-host-cut-off, "
        "leader-partitioned, leader-paused, zookeeper-node-lost, zookeeper-leader-cut-off, "
        "packet-loss-between-brokers, rolling-restart)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (default: one 'name  value' a line)")
    p.set_defaults(handler=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from sparklog.bench import scenario

    options = {}
    for name in [*OPTIONS, "compression", "acks", "fields", "source"]:
        value = getattr(args, name.replace("-", "_"))
        if value is None:
            continue
        if isinstance(value, int | float) and value <= 0:
            raise CliError(f"--{name} must be positive")
        options[name.replace("-", "_")] = value
    if args.secure:
        if args.scenario not in ("produce", "consume", "kafka-clients"):
            raise CliError("--secure is for the produce, consume and kafka-clients scenarios")
        if getattr(args, "against", None) == "kafka" and args.scenario == "kafka-clients":
            raise CliError("--secure runs sparklog's SASL_SSL Kafka listeners; compare with the same run without it")
        options["secure"] = True
    if args.scrape is not None and args.scenario not in SCRAPED:
        raise CliError(f"--scrape is for the {', '.join(SCRAPED)} scenarios")
    if args.unclean:
        if args.scenario != "startup":
            raise CliError("--unclean is for the startup scenario")
        options["unclean"] = True
    hosts = args.hosts or args.scenario == "faults"
    if hosts:
        from sparklog.bench import ON_HOSTS
        from sparklog.hosts.network import namespaces_available

        if args.scenario not in ON_HOSTS:
            raise CliError(f"--hosts is for the {' and '.join(ON_HOSTS)} scenarios")
        if args.against:
            raise CliError(f"--against kafka: no Kafka comparison for {args.scenario} on hosts")
        if args.faults is not None:
            from sparklog.hosts.faults import FAULTS

            if args.scenario != "faults":
                raise CliError("--faults is for the faults scenario")
            chosen = [name.strip() for name in args.faults.split(",") if name.strip()]
            unknown = [name for name in chosen if name not in FAULTS]
            if unknown or not chosen:
                raise CliError(
                    f"--faults: unknown fault {', '.join(unknown) or '(none given)'}; known: {', '.join(FAULTS)}"
                )
            options["faults"] = chosen
        reason = namespaces_available()
        if reason is not None:
            raise CliError(f"{args.scenario} on hosts needs network namespaces: {reason}")
    elif args.faults is not None:
        raise CliError("--faults is for the faults scenario")
    if args.lake:
        if args.scenario != "spark-read":
            raise CliError("--lake is for the spark-read scenario")
        if "source" in options or "fields" in options or args.against:
            raise CliError("--lake compares read_topic with the sparklog source: drop --source, --fields, --against")
    if "segment_bytes" in options and args.scenario != "tier" and not args.lake:
        raise CliError("--segment-bytes is for the tier and spark-read --lake scenarios")
    source = options.get("source")
    if source is not None and source not in SOURCES.get(args.scenario, ()):
        known = SOURCES.get(args.scenario)
        raise CliError(
            f"--source {source}: {args.scenario} reads from " + " or ".join(known)
            if known
            else f"--source: {args.scenario} has no choice of source (spark-read and spark-write do)"
        )
    if args.against == "kafka":
        from sparklog.bench import against_kafka

        if args.scenario not in against_kafka.SCENARIOS:
            raise CliError(
                f"--against kafka: no Kafka comparison for {args.scenario} (have: {', '.join(against_kafka.SCENARIOS)})"
            )
        if "source" in options:
            raise CliError("--against kafka compares topic to topic: drop --source")
        if options.get("compression", "none") != "none":
            raise CliError("--against kafka compares uncompressed records: drop --compression")
        options.pop("compression", None)
        repeat = options.pop("repeat", 3)
        result = against_kafka.run(
            args.scenario, repeat=repeat, log=lambda m: print(m, file=sys.stderr, flush=True), **options
        )
    else:
        result = scenario(args.scenario, lake=args.lake, hosts=hosts)(**options)
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0
