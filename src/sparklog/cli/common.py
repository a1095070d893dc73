"""What the ``sparklog`` sub-commands share: the user-error type, option parsing, ZooKeeper checks, tables."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from sparklog.errors import CliError as CliError  # every command raises it from here

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
ZOOKEEPER_ENV = "SPARKLOG_ZOOKEEPER"
BOOTSTRAP_ENV = "SPARKLOG_BOOTSTRAP_SERVERS"


# how long a command rides out a leader failover before it reports the error (a failover takes
# about a ZooKeeper session timeout, 4 s, plus an election)
CLI_RETRY_TIMEOUT_S = 10.0


def add_zookeeper_option(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper`` on a sub-command too (``sparklog topics list --zookeeper ...``); the value of
    the top-level option, the environment or the default applies when it is absent."""
    parser.add_argument(
        "--zookeeper",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[/chroot]",
        help=f"ZooKeeper to use (env {ZOOKEEPER_ENV}, default {DEFAULT_ZOOKEEPER})",
    )


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper``, ``--bootstrap-server`` and ``--command-config`` on a client or admin command:
    given bootstrap servers (or env ``SPARKLOG_BOOTSTRAP_SERVERS``, or ``bootstrap.servers`` in the
    command config) the command talks to brokers only and needs no ZooKeeper (nor its digest)."""
    add_zookeeper_option(parser)
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT[,...]",
        help=f"brokers to bootstrap from instead of ZooKeeper (env {BOOTSTRAP_ENV}; default: none, ZooKeeper is used)",
    )
    add_command_config_option(parser)


def add_command_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        dest="command_config",
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="client settings (properties file, as Kafka's tools take): security.protocol, ssl.ca.location, "
        "sasl.mechanism, sasl.username, sasl.password...; default: none (plaintext, no authentication)",
    )


# --acks as Kafka's tools take it: 0, 1, all, and -1 (the same as all)
ACKS_CHOICES = ("0", "1", "all", "-1")


def add_acks_option(parser: argparse.ArgumentParser, default: str | None, help: str) -> None:
    """``--acks 0|1|all|-1`` (``-1`` is read as ``all``, as Kafka's producer reads it)."""
    parser.add_argument("--acks", type=_acks, choices=ACKS_CHOICES, default=default, help=help)


def _acks(text: str) -> str:
    return "all" if text.strip() == "-1" else text.strip()


def parse_configs(items: Iterable[str] | None) -> dict[str, str]:
    """``["retention.ms=1000", ...]`` -> ``{"retention.ms": "1000"}``; refuses anything without ``=``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--config expects key=value, got {item!r}")
        out[key] = value.strip()
    return out


_EPOCH_MS = re.compile(r"^-?\d+$")


def parse_time(text: str, option: str) -> int:
    """An ISO 8601 time (``2026-01-01T12:00:00Z``, ``2026-01-01T12:00:00+02:00``, ``2026-01-01``;
    no offset means UTC) or epoch milliseconds -> epoch milliseconds."""
    text = text.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"{option} expects an ISO 8601 time such as 2026-01-01T12:00:00Z (or epoch milliseconds), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def zookeeper_hosts(connect: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a ``host:port[,host:port][/chroot]`` connect string."""
    hosts = connect.split("/", 1)[0]
    out = []
    for entry in hosts.split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep:
            host, port = entry, "2181"
        try:
            out.append((host.strip("[]"), int(port)))
        except ValueError:
            raise CliError(f"--zookeeper expects HOST:PORT[/chroot], got {connect!r}") from None
    if not out:
        raise CliError(f"--zookeeper expects HOST:PORT[/chroot], got {connect!r}")
    return out


def check_zookeeper(connect: str) -> None:
    """Fail at once, with one clear line, when none of the ZooKeeper addresses can be reached: a
    host name that does not resolve is named as such, else nothing listens there (kazoo would
    otherwise retry for its whole connection timeout)."""
    from sparklog.coordination.ports import port_is_open
    from sparklog.errors import CoordinatorNotAvailable

    unresolved: list[str] = []
    silent: list[str] = []
    for host, port in zookeeper_hosts(connect):
        problem = _name_problem(host, port)
        if problem is not None:
            unresolved.append(f"host name {host!r} does not resolve ({problem})")
        elif port_is_open(host, port, timeout=2.0):
            return
        else:
            silent.append(f"{host}:{port}")
    if not silent:
        raise CoordinatorNotAvailable(
            f"cannot reach ZooKeeper at {connect}: {'; '.join(unresolved)}: check the host name given "
            f"with --zookeeper (or env {ZOOKEEPER_ENV})"
        )
    reasons = "nothing is listening there" if not unresolved else f"nothing is listening at {', '.join(silent)}"
    raise CoordinatorNotAvailable(
        f"cannot reach ZooKeeper at {connect}: {'; '.join([reasons, *unresolved])} "
        f"(start one with 'sparklog up' or 'sparklog zookeeper', or pass --zookeeper)"
    )


def _name_problem(host: str, port: int) -> str | None:
    """Why ``host`` has no address (the resolver's words), or None when it resolves."""
    import socket

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return exc.strerror or str(exc)
    except UnicodeError:  # a label too long or empty: no name a resolver would take
        return "not a valid host name"
    return None


def bootstrap_servers(args: argparse.Namespace) -> str | None:
    """The command's ``--bootstrap-server`` (or env ``SPARKLOG_BOOTSTRAP_SERVERS``, or
    ``bootstrap.servers`` in its ``--command-config``), if any."""
    return getattr(args, "bootstrap_servers", None) or client_config(args).get("bootstrap.servers")


def client_config(args: argparse.Namespace) -> dict[str, str]:
    """The client settings of ``--command-config`` (security), if given."""
    return dict(getattr(args, "client_config", None) or {})


def admin(args: argparse.Namespace) -> Any:
    """A connected :class:`sparklog.Admin`: through ``--bootstrap-server`` if given (brokers only),
    else ``--zookeeper``."""
    from sparklog.client.admin import Admin

    servers = bootstrap_servers(args)
    if servers:
        return Admin(bootstrap_servers=servers, config=client_config(args))
    check_zookeeper(args.zookeeper)
    return Admin(args.zookeeper, config=client_config(args))


def cluster_client(args: argparse.Namespace) -> Any:
    """A :class:`ClusterClient` (metadata and leaders) for ``--bootstrap-server`` or ``--zookeeper``;
    ``close()`` it."""
    from sparklog.client.cluster_address import resolve
    from sparklog.client.cluster_client import ClusterClient

    servers = bootstrap_servers(args)
    if not servers:
        check_zookeeper(args.zookeeper)
    address = resolve(args.zookeeper, servers, client_config(args))
    return ClusterClient.connect(address, retry_timeout_s=CLI_RETRY_TIMEOUT_S)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain left-aligned table, columns separated by two spaces (``-`` for a missing value)."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], file: TextIO | None = None) -> None:
    print(format_table(headers, rows), file=file or sys.stdout)


def ids(values: Iterable[int] | None) -> str:
    """Broker ids as ``1,2,3`` (``-`` when empty)."""
    text = ",".join(str(v) for v in values or ())
    return text or "-"


def read_text_file(path: str, option: str) -> str:
    """The text of a file named on the command line (one clear error if it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise CliError(f"{option}: cannot read {path}: {exc.strerror}") from None
