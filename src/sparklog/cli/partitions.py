"""``sparklog partitions reassign``: move partitions' replicas onto other brokers, online."""

from __future__ import annotations

import argparse

from sparklog.cli.common import CliError, add_cluster_options, admin, print_table


def add_partitions(sub: argparse._SubParsersAction) -> None:
    partitions = sub.add_parser("partitions", help="move partition replicas between brokers")
    psub = partitions.add_subparsers(dest="partitions_command", required=True, metavar="ACTION")
    p = psub.add_parser(
        "reassign",
        help="move partitions of a topic onto the given brokers while clients keep running",
        description="The controller adds the new replicas, waits until they are in sync, then drops the "
        "old ones (leadership moves to a new replica if needed). Prints the resulting assignment. Through "
        "brokers (--bootstrap-server, --command-config) it needs Alter on the cluster (Kafka's "
        "AlterPartitionReassignments).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--replicas", required=True, metavar="IDS", help="comma-separated broker ids, e.g. 2,3,4")
    p.add_argument("--partition", type=int, action="append", metavar="P", help="repeat; default: every partition")
    p.add_argument("--no-wait", action="store_true", help="return once the move is requested")
    add_cluster_options(p)
    p.set_defaults(handler=_reassign)


def _reassign(args: argparse.Namespace) -> int:
    try:
        replicas = [int(b) for b in args.replicas.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--replicas must be comma-separated broker ids, got {args.replicas!r}") from None
    with admin(args) as client:
        count = client.topic(args.topic).partitions
        chosen = args.partition if args.partition else list(range(count))
        assignment = client.reassign_partitions(args.topic, {p: replicas for p in chosen}, wait=not args.no_wait)
    print_table(("PARTITION", "REPLICAS"), [(p, ",".join(map(str, r))) for p, r in sorted(assignment.items())])
    return 0
