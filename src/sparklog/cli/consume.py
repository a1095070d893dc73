"""``sparklog consume TOPIC``: print records, optionally as a consumer group committing its offsets."""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
import time
from typing import Any

from sparklog.cli.common import (
    CLI_RETRY_TIMEOUT_S,
    CliError,
    add_cluster_options,
    bootstrap_servers,
    client_config,
    cluster_client,
    parse_time,
)

# With a group, committed offsets are written at most this often while records flow (and at exit).
COMMIT_INTERVAL_S = 1.0
POLL_TIMEOUT_S = 1.0

DESCRIPTION = """\
Prints the records of TOPIC as they arrive, until Ctrl-C (or SIGTERM), --max-messages records, or
--timeout-ms without a record. Where to start: the group's committed offsets (with --group), else
the log end (only new records); --from-beginning starts at the log start when there is no committed
offset; --offset N (with --partition) or --from-time ISO start exactly there.

--format text (default) prints each value as its raw bytes followed by a newline ("null" for a
tombstone; a typed value as JSON); with --print-key, "key<SEP>value" where SEP is --key-separator
(a tab by default) and a missing key is "null". This is the format "sparklog produce" reads.

--format json prints one JSON object per line: {"topic", "partition", "offset", "timestamp" (epoch
milliseconds, UTC), "key", "value", "headers"}. key and value are UTF-8 text, {"base64": "..."} when
the bytes are not UTF-8, or null; headers is an object of name to value (same encoding), {} if none.

With --group, the offsets of the records printed (the next offset to read, per partition) are
committed after they were written out: every second while records flow, and at exit. They are kept
in ZooKeeper, written there directly with --zookeeper and through a broker with --bootstrap-server.
The number of records printed goes to standard error at exit (unless --quiet)."""


def add_consume(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", metavar="G", help="consume as a member of group G and commit its offsets")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the log start when there is no committed offset"
    )
    start.add_argument("--offset", metavar="N", help="start at offset N of --partition (or 'earliest' / 'latest')")
    start.add_argument(
        "--from-time",
        metavar="ISO",
        help="start at the first record at or after an ISO 8601 time (no offset = UTC) or epoch milliseconds",
    )
    p.add_argument("--partition", type=int, metavar="P", help="read only partition P")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS milliseconds without a record")
    p.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    p.add_argument("--print-key", action="store_true", help="text format: print key<SEP>value")
    p.add_argument("--key-separator", default="\t", metavar="SEP", help="text format: key separator (default tab)")
    p.add_argument("--quiet", "-q", action="store_true", help="do not print the count on standard error")
    add_cluster_options(p)
    p.set_defaults(handler=run_consume)


# ----------------------------------------------------------------- formatting
def _json_bytes(data: Any) -> Any:
    if data is None:
        return None
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode("ascii")}
    return data  # a typed (struct) value: already JSON-like


def _text_bytes(data: Any) -> bytes:
    if data is None:
        return b"null"
    if isinstance(data, bytes):
        return data
    return json.dumps(data, default=str, ensure_ascii=False).encode()


def format_batch(batch: Any, fmt: str, print_key: bool = False, separator: bytes = b"\t") -> bytes:
    """The output of one fetched record batch (columns topic, partition, offset, timestamp, key,
    value, headers) in the given format, newline-terminated lines."""
    values = batch.column("value").to_pylist()
    if fmt == "text":
        if print_key:
            keys = batch.column("key").to_pylist()
            lines = [_text_bytes(k) + separator + _text_bytes(v) for k, v in zip(keys, values, strict=True)]
        else:
            lines = [_text_bytes(v) for v in values]
        return b"\n".join(lines) + b"\n" if lines else b""
    import pyarrow as pa

    keys = batch.column("key").to_pylist()
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    headers = batch.column("headers").to_pylist() if "headers" in batch.schema.names else [None] * len(values)
    out = []
    for i, value in enumerate(values):
        record = {
            "topic": topics[i],
            "partition": partitions[i],
            "offset": offsets[i],
            "timestamp": timestamps[i],
            "key": _json_bytes(keys[i]),
            "value": _json_bytes(value),
            "headers": {h["key"]: _json_bytes(h["value"]) for h in headers[i] or ()},
        }
        out.append(json.dumps(record, ensure_ascii=False, default=str))
    return ("\n".join(out) + "\n").encode() if out else b""


# ----------------------------------------------------------------- the command
def _check_options(args: argparse.Namespace) -> None:
    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition (an offset belongs to one partition)")
    if args.partition is not None and args.partition < 0:
        raise CliError(f"--partition must be >= 0, got {args.partition}")
    if args.max_messages is not None and args.max_messages <= 0:
        raise CliError(f"--max-messages must be positive, got {args.max_messages}")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError(f"--timeout-ms must be >= 0, got {args.timeout_ms}")
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            args.offset = int(args.offset)
        except ValueError:
            raise CliError(f"--offset expects a number, 'earliest' or 'latest', got {args.offset!r}") from None
        if args.offset < 0:
            raise CliError(f"--offset must be >= 0, got {args.offset}")
    if args.from_time is not None:
        args.from_time = parse_time(args.from_time, "--from-time")
    if args.print_key and not args.key_separator:
        raise CliError("--key-separator must not be empty")


