"""``sparklog users add|remove|list``: SCRAM-SHA-256 users, kept as salted credentials (never the
password). With ``--bootstrap-server`` / ``--command-config`` through brokers (Kafka's
AlterUserScramCredentials: the salted password is computed here, the password never leaves this
process; no ZooKeeper access needed), else in ZooKeeper directly (``--zookeeper``)."""

from __future__ import annotations

import argparse
import os
import sys

from sparklog.cli.common import CliError, add_cluster_options, admin, read_text_file
from sparklog.security.credential_store import MAX_ITERATIONS, MIN_ITERATIONS
from sparklog.security.credentials import DEFAULT_ITERATIONS

PASSWORD_ENV = "SPARKLOG_USER_PASSWORD"


def add_users(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="add, remove and list users (SCRAM-SHA-256 credentials)")
    usub = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")

    p = usub.add_parser(
        "add",
        help="add a user, or set a user's password",
        description="Stores a salted, iterated SCRAM-SHA-256 credential derived from the password (the "
        f"password itself is not kept). The password comes from --password, --password-file, env {PASSWORD_ENV}, "
        "or one line on stdin. Through brokers (--bootstrap-server, --command-config) the salted password is "
        "computed here and only it is sent; that needs Alter on the cluster.",
    )
    p.add_argument("name", help="user name (letters, digits, '.', '_', '-')")
    p.add_argument("--password", help="the password (visible to other users of this host: prefer --password-file)")
    p.add_argument("--password-file", metavar="FILE", help="a file whose first line is the password")
    p.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"SCRAM iterations (default {DEFAULT_ITERATIONS}, from {MIN_ITERATIONS} to {MAX_ITERATIONS})",
    )
    add_cluster_options(p)
    p.set_defaults(handler=_add)

    p = usub.add_parser("remove", help="remove a user (its sessions end at once)")
    p.add_argument("name")
    add_cluster_options(p)
    p.set_defaults(handler=_remove)

    p = usub.add_parser("list", help="list the users")
    add_cluster_options(p)
    p.set_defaults(handler=_list)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None and args.password_file is not None:
        raise CliError("give --password or --password-file, not both")
    if args.password_file is not None:
        text = read_text_file(args.password_file, "--password-file")
        password = text.splitlines()[0] if text else ""
    elif args.password is not None:
        password = args.password
    elif os.environ.get(PASSWORD_ENV):
        password = os.environ[PASSWORD_ENV]
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CliError(f"user {args.name!r}: the password is empty")
    return password


def _add(args: argparse.Namespace) -> int:
    password = _password(args)
    with admin(args) as client:
        new = client.upsert_scram_credential(args.name, password, args.iterations)
    print(f"{'added user' if new else 'changed the password of user'} {args.name!r}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    with admin(args) as client:
        if not client.delete_scram_credential(args.name):
            raise CliError(f"there is no user {args.name!r}")
    print(f"removed user {args.name!r}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        for name in client.describe_scram_credentials():
            print(name)
    return 0
