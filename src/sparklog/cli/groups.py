"""``sparklog groups list|describe|reset``: consumer groups and their committed offsets."""

from __future__ import annotations

import argparse
import json
import sys

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
        help="move a group's committed offsets (a preview unless --execute)",
        description="Computes the group's new committed offsets for every partition of the chosen topics and "
        "prints them (TOPIC PARTITION NEW-OFFSET), as kafka-consumer-groups --reset-offsets: a preview that "
        "changes nothing unless --execute is given (--dry-run says so explicitly). Offsets are clamped to "
        "the partition's log start and end. Refused while members of the group read one of the topics "
        "(see describe --members), preview or not.",
    )
    p.add_argument("group", metavar="GROUP", help="the consumer group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic", action="append", metavar="TOPIC", help="reset the group's offsets of TOPIC (repeat for several)"
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="reset every topic the group has committed offsets for"
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    target.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    target.add_argument(
        "--to-time",
        metavar="ISO",
        help="to the first record at or after an ISO 8601 time (no offset = UTC) or epoch milliseconds",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="only print the new offsets (the default without --execute)"
    )
    mode.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print them)")
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
            all_topics=args.all_topics,
            to_earliest=args.to_earliest,
            to_latest=args.to_latest,
            to_offset=args.to_offset,
            to_time=to_time,
            dry_run=not args.execute,
        )
    print_table(RESET_HEADERS, ((t, p, offset) for (t, p), offset in sorted(new.items())))
    if not args.execute and not args.dry_run:
        print(
            "sparklog: warning: nothing was changed: this is a preview (as kafka-consumer-groups --reset-offsets "
            "without --execute); add --execute to commit these offsets, or --dry-run to ask for the preview",
            file=sys.stderr,
        )
    return 0
