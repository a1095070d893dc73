"""The ``sparklog`` command line: one sub-command per job, errors as one clear line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence

from sparklog.errors import SparklogError

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


class CliError(Exception):
    """A user error detected by the CLI itself (bad option combination, missing file, ...)."""


def _add_bench(sub: argparse._SubParsersAction) -> None:
    from sparklog.bench import SCENARIOS

    p = sub.add_parser("bench", help="run a benchmark scenario and print its figures")
    p.add_argument("scenario", choices=sorted(SCENARIOS), help="what to measure")
    p.add_argument("--records", type=int, default=10_000_000, help="records to write (default 10M)")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per value (default 100)")
    p.add_argument("--batch-records", type=int, default=10_000, help="records per batch (default 10k)")
    p.add_argument("--compression", choices=["none", "lz4", "zstd"], default="none")
    p.add_argument("--repeat", type=int, default=3, help="measured runs; medians are reported")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    from sparklog.bench import SCENARIOS

    for name in ("records", "value_bytes", "batch_records", "repeat"):
        if getattr(args, name) <= 0:
            raise CliError(f"--{name.replace('_', '-')} must be positive")
    result = SCENARIOS[args.scenario](
        records=args.records,
        value_bytes=args.value_bytes,
        batch_records=args.batch_records,
        compression=args.compression,
        repeat=args.repeat,
    )
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0


def _add_zookeeper(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zookeeper", help="run the embedded standalone ZooKeeper in the foreground")
    p.add_argument("--port", type=int, default=2181)
    p.add_argument("--data-dir", default=os.path.join("data", "zookeeper"))
    p.set_defaults(handler=_run_zookeeper)


def _run_zookeeper(args: argparse.Namespace) -> int:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(args.data_dir, port=args.port)
    server.start()
    print(
        f"zookeeper listening on {server.connect_string} (data in {args.data_dir}); Ctrl-C stops it",
        flush=True,
    )
    _wait_for_signal()
    server.stop()
    return 0


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    received: list[int] = []

    def handle(signum: int, _frame: object) -> None:
        received.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)
    while not received:
        signal.pause()


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_zookeeper, _add_bench]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description="A Kafka-style commit log that Spark reads natively.")
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get("SPARKLOG_ZOOKEEPER", DEFAULT_ZOOKEEPER),
        help="ZooKeeper HOST:PORT[/chroot] (env SPARKLOG_ZOOKEEPER, default %(default)s)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparklog`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (SparklogError, CliError) as exc:
        print(f"sparklog: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print(f"sparklog: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
