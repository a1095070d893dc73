"""``sparklog log verify DIR``: check a stopped broker's data dir (or one partition's) without
changing it, like Kafka's ``kafka-dump-log --verify`` (:mod:`sparklog.broker.log.log_verifier`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparklog.cli.common import CliError, print_table

HEADERS = ("PARTITION", "SEGMENTS", "BATCHES", "RECORDS", "LAST-OFFSET", "PROBLEMS")


def add_log(sub: argparse._SubParsersAction) -> None:
    log = sub.add_parser("log", help="inspect a broker's log files")
    lsub = log.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    p = lsub.add_parser(
        "verify",
        help="check every segment of a stopped broker's data dir",
        description="Reads every segment under DIR (a broker's data dir, or one partition's directory) and "
        "checks each batch's checksum, header and Arrow structure, that offsets increase, and that the "
        "indexes point at batches. Prints one row per partition, then each problem; exits 1 if any. "
        "Nothing is changed: run it on a stopped broker's files.",
    )
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    from sparklog.broker.log.log_verifier import partition_dirs, verify_partition

    root = Path(args.directory)
    if not root.is_dir():
        raise CliError(f"{root} is not a directory")
    partitions = partition_dirs(root)
    if not partitions:
        raise CliError(f"{root} holds no segment files (*.arrows), nor do its subdirectories")
    rows = []
    problems: list[str] = []
    for directory in partitions:
        reports = verify_partition(directory)
        found = [
            f"{r.path.relative_to(root) if r.path.is_relative_to(root) else r.path}: {p}"
            for r in reports
            for p in r.problems
        ]
        problems.extend(found)
        last = max((r.last_offset for r in reports if r.last_offset is not None), default=None)
        rows.append(
            (
                directory.name,
                len(reports),
                sum(r.batches for r in reports),
                sum(r.records for r in reports),
                "-" if last is None else last,
                len(found),
            )
        )
    print_table(HEADERS, rows)
    for problem in problems:
        print(f"PROBLEM {problem}")
    print(f"{len(partitions)} partition(s), {sum(r[2] for r in rows)} batches checked, {len(problems)} problem(s)")
    return 1 if problems else 0
