"""``sparklog produce TOPIC``: one record per line of standard input."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from sparklog.cli.common import (
    CliError,
    add_acks_option,
    add_cluster_options,
    bootstrap_servers,
    client_config,
    cluster_client,
)
from sparklog.client.cluster_client import ClusterClient
from sparklog.errors import BrokerNotAvailable, InvalidRecord, SparklogError

RECORD_OVERHEAD_BYTES = 64  # a record's offset, timestamp and lengths in a batch of one, roughly
_QUOTED_BYTES = 40  # how much of a line an error message quotes
_CHECK_EVERY = 1000  # sends between two looks at the acknowledgements (a failure stops the run early)

# how long a line may wait for its acknowledgement, retries included: Kafka's delivery.timeout.ms default
# (a first request to thousands of new partitions on a busy machine took over 10 s)
DELIVERY_TIMEOUT_S = 120.0


def _require_a_live_leader(client: ClusterClient, topic: str, partitions: Iterable[int]) -> None:
    """Raise the first partition's error when none of ``partitions`` has a live leader (the lines
    would wait out the whole delivery timeout for nothing); return at the first that has one."""
    first: SparklogError | None = None
    for partition in partitions:
        try:
            client.leader(topic, partition)
            return
        except BrokerNotAvailable as exc:
            first = first or exc
    if first is not None:
        raise first


def add_produce(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce",
        help="send one record per line of standard input",
        description="Reads standard input and sends one record per line (the line without its line "
        "ending) to TOPIC. With --key-separator SEP the text before the first SEP is the key and the "
        "rest the value (a line without SEP is an error). Bytes are sent as they are (no decoding). "
        "The first line that cannot be sent or delivered ends the run: the error names it (number and "
        "first bytes) and how many lines were delivered (--ignore-errors: report it and go on). "
        "Prints nothing on standard output; on success the number of records sent goes to standard "
        "error (unless --quiet).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    p.add_argument("--partition", type=int, metavar="P", help="send every record to partition P")
    add_acks_option(
        p,
        "1",
        "acknowledgement level: 0 (none), 1 (the leader stored it), all or -1 (every in-sync replica did); default 1",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="do not print the count on standard error")
    p.add_argument(
        "--ignore-errors",
        action="store_true",
        help="report a line that cannot be sent or delivered and go on (exit 1 at the end if any was lost); "
        "without it the first such line ends the run and nothing after it is sent",
    )
    add_cluster_options(p)
    p.set_defaults(handler=run_produce)


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


def _json_object(line: bytes, number: int) -> dict:
    """A typed topic takes one JSON object per line (checked against its schema by the producer)."""
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise CliError(f"line {number} is not JSON (the topic is typed: one JSON object per line): {exc}") from None
    if not isinstance(value, dict):
        raise CliError(f"line {number} is not a JSON object (the topic is typed)")
    return value


class _Deliveries:
    """Which lines were delivered, and which were not (lines are numbered from 1). Futures are
    looked at in the order they were sent, every ``_CHECK_EVERY`` lines and at the end."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed: list[tuple[int, bytes, BaseException]] = []
        self._pending: collections.deque[tuple[int, bytes, Any]] = collections.deque()

    def track(self, future: Any, number: int, line: bytes) -> None:
        self.sent += 1
        self._pending.append((number, line[:_QUOTED_BYTES], future))
        if self.sent % _CHECK_EVERY == 0:
            self.settle(wait=False)

    def settle(self, wait: bool) -> None:
        """Note the outcome of the sent lines that are done (``wait``: of every one)."""
        pending = self._pending
        while pending and (wait or pending[0][2].done()):
            number, head, future = pending.popleft()
            try:
                future.result()
            except Exception as exc:  # this line was not delivered
                self.failed.append((number, head, exc))


def _undelivered(error: BaseException) -> str:
    """How a line that failed after ``send()`` is reported: refused (its record is invalid: a
    typed value its topic's schema refuses...) or not delivered (anything else)."""
    if isinstance(error, InvalidRecord):
        return f"was refused: {error}"
    return f"was not delivered: {error}"


def _line_error(number: int, head: bytes, problem: str) -> str:
    return f"line {number} ({head!r}{'...' if len(head) >= _QUOTED_BYTES else ''}) {problem}"


