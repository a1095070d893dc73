"""The ``sparklog`` command line: one sub-command per job, errors as one clear line on stderr.

The commands live in ``sparklog.cli.<module>``: ``cluster`` (up, zookeeper, broker), ``topics``,
``produce``, ``consume``, ``groups``, ``acls``, ``users``, ``quotas``, ``log`` (verify a data dir); ``bench``
is here. Every command
takes ``--zookeeper`` (before or after the command name; env ``SPARKLOG_ZOOKEEPER``, default ``127.0.0.1:2181``);
every client and admin command (topics, produce, consume, groups, partitions, schemas, acls, users,
quotas) also takes ``--bootstrap-server HOST:PORT[,...]`` (env ``SPARKLOG_BOOTSTRAP_SERVERS``) and
``--command-config FILE``, and then needs no ZooKeeper.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from sparklog.cli.acls import add_acls
from sparklog.cli.bench import add_bench
from sparklog.cli.cluster import add_broker, add_up, add_zookeeper
from sparklog.cli.common import BOOTSTRAP_ENV, DEFAULT_ZOOKEEPER, ZOOKEEPER_ENV, CliError, add_command_config_option
from sparklog.cli.consume import add_consume
from sparklog.cli.fuzz import add_fuzz
from sparklog.cli.groups import add_groups
from sparklog.cli.health import add_cluster
from sparklog.cli.log import add_log
from sparklog.cli.partitions import add_partitions
from sparklog.cli.produce import add_produce
from sparklog.cli.quotas import add_quotas
from sparklog.cli.schemas import add_schemas
from sparklog.cli.topics import add_topics
from sparklog.cli.users import add_users
from sparklog.errors import SparklogError
from sparklog.security.client_config import load_properties

DEBUG_ENV = "SPARKLOG_DEBUG"
__all__ = ["DEFAULT_ZOOKEEPER", "CliError", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``sparklog: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"sparklog: error: {message} (see '{self.prog} --help')\n")


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_up,
    add_zookeeper,
    add_broker,
    add_cluster,
    add_topics,
    add_produce,
    add_consume,
    add_groups,
    add_partitions,
    add_schemas,
    add_acls,
    add_users,
    add_quotas,
    add_log,
    add_bench,
    add_fuzz,
]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sparklog", description="A Kafka-style commit log that Spark reads natively.")
    parser.add_argument(
        "--zookeeper",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[/chroot]",
        help=f"ZooKeeper to use (env {ZOOKEEPER_ENV}, default {DEFAULT_ZOOKEEPER}); also accepted after the command",
    )
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,...]",
        help=f"brokers to bootstrap from: client and admin commands then need no ZooKeeper (env {BOOTSTRAP_ENV})",
    )
    add_command_config_option(parser)
    parser.add_argument(
        "--debug",
        action="store_true",
        default=bool(os.environ.get(DEBUG_ENV)),
        help=f"show logs and full tracebacks (env {DEBUG_ENV}=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _describe_error(exc: BaseException, zookeeper: str) -> str:
    """The one line to print for an error that ended a command."""
    import pyarrow as pa
    import pyarrow.flight as flight
    from kazoo.exceptions import AuthFailedError, KazooException, NoAuthError
    from kazoo.handlers.threading import KazooTimeoutError

    from sparklog.coordination.zookeeper_acls import DIGEST_ENV

    if isinstance(exc, SparklogError):
        return _one_line(exc)
    if isinstance(exc, NoAuthError | AuthFailedError):
        return (
            f"ZooKeeper at {zookeeper} refused this command's credentials ({type(exc).__name__}): it is locked "
            f"down; set {DIGEST_ENV}=sparklog:<password> (the zookeeper password in "
            f"<data-dir>/security/secrets.properties of `sparklog up --secure`)"
        )
    if isinstance(exc, KazooException | KazooTimeoutError):
        return f"lost the connection to ZooKeeper at {zookeeper} ({type(exc).__name__}); is it running?"
    if isinstance(exc, flight.FlightError):
        from sparklog.protocol import wire

        return _one_line(wire.from_flight_error(exc, "the broker"))
    if isinstance(exc, pa.ArrowException | OSError):
        return _one_line(exc)
    return f"unexpected {type(exc).__name__}: {_one_line(exc)} (run with --debug for the traceback)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparklog`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given = getattr(args, "zookeeper", None)
    env = os.environ.get(ZOOKEEPER_ENV) or None
    args.zookeeper_given = bool(given or env)  # `up` starts its own ZooKeeper only when none is named
    args.zookeeper = given or env or DEFAULT_ZOOKEEPER
    args.bootstrap_servers = getattr(args, "bootstrap_server", None) or os.environ.get(BOOTSTRAP_ENV) or None
    command_config = getattr(args, "command_config", None)
    if args.debug:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    elif not getattr(args, "logs", False):
        logging.disable(logging.CRITICAL)  # kazoo's reconnect chatter must not garble the one error line
    try:
        args.client_config = load_properties(command_config) if command_config else {}
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`sparklog consume ... | head`): not an error; keep exit quiet.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except Exception as exc:
        if args.debug:
            raise
        print(f"sparklog: error: {_describe_error(exc, args.zookeeper)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
