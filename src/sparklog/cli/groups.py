"""``sparklog groups list|describe|reset``: consumer groups and their committed offsets."""

from __future__ import annotations

import argparse
import json

from sparklog.cli.common import add_cluster_options, admin, parse_time, print_table

DESCRIBE_HEADERS = ("TOPIC", "PARTITION", "COMMITTED-OFFSET", "LOG-END-OFFSET", "LAG")
RESET_HEADERS = ("TOPIC", "PARTITION", "NEW-OFFSET")
MEMBERS_HEADERS = ("MEMBER-ID", "TOPICS")


def add_groups(sub: argparse._SubParsersAction) -> None:
    groups = sub.add_parser("groups", help="list, describe and reset consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")

    p = gsub.add_parser("list", help="list the consumer groups, one name per line")
    add_cluster_options(p)
    p.set_defaults(handler=_list)

    p = gsub.add_parser(
        "describe",
        help="per partition: committed offset, log end offset, lag",
        description="Prints a table with one row per partition the group committed an offset for: "
        "TOPIC PARTITION COMMITTED-OFFSET LOG-END-OFFSET LAG (the committed offset is the next "
        "offset the group will read; lag = log end offset - committed offset).",
    )
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--json", action="store_true", help="print one JSON object per partition instead of a table")
    p.add_argument(
        "--members",
        action="store_true",
        help="print the group's live members instead (MEMBER-ID TOPICS), as Kafka's --members",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_describe)

    p = gsub.add_parser(
        "reset",
        help="move a group's committed offsets of a topic",
        description="Moves the group's committed offsets of every partition of TOPIC and prints the new ones "
        "(TOPIC PARTITION NEW-OFFSET). Offsets are clamped to the partition's log start and end. "
        "Refused while members of the group read TOPIC (see describe --members).",
    )
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", required=True, metavar="TOPIC")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    target.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    target.add_argument(
        "--to-time",
        metavar="ISO",
        help="to the first record at or after an ISO 8601 time (no offset = UTC) or epoch milliseconds",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_reset)


def _list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        names = client.list_groups()
    for name in names:
        print(name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    if args.members:
        return _members(args)
    with admin(args) as client:
        rows = client.describe_group(args.group)
    if args.json:
        for row in rows:
            print(json.dumps({"group": args.group, **row}))
        return 0
    print_table(
        DESCRIBE_HEADERS,
        ((r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"]) for r in rows),
    )
    return 0


def _members(args: argparse.Namespace) -> int:
    with admin(args) as client:
        members = client.group_members(args.group)
    rows = sorted((m, topics) for topics, ids in members.items() for m in ids)
    if args.json:
        for member, topics in rows:
            print(json.dumps({"group": args.group, "member_id": member, "topics": list(topics)}))
        return 0
    print_table(MEMBERS_HEADERS, ((member, ",".join(topics)) for member, topics in rows))
    return 0


def _reset(args: argparse.Namespace) -> int:
    to_time = parse_time(args.to_time, "--to-time") if args.to_time is not None else None
    with admin(args) as client:
        new = client.reset_group(
            args.group,
            args.topic,
            to_earliest=args.to_earliest,
            to_latest=args.to_latest,
            to_offset=args.to_offset,
            to_time=to_time,
        )
    print_table(RESET_HEADERS, ((t, p, offset) for (t, p), offset in sorted(new.items())))
    return 0
