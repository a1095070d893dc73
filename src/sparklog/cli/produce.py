"""``sparklog produce TOPIC``: one record per line of standard input."""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Iterable
from typing import BinaryIO

from sparklog.cli.common import (
    CliError,
    add_cluster_options,
    bootstrap_servers,
    client_config,
    cluster_client,
)
from sparklog.client.cluster_client import ClusterClient
from sparklog.errors import BrokerNotAvailable, SparklogError

# How many sends between two checks of the acknowledgements so far (a failure stops reading early).
_CHECK_EVERY = 1000

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
        "Prints nothing on standard output; on success the number of records sent goes to standard "
        "error (unless --quiet).",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    p.add_argument("--partition", type=int, metavar="P", help="send every record to partition P")
    p.add_argument("--acks", choices=["0", "1", "all"], default="1", help="acknowledgement level (default 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="do not print the count on standard error")
    add_cluster_options(p)
    p.set_defaults(handler=run_produce)


def _lines(stream: BinaryIO) -> collections.abc.Iterator[bytes]:
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
        partitions = client.topic(args.topic).partitions
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
    pending: collections.deque = collections.deque()
    sent = 0
    try:
        send = producer.send
        topic, partition = args.topic, args.partition
        for number, line in enumerate(_lines(sys.stdin.buffer), start=1):
            key = None
            if separator is not None:
                key, sep, line = line.partition(separator)
                if not sep:
                    raise CliError(f"line {number} has no key separator {args.key_separator!r}")
            value = _json_object(line, number) if typed else line
            pending.append(send(topic, value, key=key, partition=partition))
            sent += 1
            if sent % _CHECK_EVERY == 0:
                while pending and pending[0].done():
                    pending.popleft().result()  # raises the failure of an earlier batch
        producer.flush()
        for future in pending:
            future.result()
    finally:
        producer.close()
    if not args.quiet:
        print(f"produced {sent} record(s) to {args.topic}", file=sys.stderr)
    return 0