class _Stop(Exception):
    """Ctrl-C or SIGTERM: stop consuming."""


def run_consume(args: argparse.Namespace) -> int:
    from sparklog.client.consumer import Consumer

    _check_options(args)
    client = cluster_client(args)
    try:  # a clear error for an unknown topic or partition
        partitions = client.topic(args.topic).partitions
    finally:
        client.close()
    if args.partition is not None and args.partition >= partitions:
        raise CliError(f"topic {args.topic!r} has {partitions} partition(s); partition {args.partition} does not exist")

    printer = _Printer(args)

    def on_signal(_signum: int, _frame: object) -> None:
        # Inside the loop the first signal only asks it to stop after the batch it is printing (so the
        # count and the committed offsets match what was written); a second one, or one before the
        # loop runs (joining a group may wait), interrupts at once.
        if printer.looping and not printer.stop_requested:
            printer.stop_requested = True
            if consumer is not None:
                consumer.wakeup()  # a poll waiting for records returns now
            return
        raise _Stop

    consumer: Consumer | None = None
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        consumer = Consumer(
            args.topic,
            group=args.group,
            zookeeper=args.zookeeper,
            bootstrap_servers=bootstrap_servers(args),
            config=client_config(args),
            auto_offset_reset="earliest" if args.from_beginning else "latest",
            partitions=None if args.partition is None else [args.partition],
            retry_timeout_s=CLI_RETRY_TIMEOUT_S,
        )
        if args.offset == "earliest":
            consumer.seek_to_beginning()
        elif args.offset == "latest":
            consumer.seek_to_end()
        elif args.offset is not None:
            consumer.seek(args.partition, args.offset, topic=args.topic)
        elif args.from_time is not None:
            consumer.seek_to_time(args.from_time)
        printer.run(consumer)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if consumer is not None:
            consumer.close()
    if not args.quiet:
        print(f"Processed a total of {printer.printed} messages", file=sys.stderr)
    return 0


class _Printer:
    """The consume loop: poll, print, and (with a group) commit what was written out."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.printed = 0
        self.looping = False
        self.stop_requested = False
        self.group = args.group is not None
        # With a group: the next offset to commit per partition, and what ZooKeeper holds already.
        self.positions: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.stalled: set[tuple[str, int]] = set()  # reported as unreadable, not read since
        self.assigned: set[tuple[str, int]] = set()  # the group's partitions of this member

    def _follow_assignment(self, consumer: Any) -> None:
        assigned = consumer.assignment()
        for tp in list(self.positions):
            if tp not in assigned:  # moved to another member: not ours to commit any more
                self.positions.pop(tp)
                self.committed.pop(tp, None)
        known = consumer.positions()  # one whose leader is unreachable has none until it is read
        for tp in assigned:
            if tp not in self.positions and tp in known:
                self.positions[tp] = known[tp]
        self.assigned = set(assigned)

    def _report_stalled(self, consumer: Any) -> None:
        """A warning for each partition that became unreadable (the others are read on) and a note
        when it is read again: Kafka's console consumer keeps reading what it can."""
        stalled = consumer.stalled()
        for (topic, p), error in sorted(stalled.items()):
            if (topic, p) not in self.stalled:
                print(
                    f"sparklog: warning: {topic}-{p} cannot be read ({error}); reading the other partitions "
                    "and retrying it",
                    file=sys.stderr,
                )
        for topic, p in sorted(self.stalled - set(stalled)):
            print(f"sparklog: {topic}-{p} is read again", file=sys.stderr)
        self.stalled = set(stalled)

    def _commit(self, consumer: Any) -> None:
        changed = {tp: off for tp, off in self.positions.items() if self.committed.get(tp) != off}
        if changed:
            consumer.commit(changed)
            self.committed.update(changed)

    def run(self, consumer: Any) -> None:
        args = self.args
        out = sys.stdout.buffer
        separator = args.key_separator.encode()
        limit = args.max_messages
        timeout_s = None if args.timeout_ms is None else args.timeout_ms / 1000
        last_commit = last_record = time.monotonic()
        self.looping = True
        try:
            if self.group:
                self._follow_assignment(consumer)
            while (limit is None or self.printed < limit) and not self.stop_requested:
                wait = POLL_TIMEOUT_S
                if timeout_s is not None:
                    left = timeout_s - (time.monotonic() - last_record)
                    if left <= 0:
                        break
                    wait = min(wait, left)
                batches = consumer.poll_batches(wait)
                self._report_stalled(consumer)
                if self.group:
                    self._follow_assignment(consumer)
                for batch in batches:
                    if limit is not None and self.printed + batch.num_rows > limit:
                        batch = batch.slice(0, limit - self.printed)
                    out.write(format_batch(batch, args.format, args.print_key, separator))
                    out.flush()  # written out before it counts (and before it is committed)
                    self.printed += batch.num_rows
                    tp = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
                    if tp in self.assigned:
                        self.positions[tp] = batch.column("offset")[-1].as_py() + 1
                    if (limit is not None and self.printed >= limit) or self.stop_requested:
                        break
                if batches:
                    last_record = time.monotonic()
                if self.group and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    self._commit(consumer)
                    last_commit = time.monotonic()
        finally:
            self.looping = False
            if self.group:
                self._commit(consumer)  # only what was written out: at least once