def run_produce(args: argparse.Namespace) -> int:
    from sparklog.client.producer import Producer

    separator = None
    if args.key_separator is not None:
        if args.key_separator == "":
            raise CliError("--key-separator must not be empty")
        separator = args.key_separator.encode()
    if args.partition is not None and args.partition < 0:
        raise CliError(f"--partition must be >= 0, got {args.partition}")

    client = cluster_client(args)
    try:  # fail before reading input if the topic is wrong or no partition can take a line
        meta = client.topic(args.topic)
        partitions = meta.partitions
        max_bytes = meta.config.max_message_bytes
        typed = client.value_schema(args.topic) is not None
        if args.partition is not None and args.partition >= partitions:
            raise CliError(
                f"topic {args.topic!r} has {partitions} partition(s); partition {args.partition} does not exist"
            )
        _require_a_live_leader(client, args.topic, range(partitions) if args.partition is None else [args.partition])
    finally:
        client.close()

    producer = Producer(
        zookeeper=args.zookeeper,
        acks=args.acks,
        delivery_timeout_s=DELIVERY_TIMEOUT_S,
        bootstrap_servers=bootstrap_servers(args),
        config=client_config(args),
    )
    deliveries = _Deliveries()
    refused: list[str] = []  # with --ignore-errors: lines refused before sending
    stopped_at: str | None = None  # the reason the run stopped early
    try:
        send = producer.send
        topic, partition = args.topic, args.partition
        for number, line in enumerate(_lines(sys.stdin.buffer), start=1):
            if deliveries.failed and not args.ignore_errors:
                break  # an earlier line was not delivered: send nothing more
            try:
                key = None
                if separator is not None:
                    key, sep, line = line.partition(separator)
                    if not sep:
                        raise CliError(_line_error(number, line, f"has no key separator {args.key_separator!r}"))
                if typed:
                    value: object = _json_object(line, number)
                else:
                    value = line
                    size = len(line) + len(key or b"") + RECORD_OVERHEAD_BYTES
                    if size > max_bytes:
                        raise CliError(
                            _line_error(
                                number,
                                line[:_QUOTED_BYTES],
                                f"is {size} bytes as a record, larger than the topic's max.message.bytes={max_bytes}",
                            )
                        )
            except CliError as exc:
                if not args.ignore_errors:
                    stopped_at = str(exc)
                    break
                refused.append(str(exc))
                print(f"sparklog: error: {exc}", file=sys.stderr)
                continue
            try:
                future = send(topic, value, key=key, partition=partition)
            except SparklogError as exc:  # refused before sending (a typed value its schema refuses...)
                if not args.ignore_errors:
                    stopped_at = _line_error(number, line[:_QUOTED_BYTES], f"cannot be sent: {exc}")
                    break
                refused.append(str(exc))
                print(f"sparklog: error: {_line_error(number, line[:_QUOTED_BYTES], str(exc))}", file=sys.stderr)
                continue
            deliveries.track(future, number, line)
        producer.flush()
        deliveries.settle(wait=True)
    finally:
        producer.close()
    failed = deliveries.failed
    delivered = deliveries.sent - len(failed)
    if args.ignore_errors:
        for number, head, error in failed:
            print(f"sparklog: error: {_line_error(number, head, _undelivered(error))}", file=sys.stderr)
    elif failed:
        number, head, error = failed[0]
        after = sum(1 for f in failed if f[0] > number)
        stopped_at = _line_error(number, head, _undelivered(error))
        stopped_at += f"; {delivered} line(s) were delivered"
        if deliveries.sent - number > 0:
            stopped_at += (
                f", {deliveries.sent - number} line(s) after it had already been sent when its failure came back"
                f" ({after} of them not delivered either)"
            )
        stopped_at += "; no further line was sent"
    elif stopped_at is not None:
        stopped_at += f"; {delivered} line(s) before it were delivered, none after it was sent"
    if stopped_at is not None:
        raise CliError(stopped_at)
    lost = len(failed) + len(refused)
    if not args.quiet:
        print(
            f"produced {delivered} record(s) to {args.topic}" + (f"; {lost} line(s) lost" if lost else ""),
            file=sys.stderr,
        )
    return 1 if lost else 0
